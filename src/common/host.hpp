// Which host this process runs on, as the ranks of one communicator compare
// it: the shared-memory segment (shm/) and the topology (coll/topology.hpp)
// both ask.
#pragma once

#include <cstdint>
#include <string>

namespace chorus::host {

// The same value exactly for processes that share a host: a hash of the
// host name, the boot id (/proc/sys/kernel/random/boot_id: two machines
// given one host name still differ) and the network and pid namespaces
// (pids must mean the same process to every rank; a network namespace is a
// host of its own, as in scripts/netlab).
std::uint64_t identity();

// gethostname(), for messages ("rank 2 on lab1").
std::string name();

}  // namespace chorus::host

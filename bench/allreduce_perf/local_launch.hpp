// allreduce_perf --np N: starts N copies of this program as the ranks of one
// job on this machine, meeting at a store this process serves on loopback.
// Children die with the launcher (PR_SET_PDEATHSIG); Ctrl-C and SIGTERM are
// passed on; a child that crashes or fails is reported by rank and signal or
// status, and the others are stopped.
#pragma once

#include <string>
#include <vector>

namespace chorus::perf {

// Runs `argv` (argv[0] an executable path) as `ranks` ranks; returns the exit
// status for the launcher: 0 when every rank exited 0, else that of the
// first rank to fail (1 for a rank killed by a signal).
int launch_local(const std::vector<std::string>& argv, int ranks);

}  // namespace chorus::perf

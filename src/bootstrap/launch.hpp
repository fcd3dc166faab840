// How a process learns its place in the job, and how a transport gets
// connected through the store.
#pragma once

#include "bootstrap/store.hpp"
#include "transport/transport.hpp"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace chorus::bootstrap {

// The most ranks a job may have (the UCX transport's tags hold a rank in 23
// bits); more is an invalid_argument at creation, not a failed allocation.
inline constexpr int kMaxRanks = 1 << 23;

struct LaunchInfo {
  int rank = 0;
  int size = 1;
  std::string store;   // URL for open_store()
  std::string source;  // which launcher's variables were used, for messages
};

using EnvLookup = std::function<std::optional<std::string>(const char* name)>;

// Rank, size and store from the environment, first match wins:
//   CHORUS_RANK, CHORUS_SIZE, CHORUS_STORE
//   torchrun: RANK, WORLD_SIZE (store tcp://MASTER_ADDR:MASTER_PORT+1, since
//             torch's own store has MASTER_PORT)
//   Open MPI: OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE
//   Hydra/PMI: PMI_RANK, PMI_SIZE
//   Slurm: SLURM_PROCID, SLURM_NTASKS
// CHORUS_STORE always wins for the store; without it the launchers other
// than torchrun need MASTER_ADDR/MASTER_PORT, except that Open MPI on one
// host gets a file store named after its job; a job of one rank needs no
// store (store is then empty). Missing or contradictory
// variables throw chorus::Error listing what was found and what is needed.
LaunchInfo launch_info_from_env(const EnvLookup& env);
LaunchInfo launch_info_from_env();

// CHORUS_TIMEOUT in seconds (default 300): the deadline of every wait.
double timeout_seconds();
// `seconds` when it is a number in (0, transport::kMaxTimeoutSeconds], else
// an invalid_argument Error naming `what` (inf, NaN, 1e300 and 0 all are).
double checked_timeout(double seconds, std::string_view what);

enum class TransportKind { automatic, ucx, tcp, local };
// CHORUS_TRANSPORT=auto|ucx|tcp|local (default auto). `local` means ranks
// that are threads of one process: from the environment, that is a job of
// one rank; groups of threads are built in-process with LocalFabric.
TransportKind transport_kind_from_env();
// "auto" (or empty), "ucx", "tcp", "local"; `what` names the setting in errors.
TransportKind parse_transport_kind(const std::string& value, std::string_view what);
std::string_view to_string(TransportKind kind);

// Gathers one blob from every rank (collective): called by every rank with
// its own blob, returns all ranks' blobs in rank order.
using BlobAllgather =
    std::function<std::vector<transport::AddressBlob>(const transport::AddressBlob& mine)>;

// The store as a BlobAllgather: each call publishes this rank's blob under
// `key_prefix`/<call number>/<rank> and fetches every rank's in one round
// trip. A timeout names the ranks that never published.
BlobAllgather store_allgather(Store& store, const std::string& key_prefix, int rank, int size,
                              transport::Deadline deadline);

// This rank's transport of `kind` (ucx or tcp), not yet connected: for
// callers that move the addresses themselves (Communicator::split).
std::unique_ptr<transport::Transport> make_transport(TransportKind kind, int rank, int size);

// Creates this rank's transport, gathers every rank's address with
// `allgather` (the store, or the caller's own collective, e.g. MPI's) and
// connects. First every rank tells the kind it asks for, how it would
// connect (lazily or not) and whether it could start UCX (one all-gather):
// ranks asking for different kinds, or connecting the transport used
// differently, all throw Error(mismatched_collective) naming it; with
// `automatic`, UCX is used when every rank could start it and TCP
// otherwise, with the reason logged; with `ucx`, a rank that cannot start
// it fails every rank.
std::unique_ptr<transport::Transport> connect_transport(TransportKind kind, int rank, int size,
                                                        const BlobAllgather& allgather,
                                                        transport::Deadline deadline);
// The same, meeting at `store`, with O(1) store work per rank where it can:
// the agreement counts the ranks asking for each kind, connecting each
// lazily and unable to start UCX, and a
// transport that connects lazily (beyond 64 ranks) connects with
// connect_looking_up(). Otherwise every rank fetches every address.
std::unique_ptr<transport::Transport> connect_transport(TransportKind kind, int rank, int size,
                                                        std::shared_ptr<Store> store,
                                                        const std::string& key_prefix,
                                                        transport::Deadline deadline);

// Connects `t` (made, not yet connected, connects_lazily()) at `store`: every
// rank publishes its address under `key_prefix`, waits until all have (a
// counter: O(1) store work per rank), fetches rank 0's (the link key), parks
// its store connection (Store::park) and looks the others up when their
// links are first wanted. So a rank fetches the addresses of the peers it
// talks to (2 for a ring), not all p, and the store serves O(p) bytes for
// the job where an all-gather of addresses serves O(p^2). `store` is kept
// for those lookups as long as the transport lives.
void connect_looking_up(transport::Transport& t, std::shared_ptr<Store> store,
                        const std::string& key_prefix, transport::Deadline deadline);

}  // namespace chorus::bootstrap

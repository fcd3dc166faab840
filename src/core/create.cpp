// Making a communicator: from the environment, a store, or the caller's own
// all-gather (MPI, a framework's process group).
#include "core/create.hpp"

#include "bootstrap/launch.hpp"
#include "core/engine.hpp"
#include "transport/local/local_transport.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>

namespace chorus {

namespace {
void check_rank(int rank, int size) {
  if (size > bootstrap::kMaxRanks)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("size {} is more ranks than Chorus supports ({})", size,
                            bootstrap::kMaxRanks));
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("rank {} of size {}: need size >= 1 and 0 <= rank < size", rank, size));
}
}  // namespace

Communicator Communicator::from_env(const Options& options) {
  const auto info = bootstrap::launch_info_from_env();
  return connect(info.rank, info.size, info.store, options);
}

Communicator Communicator::connect(int rank, int size, const std::string& store_url,
                                   const Options& options) {
  check_rank(rank, size);
  const double timeout = options.timeout
                             ? bootstrap::checked_timeout(options.timeout->count(), "Options::timeout")
                             : bootstrap::timeout_seconds();
  const auto deadline = transport::deadline_after(timeout);
  const auto kind = options.transport.empty()
                        ? bootstrap::transport_kind_from_env()
                        : bootstrap::parse_transport_kind(options.transport, "Options::transport");
  // Each communicator of a process gets its own keys; every rank creates its
  // communicators in the same order, so the numbers agree.
  static std::atomic<int> generation{0};
  const std::string prefix = fmt::format("chorus/{}", generation.fetch_add(1));
  std::shared_ptr<bootstrap::Store> store;
  std::unique_ptr<transport::Transport> transport;
  if (size == 1) {  // a job of one needs no store and no network
    transport = std::make_unique<transport::LocalTransport>(transport::LocalFabric::create(1), 0);
  } else {
    store = bootstrap::open_store(store_url, rank == 0, deadline);
    transport = bootstrap::connect_transport(kind, rank, size, store, prefix, deadline);
  }
  // Rank 0 may be serving the store: it keeps it until the end (its server
  // waits for the clients to leave, which they do now, unless a transport
  // that looks addresses up keeps its connection, parked). The other ranks
  // need it no more, unless their transport holds it for those lookups.
  if (rank != 0) store.reset();
  return make_communicator(std::move(transport), std::move(store), options);
}

// Blobs of any length over a fixed-size all-gather: lengths first, then
// every blob padded to the longest.
bootstrap::BlobAllgather blobs_over(const Communicator::Allgather& allgather, int size) {
  return [&allgather, size](const transport::AddressBlob& mine) {
    const auto p = static_cast<std::size_t>(size);
    std::vector<std::uint64_t> lengths(p);
    const std::uint64_t my_length = mine.size();
    allgather(&my_length, sizeof my_length, lengths.data());
    const std::uint64_t longest = *std::max_element(lengths.begin(), lengths.end());
    if (longest > (std::uint64_t{1} << 24))
      throw Error(ErrorCode::peer_failure,
                  fmt::format("address all-gather: a rank sent a {}-byte address", longest));
    std::vector<std::byte> padded(longest), all(longest * p);
    std::copy(mine.begin(), mine.end(), padded.begin());
    allgather(padded.data(), longest, all.data());
    std::vector<transport::AddressBlob> blobs(p);
    for (std::size_t r = 0; r < p; ++r) {
      const auto* begin = all.data() + r * longest;
      blobs[r].assign(begin, begin + lengths[r]);
    }
    return blobs;
  };
}


Communicator Communicator::connect(int rank, int size, const Allgather& allgather,
                                   const Options& options) {
  check_rank(rank, size);
  if (!allgather) throw Error(ErrorCode::invalid_argument, "connect: the all-gather is empty");
  const double timeout = options.timeout
                             ? bootstrap::checked_timeout(options.timeout->count(), "Options::timeout")
                             : bootstrap::timeout_seconds();
  const auto kind = options.transport.empty()
                        ? bootstrap::transport_kind_from_env()
                        : bootstrap::parse_transport_kind(options.transport, "Options::transport");
  std::unique_ptr<transport::Transport> transport;
  if (size == 1)
    transport = std::make_unique<transport::LocalTransport>(transport::LocalFabric::create(1), 0);
  else
    transport = bootstrap::connect_transport(kind, rank, size, blobs_over(allgather, size),
                                             transport::deadline_after(timeout));
  return make_communicator(std::move(transport), nullptr, options);
}

}  // namespace chorus

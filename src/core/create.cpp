// Making a communicator: from the environment, a store (Chorus's own or the
// caller's key-value store), or the caller's own all-gather (MPI, a framework).
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

// A framework's key-value store as the bootstrap's Store.
class CallerStore final : public bootstrap::Store {
 public:
  explicit CallerStore(Communicator::KeyValueStore kv) : kv_(std::move(kv)) {}
  void set(const std::string& key, std::span<const std::byte> value, transport::Deadline) override {
    kv_.set(key, value);
  }
  std::vector<bootstrap::Bytes> get(std::span<const std::string> keys,
                                    transport::Deadline deadline) override {
    std::vector<bootstrap::Bytes> values;
    values.reserve(keys.size());
    for (const auto& key : keys) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - transport::Clock::now());
      try {
        values.push_back(kv_.get(key, std::max(left, std::chrono::milliseconds(1))));
      } catch (const std::exception& e) {
        std::vector<std::string> missing;
        for (const auto& k : keys)
          if (!kv_.has(k)) missing.push_back(k);
        if (missing.empty()) throw;
        throw bootstrap::StoreTimeout(fmt::format("{}: {}", url(), e.what()), std::move(missing));
      }
    }
    return values;
  }
  std::int64_t add(const std::string& key, std::int64_t delta, transport::Deadline) override {
    return kv_.add(key, delta);
  }
  std::string url() const override { return "the caller's key-value store"; }

 private:
  Communicator::KeyValueStore kv_;
};

double timeout_of(const Options& options) {
  return options.timeout ? bootstrap::checked_timeout(options.timeout->count(), "Options::timeout")
                         : bootstrap::timeout_seconds();
}

bootstrap::TransportKind transport_of(const Options& options) {
  return options.transport.empty()
             ? bootstrap::transport_kind_from_env()
             : bootstrap::parse_transport_kind(options.transport, "Options::transport");
}

// Each communicator of a process gets its own keys; every rank creates its
// communicators in the same order, so the numbers agree.
std::string next_key_prefix() {
  static std::atomic<int> generation{0};
  return fmt::format("chorus/{}", generation.fetch_add(1));
}

std::unique_ptr<transport::Transport> single_rank_transport() {
  return std::make_unique<transport::LocalTransport>(transport::LocalFabric::create(1), 0);
}
}  // namespace

Communicator Communicator::from_env(const Options& options) {
  const auto info = bootstrap::launch_info_from_env();
  return connect(info.rank, info.size, info.store, options);
}

Communicator Communicator::connect(int rank, int size, const std::string& store_url,
                                   const Options& options) {
  check_rank(rank, size);
  const auto deadline = transport::deadline_after(timeout_of(options));
  const auto kind = transport_of(options);
  const std::string prefix = next_key_prefix();
  std::shared_ptr<bootstrap::Store> store;
  std::unique_ptr<transport::Transport> transport;
  if (size == 1) {  // a job of one needs no store and no network
    transport = single_rank_transport();
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

Communicator Communicator::connect(int rank, int size, KeyValueStore kv, const Options& options) {
  check_rank(rank, size);
  if (!kv.set || !kv.get || !kv.add || !kv.has)
    throw Error(ErrorCode::invalid_argument,
                "connect: the key-value store lacks one of set, get, add, has");
  const auto deadline = transport::deadline_after(timeout_of(options));
  std::unique_ptr<transport::Transport> transport;
  if (size == 1)
    transport = single_rank_transport();
  else
    // One communicator per store (torch gives each group a prefixed store
    // of its own), so the keys need no number: a process-wide count, as
    // for Chorus's own stores, would differ between the members of
    // subgroups that torch creates on their members only.
    transport = bootstrap::connect_transport(transport_of(options), rank, size,
                                             std::make_shared<CallerStore>(std::move(kv)),
                                             "chorus", deadline);
  return make_communicator(std::move(transport), nullptr, options);
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
  const double timeout = timeout_of(options);
  std::unique_ptr<transport::Transport> transport;
  if (size == 1)
    transport = single_rank_transport();
  else
    transport = bootstrap::connect_transport(transport_of(options), rank, size,
                                             blobs_over(allgather, size),
                                             transport::deadline_after(timeout));
  return make_communicator(std::move(transport), nullptr, options);
}

}  // namespace chorus

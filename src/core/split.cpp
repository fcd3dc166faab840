// split() and dup(): new communicators made through the parent's own
// collectives (no store), with connections of their own.
#include "core/create.hpp"
#include "core/engine.hpp"

#include "bootstrap/launch.hpp"
#include "transport/local/local_transport.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>

namespace chorus {

namespace {

// In-process ranks (the local transport) meet at a fabric: the new group's
// rank 0 makes it and publishes its number; the others find it here. Entries
// live only while split() runs.
class LocalFabricRegistry {
 public:
  static LocalFabricRegistry& instance() {
    static LocalFabricRegistry registry;
    return registry;
  }
  std::uint64_t add(std::shared_ptr<transport::LocalFabric> fabric) {
    std::lock_guard lock(mutex_);
    fabrics_[++last_] = std::move(fabric);
    return last_;
  }
  std::shared_ptr<transport::LocalFabric> find(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    const auto it = fabrics_.find(id);
    return it == fabrics_.end() ? nullptr : it->second;
  }
  void remove(std::uint64_t id) {
    std::lock_guard lock(mutex_);
    fabrics_.erase(id);
  }

 private:
  std::mutex mutex_;
  std::uint64_t last_ = 0;
  std::map<std::uint64_t, std::shared_ptr<transport::LocalFabric>> fabrics_;
};

}  // namespace

std::optional<Communicator> Communicator::split(int color, int key) {
  if (color < 0 && color != kNoColor)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("split: color {} is negative (kNoColor, -1, joins no communicator)", color));
  Impl& parent = *impl_;
  const int p = size(), me = rank();
  const auto ranks = static_cast<std::size_t>(p);
  // The parent's own collectives move everything: ordered and checked like
  // any call, and no store is involved.
  const Allgather over_parent = [this](const void* send, std::size_t bytes, void* recv) {
    allgather(send, recv, bytes, DataType::uint8);
  };

  // 1. Who joins whom: members of this rank's color, ordered by (key, rank).
  const std::int64_t mine[2] = {color, key};
  std::vector<std::int64_t> all(2 * ranks);
  allgather(mine, all.data(), 2, DataType::int64);
  std::vector<int> members;
  for (int j = 0; j < p && color >= 0; ++j)
    if (all[2 * static_cast<std::size_t>(j)] == color) members.push_back(j);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
    return all[2 * static_cast<std::size_t>(a) + 1] < all[2 * static_cast<std::size_t>(b) + 1];
  });
  const int new_size = static_cast<int>(members.size());
  const int new_rank = static_cast<int>(std::find(members.begin(), members.end(), me) - members.begin());

  // 2. This rank's new transport and its address, or why it has none. Every
  // parent rank takes part in every exchange, in or out of a group, so that
  // one rank's failure never leaves another waiting.
  const bool in_process = parent.transport->name() == "local";
  std::unique_ptr<transport::Transport> t;
  std::shared_ptr<transport::LocalFabric> fabric;
  std::uint64_t fabric_id = 0;
  std::string failure;
  transport::AddressBlob blob(1, std::byte{1});  // first byte: 1 ready, 0 failed (then the reason)
  try {
    if (color >= 0 && new_size == 1) {
      t = std::make_unique<transport::LocalTransport>(transport::LocalFabric::create(1), 0);
    } else if (color >= 0 && in_process) {
      if (new_rank == 0) {
        fabric = transport::LocalFabric::create(new_size);
        fabric_id = LocalFabricRegistry::instance().add(fabric);
        t = std::make_unique<transport::LocalTransport>(fabric, 0);
        const auto* id = reinterpret_cast<const std::byte*>(&fabric_id);
        blob.insert(blob.end(), id, id + sizeof fabric_id);
      }
    } else if (color >= 0) {
      t = bootstrap::make_transport(
          bootstrap::parse_transport_kind(std::string(parent.transport->name()), "transport"),
          new_rank, new_size);
      const auto address = t->address();
      blob.insert(blob.end(), address.begin(), address.end());
    }
  } catch (const std::exception& e) {
    failure = e.what();
    blob.assign(1, std::byte{0});
    blob.insert(blob.end(), reinterpret_cast<const std::byte*>(failure.data()),
                reinterpret_cast<const std::byte*>(failure.data() + failure.size()));
  }
  struct ForgetFabric {
    std::uint64_t id;
    ~ForgetFabric() {
      if (id) LocalFabricRegistry::instance().remove(id);
    }
  } forget{fabric_id};
  const auto blobs = blobs_over(over_parent, p)(blob);

  // 3. Connect within the group, unless one of its members already failed.
  for (int m : members) {
    const auto& b = blobs[static_cast<std::size_t>(m)];
    if (failure.empty() && (b.empty() || b[0] != std::byte{1}))
      failure = fmt::format("rank {} could not make its transport: {}", m,
                            std::string(reinterpret_cast<const char*>(b.data()) + (b.empty() ? 0 : 1),
                                        b.size() - (b.empty() ? 0 : 1)));
  }
  if (failure.empty() && new_size > 1) {
    try {
      if (in_process) {
        if (new_rank != 0) {
          const auto& leader = blobs[static_cast<std::size_t>(members[0])];
          std::uint64_t id = 0;
          if (leader.size() == 1 + sizeof id) std::memcpy(&id, leader.data() + 1, sizeof id);
          fabric = LocalFabricRegistry::instance().find(id);
          if (!fabric) throw Error(ErrorCode::internal, "the group's in-process fabric is gone");
          t = std::make_unique<transport::LocalTransport>(fabric, new_rank);
        }
      } else {
        std::vector<transport::AddressBlob> addresses;
        for (int m : members) {
          const auto& b = blobs[static_cast<std::size_t>(m)];
          addresses.emplace_back(b.begin() + 1, b.end());
        }
        t->connect(addresses, transport::deadline_after(parent.timeout_seconds));
      }
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }

  // 4. Every rank says whether it is ready; a group with a failed member
  // fails on all its members, naming it.
  const std::int32_t ready = failure.empty() ? 1 : 0;
  std::vector<std::int32_t> readiness(ranks);
  allgather(&ready, readiness.data(), 1, DataType::int32);
  for (int m : members)
    if (failure.empty() && readiness[static_cast<std::size_t>(m)] == 0)
      failure = fmt::format("rank {} could not connect", m);
  if (!failure.empty())
    throw Error(ErrorCode::transport_error,
                fmt::format("split(color={}, key={}) on rank {}: {}", color, key, me, failure));
  if (color < 0) return std::nullopt;

  const coll::CostModel* same_size_model = new_size == p ? &parent.cost_model() : nullptr;
  return Communicator(
      std::make_unique<Impl>(std::move(t), nullptr, parent.options, same_size_model, true));
}

Communicator Communicator::dup() { return std::move(*split(0, rank())); }

}  // namespace chorus

#include "coll/topology.hpp"

#include "common/host.hpp"

#include <chorus/error.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <functional>
#include <map>

namespace chorus::coll {

Topology Topology::single_host(int size) {
  return Topology(std::vector<int>(static_cast<std::size_t>(size), 0));
}

Topology::Topology(const std::vector<int>& host_of_rank, std::vector<std::string> names)
    : host_of_(host_of_rank.size()), local_rank_(host_of_rank.size()) {
  std::map<int, int> renumbered;  // given number -> number by lowest rank
  for (std::size_t r = 0; r < host_of_rank.size(); ++r) {
    const auto [it, added] =
        renumbered.emplace(host_of_rank[r], static_cast<int>(renumbered.size()));
    if (added) members_.emplace_back();
    host_of_[r] = it->second;
    local_rank_[r] = static_cast<int>(members_[static_cast<std::size_t>(it->second)].size());
    members_[static_cast<std::size_t>(it->second)].push_back(static_cast<int>(r));
  }
  names_ = std::move(names);
  names_.resize(members_.size());
  for (std::size_t h = 0; h < names_.size(); ++h)
    if (names_[h].empty()) names_[h] = fmt::format("host {}", h);
  for (const auto& m : members_) uniform_ = uniform_ && m.size() == members_[0].size();
}

std::vector<int> Topology::peers_across_hosts(int local_rank) const {
  std::vector<int> peers;
  for (const auto& m : members_) peers.push_back(m[static_cast<std::size_t>(local_rank)]);
  return peers;
}

std::vector<int> Topology::host_order() const {
  std::vector<int> order;
  for (const auto& ranks : members_) order.insert(order.end(), ranks.begin(), ranks.end());
  return order;
}

int Topology::ring_edges_leaving_a_host() const {
  std::vector<int> leaving(members_.size());
  for (int r = 0; r < size(); ++r)
    if (host_of(r) != host_of((r + 1) % size())) ++leaving[static_cast<std::size_t>(host_of(r))];
  return *std::max_element(leaving.begin(), leaving.end());
}

std::string Topology::describe() const {
  std::string shape =
      uniform_ ? fmt::format("{} host{} x {} rank{}", hosts(), hosts() == 1 ? "" : "s",
                             members_[0].size(), members_[0].size() == 1 ? "" : "s")
               : fmt::format("{} hosts of unequal rank counts", hosts());
  std::string list;
  for (int h = 0; h < hosts() && h < 16; ++h) {
    const auto& m = members_[static_cast<std::size_t>(h)];
    const bool consecutive = m.back() - m.front() + 1 == static_cast<int>(m.size());
    std::string ranks;
    if (consecutive && m.size() > 1) ranks = fmt::format("{}-{}", m.front(), m.back());
    else ranks = fmt::format("{}", fmt::join(m, ","));
    list += fmt::format("{}{}: {}", h == 0 ? "" : ", ", host_name(h), ranks);
  }
  if (hosts() > 16) list += fmt::format(", ... ({} more)", hosts() - 16);
  return fmt::format("{} ({})", shape, list);
}

std::string Topology::name_rank(int rank) const {
  if (rank < 0 || rank >= size()) return fmt::format("rank {}", rank);
  return fmt::format("rank {} (host {})", rank, host_name(host_of(rank)));
}

Topology parse_topology(std::string_view text, int size) {
  const auto bad = [&](const std::string& why) {
    return Error(ErrorCode::invalid_argument,
                 fmt::format("CHORUS_TOPOLOGY='{}': {} ({} ranks)", text, why, size));
  };
  const auto number = [&](std::string_view digits) {
    int value = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
    if (ec != std::errc{} || end != digits.data() + digits.size() || value < 0)
      throw bad(fmt::format("'{}' is not a number", digits));
    return value;
  };
  std::vector<int> host_of;
  if (const std::size_t x = text.find('x'); x != std::string_view::npos) {
    const int hosts = number(text.substr(0, x)), per_host = number(text.substr(x + 1));
    if (hosts < 1 || per_host < 1 || static_cast<long long>(hosts) * per_host != size)
      throw bad(fmt::format("{} hosts x {} ranks is not the communicator's size", hosts, per_host));
    for (int r = 0; r < size; ++r) host_of.push_back(r / per_host);
  } else {
    while (!text.empty() || host_of.empty()) {
      const std::size_t comma = text.find(',');
      host_of.push_back(number(text.substr(0, comma)));
      if (comma == std::string_view::npos) break;
      text.remove_prefix(comma + 1);
      if (text.empty()) throw bad("a trailing comma");
    }
    if (static_cast<int>(host_of.size()) != size)
      throw bad(fmt::format("{} host numbers given", host_of.size()));
  }
  return Topology(host_of);
}

Topology discover_topology(int rank, int size, const TopologyAllgather& allgather,
                           const std::optional<std::string>& override_text) {
  struct Record {
    std::uint64_t identity;
    std::uint64_t override_hash;  // of CHORUS_TOPOLOGY (0: unset): all must agree
    char name[48];
  };
  static_assert(sizeof(Record) == 64);
  std::uint64_t override_hash = 0;
  if (override_text) override_hash = std::hash<std::string>{}(*override_text) | 1;
  Record mine{host::identity(), override_hash, {}};
  const std::string name = host::name();
  std::strncpy(mine.name, name.c_str(), sizeof mine.name - 1);
  std::vector<Record> all(static_cast<std::size_t>(size));
  allgather(&mine, sizeof mine, all.data());
  for (int r = 0; r < size; ++r)
    if (all[static_cast<std::size_t>(r)].override_hash != override_hash)
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("rank {}: CHORUS_TOPOLOGY differs between this rank ({}) and rank "
                              "{}: every rank must be given the same one, or none",
                              rank, override_text ? "'" + *override_text + "'" : "unset", r));
  // Every rank parses the same text: all accept it, or all throw alike.
  if (override_text) return parse_topology(*override_text, size);
  std::map<std::uint64_t, int> by_identity;
  std::vector<int> host_of;
  std::vector<std::string> names;
  for (const Record& record : all) {
    const auto [it, added] = by_identity.emplace(record.identity, static_cast<int>(names.size()));
    if (added) names.emplace_back(record.name, strnlen(record.name, sizeof record.name));
    host_of.push_back(it->second);
  }
  return Topology(host_of, std::move(names));
}

}  // namespace chorus::coll

// Which ranks of a communicator share a host: what the hierarchical
// algorithms (coll/hierarchical.hpp) split their work by, and what failure
// messages name a peer's host with.
//
// Ranks find it at creation by an all-gather of their host identity
// (common/host.hpp: host name, boot id, network and pid namespaces), or take
// CHORUS_TOPOLOGY: "HxL" (H hosts of L consecutive ranks each) or one host
// number per rank ("0,0,1,1"), for tests on one machine. Hosts are numbered
// by their lowest rank: host 0 holds rank 0.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::coll {

class Topology {
 public:
  // Every rank on one host (what algorithm-only tests run with).
  static Topology single_host(int size);
  // From the host of each rank, in any numbering (renumbered by lowest rank).
  // `names`: each host's name by the new numbering (empty: "host <n>").
  Topology(const std::vector<int>& host_of_rank, std::vector<std::string> names = {});

  int size() const noexcept { return static_cast<int>(host_of_.size()); }
  int hosts() const noexcept { return static_cast<int>(members_.size()); }
  int host_of(int rank) const { return host_of_[static_cast<std::size_t>(rank)]; }
  // The ranks on `host`, ascending; a rank's local rank is its index there.
  const std::vector<int>& ranks_on(int host) const { return members_[static_cast<std::size_t>(host)]; }
  int local_rank(int rank) const { return local_rank_[static_cast<std::size_t>(rank)]; }
  int local_size(int rank) const { return static_cast<int>(ranks_on(host_of(rank)).size()); }
  // Every host has as many ranks as the others.
  bool uniform() const noexcept { return uniform_; }
  // The ranks with local rank `local_rank` on every host, by host (uniform only).
  std::vector<int> peers_across_hosts(int local_rank) const;
  // Every rank, host by host (each host's ranks in order): a ring in this
  // order leaves each host once.
  std::vector<int> host_order() const;
  // The most edges of the flat ring (rank r to rank r + 1 mod p) that leave
  // one host: how many times the busiest host link carries a flat ring's
  // traffic (1 when each host's ranks are consecutive).
  int ring_edges_leaving_a_host() const;
  const std::string& host_name(int host) const { return names_[static_cast<std::size_t>(host)]; }
  // "2 hosts x 2 ranks (lab0: 0-1, lab1: 2-3)", for the log.
  std::string describe() const;
  // "rank 2 (host lab1)".
  std::string name_rank(int rank) const;

 private:
  std::vector<int> host_of_, local_rank_;
  std::vector<std::vector<int>> members_;
  std::vector<std::string> names_;
  bool uniform_ = true;
};

// CHORUS_TOPOLOGY's text for `size` ranks; throws Error(invalid_argument)
// naming what is wrong.
Topology parse_topology(std::string_view text, int size);

// A fixed-size all-gather over the new communicator's transport.
using TopologyAllgather = std::function<void(const void* mine, std::size_t bytes, void* out)>;
// Collective: every rank calls it; all get the same answer. `override_text`
// (CHORUS_TOPOLOGY) replaces what the ranks report.
Topology discover_topology(int rank, int size, const TopologyAllgather& allgather,
                           const std::optional<std::string>& override_text);

}  // namespace chorus::coll

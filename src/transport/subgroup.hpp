// Some of a transport's ranks as a transport of their own: rank i of the
// subgroup is members[i] of the parent, and its messages are the parent's
// (same tags, same connections). The hierarchical algorithms run the flat
// ones on a host's ranks and on the ranks that share a local rank across
// hosts through it. Tags are not kept apart: two subgroups used in one call
// must not share a pair of ranks with the same tags, which holds for
// a host's ranks against the ranks of one local rank on other hosts (no
// pair is in both) and for phases that use distinct tag phases.
#pragma once

#include "transport/transport.hpp"

#include <chorus/error.hpp>

#include <algorithm>
#include <vector>

namespace chorus::transport {

class Subgroup final : public Transport {
 public:
  // `members` (parent ranks, distinct) holds the parent's own rank.
  Subgroup(Transport& parent, std::vector<int> members)
      : Transport(index_of(members, parent.rank()), static_cast<int>(members.size())),
        parent_(parent),
        members_(std::move(members)) {}

  std::string_view name() const noexcept override { return parent_.name(); }
  AddressBlob address() override { throw not_connectable(); }
  void connect(std::span<const AddressBlob>, Deadline) override { throw not_connectable(); }
  RequestPtr isend(int peer, Tag tag, const void* buf, std::size_t bytes) override {
    check_message("isend", peer, tag, buf, bytes);
    return parent_.isend(parent_rank(peer), tag, buf, bytes);
  }
  RequestPtr irecv(int peer, Tag tag, void* buf, std::size_t bytes) override {
    check_message("irecv", peer, tag, buf, bytes);
    return parent_.irecv(parent_rank(peer), tag, buf, bytes);
  }
  bool probe(int peer, Tag tag) override { return parent_.probe(parent_rank(peer), tag); }
  bool progress() override { return parent_.progress(); }
  void wait_for_activity(Deadline until) override { parent_.wait_for_activity(until); }
  void abort(const std::string& reason) override { parent_.abort(reason); }

  int parent_rank(int peer) const { return members_.at(static_cast<std::size_t>(peer)); }

 private:
  static int index_of(const std::vector<int>& members, int rank) {
    const auto it = std::find(members.begin(), members.end(), rank);
    if (it == members.end())
      throw Error(ErrorCode::internal, "a subgroup must hold the rank that makes it");
    return static_cast<int>(it - members.begin());
  }
  static Error not_connectable() {
    return Error(ErrorCode::internal, "a subgroup travels over its parent's connections");
  }

  Transport& parent_;
  std::vector<int> members_;
};

}  // namespace chorus::transport

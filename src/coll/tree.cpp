#include "coll/tree.hpp"

#include "coll/patterns/tree_reduce.hpp"
#include "common/copy.hpp"
#include "reduce/reduce.hpp"

#include <bit>
#include <cmath>
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>

namespace chorus::coll {
namespace {


// The in-order binary tree over positions 1..p.
int position_parent(int i, int p) {
  const int bit = i & -i;
  const int root = static_cast<int>(std::bit_floor(static_cast<unsigned>(p)));
  if (i == root) return 0;
  const int up = (i ^ bit) | (bit << 1);  // the neighbour i-bit or i+bit one level up
  return up <= p ? up : (i ^ bit);
}
std::vector<int> position_children(int i, int p) {
  const int bit = i & -i;
  std::vector<int> children;
  if (bit == 1) return children;
  children.push_back(i - bit / 2);
  for (int h = bit / 2; h >= 1; h /= 2)  // the right subtree may be cut short at p
    if (i + h <= p) {
      children.push_back(i + h);
      break;
    }
  return children;
}
int position_of(int which, int rank, int p) {
  if (which == 0) return rank + 1;
  return p % 2 == 0 ? p - rank : (rank + 1) % p + 1;
}
int rank_at(int which, int position, int p) {
  if (which == 0) return position - 1;
  return p % 2 == 0 ? p - position : (position - 2 + p) % p;
}

bool ready(const transport::RequestPtr& r) {
  if (!r || !r->done()) return false;
  if (const Error* e = r->error()) throw *e;
  return true;
}

// One tree's share of the buffer: up by the shared segmented reduction
// (patterns/tree_reduce.hpp), then the final segments down from the root,
// each forwarded to the children as soon as it arrives.
class TreeRun {
 public:
  TreeRun(const Collective& c, int which, const std::byte* in, std::byte* out, std::size_t elems,
          DataType type, ReduceOp op)
      : c_(c), which_(which), links_(tree_links(which, c.transport.rank(), c.transport.size())),
        in_(in), out_(out), esize_(size_of(type)), type_(type), op_(op),
        up_(c, {links_.parent, links_.children}, in, out, elems, type, op,
            [this](std::size_t s) { return tag(0, s); }, static_cast<unsigned>(which)) {
    down_recv_.resize(up_.segments());
  }
  TreeRun(const TreeRun&) = delete;  // up_'s tag function holds `this`
  TreeRun& operator=(const TreeRun&) = delete;

  bool done() const {
    if (down_done_ < up_.segments() || !up_.done()) return false;
    for (const auto& s : down_sends_)
      if (!s->done()) return false;
    return true;
  }

  // Does whatever can be done now; true if anything was.
  bool advance() {
    bool moved = up_.advance();
    const std::size_t segments = up_.segments();
    if (links_.parent < 0) {  // the root: each reduced segment is final
      for (; down_done_ < up_.segments_reduced(); ++down_done_) {
        const std::size_t s = down_done_;
        if (links_.children.empty() && in_ != out_) copy_memory(out_ + offset(s), in_ + offset(s), bytes(s));
        if (op_ == ReduceOp::avg)
          reduce::divide(out_ + offset(s), up_.length(s), type_, static_cast<std::size_t>(c_.transport.size()));
        send_down(s);
        moved = true;
      }
      return moved;
    }
    // Down: the final segment from the parent, into out, once our partial
    // sum of that segment (which may live there) has left.
    while (down_posted_ < segments && down_posted_ < down_done_ + kTreeWindow &&
           up_.sent(down_posted_)) {
      const std::size_t s = down_posted_++;
      down_recv_[s] = c_.transport.irecv(links_.parent, tag(1, s), out_ + offset(s), bytes(s));
      moved = true;
    }
    while (down_done_ < down_posted_ && ready(down_recv_[down_done_])) {
      send_down(down_done_++);
      moved = true;
    }
    return moved;
  }

  // A request this tree is waiting for, when it can do nothing else. Shared:
  // advance() may replace it in its slot while the caller still waits on it.
  transport::RequestPtr blocker() const {
    if (auto r = up_.blocker(); r && !r->done()) return r;
    if (down_done_ < down_posted_) return down_recv_[down_done_];
    for (const auto& s : down_sends_)
      if (!s->done()) return s;
    return nullptr;
  }

 private:
  void send_down(std::size_t s) {
    for (int child : links_.children)
      down_sends_.push_back(c_.transport.isend(child, tag(1, s), out_ + offset(s), bytes(s)));
  }
  transport::Tag tag(unsigned phase, std::size_t s) const {
    return c_.message_tag(phase, static_cast<unsigned>(which_), static_cast<unsigned>(s));
  }
  std::size_t bytes(std::size_t s) const { return up_.length(s) * esize_; }
  std::size_t offset(std::size_t s) const { return s * up_.segment_elements() * esize_; }

  const Collective& c_;
  const int which_;
  const TreeLinks links_;
  const std::byte* in_;
  std::byte* out_;
  const std::size_t esize_;
  const DataType type_;
  const ReduceOp op_;
  TreeReduce up_;
  std::size_t down_posted_ = 0, down_done_ = 0;
  std::vector<transport::RequestPtr> down_recv_, down_sends_;
};

}  // namespace

TreeLinks tree_links(int which, int rank, int p) {
  TreeLinks links;
  const int i = position_of(which, rank, p);
  if (const int up = position_parent(i, p); up > 0) links.parent = rank_at(which, up, p);
  for (int child : position_children(i, p)) links.children.push_back(rank_at(which, child, p));
  return links;
}

void tree_allreduce(const Collective& c, const void* send, void* recv, std::size_t count,
                    DataType type, ReduceOp op) {
  const int p = c.transport.size();
  const std::size_t esize = size_of(type);
  if (p == 1) {
    if (send != recv) copy_memory(recv, send, count * esize);
    return;
  }
  if (p > static_cast<int>(kMaxSteps))
    throw Error(ErrorCode::unsupported, fmt::format("tree allreduce: {} ranks exceed {}", p, kMaxSteps));
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  const std::size_t first_half = (count + 1) / 2;
  // In place at p = 2 (each rank the root of one tree) the trees swap halves
  // every call, so that a root sums into the half it received itself in the
  // call before, not into lines its peer has just read (ring_allreduce says
  // why that is slow).
  const int swap = p == 2 && send == recv ? static_cast<int>(c.sequence % 2) : 0;
  const struct {
    std::size_t first, count;
  } halves[2] = {{0, first_half}, {first_half, count - first_half}};
  const auto tree = [&](int which) {
    const auto& half = halves[which ^ swap];
    return TreeRun(c, which, in + half.first * esize, out + half.first * esize, half.count, type,
                   op);
  };
  TreeRun trees[2] = {tree(0), tree(1)};
  auto advance_both = [&] { return trees[0].advance() | trees[1].advance(); };
  bool looked_twice = false;
  while (!trees[0].done() || !trees[1].done()) {
    transport::RequestPtr blocker;
    try {
      if (advance_both()) {
        looked_twice = false;
        continue;
      }
      blocker = trees[0].blocker();
      if (blocker == nullptr) blocker = trees[1].blocker();
      if (blocker == nullptr) {
        // A request may have ended between advance() and blocker() (the
        // local transport completes them from other threads): look again
        // once; nothing to wait for twice in a row is a bug.
        if (looked_twice) throw Error(ErrorCode::internal, "tree allreduce: stalled with nothing to wait for");
        looked_twice = true;
        continue;
      }
    } catch (const Error& e) {
      c.fail(e);  // aborts before the trees' buffers go
    }
    c.wait(*blocker, advance_both);
  }
}

double tree_cost(const CostModel& m, double n, int ranks) {
  // Two half-buffer trees at once, pipelined. With p = 2 each rank is the
  // root of one tree and the leaf of the other: ring's traffic. With more,
  // an interior rank takes two halves in and sends one up, then one in and
  // two down.
  const double log_p = std::ceil(std::log2(static_cast<double>(ranks)));
  const double moved = ranks == 2 ? 1.0 : 2.0;
  const double extra_messages = ranks == 2 ? 0.0 : 2.0;  // an interior rank's other child and tree
  return 2 * log_p * (m.alpha + extra_messages * m.overhead) + moved * n * m.beta +
         moved / 2 * n * m.gamma;
}

}  // namespace chorus::coll

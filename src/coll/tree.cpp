#include "coll/tree.hpp"

#include "reduce/reduce.hpp"

#include <bit>
#include <cmath>
#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>

namespace chorus::coll {
namespace {

// Segments per tree in flight (child receives posted ahead, parent receives
// posted ahead): deep enough to keep every level busy.
constexpr std::size_t kWindow = 4;
constexpr std::size_t kSegmentBytes = 128 * 1024;

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

// One tree's share of the buffer, moved by a non-blocking schedule.
class TreeRun {
 public:
  TreeRun(const Collective& c, int which, const std::byte* in, std::byte* out, std::size_t elems,
          DataType type, ReduceOp op)
      : c_(c), which_(which), links_(tree_links(which, c.transport.rank(), c.transport.size())),
        in_(in), out_(out), elems_(elems), esize_(size_of(type)), type_(type), op_(op) {
    seg_elems_ = std::max<std::size_t>(1, kSegmentBytes / esize_);
    seg_elems_ = std::max(seg_elems_, (elems + kMaxSegments - 1) / kMaxSegments);
    segments_ = (elems + seg_elems_ - 1) / seg_elems_;
    child_recv_.resize(links_.children.size() * kWindow);
    scratch_ = c.scratch_buffer(static_cast<unsigned>(which),
                                links_.children.size() * kWindow * seg_elems_ * esize_);
    up_sends_.resize(segments_);
    down_recv_.resize(segments_);
  }

  bool done() const {
    if (up_done_ < segments_ || down_done_ < segments_) return false;
    for (const auto& s : up_sends_)
      if (s && !s->done()) return false;
    for (const auto& s : down_sends_)
      if (!s->done()) return false;
    return true;
  }

  // Does whatever can be done now; true if anything was.
  bool advance() {
    bool moved = false;
    transport::Transport& t = c_.transport;
    const auto& kids = links_.children;
    // Up: children's segments into scratch, a window ahead of the reduction.
    while (!kids.empty() && up_posted_ < segments_ && up_posted_ < up_done_ + kWindow) {
      const std::size_t s = up_posted_++;
      for (std::size_t k = 0; k < kids.size(); ++k)
        child_recv_[slot(k, s)] = t.irecv(kids[k], tag(0, s), scratch(k, s), bytes(s));
      moved = true;
    }
    while (up_done_ < segments_) {
      const std::size_t s = up_done_;
      bool arrived = kids.empty() || s < up_posted_;  // a slot's old request says nothing of s
      for (std::size_t k = 0; k < kids.size() && arrived; ++k) arrived = ready(child_recv_[slot(k, s)]);
      if (!arrived) break;
      const std::byte* mine = in_ + offset(s);
      const std::byte* partial = mine;  // a leaf sends its own data
      if (!kids.empty()) {
        reduce::reduce(out_ + offset(s), mine, scratch(0, s), length(s), type_, op_);
        if (kids.size() == 2)
          reduce::reduce(out_ + offset(s), out_ + offset(s), scratch(1, s), length(s), type_, op_);
        partial = out_ + offset(s);
      }
      if (links_.parent >= 0) {
        up_sends_[s] = t.isend(links_.parent, tag(0, s), partial, bytes(s));
      } else {  // the root: this segment is final
        if (kids.empty() && in_ != out_) std::memcpy(out_ + offset(s), mine, bytes(s));
        if (op_ == ReduceOp::avg)
          reduce::divide(out_ + offset(s), length(s), type_, static_cast<std::size_t>(c_.transport.size()));
        send_down(s);
        ++down_done_;
      }
      ++up_done_;
      moved = true;
    }
    if (links_.parent < 0) return moved;
    // Down: the final segment from the parent, into out, once our partial
    // sum of that segment (which may live there) has left.
    while (down_posted_ < segments_ && down_posted_ < down_done_ + kWindow &&
           ready(up_sends_[down_posted_])) {
      const std::size_t s = down_posted_++;
      down_recv_[s] = t.irecv(links_.parent, tag(1, s), out_ + offset(s), bytes(s));
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
    if (up_done_ < segments_)
      for (std::size_t k = 0; k < links_.children.size(); ++k)
        if (const auto& r = child_recv_[slot(k, up_done_)]; r && !r->done()) return r;
    if (down_done_ < down_posted_) return down_recv_[down_done_];
    for (const auto& s : up_sends_)
      if (s && !s->done()) return s;
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
  std::size_t length(std::size_t s) const { return std::min(seg_elems_, elems_ - s * seg_elems_); }
  std::size_t bytes(std::size_t s) const { return length(s) * esize_; }
  std::size_t offset(std::size_t s) const { return s * seg_elems_ * esize_; }
  std::size_t slot(std::size_t child, std::size_t s) const { return child * kWindow + s % kWindow; }
  std::byte* scratch(std::size_t child, std::size_t s) {
    return scratch_ + slot(child, s) * seg_elems_ * esize_;
  }

  const Collective& c_;
  const int which_;
  const TreeLinks links_;
  const std::byte* in_;
  std::byte* out_;
  const std::size_t elems_, esize_;
  const DataType type_;
  const ReduceOp op_;
  std::size_t seg_elems_ = 1, segments_ = 0;
  std::size_t up_posted_ = 0, up_done_ = 0, down_posted_ = 0, down_done_ = 0;
  std::vector<transport::RequestPtr> child_recv_;
  std::byte* scratch_ = nullptr;  // the collective's scratch slot `which`
  std::vector<transport::RequestPtr> up_sends_, down_recv_, down_sends_;
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
    if (send != recv && count) std::memcpy(recv, send, count * esize);
    return;
  }
  if (p > static_cast<int>(kMaxSteps))
    throw Error(ErrorCode::unsupported, fmt::format("tree allreduce: {} ranks exceed {}", p, kMaxSteps));
  const auto* in = static_cast<const std::byte*>(send);
  auto* out = static_cast<std::byte*>(recv);
  const std::size_t first_half = (count + 1) / 2;
  TreeRun trees[2] = {
      TreeRun(c, 0, in, out, first_half, type, op),
      TreeRun(c, 1, in + first_half * esize, out + first_half * esize, count - first_half, type, op)};
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

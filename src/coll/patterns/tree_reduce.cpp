#include "coll/patterns/tree_reduce.hpp"

#include "reduce/reduce.hpp"

#include <algorithm>

namespace chorus::coll {
namespace {

bool ready(const transport::RequestPtr& r) {
  if (!r || !r->done()) return false;
  if (const Error* e = r->error()) throw *e;
  return true;
}

}  // namespace

TreeReduce::TreeReduce(const Collective& c, Shape shape, const std::byte* input,
                       std::byte* partial, std::size_t elems, DataType type, ReduceOp op,
                       std::function<transport::Tag(std::size_t)> tag, unsigned scratch_slot)
    : c_(c), shape_(std::move(shape)), input_(input), partial_(partial), elems_(elems),
      esize_(size_of(type)), type_(type), op_(op), tag_(std::move(tag)) {
  seg_elems_ = std::max<std::size_t>(1, kTreeSegmentBytes / esize_);
  seg_elems_ = std::max(seg_elems_, (elems + kMaxSegments - 1) / kMaxSegments);
  segments_ = (elems + seg_elems_ - 1) / seg_elems_;
  window_ = std::min(kTreeWindow, segments_);
  const std::size_t kids = shape_.children.size();
  windows_ = c.scratch_buffer(scratch_slot, kids * window_ * seg_elems_ * esize_);
  receives_.resize(kids * window_);
  sends_.resize(segments_);
  for (std::size_t s = 0; s < window_; ++s)
    for (std::size_t k = 0; k < kids; ++k) post(k, s);
}

std::byte* TreeReduce::window_slot(std::size_t child, std::size_t s) const {
  return windows_ + (child * window_ + s % window_) * seg_elems_ * esize_;
}

void TreeReduce::post(std::size_t child, std::size_t s) {
  receives_[child * window_ + s % window_] =
      c_.transport.irecv(shape_.children[child], tag_(s), window_slot(child, s), length(s) * esize_);
}

bool TreeReduce::advance() {
  bool moved = false;
  const auto& kids = shape_.children;
  while (done_ < segments_) {
    const std::size_t s = done_, first = s * seg_elems_ * esize_, n = length(s);
    // Add the children's parts of segment s as they come, in order.
    while (next_child_ < kids.size() && ready(receives_[next_child_ * window_ + s % window_])) {
      const std::byte* so_far = next_child_ == 0 ? input_ + first : partial_ + first;
      reduce::reduce(partial_ + first, so_far, window_slot(next_child_, s), n, type_, op_);
      if (s + window_ < segments_) post(next_child_, s + window_);
      ++next_child_;
      moved = true;
    }
    if (next_child_ < kids.size()) break;
    if (shape_.parent >= 0) {
      const std::byte* from = kids.empty() ? input_ + first : partial_ + first;
      sends_[s] = c_.transport.isend(shape_.parent, tag_(s), from, n * esize_);
    }
    ++done_;
    next_child_ = 0;
    moved = true;
  }
  return moved;
}

bool TreeReduce::sent(std::size_t s) const {
  return shape_.parent < 0 || (s < done_ && ready(sends_[s]));
}

bool TreeReduce::done() const {
  if (!reduced()) return false;
  for (const auto& r : sends_)
    if (r && !r->done()) return false;
  return true;
}

transport::RequestPtr TreeReduce::blocker() const {
  if (done_ < segments_ && next_child_ < shape_.children.size())
    return receives_[next_child_ * window_ + done_ % window_];
  for (const auto& r : sends_)
    if (r && !r->done()) return r;
  return nullptr;
}

}  // namespace chorus::coll

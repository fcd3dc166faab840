// Reduction towards a root over any tree, segmented and windowed, written
// once: the binomial reduce (reduce_to_root.cpp) and each of the double
// binary tree AllReduce's two trees (tree.cpp) are made of it.
//
//        parent                 segment s of this rank's partial result =
//          ^  partial, seg s      input(s) op child0(s) op child1(s) ...
//          |                    (children in the given order, so the result
//        rank  <-- child0 s      never depends on timing), sent up as soon
//          ^                     as it is made; each child's next `window`
//          +------ child1 s      segments are already posted into scratch.
//
// Non-blocking: advance() does what can be done now, so that a caller can
// drive two of them at once (the two trees).
#pragma once

#include "coll/collective.hpp"

#include <chorus/types.hpp>

#include <functional>
#include <vector>

namespace chorus::coll {

inline constexpr std::size_t kTreeSegmentBytes = 128 * 1024;
inline constexpr std::size_t kTreeWindow = 4;  // segments posted ahead per child

class TreeReduce {
 public:
  struct Shape {
    int parent = -1;            // -1 at the root
    std::vector<int> children;  // in the order their parts are added
  };
  // `elems` elements of `type` from `input`; partial sums are made in
  // `partial` (the root's result; may be `input`'s place; unused, may be
  // null, at a leaf, which sends its input as it is). `tag(s)` is segment
  // s's tag; `scratch_slot` the Collective scratch slot for the windows.
  TreeReduce(const Collective& c, Shape shape, const std::byte* input, std::byte* partial,
             std::size_t elems, DataType type, ReduceOp op,
             std::function<transport::Tag(std::size_t segment)> tag, unsigned scratch_slot);

  // Posts, reduces and sends what it can; true if it did anything.
  bool advance();
  // Every segment reduced (and, below the root, its send posted).
  bool reduced() const { return done_ == segments_; }
  // Segments reduced so far, in order.
  std::size_t segments_reduced() const { return done_; }
  // Whether segment s's partial sum has left (always, at the root).
  bool sent(std::size_t s) const;
  // reduced() and every send ended.
  bool done() const;
  // A request it waits for when it can do nothing else, or null.
  transport::RequestPtr blocker() const;

  std::size_t segments() const { return segments_; }
  std::size_t segment_elements() const { return seg_elems_; }
  std::size_t length(std::size_t s) const { return std::min(seg_elems_, elems_ - s * seg_elems_); }

 private:
  std::byte* window_slot(std::size_t child, std::size_t s) const;
  void post(std::size_t child, std::size_t s);

  const Collective& c_;
  const Shape shape_;
  const std::byte* input_;
  std::byte* partial_;
  const std::size_t elems_, esize_;
  const DataType type_;
  const ReduceOp op_;
  const std::function<transport::Tag(std::size_t)> tag_;
  std::size_t seg_elems_ = 1, segments_ = 0, window_ = 0;
  std::size_t done_ = 0;        // segments fully reduced
  std::size_t next_child_ = 0;  // children of segment done_ already added
  std::byte* windows_ = nullptr;
  std::vector<transport::RequestPtr> receives_;  // child * window_ + s % window_
  std::vector<transport::RequestPtr> sends_;     // by segment
};

}  // namespace chorus::coll

#include "coll/collectives.hpp"

#include "coll/patterns/chunks.hpp"

#include <fmt/format.h>

namespace chorus::coll {

void require_steps(int p, std::string_view collective) {
  if (p > static_cast<int>(kMaxSteps))
    throw Error(ErrorCode::unsupported,
                fmt::format("{}: {} ranks exceed the {} steps of a call's tag space", collective, p,
                            kMaxSteps));
}

BlockLayout BlockLayout::uniform(int p, std::size_t count) {
  BlockLayout layout;
  layout.counts.assign(static_cast<std::size_t>(p), count);
  layout.displs.resize(static_cast<std::size_t>(p));
  for (std::size_t j = 0; j < layout.displs.size(); ++j) layout.displs[j] = j * count;
  return layout;
}

BlockLayout BlockLayout::near_equal(std::size_t count, int p) {
  const NearEqualChunks chunks{count, static_cast<std::size_t>(p)};
  BlockLayout layout;
  for (std::size_t j = 0; j < chunks.parts; ++j) {
    layout.counts.push_back(chunks.size(j));
    layout.displs.push_back(chunks.offset(j));
  }
  return layout;
}

BlockLayout BlockLayout::packed(std::span<const std::size_t> counts) {
  BlockLayout layout;
  layout.counts.assign(counts.begin(), counts.end());
  layout.displs.resize(counts.size());
  std::size_t next = 0;
  for (std::size_t j = 0; j < counts.size(); ++j) {
    layout.displs[j] = next;
    next += counts[j];
  }
  return layout;
}

void wait_whole(const Collective& c, const transport::Request& receive, std::size_t esize,
                std::string_view what) {
  c.wait(receive);
  expect_whole(c, receive, esize, what);
}

void expect_whole(const Collective& c, const transport::Request& receive, std::size_t esize,
                  std::string_view what) {
  if (receive.received_bytes() != receive.bytes())
    c.fail(Error(ErrorCode::mismatched_collective,
                 fmt::format("rank {} sent {} elements where rank {}'s {} expects {}",
                             receive.peer(), receive.received_bytes() / esize,
                             c.transport.rank(), what, receive.bytes() / esize)));
}

}  // namespace chorus::coll

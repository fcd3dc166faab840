// What the transports that match messages to receives themselves (tcp/,
// local/) share: a posted receive, taking the first match in posting order
// (so messages of one tag between two ranks never overtake each other), and
// delivering a whole message into a receive, never past its end.
#pragma once

#include "common/copy.hpp"
#include "transport/transport.hpp"

#include <cstring>
#include <optional>

namespace chorus::transport {

struct PostedReceive {
  int source = -1;  // the rank it receives from
  Tag tag = 0;
  std::byte* buf = nullptr;
  std::size_t capacity = 0;
  RequestPtr request;
};

// Removes and returns the first entry of `queue` (a deque or list) for
// which `matches` holds, or nullopt.
template <class Queue, class Matches>
std::optional<typename Queue::value_type> take_first(Queue& queue, Matches matches) {
  for (auto it = queue.begin(); it != queue.end(); ++it) {
    if (!matches(*it)) continue;
    std::optional<typename Queue::value_type> taken(std::move(*it));
    queue.erase(it);
    return taken;
  }
  return std::nullopt;
}

// Completes `receive` (on rank `receiver`) with the `bytes` bytes at `data`
// from `receive.source`, or fails it with truncation_message() when they do
// not fit; returns whether it was delivered.
inline bool deliver(const PostedReceive& receive, int receiver, const void* data,
                    std::size_t bytes) {
  if (bytes > receive.capacity) {
    receive.request->fail(ErrorCode::invalid_argument,
                          truncation_message(receiver, receive.source, receive.tag, bytes,
                                             receive.capacity));
    return false;
  }
  copy_memory(receive.buf, data, bytes);
  receive.request->complete(bytes);
  return true;
}

}  // namespace chorus::transport

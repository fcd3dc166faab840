// Point-to-point messages (Communicator::send/recv): posted on the caller's
// thread beside the collectives, progressed and ended by the worker thread.
//
// A message's transport tag is kPointToPointTagBit | the caller's tag, so it
// never matches a collective's. A receive from any source is not a transport
// request until the transport says which peer sent a message with its tag
// (Transport::probe, tried on every peer on each pass, starting after the
// last peer found so that no sender is starved); then it is an ordinary
// receive from that peer.
#include "coll/collective.hpp"
#include "common/logging.hpp"
#include "core/engine.hpp"

#include <fmt/format.h>

namespace chorus {

namespace {
transport::Tag wire_tag(std::uint32_t tag) { return coll::kPointToPointTagBit | tag; }
}  // namespace

std::string Communicator::Impl::describe(const PointToPoint& m) const {
  const std::string peer =
      m.peer == Communicator::kAnySource ? "any rank" : fmt::format("rank {}", m.peer);
  return fmt::format("rank {}: {} {} (tag {}, {} bytes)", transport->rank(),
                     m.is_send ? "send to" : "receive from", peer, m.tag, m.bytes);
}

Work Communicator::Impl::post_send(const void* buffer, std::size_t bytes, int peer,
                                   std::uint32_t tag) {
  return post_point_to_point(true, const_cast<void*>(buffer), bytes, peer, tag);
}

Work Communicator::Impl::post_receive(void* buffer, std::size_t bytes, int peer,
                                      std::uint32_t tag) {
  return post_point_to_point(false, buffer, bytes, peer, tag);
}

Work Communicator::Impl::post_point_to_point(bool is_send, void* buffer, std::size_t bytes,
                                             int peer, std::uint32_t tag) {
  auto state = std::make_shared<Work::State>();
  std::lock_guard run_lock(run_mutex);
  if (poisoned.load()) {
    state->finish(poisoned_error());
    return Work(state);
  }
  PointToPoint m{nullptr, state, is_send, peer, tag, buffer, bytes,
                 transport::deadline_after(timeout_seconds)};
  if (is_send)
    m.request = transport->isend(peer, wire_tag(tag), buffer, bytes);
  else if (peer != Communicator::kAnySource)  // else: found by probing (above)
    m.request = transport->irecv(peer, wire_tag(tag), buffer, bytes);
  point_to_point.push_back(std::move(m));
  point_to_point_pending.store(point_to_point.size());
  {
    std::lock_guard queue_lock(queue_mutex);  // the worker waits on it: see worker_loop
    start_worker();
  }
  queue_cv.notify_all();
  return Work(state);
}

std::size_t Communicator::Impl::progress_point_to_point(bool stopping, EndedWork& ended) {
  if (point_to_point.empty()) return 0;
  transport->progress();
  const int p = transport->size();
  std::optional<Error> failure;  // the first failure of this pass: it poisons
  const auto now = transport::Clock::now();
  for (auto it = point_to_point.begin(); it != point_to_point.end();) {
    PointToPoint& m = *it;
    std::optional<Error> error;
    bool done = false;
    if (poisoned.load()) {
      error = poisoned_error();
      done = true;
    } else if (stopping && !m.is_send && !(m.request && m.request->done())) {
      error = Error(ErrorCode::aborted,
                    describe(m) + ": the communicator was destroyed before a message came");
      done = true;
    } else {
      if (!m.request) {  // any source: find a sender
        for (int i = 0; i < p && !m.request; ++i) {
          const int peer = (any_source_next + i) % p;
          if (!transport->probe(peer, wire_tag(m.tag))) continue;
          m.request = transport->irecv(peer, wire_tag(m.tag), m.buffer, m.bytes);
          m.peer = peer;
          any_source_next = (peer + 1) % p;
        }
      }
      if (m.request && m.request->done()) {
        done = true;
        if (const Error* e = m.request->error()) {
          error = Error(e->code(), fmt::format("{} failed: {}", describe(m), e->what()));
        } else if (!m.is_send && m.request->received_bytes() != m.bytes) {
          error = Error(ErrorCode::invalid_argument,
                        fmt::format("{} failed: the message had {} bytes, {} were expected",
                                    describe(m), m.request->received_bytes(), m.bytes));
        } else if (!m.is_send) {
          m.state->source = m.peer;
        }
      } else if (now > m.deadline) {
        done = true;
        error = Error(ErrorCode::timeout,
                      fmt::format("{} failed: not complete after {:.0f} s (the timeout)",
                                  describe(m), timeout_seconds));
      }
    }
    if (!done) {
      ++it;
      continue;
    }
    if (error && !failure && error->code() != ErrorCode::aborted) failure = error;
    ended.emplace_back(std::move(m.state), std::move(error));
    it = point_to_point.erase(it);
  }
  if (failure && !poisoned.load()) {
    {
      std::lock_guard lock(error_mutex);
      if (!first_error) first_error = *failure;
      poisoned.store(true);
    }
    log::warn("{}", failure->what());
    transport->abort(failure->what());  // the peers learn of it; pending ones end
  }
  point_to_point_pending.store(point_to_point.size());
  return point_to_point.size();
}

}  // namespace chorus

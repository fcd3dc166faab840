#include "coll/collective.hpp"

#include "coll/call_check.hpp"
#include "common/pages.hpp"

#include <algorithm>

namespace chorus::coll {

std::byte* Scratch::get(unsigned slot, std::size_t bytes) {
  Buffer& b = buffers_[slot];
  if (b.bytes < bytes || !b.data) {
    b.data.reset();  // release before allocating: peak memory stays one buffer
    b.data.reset(static_cast<std::byte*>(
        ::operator new[](std::max<std::size_t>(bytes, 1), std::align_val_t{kAlignment})));
    b.bytes = bytes;
    // Mapped in one call rather than page by page at the call's first
    // touches (common/pages.hpp: half the cost in this VM).
    populate_pages(b.data.get(), bytes);
  }
  return b.data.get();
}

std::byte* Collective::scratch_buffer(unsigned slot, std::size_t bytes) const {
  static thread_local Scratch per_thread;
  return (scratch != nullptr ? *scratch : per_thread).get(slot, bytes);
}

std::function<void()> Collective::poller(const std::function<void()>& also) const {
  if (check == nullptr && !also && abort_requested == nullptr) return nullptr;
  return [this, &also] {
    if (abort_requested != nullptr && abort_requested->load(std::memory_order_relaxed))
      throw Error(ErrorCode::aborted, "the communicator was aborted");
    if (check != nullptr) check->poll();
    if (also) also();
  };
}

void Collective::wait(const transport::Request& request,
                      const std::function<void()>& also) const {
  try {
    transport.wait(request, deadline, poller(also));
  } catch (const Error& e) {
    fail(e);
  }
}

void Collective::wait_all(std::span<const transport::RequestPtr> requests) const {
  // The transport's wait_all: the first failure among the requests, whichever
  // peer it names, ends the call at once (waiting in order would sit on a
  // healthy peer's message while another request already knows a peer died).
  const std::function<void()> nothing_else;
  try {
    transport.wait_all(requests, deadline, poller(nothing_else));
  } catch (const Error& e) {
    fail(e);
  }
}

void Collective::fail(const Error& error) const {
  Error cause = error;
  if (check != nullptr && cause.code() != ErrorCode::aborted && !check->finished()) {
    // A mismatch often shows first as a wrong-sized message or a wait that
    // never ends; give the check up to a second to name the real cause (and,
    // when it already has, to deliver our part of it to the peers).
    try {
      check->finish(std::min(deadline, transport::Clock::now() + std::chrono::seconds(1)));
    } catch (const Error& e) {
      if (e.code() == ErrorCode::mismatched_collective) cause = e;
    }
  }
  transport.abort(cause.what());
  throw cause;
}

}  // namespace chorus::coll

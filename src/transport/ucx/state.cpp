#include "transport/ucx/state.hpp"

#include "common/logging.hpp"

#include <cstring>

namespace chorus::transport {

void UcxTransport::State::finish(Pending* p, ucs_status_t status, std::size_t length) {
  withdraw(p);
  ++completions;
  const int peer = p->peer;
  if (status == UCS_OK) {
    p->request->complete(length);
  } else if (status == UCS_ERR_MESSAGE_TRUNCATED) {
    p->request->fail(ErrorCode::invalid_argument,
                     truncation_message(rank, peer, p->request->tag(), length, p->capacity));
  } else if (!peers[static_cast<std::size_t>(peer)].reason.empty()) {  // dead or lost
    p->request->fail(
        ErrorCode::peer_failure,
        fmt::format("rank {}: {}", rank, peers[static_cast<std::size_t>(peer)].reason));
  } else {
    p->request->fail(ErrorCode::peer_failure,
                     fmt::format("rank {}: {} failed: {}", rank, p->request->describe(),
                                 ucs_status_string(status)));
  }
  if (p->ucx) ucp_request_free(p->ucx);
  release(p);
}

void UcxTransport::State::fail_peer(int peer, const std::string& reason) {
  auto& state = peers[static_cast<std::size_t>(peer)];
  if (state.dead) return;
  state.dead = true;
  state.reason = reason;
  bool pending = false;
  for (Pending* p = inflight; p && !pending; p = p->next) pending = p->peer == peer;
  if (pending) {
    log::warn("ucx: rank {}: {}", rank, reason);
  } else {  // a peer that left in its own time
    log::info("ucx: rank {}: {} (nothing was pending with it)", rank, reason);
  }
  // UCX fails unmatched work with it, but not a receive whose rendezvous
  // had begun, and it cannot match receives to a peer: cancel what can be
  // cancelled, and fail every request with the peer here and now. (A
  // request ends once; UCX's late callback for it changes nothing.)
  const std::string message = fmt::format("rank {}: {}", rank, reason);
  std::vector<void*> to_cancel;
  for (Pending* p = inflight; p; p = p->next) {
    if (p->peer != peer) continue;
    withdraw(p);
    p->request->fail(ErrorCode::peer_failure, message);
    if ((!p->request->is_send() || p->awaits_ack) && p->ucx) to_cancel.push_back(p->ucx);
  }
  // Cancelling runs the callback at once, which releases its record: no
  // walk over `inflight` may be open here.
  for (void* handle : to_cancel) ucp_request_cancel(worker, handle);
  ++completions;
}

namespace ucx {

void on_send(void* ucx_request, ucs_status_t status, void* user) {
  auto* p = static_cast<Pending*>(user);
  p->ucx = ucx_request;
  p->state->finish(p, status, 0);
}

void on_receive(void* ucx_request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                void* user) {
  auto* p = static_cast<Pending*>(user);
  p->ucx = ucx_request;
  const std::size_t length = info ? info->length : 0;
  if (status == UCS_OK && info && (info->sender_tag & kIndirectBit)) {
    // A descriptor: the data is read after progress (not inside UCX's
    // callback), by read_indirect().
    std::memcpy(&p->descriptor, p->bounced ? p->small : p->buffer,
                std::min(length, sizeof p->descriptor));
    if (length != sizeof p->descriptor) p->descriptor.magic = 0;  // malformed: refused there
    ucp_request_free(ucx_request);
    p->ucx = nullptr;
    p->queued = true;
    p->state->to_read.push_back(p);
    return;
  }
  if (status == UCS_OK && p->bounced) {
    if (length > p->capacity) status = UCS_ERR_MESSAGE_TRUNCATED;
    else if (length > 0) std::memcpy(p->buffer, p->small, length);
  }
  p->state->finish(p, status, length);
}

}  // namespace ucx
}  // namespace chorus::transport

// How the UCX transport fails well: abort notices (a peer that aborts says
// why before it goes), endpoint errors, the liveness check of local peers,
// closing endpoints, and abort().
#include "transport/ucx/state.hpp"

#include "common/logging.hpp"

#include <algorithm>

namespace chorus::transport {
namespace ucx {
namespace {
constexpr auto kStuckAfter = std::chrono::seconds(2);
}  // namespace

void post_notice_receive(UcxTransport::State& s);

void on_notice(void* ucx_request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  auto& s = *static_cast<UcxTransport::State*>(user);
  // `info` lives in the request: read it before the request is freed (it
  // was freed first, and the sender's rank read afterwards was garbage, so
  // no abort notice ever named its rank).
  const bool received = status == UCS_OK && info != nullptr;
  const ucp_tag_t sender_tag = received ? info->sender_tag : 0;
  const std::size_t length = received ? info->length : 0;
  ucp_request_free(ucx_request);
  s.notice_request = nullptr;
  s.notice_posted = false;
  if (status == UCS_ERR_CANCELED) {  // cancelled at close: post no other
    s.notice_closed = true;
    return;
  }
  // Any other failure (a notice longer than kNoticeBytes from a confused or
  // hostile peer, say) leaves the receive to be posted again by the next
  // progress(), so that later notices are still heard.
  if (!received) {
    log::warn("ucx: rank {} dropped an abort notice: {}", s.rank, ucs_status_string(status));
    ++s.completions;
    return;
  }
  const auto sender = static_cast<int>(sender_tag & ((ucp_tag_t{1} << kRankShift) - 1));
  s.notices.emplace_back(sender, std::string(s.notice, std::min(length, s.kNoticeBytes)));
  ++s.completions;
}

void post_notice_receive(UcxTransport::State& s) {
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = on_notice;
  param.user_data = &s;
  s.notice_posted = true;
  void* r = ucp_tag_recv_nbx(s.worker, s.notice, s.kNoticeBytes, kNoticeTag,
                             kNoticeSource << kRankShift, &param);
  if (UCS_PTR_IS_ERR(r)) {
    // Tried again at the next progress(); meanwhile failures are still seen
    // by keepalive.
    s.notice_posted = false;
  } else if (s.notice_posted) {
    s.notice_request = r;
  }  // else it completed inside the call: on_notice freed it
}

// Fails the peers whose abort notices arrived, with their reasons, and
// waits for the next notice.
void handle_notices(UcxTransport::State& s) {
  auto notices = std::move(s.notices);
  s.notices.clear();
  for (auto& [peer, reason] : notices)
    if (peer >= 0 && peer < static_cast<int>(s.peers.size()) && peer != s.rank)
      s.fail_peer(peer, fmt::format("rank {} aborted: {}", peer, reason));
  if (!s.notice_posted) post_notice_receive(s);
}

// Progresses the worker until it finds nothing more to do (bounded: a
// busy peer could keep it going for ever).
void drain(UcxTransport::State& s) {
  int idle = 0;
  for (int i = 0; i < 10000 && idle < 2; ++i)
    idle = ucp_worker_progress(s.worker) > 0 ? 0 : idle + 1;
}

// The peer is failed after progress, not here: the error may come from one
// lane (the TCP one UCX keeps for keepalive) while the peer's last messages
// still wait unread in another (shared memory), and those must be received.
void on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* a = static_cast<std::pair<UcxTransport::State*, int>*>(arg);
  auto& s = *a->first;
  auto& peer = s.peers[static_cast<std::size_t>(a->second)];
  if (peer.dead) return;
  peer.reason = fmt::format("connection to rank {} failed ({}): it died or left", a->second,
                            ucs_status_string(status));
  s.lost.push_back(a->second);
  ++s.completions;
}

void handle_lost_peers(UcxTransport::State& s) {
  while (!s.lost.empty()) {
    drain(s);  // may lose more
    auto lost = std::move(s.lost);
    s.lost.clear();
    for (int peer : lost) {
      const std::string reason = s.peers[static_cast<std::size_t>(peer)].reason;
      s.fail_peer(peer, reason);
    }
  }
}

void check_local_peers(UcxTransport::State& s) {
  const int size = static_cast<int>(s.peers.size());
  // UCX's keepalive misses a peer that dies while an endpoint to it is still
  // being wired up (seen with alltoall, where every pair starts at once): a
  // peer on this host whose process has ended is dead whatever UCX says.
  // Checked twice a second while waiting (a /proc read per local peer).
  if (const auto now = Clock::now(); now - s.last_liveness_check > std::chrono::milliseconds(500)) {
    s.last_liveness_check = now;
    if (s.completions != s.completions_seen) {
      s.completions_seen = s.completions;
      s.last_completion = now;
    }
    int dead = -1;
    bool drained = false;
    for (int r = 0; r < size; ++r) {
      const auto& peer = s.peers[static_cast<std::size_t>(r)];
      if (!peer.dead && peer.local_pid > 0 && process_ended(peer.local_pid)) {
        // What it sent before it ended may still sit in shared memory or a
        // socket, unread since our last progress: take it in first, so that
        // a peer's last message is received (only later ones fail).
        if (!drained) drain(s);
        drained = true;
        s.fail_peer(r, fmt::format("rank {} (pid {} on this host) has ended: it died or left", r,
                                   peer.local_pid));
      }
      if (s.peers[static_cast<std::size_t>(r)].dead && dead < 0) dead = r;
    }
    // A process killed while writing into a peer's shared-memory queue can
    // leave that queue stuck for good: then nothing arrives from anyone.
    // Once a peer is dead and nothing has completed for kStuckAfter, the
    // requests still waiting will not finish either; end them, saying why.
    if (dead >= 0 && s.death_seen == Clock::time_point{}) s.death_seen = now;
    if (dead >= 0 && s.inflight && now - std::max(s.last_completion, s.death_seen) > kStuckAfter) {
      const std::string why = s.peers[static_cast<std::size_t>(dead)].reason;
      for (int r = 0; r < size; ++r)
        s.fail_peer(r, fmt::format("nothing has arrived for {} s since rank {} failed ({}); "
                                   "shared memory with it may be stuck, so rank {} is given up",
                                   std::chrono::duration<double>(kStuckAfter).count(), dead, why,
                                   r));
    }
  }
}

// Closes every endpoint at once (FORCE: no flush), so that UCX drops the
// rendezvous transfers still running on them instead of finishing them into
// buffers their owners may free as soon as their requests have failed.
void close_endpoints(UcxTransport::State& s) {
  for (ucp_ep_h& ep : s.endpoints) {
    if (!ep) continue;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags = UCP_EP_CLOSE_FLAG_FORCE;
    void* req = ucp_ep_close_nbx(ep, &param);
    if (UCS_PTR_IS_PTR(req)) {
      const auto until = Clock::now() + std::chrono::seconds(2);
      while (ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < until)
        ucp_worker_progress(s.worker);
      ucp_request_free(req);
    }
    ep = nullptr;
  }
}

// UCX prints "unexpected tag-receive descriptor ... was not matched" for
// each message still queued when its worker is destroyed; a program that
// ends after a failed call must print only its own output. Eager messages
// complete at once; a large one whose sender is gone fails or is cancelled
// after a short wait (its endpoint is closed: nothing is wired up again).
void drop_unexpected(UcxTransport::State& s) {
  std::vector<std::byte> sink;
  const auto until = Clock::now() + std::chrono::milliseconds(100);
  while (Clock::now() < until) {
    ucp_tag_recv_info_t info{};
    ucp_tag_message_h message = ucp_tag_probe_nb(s.worker, 0, 0, 1, &info);
    if (message == nullptr) return;
    sink.resize(std::max<std::size_t>(info.length, 1));
    ucp_request_param_t param{};
    void* req = ucp_tag_msg_recv_nbx(s.worker, sink.data(), info.length, message, &param);
    if (!UCS_PTR_IS_PTR(req)) continue;
    while (ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < until)
      ucp_worker_progress(s.worker);
    if (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_request_cancel(s.worker, req);
    ucp_request_free(req);
  }
}

}  // namespace ucx

void UcxTransport::abort(const std::string& reason) {
  using namespace ucx;
  State& s = *state_;
  // Tell every live peer why, best effort and briefly: a notice is small and
  // goes eagerly; a peer that cannot take it is gone anyway.
  s.aborted = true;
  s.abort_text = reason.substr(0, s.kNoticeBytes);
  std::vector<void*> sent;
  for (int r = 0; r < size(); ++r) {
    // (A peer this rank never reached has no endpoint: it is not told.)
    if (r == rank() || s.endpoints.empty() || !s.endpoints[static_cast<std::size_t>(r)] ||
        s.peers[static_cast<std::size_t>(r)].dead)
      continue;
    ucp_request_param_t param{};
    void* req = ucp_tag_send_nbx(s.endpoints[static_cast<std::size_t>(r)], s.abort_text.data(),
                                 s.abort_text.size(),
                                 kNoticeTag | static_cast<ucp_tag_t>(rank()), &param);
    if (UCS_PTR_IS_PTR(req)) sent.push_back(req);
  }
  const auto until = Clock::now() + std::chrono::milliseconds(200);
  for (void* req : sent) {
    while (ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < until)
      ucp_worker_progress(s.worker);
    if (ucp_request_check_status(req) == UCS_INPROGRESS) ucp_request_cancel(s.worker, req);
    ucp_request_free(req);
  }
  for (int r = 0; r < size(); ++r)
    s.fail_peer(r, fmt::format("rank {} aborted: {}", rank(), reason));
  for (int i = 0; i < 100; ++i) ucp_worker_progress(s.worker);
  // Now, while the failed requests' buffers still exist: a receive whose
  // rendezvous had begun cannot be cancelled, and its data would otherwise
  // keep arriving (the destructor's progress wrote into freed memory).
  ucx::close_endpoints(s);
}

}  // namespace chorus::transport

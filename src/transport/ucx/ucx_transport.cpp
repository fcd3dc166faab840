// The UCX transport (ucx_transport.hpp): set-up, addresses, connecting,
// posting sends and receives, progress and sleeping. state.hpp holds what
// its files share; cross_memory.cpp the local large-message path;
// failure.cpp notices, liveness and abort.
#include "transport/ucx/state.hpp"

#include "common/config.hpp"
#include "common/logging.hpp"
#include "common/secret.hpp"

#include <fmt/format.h>
#include <poll.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace chorus::transport {

using namespace ucx;

namespace {
void default_env(const char* name, const char* value) { setenv(name, value, 0); }

// Completes every endpoint's wire-up now, while every rank is connecting
// and so progressing its worker. A wire-up request answered later could
// be answered after its sender's worker is gone (a communicator freed at
// once, a rank finishing first): answering attaches the sender's shared
// memory, which then fails, and UCX prints "shmat(...) failed" and "mm ep
// failed to connect to remote FIFO" from a program that did nothing wrong.
void finish_wire_up(UcxTransport::State& s, Deadline deadline) {
  ucp_request_param_t param{};
  void* req = ucp_worker_flush_nbx(s.worker, &param);
  if (req == nullptr) return;
  if (UCS_PTR_IS_ERR(req)) throw ucx_error("wire-up", UCS_PTR_STATUS(req));
  // Yielding when idle: with more ranks than cores, the peers whose answers
  // this waits for need the core.
  while (ucp_request_check_status(req) == UCS_INPROGRESS && Clock::now() < deadline)
    if (ucp_worker_progress(s.worker) == 0) std::this_thread::yield();
  const ucs_status_t st = ucp_request_check_status(req);
  if (st == UCS_INPROGRESS) ucp_request_cancel(s.worker, req);
  ucp_request_free(req);
  if (st == UCS_INPROGRESS)
    throw Error(ErrorCode::timeout,
                fmt::format("ucx connect: rank {}: wiring up the endpoints to its {} peers did not "
                            "finish before the deadline (a peer stopped before connecting?)",
                            s.rank, s.endpoints.size() - 1));
  if (st != UCS_OK) throw ucx_error("wire-up", st);
}

// The endpoint to rank `r` from its blob, and what the blob says of it
// (on this host: its pid, and whether it reads by cross-memory attach).
void make_endpoint(UcxTransport::State& s, int r, const AddressBlob& blob) {
  if (blob.size() <= sizeof(ProcessIdentity))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("ucx connect: rank {}'s address has {} bytes: not a Chorus UCX address",
                            r, blob.size()));
  const ProcessIdentity me = this_process();
  ProcessIdentity id;
  std::memcpy(&id, blob.data(), sizeof id);
  id.host[sizeof id.host - 1] = id.pid_namespace[sizeof id.pid_namespace - 1] = '\0';
  if (r != s.rank && me.pid_namespace[0] != '\0' && std::strcmp(id.host, me.host) == 0 &&
      std::strcmp(id.pid_namespace, me.pid_namespace) == 0 &&
      id.host_identity == me.host_identity && id.pid > 0) {
    s.peers[static_cast<std::size_t>(r)].local_pid = id.pid;
    s.cma_with[static_cast<std::size_t>(r)] = s.cma && id.cma == 1;
  }
  s.handler_args.push_back(std::make_unique<std::pair<UcxTransport::State*, int>>(&s, r));
  ucp_ep_params_t ep{};
  ep.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                  UCP_EP_PARAM_FIELD_ERR_HANDLER;
  ep.address = reinterpret_cast<const ucp_address_t*>(blob.data() + sizeof(ProcessIdentity));
  ep.err_mode = UCP_ERR_HANDLING_MODE_PEER;
  ep.err_handler.cb = on_endpoint_error;
  ep.err_handler.arg = s.handler_args.back().get();
  const ucs_status_t st = ucp_ep_create(s.worker, &ep, &s.endpoints[static_cast<std::size_t>(r)]);
  if (st != UCS_OK)
    throw ucx_error(fmt::format("endpoint to rank {} (is its address a UCX address?)", r), st);
}

// A lookup gets this long.
constexpr auto kLookupPatience = std::chrono::seconds(5);

}  // namespace

bool ucx::endpoint_ready(UcxTransport::State& s, int peer) {
  const auto i = static_cast<std::size_t>(peer);
  if (s.endpoints[i]) return true;
  if (s.peers[i].dead) return false;
  if (s.addresses[i].empty()) {
    try {
      if (!s.lookup) throw Error(ErrorCode::internal, "no address, and no lookup");
      s.addresses[i] = s.lookup(peer, Clock::now() + kLookupPatience);
    } catch (const std::exception& e) {
      s.fail_peer(peer, fmt::format("cannot look up rank {}'s address: {}", peer, e.what()));
      return false;
    }
  }
  try {
    make_endpoint(s, peer, s.addresses[i]);
  } catch (const Error& e) {
    s.fail_peer(peer, e.what());
    return false;
  }
  return true;
}

bool UcxTransport::lazy_endpoints(int size) {
  return lazy_by_setting(config::Variable::ucx_connect, size);
}

UcxTransport::UcxTransport(int rank, int size)
    : Transport(rank, size), state_(std::make_unique<State>()) {
  State& s = *state_;
  s.rank = rank;
  if (size > kMaxUcxRanks)
    throw Error(ErrorCode::unsupported,
                fmt::format("the ucx transport takes at most {} ranks, not {}", kMaxUcxRanks, size));
  s.peers.resize(static_cast<std::size_t>(size));
  for (auto& peer : s.peers) {
    const auth::Nonce random = auth::random_nonce();
    std::memcpy(&peer.next_cookie, random.data(), sizeof peer.next_cookie);
  }
  s.cma = cross_memory_attach_usable();
  // Peer-failure detection within seconds, with shared memory kept usable.
  default_env("UCX_KEEPALIVE_INTERVAL", "250ms");
  default_env("UCX_POSIX_ERROR_HANDLING", "y");
  default_env("UCX_SYSV_ERROR_HANDLING", "y");
  // UCX lists the host's network interfaces at ucp_init() and opens them in
  // ucp_worker_create(): one that goes away in between (a container's or a
  // test lab's bridge being removed) fails the worker with "No such device",
  // or "Input/output error" when it goes while being opened. A few tries,
  // each listing the interfaces again.
  constexpr int kTries = 5;
  const auto interface_vanished = [](ucs_status_t status) {
    return status == UCS_ERR_NO_DEVICE || status == UCS_ERR_IO_ERROR;
  };
  ucs_status_t st = UCS_OK;
  for (int attempt = 1;; ++attempt) {
    ucp_config_t* config = nullptr;
    st = ucp_config_read(nullptr, nullptr, &config);
    if (st != UCS_OK) throw ucx_error("config", st);
    ucp_params_t params{};
    params.field_mask = UCP_PARAM_FIELD_FEATURES;
    params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    st = ucp_init(&params, config, &s.context);
    ucp_config_release(config);
    const char* step = "init";
    if (st == UCS_OK) {
      ucp_worker_params_t wp{};
      wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
      wp.thread_mode = UCS_THREAD_MODE_SINGLE;
      st = ucp_worker_create(s.context, &wp, &s.worker);
      if (st == UCS_OK) break;
      ucp_cleanup(s.context);
      step = "worker";
    }
    if (!interface_vanished(st) || attempt == kTries) throw ucx_error(step, st);
    log::warn("ucx: {} failed ({}); listing the devices again (try {} of {})", step,
              ucs_status_string(st), attempt + 1, kTries);
    std::this_thread::sleep_for(std::chrono::milliseconds(20 * attempt));
  }
  st = ucp_worker_get_efd(s.worker, &s.event_fd);
  if (st != UCS_OK) {
    ucp_worker_destroy(s.worker);
    ucp_cleanup(s.context);
    throw ucx_error("event fd", st);
  }
}

UcxTransport::~UcxTransport() {
  State& s = *state_;
  std::vector<void*> to_cancel;
  for (Pending* p = s.inflight; p; p = p->next)
    if (p->ucx && (!p->request->is_send() || p->awaits_ack)) to_cancel.push_back(p->ucx);
  for (void* handle : to_cancel) ucp_request_cancel(s.worker, handle);
  if (s.notice_request) ucp_request_cancel(s.worker, s.notice_request);
  // After an abort the endpoints are closed already, and progress could
  // only take in what the peers sent since: UCX answers a peer's keepalive
  // check of a closed endpoint by attaching that peer's shared memory, which
  // fails ("shmat(...) failed", "mm ep failed to connect to remote FIFO")
  // when the peer has freed its side meanwhile, as MPI_Comm_free after a
  // failed call does on every rank. Nothing of this rank's needs it then.
  close_endpoints(s);
  if (!s.aborted)
    while (ucp_worker_progress(s.worker) != 0) {
    }
  drop_unexpected(s);
  ucp_worker_destroy(s.worker);
  ucp_cleanup(s.context);
}

// The blob: this process's identity (for the liveness check below), then
// the UCP worker address.
AddressBlob UcxTransport::address() {
  ucp_address_t* address = nullptr;
  std::size_t length = 0;
  const ucs_status_t st = ucp_worker_get_address(state_->worker, &address, &length);
  if (st != UCS_OK) throw ucx_error("worker address", st);
  ProcessIdentity id = this_process();
  id.cma = state_->cma ? 1 : 0;
  AddressBlob blob(sizeof id + length);
  std::memcpy(blob.data(), &id, sizeof id);
  std::memcpy(blob.data() + sizeof id, address, length);
  ucp_worker_release_address(state_->worker, address);
  return blob;
}

void UcxTransport::connect(std::span<const AddressBlob> addresses, Deadline deadline) {
  State& s = *state_;
  if (addresses.size() != static_cast<std::size_t>(size()))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("ucx connect: {} addresses for {} ranks", addresses.size(), size()));
  s.endpoints.assign(addresses.size(), nullptr);
  s.cma_with.assign(addresses.size(), false);
  s.addresses.assign(addresses.begin(), addresses.end());
  if (!lazy_endpoints(size())) {
    for (int r = 0; r < size(); ++r) make_endpoint(s, r, s.addresses[static_cast<std::size_t>(r)]);
    finish_wire_up(s, deadline);
  }
  post_notice_receive(s);
}

void UcxTransport::connect_looking_up(const AddressBlob& rank0, AddressLookup lookup,
                                      Deadline deadline) {
  (void)deadline;  // nothing to wait for: every endpoint is made when first needed
  State& s = *state_;
  if (!lazy_endpoints(size()))
    throw Error(ErrorCode::invalid_argument,
                "ucx: looking addresses up when needed takes endpoints made lazily "
                "(CHORUS_UCX_CONNECT=lazy, or auto beyond 64 ranks)");
  if (!lookup) throw Error(ErrorCode::invalid_argument, "ucx connect_looking_up: no lookup");
  const auto p = static_cast<std::size_t>(size());
  s.endpoints.assign(p, nullptr);
  s.cma_with.assign(p, false);
  s.addresses.assign(p, AddressBlob{});
  s.addresses[0] = rank0;
  s.addresses[static_cast<std::size_t>(rank())] = address();
  s.lookup = std::move(lookup);
  post_notice_receive(s);
}

RequestPtr UcxTransport::isend(int peer, Tag tag, const void* buf, std::size_t bytes) {
  check_message("isend", peer, tag, buf, bytes);
  State& s = *state_;
  auto request = std::make_shared<Request>(true, peer, tag, bytes);
  if (s.endpoints.empty() || s.peers[static_cast<std::size_t>(peer)].dead) {
    request->fail(
        ErrorCode::peer_failure,
        fmt::format("rank {}: cannot send to rank {}: {}", rank(), peer,
                    s.endpoints.empty() ? "the transport is not connected"
                                        : s.peers[static_cast<std::size_t>(peer)].reason));
    return request;
  }
  if (!endpoint_ready(s, peer)) {
    request->fail(ErrorCode::peer_failure,
                  fmt::format("rank {}: cannot send to rank {}: {}", rank(), peer,
                              s.peers[static_cast<std::size_t>(peer)].reason));
    return request;
  }
  Pending* p = s.acquire(request, peer, bytes);
  if (bytes >= kCmaMinBytes && bytes <= kCmaMaxBytes && s.cma_with[static_cast<std::size_t>(peer)]) {
    ucx::send_indirect(s, p, peer, tag, buf, bytes);
    return request;
  }
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
  param.cb.send = on_send;
  param.user_data = p;
  void* r = ucp_tag_send_nbx(s.endpoints[static_cast<std::size_t>(peer)], buf, bytes,
                             ucx_tag(rank(), tag), &param);
  if (r == nullptr) {
    s.finish(p, UCS_OK, 0);
  } else if (UCS_PTR_IS_ERR(r)) {
    s.finish(p, UCS_PTR_STATUS(r), 0);
  } else {
    p->ucx = r;
  }
  return request;
}

bool UcxTransport::probe(int peer, Tag tag) {
  check_message("probe", peer, tag, nullptr, 0);
  State& s = *state_;
  ucp_tag_recv_info_t arrived{};
  // Either kind: the data itself, or a cross-memory descriptor for it.
  return ucp_tag_probe_nb(s.worker, ucx_tag(peer, tag), kDataMask, 0, &arrived) != nullptr;
}

RequestPtr UcxTransport::irecv(int peer, Tag tag, void* buf, std::size_t bytes) {
  check_message("irecv", peer, tag, buf, bytes);
  State& s = *state_;
  auto request = std::make_shared<Request>(false, peer, tag, bytes);
  // A message that arrived whole before the peer was lost (a peer that sent
  // its last message and left) is still received; only new ones cannot be.
  ucp_tag_recv_info_t arrived{};
  if (s.peers[static_cast<std::size_t>(peer)].dead &&
      ucp_tag_probe_nb(s.worker, ucx_tag(peer, tag), kFullMask, 0, &arrived) == nullptr) {
    request->fail(ErrorCode::peer_failure,
                  fmt::format("rank {}: cannot receive from rank {}: {}", rank(), peer,
                              s.peers[static_cast<std::size_t>(peer)].reason));
    return request;
  }
  // Its endpoint first, even to receive: it tells this rank whether the
  // peer sends by cross-memory attach, and watches the peer for failure.
  if (!s.endpoints.empty() && !s.peers[static_cast<std::size_t>(peer)].dead &&
      !endpoint_ready(s, peer)) {
    request->fail(ErrorCode::peer_failure,
                  fmt::format("rank {}: cannot receive from rank {}: {}", rank(), peer,
                              s.peers[static_cast<std::size_t>(peer)].reason));
    return request;
  }
  Pending* p = s.acquire(request, peer, bytes);
  p->buffer = buf;
  // From a peer that may send a descriptor instead of the data, the receive
  // takes either kind, and one too small to hold a descriptor lands in the
  // record first (so that a large message is still named as too large).
  const bool either = !s.cma_with.empty() && s.cma_with[static_cast<std::size_t>(peer)];
  void* into = buf;
  std::size_t room = bytes;
  if (either && bytes < sizeof p->small) {
    p->bounced = true;
    into = p->small;
    room = sizeof p->small;
  }
  ucp_request_param_t param{};
  // UCX 1.13 leaves recv_info's length at 0 when a receive completes at once
  // (the message was already waiting), so immediate completion is refused:
  // every receive ends in on_receive, which is told the length.
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = on_receive;
  param.user_data = p;
  void* r = ucp_tag_recv_nbx(s.worker, into, room, ucx_tag(peer, tag),
                             either ? kDataMask : kFullMask, &param);
  if (UCS_PTR_IS_ERR(r)) {
    s.finish(p, UCS_PTR_STATUS(r), 0);
  } else if (!request->done() && !p->queued) {
    p->ucx = r;
  }  // else the callback ran inside the call and has freed r already
  return request;
}

bool UcxTransport::progress() {
  State& s = *state_;
  const std::size_t before = s.completions;
  const unsigned n = ucp_worker_progress(s.worker);
  if (!s.lost.empty()) handle_lost_peers(s);
  if (!s.to_read.empty()) read_indirect(s);
  if (!s.notices.empty() || (!s.notice_posted && !s.notice_closed)) handle_notices(s);
  return n > 0 || s.completions != before;
}

void UcxTransport::wait_for_activity(Deadline until) {
  State& s = *state_;
  ucx::check_local_peers(s);
  if (!s.lost.empty()) return;  // the next progress() fails them
  if (ucp_worker_arm(s.worker) == UCS_ERR_BUSY) return;  // events are waiting already
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
  pollfd p{s.event_fd, POLLIN, 0};
  if (::poll(&p, 1, static_cast<int>(std::clamp<long>(left.count() + 1, 0, 1000))) == 0) {
    // Nothing woke us. UCX checks its keepalive timers only every few dozen
    // progress calls, so a sleeping rank must make them, or it would not
    // notice a dead peer for many seconds.
    for (int i = 0; i < 64; ++i) ucp_worker_progress(s.worker);
  }
}

}  // namespace chorus::transport

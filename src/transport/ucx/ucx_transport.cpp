#include "transport/ucx/ucx_transport.hpp"
#include "common/config.hpp"

#include "common/logging.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <sys/uio.h>
#include <ucp/api/ucp.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace chorus::transport {
namespace {

constexpr int kRankShift = kTagBits;
constexpr ucp_tag_t kFullMask = ~ucp_tag_t{0};

ucp_tag_t ucx_tag(int source, Tag tag) {
  return (static_cast<ucp_tag_t>(source) << kRankShift) | tag;
}

Error ucx_error(const std::string& what, ucs_status_t status) {
  return Error(ErrorCode::transport_error,
               fmt::format("UCX {}: {}", what, ucs_status_string(status)));
}

// Large messages between ranks of one host go by cross-memory attach
// (process_vm_readv): the sender sends a descriptor of its buffer under the
// message's tag with kIndirectBit set, the receiver copies the data
// straight out of the sender's memory into its posted buffer and answers
// with an ack, and the send completes at the ack. One copy, no rendezvous
// through UCX, whose rendezvous under peer error handling is slower than
// its own default mode (docs/transports.md).
//
// A send that fails before its ack (its peer or the call failed) withdraws
// the descriptor it keeps in its own memory before the caller can reuse the
// buffer; the receiver reads that descriptor back after the data and
// refuses what it copied unless it is still there. So a receiver never
// takes a buffer its sender has given up as a message.
struct CmaDescriptor {
  std::uint64_t magic = 0;
  std::uint64_t address = 0;  // of the data, in the sender's address space
  std::uint64_t bytes = 0;
  std::uint64_t cookie = 0;  // names the sender's ack receive
  std::uint64_t self = 0;    // where the sender keeps this descriptor
};
constexpr std::uint64_t kCmaMagic = 0x43484f5255534d41;  // "CHORUSMA"
// The ack's status.
enum CmaAck : std::int64_t { cma_read = 0, cma_truncated = 1, cma_failed = 2 };
// The sizes that go by CMA. Below, UCX's own paths are as fast; above, a
// single copy from memory to memory loses to UCX's pipelined shared-memory
// copies, where both processes copy at once (measured, docs/transports.md).
constexpr std::size_t kCmaMinBytes = 64 << 10;
constexpr std::size_t kCmaMaxBytes = 8 << 20;

// What a UCX request completes into; owned by the transport until UCX calls
// back (or the request is cancelled and then calls back).
struct Pending {
  RequestPtr request;
  class UcxTransport::State* state = nullptr;
  int peer = 0;
  std::size_t capacity = 0;
  void* ucx = nullptr;  // the UCX request handle while in flight
  Pending* prev = nullptr;  // the in-flight list, intrusive: no allocation
  Pending* next = nullptr;
  // CMA: a send waiting for its ack (it is a receive to UCX), or a receive
  // from a peer that may send a descriptor.
  bool awaits_ack = false;
  void* buffer = nullptr;  // a receive's own buffer
  bool bounced = false;    // received into `small`: the buffer is smaller than a descriptor
  bool queued = false;     // a descriptor arrived: waiting in to_read, UCX is done with it
  CmaDescriptor descriptor;  // sent (lives until the ack) or received
  std::int64_t ack = 0;      // where the ack lands (a send) or leaves from (a receive)
  alignas(8) std::byte small[sizeof(CmaDescriptor)] = {};
};

// Where a process runs, as far as its pid means anything: the host name
// and the pid namespace. Two ranks with the same identity can see each
// other's pids.
struct ProcessIdentity {
  char host[64] = {};
  char pid_namespace[48] = {};
  std::int32_t pid = 0;
  std::int32_t cma = 0;  // 1: it reads peers' memory (and may be read)
};

// Whether this process may copy from a peer process's memory: not turned
// off by CHORUS_UCX_CMA=0, no Yama ptrace restriction (which forbids it
// between sibling processes), and the system call allowed (a container's
// seccomp filter may refuse it). Decided once per process.
bool cma_check() {
  if (const char* env = config::raw(config::Variable::ucx_cma); env && std::strcmp(env, "0") == 0)
    return false;
  if (std::FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r")) {
    const int scope = std::fgetc(f);
    std::fclose(f);
    if (scope != '0') {
      log::info("ucx: no cross-memory attach: kernel.yama.ptrace_scope is not 0");
      return false;
    }
  }
  char from = 1, to = 0;
  iovec local{&to, 1}, remote{&from, 1};
  if (::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) != 1) {
    log::info("ucx: no cross-memory attach: process_vm_readv: {}", std::strerror(errno));
    return false;
  }
  return true;
}

ProcessIdentity this_process() {
  ProcessIdentity id;
  ::gethostname(id.host, sizeof id.host - 1);
  const ssize_t n = ::readlink("/proc/self/ns/pid", id.pid_namespace, sizeof id.pid_namespace - 1);
  if (n <= 0) id.pid_namespace[0] = '\0';  // unknown: never compared equal (below)
  id.pid = static_cast<std::int32_t>(::getpid());
  return id;
}

// Whether process `pid` of this pid namespace has ended (a zombie has: it
// only waits to be reaped).
bool process_ended(int pid) {
  std::FILE* f = std::fopen(fmt::format("/proc/{}/stat", pid).c_str(), "r");
  if (f == nullptr) return true;
  char state = '?';
  // "pid (comm) state ...": the state follows the last ')'.
  char line[512] = {};
  const std::size_t n = std::fread(line, 1, sizeof line - 1, f);
  std::fclose(f);
  const char* close = nullptr;
  for (std::size_t i = 0; i < n; ++i)
    if (line[i] == ')') close = line + i;
  if (close && close + 2 < line + n) state = close[2];
  return state == 'Z' || state == 'X';
}

}  // namespace

bool UcxTransport::cross_memory_attach_usable() {
  static const bool usable = cma_check();
  return usable;
}

struct UcxTransport::State {
  int rank = 0;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int event_fd = -1;
  std::vector<ucp_ep_h> endpoints;
  struct Peer {
    bool dead = false;
    std::string reason;
    int local_pid = 0;  // its pid when it shares this host and pid namespace, else 0
  };
  std::vector<Peer> peers;
  bool cma = false;                 // this process reads peers' memory
  std::vector<bool> cma_with;       // ... and peer r's too (same host, both able)
  std::uint64_t next_cookie = 0;    // of this rank's CMA sends
  std::vector<Pending*> to_read;    // CMA descriptors received, read after progress
  std::vector<std::unique_ptr<std::pair<State*, int>>> handler_args;
  std::size_t completions = 0;  // bumped by callbacks, read by progress()
  Clock::time_point last_liveness_check{};  // wait_for_activity's check of local peers
  std::size_t completions_seen = 0;           // completions at the last check ...
  Clock::time_point last_completion{};        // ... and when they last changed
  Clock::time_point death_seen{};             // when the check first saw a dead peer

  // Abort notices: a peer that aborts sends its reason under a control tag
  // (every source bit set, which no rank has) before it goes, so that
  // survivors can say why instead of "connection reset". One receive for
  // them is always posted; arrived notices are handled after progress.
  static constexpr std::size_t kNoticeBytes = 1024;
  char notice[kNoticeBytes] = {};
  void* notice_request = nullptr;
  bool notice_posted = false;  // a notice receive is waiting (notice_request may lag)
  std::vector<std::pair<int, std::string>> notices;  // (rank, reason) not yet handled
  std::string abort_text;                            // what this rank sends when it aborts

  // Sends and receives UCX still holds, in a list threaded through the
  // records themselves; records are recycled, so a message costs no
  // allocation beyond its Request.
  Pending* inflight = nullptr;
  std::vector<std::unique_ptr<Pending>> records;
  std::vector<Pending*> spare;

  Pending* acquire(RequestPtr request, int peer, std::size_t capacity) {
    if (spare.empty()) {
      records.push_back(std::make_unique<Pending>());
      spare.push_back(records.back().get());
    }
    Pending* p = spare.back();
    spare.pop_back();
    p->request = std::move(request);
    p->state = this;
    p->peer = peer;
    p->capacity = capacity;
    p->ucx = nullptr;
    p->awaits_ack = false;
    p->buffer = nullptr;
    p->bounced = false;
    p->queued = false;
    p->prev = nullptr;
    p->next = inflight;
    if (inflight) inflight->prev = p;
    inflight = p;
    return p;
  }

  void release(Pending* p) {
    (p->prev ? p->prev->next : inflight) = p->next;
    if (p->next) p->next->prev = p->prev;
    p->request.reset();
    spare.push_back(p);
  }

  // A CMA send ends: its descriptor is withdrawn before anyone may reuse
  // the buffer (the fence orders it before the caller's next writes).
  static void withdraw(Pending* p) {
    if (!p->awaits_ack) return;
    p->descriptor.magic = 0;
    std::atomic_thread_fence(std::memory_order_seq_cst);
  }

  void finish(Pending* p, ucs_status_t status, std::size_t length) {
    withdraw(p);
    ++completions;
    const int peer = p->peer;
    if (status == UCS_OK) {
      p->request->complete(length);
    } else if (status == UCS_ERR_MESSAGE_TRUNCATED) {
      p->request->fail(ErrorCode::invalid_argument,
                       truncation_message(rank, peer, p->request->tag(), length, p->capacity));
    } else if (peers[static_cast<std::size_t>(peer)].dead) {
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

  void fail_peer(int peer, const std::string& reason) {
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
};

namespace {

void on_send(void* ucx_request, ucs_status_t status, void* user) {
  auto* p = static_cast<Pending*>(user);
  p->ucx = ucx_request;
  p->state->finish(p, status, 0);
}

constexpr ucp_tag_t kIndirectBit = ucp_tag_t{1} << 63;  // the message is a CmaDescriptor
constexpr ucp_tag_t kDataMask = ~kIndirectBit;          // a receive takes either kind

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

// The sender's side of a CMA message: the receiver's ack ends the send.
void on_ack(void* ucx_request, ucs_status_t status, const ucp_tag_recv_info_t*, void* user) {
  auto* p = static_cast<Pending*>(user);
  p->ucx = ucx_request;
  if (status == UCS_OK && p->ack == cma_failed)
    p->request->fail(ErrorCode::peer_failure,
                     fmt::format("rank {}: {} failed: the receiver could not read it from this "
                                 "process's memory (cross-memory attach)",
                                 p->state->rank, p->request->describe()));
  // A receive too small for the message is the receiver's error; the send
  // completes normally, as the transport contract says.
  p->state->finish(p, status, 0);
}

void ack_and_finish(UcxTransport::State& s, Pending* p, CmaAck status);

// Copies every received descriptor's message out of its sender's memory,
// acks it, and ends the receive.
void read_indirect(UcxTransport::State& s) {
  auto batch = std::move(s.to_read);
  s.to_read.clear();
  for (Pending* p : batch) {
    const CmaDescriptor d = p->descriptor;
    const int peer = p->peer;
    if (s.peers[static_cast<std::size_t>(peer)].dead) {  // the request has failed already
      s.finish(p, UCS_ERR_CANCELED, 0);
      continue;
    }
    if (d.magic != kCmaMagic) {
      // Not one of ours: the peer broke the protocol. No ack can be named.
      s.fail_peer(peer, fmt::format("rank {} sent a malformed cross-memory-attach descriptor "
                                    "(tag {:#x}); its messages are refused",
                                    peer, p->request->tag()));
      s.finish(p, UCS_ERR_CANCELED, 0);
      continue;
    }
    if (d.bytes > p->capacity) {
      p->request->fail(ErrorCode::invalid_argument,
                       truncation_message(s.rank, peer, p->request->tag(), d.bytes, p->capacity));
      ack_and_finish(s, p, cma_truncated);
      continue;
    }
    std::size_t done = 0;
    int error = 0;
    const pid_t pid = s.peers[static_cast<std::size_t>(peer)].local_pid;
    while (done < d.bytes && error == 0) {
      iovec local{static_cast<std::byte*>(p->buffer) + done, d.bytes - done};
      iovec remote{reinterpret_cast<void*>(d.address + done), d.bytes - done};
      const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
      if (n > 0) done += static_cast<std::size_t>(n);
      else error = n == 0 ? EFAULT : errno;
    }
    if (error == 0) {  // still offered? (see CmaDescriptor)
      CmaDescriptor now;
      iovec local{&now, sizeof now};
      iovec remote{reinterpret_cast<void*>(d.self), sizeof now};
      if (::process_vm_readv(pid, &local, 1, &remote, 1, 0) != static_cast<ssize_t>(sizeof now))
        error = errno != 0 ? errno : EFAULT;
      else if (now.magic != kCmaMagic || now.cookie != d.cookie)
        error = ECANCELED;
    }
    if (error != 0) {
      p->request->fail(
          ErrorCode::peer_failure,
          error == ECANCELED
              ? fmt::format("rank {}: {}: rank {} withdrew it (its send failed) before it was "
                            "taken; what was copied is not the message",
                            s.rank, p->request->describe(), peer)
              : fmt::format("rank {}: {}: reading it from rank {}'s memory failed after {} of {} "
                            "bytes: {}{}",
                            s.rank, p->request->describe(), peer, done, d.bytes,
                            std::strerror(error), error == ESRCH ? " (it died)" : ""));
      ack_and_finish(s, p, cma_failed);
      continue;
    }
    ack_and_finish(s, p, cma_read);
  }
}

constexpr ucp_tag_t kNoticeSource = (ucp_tag_t{1} << (64 - kRankShift)) - 1;
constexpr ucp_tag_t kNoticeTag = kNoticeSource << kRankShift;  // | sender rank
// CMA acks: | the sender's cookie. Neither control source is a rank's, with
// or without kIndirectBit (ranks stay below 2^23 - 2).
constexpr ucp_tag_t kAckSource = kNoticeSource - 1;
constexpr int kMaxUcxRanks = (1 << 23) - 2;

void on_ack_sent(void* ucx_request, ucs_status_t, void* user) {
  auto* p = static_cast<Pending*>(user);
  p->ucx = ucx_request;
  // The data was read and found still offered: the receive is good even if
  // its sender has gone since.
  p->state->finish(p, UCS_OK, p->descriptor.bytes);
}

// Acks a CMA message from the record's own buffer and ends the receive once
// UCX has sent the ack (a receive that failed has ended already; its record
// waits too): a receiver that stops driving its transport once the receive
// has ended must not leave an ack unsent and its sender waiting.
void ack_and_finish(UcxTransport::State& s, Pending* p, CmaAck status) {
  const auto peer = static_cast<std::size_t>(p->peer);
  void* r = nullptr;
  if (!s.peers[peer].dead) {
    p->ack = status;
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA;
    param.cb.send = on_ack_sent;
    param.user_data = p;
    r = ucp_tag_send_nbx(s.endpoints[peer], &p->ack, sizeof p->ack,
                         (kAckSource << kRankShift) | p->descriptor.cookie, &param);
  }
  if (UCS_PTR_IS_PTR(r)) {
    p->ucx = r;  // on_ack_sent ends it
  } else {       // sent already, or the peer is gone (its error handler says so)
    s.finish(p, UCS_OK, p->descriptor.bytes);
  }
}

void post_notice_receive(UcxTransport::State& s);

void on_notice(void* ucx_request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  auto& s = *static_cast<UcxTransport::State*>(user);
  ucp_request_free(ucx_request);
  s.notice_request = nullptr;
  s.notice_posted = false;
  if (status != UCS_OK || info == nullptr) return;  // cancelled at close
  const auto sender = static_cast<int>(info->sender_tag & ((ucp_tag_t{1} << kRankShift) - 1));
  s.notices.emplace_back(sender, std::string(s.notice, std::min(info->length, s.kNoticeBytes)));
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
    s.notice_posted = false;  // no notices then; failures are still seen by keepalive
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
    if (peer >= 0 && peer < static_cast<int>(s.peers.size()))
      s.fail_peer(peer, fmt::format("rank {} aborted: {}", peer, reason));
  if (!s.notice_posted) post_notice_receive(s);
}

void on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status) {
  auto* a = static_cast<std::pair<UcxTransport::State*, int>*>(arg);
  a->first->fail_peer(a->second, fmt::format("connection to rank {} failed ({}): it died or left",
                                             a->second, ucs_status_string(status)));
}

void default_env(const char* name, const char* value) { setenv(name, value, 0); }

}  // namespace

UcxTransport::UcxTransport(int rank, int size)
    : Transport(rank, size), state_(std::make_unique<State>()) {
  State& s = *state_;
  s.rank = rank;
  if (size > kMaxUcxRanks)
    throw Error(ErrorCode::unsupported,
                fmt::format("the ucx transport takes at most {} ranks, not {}", kMaxUcxRanks, size));
  s.peers.resize(static_cast<std::size_t>(size));
  s.cma = cross_memory_attach_usable();
  // Peer-failure detection within seconds, with shared memory kept usable.
  default_env("UCX_KEEPALIVE_INTERVAL", "250ms");
  default_env("UCX_POSIX_ERROR_HANDLING", "y");
  default_env("UCX_SYSV_ERROR_HANDLING", "y");
  ucp_config_t* config = nullptr;
  ucs_status_t st = ucp_config_read(nullptr, nullptr, &config);
  if (st != UCS_OK) throw ucx_error("config", st);
  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  st = ucp_init(&params, config, &s.context);
  ucp_config_release(config);
  if (st != UCS_OK) throw ucx_error("init", st);
  ucp_worker_params_t wp{};
  wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  wp.thread_mode = UCS_THREAD_MODE_SINGLE;
  st = ucp_worker_create(s.context, &wp, &s.worker);
  if (st != UCS_OK) {
    ucp_cleanup(s.context);
    throw ucx_error("worker", st);
  }
  st = ucp_worker_get_efd(s.worker, &s.event_fd);
  if (st != UCS_OK) {
    ucp_worker_destroy(s.worker);
    ucp_cleanup(s.context);
    throw ucx_error("event fd", st);
  }
}

namespace {

constexpr auto kStuckAfter = std::chrono::seconds(2);

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

}  // namespace

UcxTransport::~UcxTransport() {
  State& s = *state_;
  std::vector<void*> to_cancel;
  for (Pending* p = s.inflight; p; p = p->next)
    if (p->ucx && (!p->request->is_send() || p->awaits_ack)) to_cancel.push_back(p->ucx);
  for (void* handle : to_cancel) ucp_request_cancel(s.worker, handle);
  if (s.notice_request) ucp_request_cancel(s.worker, s.notice_request);
  close_endpoints(s);
  while (ucp_worker_progress(s.worker) != 0) {
  }
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

void UcxTransport::connect(std::span<const AddressBlob> addresses, Deadline) {
  State& s = *state_;
  if (addresses.size() != static_cast<std::size_t>(size()))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("ucx connect: {} addresses for {} ranks", addresses.size(), size()));
  s.endpoints.assign(addresses.size(), nullptr);
  s.cma_with.assign(addresses.size(), false);
  const ProcessIdentity me = this_process();
  for (int r = 0; r < size(); ++r) {
    const AddressBlob& blob = addresses[static_cast<std::size_t>(r)];
    if (blob.size() <= sizeof(ProcessIdentity))
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("ucx connect: rank {}'s address has {} bytes: not a Chorus UCX address",
                              r, blob.size()));
    ProcessIdentity id;
    std::memcpy(&id, blob.data(), sizeof id);
    id.host[sizeof id.host - 1] = id.pid_namespace[sizeof id.pid_namespace - 1] = '\0';
    if (r != rank() && me.pid_namespace[0] != '\0' && std::strcmp(id.host, me.host) == 0 &&
        std::strcmp(id.pid_namespace, me.pid_namespace) == 0 && id.pid > 0) {
      s.peers[static_cast<std::size_t>(r)].local_pid = id.pid;
      s.cma_with[static_cast<std::size_t>(r)] = s.cma && id.cma == 1;
    }
    s.handler_args.push_back(std::make_unique<std::pair<State*, int>>(&s, r));
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
  Pending* p = s.acquire(request, peer, bytes);
  if (bytes >= kCmaMinBytes && bytes <= kCmaMaxBytes && s.cma_with[static_cast<std::size_t>(peer)]) {
    // By cross-memory attach: wait for the ack, then send the descriptor,
    // which lives in the record until the ack (after the receiver read it).
    p->awaits_ack = true;
    p->descriptor = {kCmaMagic, reinterpret_cast<std::uintptr_t>(buf), bytes,
                     ++s.next_cookie & kMaxTag, reinterpret_cast<std::uintptr_t>(&p->descriptor)};
    ucp_request_param_t param{};
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param.cb.recv = on_ack;
    param.user_data = p;
    void* r = ucp_tag_recv_nbx(s.worker, &p->ack, sizeof p->ack,
                               (kAckSource << kRankShift) | p->descriptor.cookie, kFullMask, &param);
    if (UCS_PTR_IS_ERR(r)) {
      s.finish(p, UCS_PTR_STATUS(r), 0);
      return request;
    }
    p->ucx = r;
    ucp_request_param_t send_param{};
    void* d = ucp_tag_send_nbx(s.endpoints[static_cast<std::size_t>(peer)], &p->descriptor,
                               sizeof p->descriptor, ucx_tag(rank(), tag) | kIndirectBit,
                               &send_param);
    if (UCS_PTR_IS_ERR(d)) {
      request->fail(ErrorCode::peer_failure,
                    fmt::format("rank {}: {} failed: {}", rank(), request->describe(),
                                ucs_status_string(UCS_PTR_STATUS(d))));
      ucp_request_cancel(s.worker, r);  // its callback releases the record
    } else if (d != nullptr) {
      ucp_request_free(d);  // UCX keeps it until it is sent
    }
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
  if (!s.to_read.empty()) read_indirect(s);
  if (!s.notices.empty()) handle_notices(s);
  return n > 0 || s.completions != before;
}

void UcxTransport::wait_for_activity(Deadline until) {
  State& s = *state_;
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
    for (int r = 0; r < size(); ++r) {
      const auto& peer = s.peers[static_cast<std::size_t>(r)];
      if (!peer.dead && peer.local_pid > 0 && process_ended(peer.local_pid))
        s.fail_peer(r, fmt::format("rank {} (pid {} on this host) has ended: it died or left", r,
                                   peer.local_pid));
      if (s.peers[static_cast<std::size_t>(r)].dead && dead < 0) dead = r;
    }
    // A process killed while writing into a peer's shared-memory queue can
    // leave that queue stuck for good: then nothing arrives from anyone.
    // Once a peer is dead and nothing has completed for kStuckAfter, the
    // requests still waiting will not finish either; end them, saying why.
    if (dead >= 0 && s.death_seen == Clock::time_point{}) s.death_seen = now;
    if (dead >= 0 && s.inflight && now - std::max(s.last_completion, s.death_seen) > kStuckAfter) {
      const std::string why = s.peers[static_cast<std::size_t>(dead)].reason;
      for (int r = 0; r < size(); ++r)
        s.fail_peer(r, fmt::format("nothing has arrived for {} s since rank {} failed ({}); "
                                   "shared memory with it may be stuck, so rank {} is given up",
                                   std::chrono::duration<double>(kStuckAfter).count(), dead, why,
                                   r));
    }
  }
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

void UcxTransport::abort(const std::string& reason) {
  State& s = *state_;
  // Tell every live peer why, best effort and briefly: a notice is small and
  // goes eagerly; a peer that cannot take it is gone anyway.
  s.abort_text = reason.substr(0, s.kNoticeBytes);
  std::vector<void*> sent;
  for (int r = 0; r < size(); ++r) {
    if (r == rank() || s.endpoints.empty() || s.peers[static_cast<std::size_t>(r)].dead) continue;
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
  close_endpoints(s);
}

}  // namespace chorus::transport

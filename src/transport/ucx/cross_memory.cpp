// Large messages between ranks of one host by cross-memory attach
// (state.hpp explains the protocol): deciding whether this process may,
// sending a descriptor, reading the data out of the sender's memory, and
// the ack that ends the send.
#include "transport/ucx/state.hpp"

#include "common/config.hpp"
#include "common/host.hpp"
#include "common/logging.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace chorus::transport {

bool UcxTransport::cross_memory_attach_usable() {
  static const bool usable = ucx::cma_check();
  return usable;
}

namespace ucx {
namespace {

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

}  // namespace

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
  id.host_identity = host::identity();
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

void send_indirect(UcxTransport::State& s, Pending* p, int peer, Tag tag, const void* buf,
                 std::size_t bytes) {
  const RequestPtr request = p->request;  // the record may be recycled below
  // By cross-memory attach: wait for the ack, then send the descriptor,
  // which lives in the record until the ack (after the receiver read it).
  p->awaits_ack = true;
  p->descriptor = {kCmaMagic, reinterpret_cast<std::uintptr_t>(buf), bytes,
                   ++s.peers[static_cast<std::size_t>(peer)].next_cookie & kMaxTag,
                   reinterpret_cast<std::uintptr_t>(&p->descriptor)};
  ucp_request_param_t param{};
  param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                       UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  param.cb.recv = on_ack;
  param.user_data = p;
  void* r = ucp_tag_recv_nbx(s.worker, &p->ack, sizeof p->ack,
                             (kAckSource << kRankShift) | p->descriptor.cookie, kFullMask, &param);
  if (UCS_PTR_IS_ERR(r)) {
    s.finish(p, UCS_PTR_STATUS(r), 0);
    return;
  }
  p->ucx = r;
  ucp_request_param_t send_param{};
  void* d = ucp_tag_send_nbx(s.endpoints[static_cast<std::size_t>(peer)], &p->descriptor,
                             sizeof p->descriptor, ucx_tag(s.rank, tag) | kIndirectBit,
                             &send_param);
  if (UCS_PTR_IS_ERR(d)) {
    request->fail(ErrorCode::peer_failure,
                  fmt::format("rank {}: {} failed: {}", s.rank, request->describe(),
                              ucs_status_string(UCS_PTR_STATUS(d))));
    ucp_request_cancel(s.worker, r);  // its callback releases the record
  } else if (d != nullptr) {
    ucp_request_free(d);  // UCX keeps it until it is sent
  }
}

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

}  // namespace ucx
}  // namespace chorus::transport

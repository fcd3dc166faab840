// UCX transport: the fast path. One UCP context and worker per transport,
// one endpoint per peer created from the peers' worker addresses (the
// address blob), tag send/receive with the sender's rank in the top 24 bits
// of the UCX tag (UCX matches on tags alone). UCX picks the wire: shared
// memory and CMA on one host, TCP or RDMA verbs across hosts; UCX_TLS,
// UCX_NET_DEVICES and friends pass through untouched.
//
// Large messages between ranks of one host (64 KiB to 8 MiB) go by
// cross-memory attach: the sender sends a small descriptor of its buffer
// under the message's tag, the receiver copies the data out of the sender's
// memory with process_vm_readv and acks, and the send ends at the ack. A
// send that fails first withdraws its descriptor, and the receiver checks it
// is still offered after copying, so nothing withdrawn is ever taken.
// Off with CHORUS_UCX_CMA=0, and off by itself where Yama's ptrace_scope or
// a seccomp filter forbids reading a peer's memory (both ends must allow it).
//
// Endpoints: up to 64 ranks (CHORUS_UCX_CONNECT) connect() makes one to
// every peer and finishes their wire-up while every rank is connecting.
// Beyond, an endpoint is made at the first send to or receive from its peer
// (a rank of a large job holds endpoints, and UCX's lanes and buffers, only
// for the peers it talks to), and with connect_looking_up() the peer's
// address is looked up then too.
//
// Failure: endpoints use UCP_ERR_HANDLING_MODE_PEER, so a dead peer fails
// the sends to it; its pending receives are cancelled and failed by the
// error handler. Unless the user set them, UCX_KEEPALIVE_INTERVAL is 0.25 s
// (detection within seconds, not UCX's default 20) and
// UCX_POSIX_ERROR_HANDLING / UCX_SYSV_ERROR_HANDLING are on, so that shared
// memory stays usable with peer error handling.
//
// Waiting: wait_for_activity arms the worker and sleeps on its event fd, so
// oversubscribed ranks do not burn each other's cores.
#pragma once

#include "transport/transport.hpp"

#include <memory>

namespace chorus::transport {

class UcxTransport final : public Transport {
 public:
  UcxTransport(int rank, int size);
  ~UcxTransport() override;

  std::string_view name() const noexcept override { return "ucx"; }
  AddressBlob address() override;
  void connect(std::span<const AddressBlob> addresses, Deadline deadline) override;
  bool connects_lazily() const override { return lazy_endpoints(size()); }
  void connect_looking_up(const AddressBlob& rank0, AddressLookup lookup,
                          Deadline deadline) override;
  // Whether the endpoints of a job of `size` ranks are made at the first
  // message to or from each peer (CHORUS_UCX_CONNECT: eager, lazy, or auto:
  // lazy beyond 64 ranks) rather than all at connect, wired up there.
  static bool lazy_endpoints(int size);
  RequestPtr isend(int peer, Tag tag, const void* buf, std::size_t bytes) override;
  RequestPtr irecv(int peer, Tag tag, void* buf, std::size_t bytes) override;
  bool probe(int peer, Tag tag) override;
  bool progress() override;
  void wait_for_activity(Deadline until) override;
  void abort(const std::string& reason) override;

  // Whether this process may copy messages straight from a same-host peer's
  // memory (not turned off by CHORUS_UCX_CMA=0, no Yama ptrace restriction,
  // the system call allowed); decided once per process. Both ends must
  // allow it for their messages of 64 KiB-8 MiB to take that path.
  static bool cross_memory_attach_usable();

  struct State;  // UCP handles and per-peer bookkeeping: transport/ucx/state.hpp
  // For tests of the protocol, which play a peer that breaks it.
  State& state() noexcept { return *state_; }

 private:
  std::unique_ptr<State> state_;
};

}  // namespace chorus::transport

// The UCX transport's inside, shared by its files: the tag layout, the
// record of every request UCX holds (Pending), and the transport's State;
// the callbacks UCX calls and the cross-memory-attach path
// (cross_memory.cpp) and failure handling (failure.cpp) work on them.
#pragma once

#include "transport/ucx/ucx_transport.hpp"

#include <chorus/error.hpp>

#include <fmt/format.h>
#include <ucp/api/ucp.h>

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace chorus::transport {
namespace ucx {

// A UCX tag: the sender's rank above the transport's tag bits.
constexpr int kRankShift = kTagBits;
constexpr ucp_tag_t kFullMask = ~ucp_tag_t{0};

inline ucp_tag_t ucx_tag(int source, Tag tag) {
  return (static_cast<ucp_tag_t>(source) << kRankShift) | tag;
}

inline Error ucx_error(const std::string& what, ucs_status_t status) {
  return Error(ErrorCode::transport_error,
               fmt::format("UCX {}: {}", what, ucs_status_string(status)));
}

constexpr ucp_tag_t kIndirectBit = ucp_tag_t{1} << 63;  // the message is a CmaDescriptor
constexpr ucp_tag_t kDataMask = ~kIndirectBit;          // a receive takes either kind

constexpr ucp_tag_t kNoticeSource = (ucp_tag_t{1} << (64 - kRankShift)) - 1;
constexpr ucp_tag_t kNoticeTag = kNoticeSource << kRankShift;  // | sender rank
// CMA acks: | the sender's cookie. Neither control source is a rank's, with
// or without kIndirectBit (ranks stay below 2^23 - 2).
constexpr ucp_tag_t kAckSource = kNoticeSource - 1;
constexpr int kMaxUcxRanks = (1 << 23) - 2;

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
  UcxTransport::State* state = nullptr;
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

// Where a process runs, as far as its pid means anything: the host name,
// the pid namespace, and host::identity() (which adds the boot id: the
// initial pid namespace has the same id on every Linux machine, so two
// machines given one host name would otherwise take each other for local,
// checking liveness by pid and reading the wrong process's memory). Two
// ranks with the same identity can see each other's pids.
struct ProcessIdentity {
  char host[64] = {};
  char pid_namespace[48] = {};
  std::uint64_t host_identity = 0;
  std::int32_t pid = 0;
  std::int32_t cma = 0;  // 1: it reads peers' memory (and may be read)
};

// cross_memory.cpp: the path itself.
bool cma_check();
ProcessIdentity this_process();
// Whether process `pid` of this pid namespace has ended (a zombie has).
bool process_ended(int pid);
// Sends `p`'s message (`bytes` at `buf`, tag `tag`) to `peer` as a
// descriptor, after posting the receive of its ack.
void send_indirect(UcxTransport::State& s, Pending* p, int peer, Tag tag, const void* buf,
                   std::size_t bytes);
// Copies every received descriptor's message out of its sender's memory,
// acks it, and ends the receive (after progress, not in a UCX callback).
void read_indirect(UcxTransport::State& s);

// failure.cpp: abort notices, endpoint errors, closing.
void post_notice_receive(UcxTransport::State& s);
void handle_notices(UcxTransport::State& s);
// An endpoint's error names its peer lost; handle_lost_peers (after
// progress) takes in what the peer sent before, then fails it.
void on_endpoint_error(void* arg, ucp_ep_h, ucs_status_t status);
void handle_lost_peers(UcxTransport::State& s);
void close_endpoints(UcxTransport::State& s);
// Receives and drops the messages no receive took (a failed call's data, a
// late abort notice), so that destroying the worker has none to warn about.
void drop_unexpected(UcxTransport::State& s);
// Fails local peers whose processes have ended, and everything once a dead
// peer has left shared memory stuck (see failure.cpp); twice a second.
void check_local_peers(UcxTransport::State& s);

// ucx_transport.cpp: the endpoint to `peer`, made now if it is not yet
// (its address looked up first if need be); false when that failed, and
// then the peer has failed, saying why.
bool endpoint_ready(UcxTransport::State& s, int peer);

// state.cpp: UCX's completion callbacks for plain sends and receives.
void on_send(void* ucx_request, ucs_status_t status, void* user);
void on_receive(void* ucx_request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                void* user);

}  // namespace ucx

struct UcxTransport::State {
  using Pending = ucx::Pending;
  int rank = 0;
  ucp_context_h context = nullptr;
  ucp_worker_h worker = nullptr;
  int event_fd = -1;
  std::vector<ucp_ep_h> endpoints;  // by rank; null until made (lazy endpoints: at first use)
  std::vector<AddressBlob> addresses;  // by rank; empty until looked up (connect_looking_up)
  AddressLookup lookup;                // connect_looking_up()'s
  struct Peer {
    bool dead = false;
    std::string reason;  // why it is dead, or (not yet dead) why it was lost
    int local_pid = 0;  // its pid when it shares this host and pid namespace, else 0
    // The cookie of the next CMA send to it. Acks are matched by cookie, and
    // UCX does not say which endpoint a message came from, so each peer's
    // cookies start at a random point: a peer sees only its own and cannot
    // guess another's to end that send early.
    std::uint64_t next_cookie = 0;
  };
  std::vector<Peer> peers;
  bool cma = false;                 // this process reads peers' memory
  std::vector<bool> cma_with;       // ... and peer r's too (same host, both able)
  std::vector<Pending*> to_read;    // CMA descriptors received, read after progress
  std::vector<std::unique_ptr<std::pair<State*, int>>> handler_args;
  std::vector<int> lost;  // peers whose endpoints failed, not yet failed here
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
  bool notice_closed = false;  // cancelled at close: not to be posted again
  std::vector<std::pair<int, std::string>> notices;  // (rank, reason) not yet handled
  std::string abort_text;                            // what this rank sends when it aborts
  bool aborted = false;  // abort() ran: the endpoints are closed

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

  // Ends `p`'s request with `status` (a receive: `length` bytes came) and
  // recycles the record.
  void finish(Pending* p, ucs_status_t status, std::size_t length);

  // Marks `peer` dead and fails every request with it at once, naming `reason`.
  void fail_peer(int peer, const std::string& reason);
};


}  // namespace chorus::transport

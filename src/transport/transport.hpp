// The transport contract: non-blocking, tagged point-to-point messages
// between the ranks of one communicator. Algorithms see only this.
//
// - isend/irecv return a Request at once. Messages between two ranks match
//   by (peer, tag), first posted first matched, and arrive whole, in any
//   order relative to other tags. Any number may be outstanding.
// - A message that arrives before its receive is posted is kept: small ones
//   are buffered, large ones wait at the sender (rendezvous), so memory stays
//   bounded by the eager limit per message.
// - A receive smaller than the message fails that receive with an error
//   naming both sizes; it never overflows. The send completes normally.
// - A peer that disconnects, dies or breaks the protocol fails every pending
//   request with that peer at once, with an Error naming the peer; later
//   requests with it fail immediately.
// - progress() moves everything forward without blocking; wait() blocks
//   (spinning briefly, then sleeping on the transport's event source) until
//   the request ends, its peer fails, or the deadline passes.
// - A transport never sees a store or MPI: it publishes an opaque address
//   blob and connects from its peers' blobs; whoever builds the
//   communicator moves the blobs.
//
// One Transport object is used by one thread at a time (the communicator
// serializes); the local transport lets different ranks' objects be used by
// different threads concurrently.
#pragma once

#include <chorus/error.hpp>

#include "common/config.hpp"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::transport {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
using Tag = std::uint64_t;
using AddressBlob = std::vector<std::byte>;

// Tags carry 40 bits; transports may use the rest (UCX puts the sender's rank
// there, because UCX matches on tags alone).
inline constexpr int kTagBits = 40;
inline constexpr Tag kMaxTag = (Tag{1} << kTagBits) - 1;

class Request {
 public:
  enum class State : int { pending, complete, failed };

  Request(bool is_send, int peer, Tag tag, std::size_t bytes)
      : is_send_(is_send), peer_(peer), tag_(tag), bytes_(bytes) {}

  State state() const noexcept { return state_.load(std::memory_order_acquire); }
  bool done() const noexcept { return state() != State::pending; }
  bool is_send() const noexcept { return is_send_; }
  int peer() const noexcept { return peer_; }
  Tag tag() const noexcept { return tag_; }
  // The posted size; after a receive completes, received_bytes() is what came.
  std::size_t bytes() const noexcept { return bytes_; }
  std::size_t received_bytes() const noexcept { return received_; }
  // Set once the request failed; null before (another thread may be
  // failing it: the error is read only after the state says so).
  const Error* error() const noexcept {
    return state() == State::failed && error_ ? &*error_ : nullptr;
  }
  // "receive from rank 2 (tag 0x5, 4096 bytes)"
  std::string describe() const;

  // For transports: each request ends exactly once; later calls are ignored.
  void complete(std::size_t received_bytes = 0) noexcept;
  void fail(ErrorCode code, std::string message) noexcept;

 private:
  bool try_finish() noexcept;

  const bool is_send_;
  const int peer_;
  const Tag tag_;
  const std::size_t bytes_;
  std::size_t received_ = 0;
  std::optional<Error> error_;
  std::atomic<bool> finishing_{false};
  std::atomic<State> state_{State::pending};
};
using RequestPtr = std::shared_ptr<Request>;

class Transport {
 public:
  Transport(int rank, int size);
  virtual ~Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  int rank() const noexcept { return rank_; }
  int size() const noexcept { return size_; }
  virtual std::string_view name() const noexcept = 0;

  // This rank's address, to be given to every peer; valid before connect().
  virtual AddressBlob address() = 0;
  // Connects to every peer (where connects_lazily(), each link is made at
  // its first message instead); addresses[r] is rank r's blob
  // (addresses[rank()] is this one's). Throws chorus::Error on timeout,
  // naming the missing ranks.
  virtual void connect(std::span<const AddressBlob> addresses, Deadline deadline) = 0;

  // Rank `rank`'s address blob by `deadline` (from the store, say), or a
  // chorus::Error saying why not.
  using AddressLookup = std::function<AddressBlob(int rank, Deadline deadline)>;
  // Whether this transport makes its link to a peer at the first message
  // to or from it (TCP: CHORUS_SOCKET_CONNECT, UCX: CHORUS_UCX_CONNECT; by
  // default beyond 64 ranks), so that it may connect_looking_up().
  virtual bool connects_lazily() const { return false; }
  // Instead of connect(): connects knowing only rank 0's address and this
  // rank's own; a peer's address is looked up with `lookup` when its link
  // is first wanted (once per peer, on the thread that drives the
  // transport, blocking it that long). A peer whose address cannot be
  // looked up fails with the lookup's reason. Only where connects_lazily();
  // elsewhere Error(unsupported).
  virtual void connect_looking_up(const AddressBlob& rank0, AddressLookup lookup,
                                  Deadline deadline);

  // Throw chorus::Error (invalid argument) for a bad peer, a tag above
  // kMaxTag, or a null buffer with bytes > 0. Sends to self are allowed.
  virtual RequestPtr isend(int peer, Tag tag, const void* buf, std::size_t bytes) = 0;
  virtual RequestPtr irecv(int peer, Tag tag, void* buf, std::size_t bytes) = 0;
  // Whether a message from `peer` with `tag` has arrived (whole or begun)
  // and no receive has taken it yet, as of the last progress(); never
  // blocks or progresses. A receive posted for it next takes it. (What a receive from any source is built on: the
  // communicator probes every peer, then posts to the one that sent.)
  virtual bool probe(int peer, Tag tag) = 0;

  // Moves everything forward without blocking; true if anything happened.
  virtual bool progress() = 0;
  // Sleeps until the transport may have something to do, or `until`.
  virtual void wait_for_activity(Deadline until) = 0;
  // Fails every pending request with `reason` and tells peers, where the
  // transport can, that this rank is gone. The transport is unusable after.
  virtual void abort(const std::string& reason) = 0;

  // Progress, then whether `request` is done.
  bool test(const Request& request);
  // Until `request` ends: throws its error if it failed, or a timeout Error
  // naming the peer, tag and how long it waited. `on_poll`, when given, runs
  // after every progress pass (a collective advances side work with it, and
  // may end the wait by throwing).
  void wait(const Request& request, Deadline deadline,
            const std::function<void()>& on_poll = nullptr);
  // Until all end; the first failure among them (whichever request it is)
  // is thrown at once.
  void wait_all(std::span<const RequestPtr> requests, Deadline deadline,
                const std::function<void()>& on_poll = nullptr);

 protected:
  // Argument checks shared by every implementation.
  void check_message(const char* what, int peer, Tag tag, const void* buf, std::size_t bytes) const;

 private:
  const int rank_;
  const int size_;
};

// Whether a transport of a job of `size` ranks connects lazily, as the
// setting `variable` says (CHORUS_SOCKET_CONNECT, CHORUS_UCX_CONNECT):
// eager, lazy, or auto (lazy beyond 64 ranks); another value is an
// invalid_argument Error naming the variable.
bool lazy_by_setting(config::Variable variable, int size);

// The error text for a message larger than its receive, shared by every
// transport so that the conformance tests can check it once.
std::string truncation_message(int receiver, int sender, Tag tag, std::size_t sent,
                               std::size_t capacity);

// How long wait() spins on progress() before sleeping; CHORUS_SPIN_US
// (default 50 us) sets it. Short, because ranks may outnumber cores.
std::chrono::microseconds spin_before_sleep();

// A deadline `seconds` from now (CHORUS_TIMEOUT's default when absent).
// The longest wait Chorus accepts (CHORUS_TIMEOUT, Options::timeout): about
// 116 days, far from where the clock's arithmetic would overflow.
inline constexpr double kMaxTimeoutSeconds = 1e7;
// Now + `seconds`, clamped to [0, kMaxTimeoutSeconds] (NaN counts as 0):
// callers check what users give them; this only keeps the arithmetic defined.
Deadline deadline_after(double seconds);

}  // namespace chorus::transport

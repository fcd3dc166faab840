#include "transport/local/local_transport.hpp"

#include "transport/matching.hpp"

#include <fmt/format.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <vector>

namespace chorus::transport {
namespace {


// A message that arrived before its receive: either copied (eager) or still
// in the sender's buffer, whose send request completes when it is taken.
struct ArrivedMessage {
  int source;
  Tag tag;
  std::vector<std::byte> copy;
  const void* sender_buf = nullptr;
  std::size_t bytes = 0;
  RequestPtr send_request;  // set for messages left at the sender
};

}  // namespace

// One mailbox per rank. `data` guards the queues; `signal` guards only the
// event counter. No code holds two mailboxes' locks at once.
struct Mailbox {
  std::mutex data;
  std::deque<PostedReceive> posted;
  std::deque<ArrivedMessage> arrived;
  // Set once when the rank leaves; gone_reason is written before it.
  std::atomic<bool> gone{false};
  std::string gone_reason;

  std::mutex signal;
  std::condition_variable changed;
  std::uint64_t events = 0;

  void notify() {
    {
      std::lock_guard lock(signal);
      ++events;
    }
    changed.notify_all();
  }
};

struct LocalFabric::State {
  explicit State(int n) : boxes(static_cast<std::size_t>(n)) {
    for (auto& b : boxes) b = std::make_unique<Mailbox>();
  }
  std::vector<std::unique_ptr<Mailbox>> boxes;
  Mailbox& box(int rank) { return *boxes[static_cast<std::size_t>(rank)]; }
};

LocalFabric::LocalFabric(int size) : state_(std::make_unique<State>(size)) {}
LocalFabric::~LocalFabric() = default;

std::shared_ptr<LocalFabric> LocalFabric::create(int size) {
  if (size < 1)
    throw Error(ErrorCode::invalid_argument, fmt::format("local fabric: size {} < 1", size));
  return std::shared_ptr<LocalFabric>(new LocalFabric(size));
}

int LocalFabric::size() const noexcept { return static_cast<int>(state_->boxes.size()); }

LocalTransport::LocalTransport(std::shared_ptr<LocalFabric> fabric, int rank)
    : Transport(rank, fabric ? fabric->size() : 0), fabric_(std::move(fabric)) {}

LocalTransport::~LocalTransport() {
  if (!left_) leave(fmt::format("rank {} closed its transport", rank()));
}

AddressBlob LocalTransport::address() {
  const auto r = static_cast<std::uint32_t>(rank());
  AddressBlob blob(sizeof r);
  std::memcpy(blob.data(), &r, sizeof r);
  return blob;
}

void LocalTransport::connect(std::span<const AddressBlob> addresses, Deadline) {
  // The fabric already links every rank; the blobs only have to agree.
  if (addresses.size() != static_cast<std::size_t>(size()))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("local connect: {} addresses for {} ranks", addresses.size(), size()));
}

RequestPtr LocalTransport::isend(int peer, Tag tag, const void* buf, std::size_t bytes) {
  check_message("isend", peer, tag, buf, bytes);
  auto request = std::make_shared<Request>(true, peer, tag, bytes);
  Mailbox& box = fabric_->state_->box(peer);
  std::unique_lock lock(box.data);
  if (box.gone.load(std::memory_order_acquire)) {
    request->fail(ErrorCode::peer_failure, fmt::format("rank {}: cannot send to rank {}: {}",
                                                       rank(), peer, box.gone_reason));
    return request;
  }
  if (auto receive = take_first(box.posted, [&](const PostedReceive& r) {
        return r.source == rank() && r.tag == tag;
      })) {
    // Copy while holding the receiver's lock: a receiver that leaves sweeps
    // its mailbox under it, so it cannot return (and free the buffer it had
    // posted) in the middle of this copy.
    deliver(*receive, peer, buf, bytes);
    lock.unlock();
    request->complete();
    box.notify();
    return request;
  }
  ArrivedMessage message{rank(), tag, {}, nullptr, bytes, nullptr};
  if (bytes <= kEagerLimit) {
    const auto* p = static_cast<const std::byte*>(buf);
    message.copy.assign(p, p + bytes);
    request->complete();
  } else {
    message.sender_buf = buf;
    message.send_request = request;
  }
  box.arrived.push_back(std::move(message));
  lock.unlock();
  box.notify();
  return request;
}

bool LocalTransport::probe(int peer, Tag tag) {
  check_message("probe", peer, tag, nullptr, 0);
  Mailbox& mine = fabric_->state_->box(rank());
  std::lock_guard lock(mine.data);
  for (const ArrivedMessage& m : mine.arrived)
    if (m.source == peer && m.tag == tag) return true;
  return false;
}

RequestPtr LocalTransport::irecv(int peer, Tag tag, void* buf, std::size_t bytes) {
  check_message("irecv", peer, tag, buf, bytes);
  auto request = std::make_shared<Request>(false, peer, tag, bytes);
  Mailbox& mine = fabric_->state_->box(rank());
  Mailbox& theirs = fabric_->state_->box(peer);
  std::unique_lock lock(mine.data);
  const PostedReceive receive{peer, tag, static_cast<std::byte*>(buf), bytes, request};
  if (auto arrived = take_first(mine.arrived, [&](const ArrivedMessage& m) {
        return m.source == peer && m.tag == tag;
      })) {
    ArrivedMessage& message = *arrived;
    // A message left at the sender is copied while we still hold our lock: a
    // sender that leaves sweeps our mailbox under it, so it cannot return
    // (and free its buffer) in the middle of this copy.
    if (!message.send_request) lock.unlock();
    deliver(receive, rank(), message.send_request ? message.sender_buf : message.copy.data(),
            message.bytes);
    if (message.send_request) {
      message.send_request->complete();
      lock.unlock();
      theirs.notify();
    }
    return request;
  }
  // Checked while holding our lock: a peer that leaves sets `gone` before it
  // sweeps our posted receives under this lock, so either we see it here or
  // its sweep finds and fails the receive we post.
  if (theirs.gone.load(std::memory_order_acquire)) {
    request->fail(ErrorCode::peer_failure, fmt::format("rank {}: cannot receive from rank {}: {}",
                                                       rank(), peer, theirs.gone_reason));
    return request;
  }
  mine.posted.push_back(receive);
  return request;
}

bool LocalTransport::progress() {
  // Everything happens when it is posted; report whether anyone signalled.
  Mailbox& mine = fabric_->state_->box(rank());
  std::lock_guard lock(mine.signal);
  const bool changed = mine.events != seen_events_;
  seen_events_ = mine.events;
  return changed;
}

void LocalTransport::wait_for_activity(Deadline until) {
  Mailbox& mine = fabric_->state_->box(rank());
  std::unique_lock lock(mine.signal);
  mine.changed.wait_until(lock, until, [&] { return mine.events != seen_events_; });
}

void LocalTransport::abort(const std::string& reason) {
  if (!left_) leave(fmt::format("rank {} aborted: {}", rank(), reason));
}

// Marks this rank gone and fails everything that involves it, on both sides.
void LocalTransport::leave(const std::string& reason) {
  left_ = true;
  auto& boxes = fabric_->state_->boxes;
  std::vector<RequestPtr> to_fail;
  {
    Mailbox& mine = *boxes[static_cast<std::size_t>(rank())];
    mine.gone_reason = reason;
    mine.gone.store(true, std::memory_order_seq_cst);
    std::lock_guard lock(mine.data);
    for (auto& p : mine.posted) to_fail.push_back(p.request);
    for (auto& m : mine.arrived)
      if (m.send_request) to_fail.push_back(m.send_request);  // their data never taken
    mine.posted.clear();
    mine.arrived.clear();
  }
  for (auto& r : to_fail) r->fail(ErrorCode::peer_failure, reason);
  for (int other = 0; other < size(); ++other) {
    if (other == rank()) continue;
    Mailbox& box = *boxes[static_cast<std::size_t>(other)];
    std::vector<RequestPtr> theirs;
    {
      std::lock_guard lock(box.data);
      for (auto it = box.posted.begin(); it != box.posted.end();) {
        if (it->source == rank()) {
          theirs.push_back(it->request);
          it = box.posted.erase(it);
        } else {
          ++it;
        }
      }
      // Our own large sends waiting there can no longer be taken.
      for (auto it = box.arrived.begin(); it != box.arrived.end();) {
        if (it->source == rank() && it->send_request) {
          it->send_request->fail(ErrorCode::peer_failure, reason);
          it = box.arrived.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& r : theirs)
      r->fail(ErrorCode::peer_failure,
              fmt::format("rank {}: receive from rank {} failed: {}", other, rank(), reason));
    box.notify();
  }
}

}  // namespace chorus::transport

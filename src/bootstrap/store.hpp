// The rendezvous store: a small key-value service through which the ranks of
// a job find each other before any transport exists.
//
//   tcp://host:port   served by a thread of rank 0 (open_store with serve =
//                     true) or by a standalone process (chorus_store_server,
//                     or StoreServer inside a launcher); clients retry until
//                     it is up or the deadline passes.
//   file:///dir       a directory on a file system every rank sees; one file
//                     per key, written atomically (rename). The directory
//                     must be fresh for each job: stale keys are not cleaned.
//
// Every call has a deadline. get() waits for all its keys at once, so that a
// rank fetches every peer's address in one round trip, and a timeout names
// the keys that never appeared.
#pragma once

#include <chorus/error.hpp>

#include "transport/transport.hpp"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace chorus::bootstrap {

using transport::Deadline;
using Bytes = std::vector<std::byte>;

// A get() that timed out: missing() lists the keys that were never set.
class StoreTimeout : public Error {
 public:
  StoreTimeout(const std::string& message, std::vector<std::string> missing)
      : Error(ErrorCode::timeout, message), missing_(std::move(missing)) {}
  const std::vector<std::string>& missing() const noexcept { return missing_; }

 private:
  std::vector<std::string> missing_;
};

class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, std::span<const std::byte> value, Deadline deadline) = 0;
  // The values of `keys`, in order, once all exist.
  virtual std::vector<Bytes> get(std::span<const std::string> keys, Deadline deadline) = 0;
  // Adds `delta` to the integer at `key` (0 when unset); returns the new value.
  virtual std::int64_t add(const std::string& key, std::int64_t delta, Deadline deadline) = 0;
  virtual std::string url() const = 0;
  // Tells the store that this client stays connected only for occasional
  // lookups from now on (a rank that looks its peers' addresses up when it
  // first needs them): a serving rank that finishes does not wait for it to
  // leave, as it waits for clients still in the middle of start-up. Its
  // keys stay while it is connected.
  virtual void park(Deadline deadline) { (void)deadline; }

  // Returns once `count` callers have entered the barrier called `name`.
  void barrier(const std::string& name, int count, Deadline deadline);
};

// Opens the store at `url`. With serve = true and a tcp:// URL, this process
// also serves the store (the usual choice for rank 0) unless something
// already listens on that port, such as chorus_store_server; then it is a
// client like every other rank.
std::unique_ptr<Store> open_store(const std::string& url, bool serve, Deadline deadline);

Bytes to_bytes(const std::string& s);
std::string to_string(const Bytes& b);

}  // namespace chorus::bootstrap

// Ranks as threads of one process: the transport contract without a
// network, for unit tests and for running the real algorithms with hundreds
// of ranks in one process.
//
// A LocalFabric links `size` LocalTransports; each rank's transport is used
// by that rank's thread. Messages up to the eager limit are copied at send
// time; larger ones wait, uncopied, until the matching receive is posted and
// are then copied once, straight into it.
#pragma once

#include "transport/transport.hpp"

#include <memory>

namespace chorus::transport {

class LocalFabric {
 public:
  static std::shared_ptr<LocalFabric> create(int size);
  ~LocalFabric();
  int size() const noexcept;

  struct State;  // defined in local_transport.cpp

 private:
  explicit LocalFabric(int size);
  std::unique_ptr<State> state_;
  friend class LocalTransport;
};

class LocalTransport final : public Transport {
 public:
  // Messages above this many bytes wait at the sender for their receive.
  static constexpr std::size_t kEagerLimit = 64 * 1024;

  LocalTransport(std::shared_ptr<LocalFabric> fabric, int rank);
  ~LocalTransport() override;

  std::string_view name() const noexcept override { return "local"; }
  AddressBlob address() override;
  void connect(std::span<const AddressBlob> addresses, Deadline deadline) override;
  RequestPtr isend(int peer, Tag tag, const void* buf, std::size_t bytes) override;
  RequestPtr irecv(int peer, Tag tag, void* buf, std::size_t bytes) override;
  bool probe(int peer, Tag tag) override;
  bool progress() override;
  void wait_for_activity(Deadline until) override;
  void abort(const std::string& reason) override;

 private:
  void leave(const std::string& reason);

  std::shared_ptr<LocalFabric> fabric_;
  std::uint64_t seen_events_ = 0;
  bool left_ = false;
};

}  // namespace chorus::transport

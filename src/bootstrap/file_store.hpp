// file:///dir rendezvous store: one file per key in a directory that every
// rank sees. set() writes a temporary file and renames it into place, so a
// reader sees a whole value or none; add() takes an flock on the key.
#pragma once

#include "bootstrap/store.hpp"

namespace chorus::bootstrap {

class FileStore final : public Store {
 public:
  explicit FileStore(std::string directory);

  void set(const std::string& key, std::span<const std::byte> value, Deadline deadline) override;
  std::vector<Bytes> get(std::span<const std::string> keys, Deadline deadline) override;
  std::int64_t add(const std::string& key, std::int64_t delta, Deadline deadline) override;
  std::string url() const override { return "file://" + directory_; }

 private:
  std::string path_of(const std::string& key) const;

  std::string directory_;
};

}  // namespace chorus::bootstrap

#include "bootstrap/file_store.hpp"

#include "common/socket.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

namespace chorus::bootstrap {
namespace {

std::optional<Bytes> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return Bytes(reinterpret_cast<const std::byte*>(data.data()),
               reinterpret_cast<const std::byte*>(data.data()) + data.size());
}

void write_atomically(const std::string& path, std::span<const std::byte> value) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  const std::string tmp = fmt::format("{}.tmp.{}.{:x}", path, getpid(), rng());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(value.data()),
              static_cast<std::streamsize>(value.size()));
    if (!out)
      throw Error(ErrorCode::transport_error, fmt::format("file store: cannot write {}", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    throw Error(ErrorCode::transport_error,
                fmt::format("file store: rename to {}: {}", path, net::errno_text(errno)));
}

}  // namespace

FileStore::FileStore(std::string directory) : directory_(std::move(directory)) {
  if (directory_.empty() || directory_.front() != '/')
    throw Error(ErrorCode::invalid_argument,
                "CHORUS_STORE=file://" + directory_ + ": the path must be absolute (file:///dir)");
  if (::mkdir(directory_.c_str(), 0777) != 0 && errno != EEXIST)
    throw Error(ErrorCode::invalid_argument, fmt::format("file store: cannot create {}: {}",
                                                         directory_, net::errno_text(errno)));
}

// Keys may hold any byte; file names get [A-Za-z0-9._-] and %XX for the rest.
std::string FileStore::path_of(const std::string& key) const {
  std::string name;
  for (unsigned char c : key) {
    if (std::isalnum(c) || c == '.' || c == '_' || c == '-')
      name.push_back(static_cast<char>(c));
    else
      name += fmt::format("%{:02X}", c);
  }
  return directory_ + "/" + name;
}

void FileStore::set(const std::string& key, std::span<const std::byte> value, Deadline) {
  write_atomically(path_of(key), value);
}

std::vector<Bytes> FileStore::get(std::span<const std::string> keys, Deadline deadline) {
  std::vector<Bytes> values(keys.size());
  std::vector<bool> have(keys.size(), false);
  auto pause = std::chrono::milliseconds(1);
  while (true) {
    std::vector<std::string> missing;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      if (have[i]) continue;
      if (auto v = read_file(path_of(keys[i]))) {
        values[i] = std::move(*v);
        have[i] = true;
      } else {
        missing.push_back(keys[i]);
      }
    }
    if (missing.empty()) return values;
    if (transport::Clock::now() >= deadline) {
      std::string list;
      for (std::size_t i = 0; i < missing.size() && i < 16; ++i)
        list += (i ? ", " : "") + missing[i];
      if (missing.size() > 16) list += fmt::format(" and {} more", missing.size() - 16);
      throw StoreTimeout(fmt::format("store {}: keys never set: {}", url(), list), missing);
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::milliseconds(50));
  }
}

std::int64_t FileStore::add(const std::string& key, std::int64_t delta, Deadline) {
  const std::string path = path_of(key);
  net::Fd lock(::open((path + ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0666));
  if (!lock || ::flock(lock.get(), LOCK_EX) != 0)
    throw Error(ErrorCode::transport_error,
                fmt::format("file store: cannot lock {}.lock: {}", path, net::errno_text(errno)));
  std::int64_t value = 0;
  if (auto old = read_file(path); old && old->size() == sizeof value)
    std::memcpy(&value, old->data(), sizeof value);
  value += delta;
  write_atomically(path, std::as_bytes(std::span(&value, 1)));
  return value;  // the lock goes with the fd
}

}  // namespace chorus::bootstrap

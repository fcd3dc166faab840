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
  auto failed = [&](const char* what) {
    const int error = errno;
    ::unlink(tmp.c_str());
    return Error(ErrorCode::transport_error,
                 fmt::format("file store: cannot {} {}: {}", what, tmp, net::errno_text(error)));
  };
  {
    net::Fd out(::open(tmp.c_str(), O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600));
    if (!out) throw failed("create");
    std::size_t done = 0;
    while (done < value.size()) {
      const ssize_t n = ::write(out.get(), value.data() + done, value.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) throw failed("write");
      done += static_cast<std::size_t>(n);
    }
    if (::close(out.release()) != 0) throw failed("close");
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
  if (::mkdir(directory_.c_str(), 0700) != 0 && errno != EEXIST)
    throw Error(ErrorCode::invalid_argument, fmt::format("file store: cannot create {}: {}",
                                                         directory_, net::errno_text(errno)));
  // Whoever can write this directory can plant a rank's address in it, and
  // whoever can read it learns the addresses: it must be ours and closed to
  // everyone else. A directory someone else made first (a predictable name
  // in /tmp) is refused, not used.
  struct stat st {};
  if (::lstat(directory_.c_str(), &st) != 0)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("file store: {}: {}", directory_, net::errno_text(errno)));
  if (!S_ISDIR(st.st_mode))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("file store: {} is not a directory (a symbolic link or a file is "
                            "refused)",
                            directory_));
  if (st.st_uid != ::geteuid())
    throw Error(ErrorCode::invalid_argument,
                fmt::format("file store: {} belongs to uid {}, not to this user ({}): someone "
                            "else made it, so it is not used; choose another directory",
                            directory_, st.st_uid, ::geteuid()));
  if (st.st_mode & (S_IRWXG | S_IRWXO))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("file store: {} has mode {:o}: group or others may use it; "
                            "chmod 700 it (or let Chorus create it)",
                            directory_, st.st_mode & 0777));
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
  net::Fd lock(::open((path + ".lock").c_str(), O_CREAT | O_RDWR | O_CLOEXEC, 0600));
  if (!lock || ::flock(lock.get(), LOCK_EX) != 0)
    throw Error(ErrorCode::transport_error,
                fmt::format("file store: cannot lock {}.lock: {}", path, net::errno_text(errno)));
  std::int64_t value = 0;
  if (auto old = read_file(path); old && old->size() == sizeof value)
    std::memcpy(&value, old->data(), sizeof value);
  if (__builtin_add_overflow(value, delta, &value))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("file store: add({}, {}): the counter would overflow", key, delta));
  write_atomically(path, std::as_bytes(std::span(&value, 1)));
  return value;  // the lock goes with the fd
}

}  // namespace chorus::bootstrap

// Encoding of integers and byte strings for messages between processes.
// Little-endian, fixed-width. Reader checks every length against what is
// left before using it, so a peer's bytes can never make it read out of
// bounds: a short or malformed message throws chorus::Error.
#pragma once

#include <chorus/error.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

namespace chorus::wire {

class Writer {
 public:
  template <class T>
  requires std::is_integral_v<T> Writer& put(T value) {
    append(&value, sizeof value);
    return *this;
  }
  Writer& put_bytes(std::span<const std::byte> data) {
    put(static_cast<std::uint32_t>(data.size()));
    append(data.data(), data.size());
    return *this;
  }
  Writer& put_string(const std::string& s) {
    return put_bytes(std::as_bytes(std::span(s.data(), s.size())));
  }
  std::vector<std::byte>& bytes() { return bytes_; }

 private:
  // resize + memcpy rather than insert: GCC 12 warns falsely on the latter.
  void append(const void* data, std::size_t n) {
    const std::size_t at = bytes_.size();
    bytes_.resize(at + n);
    if (n > 0) std::memcpy(bytes_.data() + at, data, n);
  }
  std::vector<std::byte> bytes_;
};

class Reader {
 public:
  // `what` names the message in errors ("store reply from host:port").
  Reader(std::span<const std::byte> data, std::string what) : data_(data), what_(std::move(what)) {}

  template <class T>
  requires std::is_integral_v<T> T get() {
    need(sizeof(T));
    T value;
    std::memcpy(&value, data_.data() + offset_, sizeof value);
    offset_ += sizeof value;
    return value;
  }
  std::vector<std::byte> get_bytes() {
    const auto n = get<std::uint32_t>();
    need(n);
    std::vector<std::byte> out(data_.begin() + static_cast<std::ptrdiff_t>(offset_),
                               data_.begin() + static_cast<std::ptrdiff_t>(offset_ + n));
    offset_ += n;
    return out;
  }
  std::string get_string() {
    auto b = get_bytes();
    return std::string(reinterpret_cast<const char*>(b.data()), b.size());
  }
  bool at_end() const { return offset_ == data_.size(); }

 private:
  void need(std::size_t n) const {
    if (n > data_.size() - offset_)
      throw Error(ErrorCode::peer_failure, what_ + ": malformed (needs " + std::to_string(n) +
                                               " more bytes at offset " + std::to_string(offset_) +
                                               " of " + std::to_string(data_.size()) + ")");
  }
  std::span<const std::byte> data_;
  std::size_t offset_ = 0;
  std::string what_;
};

}  // namespace chorus::wire

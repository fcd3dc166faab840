#include "common/host.hpp"

#include <fmt/format.h>

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

namespace chorus::host {
namespace {

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::uint64_t namespace_inode(const char* which) {
  struct stat st {};
  return ::stat(fmt::format("/proc/self/ns/{}", which).c_str(), &st) == 0 ? st.st_ino : 0;
}

}  // namespace

std::string name() {
  char text[256] = {};
  ::gethostname(text, sizeof text - 1);
  return text;
}

std::uint64_t identity() {
  const std::string text = fmt::format("{}|{}|{}|{}", name(),
                                       read_first_line("/proc/sys/kernel/random/boot_id"),
                                       namespace_inode("net"), namespace_inode("pid"));
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
  return hash;
}

}  // namespace chorus::host

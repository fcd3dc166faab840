// A file a test writes in the temporary directory, named for this process
// (two suites may run at once, as a sanitizer build's beside the Release
// one) and removed when it goes out of scope, however the test ends.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace chorus::testing {

class ScratchFile {
 public:
  explicit ScratchFile(const std::string& name)
      : path_(::testing::TempDir() + "/" + name + "-" + std::to_string(::getpid())) {}
  ~ScratchFile() { std::remove(path_.c_str()); }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

}  // namespace chorus::testing

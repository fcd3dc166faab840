// A tuning file that holds only a cost model, named by CHORUS_TUNING_FILE
// while it lives: for tests whose communicators need not probe. Header-only
// and without Chorus's internals, for the in-process and the multiprocess
// tests alike.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

namespace chorus::testing {

// While it lives, CHORUS_TUNING_FILE names a tuning file in `dir` (its name
// this process's own) that holds only a cost model (`alpha` seconds a step,
// and fixed others): the communicators made meanwhile take that model
// without probing (the probe is most of the time of a test whose calls name
// their algorithms: about a second at p = 4 on two cores). Processes started
// meanwhile inherit the setting.
class ModelOnlyTuningFile {
 public:
  explicit ModelOnlyTuningFile(const std::string& dir, double alpha = 2e-6)
      : path_(dir + "/chorus-model-only-" + std::to_string(::getpid()) + ".tune") {
    std::ofstream(path_) << "model " << alpha << " 1e-10 5e-11 3e-07\n";
    ::setenv("CHORUS_TUNING_FILE", path_.c_str(), 1);
  }
  ~ModelOnlyTuningFile() {
    ::unsetenv("CHORUS_TUNING_FILE");
    std::remove(path_.c_str());
  }
  ModelOnlyTuningFile(const ModelOnlyTuningFile&) = delete;
  ModelOnlyTuningFile& operator=(const ModelOnlyTuningFile&) = delete;

 private:
  std::string path_;
};

}  // namespace chorus::testing

// Runs a function as every rank of an in-process communicator (ranks are
// threads over the local transport) and collects what each rank threw.
#pragma once

#include "core/engine.hpp"
#include "transport/local/local_transport.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace chorus::testing {

struct RankOutcome {
  bool failed = false;
  ErrorCode code{};
  std::string message;
};

inline std::vector<RankOutcome> run_ranks(int p, const std::function<void(Communicator&)>& body,
                                          const Options& options = {}) {
  auto fabric = transport::LocalFabric::create(p);
  std::vector<RankOutcome> outcomes(static_cast<std::size_t>(p));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r)
    threads.emplace_back([&, r] {
      RankOutcome& out = outcomes[static_cast<std::size_t>(r)];
      try {
        Communicator comm =
            make_communicator(std::make_unique<transport::LocalTransport>(fabric, r), nullptr, options);
        body(comm);
      } catch (const Error& e) {
        out = {true, e.code(), e.what()};
      } catch (const std::exception& e) {
        out = {true, ErrorCode::internal, e.what()};
      }
    });
  for (auto& t : threads) t.join();
  return outcomes;
}

// While it lives, CHORUS_TUNING_FILE names a tuning file in `dir` (its name
// this process's own) that holds only a cost model (`alpha` seconds a step,
// and fixed others): the communicators made meanwhile take that model
// without probing (the probe is most of the time of a test whose calls name
// their algorithms: about a second at p = 4 on two cores).
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

// Runs a function as every rank of an in-process communicator (ranks are
// threads over the local transport) and collects what each rank threw.
#pragma once

#include "core/engine.hpp"
#include "model_only_tuning_file.hpp"
#include "transport/local/local_transport.hpp"

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

}  // namespace chorus::testing

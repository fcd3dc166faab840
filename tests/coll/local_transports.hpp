// Runs a function as every rank of p threads over the local transport (the
// algorithms' level, below a communicator), keeps each rank until all are
// done (a rank that leaves fails its peers' receives), and expects that no
// rank threw.
#pragma once

#include "transport/local/local_transport.hpp"

#include <gtest/gtest.h>

#include <cstddef>
#include <exception>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace chorus::testing {

inline void run_on_local_transports(int p,
                                    const std::function<void(transport::LocalTransport&, int rank)>& body) {
  auto fabric = transport::LocalFabric::create(p);
  std::vector<std::string> errors(static_cast<std::size_t>(p));
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r)
    threads.emplace_back([&, r] {
      try {
        transport::LocalTransport t(fabric, r);
        body(t, r);
        std::byte token{};
        std::vector<transport::RequestPtr> reqs;
        for (int q = 0; q < p; ++q)
          if (q != r) reqs.push_back(t.irecv(q, 999, &token, 0));
        for (int q = 0; q < p; ++q)
          if (q != r) reqs.push_back(t.isend(q, 999, &token, 0));
        t.wait_all(reqs, transport::deadline_after(120));
      } catch (const std::exception& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& th : threads) th.join();
  for (int r = 0; r < p; ++r) EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r;
}

}  // namespace chorus::testing

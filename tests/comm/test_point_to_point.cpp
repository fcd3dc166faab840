// Communicator::send/recv: tagged point-to-point messages beside the
// collectives (ranks are threads over the local transport; the torch
// backend's tests run them through processes over TCP).
#include "local_ranks.hpp"

#include <chorus/chorus.h>
#include <chorus/chorus.hpp>

#include <gtest/gtest.h>

#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

namespace chorus {
namespace {

using testing::run_ranks;
using namespace std::chrono_literals;

void expect_all_ok(const std::vector<testing::RankOutcome>& outcomes) {
  for (std::size_t r = 0; r < outcomes.size(); ++r)
    EXPECT_FALSE(outcomes[r].failed) << "rank " << r << ": " << outcomes[r].message;
}

// Waits for `work`, throwing if it has not ended within 10 s.
void finish(Work& work) {
  if (!work.wait(10s)) throw std::runtime_error("did not end within 10 s");
}

std::vector<float> pattern(std::size_t n, int rank, std::uint32_t tag) {
  std::vector<float> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(rank * 1000 + tag * 7 + i % 97);
  return v;
}

TEST(PointToPoint, BothRanksSendFirstWithoutDeadlockAtEverySize) {
  // Large messages wait at the sender (rendezvous): a send that blocked the
  // communicator would deadlock here.
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    const int peer = 1 - comm.rank();
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{1} << 20}) {
      const auto out = pattern(n, comm.rank(), 3);
      std::vector<float> in(n, -1.0f);
      Work sent = comm.send_async(out.data(), n, DataType::float32, peer, 3);
      Work got = comm.recv_async(in.data(), n, DataType::float32, peer, 3);
      finish(sent);
      finish(got);
      if (in != pattern(n, peer, 3)) throw std::runtime_error("wrong data at n=" + std::to_string(n));
      if (got.source() != peer) throw std::runtime_error("wrong source");
    }
  }));
}

TEST(PointToPoint, TagsSeparateMessagesAndOneTagKeepsItsOrder) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    if (comm.rank() == 0) {
      for (std::uint32_t tag : {5u, 9u, 5u}) {
        std::vector<float> v = pattern(16, static_cast<int>(tag), tag);
        v[0] = static_cast<float>(tag * 100 + (tag == 5 ? 0 : 1));
        comm.send(v.data(), v.size(), DataType::float32, 1, tag);
      }
      int last = 42;
      comm.send(&last, 1, DataType::int32, 1, 5);
      return;
    }
    std::vector<float> a(16), b(16), c(16);
    // Posted in another order than sent: tag 9 first.
    Work nine = comm.recv_async(b.data(), 16, DataType::float32, 0, 9);
    Work five_first = comm.recv_async(a.data(), 16, DataType::float32, 0, 5);
    Work five_second = comm.recv_async(c.data(), 16, DataType::float32, 0, 5);
    finish(nine);
    finish(five_first);
    finish(five_second);
    if (b[0] != 901.0f || a[0] != 500.0f || c[0] != 500.0f)
      throw std::runtime_error("tags or order mixed up");
    int last = 0;
    comm.recv(&last, 1, DataType::int32, 0, 5);
    if (last != 42) throw std::runtime_error("last message wrong");
  }));
}

TEST(PointToPoint, AnySourceReceivesFromEverySenderAndSaysWhich) {
  expect_all_ok(run_ranks(4, [](Communicator& comm) {
    if (comm.rank() != 0) {
      const std::int64_t value = comm.rank() * 11;
      comm.send(&value, 1, DataType::int64, 0, 1);
      return;
    }
    std::vector<int> seen;
    for (int i = 0; i < 3; ++i) {
      std::int64_t value = 0;
      const int from = comm.recv(&value, 1, DataType::int64, Communicator::kAnySource, 1);
      if (value != from * 11) throw std::runtime_error("value does not match its source");
      seen.push_back(from);
    }
    std::sort(seen.begin(), seen.end());
    if (seen != std::vector<int>{1, 2, 3}) throw std::runtime_error("senders missed");
  }));
}

TEST(PointToPoint, RunsBesideCollectivesWithoutMixing) {
  // The receive is posted before an allreduce that the peer runs before it
  // sends: the message must not be taken by the collective nor block it.
  expect_all_ok(run_ranks(3, [](Communicator& comm) {
    std::vector<float> v(4096, 1.0f);
    std::vector<float> in(4096, 0.0f);
    Work got;
    if (comm.rank() == 0) got = comm.recv_async(in.data(), in.size(), DataType::float32, 2, 0);
    Work reduced = comm.allreduce_async(std::span<float>(v), ReduceOp::sum);
    if (comm.rank() == 2) {
      const auto out = pattern(4096, 2, 0);
      comm.send(out.data(), out.size(), DataType::float32, 0, 0);
    }
    finish(reduced);
    if (v[17] != 3.0f) throw std::runtime_error("allreduce wrong");
    if (comm.rank() == 0) {
      finish(got);
      if (in != pattern(4096, 2, 0)) throw std::runtime_error("message wrong");
    }
    comm.barrier();
  }));
}

TEST(PointToPoint, AMessageOfAnotherSizeIsAnErrorNamingBothSizes) {
  const auto outcomes = run_ranks(2, [](Communicator& comm) {
    std::vector<float> v(100, 1.0f);
    if (comm.rank() == 0) {
      comm.send(v.data(), 50, DataType::float32, 1, 2);
      return;
    }
    comm.recv(v.data(), 100, DataType::float32, 0, 2);
  });
  ASSERT_TRUE(outcomes[1].failed);
  for (const char* needle : {"receive from rank 0", "tag 2", "200 bytes", "400"})
    EXPECT_NE(outcomes[1].message.find(needle), std::string::npos)
        << needle << " in " << outcomes[1].message;
}

TEST(PointToPoint, ATooLargeMessageFailsTheReceiveAndPoisons) {
  const auto outcomes = run_ranks(2, [](Communicator& comm) {
    std::vector<float> v(100, 1.0f);
    if (comm.rank() == 0) {
      try {
        comm.send(v.data(), 100, DataType::float32, 1, 2);
      } catch (const Error&) {
      }  // the receiver's failure may reach the sender first
      return;
    }
    try {
      comm.recv(v.data(), 10, DataType::float32, 0, 2);
    } catch (const Error& e) {
      if (!comm.error()) throw std::runtime_error("not poisoned");
      throw;
    }
  });
  ASSERT_TRUE(outcomes[1].failed);
  EXPECT_NE(outcomes[1].message.find("400"), std::string::npos) << outcomes[1].message;
}

TEST(PointToPoint, InvalidArgumentsThrowAndDoNotPoison) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    float x = 0;
    auto expect_invalid = [](auto&& call, const char* needle) {
      try {
        call();
      } catch (const Error& e) {
        if (e.code() != ErrorCode::invalid_argument ||
            std::string(e.what()).find(needle) == std::string::npos)
          throw std::runtime_error(std::string("wrong error: ") + e.what());
        return;
      }
      throw std::runtime_error(std::string("accepted: ") + needle);
    };
    expect_invalid([&] { comm.send(&x, 1, DataType::float32, 2, 0); }, "peer 2");
    expect_invalid([&] { comm.send(&x, 1, DataType::float32, Communicator::kAnySource, 0); }, "peer -1");
    expect_invalid([&] { comm.recv(nullptr, 3, DataType::float32, 0, 0); }, "null");
    expect_invalid([&] { comm.recv(&x, 1, static_cast<DataType>(77), 0, 0); }, "data type");
    if (comm.error()) throw std::runtime_error("poisoned by invalid arguments");
    comm.barrier();
  }));
}

TEST(PointToPoint, AReceiveNobodyAnswersTimesOutNamingPeerAndTag) {
  // The 1 s timeout bounds the communicator's creation too: its cost model
  // comes from a file, for under TSan the probe's last step (rank 1 waiting
  // for rank 0's reduction timing) can take longer than that.
  const testing::ModelOnlyTuningFile no_probe(::testing::TempDir());
  const auto outcomes = run_ranks(
      2,
      [](Communicator& comm) {
        if (comm.rank() == 1) {
          std::this_thread::sleep_for(2500ms);
          return;
        }
        float x = 0;
        comm.recv(&x, 1, DataType::float32, 1, 77);
      },
      Options{Algorithm::automatic, 1s, "", ""});
  ASSERT_TRUE(outcomes[0].failed);
  EXPECT_EQ(outcomes[0].code, ErrorCode::timeout);
  for (const char* needle : {"receive from rank 1", "tag 77", "timeout"})
    EXPECT_NE(outcomes[0].message.find(needle), std::string::npos)
        << needle << " in " << outcomes[0].message;
}

TEST(PointToPoint, AbortEndsAPendingReceiveAtOnce) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(800ms);
      return;
    }
    float x = 0;
    Work pending = comm.recv_async(&x, 1, DataType::float32, Communicator::kAnySource, 1);
    std::this_thread::sleep_for(100ms);
    const auto start = std::chrono::steady_clock::now();
    comm.abort("test abort");
    try {
      pending.wait(5s);
    } catch (const Error&) {
      if (std::chrono::steady_clock::now() - start > 1s) throw std::runtime_error("slow");
      return;
    }
    throw std::runtime_error("aborted receive succeeded");
  }));
}

TEST(PointToPoint, ACompletionCallbackMayPostTheNextMessage) {
  // Callbacks run on the worker (a framework's future callbacks): one that
  // posts a reply must not deadlock against the worker's own progress.
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    float ping = 1.0f, pong = 0.0f;
    if (comm.rank() == 0) {
      Work reply;
      std::mutex mutex;
      Work got = comm.recv_async(&ping, 1, DataType::float32, 1, 1);
      got.on_complete([&] {
        std::lock_guard lock(mutex);
        pong = ping * 2;
        reply = comm.send_async(&pong, 1, DataType::float32, 1, 2);
      });
      finish(got);
      for (int i = 0; i < 5000; ++i) {  // until the callback has run (it follows finish)
        {
          std::lock_guard lock(mutex);
          if (pong != 0.0f) break;
        }
        std::this_thread::sleep_for(1ms);
      }
      std::lock_guard lock(mutex);
      finish(reply);
      return;
    }
    ping = 21.0f;
    comm.send(&ping, 1, DataType::float32, 0, 1);
    comm.recv(&pong, 1, DataType::float32, 0, 2);
    if (pong != 42.0f) throw std::runtime_error("wrong reply");
  }));
}

TEST(PointToPoint, TheCApiSendsToItselfAndReceivesFromAnySource) {
  chorus_comm_t comm = nullptr;
  ASSERT_EQ(chorus_comm_init(&comm, 0, 1, nullptr), chorus_success) << chorus_get_last_error(nullptr);
  // A message to oneself below the eager limit completes before its receive.
  const std::int32_t out[3] = {7, 8, 9};
  ASSERT_EQ(chorus_send(out, 3, chorus_int32, 0, 11, comm), chorus_success)
      << chorus_get_last_error(comm);
  std::int32_t in[3] = {};
  int source = -7;
  ASSERT_EQ(chorus_recv(in, 3, chorus_int32, CHORUS_ANY_SOURCE, 11, &source, comm), chorus_success)
      << chorus_get_last_error(comm);
  EXPECT_EQ(source, 0);
  EXPECT_EQ(in[2], 9);
  EXPECT_EQ(chorus_send(out, 3, chorus_int32, 1, 0, comm), chorus_invalid_argument);
  EXPECT_NE(std::string(chorus_get_last_error(comm)).find("peer 1"), std::string::npos);
  EXPECT_NE(chorus_recv(in, 3, chorus_int32, 0, 0, nullptr, nullptr), chorus_success);
  EXPECT_EQ(chorus_comm_destroy(comm), chorus_success);
}

TEST(Work, OnCompleteRunsOnceWhenTheWorkEndsOrAtOnceIfItHas) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    std::vector<float> v(1 << 16, 1.0f);
    std::atomic<int> calls{0};
    Work work = comm.allreduce_async(std::span<float>(v), ReduceOp::sum);
    work.on_complete([&] { calls.fetch_add(1); });
    finish(work);
    // finish() runs the callbacks after it wakes waiters: allow it to get there.
    for (int i = 0; i < 1000 && calls.load() == 0; ++i) std::this_thread::sleep_for(1ms);
    if (calls.load() != 1) throw std::runtime_error("callback did not run once");
    work.on_complete([&] { calls.fetch_add(1); });
    if (calls.load() != 2) throw std::runtime_error("callback on an ended work did not run at once");
  }));
}

}  // namespace
}  // namespace chorus

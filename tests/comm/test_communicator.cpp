// The Communicator over in-process ranks: every algorithm through the public
// API, the selector, counters, async work in order, argument checks, and the
// failure rules (mismatch, poisoning, abort, deadline).
#include "common/logging.hpp"
#include "core/engine.hpp"
#include "local_ranks.hpp"

#include <chorus/chorus.h>
#include <chorus/chorus.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <thread>

namespace chorus {
namespace {

using testing::run_ranks;
using namespace std::chrono_literals;

std::string all_messages(const std::vector<testing::RankOutcome>& outcomes) {
  std::string text;
  for (std::size_t r = 0; r < outcomes.size(); ++r)
    text += "rank " + std::to_string(r) + ": " +
            (outcomes[r].failed ? outcomes[r].message : std::string("ok")) + "\n";
  return text;
}

void expect_all_ok(const std::vector<testing::RankOutcome>& outcomes) {
  for (const auto& o : outcomes) EXPECT_FALSE(o.failed) << all_messages(outcomes);
}

// Rank r contributes r + i at element i: sums are exact in float32.
std::vector<float> contribution(int rank, std::size_t count) {
  std::vector<float> v(count);
  for (std::size_t i = 0; i < count; ++i) v[i] = static_cast<float>(rank + static_cast<int>(i % 1000));
  return v;
}
float expected_sum(int p, std::size_t i) {
  return static_cast<float>(p * static_cast<int>(i % 1000) + p * (p - 1) / 2);
}

class EveryAlgorithm : public ::testing::TestWithParam<Algorithm> {};

TEST_P(EveryAlgorithm, ForcedPerCallGivesTheSumAndIsCounted) {
  const Algorithm algorithm = GetParam();
  for (int p : {1, 2, 3, 5}) {
    for (std::size_t count : {std::size_t{0}, std::size_t{7}, std::size_t{70001}}) {
      const auto outcomes = run_ranks(p, [&](Communicator& comm) {
        auto send = contribution(comm.rank(), count);
        std::vector<float> recv(count, -1.0f);
        comm.allreduce(std::span<const float>(send), std::span<float>(recv), ReduceOp::sum,
                       {algorithm});
        for (std::size_t i = 0; i < count; ++i)
          if (recv[i] != expected_sum(p, i)) throw std::runtime_error("wrong sum at " + std::to_string(i));
        comm.allreduce(std::span<float>(send), ReduceOp::sum, {algorithm});  // in place
        if (send != recv) throw std::runtime_error("in place differs from out of place");
        const Counters c = comm.counters();
        const auto& mine = c.by_algorithm[static_cast<std::size_t>(algorithm)];
        if (algorithm != Algorithm::automatic &&
            (mine.calls != 2 || mine.bytes != 2 * count * sizeof(float)))
          throw std::runtime_error("counters: " + std::to_string(mine.calls) + " calls, " +
                                   std::to_string(mine.bytes) + " bytes");
        if (c.total.calls != 2 || c.total.bytes != 2 * count * sizeof(float))
          throw std::runtime_error("total counters wrong");
      });
      SCOPED_TRACE(::testing::Message() << "p " << p << " count " << count);
      expect_all_ok(outcomes);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Communicator, EveryAlgorithm,
                         ::testing::Values(Algorithm::automatic, Algorithm::ring, Algorithm::tree,
                                           Algorithm::direct, Algorithm::halving_doubling,
                                           Algorithm::recursive_doubling),
                         [](const auto& info) { return std::string(to_string(info.param)); });

// A communicator of the transport and layout of one probed before in this
// process takes that probe's cost model instead of probing again (MPI
// programs under libchorus_pmpi make one per MPI communicator): the same to
// the last bit, which two probes of a timing never are, on every rank.
TEST(Communicator, ASecondCommunicatorOfTheSameLayoutReusesTheProbedCostModel) {
  constexpr int p = 3;
  std::vector<coll::CostModel> first(p), second(p);
  auto model_into = [](std::vector<coll::CostModel>& models) {
    return [&models](Communicator& comm) {
      models[static_cast<std::size_t>(comm.rank())] =
          CommunicatorAccess::engine(comm).cost_model();
    };
  };
  for (const auto& outcome : run_ranks(p, model_into(first))) ASSERT_FALSE(outcome.failed) << outcome.message;
  for (const auto& outcome : run_ranks(p, model_into(second))) ASSERT_FALSE(outcome.failed) << outcome.message;
  for (int r = 0; r < p; ++r) {
    const auto& a = first[0];
    const auto& b = second[static_cast<std::size_t>(r)];
    EXPECT_GT(a.alpha, 0.0);
    EXPECT_EQ(a.alpha, b.alpha) << "rank " << r;
    EXPECT_EQ(a.beta, b.beta) << "rank " << r;
    EXPECT_EQ(a.overhead, b.overhead) << "rank " << r;
    for (int v = 0; v < coll::kVariantCount; ++v)
      for (int i = 0; i < coll::CostModel::kCalibrationPoints; ++i)
        EXPECT_EQ(a.measured[v][i], b.measured[v][i]) << "rank " << r << ", variant " << v << ", point " << i;
  }
}

// Where every rank's tuning file holds a model, which replaces the probe's
// anyway, no rank probes: every rank takes its file's model, and says so.
TEST(Communicator, EveryRankWithATuningFileModelSkipsTheProbe) {
  const testing::ModelOnlyTuningFile file(::testing::TempDir(), 7e-6);
  constexpr int p = 3;
  std::vector<std::string> sources(p);
  std::vector<double> alphas(p);
  expect_all_ok(run_ranks(p, [&](Communicator& comm) {
    const auto& engine = CommunicatorAccess::engine(comm);
    sources[static_cast<std::size_t>(comm.rank())] = engine.cost_model_origin();
    alphas[static_cast<std::size_t>(comm.rank())] = engine.cost_model().alpha;
  }));
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(sources[static_cast<std::size_t>(r)], "tuning file; no probe: every rank had a model")
        << "rank " << r;
    EXPECT_DOUBLE_EQ(alphas[static_cast<std::size_t>(r)], 7e-6) << "rank " << r;
  }
}

TEST(Communicator, CommunicatorWideAlgorithmIsUsedUnlessACallSaysOtherwise) {
  Options options;
  options.algorithm = Algorithm::tree;
  expect_all_ok(run_ranks(
      3,
      [](Communicator& comm) {
        std::vector<double> v(100, 1.0);
        comm.allreduce(std::span<double>(v), ReduceOp::sum);
        comm.allreduce(std::span<double>(v), ReduceOp::sum, {Algorithm::ring});
        const Counters c = comm.counters();
        if (c.by_algorithm[static_cast<int>(Algorithm::tree)].calls != 1 ||
            c.by_algorithm[static_cast<int>(Algorithm::ring)].calls != 1 || v[0] != 9.0)
          throw std::runtime_error("the communicator's algorithm was not used");
      },
      options));
}

// The counters' time (timed by the CPU's counter, common/tick_clock.hpp) is
// the time the calls took: rank 0 waits 50 ms in its call for rank 1.
TEST(Communicator, CountersTimeTheCallsInSeconds) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    // (The ranks leave creation milliseconds apart: start them together.)
    comm.barrier();
    const Counters before = comm.counters();
    if (comm.rank() == 1) std::this_thread::sleep_for(50ms);
    double x = 1;
    const auto start = std::chrono::steady_clock::now();
    comm.allreduce(&x, &x, 1, DataType::float64, ReduceOp::sum);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const Counters after = comm.counters();
    const auto calls = after.total.calls - before.total.calls;
    const double seconds = after.total.seconds - before.total.seconds;
    if (calls != 1 || after.total.bytes - before.total.bytes != sizeof x)
      throw std::runtime_error("counted " + std::to_string(calls) + " calls");
    // Within the call as the caller timed it; on rank 0 at least the wait.
    const double low = comm.rank() == 0 ? 0.045 : 0.0;
    if (!(seconds >= low && seconds <= wall * 1.05 + 0.001))
      throw std::runtime_error("counted " + std::to_string(seconds) + " s of a " +
                               std::to_string(wall) + " s call");
  }));
}

TEST(Communicator, InvalidArgumentsThrowBeforeSendingAndDoNotPoison) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    std::vector<float> buf(16, 1.0f);
    auto expect_invalid = [&](auto&& call, const char* needle) {
      try {
        call();
      } catch (const Error& e) {
        if (e.code() != ErrorCode::invalid_argument || std::string(e.what()).find(needle) == std::string::npos)
          throw std::runtime_error(std::string("wrong error: ") + e.what());
        return;
      }
      throw std::runtime_error(std::string("no error for ") + needle);
    };
    expect_invalid([&] { comm.allreduce(nullptr, buf.data(), 4, DataType::float32, ReduceOp::sum); },
                   "send buffer is null");
    expect_invalid([&] { comm.allreduce(buf.data(), nullptr, 4, DataType::float32, ReduceOp::sum); },
                   "recv buffer is null");
    expect_invalid([&] { comm.allreduce(buf.data(), buf.data(), 4, DataType::float32, ReduceOp::band); },
                   "band is not defined for float32");
    expect_invalid([&] { comm.allreduce(buf.data(), buf.data() + 1, 4, DataType::float32, ReduceOp::sum); },
                   "overlap");
    expect_invalid([&] { comm.allreduce(buf.data(), buf.data(), 4, static_cast<DataType>(77), ReduceOp::sum); },
                   "not a chorus::DataType");
    expect_invalid([&] { comm.allreduce_async(buf.data(), buf.data(), 4, DataType::int32, ReduceOp::avg); },
                   "avg is not defined for int32");
    // A count whose bytes do not fit a size_t; for allgather, whose p blocks do not.
    const std::size_t too_many = SIZE_MAX / 4 + 1, fits_once = SIZE_MAX / 4 / 2 + 1;
    expect_invalid([&] { comm.allreduce(buf.data(), buf.data(), too_many, DataType::float32, ReduceOp::sum); },
                   "allreduce: count 4611686018427387904 of float32 overflows the address space");
    expect_invalid([&] { comm.allgather(buf.data(), buf.data(), fits_once, DataType::float32); },
                   "allgather: count 2305843009213693952 of float32 on 2 ranks overflows the address space");
    std::vector<float> other(8);
    expect_invalid([&] { comm.allreduce(std::span<const float>(buf), std::span<float>(other), ReduceOp::sum); },
                   "send has 16 elements but recv has 8");
    comm.allreduce(std::span<float>(buf), ReduceOp::sum);  // still usable
    if (buf[0] != 2.0f) throw std::runtime_error("the valid call after bad ones is wrong");
  }));
}

TEST(Communicator, HundredAsyncCallsCompleteInOrderWithCorrectResults) {
  expect_all_ok(run_ranks(4, [](Communicator& comm) {
    constexpr int kCalls = 100;
    std::vector<std::vector<std::int64_t>> buffers(kCalls);
    std::vector<Work> work;
    for (int k = 0; k < kCalls; ++k) {
      buffers[k].assign(static_cast<std::size_t>(1 + k * 37), comm.rank() + k);
      const Algorithm a = static_cast<Algorithm>(1 + k % (kAlgorithmCount - 1));  // every forced one
      work.push_back(comm.allreduce_async(std::span<std::int64_t>(buffers[k]), ReduceOp::sum, {a}));
    }
    // A blocking call after them runs after them.
    std::int64_t last = 1;
    comm.allreduce(&last, &last, 1, DataType::int64, ReduceOp::sum);
    for (int k = 0; k < kCalls; ++k)
      if (!work[k].test()) throw std::runtime_error("call " + std::to_string(k) + " not done after a later blocking call");
    for (int k = 0; k < kCalls; ++k) {
      work[k].wait(10s);
      for (auto v : buffers[k])
        if (v != 6 + 4 * k) throw std::runtime_error("async call " + std::to_string(k) + " wrong");
    }
    if (last != 4) throw std::runtime_error("blocking call after async calls wrong");
    if (comm.counters().total.calls != kCalls + 1) throw std::runtime_error("counters");
  }));
}

// A wait on an async call that is next in the queue runs it on the waiting
// thread (Impl::run_queued_next()): waited in any order, from two threads
// at once, beside the worker, the calls still run in the order they were
// queued, each once.
TEST(Communicator, AsyncCallsWaitedInAnyOrderFromTwoThreadsRunInQueueOrder) {
  Options options;
  options.timeout = 20s;  // what a wait must allow for a waiter to run the call itself
  expect_all_ok(run_ranks(3, [](Communicator& comm) {
    constexpr int kCalls = 96;
    std::vector<std::vector<std::int64_t>> buffers(kCalls);
    std::vector<Work> work;
    for (int k = 0; k < kCalls; ++k) {
      // Sizes from 1 to 1000 elements: the segment's one-shot and two-shot rows.
      buffers[k].assign(static_cast<std::size_t>(1 + k * 11), comm.rank() + k);
      work.push_back(comm.allreduce_async(std::span<std::int64_t>(buffers[k]), ReduceOp::sum));
      // Every 8th call, wait on the one 4 back (while more is queued behind it).
      if (k % 8 == 7) work[k - 4].wait(20s);
    }
    // The rest: every other call on another thread from the front, the
    // others here from the back.
    std::thread other([&] {
      for (int k = 1; k < kCalls; k += 2) work[k].wait(20s);
    });
    for (int k = kCalls - 2; k >= 0; k -= 2) work[k].wait(20s);
    other.join();
    for (int k = 0; k < kCalls; ++k) {
      if (!work[k].test()) throw std::runtime_error("call " + std::to_string(k) + " not done");
      for (auto v : buffers[k])
        if (v != 3 + 3 * k) throw std::runtime_error("async call " + std::to_string(k) + " wrong");
    }
    if (comm.counters().total.calls != kCalls) throw std::runtime_error("a call ran twice or not");
    // A blocking call after them all, then an async one waited at once.
    std::int64_t x = 1;
    comm.allreduce(&x, &x, 1, DataType::int64, ReduceOp::sum);
    Work last = comm.allreduce_async(&x, &x, 1, DataType::int64, ReduceOp::sum);
    last.wait(20s);
    if (x != 9) throw std::runtime_error("the calls after the async ones are wrong");
  }, options));
}

// A wait shorter than the communicator's timeout does not run the call
// itself (which could take until the call's deadline): it returns at its
// own timeout, and the worker runs the call.
TEST(Communicator, AShortWaitOnAQueuedCallReturnsAtItsTimeout) {
  Options options;
  options.timeout = 20s;
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    float x = 1;
    if (comm.rank() == 1) std::this_thread::sleep_for(300ms);  // rank 0's call waits for it
    Work w = comm.allreduce_async(&x, &x, 1, DataType::float32, ReduceOp::sum);
    if (comm.rank() == 0 && w.wait(10ms))
      throw std::runtime_error("a 10 ms wait returned with the call done: it ran the call");
    w.wait(20s);
    if (x != 2) throw std::runtime_error("wrong sum");
  }, options));
}

// Work::wait_progressing(): a call next in the queue runs on the waiting
// thread (its on_complete runs there), and while it waits for a late peer
// its waits call the caller's progress hook, every few polls and at least
// every kHookedSleep (200 us) asleep: rank 1 comes 300 ms late. Deferred,
// so that the worker leaves the call to the waiter; a waiter descheduled
// for over 1 ms between the call and the wait would still lose it to the
// worker, so the thread is asked of three tries, the hook of every one.
TEST(Communicator, AWaitWithProgressRunsTheCallHereAndProgressesWhileItWaits) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    CallOptions deferred;
    deferred.deferred = true;
    bool ran_here = false;
    for (int attempt = 0; attempt < 3 && !ran_here; ++attempt) {
      float x = 1;
      if (comm.rank() == 1) std::this_thread::sleep_for(300ms);
      Work w = comm.allreduce_async(&x, &x, 1, DataType::float32, ReduceOp::sum, deferred);
      std::atomic<std::thread::id> finisher{};
      w.on_complete([&] { finisher = std::this_thread::get_id(); });
      int progressed = 0;
      w.wait_progressing([&] { ++progressed; });
      // 300 ms at one call per 200 us at least; at least 10 where sleeps
      // overrun on a loaded machine (a sanitizer build beside other work
      // saw 92), never once or not at all.
      std::string wrong;
      if (x != 2) wrong = "wrong sum";
      if (comm.rank() == 0 && progressed < 10)
        wrong = "the hook ran only " + std::to_string(progressed) + " times";
      ran_here = comm.rank() == 1 || finisher.load() == std::this_thread::get_id();
      comm.barrier();
      // Both ranks try again alike, or stop alike where one failed (so that
      // it does not leave the other waiting for it): 0 done, 1 again, 2 failed.
      int again = !wrong.empty() ? 2 : ran_here ? 0 : 1;
      comm.allreduce(&again, &again, 1, DataType::int32, ReduceOp::max);
      if (!wrong.empty()) throw std::runtime_error(wrong);
      if (again == 2) return;  // the other rank failed, and says why
      ran_here = again == 0;
    }
    if (!ran_here) throw std::runtime_error("the call ran on another thread than the waiting one, 3 times");
  }));
}

// Work::State has no mutex of its own: sleepers and callbacks wait in one
// of a few stripes that states share by address (core/engine.hpp). 64
// states, each with a thread asleep in wait() and a thread leaving a
// callback while a third ends them in a shuffled order, some with an
// error: every wait returns once its own state ends (with its error), every
// callback runs exactly once, and one left after the end runs at once.
TEST(Work, StatesSharingTheirWaitingStripesEachWakeTheirOwnWaitersAndCallbacksOnce) {
  constexpr int kStates = 64;
  std::vector<std::shared_ptr<Work::State>> states;
  for (int i = 0; i < kStates; ++i) states.push_back(std::make_shared<Work::State>());
  std::vector<std::atomic<int>> callbacks(kStates);
  std::vector<int> outcomes(kStates, -1);  // 1: ended well, 0: threw, 2: timed out
  std::vector<std::thread> threads;
  for (int i = 0; i < kStates; ++i) {
    threads.emplace_back([&, i] {
      Work work(states[i]);
      try {
        outcomes[i] = work.wait(20s) ? 1 : 2;
      } catch (const Error&) {
        outcomes[i] = 0;
      }
    });
    threads.emplace_back([&, i] { Work(states[i]).on_complete([&, i] { callbacks[i].fetch_add(1); }); });
  }
  std::vector<int> order(kStates);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(7));
  std::this_thread::sleep_for(50ms);  // most waiters asleep by now (the others race the ends)
  for (const int i : order) {
    std::optional<Error> error;
    if (i % 3 == 0) error = Error(ErrorCode::internal, "state " + std::to_string(i));
    states[i]->finish(error);
    std::this_thread::sleep_for(100us);
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < kStates; ++i) {
    EXPECT_EQ(outcomes[i], i % 3 == 0 ? 0 : 1) << "state " << i;
    EXPECT_EQ(callbacks[i].load(), 1) << "state " << i;
    int late = 0;
    Work(states[i]).on_complete([&] { ++late; });
    EXPECT_EQ(late, 1) << "state " << i;
  }
}

// CallOptions::deferred: the worker is not woken for the call, but it
// still runs on the worker when nobody tests or waits for it (within a few
// ms), and a wait on a later call starts the ones before it too.
TEST(Communicator, ADeferredCallRunsWhenNobodyWaitsAndInOrderWhenALaterOneIsWaited) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    CallOptions deferred;
    deferred.deferred = true;
    float x = 1;
    Work unwatched = comm.allreduce_async(&x, &x, 1, DataType::float32, ReduceOp::sum, deferred);
    std::atomic<bool> ended{false};
    unwatched.on_complete([&] { ended = true; });
    for (int ms = 0; ms < 10000 && !ended; ++ms) std::this_thread::sleep_for(1ms);  // no test(), no wait()
    if (!ended) throw std::runtime_error("a deferred call nobody waited for did not run in 10 s");
    if (x != 2) throw std::runtime_error("wrong sum");

    std::int64_t a = comm.rank(), b = 10 * comm.rank();
    Work first = comm.allreduce_async(&a, &a, 1, DataType::int64, ReduceOp::sum, deferred);
    Work second = comm.allreduce_async(&b, &b, 1, DataType::int64, ReduceOp::sum, deferred);
    if (!second.wait(20s) || !first.test()) throw std::runtime_error("the calls did not end in order");
    if (a != 1 || b != 10) throw std::runtime_error("wrong sums");
    Work waited = comm.allreduce_async(&a, &a, 1, DataType::int64, ReduceOp::sum, deferred);
    waited.wait_progressing([] {});
    if (a != 2) throw std::runtime_error("wrong sum after wait_progressing");
  }));
}

// A deferred call submitted while nothing is queued waits in the engine's
// hand-off slot, not its queue (engine.hpp), for its waiter to run. It is
// still older than every call after it: a blocking call, and an async one
// the worker runs, each run it first. Rank 0 makes its broadcast deferred
// and waits for it last; rank 1 makes the same calls blocking, in order.
// Run in the wrong order, the ranks would fail on mismatched calls.
TEST(Communicator, AParkedDeferredCallRunsBeforeTheCallsMadeAfterIt) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    CallOptions deferred;
    deferred.deferred = true;
    std::int64_t warm = 1;  // the worker starts at the first async call
    comm.allreduce_async(&warm, &warm, 1, DataType::int64, ReduceOp::sum, deferred).wait_progressing([] {});
    for (int round = 0; round < 20; ++round) {
      std::int64_t value = comm.rank() == 0 ? 100 + round : 0, sum = 1, queued = comm.rank();
      if (comm.rank() == 0) {
        Work parked = comm.broadcast_async(&value, 1, DataType::int64, 0, deferred);
        if (round % 2 == 0) {
          comm.allreduce(&sum, &sum, 1, DataType::int64, ReduceOp::sum);
        } else {
          Work later = comm.allreduce_async(&sum, &sum, 1, DataType::int64, ReduceOp::sum);
          if (!later.wait(20s)) throw std::runtime_error("the later call did not end");
        }
        comm.allreduce_async(&queued, &queued, 1, DataType::int64, ReduceOp::sum, deferred)
            .wait_progressing([] {});
        if (!parked.test()) throw std::runtime_error("the parked call had not run before the later ones");
        parked.wait();
      } else {
        comm.broadcast(&value, 1, DataType::int64, 0);
        comm.allreduce(&sum, &sum, 1, DataType::int64, ReduceOp::sum);
        comm.allreduce(&queued, &queued, 1, DataType::int64, ReduceOp::sum);
      }
      if (value != 100 + round || sum != 2 || queued != 1)
        throw std::runtime_error("wrong results in round " + std::to_string(round));
    }
  }));
}

// A parked call that a peer never joins ends with the abort at once.
TEST(Failure, AbortEndsAParkedDeferredCallAtOnce) {
  const auto outcomes = run_ranks(2, [](Communicator& comm) {
    CallOptions deferred;
    deferred.deferred = true;
    std::int64_t warm = 1;
    comm.allreduce_async(&warm, &warm, 1, DataType::int64, ReduceOp::sum, deferred).wait_progressing([] {});
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(1500ms);  // never joins the next call
      return;
    }
    std::int64_t x = 1;
    Work parked = comm.allreduce_async(&x, &x, 1, DataType::int64, ReduceOp::sum, deferred);
    const auto start = std::chrono::steady_clock::now();
    comm.abort("test abort");
    try {
      parked.wait(5s);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::aborted) throw std::runtime_error(std::string("wrong code: ") + e.what());
      if (std::chrono::steady_clock::now() - start > 1s) throw std::runtime_error("abort was slow");
      return;
    }
    throw std::runtime_error("aborted work succeeded");
  });
  EXPECT_FALSE(outcomes[0].failed) << outcomes[0].message;
}

// The worker, idle for longer than it polls for deferred calls, is woken by
// the first of a new run of them, and then looks at them on its own time:
// the later ones' submits do not wake it again (each such wake-up cost an
// 8-byte call through libchorus_pmpi 2-3 us).
TEST(Communicator, AnIdleWorkerIsWokenByTheFirstOfARunOfDeferredCallsOnly) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    CallOptions deferred;
    deferred.deferred = true;
    float x = 1;
    comm.allreduce_async(&x, &x, 1, DataType::float32, ReduceOp::sum, deferred).wait_progressing([] {});
    std::this_thread::sleep_for(300ms);  // beyond the 100 ms in which it polls
    const auto& engine = CommunicatorAccess::engine(comm);
    const std::uint64_t before = engine.deferred_calls_that_woke_the_worker();
    constexpr int kCalls = 200;
    for (int i = 0; i < kCalls; ++i)
      comm.allreduce_async(&x, &x, 1, DataType::float32, ReduceOp::sum, deferred).wait_progressing([] {});
    const std::uint64_t wakes = engine.deferred_calls_that_woke_the_worker() - before;
    // The first; a few more where a call came while the worker spun after
    // a look (it does not poll then).
    if (wakes > kCalls / 10)
      throw std::runtime_error(std::to_string(wakes) + " of " + std::to_string(kCalls) +
                               " deferred calls woke the worker");
  }));
}

TEST(Communicator, AsyncWorkOverlapsTheCallersComputation) {
  expect_all_ok(run_ranks(2, [](Communicator& comm) {
    std::vector<float> v(1 << 20, 1.0f);
    Work w = comm.allreduce_async(std::span<float>(v), ReduceOp::sum);
    // Meanwhile the caller computes; then the result is there.
    volatile double x = 0;
    for (int i = 0; i < 100000; ++i) x = x + i;
    if (!w.wait(60s)) throw std::runtime_error("not done");
    if (v[12345] != 2.0f || w.error()) throw std::runtime_error("wrong");
  }));
}

// Every rank fails, none returns a result, and the message names both calls.
void expect_mismatch(const std::vector<testing::RankOutcome>& outcomes, const std::string& a,
                     const std::string& b) {
  bool named = false;
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.failed) << all_messages(outcomes);
    named = named || (o.code == ErrorCode::mismatched_collective &&
                      o.message.find(a) != std::string::npos && o.message.find(b) != std::string::npos);
  }
  EXPECT_TRUE(named) << "no rank named both calls:\n" << all_messages(outcomes);
}

TEST(Mismatch, DifferentCountsFailOnEveryRankNamingBoth) {
  for (int p : {2, 3, 4}) {
    for (Algorithm a : {Algorithm::ring, Algorithm::tree, Algorithm::recursive_doubling,
                        Algorithm::direct, Algorithm::halving_doubling}) {
      SCOPED_TRACE(::testing::Message() << "p " << p << " " << to_string(a));
      const auto outcomes = run_ranks(
          p,
          [&](Communicator& comm) {
            const std::size_t count = comm.rank() == 1 ? 2000 : 1000;
            std::vector<float> v(count, 1.0f);
            comm.allreduce(std::span<float>(v), ReduceOp::sum, {a});
          },
          Options{Algorithm::automatic, 20s, "", ""});
      expect_mismatch(outcomes, "called allreduce(count=1000, float32, sum",
                      "rank 1 called allreduce(count=2000, float32, sum");
    }
  }
}

TEST(Mismatch, SameSizeButDifferentTypeOrOpIsCaught) {
  // float32 and int32 have the same size; sum and max move the same bytes:
  // only the call check can tell.
  auto dtype = run_ranks(3, [](Communicator& comm) {
    std::vector<std::int32_t> v(100, 1);
    comm.allreduce(v.data(), v.data(), v.size(), comm.rank() == 2 ? DataType::float32 : DataType::int32,
                   ReduceOp::sum, {Algorithm::ring});
  });
  expect_mismatch(dtype, "allreduce(count=100, int32, sum, ring)", "allreduce(count=100, float32, sum, ring)");
  auto op = run_ranks(2, [](Communicator& comm) {
    std::vector<float> v(100, 1.0f);
    comm.allreduce(std::span<float>(v), comm.rank() == 0 ? ReduceOp::sum : ReduceOp::max, {Algorithm::ring});
  });
  expect_mismatch(op, "float32, sum, ring", "float32, max, ring");
  auto algorithm = run_ranks(2, [](Communicator& comm) {
    std::vector<float> v(100, 1.0f);
    comm.allreduce(std::span<float>(v), ReduceOp::sum, {comm.rank() == 0 ? Algorithm::ring : Algorithm::tree});
  });
  expect_mismatch(algorithm, "sum, ring)", "sum, tree)");
}

TEST(Mismatch, ChorusCheckZeroTurnsTheCheckOffAndOtherValuesAreRefused) {
  // Without the check a same-size dtype mismatch is not caught: the risk
  // CHORUS_CHECK=0 documents.
  setenv("CHORUS_CHECK", "0", 1);
  const auto unchecked = run_ranks(2, [](Communicator& comm) {
    std::vector<std::int32_t> v(100, 1);
    comm.allreduce(v.data(), v.data(), v.size(), comm.rank() == 1 ? DataType::float32 : DataType::int32,
                   ReduceOp::max, {Algorithm::ring});
  });
  setenv("CHORUS_CHECK", "maybe", 1);
  const auto refused = run_ranks(1, [](Communicator&) {});
  unsetenv("CHORUS_CHECK");
  expect_all_ok(unchecked);
  ASSERT_TRUE(refused[0].failed);
  EXPECT_EQ(refused[0].code, ErrorCode::invalid_argument);
  EXPECT_EQ(refused[0].message, "CHORUS_CHECK='maybe' is not 0 or 1");
}

TEST(Communicator, DebugInfoLogsEachNewDecisionWithItsPrediction) {
  std::mutex mutex;
  std::vector<std::string> lines;
  const log::Level before = log::threshold();
  log::set_threshold(log::Level::info);
  log::set_sink([&](std::string_view line) {
    std::lock_guard lock(mutex);
    lines.emplace_back(line);
  });
  const auto outcomes = run_ranks(2, [](Communicator& comm) {
    std::vector<float> v(1000, 1.0f);
    for (int i = 0; i < 3; ++i) comm.allreduce(std::span<float>(v), ReduceOp::sum, {Algorithm::ring});
  });
  log::set_sink(nullptr);
  log::set_threshold(before);
  expect_all_ok(outcomes);
  int decisions = 0;
  for (const auto& line : lines)
    if (line.find("INFO allreduce of 4000 bytes on 2 ranks (size class 12): ring by forced, predicted") !=
            std::string::npos &&
        line.find("(others, us: tree ") != std::string::npos)
      ++decisions;
  EXPECT_EQ(decisions, 2) << "one line per rank for the first of three equal calls";
}

TEST(Failure, AnErrorPoisonsTheCommunicator) {
  const auto outcomes = run_ranks(2, [](Communicator& comm) {
    std::vector<float> v(10 + static_cast<std::size_t>(comm.rank()), 1.0f);
    try {
      comm.allreduce(std::span<float>(v), ReduceOp::sum);
    } catch (const Error&) {
      if (!comm.error()) throw std::runtime_error("no recorded error");
      const auto start = std::chrono::steady_clock::now();
      std::vector<float> w(4, 1.0f);
      try {
        comm.allreduce(std::span<float>(w), ReduceOp::sum);
      } catch (const Error& again) {
        if (std::chrono::steady_clock::now() - start > 1s) throw std::runtime_error("not fast");
        if (std::string(again.what()).find("unusable after an earlier error") == std::string::npos)
          throw std::runtime_error(std::string("wrong poison error: ") + again.what());
        Work work = comm.allreduce_async(std::span<float>(w), ReduceOp::sum);
        if (!work.test() || !work.error()) throw std::runtime_error("async call on a poisoned comm did not fail");
        return;
      }
      throw std::runtime_error("poisoned communicator ran a call");
    }
    throw std::runtime_error("mismatch not detected");
  });
  expect_all_ok(outcomes);
}

TEST(Failure, TimeoutNamesTheCallAndThePeer) {
  const auto outcomes = run_ranks(
      2,
      [](Communicator& comm) {
        if (comm.rank() == 1) {
          std::this_thread::sleep_for(2500ms);  // never calls; stays past rank 0's deadline
          return;
        }
        std::vector<float> v(1000, 1.0f);
        comm.allreduce(std::span<float>(v), ReduceOp::sum, {Algorithm::ring});
      },
      Options{Algorithm::automatic, 1s, "", ""});
  ASSERT_TRUE(outcomes[0].failed);
  EXPECT_EQ(outcomes[0].code, ErrorCode::timeout);
  for (const char* needle : {"call #1", "allreduce(count=1000, float32, sum, ring)", "rank 1", "timed out"})
    EXPECT_NE(outcomes[0].message.find(needle), std::string::npos) << needle << " in " << outcomes[0].message;
}

TEST(Failure, AbortEndsPendingWorkAtOnce) {
  const auto outcomes = run_ranks(2, [](Communicator& comm) {
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(1500ms);  // the peer never joins the call
      return;
    }
    std::vector<float> a(1000, 1.0f), b(1000, 1.0f);
    Work first = comm.allreduce_async(std::span<float>(a), ReduceOp::sum);
    Work queued = comm.allreduce_async(std::span<float>(b), ReduceOp::sum);
    std::this_thread::sleep_for(200ms);
    const auto start = std::chrono::steady_clock::now();
    comm.abort("test abort");
    try {
      first.wait(5s);
    } catch (const Error& e) {
      if (e.code() != ErrorCode::aborted) throw std::runtime_error(std::string("wrong code: ") + e.what());
      if (std::chrono::steady_clock::now() - start > 1s) throw std::runtime_error("abort was slow");
      if (!queued.test() || !queued.error()) throw std::runtime_error("queued work survived abort");
      return;
    }
    throw std::runtime_error("aborted work succeeded");
  });
  EXPECT_FALSE(outcomes[0].failed) << outcomes[0].message;
}

}  // namespace
}  // namespace chorus

// ---- Bootstrap through the caller's all-gather (what from_mpi uses) ---------

namespace chorus {
namespace {

// An all-gather among threads: each call is one round; the last arrival
// publishes the round's buffer.
class ThreadAllgather {
 public:
  explicit ThreadAllgather(int size) : size_(size) {}
  void operator()(int rank, const void* send, std::size_t bytes, void* recv) {
    std::unique_lock lock(mutex_);
    const std::uint64_t round = round_;
    if (gathering_.size() != bytes * static_cast<std::size_t>(size_))
      gathering_.assign(bytes * static_cast<std::size_t>(size_), std::byte{0});
    std::memcpy(gathering_.data() + static_cast<std::size_t>(rank) * bytes, send, bytes);
    if (++arrived_ == size_) {
      result_ = gathering_;
      gathering_.clear();
      arrived_ = 0;
      ++round_;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return round_ != round; });
    }
    std::memcpy(recv, result_.data(), result_.size());
  }

 private:
  int size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<std::byte> gathering_, result_;
  int arrived_ = 0;
  std::uint64_t round_ = 0;
};

// `p` ranks as threads, each connected by `connect(rank, options)` (TCP,
// 30 s), AllReduce a sum: the sums are right on every rank.
void expect_threads_allreduce(
    int p, const std::function<Communicator(int rank, const Options& options)>& connect) {
  std::vector<std::string> errors(p);
  std::vector<std::vector<float>> results(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r)
    threads.emplace_back([&, r] {
      try {
        Options options;
        options.transport = "tcp";
        options.timeout = 30s;
        auto comm = connect(r, options);
        results[r] = contribution(r, 5000);
        comm.allreduce(std::span<float>(results[r]), ReduceOp::sum);
        comm.barrier();  // no rank leaves while others may still send to it
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < p; ++r) {
    ASSERT_EQ(errors[r], "") << "rank " << r;
    for (std::size_t i = 0; i < 5000; i += 997) EXPECT_EQ(results[r][i], expected_sum(p, i));
  }
}

TEST(Bootstrap, ConnectThroughTheCallersAllgatherNeedsNoStore) {
  setenv("CHORUS_SOCKET_ADDR", "127.0.0.1", 1);
  constexpr int p = 3;
  ThreadAllgather gather(p);
  expect_threads_allreduce(p, [&](int r, const Options& options) {
    return Communicator::connect(
        r, p, [&, r](const void* s, std::size_t b, void* out) { gather(r, s, b, out); }, options);
  });
}

// A framework's key-value store (what torch's c10d::Store gives), kept in
// this process: the ranks are threads.
class MapStore {
 public:
  Communicator::KeyValueStore functions() {
    Communicator::KeyValueStore kv;
    kv.set = [this](const std::string& key, std::span<const std::byte> value) {
      std::lock_guard lock(mutex_);
      values_[key].assign(value.begin(), value.end());
      changed_.notify_all();
    };
    kv.get = [this](const std::string& key, std::chrono::milliseconds timeout) {
      std::unique_lock lock(mutex_);
      if (!changed_.wait_for(lock, timeout, [&] { return values_.count(key) > 0; }))
        throw std::runtime_error("timed out waiting for " + key);
      return values_[key];
    };
    kv.add = [this](const std::string& key, std::int64_t delta) {
      std::lock_guard lock(mutex_);
      auto& bytes = values_[key];
      std::int64_t v = 0;
      if (bytes.size() == sizeof v) std::memcpy(&v, bytes.data(), sizeof v);
      v += delta;
      bytes.resize(sizeof v);
      std::memcpy(bytes.data(), &v, sizeof v);
      changed_.notify_all();
      return v;
    };
    kv.has = [this](const std::string& key) {
      std::lock_guard lock(mutex_);
      return values_.count(key) > 0;
    };
    return kv;
  }
 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::vector<std::byte>> values_;
};

// Communicator::connect through the caller's key-value store, with every
// address read at creation (eager TCP links) and with addresses looked up
// when first needed, from the communicator's thread (lazy links, as beyond
// 64 ranks): the sums are right either way. (How few addresses a lazy rank
// reads is Transports/ConnectThroughStore's to show: a communicator's
// creation probe reaches every peer of so small a group.)
TEST(Bootstrap, ConnectThroughTheCallersKeyValueStore) {
  setenv("CHORUS_SOCKET_ADDR", "127.0.0.1", 1);
  constexpr int p = 5;
  for (const char* links : {"eager", "lazy"}) {
    SCOPED_TRACE(links);
    setenv("CHORUS_SOCKET_CONNECT", links, 1);
    MapStore store;  // one per communicator, as torch gives each group its own
    expect_threads_allreduce(p, [&](int r, const Options& options) {
      return Communicator::connect(r, p, store.functions(), options);
    });
    unsetenv("CHORUS_SOCKET_CONNECT");
  }
  // A rank that never comes: the others are told which, by the deadline,
  // whether every address is fetched or ranks meet at the arrival counter.
  Options options;
  options.transport = "tcp";
  options.timeout = 2s;
  for (const char* links : {"eager", "lazy"}) {
    SCOPED_TRACE(links);
    setenv("CHORUS_SOCKET_CONNECT", links, 1);
    MapStore alone;
    try {
      Communicator::connect(0, 2, alone.functions(), options);
      ADD_FAILURE() << "connect() returned without rank 1";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::timeout) << e.what();
      EXPECT_NE(std::string(e.what()).find("ranks 1 of 2 never arrived"), std::string::npos)
          << e.what();
    }
    unsetenv("CHORUS_SOCKET_CONNECT");
  }
  MapStore store;
  Communicator::KeyValueStore lacking = store.functions();
  lacking.has = nullptr;
  EXPECT_THROW(Communicator::connect(0, 2, lacking, options), Error);
}

TEST(Bootstrap, AFailingAllgatherIsAnErrorThatSaysSo) {
  EXPECT_THROW(Communicator::connect(0, 2, Communicator::Allgather{}), Error);
  chorus_comm_t comm = nullptr;
  EXPECT_EQ(chorus_comm_init_with_allgather(&comm, 0, 2, nullptr, nullptr), chorus_invalid_argument);
  EXPECT_NE(std::string(chorus_get_last_error(nullptr)).find("allgather is NULL"), std::string::npos);
  auto refuse = [](const void*, size_t, void*, void*) { return 7; };
  EXPECT_EQ(chorus_comm_init_with_allgather(&comm, 0, 2, refuse, nullptr), chorus_transport_error);
  EXPECT_NE(std::string(chorus_get_last_error(nullptr)).find("the all-gather returned 7"),
            std::string::npos)
      << chorus_get_last_error(nullptr);
  EXPECT_EQ(comm, nullptr);
}

}  // namespace
}  // namespace chorus

// Sub-communicators over in-process ranks: split() groups and orders ranks
// as MPI_Comm_split does, dup() copies, and collectives on a parent and its
// children run at the same time from different threads without mixing.
#include "local_ranks.hpp"

#include <chorus/chorus.h>
#include <chorus/chorus.hpp>

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace chorus {
namespace {

using testing::run_ranks;

void expect_ok(const std::vector<testing::RankOutcome>& outcomes, const std::string& what) {
  for (std::size_t r = 0; r < outcomes.size(); ++r)
    EXPECT_FALSE(outcomes[r].failed) << what << ": rank " << r << ": " << outcomes[r].message;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

// The parent ranks of a child, in the child's rank order.
std::vector<std::int32_t> parent_ranks(Communicator& child, int parent_rank) {
  std::vector<std::int32_t> ranks(static_cast<std::size_t>(child.size()));
  const std::int32_t mine = parent_rank;
  child.allgather(&mine, ranks.data(), 1, DataType::int32);
  return ranks;
}

TEST(Split, GroupsByColorAndRanksByKeyThenParentRank) {
  for (int p : {1, 2, 3, 5, 8, 16})
    expect_ok(run_ranks(p, [&](Communicator& comm) {
      const int r = comm.rank();
      // Three colors; key r / 2 reversed, so ties (equal keys) fall back to
      // the parent's order.
      auto child = comm.split(r % 3, -(r / 2));
      require(child.has_value(), "no communicator");
      std::vector<std::int32_t> want;
      for (int j = 0; j < p; ++j)
        if (j % 3 == r % 3) want.push_back(j);
      std::stable_sort(want.begin(), want.end(), [](int a, int b) { return -(a / 2) < -(b / 2); });
      require(child->size() == static_cast<int>(want.size()), "size");
      require(want[static_cast<std::size_t>(child->rank())] == r, "rank");
      require(parent_ranks(*child, r) == want, "order");
      std::vector<std::int64_t> x(1000, r);
      child->allreduce(std::span<std::int64_t>(x), ReduceOp::sum);
      require(x[999] == std::accumulate(want.begin(), want.end(), std::int64_t{0}), "sum over the group");
    }), "p=" + std::to_string(p));
}

TEST(Split, NoColorJoinsNothingAndTheOthersGoOn) {
  expect_ok(run_ranks(4, [&](Communicator& comm) {
    auto child = comm.split(comm.rank() == 2 ? Communicator::kNoColor : 7, 0);
    require(child.has_value() == (comm.rank() != 2), "membership");
    if (child) {
      require(child->size() == 3, "size");
      child->barrier();
    }
    comm.barrier();  // the parent is unaffected
  }), "no color");
}

TEST(Split, SplitsOfSplitsAndDupsAreCommunicatorsToo) {
  expect_ok(run_ranks(8, [&](Communicator& comm) {
    const int r = comm.rank();
    auto half = comm.split(r / 4, r);
    auto quarter = half->split(half->rank() / 2, half->rank());
    Communicator copy = quarter->dup();
    require(copy.size() == 2 && copy.rank() == r % 2, "nested");
    require(parent_ranks(copy, r) == std::vector<std::int32_t>{r / 2 * 2, r / 2 * 2 + 1}, "members");
  }), "nested");
}

TEST(Split, ParentAndChildrenRunCollectivesAtTheSameTime) {
  // Each rank runs 100 allreduces on the parent, on a dup and on a split at
  // once, from three threads; calls on different communicators interleave
  // arbitrarily across ranks, which only independent tag spaces survive.
  expect_ok(run_ranks(4, [&](Communicator& comm) {
    const int r = comm.rank();
    Communicator copy = comm.dup();
    auto pair = comm.split(r / 2, r);
    auto run = [&](Communicator& c, std::int64_t base, std::int64_t want) {
      for (int i = 0; i < 100; ++i) {
        std::vector<std::int64_t> x(257, base + r);
        c.allreduce(std::span<std::int64_t>(x), ReduceOp::sum);
        require(x[256] == want, "wrong sum on a concurrent communicator");
      }
    };
    std::thread a([&] { run(copy, 1000, 4000 + 6); });
    std::thread b([&] { run(*pair, 0, r / 2 * 2 * 2 + 1); });
    run(comm, 10, 40 + 6);
    a.join();
    b.join();
  }), "concurrent");
}

TEST(Split, AnErrorOnAChildLeavesTheParentUsable) {
  const auto outcomes = run_ranks(3, [&](Communicator& comm) {
    Communicator child = comm.dup();
    std::vector<float> x(comm.rank() == 1 ? 10 : 20, 1.0f);
    try {
      child.allreduce(std::span<float>(x), ReduceOp::sum);
      throw std::runtime_error("the mismatch was not seen");
    } catch (const Error& e) {
      require(e.code() == ErrorCode::mismatched_collective, e.what());
    }
    std::vector<float> y(20, 1.0f);
    comm.allreduce(std::span<float>(y), ReduceOp::sum);
    require(y[0] == 3.0f, "parent after a child's error");
  }, Options{Algorithm::automatic, std::chrono::seconds(20), "", ""});
  expect_ok(outcomes, "child error");
}

TEST(Split, ABadColorIsRefusedOnEveryRank) {
  const auto outcomes = run_ranks(2, [&](Communicator& comm) {
    try {
      (void)comm.split(-5, 0);
    } catch (const Error& e) {
      require(e.code() == ErrorCode::invalid_argument &&
                  std::string(e.what()).find("split: color -5 is negative") != std::string::npos,
              e.what());
      comm.barrier();  // nothing was sent: the parent is fine
      return;
    }
    throw std::runtime_error("accepted color -5");
  });
  expect_ok(outcomes, "bad color");
}

TEST(Split, TheCAbiSplitsAndDups) {
  chorus_comm_t comm = nullptr, child = nullptr, none = nullptr, copy = nullptr;
  ASSERT_EQ(chorus_comm_init(&comm, 0, 1, nullptr), chorus_success) << chorus_get_last_error(nullptr);
  ASSERT_EQ(chorus_comm_split(comm, 3, 0, &child), chorus_success) << chorus_get_last_error(comm);
  ASSERT_NE(child, nullptr);
  int size = 0;
  EXPECT_EQ(chorus_comm_size(child, &size), chorus_success);
  EXPECT_EQ(size, 1);
  none = comm;  // overwritten with NULL
  EXPECT_EQ(chorus_comm_split(comm, CHORUS_SPLIT_NOCOLOR, 0, &none), chorus_success);
  EXPECT_EQ(none, nullptr);
  ASSERT_EQ(chorus_comm_dup(child, &copy), chorus_success);
  EXPECT_EQ(chorus_barrier(copy), chorus_success);
  EXPECT_EQ(chorus_comm_split(comm, -3, 0, &none), chorus_invalid_argument);
  EXPECT_EQ(chorus_comm_dup(comm, nullptr), chorus_invalid_argument);
  EXPECT_EQ(chorus_comm_destroy(copy), chorus_success);
  EXPECT_EQ(chorus_comm_destroy(child), chorus_success);
  EXPECT_EQ(chorus_comm_destroy(comm), chorus_success);
}

}  // namespace
}  // namespace chorus

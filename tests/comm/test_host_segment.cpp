// The host segment (src/shm/segment.hpp) and what runs through it, over
// in-process ranks: the shared-memory algorithms are chosen and right, in
// place too; the call check through the segment names both calls; a wait on
// a slot ends on abort and at the deadline; a stale segment of a dead job is
// removed and does not confuse a new one; CHORUS_SHM=0 turns it off. (The
// registry test runs every shm row through every dtype and op; a rank killed
// while others wait on its slot is in test_comm_multiprocess.cpp.)
#include "local_ranks.hpp"

#include "coll/registry.hpp"
#include "shm/segment.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <barrier>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace chorus {
namespace {

using namespace std::chrono_literals;

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

void expect_all_passed(const std::vector<testing::RankOutcome>& outcomes) {
  for (std::size_t r = 0; r < outcomes.size(); ++r)
    EXPECT_FALSE(outcomes[r].failed) << "rank " << r << ": " << outcomes[r].message;
}

TEST(HostSegment, SmallCallsRunThroughItAndAreRightInPlaceAndNot) {
  expect_all_passed(testing::run_ranks(4, [](Communicator& comm) {
    auto& engine = CommunicatorAccess::engine(comm);
    require(engine.host != nullptr, "no host segment for ranks of one process");
    const int p = comm.size(), r = comm.rank();
    for (std::size_t count : {1, 2, 1000, 100000}) {
      std::vector<double> a(count), b(count);
      for (std::size_t i = 0; i < count; ++i) a[i] = static_cast<double>(r * 3 + i % 7);
      comm.allreduce(a.data(), b.data(), count, DataType::float64, ReduceOp::sum);
      comm.allreduce(a.data(), a.data(), count, DataType::float64, ReduceOp::sum);  // in place
      for (std::size_t i = 0; i < count; ++i) {
        const double want = 3.0 * p * (p - 1) / 2 + static_cast<double>(p * (i % 7));
        require(a[i] == want && b[i] == want, "allreduce of " + std::to_string(count));
      }
    }
    const auto counters = comm.counters();
    require(counters.by_algorithm[static_cast<int>(Algorithm::shared_memory)].calls == 8,
            "the eight calls ran in shared memory");
    std::vector<int> x(3, r == 2 ? 7 : 0);
    comm.broadcast(x.data(), 3, DataType::int32, 2);
    require(x == std::vector<int>(3, 7), "broadcast");
    comm.barrier();
  }));
}

// The engine remembers its last automatic choice per collective (a loop of
// equal calls does not choose again): a call of another size, or one that
// names its algorithm, must still run what it would have run alone.
// A call's data up to kEntryDataBytes rides in its ring entry, more in the
// rank's large slot: at the edge and on both sides of it (and at 256 bytes,
// which the entries' growth to 512 bytes moved into them), every
// shared-memory collective is right, in place and out of place, at p = 3.
TEST(HostSegment, DataAtTheEntrysEdgeIsRightInTheEntryAndInTheSlot) {
  expect_all_passed(testing::run_ranks(3, [](Communicator& comm) {
    const int p = comm.size(), r = comm.rank();
    const auto up = static_cast<std::size_t>(p);
    for (std::size_t bytes : {std::size_t{256}, shm::kEntryDataBytes - 4, shm::kEntryDataBytes,
                              shm::kEntryDataBytes + 4}) {
      const std::size_t n = bytes / 4;  // int32 items
      const std::string at = " of " + std::to_string(bytes) + " bytes";
      auto value = [](int rank, std::size_t i) {
        return static_cast<std::int32_t>(rank * 1000 + i);
      };
      std::vector<std::int32_t> mine(n), out(n), sum(n);
      for (std::size_t i = 0; i < n; ++i) {
        mine[i] = value(r, i);
        for (int q = 0; q < p; ++q) sum[i] += value(q, i);
      }
      comm.allreduce(mine.data(), out.data(), n, DataType::int32, ReduceOp::sum);
      require(out == sum, "allreduce" + at);
      out = mine;
      comm.allreduce(out.data(), out.data(), n, DataType::int32, ReduceOp::sum);
      require(out == sum, "allreduce in place" + at);
      out.assign(n, -1);
      comm.reduce(mine.data(), out.data(), n, DataType::int32, ReduceOp::sum, 1);
      require(r != 1 || out == sum, "reduce" + at);
      out = r == 2 ? mine : std::vector<std::int32_t>(n, -1);
      comm.broadcast(out.data(), n, DataType::int32, 2);
      for (std::size_t i = 0; i < n; ++i) require(out[i] == value(2, i), "broadcast" + at);
      // Blocks of `bytes` each: allgather's every block, gather's at the root.
      std::vector<std::int32_t> all(n * up, -1), gathered(n * up, -1);
      comm.allgather(mine.data(), all.data(), n, DataType::int32);
      comm.gather(mine.data(), gathered.data(), n, DataType::int32, 0);
      for (int q = 0; q < p; ++q)
        for (std::size_t i = 0; i < n; ++i) {
          require(all[static_cast<std::size_t>(q) * n + i] == value(q, i), "allgather" + at);
          require(r != 0 || gathered[static_cast<std::size_t>(q) * n + i] == value(q, i),
                  "gather" + at);
        }
    }
  }));
}

TEST(HostSegment, TheRememberedChoiceServesOnlyCallsOfItsSize) {
  // Slots of 16 KiB: a call of 64 KiB fits neither one-shot's (the buffer)
  // nor two-shot's need (two rounds of 4 KiB pieces, 24 KiB at p = 2).
  ::setenv("CHORUS_SHM_BYTES", "16384", 1);
  expect_all_passed(testing::run_ranks(2, [](Communicator& comm) {
    const std::size_t large = 16384;  // floats: beyond the slots
    std::vector<float> small_in(2, 1.0f), small_out(2), large_in(large, 2.0f), large_out(large);
    auto calls = [&](Algorithm a) { return comm.counters().by_algorithm[static_cast<int>(a)].calls; };
    for (int round = 0; round < 3; ++round) {
      comm.allreduce(small_in.data(), small_out.data(), 2, DataType::float32, ReduceOp::sum);
      comm.allreduce(small_in.data(), small_out.data(), 2, DataType::float32, ReduceOp::sum);
      comm.allreduce(small_in.data(), small_out.data(), 2, DataType::float32, ReduceOp::sum,
                     {Algorithm::ring});
      comm.allreduce(large_in.data(), large_out.data(), large, DataType::float32, ReduceOp::sum);
      require(small_out == std::vector<float>(2, 2.0f) && large_out == std::vector<float>(large, 4.0f),
              "sums");
    }
    require(calls(Algorithm::shared_memory) == 6, "the six automatic small calls ran in the segment, "
            "got " + std::to_string(calls(Algorithm::shared_memory)));
    require(comm.counters().total.calls - calls(Algorithm::shared_memory) == 6,
            "the forced and the large calls ran elsewhere");
    require(calls(Algorithm::ring) >= 3, "the forced calls ran the ring");
  }));
  ::unsetenv("CHORUS_SHM_BYTES");
}

TEST(HostSegment, AllReduceOnThreeAndFourRanksGoesFromOneShotToTwoShotAfter64KiB) {
  for (int p : {3, 4}) {
    expect_all_passed(testing::run_ranks(p, [](Communicator& comm) {
      auto& engine = CommunicatorAccess::engine(comm);
      using K = coll::CollectiveKind;
      require(engine.choose(K::allreduce, "", 64 << 10).row->name == "shm_one_shot", "64 KiB");
      require(engine.choose(K::allreduce, "", (64 << 10) + 4).row->name == "shm_two_shot",
              "past 64 KiB");
      require(engine.choose(K::allreduce, "", 1 << 20).row->name == "shm_two_shot", "1 MiB");
      // Beyond the 2 MiB slot, in rounds through it.
      require(engine.choose(K::allreduce, "", 64 << 20).row->name == "shm_two_shot", "64 MiB");
    }));
  }
}

TEST(HostSegment, EveryCollectiveFitsItsSlotsAndChoosesShm) {
  expect_all_passed(testing::run_ranks(2, [](Communicator& comm) {
    auto& engine = CommunicatorAccess::engine(comm);
    using K = coll::CollectiveKind;
    for (K kind : {K::allreduce, K::broadcast, K::reduce, K::allgather, K::reduce_scatter,
                   K::alltoall, K::gather, K::scatter, K::barrier}) {
      const auto choice = engine.choose(kind, "", 64);
      require(choice.row->family == "shm" && std::string(choice.reason) == "host segment",
              std::string(coll::to_string(kind)) + " of 64 bytes: " + std::string(choice.row->name));
    }
    // AllReduce at p = 2: one-shot up to 64 KiB, then two-shot (beyond a
    // slot in rounds through it) while the size fits the slot header's
    // 31-bit word.
    const std::size_t slot = engine.host->slot_bytes();
    require(engine.choose(K::allreduce, "", 1024).row->name == "shm_one_shot", "1 KiB");
    require(engine.choose(K::allreduce, "", 64 << 10).row->name == "shm_one_shot", "64 KiB");
    require(engine.choose(K::allreduce, "", (64 << 10) + 4).row->name == "shm_two_shot",
            "past 64 KiB");
    require(engine.choose(K::allreduce, "", slot).row->name == "shm_two_shot", "a slot's size");
    require(engine.choose(K::allreduce, "", slot + 4).row->name == "shm_two_shot", "beyond a slot");
    require(engine.choose(K::allreduce, "", 64 << 20).row->name == "shm_two_shot", "64 MiB");
    require(engine.choose(K::allreduce, "", std::size_t{1} << 31).row->family != "shm", "2 GiB");
    // Broadcast, reduce, allgather and alltoall: through the
    // segment at any size (streamed, and beyond a slot through it as
    // through a ring buffer), while a stream's size fits its 31-bit word
    // (alltoall's is all p blocks). Reduce-scatter: while its input fits a
    // slot, then the ring.
    require(engine.choose(K::alltoall, "", std::size_t{256} << 20).row->family == "shm",
            "alltoall of 2 x 256 MiB");
    require(engine.choose(K::alltoall, "", std::size_t{1} << 30).row->family != "shm",
            "alltoall of 2 x 1 GiB");
    for (K kind : {K::broadcast, K::reduce, K::allgather})
      require(engine.choose(kind, "", std::size_t{1} << 30).row->family == "shm",
              std::string(coll::to_string(kind)) + " of 1 GiB");
    require(engine.choose(K::reduce_scatter, "", slot).row->family == "shm",
            "reduce_scatter of a slot");
    require(engine.choose(K::reduce_scatter, "", 2 * slot).row->family != "shm",
            "reduce_scatter of two slots");
  }));
}

TEST(HostSegment, RanksCallingDifferentlyFailNamingBothCalls) {
  Options options;
  options.timeout = std::chrono::seconds(20);
  // Different counts, both through the segment; then shm against ring.
  for (int variant = 0; variant < 2; ++variant) {
    const auto outcomes = testing::run_ranks(3, [&](Communicator& comm) {
      std::vector<float> v(comm.rank() == 1 && variant == 0 ? 16 : 8, 1.0f);
      CallOptions how;
      if (variant == 1) how.algorithm_name = comm.rank() == 1 ? "ring" : "shm";
      comm.allreduce(v.data(), v.data(), v.size(), DataType::float32, ReduceOp::sum, how);
    }, options);
    for (const auto& o : outcomes) {
      EXPECT_TRUE(o.failed);
      EXPECT_EQ(o.code, ErrorCode::mismatched_collective) << o.message;
      if (variant == 0) {
        EXPECT_NE(o.message.find("rank 0 called allreduce(count=8, float32, sum, shm_one_shot)"),
                  std::string::npos) << o.message;
        EXPECT_NE(o.message.find("rank 1 called allreduce(count=16"), std::string::npos) << o.message;
      } else {
        EXPECT_NE(o.message.find("ring"), std::string::npos) << o.message;
        EXPECT_NE(o.message.find("shm_one_shot"), std::string::npos) << o.message;
      }
    }
  }
}

// A barrier compares each peer's signature as it finds its slot (as a
// small AllReduce does); one rank's barrier among the others' AllReduces
// fails on every rank, naming both calls.
TEST(HostSegment, ABarrierAmongOtherCallsFailsNamingBoth) {
  Options options;
  options.timeout = std::chrono::seconds(20);
  const auto outcomes = testing::run_ranks(3, [&](Communicator& comm) {
    std::vector<float> v(8, 1.0f);
    comm.barrier();  // alike: passes
    if (comm.rank() == 1)
      comm.barrier();
    else
      comm.allreduce(v.data(), v.data(), v.size(), DataType::float32, ReduceOp::sum);
  }, options);
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.failed);
    EXPECT_EQ(o.code, ErrorCode::mismatched_collective) << o.message;
    EXPECT_NE(o.message.find("called barrier"), std::string::npos) << o.message;
    EXPECT_NE(o.message.find("called allreduce(count=8"), std::string::npos) << o.message;
  }
}

// A call that reads no peer's slot (a broadcast's root, a reduce's other
// ranks) returns at once; its signature is compared with the next rank's
// up to kRingDepth calls later. Here every rank is such a writer (rank 0
// roots a broadcast, rank 1 sends to a reduce's root 0), so neither call
// fails at once: a later call must, naming both, and no rank may hang.
// Every rank failed, and one named call #`call`: a broadcast of 4 floats
// from root 0 on one rank, a reduce of them to root 0 on another. The rank
// that compared names both calls; the others may instead learn that it
// failed (its abort notice), whichever they see first.
void expect_broadcast_and_reduce_named(const std::vector<testing::RankOutcome>& outcomes,
                                       int call) {
  bool named = false;
  std::string messages;
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.failed);
    EXPECT_TRUE(o.code == ErrorCode::mismatched_collective || o.code == ErrorCode::peer_failure)
        << o.message;
    named = named || (o.message.find("call #" + std::to_string(call)) != std::string::npos &&
                      o.message.find("called broadcast(count=4, float32, root=0") != std::string::npos &&
                      o.message.find("called reduce(count=4, float32, sum, root=0") != std::string::npos);
    messages += o.message + "\n";
  }
  EXPECT_TRUE(named) << messages;
}

TEST(HostSegment, CallsThatReadNoPeerAreComparedLaterAndStillFailNamingBoth) {
  Options options;
  options.timeout = std::chrono::seconds(20);
  const auto outcomes = testing::run_ranks(2, [&](Communicator& comm) {
    std::vector<float> v(4, 1.0f), sum(4);
    if (comm.rank() == 0) comm.broadcast(v.data(), 4, DataType::float32, 0);
    else comm.reduce(v.data(), nullptr, 4, DataType::float32, ReduceOp::sum, 0);
    for (std::uint64_t i = 0; i < 2 * shm::kRingDepth; ++i)
      comm.allreduce(v.data(), sum.data(), 4, DataType::float32, ReduceOp::sum);
  }, options);
  expect_broadcast_and_reduce_named(outcomes, 1);
}

// The later comparison reads digests that cover every call up to theirs
// (shm/segment.hpp), many calls at once: one call that differs among many
// that agree, and that no rank reads (a broadcast's root, a reduce's other
// rank), is still found, and named by its number, with agreeing calls
// before and after it.
TEST(HostSegment, OneDifferentCallAmongManyIsFoundByTheDigestsAndNamed) {
  constexpr int kDifferent = 37;  // not at a batch's edge
  Options options;
  options.timeout = std::chrono::seconds(20);
  const auto outcomes = testing::run_ranks(3, [&](Communicator& comm) {
    std::vector<float> v(4, 1.0f);
    for (int call = 1; call <= kDifferent + 3 * static_cast<int>(shm::kRingDepth); ++call) {
      if (call == kDifferent && comm.rank() == 1)
        comm.reduce(v.data(), nullptr, 4, DataType::float32, ReduceOp::sum, 0);
      else
        comm.broadcast(v.data(), 4, DataType::float32, 0);
    }
  }, options);
  expect_broadcast_and_reduce_named(outcomes, kDifferent);
}

// A rooted call's writer runs ahead of its readers by up to kRingDepth
// calls, no further: right results however far behind the readers are.
TEST(HostSegment, ARootRunsAheadOfSlowReadersAndEveryCallArrives) {
  expect_all_passed(testing::run_ranks(3, [](Communicator& comm) {
    for (int call = 0; call < 5 * static_cast<int>(shm::kRingDepth); ++call) {
      if (comm.rank() == 2 && call % 16 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      int value = comm.rank() == 0 ? call : -1;
      comm.broadcast(&value, 1, DataType::int32, 0);
      require(value == call, "broadcast " + std::to_string(call) + " gave " + std::to_string(value));
      int total = 0, mine = call + comm.rank();
      comm.reduce(&mine, &total, 1, DataType::int32, ReduceOp::sum, 1);
      if (comm.rank() == 1) require(total == 3 * call + 3, "reduce " + std::to_string(call));
    }
  }));
}

// Data between the entry's room and kDataRingMaxBytes goes in the writer's
// data ring, block after block: a rooted call's writer runs ahead of its
// readers by as many such calls as the ring holds (with two large slots
// alone it could not begin a call before every reader had begun the one
// before). The readers here begin only once the root has finished all of
// its calls (a root held up by them would leave them waiting: they fail
// after 10 s, the root at the calls' 20-s timeout). Then broadcasts,
// gathers and scatters whose data goes in the entry, the data ring (across
// its end too) and the large slot, interleaved, with a slow reader: every
// byte right. The data ring
// serves where a wait would cost a switch of core: the ranks (threads,
// which inherit this thread's affinity) share one CPU.
TEST(HostSegment, ARootRunsAheadThroughItsDataRingAndEverySizeArrives) {
  cpu_set_t allowed, one;
  ASSERT_EQ(::sched_getaffinity(0, sizeof allowed, &allowed), 0);
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &allowed)) {
      CPU_SET(cpu, &one);
      break;
    }
  ASSERT_EQ(::sched_setaffinity(0, sizeof one, &one), 0);
  constexpr std::size_t kBytes = 1024;
  static_assert(kBytes > shm::kEntryDataBytes && kBytes <= shm::kDataRingMaxBytes);
  constexpr int kAhead = static_cast<int>(shm::kDataRingBytes / kBytes);  // 128
  std::atomic<bool> root_done{false};
  Options options;
  options.timeout = std::chrono::seconds(20);
  expect_all_passed(testing::run_ranks(3, [&](Communicator& comm) {
    const int r = comm.rank();
    auto& engine = CommunicatorAccess::engine(comm);
    require(engine.host != nullptr && engine.host->yields_while_waiting(),
            "three ranks on one CPU: the segment does not see them crowded");
    for (coll::CollectiveKind kind : {coll::CollectiveKind::broadcast, coll::CollectiveKind::gather})
      require(engine.choose(kind, "", kBytes).row->family == "shm",
              std::string(coll::to_string(kind)) + " does not run through the segment");
    const auto payload = [](int call, std::size_t i) {
      return static_cast<std::uint8_t>(call * 31 + i * 7 + 1);
    };
    std::vector<std::uint8_t> buffer(kBytes);
    if (r == 0) {
      for (int call = 0; call < kAhead; ++call) {
        for (std::size_t i = 0; i < kBytes; ++i) buffer[i] = payload(call, i);
        comm.broadcast(buffer.data(), kBytes, DataType::uint8, 0);
      }
      root_done = true;
    } else {
      const auto until = std::chrono::steady_clock::now() + 10s;
      while (!root_done && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
      require(root_done, "the root did not finish its broadcasts before the readers began them");
      for (int call = 0; call < kAhead; ++call) {
        comm.broadcast(buffer.data(), kBytes, DataType::uint8, 0);
        for (std::size_t i = 0; i < kBytes; ++i)
          require(buffer[i] == payload(call, i), "broadcast " + std::to_string(call));
      }
    }
    // Every place, reused in every order: 8 B (the entry), 600 B-4 KiB (the
    // data ring), 8 KiB (the large slot of the call's parity).
    const std::size_t sizes[] = {8, kBytes, shm::kDataRingMaxBytes, 8, 600,
                                 2 * shm::kDataRingMaxBytes, kBytes};
    for (int call = 0; call < 6 * kAhead; ++call) {
      if (r == 2 && call % 5 == 0) std::this_thread::sleep_for(1ms);
      const std::size_t n = sizes[static_cast<std::size_t>(call) % std::size(sizes)];
      std::vector<std::uint8_t> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = r == 1 ? payload(call, i) : 0;
      comm.broadcast(v.data(), n, DataType::uint8, 1);
      for (std::size_t i = 0; i < n; ++i)
        require(v[i] == payload(call, i), "broadcast of " + std::to_string(n) + " bytes, call " +
                                              std::to_string(call));
      std::vector<std::uint8_t> gathered(3 * n, 0);
      for (std::size_t i = 0; i < n; ++i) v[i] = payload(call + r, i);
      comm.gather(v.data(), gathered.data(), n, DataType::uint8, 2);
      if (r == 2)
        for (int q = 0; q < 3; ++q)
          for (std::size_t i = 0; i < n; ++i)
            require(gathered[static_cast<std::size_t>(q) * n + i] == payload(call + q, i),
                    "gather of " + std::to_string(n) + " bytes, call " + std::to_string(call));
      // The root's p blocks: 24 B-24 KiB in one place.
      std::vector<std::uint8_t> blocks(3 * n), mine(n, 0);
      for (std::size_t i = 0; i < 3 * n; ++i) blocks[i] = payload(call, i);
      comm.scatter(blocks.data(), mine.data(), n, DataType::uint8, 0);
      for (std::size_t i = 0; i < n; ++i)
        require(mine[i] == payload(call, static_cast<std::size_t>(r) * n + i),
                "scatter of " + std::to_string(n) + " bytes, call " + std::to_string(call));
    }
  }, options));
  ::sched_setaffinity(0, sizeof allowed, &allowed);
}

// Beyond 64 KiB a broadcast's root and a reduce's other ranks stream their
// slot in chunks that the readers take as they land, and beyond the slot
// through it as through a ring buffer: every byte arrives, at sizes around
// the chunk's and beyond the slot (of one chunk, of three, the default),
// in place or not, from every root. So do two-shot AllReduce's rounds.
TEST(HostSegment, StreamedCollectivesDeliverEveryChunk) {
  for (const char* slot : {"65536", "200000", ""}) {
  if (*slot != '\0') ::setenv("CHORUS_SHM_BYTES", slot, 1);
  expect_all_passed(testing::run_ranks(3, [](Communicator& comm) {
    for (auto kind : {coll::CollectiveKind::broadcast, coll::CollectiveKind::allgather})
      require(CommunicatorAccess::engine(comm).choose(kind, "", 1 << 20).row->family == "shm",
              std::string(coll::to_string(kind)) + " of 1 MiB through the segment");
    const int p = comm.size(), r = comm.rank();
    for (std::size_t count : {std::size_t{16384}, std::size_t{16385}, std::size_t{262147}}) {
      // Allgather: every rank streams its block and reads the others' at
      // once (in place on the second pass).
      for (bool in_place : {false, true}) {
        std::vector<std::int32_t> gathered(count * static_cast<std::size_t>(p), -1), block(count);
        std::int32_t* mine = gathered.data() + count * static_cast<std::size_t>(r);
        for (std::size_t i = 0; i < count; ++i)
          (in_place ? mine : block.data())[i] = static_cast<std::int32_t>(i * 3 + r);
        comm.allgather(in_place ? mine : block.data(), gathered.data(), count, DataType::int32);
        for (int q = 0; q < p; ++q)
          for (std::size_t i = 0; i < count; ++i)
            if (gathered[count * static_cast<std::size_t>(q) + i] != static_cast<std::int32_t>(i * 3 + q))
              require(false, "allgather of " + std::to_string(count) + ": rank " +
                                 std::to_string(q) + "'s element " + std::to_string(i));
      }
      // Alltoall: every rank streams its p - 1 blocks for the others, round
      // by round (named, as a call may).
      {
        CallOptions shm;
        shm.algorithm_name = "shm";
        const std::size_t n = count / 2 + 1;  // of every block
        std::vector<std::int32_t> send(n * static_cast<std::size_t>(p)), recv(send.size(), -1);
        for (int to = 0; to < p; ++to)
          for (std::size_t i = 0; i < n; ++i)
            send[n * static_cast<std::size_t>(to) + i] = static_cast<std::int32_t>(i * 5 + to * 100 + r);
        comm.alltoall(send.data(), recv.data(), n, DataType::int32, shm);
        for (int from = 0; from < p; ++from)
          for (std::size_t i = 0; i < n; ++i)
            if (recv[n * static_cast<std::size_t>(from) + i] != static_cast<std::int32_t>(i * 5 + r * 100 + from))
              require(false, "alltoall of " + std::to_string(n) + " per block: from rank " +
                                 std::to_string(from) + ", element " + std::to_string(i));
      }
      // Two-shot AllReduce: pieces of every chunk in rounds through a
      // window of the slot (two rounds in the smallest slot here).
      for (bool in_place : {false, true}) {
        CallOptions two_shot;
        two_shot.algorithm_name = "shm_two_shot";
        std::vector<std::int32_t> in(count), out(count, -1);
        for (std::size_t i = 0; i < count; ++i) in[i] = static_cast<std::int32_t>(i % 1000 * 3 + r);
        comm.allreduce(in.data(), in_place ? in.data() : out.data(), count, DataType::int32,
                       ReduceOp::sum, two_shot);
        const auto& result = in_place ? in : out;
        for (std::size_t i = 0; i < count; ++i)
          if (result[i] != static_cast<std::int32_t>(p * (i % 1000 * 3) + p * (p - 1) / 2))
            require(false, "two-shot allreduce of " + std::to_string(count) + " at " + std::to_string(i));
      }
      for (int root = 0; root < p; ++root) {
        std::vector<std::int32_t> b(count, -1);
        if (r == root)
          for (std::size_t i = 0; i < count; ++i) b[i] = static_cast<std::int32_t>(i * 7 + root);
        comm.broadcast(b.data(), count, DataType::int32, root);
        for (std::size_t i = 0; i < count; i += 97)
          require(b[i] == static_cast<std::int32_t>(i * 7 + root),
                  "broadcast of " + std::to_string(count) + " at " + std::to_string(i));
        require(b[count - 1] == static_cast<std::int32_t>((count - 1) * 7 + root), "last element");
        std::vector<std::int32_t> in(count), out(count, 0);
        for (std::size_t i = 0; i < count; ++i) in[i] = static_cast<std::int32_t>(i % 1000 + r);
        // In place at roots 1 and 2: above rank 1 the root's output is its
        // input until its turn in the rank order (reduce_slots()).
        const bool in_place = root >= 1;
        comm.reduce(in.data(), in_place ? in.data() : out.data(), count, DataType::int32,
                    ReduceOp::sum, root);
        if (r == root) {
          const auto& result = in_place ? in : out;
          for (std::size_t i = 0; i < count; ++i)
            if (result[i] != static_cast<std::int32_t>(p * (i % 1000) + p * (p - 1) / 2))
              require(false, "reduce of " + std::to_string(count) + " at " + std::to_string(i));
        }
      }
    }
  }));
  ::unsetenv("CHORUS_SHM_BYTES");
  }
}

TEST(HostSegment, AWaitOnASlotEndsOnAbortAndAtTheDeadline) {
  Options options;
  options.timeout = std::chrono::seconds(5);  // also the creation's: sanitized probes are slow
  // Rank 1 never calls: rank 0 times out naming whom it waited for.
  auto outcomes = testing::run_ranks(2, [](Communicator& comm) {
    if (comm.rank() == 1) return;
    float x = 1;
    comm.allreduce(&x, &x, 1, DataType::float32, ReduceOp::sum);
  }, options);
  EXPECT_TRUE(outcomes[0].failed);
  EXPECT_EQ(outcomes[0].code, ErrorCode::timeout) << outcomes[0].message;
  EXPECT_NE(outcomes[0].message.find("rank 1 to begin call #1"), std::string::npos)
      << outcomes[0].message;
  // Aborted from another thread while it sleeps on the segment.
  options.timeout = std::chrono::seconds(60);
  std::chrono::steady_clock::duration waited{};
  outcomes = testing::run_ranks(2, [&](Communicator& comm) {
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(3s);  // stays alive, never calls
      return;
    }
    std::thread aborter([&] {
      std::this_thread::sleep_for(300ms);
      comm.abort("the test gives up");
    });
    const auto start = std::chrono::steady_clock::now();
    float x = 1;
    try {
      comm.allreduce(&x, &x, 1, DataType::float32, ReduceOp::sum);
    } catch (...) {
      waited = std::chrono::steady_clock::now() - start;
      aborter.join();
      throw;
    }
    aborter.join();
  }, options);
  EXPECT_TRUE(outcomes[0].failed);
  EXPECT_EQ(outcomes[0].code, ErrorCode::aborted) << outcomes[0].message;
  EXPECT_LT(waited, 2s);  // the abort at 300 ms wakes the sleeper at once
}

// A waiter that went to sleep (its peer came later than the spin) is woken
// by the peer's publish, not by its sleep's 10 ms timeout: publishes are
// fenceless where the kernel has membarrier (shm/segment.hpp), and the
// sleeper's barrier is what keeps their wake-up from being missed.
TEST(HostSegment, ASleepingWaiterIsWokenByThePublish) {
  constexpr int kCalls = 30;
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> published(kCalls), returned(kCalls);
  expect_all_passed(testing::run_ranks(2, [&](Communicator& comm) {
    for (int call = 0; call < kCalls; ++call) {
      float x = 1;
      if (comm.rank() == 1) {
        std::this_thread::sleep_for(2ms);  // far beyond the spin: rank 0 sleeps on the futex
        published[call] = Clock::now();
      }
      comm.allreduce(&x, &x, 1, DataType::float32, ReduceOp::sum);
      if (comm.rank() == 0) returned[call] = Clock::now();
      require(x == 2, "allreduce " + std::to_string(call));
    }
  }));
  std::vector<Clock::duration> late(kCalls);
  for (int call = 0; call < kCalls; ++call) late[call] = returned[call] - published[call];
  std::nth_element(late.begin(), late.begin() + kCalls / 2, late.end());
  // Woken by its timeout instead, rank 0 returns 0-10 ms after the publish
  // (5 ms median, measured with the wake-up removed); woken, well under 1.
  EXPECT_LT(late[kCalls / 2], 2ms) << "the median call returned "
                                   << std::chrono::duration<double, std::milli>(late[kCalls / 2]).count()
                                   << " ms after its peer published";
}

// An allgather among threads of this process, each attaching a segment of
// its own mapping as a rank would.
class ThreadAllgather {
 public:
  explicit ThreadAllgather(int ranks) : gathered_(static_cast<std::size_t>(ranks)), sync_(ranks) {}
  shm::Allgather of(int rank) {
    return [this, rank](const void* mine, std::size_t bytes, void* out) {
      const auto* from = static_cast<const std::byte*>(mine);
      gathered_[static_cast<std::size_t>(rank)].assign(from, from + bytes);
      sync_.arrive_and_wait();
      for (std::size_t q = 0; q < gathered_.size(); ++q)
        std::memcpy(static_cast<std::byte*>(out) + q * bytes, gathered_[q].data(), bytes);
      sync_.arrive_and_wait();
    };
  }

 private:
  std::vector<std::vector<std::byte>> gathered_;
  std::barrier<> sync_;
};

// The pages of `bytes` that are not in this process's page tables
// (/proc/self/pagemap: bit 63 of a page's word says present); -1 when the
// map cannot be read.
long pages_not_present(std::span<const std::byte> bytes) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const int map = ::open("/proc/self/pagemap", O_RDONLY);  // reads of whole words only
  if (map < 0) return -1;
  long missing = 0;
  const auto first = reinterpret_cast<std::uintptr_t>(bytes.data()) / page;
  const auto last = (reinterpret_cast<std::uintptr_t>(bytes.data()) + bytes.size() - 1) / page;
  for (std::uintptr_t p = first; p <= last && missing >= 0; ++p) {
    std::uint64_t word = 0;
    if (::pread(map, &word, sizeof word, static_cast<off_t>(p * sizeof word)) != sizeof word)
      missing = -1;
    else if ((word >> 63) == 0)
      ++missing;
  }
  ::close(map);
  return missing;
}

// Every page before the large slots (what every call touches) is mapped in
// by attach(), on every rank, so that no call pays for a page's first use:
// here that cost 5-12 us a page, and the first 256 calls of an 8-byte
// AllReduce at p = 4 took 49 us each instead of 12 (docs/performance.md,
// twenty-sixth pass). Without it only the pages attach() writes were.
TEST(HostSegment, AttachMapsInTheRingsEveryCallTouches) {
  ThreadAllgather allgather(3);
  long missing[3] = {-2, -2, -2};
  std::size_t bytes[3] = {};
  const auto rank = [&](int r) {
    auto segment = shm::Segment::attach(r, 3, 64 << 10, allgather.of(r));
    if (segment == nullptr) return;
    bytes[r] = segment->rings().size();
    missing[r] = pages_not_present(segment->rings());
  };
  std::thread one(rank, 1), two(rank, 2);
  rank(0);
  one.join();
  two.join();
  for (int r = 0; r < 3; ++r) {
    ASSERT_NE(missing[r], -2) << "rank " << r << " has no segment";
    if (missing[r] == -1) GTEST_SKIP() << "/proc/self/pagemap cannot be read";
    EXPECT_GT(bytes[r], std::size_t{3} * 256 * 512)
        << "rank " << r << ": the rings hold 256 entries a rank";
    EXPECT_EQ(missing[r], 0) << "rank " << r << ": pages of the rings not mapped in at attach";
  }
}

// Waits yield the CPU only where the ranks are more than the CPUs they may
// run on between them: not where a launcher binds each rank to a core of
// its own (mpirun at p <= 2), which leaves each rank's own affinity one CPU.
TEST(HostSegment, WaitsYieldOnlyWhereTheRanksShareTooFewCpus) {
  cpu_set_t allowed;
  ASSERT_EQ(::sched_getaffinity(0, sizeof allowed, &allowed), 0);
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &allowed)) cpus.push_back(cpu);
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs to bind ranks to";
  // Two ranks as threads, each bound to the CPU given, attaching a segment
  // over an in-process allgather; whether each one's waits yield.
  const auto yields = [](int cpu0, int cpu1) {
    ThreadAllgather allgather(2);
    bool bound[2] = {}, attached[2] = {}, yield[2] = {};
    const auto rank = [&](int r, int cpu) {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(cpu, &one);
      bound[r] = ::pthread_setaffinity_np(::pthread_self(), sizeof one, &one) == 0;
      auto segment = shm::Segment::attach(r, 2, 4096, allgather.of(r));
      attached[r] = segment != nullptr;
      yield[r] = attached[r] && segment->yields_while_waiting();
    };
    std::thread other(rank, 1, cpu1);
    rank(0, cpu0);
    other.join();
    EXPECT_TRUE(bound[0] && bound[1]) << "a rank could not be bound to its CPU";
    EXPECT_TRUE(attached[0] && attached[1]) << "no segment";
    EXPECT_EQ(yield[0], yield[1]) << "the ranks decided differently";
    return yield[0];
  };
  EXPECT_FALSE(yields(cpus[0], cpus[1])) << "each rank bound to a CPU of its own";
  EXPECT_TRUE(yields(cpus[0], cpus[0])) << "both ranks bound to one CPU";
}

TEST(HostSegment, AStaleSegmentOfADeadJobIsRemovedAndDoesNotConfuseANewOne) {
  // A pid that is surely gone: a child that has exited and been reaped.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ::waitpid(child, nullptr, 0);
  const std::string stale = "/dev/shm/chorus." + std::to_string(child) + ".00000000deadbeef";
  {
    std::ofstream garbage(stale);
    garbage << std::string(4096, '\x7f');  // no header, wrong size: another job's leftovers
  }
  ASSERT_TRUE(std::filesystem::exists(stale));
  expect_all_passed(testing::run_ranks(3, [](Communicator& comm) {
    require(CommunicatorAccess::engine(comm).host != nullptr, "no host segment");
    std::int64_t x = comm.rank() + 1;
    comm.allreduce(&x, &x, 1, DataType::int64, ReduceOp::sum);
    require(x == 6, "allreduce beside a stale segment");
  }));
  EXPECT_FALSE(std::filesystem::exists(stale)) << "the stale segment was left in place";
  // A live process's segment is never taken for stale.
  const std::string live = "/dev/shm/chorus." + std::to_string(::getpid()) + ".00000000cafe0000";
  { std::ofstream(live) << "x"; }
  shm::remove_stale_segments();
  EXPECT_TRUE(std::filesystem::exists(live));
  std::filesystem::remove(live);
}

// Where the host segment takes every automatic AllReduce, the probe
// measures the constants and times no variant (seconds at p = 3-4 on two
// cores, for choices the segment makes anyway); a forced family chooses by
// the formulas then. Without a segment, or with slots too small for
// two-shot's rounds (some sizes then ask the model), it times them all.
TEST(HostSegment, TakingEveryAllReduceSparesTheProbeTimingTheVariants) {
  const auto probe_of = [](bool segment_takes_all) {
    return testing::run_ranks(3, [segment_takes_all](Communicator& comm) {
      auto& engine = CommunicatorAccess::engine(comm);
      const coll::CostModel& model = engine.cost_model();
      require(model.alpha > 0 && model.gamma > 0, "the constants were not measured");
      require(model.calibrated != segment_takes_all,
              segment_takes_all ? "the probe timed the variants the segment replaces"
                                : "the probe did not time the variants the choice needs");
      if (!segment_takes_all) return;
      for (std::size_t bytes : {std::size_t{8}, std::size_t{1} << 20, std::size_t{1} << 30})
        require(engine.choose(coll::CollectiveKind::allreduce, "", bytes).row->host_slot_need !=
                    nullptr,
                "an automatic AllReduce left the segment");
      require(
          engine.choose(coll::CollectiveKind::allreduce, "direct", 1 << 20).row->family == "direct",
          "a forced family without variant times");
      std::vector<float> x(1 << 12, 1.0f);
      CallOptions direct;
      direct.algorithm = Algorithm::direct;
      comm.allreduce(x.data(), x.data(), x.size(), DataType::float32, ReduceOp::sum, direct);
      require(x[0] == 3 && x.back() == 3, "a forced direct AllReduce");
    });
  };
  expect_all_passed(probe_of(true));
  ::setenv("CHORUS_SHM", "0", 1);
  const auto without_segment = probe_of(false);
  ::unsetenv("CHORUS_SHM");
  expect_all_passed(without_segment);
  ::setenv("CHORUS_SHM_BYTES", "4096", 1);
  const auto small_slots = probe_of(false);
  ::unsetenv("CHORUS_SHM_BYTES");
  expect_all_passed(small_slots);
}

TEST(HostSegment, ShmZeroTurnsItOffAndCallsStillRun) {
  ::setenv("CHORUS_SHM", "0", 1);
  const auto outcomes = testing::run_ranks(2, [](Communicator& comm) {
    require(CommunicatorAccess::engine(comm).host == nullptr, "CHORUS_SHM=0 still made a segment");
    float x = 1;
    comm.allreduce(&x, &x, 1, DataType::float32, ReduceOp::sum);
    require(x == 2, "allreduce without the segment");
    try {
      CallOptions forced;
      forced.algorithm = Algorithm::shared_memory;
      comm.allreduce(&x, &x, 1, DataType::float32, ReduceOp::sum, forced);
      require(false, "shm ran without a segment");
    } catch (const Error& e) {
      require(e.code() == ErrorCode::invalid_argument &&
                  std::string(e.what()).find("needs every rank on one host") != std::string::npos,
              e.what());
    }
  });
  ::unsetenv("CHORUS_SHM");
  expect_all_passed(outcomes);
}

}  // namespace
}  // namespace chorus

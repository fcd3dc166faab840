// The AllReduce algorithms (ring, double binary tree, recursive doubling,
// halving-doubling, direct one- and two-shot) over the local
// transport (ranks as threads), against a
// sequential reference: every dtype x op, p from 1 to 64, counts around p
// and with tails, in place and out of place. Inputs are integer-valued, so
// every order of reduction gives the exact result and results must match
// the reference to the bit; a random-data case checks that all ranks agree
// to the bit among themselves.
#include "coll/direct.hpp"
#include "coll/halving_doubling.hpp"
#include "coll/recursive_doubling.hpp"
#include "coll/patterns/ring.hpp"
#include "coll/ring.hpp"
#include "coll/tree.hpp"
#include "reduce/float16.hpp"
#include "reduce/reduce.hpp"
#include "common/pages.hpp"
#include "local_transports.hpp"
#include "../resident_pages.hpp"
#include "transport/local/local_transport.hpp"

#include <gtest/gtest.h>

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace chorus::coll {
namespace {

using Bytes = std::vector<std::byte>;

// The value rank `rank` contributes at element i: small integers, exact in
// every type, and for prod only +-1 so that no product overflows a float.
double contribution(DataType type, ReduceOp op, int rank, std::size_t i) {
  const long v = static_cast<long>((static_cast<std::size_t>(rank) * 31 + i * 17) % 9);
  const bool is_signed = type == DataType::int8 || type == DataType::int32 ||
                         type == DataType::int64 || is_floating_point(type);
  if (op == ReduceOp::prod && is_floating_point(type)) return (v % 3 == 0) ? -1.0 : 1.0;
  return static_cast<double>(is_signed ? v - 4 : v);
}

void store_value(DataType type, std::byte* p, double v) {
  switch (type) {
    case DataType::int8: {
      auto x = static_cast<std::int8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
    case DataType::uint8: {
      auto x = static_cast<std::uint8_t>(v);
      std::memcpy(p, &x, 1);
      break;
    }
    case DataType::int32: {
      auto x = static_cast<std::int32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case DataType::uint32: {
      auto x = static_cast<std::uint32_t>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case DataType::int64: {
      auto x = static_cast<std::int64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case DataType::uint64: {
      auto x = static_cast<std::uint64_t>(v);
      std::memcpy(p, &x, 8);
      break;
    }
    case DataType::float16: {
      auto x = reduce::float_to_float16(static_cast<float>(v));
      std::memcpy(p, &x, 2);
      break;
    }
    case DataType::bfloat16: {
      auto x = reduce::float_to_bfloat16(static_cast<float>(v));
      std::memcpy(p, &x, 2);
      break;
    }
    case DataType::float32: {
      auto x = static_cast<float>(v);
      std::memcpy(p, &x, 4);
      break;
    }
    case DataType::float64:
      std::memcpy(p, &v, 8);
      break;
  }
}

Bytes input(DataType type, ReduceOp op, int rank, std::size_t count) {
  const std::size_t size = size_of(type);
  Bytes b(count * size);
  std::mt19937_64 rng(static_cast<std::uint64_t>(rank) * 7919 + count);
  for (std::size_t i = 0; i < count; ++i) {
    const bool bitwise = op == ReduceOp::band || op == ReduceOp::bor || op == ReduceOp::bxor;
    if (bitwise) {
      const std::uint64_t bits = rng();
      std::memcpy(&b[i * size], &bits, size);
    } else {
      store_value(type, &b[i * size], contribution(type, op, rank, i));
    }
  }
  return b;
}

// Rank 0's input combined with each next rank's, in order.
Bytes reference(DataType type, ReduceOp op, int p, std::size_t count) {
  Bytes acc = input(type, op, 0, count);
  for (int r = 1; r < p; ++r) {
    const Bytes next = input(type, op, r, count);
    if (count) reduce::reduce(acc.data(), next.data(), count, type, op);
  }
  if (op == ReduceOp::avg && count)
    reduce::divide(acc.data(), count, type, static_cast<std::size_t>(p));
  return acc;
}

using Algorithm = void (*)(const Collective&, const void*, void*, std::size_t, DataType, ReduceOp);

// Runs `algorithm` on p threads; returns every rank's result.
std::vector<Bytes> run(Algorithm algorithm, int p, std::size_t count, DataType type, ReduceOp op,
                       bool in_place, const std::function<Bytes(int)>& make_input,
                       std::uint64_t sequence = 7) {
  std::vector<Bytes> results(static_cast<std::size_t>(p));
  testing::run_on_local_transports(p, [&](transport::LocalTransport& t, int r) {
    Bytes send = make_input(r);
    Bytes& out = results[static_cast<std::size_t>(r)];
    Collective c{t, sequence, transport::deadline_after(120)};
    if (in_place) {
      out = send;
      algorithm(c, out.data(), out.data(), count, type, op);
    } else {
      out.assign(send.size(), std::byte{0xEE});
      algorithm(c, send.data(), out.data(), count, type, op);
    }
  });
  return results;
}

struct Case {
  std::string algorithm;
  DataType type;
  ReduceOp op;
};

struct Named {
  const char* name;
  Algorithm run;
};
constexpr Named kAlgorithms[] = {
    {"ring", &ring_allreduce},
    {"tree", &tree_allreduce},
    {"recursive_doubling", &recursive_doubling_allreduce},
    {"halving_doubling", &halving_doubling_allreduce},
    {"direct_one_shot", &direct_one_shot_allreduce},
    {"direct_two_shot", &direct_two_shot_allreduce},
};

Algorithm algorithm_named(const std::string& name) {
  for (const auto& a : kAlgorithms)
    if (name == a.name) return a.run;
  throw std::runtime_error("no algorithm " + name);
}

class AlgorithmMatrix : public ::testing::TestWithParam<Case> {};

TEST_P(AlgorithmMatrix, MatchesSequentialReferenceToTheBit) {
  const auto& [name, type, op] = GetParam();
  const Algorithm algorithm = algorithm_named(name);
  for (int p : {1, 2, 3, 4, 5, 7, 8, 16}) {
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t(p - 1), std::size_t(p),
                              std::size_t(p + 1), std::size_t{4099}}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(::testing::Message() << "p " << p << ", count " << count
                                          << (in_place ? ", in place" : ", out of place"));
        const Bytes want = reference(type, op, p, count);
        const auto got = run(algorithm, p, count, type, op, in_place,
                             [&](int r) { return input(type, op, r, count); });
        for (int r = 0; r < p; ++r)
          ASSERT_TRUE(got[static_cast<std::size_t>(r)] == want) << "rank " << r;
      }
    }
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const Named& algorithm : kAlgorithms)
    for (int t = 0; t < kDataTypeCount; ++t)
      for (int o = 0; o < kReduceOpCount; ++o)
        if (is_supported(static_cast<DataType>(t), static_cast<ReduceOp>(o)))
          cases.push_back({algorithm.name, static_cast<DataType>(t), static_cast<ReduceOp>(o)});
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllTypesAndOps, AlgorithmMatrix, ::testing::ValuesIn(all_cases()),
                         [](const auto& info) {
                           return info.param.algorithm + "_" +
                                  std::string(to_string(info.param.type)) + "_" +
                                  std::string(to_string(info.param.op));
                         });

TEST(Algorithms, SixtyFourRanks) {
  for (const Named& algorithm : kAlgorithms)
    for (std::size_t count :
         {std::size_t{0}, std::size_t{63}, std::size_t{65}, std::size_t{1000}}) {
      SCOPED_TRACE(algorithm.name);
      const Bytes want = reference(DataType::int32, ReduceOp::sum, 64, count);
      const auto got = run(algorithm.run, 64, count, DataType::int32, ReduceOp::sum, false,
                           [&](int r) { return input(DataType::int32, ReduceOp::sum, r, count); });
      for (const auto& g : got) ASSERT_TRUE(g == want) << "count " << count;
    }
}

TEST(Algorithms, LargeBuffersAreSegmentedAndPipelined) {
  // Several segments per chunk (ring: 512 KiB) or per tree (128 KiB), more
  // than the tree's window of segments in flight.
  const std::size_t count = (std::size_t{1} << 20) + 3;
  for (auto [name, algorithm] : {std::pair{"ring", &ring_allreduce}, {"tree", &tree_allreduce}})
    for (int p : {2, 3, 4, 6}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(name);
        const Bytes want = reference(DataType::float32, ReduceOp::sum, p, count);
        const auto got =
            run(algorithm, p, count, DataType::float32, ReduceOp::sum, in_place,
                [&](int r) { return input(DataType::float32, ReduceOp::sum, r, count); });
        for (const auto& g : got) {
          std::size_t first_bad = 0;
          while (first_bad < g.size() && g[first_bad] == want[first_bad]) ++first_bad;
          ASSERT_TRUE(g == want) << "p " << p << (in_place ? " in place" : "") << ", first wrong byte "
                                 << first_bad << " of " << g.size();
        }
      }
    }
}

TEST(Algorithms, InPlaceRingReusesItsLandingWindowInTurn) {
  // In place, a step's segments land in a window of kLandingSegments and
  // each later one is received into the place of the one kLandingSegments
  // before it: blocks of more than twice the window, and a short last one.
  const std::size_t per_segment = kRingSegmentBytes / sizeof(float);
  for (int p : {2, 3}) {
    const std::size_t count = (2 * kLandingSegments + 1) * per_segment * static_cast<std::size_t>(p) + 5;
    const Bytes want = reference(DataType::float32, ReduceOp::sum, p, count);
    const auto got = run(&ring_allreduce, p, count, DataType::float32, ReduceOp::sum, true,
                         [&](int r) { return input(DataType::float32, ReduceOp::sum, r, count); });
    for (int r = 0; r < p; ++r)
      ASSERT_TRUE(got[static_cast<std::size_t>(r)] == want) << "p " << p << ", rank " << r;
  }
}

TEST(Algorithms, InPlaceTheirPartsTakeTurnsByCallAndSumRight) {
  // In place, which rank sums which part of the buffer turns with the
  // call's sequence number (the ring and the tree at p = 2, halving-doubling
  // every other call, direct two-shot by p): consecutive calls, every turn,
  // parts of unequal length (a count not divisible by p), several segments.
  const std::size_t count = 3 * kRingSegmentBytes / sizeof(float) + 1;
  for (const char* name : {"ring", "tree", "halving_doubling", "direct_two_shot"})
    for (int p : {2, 3, 4}) {
      const Bytes want = reference(DataType::float32, ReduceOp::sum, p, count);
      for (std::uint64_t sequence : {7, 8, 9, 10}) {
        const auto got = run(
            algorithm_named(name), p, count, DataType::float32, ReduceOp::sum, true,
            [&](int r) { return input(DataType::float32, ReduceOp::sum, r, count); }, sequence);
        for (int r = 0; r < p; ++r)
          ASSERT_TRUE(got[static_cast<std::size_t>(r)] == want)
              << name << ", p " << p << ", call #" << sequence << ", rank " << r;
      }
    }
}

TEST(Scratch, EveryBufferStartsOnAPageAndKeepsItsBytesUntilItGrows) {
  // Algorithms reduce out of scratch and land cross-memory copies in it:
  // a buffer that starts off a cache line makes every vector load a split
  // one. Sizes below and above malloc's mmap threshold, a slot that grows,
  // and one asked for less keeps its buffer.
  Scratch scratch;
  for (unsigned slot = 0; slot < Scratch::kSlots; ++slot)
    for (std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{100},
                              std::size_t{256} << 10, std::size_t{4} << 20}) {
      std::byte* b = scratch.get(slot, bytes);
      ASSERT_NE(b, nullptr);
      EXPECT_EQ(reinterpret_cast<std::uintptr_t>(b) % Scratch::kAlignment, 0u)
          << "slot " << slot << ", " << bytes << " bytes";
      if (bytes) std::memset(b, 0x5a, bytes);  // all of it is usable
    }
  std::byte* kept = scratch.get(1, 4 << 20);
  kept[4095] = std::byte{7};
  EXPECT_EQ(scratch.get(1, 64), kept);
  EXPECT_EQ(kept[4095], std::byte{7});
}

TEST(Scratch, ANewBufferIsMappedBeforeItsFirstTouch) {
  // Its pages mapped in one call (common/pages.hpp), not one fault at a
  // time inside the first call that uses it: 8 MiB, a fresh mapping of its
  // own (above malloc's mmap threshold).
  constexpr std::size_t kBytes = 8 << 20;
  Scratch scratch;
  std::byte* b = scratch.get(0, kBytes);
  const std::size_t resident = testing::resident_pages(b, kBytes);
  const auto pages = kBytes / static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* probe = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(probe, MAP_FAILED);
  const bool kernel_populates = populate_pages(probe, 4096);
  ::munmap(probe, 4096);
  if (!kernel_populates) GTEST_SKIP() << "this kernel has no MADV_POPULATE_WRITE (Linux 5.14)";
  EXPECT_EQ(resident, pages);
}

TEST(Collective, WaitAllEndsAtTheFirstFailureWhicheverRequestItIs) {
  // Rank 0's algorithm waits on a receive from rank 1 (healthy, never sends)
  // and one from rank 2 (which aborts): the call must fail with rank 2's
  // error at once, not sit on rank 1's receive until the deadline.
  auto fabric = transport::LocalFabric::create(3);
  std::string outcome = "not run";
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      transport::LocalTransport t(fabric, r);
      std::uint64_t a = 0, b = 0;
      if (r == 2) return t.abort("rank 2 leaves");
      if (r == 1) {  // stays until rank 0 is done, sending nothing it waits for
        try {
          t.wait(*t.irecv(0, 0x99, &a, sizeof a), transport::deadline_after(30));
        } catch (const std::exception&) {
        }
        return;
      }
      const Collective c{t, 1, transport::deadline_after(20)};
      const std::vector<transport::RequestPtr> requests = {t.irecv(1, 0x42, &a, sizeof a),
                                                           t.irecv(2, 0x42, &b, sizeof b)};
      const auto start = transport::Clock::now();
      try {
        c.wait_all(requests);
        outcome = "wait_all succeeded";
      } catch (const Error& e) {
        const double seconds = std::chrono::duration<double>(transport::Clock::now() - start).count();
        outcome = e.code() == ErrorCode::peer_failure && seconds < 5
                      ? "ok"
                      : "ended after " + std::to_string(seconds) + " s with: " + e.what();
      }
      try {  // let rank 1 go (the failed call aborted this transport: then it sees that)
        t.isend(1, 0x99, &a, sizeof a);
      } catch (const std::exception&) {
      }
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(outcome, "ok");
}

TEST(Tree, BothTreesSpanEveryRankAndComplementEachOther) {
  for (int p = 1; p <= 70; ++p) {
    int leaves_in_both = 0;
    std::vector<int> leaf_count(static_cast<std::size_t>(p), 0);
    for (int which : {0, 1}) {
      int roots = 0;
      std::vector<int> parent_count(static_cast<std::size_t>(p), 0);
      for (int r = 0; r < p; ++r) {
        const TreeLinks links = tree_links(which, r, p);
        ASSERT_LE(links.children.size(), 2u);
        if (links.parent < 0) ++roots;
        if (links.children.empty()) ++leaf_count[static_cast<std::size_t>(r)];
        for (int child : links.children) {
          ASSERT_GE(child, 0);
          ASSERT_LT(child, p);
          EXPECT_EQ(tree_links(which, child, p).parent, r) << "p " << p << " tree " << which;
          ++parent_count[static_cast<std::size_t>(child)];
        }
      }
      EXPECT_EQ(roots, 1) << "p " << p << " tree " << which;
      for (int r = 0; r < p; ++r)  // every rank but the root has exactly one parent
        EXPECT_EQ(parent_count[static_cast<std::size_t>(r)], tree_links(which, r, p).parent < 0 ? 0 : 1);
    }
    for (int c : leaf_count) leaves_in_both += c == 2;
    // Interior work is shared: at most one rank (odd p) idles in both trees.
    if (p > 1) {
      EXPECT_LE(leaves_in_both, 1) << "p " << p;
    }
  }
}

TEST(Algorithms, RandomFloatsGiveBitIdenticalResultsOnEveryRank) {
  const std::size_t count = 100003;
  for (const Named& algorithm : kAlgorithms)
    for (int p : {3, 5, 6}) {
      SCOPED_TRACE(algorithm.name);
      const auto got =
          run(algorithm.run, p, count, DataType::float32, ReduceOp::sum, false, [&](int r) {
            std::mt19937 rng(static_cast<unsigned>(r));
            std::normal_distribution<float> d;
            Bytes b(count * 4);
            for (std::size_t i = 0; i < count; ++i) {
              const float v = d(rng);
              std::memcpy(&b[i * 4], &v, 4);
            }
            return b;
          });
      for (const auto& g : got) ASSERT_TRUE(g == got[0]) << "p " << p;
    }
}

}  // namespace
}  // namespace chorus::coll

// The collectives other than AllReduce, through the Communicator over
// in-process ranks: every one against a sequential reference, for ranks
// 1..16 and 64, counts 0 to past the broadcast chain threshold, every dtype
// (and every op defined on it for the reductions), in place where the API
// allows it; plus argument errors and a mismatched kind.
#include "../comm/local_ranks.hpp"
#include "reduce/float16.hpp"
#include "reduce/reduce.hpp"

#include <chorus/chorus.h>
#include <chorus/chorus.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace chorus {
namespace {

using testing::run_ranks;
using Bytes = std::vector<std::byte>;

const std::vector<int> kRanks = {1, 2, 3, 4, 5, 8, 16};
// 70001 float32 elements pass the broadcast chain threshold (256 KiB).
const std::vector<std::size_t> kCounts = {0, 1, 7, 1000, 70001};

std::vector<DataType> all_types() {
  std::vector<DataType> types;
  for (int t = 0; t < kDataTypeCount; ++t) types.push_back(static_cast<DataType>(t));
  return types;
}

// Element i of rank r: small integers (exact in every type, sums of up to
// 64 ranks too); for prod 1 or 2, so that products stay exact or overflow
// alike in any order.
Bytes values(DataType type, int r, std::size_t count, ReduceOp op, std::size_t salt = 0) {
  Bytes out(count * size_of(type));
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t k = i + static_cast<std::size_t>(r) * 3 + salt;
    const int v = op == ReduceOp::prod ? 1 + static_cast<int>(k % 2) : static_cast<int>(k % 5);
    std::byte* at = out.data() + i * size_of(type);
    auto put = [&](auto x) { std::memcpy(at, &x, sizeof x); };
    switch (type) {
      case DataType::int8: put(static_cast<std::int8_t>(v)); break;
      case DataType::uint8: put(static_cast<std::uint8_t>(v)); break;
      case DataType::int32: put(static_cast<std::int32_t>(v)); break;
      case DataType::uint32: put(static_cast<std::uint32_t>(v)); break;
      case DataType::int64: put(static_cast<std::int64_t>(v)); break;
      case DataType::uint64: put(static_cast<std::uint64_t>(v)); break;
      case DataType::float16: put(reduce::float_to_float16(static_cast<float>(v))); break;
      case DataType::bfloat16: put(reduce::float_to_bfloat16(static_cast<float>(v))); break;
      case DataType::float32: put(static_cast<float>(v)); break;
      case DataType::float64: put(static_cast<double>(v)); break;
    }
  }
  return out;
}

// op over ranks 0..p-1 of values(type, r, count, op, salt), in rank order.
Bytes reference(DataType type, int p, std::size_t count, ReduceOp op, std::size_t salt = 0) {
  Bytes acc = values(type, 0, count, op, salt);
  for (int r = 1; r < p; ++r) {
    const Bytes next = values(type, r, count, op, salt);
    if (count) reduce::reduce(acc.data(), next.data(), count, type, op);
  }
  if (op == ReduceOp::avg && count) reduce::divide(acc.data(), count, type, static_cast<std::size_t>(p));
  return acc;
}

void expect_ok(const std::vector<testing::RankOutcome>& outcomes, const std::string& what) {
  for (std::size_t r = 0; r < outcomes.size(); ++r)
    EXPECT_FALSE(outcomes[r].failed) << what << ": rank " << r << ": " << outcomes[r].message;
}

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

std::string label(const char* name, int p, std::size_t count, DataType type) {
  return std::string(name) + " p=" + std::to_string(p) + " count=" + std::to_string(count) + " " +
         std::string(to_string(type));
}

// One communicator per rank count; each test loops over its cases inside it
// (making a communicator runs the cost-model probe).
TEST(Collectives, BroadcastFromEveryRootGivesTheRootsBuffer) {
  for (int p : kRanks)
    expect_ok(run_ranks(p, [&](Communicator& comm) {
      for (std::size_t count : kCounts)
        for (DataType type : all_types()) {
          if (count > 1000 && type != DataType::float32) continue;  // large: one type suffices
          for (int root : {0, p - 1, p / 2}) {
            const Bytes want = values(type, root, count, ReduceOp::sum);
            Bytes buffer = comm.rank() == root ? want : Bytes(want.size(), std::byte{0x5a});
            comm.broadcast(buffer.data(), count, type, root);
            require(buffer == want, label("broadcast", p, count, type) + " root=" + std::to_string(root));
          }
        }
    }), "broadcast p=" + std::to_string(p));
}

TEST(Collectives, ReduceGivesTheRootEveryOpOverAllRanks) {
  for (int p : kRanks)
    expect_ok(run_ranks(p, [&](Communicator& comm) {
      for (std::size_t count : kCounts)
        for (DataType type : all_types())
          for (int o = 0; o < kReduceOpCount; ++o) {
            const auto op = static_cast<ReduceOp>(o);
            if (!is_supported(type, op) || (count > 1000 && type != DataType::float32)) continue;
            const int root = (p * 7 + o) % p;
            const std::string what = label("reduce", p, count, type) + " " + std::string(to_string(op));
            Bytes send = values(type, comm.rank(), count, op);
            if (comm.rank() != root) {
              comm.reduce(send.data(), nullptr, count, type, op, root);
              continue;
            }
            const Bytes want = reference(type, p, count, op);
            if (o % 2) {  // in place at the root
              comm.reduce(send.data(), send.data(), count, type, op, root);
              require(send == want, what + " in place");
            } else {
              Bytes recv(want.size());
              comm.reduce(send.data(), recv.data(), count, type, op, root);
              require(recv == want, what);
            }
          }
    }), "reduce p=" + std::to_string(p));
}

TEST(Collectives, AllgatherPutsRankJsBlockAtJInPlaceOrNot) {
  for (int p : kRanks)
    expect_ok(run_ranks(p, [&](Communicator& comm) {
      for (std::size_t count : kCounts)
        for (DataType type : all_types()) {
          if (count > 1000 && type != DataType::float32) continue;
          const std::size_t block = count * size_of(type);
          Bytes want;
          for (int r = 0; r < p; ++r) {
            const Bytes b = values(type, r, count, ReduceOp::sum);
            want.insert(want.end(), b.begin(), b.end());
          }
          for (bool in_place : {false, true}) {
            const Bytes mine = values(type, comm.rank(), count, ReduceOp::sum);
            Bytes recv(want.size(), std::byte{0x5a});
            const std::byte* send = mine.data();
            if (in_place) {
              std::byte* slot = recv.data() + static_cast<std::size_t>(comm.rank()) * block;
              if (block) std::memcpy(slot, mine.data(), block);
              send = slot;
            }
            comm.allgather(send, recv.data(), count, type);
            require(recv == want, label("allgather", p, count, type) + (in_place ? " in place" : ""));
          }
        }
    }), "allgather p=" + std::to_string(p));
}

TEST(Collectives, ReduceScatterGivesEachRankItsReducedBlock) {
  for (int p : kRanks)
    expect_ok(run_ranks(p, [&](Communicator& comm) {
      const int r = comm.rank();
      for (std::size_t count : kCounts)
        for (DataType type : all_types())
          for (int o = 0; o < kReduceOpCount; ++o) {
            const auto op = static_cast<ReduceOp>(o);
            if (!is_supported(type, op) || (count > 1000 && type != DataType::float32)) continue;
            const std::string what = label("reduce_scatter", p, count, type) + " " + std::string(to_string(op));
            // Rank r's send is p blocks; block j is values(..., salt = 11 j).
            Bytes send;
            for (int j = 0; j < p; ++j) {
              const Bytes b = values(type, r, count, op, static_cast<std::size_t>(j) * 11);
              send.insert(send.end(), b.begin(), b.end());
            }
            const std::size_t block = count * size_of(type);
            const Bytes want = reference(type, p, count, op, static_cast<std::size_t>(r) * 11);
            if (o % 2) {  // in place: the result lands in our block of send
              std::byte* mine = send.data() + static_cast<std::size_t>(r) * block;
              comm.reduce_scatter(send.data(), mine, count, type, op);
              require(Bytes(mine, mine + block) == want, what + " in place");
            } else {
              Bytes recv(block);
              comm.reduce_scatter(send.data(), recv.data(), count, type, op);
              require(recv == want, what);
            }
          }
    }), "reduce_scatter p=" + std::to_string(p));
}

TEST(Collectives, AlltoallDeliversBlockIofRankJToBlockJofRankI) {
  for (int p : kRanks)
    expect_ok(run_ranks(p, [&](Communicator& comm) {
      const int r = comm.rank();
      for (std::size_t count : kCounts)
        for (DataType type : all_types()) {
          if (count > 1000 && type != DataType::float32) continue;
          // Block j of rank i's send: values(type, i, count, sum, salt = 13 j).
          auto block_of = [&](int from, int to) {
            return values(type, from, count, ReduceOp::sum, static_cast<std::size_t>(to) * 13);
          };
          Bytes send, want;
          for (int j = 0; j < p; ++j) {
            const Bytes out = block_of(r, j), in = block_of(j, r);
            send.insert(send.end(), out.begin(), out.end());
            want.insert(want.end(), in.begin(), in.end());
          }
          Bytes recv(want.size(), std::byte{0x5a});
          comm.alltoall(send.data(), recv.data(), count, type);
          require(recv == want, label("alltoall", p, count, type));
        }
    }), "alltoall p=" + std::to_string(p));
}

TEST(Collectives, SixtyFourRanksRunEveryCollective) {
  constexpr int p = 64;
  const std::size_t count = 100;
  const Bytes sum = reference(DataType::float32, p, count, ReduceOp::sum);
  expect_ok(run_ranks(p,
                      [&](Communicator& comm) {
                        const int r = comm.rank();
                        const Bytes mine = values(DataType::float32, r, count, ReduceOp::sum);
                        Bytes buffer = r == 5 ? mine : Bytes(mine.size());
                        comm.broadcast(buffer.data(), count, DataType::float32, 5);
                        require(buffer == values(DataType::float32, 5, count, ReduceOp::sum), "broadcast");
                        Bytes reduced(mine.size());
                        comm.reduce(mine.data(), reduced.data(), count, DataType::float32, ReduceOp::sum, 63);
                        require(r != 63 || reduced == sum, "reduce");
                        Bytes gathered(mine.size() * p);
                        comm.allgather(mine.data(), gathered.data(), count, DataType::float32);
                        require(std::memcmp(gathered.data() + 17 * mine.size(),
                                            values(DataType::float32, 17, count, ReduceOp::sum).data(),
                                            mine.size()) == 0, "allgather");
                        Bytes spread(mine.size() * p), scattered(mine.size());
                        for (int j = 0; j < p; ++j) std::memcpy(spread.data() + j * mine.size(), mine.data(), mine.size());
                        comm.reduce_scatter(spread.data(), scattered.data(), count, DataType::float32, ReduceOp::sum);
                        require(scattered == sum, "reduce_scatter");
                        Bytes exchanged(spread.size());
                        comm.alltoall(spread.data(), exchanged.data(), count, DataType::float32);
                        require(std::memcmp(exchanged.data() + 9 * mine.size(),
                                            values(DataType::float32, 9, count, ReduceOp::sum).data(),
                                            mine.size()) == 0, "alltoall");
                        comm.barrier();
                      }),
            "64 ranks");
}

TEST(Collectives, AsyncCallsOfEveryKindRunInCallOrder) {
  for (int p : {1, 3, 4})
    expect_ok(run_ranks(p,
                        [&](Communicator& comm) {
                          const int r = comm.rank();
                          std::vector<float> a(1000, static_cast<float>(r)), gathered(1000 * p);
                          std::vector<float> b(1000, r == 0 ? 42.0f : 0.0f);
                          Work w1 = comm.allreduce_async(std::span<float>(a), ReduceOp::sum);
                          Work w2 = comm.broadcast_async(b.data(), b.size(), DataType::float32, 0);
                          // Depends on w1 having run first: gathers the sums.
                          Work w3 = comm.allgather_async(a.data(), gathered.data(), a.size(), DataType::float32);
                          Work w4 = comm.barrier_async();
                          w4.wait();
                          require(w1.test() && w2.test() && w3.test(), "earlier work not done");
                          const float sum = static_cast<float>(p * (p - 1) / 2);
                          require(a[999] == sum && b[0] == 42.0f && gathered[1000 * (p - 1)] == sum,
                                  "wrong results");
                        }),
              "p=" + std::to_string(p));
}

TEST(Collectives, BarrierWaitsForTheLastRank) {
  std::atomic<int> arrived{0};
  expect_ok(run_ranks(4,
                      [&](Communicator& comm) {
                        if (comm.rank() == 3) std::this_thread::sleep_for(std::chrono::milliseconds(100));
                        arrived.fetch_add(1);
                        comm.barrier();
                        require(arrived.load() == 4, "left the barrier before everyone arrived");
                      }),
            "barrier");
}

TEST(Collectives, InvalidArgumentsAreRefusedBeforeAnythingIsSent) {
  expect_ok(run_ranks(2,
                      [&](Communicator& comm) {
                        std::vector<float> x(8), y(16);
                        auto refused = [&](auto&& call, const std::string& words) {
                          try {
                            call();
                          } catch (const Error& e) {
                            require(e.code() == ErrorCode::invalid_argument &&
                                        std::string(e.what()).find(words) != std::string::npos,
                                    std::string("wrong error: ") + e.what());
                            return;
                          }
                          throw std::runtime_error("accepted: " + words);
                        };
                        refused([&] { comm.broadcast(x.data(), 8, DataType::float32, 2); },
                                "broadcast: root 2 is not a rank of this communicator (0..1)");
                        refused([&] { comm.reduce(x.data(), y.data(), 8, DataType::float32, ReduceOp::band, 0); },
                                "reduce: op band is not defined for float32");
                        refused([&] { comm.allgather(x.data(), nullptr, 8, DataType::float32); },
                                "allgather: recv buffer is null");
                        refused([&] { comm.allgather(y.data() + 1, y.data(), 4, DataType::float32); },
                                "allgather: send overlaps recv");
                        refused([&] { comm.alltoall(y.data(), y.data(), 8, DataType::float32); },
                                "alltoall: send and recv buffers overlap");
                        refused([&] { comm.barrier({Algorithm::ring}); },
                                "barrier: CallOptions::algorithm = ring");
                        // Nothing was poisoned: a good call still works.
                        comm.allgather(x.data(), y.data(), 8, DataType::float32);
                      }),
            "invalid arguments");
}

TEST(Collectives, ARankCallingAnotherCollectiveGetsAnErrorNamingBoth) {
  const auto outcomes = run_ranks(3, [&](Communicator& comm) {
    std::vector<float> buffer(1000, 1.0f);
    if (comm.rank() == 1)
      comm.broadcast(buffer.data(), buffer.size(), DataType::float32, 0);
    else
      comm.allreduce(std::span<float>(buffer), ReduceOp::sum);
  }, Options{Algorithm::automatic, std::chrono::seconds(20), ""});
  for (std::size_t r = 0; r < outcomes.size(); ++r) {
    EXPECT_TRUE(outcomes[r].failed) << "rank " << r;
    EXPECT_EQ(outcomes[r].code, ErrorCode::mismatched_collective) << outcomes[r].message;
    EXPECT_NE(outcomes[r].message.find("called allreduce(count=1000, float32, sum"), std::string::npos)
        << outcomes[r].message;
    EXPECT_NE(outcomes[r].message.find("rank 1 called broadcast(count=1000, float32, root=0"),
              std::string::npos)
        << outcomes[r].message;
  }
}

TEST(Collectives, TheCAbiRunsEachAndReportsErrors) {
  chorus_comm_t comm = nullptr;
  ASSERT_EQ(chorus_comm_init(&comm, 0, 1, nullptr), chorus_success) << chorus_get_last_error(nullptr);
  int a[4] = {1, 2, 3, 4}, b[4] = {};
  EXPECT_EQ(chorus_broadcast(a, 4, chorus_int32, 0, comm), chorus_success);
  EXPECT_EQ(chorus_reduce(a, b, 4, chorus_int32, chorus_max, 0, comm), chorus_success);
  EXPECT_EQ(b[3], 4);
  b[0] = 0;
  EXPECT_EQ(chorus_allgather(a, b, 4, chorus_int32, comm), chorus_success);
  EXPECT_EQ(b[0], 1);
  b[1] = 0;
  EXPECT_EQ(chorus_reduce_scatter(a, b, 4, chorus_int32, chorus_sum, comm), chorus_success);
  EXPECT_EQ(b[1], 2);
  b[2] = 0;
  EXPECT_EQ(chorus_alltoall(a, b, 4, chorus_int32, comm), chorus_success);
  EXPECT_EQ(b[2], 3);
  EXPECT_EQ(chorus_barrier(comm), chorus_success);
  EXPECT_EQ(chorus_broadcast(a, 4, chorus_int32, 1, comm), chorus_invalid_argument);
  EXPECT_NE(std::string(chorus_get_last_error(comm)).find("root 1 is not a rank"), std::string::npos)
      << chorus_get_last_error(comm);
  EXPECT_EQ(chorus_barrier(nullptr), chorus_invalid_argument);
  EXPECT_EQ(chorus_comm_destroy(comm), chorus_success);
}

}  // namespace
}  // namespace chorus

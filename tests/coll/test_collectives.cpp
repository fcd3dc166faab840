// The collectives other than AllReduce, through the Communicator over
// in-process ranks: every one against a sequential reference, for ranks
// 1..16 and 64, counts 0 to past the broadcast chain threshold, every dtype
// (and every op defined on it for the reductions), in place where the API
// allows it; plus argument errors and a mismatched kind.
#include "../comm/local_ranks.hpp"
#include "reference_values.hpp"
#include "reduce/reduce.hpp"

#include <chorus/chorus.h>
#include <chorus/chorus.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace chorus {
namespace {

using testing::run_ranks;
using testing::Bytes;
using testing::reference;
using testing::values;

const std::vector<int> kRanks = {1, 2, 3, 4, 5, 8, 16};
// 70001 float32 elements pass the broadcast chain threshold (256 KiB).
const std::vector<std::size_t> kCounts = {0, 1, 7, 1000, 70001};

std::vector<DataType> all_types() {
  std::vector<DataType> types;
  for (int t = 0; t < kDataTypeCount; ++t) types.push_back(static_cast<DataType>(t));
  return types;
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

// One communicator per rank count; each test loops over its cases inside it.
// These collectives' automatic choices do not use AllReduce's cost model on
// one host, so their communicators skip its probe (the most of their time,
// 16 ranks on two cores).
struct NoProbe {
  testing::ModelOnlyTuningFile file{::testing::TempDir()};
};

TEST(Collectives, BroadcastFromEveryRootGivesTheRootsBuffer) {
  const NoProbe no_probe;
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
  const NoProbe no_probe;
  // 300001 float32 elements pass the reduce-scatter + gather threshold (1 MiB).
  std::vector<std::size_t> counts = kCounts;
  counts.push_back(300001);
  for (int p : kRanks)
    expect_ok(run_ranks(p, [&](Communicator& comm) {
      for (std::size_t count : counts)
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
  const NoProbe no_probe;
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
  const NoProbe no_probe;
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
  const NoProbe no_probe;
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

// ---- v-forms, gather and scatter ----

// Rank j's count in the v-form tests: 3, 0, 2, 4, 1, 3, ... times `scale`
// (zero counts included).
std::size_t uneven(int j, std::size_t scale) {
  return (static_cast<std::size_t>(j) * 7 + 3) % 5 * scale;
}
std::vector<std::size_t> uneven_counts(int p, std::size_t scale) {
  std::vector<std::size_t> counts;
  for (int j = 0; j < p; ++j) counts.push_back(uneven(j, scale));
  return counts;
}
// Blocks in reverse rank order with one element of gap before each, so that
// a layout bug cannot hide behind the packed one; returns the displacements
// and sets `extent` (elements).
std::vector<std::size_t> reversed_displs(const std::vector<std::size_t>& counts, std::size_t& extent) {
  std::vector<std::size_t> displs(counts.size());
  extent = 0;
  for (std::size_t j = counts.size(); j-- > 0;) {
    displs[j] = extent + 1;
    extent = displs[j] + counts[j];
  }
  return displs;
}
// `buffer` (elements of `type`) with `block` written at element `at`.
void place(Bytes& buffer, const Bytes& block, std::size_t at, DataType type) {
  if (!block.empty()) std::memcpy(buffer.data() + at * size_of(type), block.data(), block.size());
}
Bytes slice(const Bytes& buffer, std::size_t at, std::size_t count, DataType type) {
  const auto* begin = buffer.data() + at * size_of(type);
  return Bytes(begin, begin + count * size_of(type));
}

const std::vector<std::size_t> kScales = {1, 700, 30000};  // 30000 x 4 float32 blocks: past 256 KiB

bool covered(std::size_t scale, DataType type) {
  return scale == 1 || type == DataType::float32;  // large: one type suffices
}

TEST(Collectives, AllgathervPutsUnevenBlocksWhereDisplsSay) {
  const NoProbe no_probe;
  for (int p : kRanks)
    expect_ok(run_ranks(p, [&](Communicator& comm) {
      const int r = comm.rank();
      for (std::size_t scale : kScales)
        for (DataType type : all_types()) {
          if (!covered(scale, type)) continue;
          const auto counts = uneven_counts(p, scale);
          std::size_t extent = 0;
          const auto displs = reversed_displs(counts, extent);
          const Bytes filler(extent * size_of(type), std::byte{0x5a});
          Bytes want = filler;
          for (int j = 0; j < p; ++j)
            place(want, values(type, j, counts[j], ReduceOp::sum), displs[j], type);
          const Bytes mine = values(type, r, counts[r], ReduceOp::sum);
          for (bool in_place : {false, true}) {
            Bytes recv = filler;
            const std::byte* send = mine.data();
            if (in_place) {
              place(recv, mine, displs[r], type);
              send = recv.data() + displs[r] * size_of(type);
            }
            comm.allgatherv(send, recv.data(), counts, displs, type);
            require(recv == want, label("allgatherv", p, scale, type) + (in_place ? " in place" : ""));
          }
          // No displacements: back to back.
          Bytes packed(std::accumulate(counts.begin(), counts.end(), std::size_t{0}) * size_of(type));
          comm.allgatherv(mine.data(), packed.data(), counts, {}, type);
          std::size_t at = 0;
          for (int j = 0; j < p; at += counts[j], ++j)
            require(slice(packed, at, counts[j], type) == values(type, j, counts[j], ReduceOp::sum),
                    label("allgatherv packed", p, scale, type));
        }
    }), "allgatherv p=" + std::to_string(p));
}

TEST(Collectives, ReduceScatterVGivesEachRankItsUnevenBlock) {
  const NoProbe no_probe;
  for (int p : kRanks)
    expect_ok(run_ranks(p, [&](Communicator& comm) {
      const int r = comm.rank();
      for (std::size_t scale : kScales)
        for (DataType type : all_types())
          for (int o = 0; o < kReduceOpCount; ++o) {
            const auto op = static_cast<ReduceOp>(o);
            if (!is_supported(type, op) || !covered(scale, type)) continue;
            const auto counts = uneven_counts(p, scale);
            Bytes send;
            std::size_t my_offset = 0;
            for (int j = 0; j < p; ++j) {
              if (j == r) my_offset = send.size();
              const Bytes b = values(type, r, counts[j], op, static_cast<std::size_t>(j) * 11);
              send.insert(send.end(), b.begin(), b.end());
            }
            const Bytes want = reference(type, p, counts[r], op, static_cast<std::size_t>(r) * 11);
            const std::string what =
                label("reduce_scatter_v", p, scale, type) + " " + std::string(to_string(op));
            if (o % 2) {
              std::byte* mine = send.data() + my_offset;
              comm.reduce_scatter_v(send.data(), mine, counts, type, op);
              require(Bytes(mine, mine + want.size()) == want, what + " in place");
            } else {
              Bytes recv(want.size());
              comm.reduce_scatter_v(send.data(), recv.data(), counts, type, op);
              require(recv == want, what);
            }
          }
    }), "reduce_scatter_v p=" + std::to_string(p));
}

// One alltoallv in which rank `from` sends `count(from, to)` elements,
// `block_of(from, to)`, to rank `to` (send blocks in reverse order, recv
// back to back); whether this rank received what the others sent it.
template <class Count, class Block>
bool run_alltoallv(Communicator& comm, DataType type, Count&& count, Block&& block_of) {
  const int r = comm.rank(), p = comm.size();
  std::vector<std::size_t> send_counts, recv_counts;
  for (int j = 0; j < p; ++j) {
    send_counts.push_back(count(r, j));
    recv_counts.push_back(count(j, r));
  }
  std::size_t send_extent = 0;
  const auto send_displs = reversed_displs(send_counts, send_extent);
  Bytes send(send_extent * size_of(type)), want;
  for (int j = 0; j < p; ++j) {
    place(send, block_of(r, j), send_displs[j], type);
    const Bytes in = block_of(j, r);
    want.insert(want.end(), in.begin(), in.end());
  }
  Bytes recv(want.size(), std::byte{0x5a});
  comm.alltoallv(send.data(), send_counts, send_displs, recv.data(), recv_counts, {}, type);
  return recv == want;
}

TEST(Collectives, AlltoallvDeliversEachPairsOwnCount) {
  const NoProbe no_probe;
  for (int p : kRanks)
    expect_ok(run_ranks(p, [&](Communicator& comm) {
      for (std::size_t scale : kScales)
        for (DataType type : all_types()) {
          if (!covered(scale, type)) continue;
          auto count = [&](int from, int to) {
            return static_cast<std::size_t>((from * 3 + to * 5) % 4) * scale;
          };
          auto block_of = [&](int from, int to) {
            return values(type, from, count(from, to), ReduceOp::sum, static_cast<std::size_t>(to) * 13);
          };
          require(run_alltoallv(comm, type, count, block_of), label("alltoallv", p, scale, type));
        }
    }), "alltoallv p=" + std::to_string(p));
}

TEST(Collectives, GatherAndScatterFromEveryRootInPlaceOrNot) {
  const NoProbe no_probe;
  for (int p : kRanks)
    expect_ok(run_ranks(p, [&](Communicator& comm) {
      const int r = comm.rank();
      for (std::size_t count : kCounts)
        for (DataType type : all_types()) {
          if (count > 1000 && type != DataType::float32) continue;
          for (int root : {0, p - 1}) {
            const std::string what = label("gather", p, count, type) + " root=" + std::to_string(root);
            Bytes all;
            for (int j = 0; j < p; ++j) {
              const Bytes b = values(type, j, count, ReduceOp::sum, static_cast<std::size_t>(root));
              all.insert(all.end(), b.begin(), b.end());
            }
            const Bytes mine = values(type, r, count, ReduceOp::sum, static_cast<std::size_t>(root));
            const bool in_place = (count + static_cast<std::size_t>(root)) % 2 == 1;
            // gather: the root ends with `all`.
            Bytes recv(r == root ? all.size() : 0, std::byte{0x5a});
            const std::byte* send = mine.data();
            if (r == root && in_place) {
              place(recv, mine, static_cast<std::size_t>(root) * count, type);
              send = recv.data() + mine.size() * static_cast<std::size_t>(root);
            }
            comm.gather(send, recv.data(), count, type, root);
            require(r != root || recv == all, what + (in_place ? " in place" : ""));
            // scatter: every rank ends with its block of `all`.
            Bytes got(mine.size(), std::byte{0x5a});
            const Bytes source = r == root ? all : Bytes{};
            std::byte* into = got.data();
            Bytes root_copy = source;
            if (r == root && in_place) into = root_copy.data() + mine.size() * static_cast<std::size_t>(root);
            comm.scatter(r == root ? root_copy.data() : nullptr, into, count, type, root);
            require(Bytes(into, into + mine.size()) == mine,
                    label("scatter", p, count, type) + " root=" + std::to_string(root));
          }
        }
    }), "gather/scatter p=" + std::to_string(p));
}

TEST(Collectives, GathervAndScattervMoveUnevenBlocks) {
  const NoProbe no_probe;
  for (int p : kRanks)
    expect_ok(run_ranks(p, [&](Communicator& comm) {
      const int r = comm.rank();
      for (std::size_t scale : kScales)
        for (DataType type : all_types()) {
          if (!covered(scale, type)) continue;
          const int root = static_cast<int>(scale % static_cast<std::size_t>(p));
          const auto counts = uneven_counts(p, scale);
          std::size_t extent = 0;
          const auto displs = reversed_displs(counts, extent);
          Bytes laid_out(extent * size_of(type), std::byte{0x5a});
          for (int j = 0; j < p; ++j) place(laid_out, values(type, j, counts[j], ReduceOp::sum), displs[j], type);
          const Bytes mine = values(type, r, counts[r], ReduceOp::sum);
          // gatherv: the root's recv becomes laid_out; counts only there.
          Bytes recv(r == root ? laid_out.size() : 0, std::byte{0x5a});
          const bool at_root = r == root;
          comm.gatherv(mine.data(), counts[r], recv.data(), at_root ? std::span(counts) : std::span<const std::size_t>{},
                       at_root ? std::span(displs) : std::span<const std::size_t>{}, type, root);
          require(!at_root || recv == laid_out, label("gatherv", p, scale, type));
          // scatterv: each rank gets its block of laid_out.
          Bytes got(mine.size(), std::byte{0x11});
          comm.scatterv(at_root ? laid_out.data() : nullptr, at_root ? std::span(counts) : std::span<const std::size_t>{},
                        at_root ? std::span(displs) : std::span<const std::size_t>{}, got.data(), counts[r], type, root);
          require(got == mine, label("scatterv", p, scale, type));
        }
    }), "gatherv/scatterv p=" + std::to_string(p));
}

// Through the host segment, the v-forms whose sizes only a block's two
// ends know send each block by its own size: up to 64 KiB through the
// writer's slot, larger ones as messages. One call mixes both, and blocks
// of nothing. Allgatherv streams them all.
TEST(Collectives, VFormsThroughTheSegmentMixSlotAndMessageBlocks) {
  const NoProbe no_probe;
  const int p = 3;
  // Elements of rank `from`'s block for rank `to`: 2 (8 B), 100000 (400 KB), or none.
  auto count = [](int from, int to) -> std::size_t {
    const std::size_t kinds[] = {2, 100000, 0};
    return kinds[(from + 2 * to) % 3];
  };
  const DataType type = DataType::int32;
  expect_ok(run_ranks(p, [&](Communicator& comm) {
    const int r = comm.rank();
    for (const auto kind : {coll::CollectiveKind::gatherv, coll::CollectiveKind::scatterv,
                            coll::CollectiveKind::alltoallv, coll::CollectiveKind::allgatherv})
      require(CommunicatorAccess::engine(comm).choose(kind, "", 8).row->name == "shm",
              "the v-forms run through the segment");
    auto block_of = [&](int from, int to) {
      return values(type, from, count(from, to), ReduceOp::sum, static_cast<std::size_t>(to));
    };
    for (int root = 0; root < p; ++root) {
      // gatherv: rank j's block for the root, as count(j, root) says.
      std::vector<std::size_t> counts(p);
      for (int j = 0; j < p; ++j) counts[j] = count(j, root);
      std::size_t extent = 0;
      const auto displs = reversed_displs(counts, extent);
      Bytes laid_out(extent * size_of(type), std::byte{0x5a});
      for (int j = 0; j < p; ++j) place(laid_out, block_of(j, root), displs[j], type);
      const bool at_root = r == root;
      const auto if_root = [&](const std::vector<std::size_t>& v) {
        return at_root ? std::span(v) : std::span<const std::size_t>{};
      };
      Bytes recv(at_root ? laid_out.size() : 0, std::byte{0x5a});
      const Bytes mine = block_of(r, root);
      comm.gatherv(mine.data(), counts[r], recv.data(), if_root(counts), if_root(displs), type, root);
      require(!at_root || recv == laid_out, "gatherv root=" + std::to_string(root));
      // scatterv: the same blocks back.
      Bytes got(mine.size(), std::byte{0x11});
      comm.scatterv(at_root ? laid_out.data() : nullptr, if_root(counts), if_root(displs), got.data(),
                    counts[r], type, root);
      require(got == mine, "scatterv root=" + std::to_string(root));
    }
    // alltoallv: every pair's own size, both ways.
    require(run_alltoallv(comm, type, count, block_of), "alltoallv");
    // allgatherv, whose sizes every rank knows: streamed, as its largest
    // block is above 64 KiB, beside an 8-byte and an empty one.
    std::vector<std::size_t> counts(p);
    for (int j = 0; j < p; ++j) counts[j] = count(j, 0);
    Bytes all;
    for (int j = 0; j < p; ++j) {
      const Bytes b = block_of(j, 0);
      all.insert(all.end(), b.begin(), b.end());
    }
    Bytes gathered(all.size(), std::byte{0x5a});
    comm.allgatherv(block_of(r, 0).data(), gathered.data(), counts, {}, type);
    require(gathered == all, "allgatherv");
  }), "v-forms through the segment");
}

// A block whose two ends disagree on its size, through the segment: the
// reader names both counts, whether the block came through the slot or
// was to come as a message, and no rank waits for the deadline.
TEST(Collectives, VFormsThroughTheSegmentNameABlockOfTheWrongSize) {
  const NoProbe no_probe;
  const Options quick{Algorithm::automatic, std::chrono::seconds(20), "", ""};
  for (const std::size_t sent : {std::size_t{3}, std::size_t{100000}}) {
    const auto begun = std::chrono::steady_clock::now();
    // scatterv from rank 0: rank 1 expects 4 elements, the root sends `sent`.
    const auto outcomes = run_ranks(2, [&](Communicator& comm) {
      const std::vector<std::size_t> counts = {4, sent};
      std::vector<float> send(4 + sent), recv(4);
      const bool root = comm.rank() == 0;
      comm.scatterv(send.data(), root ? std::span(counts) : std::span<const std::size_t>{}, {},
                    recv.data(), 4, DataType::float32, 0);
    }, quick);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - begun).count();
    ASSERT_TRUE(outcomes[1].failed) << sent;
    EXPECT_EQ(outcomes[1].code, ErrorCode::mismatched_collective) << outcomes[1].message;
    EXPECT_NE(outcomes[1].message.find("rank 0 sent " + std::to_string(sent) +
                                       " elements where rank 1's recv_count expects 4"),
              std::string::npos)
        << outcomes[1].message;
    // The root's message to rank 1 (the large block) is not left waiting.
    EXPECT_LT(seconds, 10) << sent;
  }
}

// Gather and scatter choose the segment while a block is at most 64 KiB,
// whatever p (at p = 4, 64 KiB blocks are 256 KiB in all), and the linear
// messages beyond.
TEST(Collectives, GatherAndScatterGoThroughTheSegmentUpTo64KiBBlocks) {
  const NoProbe no_probe;
  expect_ok(run_ranks(4, [&](Communicator& comm) {
    auto& engine = CommunicatorAccess::engine(comm);
    for (const auto kind : {coll::CollectiveKind::gather, coll::CollectiveKind::scatter}) {
      const std::string name(coll::to_string(kind));
      require(engine.choose(kind, "", 64 << 10).row->name == "shm", name + " of 64 KiB blocks");
      require(engine.choose(kind, "", (64 << 10) + 1).row->name == "linear",
              name + " of blocks above 64 KiB");
    }
  }), "gather and scatter's choice");
}

// In small slots the blocks that go through them, and their table, still
// fit: at p = 2 a 4096-byte slot holds an 8-byte table and one block of up
// to 4088 bytes (a block of 4096 goes as a message); at p = 3 two of 2040
// beside a 16-byte table. A writer whose blocks would not fit throws.
TEST(Collectives, VFormsThroughSmallSlotsKeepTheirTablesInside) {
  const NoProbe no_probe;
  ::setenv("CHORUS_SHM_BYTES", "4096", 1);
  const DataType type = DataType::int32;
  for (int p : {2, 3}) {
    const std::size_t edge = p == 2 ? 4088 / 4 : 2040 / 4;  // elements
    for (std::size_t n : {edge - 1, edge, edge + 1})
      expect_ok(run_ranks(p, [&](Communicator& comm) {
        require(CommunicatorAccess::engine(comm).host->slot_bytes() == 4096, "4 KiB slots");
        auto count = [&](int from, int to) { return from == to ? 1 : n; };
        auto block_of = [&](int from, int to) {
          return values(type, from, count(from, to), ReduceOp::sum, static_cast<std::size_t>(to));
        };
        require(run_alltoallv(comm, type, count, block_of), "alltoallv");
        // scatterv from rank 0: n elements to every other rank.
        std::vector<std::size_t> counts(p, n);
        counts[0] = 1;
        Bytes all;
        for (int j = 0; j < p; ++j) {
          const Bytes b = block_of(0, j);
          all.insert(all.end(), b.begin(), b.end());
        }
        Bytes got(counts[comm.rank()] * size_of(type));
        const bool root = comm.rank() == 0;
        comm.scatterv(all.data(), root ? std::span(counts) : std::span<const std::size_t>{}, {},
                      got.data(), counts[comm.rank()], type, 0);
        require(got == block_of(0, comm.rank()), "scatterv");
      }), "p=" + std::to_string(p) + " n=" + std::to_string(n));
  }
  ::unsetenv("CHORUS_SHM_BYTES");
}

// A thread reuses its v-form layouts from call to call (core/arguments.cpp);
// an async call queued before the next one is made keeps its own.
TEST(Collectives, AnAsyncVFormKeepsItsLayoutsWhileItsThreadMakesTheNextCall) {
  const NoProbe no_probe;
  expect_ok(run_ranks(3, [&](Communicator& comm) {
    const int r = comm.rank();
    const DataType type = DataType::int32;
    for (int round = 0; round < 20; ++round) {
      const std::vector<std::size_t> first = {1, 2, 3}, second = {5, 1, 4};
      const Bytes mine_first = values(type, r, first[r], ReduceOp::sum),
                  mine_second = values(type, r, second[r], ReduceOp::sum, 7);
      Bytes got_first(6 * size_of(type)), got_second(10 * size_of(type));
      Work queued = comm.allgatherv_async(mine_first.data(), got_first.data(), first, {}, type);
      comm.allgatherv(mine_second.data(), got_second.data(), second, {}, type);
      queued.wait();
      Bytes want_first, want_second;
      for (int j = 0; j < 3; ++j) {
        const Bytes a = values(type, j, first[j], ReduceOp::sum), b = values(type, j, second[j], ReduceOp::sum, 7);
        want_first.insert(want_first.end(), a.begin(), a.end());
        want_second.insert(want_second.end(), b.begin(), b.end());
      }
      require(got_first == want_first, "the async allgatherv, round " + std::to_string(round));
      require(got_second == want_second, "the blocking allgatherv, round " + std::to_string(round));
    }
  }), "async and blocking v-forms");
}

TEST(Collectives, RanksDisagreeingOnVCountsGetAnError) {
  // allgatherv: every rank must pass the same counts; the call check sees it.
  const Options quick{Algorithm::automatic, std::chrono::seconds(20), "", ""};
  auto outcomes = run_ranks(3, [&](Communicator& comm) {
    std::vector<std::size_t> counts = {2, 3, 4};
    if (comm.rank() == 1) counts = {2, 4, 3};
    std::vector<float> send(counts[comm.rank()]), recv(9);
    comm.allgatherv(send.data(), recv.data(), counts, {}, DataType::float32);
  }, quick);
  for (std::size_t r = 0; r < outcomes.size(); ++r) {
    EXPECT_TRUE(outcomes[r].failed) << "rank " << r;
    EXPECT_EQ(outcomes[r].code, ErrorCode::mismatched_collective) << outcomes[r].message;
    EXPECT_NE(outcomes[r].message.find("allgatherv(total count=9, counts #"), std::string::npos)
        << outcomes[r].message;
  }
  // alltoallv: rank 0 sends rank 1 three elements where rank 1 expects four.
  outcomes = run_ranks(2, [&](Communicator& comm) {
    // rank 0 sends {1 to itself, 3 to rank 1} and expects {1, 4}; rank 1
    // sends {4, 4} and expects {4, 4}.
    const bool zero = comm.rank() == 0;
    const std::vector<std::size_t> send_counts = zero ? std::vector<std::size_t>{1, 3}
                                                      : std::vector<std::size_t>{4, 4};
    const std::vector<std::size_t> recv_counts = zero ? std::vector<std::size_t>{1, 4}
                                                      : std::vector<std::size_t>{4, 4};
    std::vector<float> send(8), recv(8);
    comm.alltoallv(send.data(), send_counts, {}, recv.data(), recv_counts, {}, DataType::float32);
  }, quick);
  ASSERT_TRUE(outcomes[1].failed);
  EXPECT_EQ(outcomes[1].code, ErrorCode::mismatched_collective) << outcomes[1].message;
  EXPECT_NE(outcomes[1].message.find("rank 0 sent 3 elements where rank 1's recv_counts expects 4"),
            std::string::npos)
      << outcomes[1].message;
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
                        const auto counts = uneven_counts(p, 10);
                        const Bytes part = values(DataType::float32, r, counts[r], ReduceOp::sum);
                        Bytes gathered_v(std::accumulate(counts.begin(), counts.end(), std::size_t{0}) * 4);
                        comm.allgatherv(part.data(), gathered_v.data(), counts, {}, DataType::float32);
                        const std::size_t before_17 = std::accumulate(counts.begin(), counts.begin() + 17, std::size_t{0});
                        require(slice(gathered_v, before_17, counts[17], DataType::float32) ==
                                    values(DataType::float32, 17, counts[17], ReduceOp::sum), "allgatherv");
                        Bytes at_root(r == 40 ? gathered.size() : 0);
                        comm.gather(mine.data(), at_root.data(), count, DataType::float32, 40);
                        require(r != 40 || at_root == gathered, "gather");
                        Bytes back(mine.size());
                        comm.scatter(r == 40 ? at_root.data() : nullptr, back.data(), count, DataType::float32, 40);
                        require(back == mine, "scatter");
                        // The v-forms: rank j's block is counts[j] elements.
                        Bytes spread_v;
                        for (int j = 0; j < p; ++j) {
                          const Bytes b = values(DataType::float32, r, counts[j], ReduceOp::sum);
                          spread_v.insert(spread_v.end(), b.begin(), b.end());
                        }
                        Bytes reduced_v(counts[r] * 4);
                        comm.reduce_scatter_v(spread_v.data(), reduced_v.data(), counts, DataType::float32, ReduceOp::sum);
                        require(reduced_v == reference(DataType::float32, p, counts[r], ReduceOp::sum), "reduce_scatter_v");
                        // alltoallv: counts[j] to rank j, counts[r] from each.
                        const std::vector<std::size_t> from_each(p, counts[r]);
                        Bytes exchanged_v(counts[r] * 4 * p);
                        comm.alltoallv(spread_v.data(), counts, {}, exchanged_v.data(), from_each, {}, DataType::float32);
                        require(slice(exchanged_v, 9 * counts[r], counts[r], DataType::float32) ==
                                    values(DataType::float32, 9, counts[r], ReduceOp::sum), "alltoallv");
                        Bytes at_root_v(r == 33 ? gathered_v.size() : 0);
                        comm.gatherv(part.data(), counts[r], at_root_v.data(), counts, {}, DataType::float32, 33);
                        require(r != 33 || at_root_v == gathered_v, "gatherv");
                        Bytes back_v(part.size());
                        comm.scatterv(r == 33 ? at_root_v.data() : nullptr, counts, {}, back_v.data(), counts[r],
                                      DataType::float32, 33);
                        require(back_v == part, "scatterv");
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
                        const std::vector<std::size_t> one_count = {8}, two_counts = {8, 8};
                        refused([&] { comm.allgatherv(x.data(), y.data(), one_count, {}, DataType::float32); },
                                "allgatherv: recv_counts has 1 entries for 2 ranks");
                        refused([&] {
                          const std::vector<std::size_t> ahead = {0, 8};
                          comm.alltoallv(x.data(), two_counts, ahead, y.data(), one_count, {}, DataType::float32);
                        }, "alltoallv: recv_counts has 1 entries");
                        refused([&] {
                          // Each rank sends itself 4 but expects 8. The buffers hold
                          // what the counts say (16 elements each way), so that only
                          // the mismatch is wrong: a recv buffer too short could reach
                          // into the send buffer, depending on where the heap put them.
                          const std::vector<std::size_t> mixed =
                              comm.rank() == 0 ? std::vector<std::size_t>{4, 8} : std::vector<std::size_t>{8, 4};
                          std::vector<float> received(16);
                          comm.alltoallv(y.data(), mixed, {}, received.data(), two_counts, {}, DataType::float32);
                        }, "sends itself");
                        refused([&] {
                          if (comm.rank() == 0) comm.gatherv(x.data(), 4, y.data(), two_counts, {}, DataType::float32, 0);
                          else throw Error(ErrorCode::invalid_argument, "gatherv: the root's own block is 8 elements (recv_counts[0]) but its send count is 4");
                        }, "gatherv: the root's own block is 8 elements (recv_counts[0]) but its send count is 4");
                        refused([&] { comm.scatter(nullptr, x.data(), 8, DataType::float32, comm.rank()); },
                                "scatter: send buffer (at the root) is null");
                        refused([&] { comm.barrier({Algorithm::ring, ""}); },
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
  }, Options{Algorithm::automatic, std::chrono::seconds(20), "", ""});
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

// The tree reduce cuts its messages into segments by the caller's count:
// ranks that disagree on it post receives of other lengths and numbers.
// Still the root fails in that call, and the error names both calls. The
// other rank's call goes through the host segment, where a reduce's
// non-root returns once its input is published (docs/architecture.md "The
// host segment"): it must fail at its next call, naming the root's failure.
TEST(Collectives, RanksReducingDifferentCountsGetAnErrorNamingBoth) {
  const auto outcomes = run_ranks(2, [&](Communicator& comm) {
    std::vector<float> buffer(comm.rank() == 0 ? 300001 : 1000, 1.0f);
    comm.reduce(buffer.data(), buffer.data(), buffer.size(), DataType::float32, ReduceOp::sum, 0);
    comm.barrier();  // rank 0 never gets here
  }, Options{Algorithm::automatic, std::chrono::seconds(20), "", ""});
  for (std::size_t r = 0; r < outcomes.size(); ++r) EXPECT_TRUE(outcomes[r].failed) << "rank " << r;
  EXPECT_EQ(outcomes[0].code, ErrorCode::mismatched_collective) << outcomes[0].message;
  EXPECT_TRUE(outcomes[1].code == ErrorCode::mismatched_collective ||
              outcomes[1].code == ErrorCode::peer_failure)
      << outcomes[1].message;
  const std::string both = outcomes[0].message + outcomes[1].message;
  EXPECT_NE(both.find("reduce(count=300001"), std::string::npos) << both;
  EXPECT_NE(both.find("reduce(count=1000"), std::string::npos) << both;
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
  const size_t four[1] = {4};
  b[3] = 0;
  EXPECT_EQ(chorus_gather(a, b, 4, chorus_int32, 0, comm), chorus_success);
  EXPECT_EQ(b[3], 4);
  b[0] = 0;
  EXPECT_EQ(chorus_scatter(a, b, 4, chorus_int32, 0, comm), chorus_success);
  EXPECT_EQ(b[0], 1);
  b[1] = 0;
  EXPECT_EQ(chorus_allgatherv(a, b, four, nullptr, chorus_int32, comm), chorus_success);
  EXPECT_EQ(b[1], 2);
  b[2] = 0;
  EXPECT_EQ(chorus_reduce_scatter_v(a, b, four, chorus_int32, chorus_sum, comm), chorus_success);
  EXPECT_EQ(b[2], 3);
  b[3] = 0;
  EXPECT_EQ(chorus_alltoallv(a, four, nullptr, b, four, nullptr, chorus_int32, comm), chorus_success);
  EXPECT_EQ(b[3], 4);
  b[0] = 0;
  EXPECT_EQ(chorus_gatherv(a, 4, b, four, nullptr, chorus_int32, 0, comm), chorus_success);
  EXPECT_EQ(b[0], 1);
  b[1] = 0;
  EXPECT_EQ(chorus_scatterv(a, four, nullptr, b, 4, chorus_int32, 0, comm), chorus_success);
  EXPECT_EQ(b[1], 2);
  EXPECT_EQ(chorus_allgatherv(a, b, nullptr, nullptr, chorus_int32, comm), chorus_invalid_argument);
  EXPECT_NE(std::string(chorus_get_last_error(comm)).find("chorus_allgatherv: counts is NULL"),
            std::string::npos)
      << chorus_get_last_error(comm);
  EXPECT_EQ(chorus_broadcast(a, 4, chorus_int32, 1, comm), chorus_invalid_argument);
  EXPECT_NE(std::string(chorus_get_last_error(comm)).find("root 1 is not a rank"), std::string::npos)
      << chorus_get_last_error(comm);
  EXPECT_EQ(chorus_barrier(nullptr), chorus_invalid_argument);
  EXPECT_EQ(chorus_comm_destroy(comm), chorus_success);
}

}  // namespace
}  // namespace chorus

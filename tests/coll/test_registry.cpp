// Every registered algorithm of every collective, forced by name through the
// Communicator over in-process ranks, against a sequential reference: every
// rank count it runs on (1..5 and 8), counts 0 to 1000 in every dtype (and
// every op the dtype has, for the reductions), one large count in float32,
// in place and out of place where the API has both. Also: the names are
// unique and the registry's choice is what runs (ranks forcing different
// algorithms fail the call check naming both).
#include "../comm/local_ranks.hpp"
#include "reference_values.hpp"

#include "coll/registry.hpp"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <numeric>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

namespace chorus {
namespace {

using coll::AlgorithmRow;
using coll::CollectiveKind;
using testing::Bytes;
using testing::reference;
using testing::values;

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

std::vector<DataType> all_types() {
  std::vector<DataType> types;
  for (int t = 0; t < kDataTypeCount; ++t) types.push_back(static_cast<DataType>(t));
  return types;
}

std::vector<ReduceOp> ops_of(DataType type) {
  std::vector<ReduceOp> ops;
  for (int o = 0; o < kReduceOpCount; ++o)
    if (is_supported(type, static_cast<ReduceOp>(o))) ops.push_back(static_cast<ReduceOp>(o));
  return ops;
}

// Block j of a buffer laid out by `counts`, back to back.
Bytes block(const Bytes& whole, const std::vector<std::size_t>& counts, int j, DataType type) {
  const std::size_t at = std::accumulate(counts.begin(), counts.begin() + j, std::size_t{0});
  const auto* first = whole.data() + at * size_of(type);
  return Bytes(first, first + counts[static_cast<std::size_t>(j)] * size_of(type));
}

Bytes concat(const std::vector<Bytes>& parts) {
  Bytes all;
  for (const Bytes& b : parts) all.insert(all.end(), b.begin(), b.end());
  return all;
}

// Runs one call of `row`'s collective with `count`, `type`, `op` on this
// rank, in place or not, and throws naming the case when the result is wrong.
void check_once(Communicator& comm, const AlgorithmRow& row, std::size_t count, DataType type,
                ReduceOp op, bool in_place) {
  const int p = comm.size(), r = comm.rank();
  const auto ranks = static_cast<std::size_t>(p);
  const std::size_t esize = size_of(type);
  CallOptions forced;
  forced.algorithm_name = std::string(row.name);
  const std::string what = fmt::format("{} {} p={} count={} {} {}{}", to_string(row.kind), row.name,
                                       p, count, to_string(type), to_string(op),
                                       in_place ? " in place" : "");
  // Rank j's block for rank k in the exchanges: its own salt per destination.
  auto piece = [&](int from, int to, std::size_t n) {
    return values(type, from, n, ReduceOp::sum, static_cast<std::size_t>(to) * 7);
  };
  switch (row.kind) {
    case CollectiveKind::allreduce: {
      Bytes send = values(type, r, count, op), recv(send.size());
      if (in_place) comm.allreduce(send.data(), send.data(), count, type, op, forced);
      else comm.allreduce(send.data(), recv.data(), count, type, op, forced);
      require((in_place ? send : recv) == reference(type, p, count, op), what);
      return;
    }
    case CollectiveKind::broadcast:
      for (int root : {0, p - 1}) {
        const Bytes want = values(type, root, count, ReduceOp::sum);
        Bytes buffer = r == root ? want : Bytes(want.size(), std::byte{0x5a});
        comm.broadcast(buffer.data(), count, type, root, forced);
        require(buffer == want, what + " root " + std::to_string(root));
      }
      return;
    case CollectiveKind::reduce:
      for (int root : {0, p - 1}) {
        Bytes send = values(type, r, count, op), recv(send.size());
        void* out = in_place && r == root ? send.data() : recv.data();
        comm.reduce(send.data(), out, count, type, op, root, forced);
        if (r == root)
          require(Bytes(static_cast<std::byte*>(out), static_cast<std::byte*>(out) + send.size()) ==
                      reference(type, p, count, op),
                  what + " root " + std::to_string(root));
      }
      return;
    case CollectiveKind::allgather: {
      Bytes recv(count * esize * ranks, std::byte{0x5a});
      const Bytes mine = values(type, r, count, ReduceOp::sum);
      std::byte* own = recv.data() + static_cast<std::size_t>(r) * count * esize;
      if (in_place) std::copy(mine.begin(), mine.end(), own);
      comm.allgather(in_place ? own : mine.data(), recv.data(), count, type, forced);
      std::vector<Bytes> want;
      for (int j = 0; j < p; ++j) want.push_back(values(type, j, count, ReduceOp::sum));
      require(recv == concat(want), what);
      return;
    }
    case CollectiveKind::reduce_scatter: {
      Bytes send = values(type, r, count * ranks, op), recv(count * esize);
      std::byte* own = send.data() + static_cast<std::size_t>(r) * count * esize;
      comm.reduce_scatter(send.data(), in_place ? own : recv.data(), count, type, op, forced);
      const Bytes got = in_place ? Bytes(own, own + count * esize) : recv;
      const std::vector<std::size_t> counts(ranks, count);
      require(got == block(reference(type, p, count * ranks, op), counts, r, type), what);
      return;
    }
    case CollectiveKind::reduce_scatter_v: {
      std::vector<std::size_t> counts(ranks);
      for (std::size_t j = 0; j < ranks; ++j) counts[j] = count + j % 2;
      const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
      Bytes send = values(type, r, total, op), recv(counts[static_cast<std::size_t>(r)] * esize);
      comm.reduce_scatter_v(send.data(), recv.data(), counts, type, op, forced);
      require(recv == block(reference(type, p, total, op), counts, r, type), what);
      return;
    }
    case CollectiveKind::alltoall: {
      std::vector<Bytes> out, want;
      for (int j = 0; j < p; ++j) {
        out.push_back(piece(r, j, count));
        want.push_back(piece(j, r, count));
      }
      const Bytes send = concat(out);
      Bytes recv(send.size(), std::byte{0x5a});
      comm.alltoall(send.data(), recv.data(), count, type, forced);
      require(recv == concat(want), what);
      return;
    }
    case CollectiveKind::alltoallv: {
      // Rank r sends count + (r + j) % 3 elements to j: symmetric, so j expects as much.
      std::vector<std::size_t> counts(ranks);
      std::vector<Bytes> out, want;
      for (int j = 0; j < p; ++j) {
        counts[static_cast<std::size_t>(j)] = count + static_cast<std::size_t>(r + j) % 3;
        out.push_back(piece(r, j, counts[static_cast<std::size_t>(j)]));
        want.push_back(piece(j, r, counts[static_cast<std::size_t>(j)]));
      }
      const Bytes send = concat(out);
      Bytes recv(send.size(), std::byte{0x5a});
      comm.alltoallv(send.data(), counts, {}, recv.data(), counts, {}, type, forced);
      require(recv == concat(want), what);
      return;
    }
    case CollectiveKind::allgatherv: {
      std::vector<std::size_t> counts(ranks);
      std::vector<Bytes> want;
      for (int j = 0; j < p; ++j) {
        counts[static_cast<std::size_t>(j)] = count + static_cast<std::size_t>(j);
        want.push_back(values(type, j, counts[static_cast<std::size_t>(j)], ReduceOp::sum));
      }
      const Bytes mine = want[static_cast<std::size_t>(r)];
      Bytes recv(concat(want).size(), std::byte{0x5a});
      comm.allgatherv(mine.data(), recv.data(), counts, {}, type, forced);
      require(recv == concat(want), what);
      return;
    }
    case CollectiveKind::gather:
    case CollectiveKind::gatherv:
      for (int root : {0, p - 1}) {
        std::vector<std::size_t> counts(ranks);
        std::vector<Bytes> want;
        for (int j = 0; j < p; ++j) {
          counts[static_cast<std::size_t>(j)] =
              row.kind == CollectiveKind::gather ? count : count + static_cast<std::size_t>(j);
          want.push_back(values(type, j, counts[static_cast<std::size_t>(j)], ReduceOp::sum));
        }
        const Bytes& mine = want[static_cast<std::size_t>(r)];
        Bytes recv(r == root ? concat(want).size() : 0, std::byte{0x5a});
        if (row.kind == CollectiveKind::gather)
          comm.gather(mine.data(), recv.data(), count, type, root, forced);
        else
          comm.gatherv(mine.data(), counts[static_cast<std::size_t>(r)], recv.data(), counts, {},
                       type, root, forced);
        if (r == root) require(recv == concat(want), what + " root " + std::to_string(root));
      }
      return;
    case CollectiveKind::scatter:
    case CollectiveKind::scatterv:
      for (int root : {0, p - 1}) {
        std::vector<std::size_t> counts(ranks);
        std::vector<Bytes> out;
        for (int j = 0; j < p; ++j) {
          counts[static_cast<std::size_t>(j)] =
              row.kind == CollectiveKind::scatter ? count : count + static_cast<std::size_t>(j);
          out.push_back(piece(root, j, counts[static_cast<std::size_t>(j)]));
        }
        const Bytes send = r == root ? concat(out) : Bytes{};
        Bytes recv(counts[static_cast<std::size_t>(r)] * esize, std::byte{0x5a});
        if (row.kind == CollectiveKind::scatter)
          comm.scatter(send.data(), recv.data(), count, type, root, forced);
        else
          comm.scatterv(send.data(), counts, {}, recv.data(), counts[static_cast<std::size_t>(r)],
                        type, root, forced);
        require(recv == out[static_cast<std::size_t>(r)], what + " root " + std::to_string(root));
      }
      return;
    case CollectiveKind::barrier:
      comm.barrier(forced);
      return;
  }
  throw std::runtime_error("no check for " + std::string(to_string(row.kind)));
}

bool has_in_place(CollectiveKind kind) {
  return kind == CollectiveKind::allreduce || kind == CollectiveKind::reduce ||
         kind == CollectiveKind::allgather || kind == CollectiveKind::reduce_scatter;
}

struct Case {
  coll::AlgorithmId id;
  int p;
  const char* topology = nullptr;  // CHORUS_TOPOLOGY for the case, when set
};

std::vector<Case> every_row_and_rank_count() {
  std::vector<Case> cases;
  for (const AlgorithmRow& row : coll::registry()) {
    // (A row through each host's own segment runs only across hosts.)
    for (int p : {1, 2, 3, 4, 5, 8})
      if (row.runs_on(p) && row.own_host_need == nullptr) cases.push_back({row.id, p});
    // A hierarchical row on hosts (one host above: its degenerate case):
    // 2 and 4 hosts of 2, 2 of 3, 3 of 2, hosts interleaved, one rank each;
    // the one through the hosts' segments also on hosts of unequal counts
    if (row.across_hosts || row.own_host_need != nullptr)
      for (const Case c : {Case{row.id, 4, "2x2"}, Case{row.id, 6, "2x3"}, Case{row.id, 6, "3x2"},
                           Case{row.id, 8, "4x2"}, Case{row.id, 4, "1,0,1,0"},
                           Case{row.id, 3, "3x1"}})
        cases.push_back(c);
    // (and on 5 and 8 hosts: its leaders' recursive doubling with a fold, and of 3 steps)
    if (row.own_host_need != nullptr)
      for (const Case c : {Case{row.id, 5, "0,0,1,1,1"}, Case{row.id, 5, "5x1"}, Case{row.id, 8, "8x1"}})
        cases.push_back(c);
  }
  return cases;
}

// Sets an environment variable for one scope (null: leaves it unset).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (value != nullptr) ::setenv(name, value, 1);
  }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

class EveryAlgorithm : public ::testing::TestWithParam<Case> {};

// The largest float32 count whose call a shared-memory row runs on `comm`
// (through the host segment, or each host's own).
std::size_t largest_fitting_count(Communicator& comm, const AlgorithmRow& row) {
  const auto& engine = CommunicatorAccess::engine(comm);
  const std::size_t slot = row.own_host_need ? engine.own_host->slot_bytes() : engine.host->slot_bytes();
  const auto need = row.own_host_need ? row.own_host_need : row.host_slot_need;
  const int p = comm.size();
  auto fits = [&](std::size_t count) {
    coll::Operands shape;
    // reduce_scatter_v's count is its whole input's: check_once() gives
    // rank j count + j % 2 elements.
    shape.count = row.kind == CollectiveKind::reduce_scatter_v
                      ? count * static_cast<std::size_t>(p) + static_cast<std::size_t>(p / 2)
                      : count;
    shape.type = DataType::float32;
    return need(coll::choice_bytes(row.kind, shape, p), p) <= slot;
  };
  std::size_t count = slot / 4;
  while (count > 0 && !fits(count)) --count;
  return count;
}

TEST_P(EveryAlgorithm, MatchesTheSequentialReference) {
  const AlgorithmRow& row = coll::registry()[GetParam().id];
  const int p = GetParam().p;
  const ScopedEnv topology("CHORUS_TOPOLOGY", GetParam().topology);
  // Every call names its row: the automatic choice's probe would be most of the time.
  const testing::ModelOnlyTuningFile no_probe(::testing::TempDir());
  // Every type and op up to 5 ranks: the kernels meet each algorithm's
  // order of reduction there. From 6 ranks,
  // what is new is the schedule (more steps, folds, pieces), not the types:
  // float32 (every op) and int8 (sums that wrap) keep the suite's time.
  const bool every_type = p <= 5;
  const std::vector<DataType> types =
      every_type ? all_types() : std::vector<DataType>{DataType::float32, DataType::int8};
  const auto outcomes = testing::run_ranks(p, [&](Communicator& comm) {
    for (DataType type : types)
      for (ReduceOp op : coll::reduces(row.kind) ? ops_of(type) : std::vector<ReduceOp>{ReduceOp::sum})
        for (std::size_t count : {0, 1, 7, 1000})
          for (bool in_place : {false, true})
            if (!in_place || has_in_place(row.kind)) check_once(comm, row, count, type, op, in_place);
    // Large enough for every segmenting, pipelining and threshold path (256 KiB-1 MiB);
    // a shared-memory row: the most its slots hold, and one element more is refused.
    const bool in_slots = row.host_slot_need || row.own_host_need;
    const std::size_t large = in_slots ? largest_fitting_count(comm, row) : 300001;
    for (bool in_place : {false, true})
      if (!in_place || has_in_place(row.kind))
        check_once(comm, row, large, DataType::float32, ReduceOp::sum, in_place);
    // Broadcast, reduce and allgather stream beyond a slot, through it as
    // through a ring buffer: they must run right there too.
    if (in_slots && row.host_slot_need != nullptr &&
        row.host_slot_need(CommunicatorAccess::engine(comm).host->slot_bytes() * 2, p) <=
            CommunicatorAccess::engine(comm).host->slot_bytes()) {
      for (bool in_place : {false, true})
        check_once(comm, row, 2 * large + 12345, DataType::float32, ReduceOp::sum, in_place);
    } else if (in_slots && row.kind != CollectiveKind::barrier) {
      try {
        check_once(comm, row, large + 1, DataType::float32, ReduceOp::sum, false);
        require(false, "a call beyond the slots ran in shared memory");
      } catch (const Error& e) {
        const char* names = row.own_host_need ? "per-host segments" : "CHORUS_SHM_BYTES";
        require(e.code() == ErrorCode::invalid_argument &&
                    std::string(e.what()).find(names) != std::string::npos,
                e.what());
      }
    }
  });
  for (std::size_t r = 0; r < outcomes.size(); ++r)
    EXPECT_FALSE(outcomes[r].failed) << "rank " << r << ": " << outcomes[r].message;
}

INSTANTIATE_TEST_SUITE_P(Registry, EveryAlgorithm, ::testing::ValuesIn(every_row_and_rank_count()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const AlgorithmRow& row = coll::registry()[info.param.id];
                           std::string hosts;
                           for (const char* c = info.param.topology; c && *c; ++c)
                             hosts += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '_';
                           return fmt::format("{}_{}_p{}{}{}", to_string(row.kind), row.name,
                                              info.param.p, hosts.empty() ? "" : "_hosts_",
                                              hosts);
                         });

TEST(Registry, EveryCollectiveHasRowsAndNamesAreUniqueWithinIt) {
  for (int k = 0; k < coll::kCollectiveKinds; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    const auto rows = coll::rows_of(kind);
    ASSERT_FALSE(rows.empty()) << to_string(kind);
    std::set<std::string_view> names;
    for (const AlgorithmRow& row : rows) {
      EXPECT_TRUE(names.insert(row.name).second) << to_string(kind) << " " << row.name;
      EXPECT_EQ(coll::find_row(kind, row.name), &row);
      EXPECT_EQ(coll::algorithm_name(row.id), row.name);
      EXPECT_EQ(row.cost != nullptr,
                kind == CollectiveKind::allreduce && !row.host_slot_need && !row.across_hosts &&
                    !row.own_host_need)
          << row.name << ": AllReduce's flat rows that send messages, and only they, carry a "
                         "cost formula";
    }
  }
}

TEST(Registry, AnUnknownOrUnrunnableForcedAlgorithmIsRefusedNamingIt) {
  const auto outcomes = testing::run_ranks(3, [&](Communicator& comm) {
    std::vector<float> send(3), recv(1);
    CallOptions forced;
    forced.algorithm_name = "butterfly";
    try {
      comm.reduce_scatter(send.data(), recv.data(), 1, DataType::float32, ReduceOp::sum, forced);
      require(false, "butterfly ran");
    } catch (const Error& e) {
      require(e.code() == ErrorCode::invalid_argument, e.what());
      require(std::string(e.what()).find("no algorithm 'butterfly' (it has: auto, shm, hierarchical, recursive_halving, ring)") !=
                  std::string::npos, e.what());
    }
    forced.algorithm_name = "recursive_halving";  // needs a power of two
    try {
      comm.reduce_scatter(send.data(), recv.data(), 1, DataType::float32, ReduceOp::sum, forced);
      require(false, "recursive halving ran on 3 ranks");
    } catch (const Error& e) {
      require(std::string(e.what()).find("cannot run on 3 ranks") != std::string::npos, e.what());
    }
    comm.barrier();  // still usable: nothing was sent
  });
  for (const auto& o : outcomes) EXPECT_FALSE(o.failed) << o.message;
}

Options twenty_seconds() {
  Options options;
  options.timeout = std::chrono::seconds(20);
  return options;
}

TEST(Registry, RanksForcingDifferentAlgorithmsFailTheCallNamingBoth) {
  const auto outcomes = testing::run_ranks(3, [&](Communicator& comm) {
    std::vector<float> send(4, 1.0f), recv(12);
    CallOptions forced;
    forced.algorithm_name = comm.rank() == 0 ? "bruck" : "ring";
    comm.allgather(send.data(), recv.data(), 4, DataType::float32, forced);
  }, twenty_seconds());
  for (const auto& o : outcomes) {
    EXPECT_TRUE(o.failed);
    EXPECT_EQ(o.code, ErrorCode::mismatched_collective) << o.message;
    EXPECT_NE(o.message.find("bruck"), std::string::npos) << o.message;
    EXPECT_NE(o.message.find("ring"), std::string::npos) << o.message;
  }
}

TEST(Registry, PerCollectiveNamesInOptionsReachTheCall) {
  Options options;
  options.algorithms = "allgather=bruck,reduce=binomial_tree";
  const auto outcomes = testing::run_ranks(2, [&](Communicator& comm) {
    auto& engine = CommunicatorAccess::engine(comm);
    require(engine.choose(CollectiveKind::allgather, "", 1 << 20).row->name == "bruck", "allgather");
    require(engine.choose(CollectiveKind::reduce, "", 1 << 30).row->name == "binomial_tree", "reduce");
    // A call's own name wins over the communicator's.
    require(engine.choose(CollectiveKind::allgather, "ring", 8).row->name == "ring", "per call");
    require(engine.choose(CollectiveKind::broadcast, "", 8).row->name == "shm",
            "the others choose freely (8 bytes on one host: through its segment)");
    require(engine.choose(CollectiveKind::reduce_scatter, "", 1 << 26).row->name == "ring",
            "the others choose freely (beyond the segment's slots: by threshold)");
  }, options);
  for (const auto& o : outcomes) EXPECT_FALSE(o.failed) << o.message;
  options.algorithms = "allgather=butterfly";
  const auto bad = testing::run_ranks(1, [](Communicator&) {}, options);
  EXPECT_TRUE(bad[0].failed);
  EXPECT_NE(bad[0].message.find("Options::algorithms='allgather=butterfly': 'butterfly' is not one of auto, shm, bruck, ring, hierarchical"),
            std::string::npos)
      << bad[0].message;
}

// A blocking v-form call borrows its thread's layouts and gives them back
// with their vectors' memory (coll::VFormLayoutsPtr): the next borrow gets
// the same pair, emptied; a borrow while another is out gets a pair of its
// own; an owned copy is independent of the pair it copies.
TEST(Registry, VFormLayoutsAreBorrowedFromTheThreadAndComeBackEmpty) {
  const coll::VFormLayouts* first_address = nullptr;
  {
    coll::VFormLayoutsPtr first = coll::borrow_v_form_layouts();
    first->recv_blocks.counts.assign(1000, 7);
    first->send_blocks.displs.assign(10, 3);
    first_address = first.get();
    coll::VFormLayoutsPtr nested = coll::borrow_v_form_layouts();
    EXPECT_NE(nested.get(), first.get());
    EXPECT_TRUE(nested->recv_blocks.counts.empty());

    const coll::VFormLayoutsPtr copy = coll::own_copy(first);
    ASSERT_NE(copy, nullptr);
    EXPECT_NE(copy.get(), first.get());
    EXPECT_EQ(copy->recv_blocks.counts, std::vector<std::size_t>(1000, 7));
    first->recv_blocks.counts[0] = 8;
    EXPECT_EQ(copy->recv_blocks.counts[0], 7u);
    EXPECT_EQ(coll::own_copy(coll::VFormLayoutsPtr()), nullptr);
  }
  // Both came back; the last one returned is lent first, so take both.
  coll::VFormLayoutsPtr a = coll::borrow_v_form_layouts(), b = coll::borrow_v_form_layouts();
  const coll::VFormLayouts* reused = a.get() == first_address ? a.get() : b.get();
  ASSERT_EQ(reused, first_address) << "the first pair was not kept for the thread";
  for (const coll::VFormLayouts* l : {a.get(), b.get()})
    for (const coll::BlockLayout* blocks : {&l->send_blocks, &l->recv_blocks}) {
      EXPECT_TRUE(blocks->counts.empty());
      EXPECT_TRUE(blocks->displs.empty());
    }
  EXPECT_GE(reused->recv_blocks.counts.capacity(), 1000u) << "its memory went with it";
}

}  // namespace
}  // namespace chorus

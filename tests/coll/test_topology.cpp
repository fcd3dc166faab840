// Which ranks share a host (coll/topology.hpp): CHORUS_TOPOLOGY's forms and
// errors, what the ranks find by themselves, and how the automatic choice
// and a forced hierarchical AllReduce use it. (The hierarchical AllReduce's
// results on several topologies are in test_registry.cpp's matrix; across
// real hosts in tests/lab.)
#include "../comm/local_ranks.hpp"
#include "local_transports.hpp"

#include "coll/hierarchical.hpp"
#include "shm/segment.hpp"
#include "coll/registry.hpp"
#include "coll/ring.hpp"
#include "coll/topology.hpp"
#include "common/host.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace chorus {
namespace {

using coll::parse_topology;
using coll::Topology;

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

class ScopedTopology {
 public:
  explicit ScopedTopology(const char* value) { ::setenv("CHORUS_TOPOLOGY", value, 1); }
  ~ScopedTopology() { ::unsetenv("CHORUS_TOPOLOGY"); }
};

TEST(Topology, HostsTimesRanksPutsConsecutiveRanksOnAHost) {
  const Topology t = parse_topology("2x3", 6);
  EXPECT_EQ(t.hosts(), 2);
  EXPECT_TRUE(t.uniform());
  EXPECT_EQ(t.ranks_on(1), (std::vector<int>{3, 4, 5}));
  EXPECT_EQ(t.local_rank(4), 1);
  EXPECT_EQ(t.local_size(4), 3);
  EXPECT_EQ(t.peers_across_hosts(2), (std::vector<int>{2, 5}));
  EXPECT_EQ(t.describe(), "2 hosts x 3 ranks (host 0: 0-2, host 1: 3-5)");
  EXPECT_EQ(t.name_rank(4), "rank 4 (host host 1)");
}

TEST(Topology, HostNumbersPerRankAreRenumberedByTheirLowestRank) {
  const Topology t = parse_topology("7,3,7,3,5", 5);
  EXPECT_EQ(t.hosts(), 3);
  EXPECT_FALSE(t.uniform());
  EXPECT_EQ(t.host_of(0), 0);
  EXPECT_EQ(t.host_of(1), 1);
  EXPECT_EQ(t.host_of(4), 2);
  EXPECT_EQ(t.ranks_on(0), (std::vector<int>{0, 2}));
  EXPECT_EQ(t.local_rank(3), 1);
  EXPECT_EQ(t.describe(), "3 hosts of unequal rank counts (host 0: 0,2, host 1: 1,3, host 2: 4)");
}

TEST(Topology, BadTextIsRefusedNamingWhatIsWrong) {
  const auto refused = [](const char* text, int p, const char* why) {
    try {
      parse_topology(text, p);
      ADD_FAILURE() << text << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("CHORUS_TOPOLOGY"), std::string::npos) << e.what();
    }
  };
  refused("3x2", 4, "3 hosts x 2 ranks is not the communicator's size");
  refused("0x4", 4, "0 hosts x 4 ranks");
  refused("0,1", 4, "2 host numbers given");
  refused("0,1,", 3, "a trailing comma");
  refused("0,a,1", 3, "'a' is not a number");
  refused("-1,0", 2, "'-1' is not a number");
  refused("", 2, "'' is not a number");
}

TEST(Topology, RanksOfOneProcessFindOneHost) {
  const auto outcomes = testing::run_ranks(3, [](Communicator& comm) {
    const Topology& t = *CommunicatorAccess::engine(comm).topology;
    require(t.hosts() == 1 && t.local_size(comm.rank()) == 3, t.describe());
    require(t.host_name(0) == host::name(), t.describe());
  });
  for (const auto& o : outcomes) EXPECT_FALSE(o.failed) << o.message;
}

TEST(Topology, SeveralHostsOfSeveralRanksChooseHierarchicalAndNoHostSegment) {
  const ScopedTopology hosts("2x2");
  const auto outcomes = testing::run_ranks(4, [](Communicator& comm) {
    auto& engine = CommunicatorAccess::engine(comm);
    require(engine.host == nullptr, "a host segment across two (given) hosts");
    require(engine.own_host != nullptr && engine.own_host->size() == 2 &&
                engine.own_host->rank() == comm.rank() % 2,
            "no segment of this rank's (given) host");
    const coll::CostModel& model = engine.cost_model();
    require(model.within_host.measured() && model.across_hosts.measured(),
            "the probe did not measure both levels of the (given) hosts");
    require(engine.choose(coll::CollectiveKind::allgather, "", 4 << 10).row->name == "hierarchical",
            "allgather of 4 x 4 KiB");
    require(engine.choose(coll::CollectiveKind::reduce_scatter, "", 256 << 10).row->name ==
                "hierarchical",
            "reduce_scatter of 256 KiB in all");
    require(engine.choose(coll::CollectiveKind::reduce_scatter, "", 64 << 10).row->name !=
                "hierarchical",
            "reduce_scatter of 64 KiB in all (the ring is faster there)");
    // Rooted: a flat chain on consecutive ranks crosses each link once, as
    // the hierarchical broadcast does; reduce-scatter-gather 1.25 times.
    require(engine.choose(coll::CollectiveKind::broadcast, "", 64 << 20).row->name == "chain",
            "broadcast of 64 MiB");
    require(engine.choose(coll::CollectiveKind::reduce, "", 1 << 20).row->name == "hierarchical",
            "reduce of 1 MiB");
    require(engine.choose(coll::CollectiveKind::reduce, "", 64 << 10).row->name == "binomial_tree",
            "reduce of 64 KiB");
    // Up to 32 KiB through each leader's link: one step through the hosts' segments.
    for (std::size_t bytes : {8, 4 << 10, 32 << 10}) {
      const auto choice = engine.choose(coll::CollectiveKind::allreduce, "", bytes);
      require(choice.row->name == "hierarchical_shm" && std::string(choice.reason) == "host segments",
              std::to_string(bytes) + " bytes: " + std::string(choice.row->name));
    }
    for (std::size_t bytes : {64 << 10, 64 << 20}) {
      const auto choice = engine.choose(coll::CollectiveKind::allreduce, "", bytes);
      require(choice.row->name == "hierarchical" && std::string(choice.reason) == "hosts",
              std::to_string(bytes) + " bytes: " + std::string(choice.row->name));
    }
    for (std::size_t count : {std::size_t{2}, coll::kHierarchicalFromBytes}) {
      std::vector<float> v(count, static_cast<float>(comm.rank()));
      comm.allreduce(std::span<float>(v), ReduceOp::sum);
      require(v.front() == 6.0f && v.back() == 6.0f, "the sum");
    }
    const Counters counters = comm.counters();
    require(counters.by_algorithm[static_cast<int>(Algorithm::hierarchical)].calls == 2,
            "the calls were not counted as hierarchical");
  });
  for (const auto& o : outcomes) EXPECT_FALSE(o.failed) << o.message;
}

// 4 hosts of 2: a leader sends the buffer twice (two steps of recursive
// doubling), so the hosts' segments take AllReduces up to 16 KiB; without
// segments (CHORUS_SHM=0) none is made and small calls go flat.
TEST(Topology, HostSegmentsAcrossHostsAreChosenByWhatALeaderSendsAndCanBeTurnedOff) {
  const ScopedTopology hosts("4x2");
  auto outcomes = testing::run_ranks(8, [](Communicator& comm) {
    auto& engine = CommunicatorAccess::engine(comm);
    require(engine.choose(coll::CollectiveKind::allreduce, "", 16 << 10).row->name == "hierarchical_shm",
            "16 KiB across 4 hosts");
    require(engine.choose(coll::CollectiveKind::allreduce, "", 32 << 10).row->name != "hierarchical_shm",
            "32 KiB across 4 hosts (64 KiB through each leader's link)");
  });
  for (const auto& o : outcomes) EXPECT_FALSE(o.failed) << o.message;
  ::setenv("CHORUS_SHM", "0", 1);
  outcomes = testing::run_ranks(8, [](Communicator& comm) {
    auto& engine = CommunicatorAccess::engine(comm);
    require(engine.own_host == nullptr, "a host's segment with CHORUS_SHM=0");
    require(engine.choose(coll::CollectiveKind::allreduce, "", 8).row->name != "hierarchical_shm",
            "8 bytes without segments");
    try {
      engine.choose(coll::CollectiveKind::allreduce, "hierarchical_shm", 8);
      require(false, "hierarchical_shm was forced without segments");
    } catch (const Error& e) {
      require(std::string(e.what()).find("needs ranks on several hosts, each host's ranks sharing "
                                         "a segment") != std::string::npos,
              e.what());
    }
  });
  ::unsetenv("CHORUS_SHM");
  for (const auto& o : outcomes) EXPECT_FALSE(o.failed) << o.message;
}

// More pieces than the pipeline holds at once (hierarchical.hpp), and the
// small calls through the hosts' segments (also on hosts of unequal rank
// counts), random floats: every rank ends with the same bits, in place as
// out of place, close to the sum in double; small integers: exactly the sum.
TEST(Topology, HierarchicalPipelineOfManyPiecesIsBitIdenticalOnEveryRank) {
  struct Case {
    const char* topology;
    int p;
    const char* algorithm;
    std::size_t count;
  };
  const std::size_t pieces = 10 * coll::kHierarchicalPieceBytes / 4 + 3;
  for (const Case& test : {Case{"2x2", 4, "hierarchical", pieces}, Case{"3x2", 6, "hierarchical", pieces},
                           Case{"2x2", 4, "hierarchical_shm", 4001}, Case{"3x2", 6, "hierarchical_shm", 2001},
                           Case{"0,0,1", 3, "hierarchical_shm", 4001}}) {
    const ScopedTopology hosts(test.topology);
    const int p = test.p;
    const std::size_t count = test.count;
    const auto outcomes = testing::run_ranks(p, [&](Communicator& comm) {
      const auto value = [](int rank, std::size_t i) {
        std::uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(rank + 1) * 0xD1B54A32D192ED03ull;
        x ^= x >> 29;
        return static_cast<float>(static_cast<double>(x % 2000001) / 1000.0 - 1000.0);
      };
      std::vector<float> send(count), out(count), in_place(count);
      for (std::size_t i = 0; i < count; ++i) send[i] = in_place[i] = value(comm.rank(), i);
      const CallOptions hierarchical{Algorithm::automatic, test.algorithm};
      comm.allreduce(send.data(), out.data(), count, DataType::float32, ReduceOp::sum, hierarchical);
      comm.allreduce(in_place.data(), in_place.data(), count, DataType::float32, ReduceOp::sum,
                     hierarchical);
      require(std::memcmp(out.data(), in_place.data(), count * 4) == 0, "in place differs");
      for (std::size_t i = 0; i < count; i += 997) {
        double want = 0;
        for (int r = 0; r < comm.size(); ++r) want += value(r, i);
        require(std::abs(out[i] - want) < 1e-2, "element " + std::to_string(i));
      }
      std::uint64_t hash = 1469598103934665603ull;
      for (const std::byte b : std::as_bytes(std::span(out))) hash = (hash ^ std::to_integer<unsigned>(b)) * 1099511628211ull;
      std::vector<std::uint64_t> hashes(static_cast<std::size_t>(comm.size()));
      comm.allgather(&hash, hashes.data(), 1, DataType::uint64);
      for (const std::uint64_t h : hashes) require(h == hash, "ranks ended with different bits");
      std::vector<std::int32_t> ints(count, comm.rank() + 1);
      comm.allreduce(std::span<std::int32_t>(ints), ReduceOp::sum, hierarchical);
      for (const std::int32_t v : ints) require(v == p * (p + 1) / 2, "the integer sum");
    });
    for (const auto& o : outcomes)
      EXPECT_FALSE(o.failed) << test.topology << " " << test.algorithm << ": " << o.message;
  }
}

TEST(Topology, TheFlatRingsLoadOnTheBusiestLinkIsCounted) {
  EXPECT_EQ(parse_topology("2x2", 4).ring_edges_leaving_a_host(), 1);
  EXPECT_EQ(parse_topology("0,1,0,1", 4).ring_edges_leaving_a_host(), 2);
  EXPECT_EQ(parse_topology("0,0,1,1,0,0", 6).ring_edges_leaving_a_host(), 1);
  EXPECT_EQ(parse_topology("1x3", 3).ring_edges_leaving_a_host(), 0);
}

// What each level costs a hierarchical call, from the levels' alpha and
// beta: the steps and bytes per rank of each (2 hosts x 2 ranks, 1 MiB).
TEST(Topology, EachLevelsShareOfAHierarchicalCallIsPricedByItsOwnCosts) {
  coll::CostModel model;
  model.within_host = {1e-6, 1e-9};
  model.across_hosts = {1e-4, 1e-8};
  const Topology hosts = parse_topology("2x2", 4);
  const double mib = 1 << 20;
  const auto allreduce = coll::hierarchical_levels(coll::CollectiveKind::allreduce, model, hosts, 1 << 20);
  ASSERT_TRUE(allreduce.has_value());
  // Within: reduce-scatter + allgather of 2 ranks, 2 steps, half the buffer
  // each way; across: the same for a half-buffer shard.
  EXPECT_DOUBLE_EQ(allreduce->within_host, 2 * 1e-6 + mib * 1e-9);
  EXPECT_DOUBLE_EQ(allreduce->across_hosts, 2 * 1e-4 + mib / 2 * 1e-8);
  const auto broadcast = coll::hierarchical_levels(coll::CollectiveKind::broadcast, model, hosts, 1 << 20);
  ASSERT_TRUE(broadcast.has_value());
  EXPECT_DOUBLE_EQ(broadcast->across_hosts, 1e-4 + mib / 2 * 1e-8);
  // Nothing to price: no hierarchical row, a level not measured, one host.
  EXPECT_FALSE(coll::hierarchical_levels(coll::CollectiveKind::alltoall, model, hosts, 8));
  EXPECT_FALSE(coll::hierarchical_levels(coll::CollectiveKind::allreduce, coll::CostModel{}, hosts, 8));
  EXPECT_FALSE(coll::hierarchical_levels(coll::CollectiveKind::allreduce, model, parse_topology("1x4", 4), 8));
  // One rank per host: no level within, and none needed.
  coll::CostModel across_only;
  across_only.across_hosts = {1e-4, 1e-8};
  const auto one_each = coll::hierarchical_levels(coll::CollectiveKind::allreduce, across_only,
                                                  parse_topology("4x1", 4), 1 << 20);
  ASSERT_TRUE(one_each.has_value());
  EXPECT_EQ(one_each->within_host, 0.0);
}

// The flat ring AllReduce on ranks dealt round-robin runs in host order
// (leaving each host once): exact sums, in place or not, the same on every
// rank, with blocks by ring position.
TEST(Topology, TheRingRunsInHostOrderWhereHostsAreInterleaved) {
  EXPECT_EQ(parse_topology("0,1,0,1", 4).host_order(), (std::vector<int>{0, 2, 1, 3}));
  EXPECT_EQ(parse_topology("1,0,0,1,1,0", 6).host_order(), (std::vector<int>{0, 3, 4, 1, 2, 5}));
  for (const char* text : {"0,1,0,1", "1,0,0,1,1,0"}) {
    const int p = static_cast<int>(std::count(text, text + std::strlen(text), ',')) + 1;
    const ScopedTopology hosts(text);
    const auto outcomes = testing::run_ranks(p, [&](Communicator& comm) {
      for (bool in_place : {false, true}) {
        const std::size_t count = 300001;  // several segments per block
        std::vector<float> send(count), recv(count, -1.0f);
        for (std::size_t i = 0; i < count; ++i)
          send[i] = static_cast<float>((i % 97) * (comm.rank() + 1));
        float* out = in_place ? send.data() : recv.data();
        comm.allreduce(send.data(), out, count, DataType::float32, ReduceOp::sum,
                       {Algorithm::ring});
        const float ranks_sum = static_cast<float>(p * (p + 1) / 2);
        for (std::size_t i = 0; i < count; i += 997)
          require(out[i] == static_cast<float>(i % 97) * ranks_sum,
                  std::string(text) + ": element " + std::to_string(i));
        require(out[count - 1] == static_cast<float>((count - 1) % 97) * ranks_sum, text);
      }
    });
    for (const auto& o : outcomes) EXPECT_FALSE(o.failed) << text << ": " << o.message;
  }
}

// Passes everything to a transport and records which peers this rank sent
// to: what the ring's order is, seen from the wire.
class SendRecordingTransport final : public transport::Transport {
 public:
  explicit SendRecordingTransport(transport::Transport& inner)
      : Transport(inner.rank(), inner.size()), inner_(inner) {}
  std::set<int> sent_to() const {
    std::lock_guard lock(mutex_);
    return sent_to_;
  }
  std::string_view name() const noexcept override { return "recording"; }
  transport::AddressBlob address() override { return inner_.address(); }
  void connect(std::span<const transport::AddressBlob> a, transport::Deadline d) override {
    inner_.connect(a, d);
  }
  transport::RequestPtr isend(int peer, transport::Tag tag, const void* buf,
                              std::size_t bytes) override {
    {
      std::lock_guard lock(mutex_);
      sent_to_.insert(peer);
    }
    return inner_.isend(peer, tag, buf, bytes);
  }
  transport::RequestPtr irecv(int peer, transport::Tag tag, void* buf, std::size_t bytes) override {
    return inner_.irecv(peer, tag, buf, bytes);
  }
  bool probe(int peer, transport::Tag tag) override { return inner_.probe(peer, tag); }
  bool progress() override { return inner_.progress(); }
  void wait_for_activity(transport::Deadline until) override { inner_.wait_for_activity(until); }
  void abort(const std::string& reason) override { inner_.abort(reason); }

 private:
  transport::Transport& inner_;
  mutable std::mutex mutex_;
  std::set<int> sent_to_;
};

// The same ring, watched on the wire: on hosts 0,1,0,1 every rank sends to
// its successor in host order (0 -> 2 -> 1 -> 3 -> 0), so the ring crosses
// from host 0 to host 1 once (2 -> 1) and back once (3 -> 0); in rank order
// it would cross at all four steps. On consecutive hosts it stays in rank
// order.
TEST(Topology, TheInterleavedRingSendsOnlyToItsSuccessorInHostOrder) {
  for (const auto& [text, successor] :
       {std::pair{"0,1,0,1", std::vector<int>{2, 3, 1, 0}},
        std::pair{"0,0,1,1", std::vector<int>{1, 2, 3, 0}}}) {
    const Topology hosts = parse_topology(text, 4);
    std::vector<std::set<int>> sent_to(4);
    testing::run_on_local_transports(4, [&](transport::LocalTransport& local, int r) {
      SendRecordingTransport t(local);
      const coll::Collective c{.transport = t, .sequence = 7,
                               .deadline = transport::deadline_after(60), .topology = &hosts};
      std::vector<float> data(100000, static_cast<float>(r + 1));
      coll::ring_allreduce(c, data.data(), data.data(), data.size(), DataType::float32,
                           ReduceOp::sum);
      require(data.front() == 10.0f && data.back() == 10.0f, "sum");
      sent_to[static_cast<std::size_t>(r)] = t.sent_to();
    });
    for (int r = 0; r < 4; ++r)
      EXPECT_EQ(sent_to[static_cast<std::size_t>(r)],
                std::set<int>{successor[static_cast<std::size_t>(r)]})
          << text << ": rank " << r;
  }
}

// Ranks dealt round-robin over 2 hosts: a flat chain crosses the links at
// every step, the hierarchical broadcast once.
TEST(Topology, InterleavedHostsBroadcastHierarchically) {
  const ScopedTopology hosts("0,1,0,1");
  const auto outcomes = testing::run_ranks(4, [](Communicator& comm) {
    auto& engine = CommunicatorAccess::engine(comm);
    const auto choice = engine.choose(coll::CollectiveKind::broadcast, "", 1 << 20);
    require(choice.row->name == "hierarchical" && std::string(choice.reason) == "hosts",
            std::string(choice.row->name));
    require(engine.choose(coll::CollectiveKind::broadcast, "", 64 << 10).row->name !=
                "hierarchical",
            "broadcast of 64 KiB (the binomial tree's size)");
    std::vector<float> v(1 << 18, comm.rank() == 3 ? 5.0f : 0.0f);
    comm.broadcast(v.data(), v.size(), DataType::float32, 3);
    require(v.front() == 5.0f && v.back() == 5.0f, "the root's buffer");
  });
  for (const auto& o : outcomes) EXPECT_FALSE(o.failed) << o.message;
}

TEST(Topology, OneRankPerHostUnequalHostsOrLittleToGainKeepTheFlatChoice) {
  // 8 x 2: the hierarchical AllReduce would send 1.07x less than the ring
  // through a link, its allgather 1.07x: below kHierarchicalMinLinkGain.
  for (const char* text : {"4x1", "0,0,0,1", "8x2"}) {
    const int p = std::string(text) == "8x2" ? 16 : 4;
    const ScopedTopology hosts(text);
    const auto outcomes = testing::run_ranks(p, [&](Communicator& comm) {
      auto& engine = CommunicatorAccess::engine(comm);
      for (const auto kind : {coll::CollectiveKind::allreduce, coll::CollectiveKind::allgather,
                              coll::CollectiveKind::reduce_scatter, coll::CollectiveKind::broadcast})
        require(engine.choose(kind, "", 64 << 20).row->name != "hierarchical", text);
    });
    for (const auto& o : outcomes) EXPECT_FALSE(o.failed) << text << ": " << o.message;
  }
}

TEST(Topology, ForcingHierarchicalOnUnequalHostsIsRefusedNamingThem) {
  const ScopedTopology hosts("0,0,0,1");
  const auto outcomes = testing::run_ranks(4, [](Communicator& comm) {
    std::vector<float> v(100, 1.0f);
    try {
      comm.allreduce(std::span<float>(v), ReduceOp::sum, {Algorithm::hierarchical});
      require(false, "ran");
    } catch (const Error& e) {
      require(e.code() == ErrorCode::invalid_argument &&
                  std::string(e.what()).find("needs the same number of ranks on every host; this "
                                             "communicator has 2 hosts of unequal rank counts") !=
                      std::string::npos,
              e.what());
    }
    comm.allreduce(std::span<float>(v), ReduceOp::sum);  // nothing was sent: still usable
    require(v[0] == 4.0f, "the sum after the refusal");
  });
  for (const auto& o : outcomes) EXPECT_FALSE(o.failed) << o.message;
}

TEST(Topology, RanksGivenDifferentTopologiesAllFailNamingThem) {
  // discover_topology over an all-gather among threads: rank 1 is given
  // another CHORUS_TOPOLOGY than the others.
  constexpr int p = 3;
  std::vector<std::vector<std::byte>> records(p);
  std::barrier sync(p);
  std::vector<std::string> errors(p);
  std::vector<std::thread> ranks;
  for (int r = 0; r < p; ++r)
    ranks.emplace_back([&, r] {
      const coll::TopologyAllgather allgather = [&](const void* mine, std::size_t bytes, void* out) {
        const auto* first = static_cast<const std::byte*>(mine);
        records[static_cast<std::size_t>(r)].assign(first, first + bytes);
        sync.arrive_and_wait();
        for (int q = 0; q < p; ++q)
          std::memcpy(static_cast<std::byte*>(out) + static_cast<std::size_t>(q) * bytes,
                      records[static_cast<std::size_t>(q)].data(), bytes);
        sync.arrive_and_wait();
      };
      try {
        coll::discover_topology(r, p, allgather,
                                r == 1 ? std::optional<std::string>("3x1") : std::nullopt);
      } catch (const Error& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  for (auto& t : ranks) t.join();
  for (int r = 0; r < p; ++r) {
    EXPECT_NE(errors[static_cast<std::size_t>(r)].find("CHORUS_TOPOLOGY differs"), std::string::npos)
        << "rank " << r << ": " << errors[static_cast<std::size_t>(r)];
  }
  EXPECT_NE(errors[0].find("this rank (unset) and rank 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[1].find("this rank ('3x1') and rank 0"), std::string::npos) << errors[1];
}

}  // namespace
}  // namespace chorus

// Which ranks share a host (coll/topology.hpp): CHORUS_TOPOLOGY's forms and
// errors, what the ranks find by themselves, and how the automatic choice
// and a forced hierarchical AllReduce use it. (The hierarchical AllReduce's
// results on several topologies are in test_registry.cpp's matrix; across
// real hosts in tests/lab.)
#include "../comm/local_ranks.hpp"

#include "coll/registry.hpp"
#include "coll/topology.hpp"
#include "common/host.hpp"

#include <gtest/gtest.h>

#include <barrier>
#include <cstdlib>
#include <cstring>
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
    for (std::size_t bytes : {8, 4096, 64 << 20}) {
      const auto choice = engine.choose(coll::CollectiveKind::allreduce, "", bytes);
      require(choice.row->name == "hierarchical" && std::string(choice.reason) == "hosts",
              std::to_string(bytes) + " bytes: " + std::string(choice.row->name));
    }
    std::vector<float> v(1000, static_cast<float>(comm.rank()));
    comm.allreduce(std::span<float>(v), ReduceOp::sum);
    require(v[999] == 6.0f, "the sum");
    const Counters counters = comm.counters();
    require(counters.by_algorithm[static_cast<int>(Algorithm::hierarchical)].calls == 1,
            "the call was not counted as hierarchical");
  });
  for (const auto& o : outcomes) EXPECT_FALSE(o.failed) << o.message;
}

TEST(Topology, OneRankPerHostOrUnequalHostsKeepTheFlatChoice) {
  for (const char* text : {"4x1", "0,0,0,1"}) {
    const ScopedTopology hosts(text);
    const auto outcomes = testing::run_ranks(4, [&](Communicator& comm) {
      auto& engine = CommunicatorAccess::engine(comm);
      const auto choice = engine.choose(coll::CollectiveKind::allreduce, "", 64 << 20);
      require(choice.row->name != "hierarchical", text);
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

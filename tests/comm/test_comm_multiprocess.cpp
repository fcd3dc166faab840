// The Communicator across real processes on loopback, over every transport
// this build has, with 2, 3 and 4 ranks: every algorithm, the other
// collectives, 100 async calls,
// and the failure rules (mismatch, a killed peer, a rank that never calls).
#include "model_only_tuning_file.hpp"
#include "process_group.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <functional>
#include <map>
#include <regex>

namespace chorus {
namespace {

using testing::ProcessResult;

struct Case {
  std::string transport;
  int size;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  std::vector<std::string> transports = {"tcp"};
#if defined(CHORUS_HAVE_UCX)
  transports.push_back("ucx");
#endif
  for (const auto& t : transports)
    for (int size : {2, 3, 4}) c.push_back({t, size});
  return c;
}

class CommMultiProcess : public ::testing::TestWithParam<Case> {
 protected:
  std::vector<ProcessResult> run(const std::string& scenario, int seconds,
                                 const std::map<std::string, std::string>& extra = {}) {
    testing::LoopbackJob job(CHORUS_COMM_WORKER);
    job.start(GetParam().transport, {scenario}, GetParam().size, extra);
    return job.processes.wait(std::chrono::seconds(seconds));
  }
};

void expect_all_passed(const std::vector<ProcessResult>& results) {
  for (const auto& r : results)
    EXPECT_TRUE(!r.timed_out && r.signal == 0 && r.exit_code == 0) << testing::describe(results);
}

long long number_after(const std::string& text, const std::string& key) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(key + "=([0-9]+)"))) return -1;
  return std::stoll(m[1]);
}

// Whether some rank's output holds both texts.
bool some_output_has(const std::vector<ProcessResult>& results, const std::string& a,
                     const std::string& b) {
  return std::any_of(results.begin(), results.end(), [&](const ProcessResult& r) {
    return r.output.find(a) != std::string::npos && r.output.find(b) != std::string::npos;
  });
}

TEST_P(CommMultiProcess, EveryAlgorithmSeveralTypesAndOps) { expect_all_passed(run("algorithms", 240)); }

TEST_P(CommMultiProcess, EveryOtherCollective) { expect_all_passed(run("collectives", 240)); }

TEST_P(CommMultiProcess, SplitAndDupRunBesideTheirParent) { expect_all_passed(run("split", 120)); }

TEST_P(CommMultiProcess, HundredBackToBackAsyncCalls) { expect_all_passed(run("async100", 120)); }

TEST_P(CommMultiProcess, MismatchedCountsFailEveryRankAndOneSaysWhy) {
  const auto results = run("mismatch", 60, {{"CHORUS_TIMEOUT", "30"}});
  expect_all_passed(results);  // each rank saw an error (a success exits 1)
  EXPECT_TRUE(some_output_has(results, "called allreduce(count=1000, float32, sum",
                              "rank 1 called allreduce(count=2000, float32, sum"))
      << testing::describe(results);
}

// The victim (the last rank) was killed mid-collective: every survivor
// failed with a peer failure within 5 s, and at least one named the victim.
void expect_survivors_failed_naming_the_victim(const std::vector<testing::ProcessResult>& results,
                                               int victim) {
  ASSERT_EQ(results[victim].signal, SIGKILL) << testing::describe(results);
  const long long died = number_after(results[victim].output, "dying_at_ms");
  ASSERT_GT(died, 0) << testing::describe(results);
  int naming_the_victim = 0;
  for (int r = 0; r < victim; ++r) {
    const auto& out = results[static_cast<std::size_t>(r)];
    EXPECT_EQ(out.exit_code, 0) << testing::describe(results);
    const long long failed = number_after(out.output, "failed_at_ms");
    EXPECT_GT(failed, 0) << testing::describe(results);
    EXPECT_LE(failed - died, 5000) << "rank " << r << "\n" << testing::describe(results);
    EXPECT_NE(out.output.find("error (peer failure)"), std::string::npos) << testing::describe(results);
    naming_the_victim += out.output.find("rank " + std::to_string(victim)) != std::string::npos;
  }
  // The survivor that notices first names the victim. It also tells the
  // others why, best effort: over TCP its notice cannot go out on a socket
  // whose send buffer is full or that is in the middle of a frame (the ring
  // moves 16 MiB here), and over UCX it races with the survivor's own exit;
  // a later survivor may then only see that the first one left.
  EXPECT_GE(naming_the_victim, 1) << testing::describe(results);
}

TEST_P(CommMultiProcess, KilledPeerFailsSurvivorsWithinFiveSeconds) {
  expect_survivors_failed_naming_the_victim(run("peer_death", 90), GetParam().size - 1);
}

TEST_P(CommMultiProcess, KilledPeerDuringAlltoallFailsSurvivorsWithinFiveSeconds) {
  expect_survivors_failed_naming_the_victim(run("peer_death_alltoall", 90), GetParam().size - 1);
}

// Killed while the others wait on its slot of the host segment: the
// survivors find its process gone, and the segment (unlinked once every
// rank had mapped it) is not left in /dev/shm.
TEST_P(CommMultiProcess, KilledPeerWaitedForInSharedMemoryFailsSurvivorsWithinFiveSeconds) {
  const auto results = run("peer_death_shm", 60, {{"CHORUS_DEBUG", "INFO"}});
  expect_survivors_failed_naming_the_victim(results, GetParam().size - 1);
  bool seen_gone = false;  // found by the segment's liveness check, not by the transport
  for (const auto& r : results) seen_gone = seen_gone || r.output.find("its process is gone") != std::string::npos;
  EXPECT_TRUE(seen_gone) << testing::describe(results);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(results[0].output, m, std::regex("host segment (/chorus\\.[0-9a-f.]+)")))
      << testing::describe(results);
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + m[1].str())) << m[1].str();
}

// The same ranks as hosts of their own (CHORUS_TOPOLOGY): small AllReduces
// go through each host's own segment and its leader's messages.
const char* given_hosts(int size) { return size == 2 ? "0,1" : size == 3 ? "0,0,1" : "2x2"; }

// The failure tests across given hosts take their cost model from a
// tuning file (testing::ModelOnlyTuningFile, which the ranks inherit): what
// they choose does not need the probe, which there times every variant and
// both levels of hosts (5-14 s at p = 3-4 on two cores, past the tests'
// minute under TSan).

TEST_P(CommMultiProcess, AcrossGivenHostsMismatchedCountsFailEveryRankNamingBothCalls) {
  const testing::ModelOnlyTuningFile no_probe(::testing::TempDir());
  const auto results = run("mismatch", 60, {{"CHORUS_TIMEOUT", "30"}, {"CHORUS_TOPOLOGY", given_hosts(GetParam().size)}});
  expect_all_passed(results);
  EXPECT_TRUE(some_output_has(results, "called allreduce(count=1000, float32, sum, hierarchical_shm)",
                              "rank 1 called allreduce(count=2000, float32, sum, hierarchical_shm)"))
      << testing::describe(results);
}

// Whole hosts agree among themselves, and the hosts take different
// algorithms (a small call through the hosts' segments, a large pipelined
// one): their leaders wait for messages that do not come, so every rank
// fails at CHORUS_TIMEOUT (or because a peer did), naming what it waited
// for; none hangs (run() ends ranks still there after 60 s: a failure).
TEST_P(CommMultiProcess, AcrossGivenHostsHostsCallingDifferentlyAllFailByTheDeadline) {
  if (GetParam().size == 3) GTEST_SKIP() << "the halves are not hosts at 0,0,1";
  const testing::ModelOnlyTuningFile no_probe(::testing::TempDir());
  const auto results = run("mismatch_hosts", 60, {{"CHORUS_TIMEOUT", "3"}, {"CHORUS_TOPOLOGY", given_hosts(GetParam().size)}});
  expect_all_passed(results);
  for (const auto& r : results)
    EXPECT_TRUE(r.output.find("error (timeout)") != std::string::npos ||
                r.output.find("error (peer failure)") != std::string::npos)
        << testing::describe(results);
  // The first to time out may be either kind of rank; the others then see it fail.
  EXPECT_TRUE(some_output_has(results, "error (timeout)", "timed out after"))
      << testing::describe(results);
}

TEST_P(CommMultiProcess, AcrossGivenHostsKilledPeerFailsSurvivorsWithinFiveSeconds) {
  const testing::ModelOnlyTuningFile no_probe(::testing::TempDir());
  expect_survivors_failed_naming_the_victim(
      run("peer_death_shm", 60, {{"CHORUS_TOPOLOGY", given_hosts(GetParam().size)}}), GetParam().size - 1);
}

TEST_P(CommMultiProcess, RankThatNeverCallsTimesOutNamingTheCall) {
  const auto results = run("timeout", 60, {{"CHORUS_TIMEOUT", "2"}});
  expect_all_passed(results);
  EXPECT_TRUE(some_output_has(results, "error (timeout)",
                              "call #1, allreduce(count=1000, float32, sum, ring)"))
      << testing::describe(results);
}

// Creates a communicator on 3 ranks of `transport`, rank 2 with `rank2`'s
// settings: every rank must fail at creation (exit 1) at once, well before
// the deadline (60 s here) at which ranks waiting for keys that never come
// would give up, and say what each `says(rank)` holds: each string in its
// output.
void expect_creation_fails_on_every_rank_at_once(
    const std::string& transport, const std::map<std::string, std::string>& rank2,
    const std::function<std::vector<std::string>(std::size_t rank)>& says) {
  testing::LoopbackJob job(CHORUS_COMM_WORKER);
  const auto start = std::chrono::steady_clock::now();
  job.start(transport, {"connect"}, 3, {}, -1, {{2, rank2}});
  const auto results = job.processes.wait(std::chrono::seconds(50));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_EQ(results.size(), 3u);
  for (std::size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(!results[r].timed_out && results[r].signal == 0 && results[r].exit_code == 1)
        << testing::describe(results);
    for (const std::string& text : says(r))
      EXPECT_NE(results[r].output.find(text), std::string::npos) << text << "\n" << results[r].output;
  }
  EXPECT_LT(seconds, 30) << "the ranks waited for the deadline";
}

// One rank asking for another transport than the rest (CHORUS_TRANSPORT=tcp
// where the others choose automatically): every rank fails at creation at
// once, naming the transports and a rank that differs. Before, each kind
// waited at the store for keys the other never set, and all reported
// "never arrived" at the deadline.
TEST(CommMultiProcessTransports, RanksAskingForDifferentTransportsAllFailAtOnceNamingThem) {
  expect_creation_fails_on_every_rank_at_once("auto", {{"CHORUS_TRANSPORT", "tcp"}}, [](std::size_t r) {
    return std::vector<std::string>{"error (mismatched collective)",
                                    "the ranks ask for different transports",
                                    r == 2 ? "tcp here" : "rank 2 asks for tcp"};
  });
}

// The same for one rank connecting its TCP links lazily where the others
// connect eagerly: they meet at different keys of the store.
TEST(CommMultiProcessTransports, RanksConnectingDifferentlyAllFailAtOnceNamingTheSetting) {
  expect_creation_fails_on_every_rank_at_once("tcp", {{"CHORUS_SOCKET_CONNECT", "lazy"}}, [](std::size_t r) {
    return std::vector<std::string>{
        "error (mismatched collective)", "(CHORUS_SOCKET_CONNECT)",
        r == 2 ? "connect TCP links differently: lazily here, eagerly on 2 of 3 ranks"
               : "connect TCP links differently: eagerly here, lazily on 1 of 3 ranks"};
  });
}

// A bad value of a setting the agreement reads, on one rank: that rank
// fails with its own error, the others at once naming it, rather than
// waiting for it until the deadline.
TEST(CommMultiProcessTransports, AnInvalidSettingOnOneRankFailsEveryRankAtOnceNamingIt) {
  expect_creation_fails_on_every_rank_at_once("tcp", {{"CHORUS_SOCKET_CONNECT", "bogus"}}, [](std::size_t r) {
    return std::vector<std::string>{
        "error (invalid argument)",
        r == 2 ? "CHORUS_SOCKET_CONNECT='bogus' is not one of auto, eager, lazy"
               : "a setting of another rank is invalid, rank 2: CHORUS_SOCKET_CONNECT='bogus'"};
  });
}

// A setting that changes what a rank sends (the host segment, the call
// check) given to one rank only: every rank fails at creation at once,
// naming it. Before, CHORUS_SHM=0 on one rank failed the others' set-up
// on a message of the wrong size, and CHORUS_CHECK=0 on one rank let it
// succeed while the others failed its first call as another collective.
TEST(CommMultiProcessTransports, ASettingGivenToOneRankOnlyFailsEveryRankAtCreationNamingIt) {
  for (const std::string variable : {"CHORUS_SHM", "CHORUS_CHECK"}) {
    SCOPED_TRACE(variable);
    expect_creation_fails_on_every_rank_at_once("tcp", {{variable, "0"}}, [&](std::size_t r) {
      return std::vector<std::string>{"error (mismatched collective)",
                                      variable + " differs between this rank (" + (r == 2 ? "0" : "1")};
    });
  }
}

#if defined(CHORUS_HAVE_UCX)
// UCX forced (no fallback to tcp) and one rank unable to start it (its
// UCX_TLS names no transport): every rank fails at creation at once, naming
// that rank and UCX's error, rather than the others waiting at the store
// until the deadline to report a rank that never came.
TEST(CommMultiProcessUcx, ARankThatCannotStartAForcedUcxFailsEveryRankAtOnce) {
  expect_creation_fails_on_every_rank_at_once("ucx", {{"UCX_TLS", "no_such_transport"}}, [](std::size_t) {
    return std::vector<std::string>{"the transport is ucx", "rank 2 cannot: UCX"};
  });
}
#endif

INSTANTIATE_TEST_SUITE_P(Transports, CommMultiProcess, ::testing::ValuesIn(cases()),
                         [](const auto& info) {
                           return info.param.transport + "_p" + std::to_string(info.param.size);
                         });

}  // namespace
}  // namespace chorus

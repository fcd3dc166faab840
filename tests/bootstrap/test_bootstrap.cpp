// Rank/size/store detection from launcher variables, and the two stores.
#include "bootstrap/file_store.hpp"
#include "bootstrap/launch.hpp"
#include "bootstrap/tcp_store.hpp"
#include "common/socket.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <thread>

namespace chorus::bootstrap {
namespace {

LaunchInfo from(const std::map<std::string, std::string>& vars) {
  return launch_info_from_env([&](const char* name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  });
}

std::string error_of(const std::map<std::string, std::string>& vars) {
  try {
    from(vars);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(LaunchInfo, ChorusVariablesComeFirst) {
  auto info = from({{"CHORUS_RANK", "2"},
                    {"CHORUS_SIZE", "4"},
                    {"CHORUS_STORE", "tcp://h:5"},
                    {"RANK", "2"},
                    {"WORLD_SIZE", "4"}});
  EXPECT_EQ(info.rank, 2);
  EXPECT_EQ(info.size, 4);
  EXPECT_EQ(info.store, "tcp://h:5");
}

TEST(LaunchInfo, TorchrunUsesTheNextPortAfterMasterPort) {
  auto info = from(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.1.2.3"}, {"MASTER_PORT", "29500"}});
  EXPECT_EQ(info.rank, 1);
  EXPECT_EQ(info.store, "tcp://10.1.2.3:29501");
  EXPECT_EQ(from({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "::1"}, {"MASTER_PORT", "7"}})
                .store,
            "tcp://[::1]:8");
}

TEST(LaunchInfo, OpenMpiPmiAndSlurm) {
  EXPECT_EQ(from({{"OMPI_COMM_WORLD_RANK", "3"},
                  {"OMPI_COMM_WORLD_SIZE", "4"},
                  {"CHORUS_STORE", "file:///s"}})
                .rank,
            3);
  // Open MPI with every rank on this host needs no store variable.
  EXPECT_EQ(from({{"OMPI_COMM_WORLD_RANK", "0"},
                  {"OMPI_COMM_WORLD_SIZE", "2"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                  {"PMIX_NAMESPACE", "job7"}})
                .store,
            "file:///tmp/chorus-job7");
  // Inside the job's session directory when Open MPI names it: a directory
  // in /tmp named after the namespace alone is met again by later jobs.
  EXPECT_EQ(from({{"OMPI_COMM_WORLD_RANK", "0"},
                  {"OMPI_COMM_WORLD_SIZE", "2"},
                  {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                  {"PMIX_NAMESPACE", "job7"},
                  {"PMIX_SERVER_TMPDIR", "/tmp/ompi.host.0/pid.42"}})
                .store,
            "file:///tmp/ompi.host.0/pid.42/chorus-job7");
  EXPECT_EQ(from({{"PMI_RANK", "1"}, {"PMI_SIZE", "3"}, {"CHORUS_STORE", "tcp://a:1"}}).size, 3);
  EXPECT_EQ(from({{"SLURM_PROCID", "5"},
                  {"SLURM_NTASKS", "8"},
                  {"MASTER_ADDR", "n1"},
                  {"MASTER_PORT", "100"}})
                .rank,
            5);
}

TEST(LaunchInfo, MissingOrContradictoryVariablesSayWhatWasFound) {
  auto none = error_of({});
  EXPECT_NE(none.find("none of them is set"), std::string::npos) << none;
  auto half = error_of({{"CHORUS_RANK", "1"}});
  EXPECT_NE(half.find("CHORUS_RANK is set but CHORUS_SIZE is not"), std::string::npos) << half;
  auto range = error_of({{"CHORUS_RANK", "4"}, {"CHORUS_SIZE", "4"}, {"CHORUS_STORE", "x"}});
  EXPECT_NE(range.find("CHORUS_RANK=4 and CHORUS_SIZE=4"), std::string::npos) << range;
  auto clash = error_of({{"CHORUS_RANK", "1"},
                         {"CHORUS_SIZE", "4"},
                         {"OMPI_COMM_WORLD_RANK", "1"},
                         {"OMPI_COMM_WORLD_SIZE", "2"},
                         {"CHORUS_STORE", "x"}});
  EXPECT_NE(clash.find("says rank 1 of 4, but Open MPI"), std::string::npos) << clash;
  auto no_store = error_of({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "2"}});
  EXPECT_NE(no_store.find("there is no store"), std::string::npos) << no_store;
  EXPECT_NE(no_store.find("SLURM_PROCID=0"), std::string::npos) << no_store;
  // Finding 5 of issue 19: CHORUS_SIZE up to 2^30 was accepted, then failed
  // as a bare std::bad_alloc.
  auto huge = error_of({{"CHORUS_RANK", "0"}, {"CHORUS_SIZE", "1073741824"}, {"CHORUS_STORE", "x"}});
  EXPECT_NE(huge.find("CHORUS_SIZE=1073741824 is more ranks than Chorus supports (8388608)"),
            std::string::npos)
      << huge;
}

TEST(TransportKind, ParsedFromTheEnvironmentWithAClearError) {
  setenv("CHORUS_TRANSPORT", "tcp", 1);
  EXPECT_EQ(transport_kind_from_env(), TransportKind::tcp);
  setenv("CHORUS_TRANSPORT", "ucx", 1);
  EXPECT_EQ(transport_kind_from_env(), TransportKind::ucx);
  setenv("CHORUS_TRANSPORT", "auto", 1);
  EXPECT_EQ(transport_kind_from_env(), TransportKind::automatic);
  setenv("CHORUS_TRANSPORT", "local", 1);
  EXPECT_EQ(transport_kind_from_env(), TransportKind::local);
  setenv("CHORUS_TRANSPORT", "quic", 1);
  try {
    transport_kind_from_env();
    ADD_FAILURE() << "quic accepted";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("CHORUS_TRANSPORT='quic' is not one of auto, ucx, tcp, local"),
        std::string::npos)
        << e.what();
  }
  unsetenv("CHORUS_TRANSPORT");
  EXPECT_EQ(transport_kind_from_env(), TransportKind::automatic);
}

// ---- the stores: the same behaviour from both ------------------------------------

struct StoreFixture {
  virtual ~StoreFixture() = default;
  virtual std::unique_ptr<Store> client() = 0;
};
struct TcpFixture : StoreFixture {
  StoreServer server{"127.0.0.1", 0};
  std::unique_ptr<Store> client() override {
    return std::make_unique<TcpStore>("127.0.0.1", server.port(), transport::deadline_after(10));
  }
};
struct FileFixture : StoreFixture {
  std::string dir = "/tmp/chorus-store-test-" + std::to_string(getpid()) + "-" +
                    std::to_string(reinterpret_cast<std::uintptr_t>(this));
  ~FileFixture() override { std::filesystem::remove_all(dir); }
  std::unique_ptr<Store> client() override { return std::make_unique<FileStore>(dir); }
};

TEST(TransportKind, LocalServesAOneRankJobAndRefusesMore) {
  FileFixture store_dir;
  auto store = store_dir.client();
  auto t = connect_transport(TransportKind::local, 0, 1, *store, "x", transport::deadline_after(5));
  EXPECT_EQ(t->name(), "local");
  std::uint32_t in = 0, out = 42;
  auto r = t->irecv(0, 1, &in, 4);
  t->wait(*t->isend(0, 1, &out, 4), transport::deadline_after(5));
  t->wait(*r, transport::deadline_after(5));
  EXPECT_EQ(in, 42u);
  try {
    connect_transport(TransportKind::local, 0, 2, *store, "y", transport::deadline_after(5));
    ADD_FAILURE() << "a 2-process local group was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs ucx or tcp"), std::string::npos) << e.what();
  }
}

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "tcp")
      fixture_ = std::make_unique<TcpFixture>();
    else
      fixture_ = std::make_unique<FileFixture>();
  }
  std::unique_ptr<StoreFixture> fixture_;
};

TEST_P(StoreTest, GetWaitsForEveryKeyThenReturnsThemInOrder) {
  auto a = fixture_->client(), b = fixture_->client();
  std::thread setter([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    b->set("k/2", to_bytes("two"), transport::deadline_after(5));
    b->set("k/1", to_bytes(std::string("o\0ne", 4)), transport::deadline_after(5));
  });
  const std::string keys[] = {"k/1", "k/2"};
  auto values = a->get(keys, transport::deadline_after(10));
  setter.join();
  ASSERT_EQ(values.size(), 2u);
  EXPECT_EQ(to_string(values[0]), std::string("o\0ne", 4));
  EXPECT_EQ(to_string(values[1]), "two");
}

TEST_P(StoreTest, TimeoutNamesTheMissingKeys) {
  auto a = fixture_->client();
  a->set("present", to_bytes("x"), transport::deadline_after(5));
  const std::string keys[] = {"present", "absent/1", "absent/2"};
  try {
    a->get(keys, transport::deadline_after(0.3));
    FAIL() << "no timeout";
  } catch (const StoreTimeout& e) {
    EXPECT_EQ(e.missing(), (std::vector<std::string>{"absent/1", "absent/2"}));
    EXPECT_NE(std::string(e.what()).find("absent/1, absent/2"), std::string::npos) << e.what();
  }
}

TEST_P(StoreTest, AddAndBarrierFromManyClients) {
  constexpr int n = 6;
  // Keeps the job's namespace alive (a tcp store drops a job's keys when its
  // last client leaves, as a rank 0 serving it does at the end of the job).
  auto keeper = fixture_->client();
  std::vector<std::thread> threads;
  std::atomic<int> passed{0};
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&] {
      auto s = fixture_->client();
      s->add("counter", 5, transport::deadline_after(10));
      s->barrier("b", n, transport::deadline_after(10));
      ++passed;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(passed, n);
  EXPECT_EQ(keeper->add("counter", 0, transport::deadline_after(5)), 5 * n);
}

INSTANTIATE_TEST_SUITE_P(Stores, StoreTest, ::testing::Values("tcp", "file"));

TEST(TcpStore, ServerSurvivesGarbageAndKeepsServing) {
  StoreServer server("127.0.0.1", 0);
  {
    const auto address = net::resolve("127.0.0.1", server.port(), "test");
    net::Fd fd(::socket(AF_INET, SOCK_STREAM, 0));
    ASSERT_EQ(::connect(fd.get(), address.get(), address.length), 0);
    const char junk[] = "\x10\x00\x00\x00GARBAGE GARBAGE!\xff\xff\xff\xff";
    ::send(fd.get(), junk, sizeof junk, MSG_NOSIGNAL);
  }
  TcpStore store("127.0.0.1", server.port(), transport::deadline_after(5));
  store.set("k", to_bytes("v"), transport::deadline_after(5));
  const std::string keys[] = {"k"};
  EXPECT_EQ(to_string(store.get(keys, transport::deadline_after(5))[0]), "v");
}

TEST(TcpStore, UnreachableStoreIsATimeoutThatSaysWhere) {
  // A port nobody listens on: bind one, then close it.
  net::SocketAddress a = net::resolve("127.0.0.1", 0, "test");
  std::uint16_t port;
  {
    auto fd = net::listen_on(a);
    port = a.port();
  }
  try {
    TcpStore store("127.0.0.1", port, transport::deadline_after(0.3));
    FAIL() << "connected to nothing";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::timeout);
    EXPECT_NE(std::string(e.what()).find("cannot reach the store at tcp://127.0.0.1:"),
              std::string::npos)
        << e.what();
  }
}

// A listener whose queue is full drops new SYNs (Linux), as a firewall
// does: the client's connect must end at the deadline, not after the
// kernel's two minutes of SYN retries.
TEST(TcpStore, AStoreThatDropsConnectionsIsATimeoutAtTheDeadline) {
  net::SocketAddress a = net::resolve("127.0.0.1", 0, "test");
  const net::Fd listener = net::listen_on(a, 0);
  net::Fd filler(::socket(AF_INET, SOCK_STREAM, 0));  // takes the one place in its queue
  ASSERT_EQ(::connect(filler.get(), a.get(), a.length), 0);
  const auto start = std::chrono::steady_clock::now();
  try {
    TcpStore store("127.0.0.1", a.port(), transport::deadline_after(1.0));
    FAIL() << "connected to a full queue";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::timeout) << e.what();
    EXPECT_NE(std::string(e.what()).find("cannot reach the store"), std::string::npos) << e.what();
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(4));
}

// (A name server that never answers: tests/bootstrap/unanswered_name_server.sh.)
TEST(Resolve, WithADeadlineLiteralsAndNamesResolveAsWithout) {
  const auto soon = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  EXPECT_EQ(net::resolve("127.0.0.1", 80, "test", soon).to_string(), "127.0.0.1:80");
  EXPECT_EQ(net::resolve("[::1]", 81, "test", soon).to_string(), "[::1]:81");
  EXPECT_EQ(net::resolve("localhost", 82, "test", soon).port(), 82);  // /etc/hosts: no server asked
  // Already past: a literal still resolves (it needs no lookup).
  const auto past = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  EXPECT_EQ(net::resolve("127.0.0.1", 83, "test", past).port(), 83);
}

TEST(OpenStore, RejectsUnknownSchemesAndRankZeroWithoutAPort) {
  EXPECT_THROW(open_store("redis://x:1", false, transport::deadline_after(1)), Error);
  EXPECT_THROW(open_store("tcp://127.0.0.1:0", true, transport::deadline_after(1)), Error);
  EXPECT_THROW(open_store("file://relative/dir", false, transport::deadline_after(1)), Error);
}

}  // namespace
}  // namespace chorus::bootstrap

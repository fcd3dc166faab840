// Rank/size/store detection from launcher variables, and the two stores.
#include "bootstrap/file_store.hpp"
#include "bootstrap/launch.hpp"
#include "bootstrap/tcp_store.hpp"
#include "common/socket.hpp"
#include "transport/tcp/tcp_transport.hpp"

#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <map>
#include <mutex>
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
  std::shared_ptr<Store> store = store_dir.client();
  auto t = connect_transport(TransportKind::local, 0, 1, store, "x", transport::deadline_after(5));
  EXPECT_EQ(t->name(), "local");
  std::uint32_t in = 0, out = 42;
  auto r = t->irecv(0, 1, &in, 4);
  t->wait(*t->isend(0, 1, &out, 4), transport::deadline_after(5));
  t->wait(*r, transport::deadline_after(5));
  EXPECT_EQ(in, 42u);
  try {
    connect_transport(TransportKind::local, 0, 2, store, "y", transport::deadline_after(5));
    ADD_FAILURE() << "a 2-process local group was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs ucx or tcp"), std::string::npos) << e.what();
  }
}

// An all-gather of blobs among the threads of this process (as MPI's would
// be among processes): each call returns once all `size` threads have made
// theirs.
class ThreadAllgather {
 public:
  explicit ThreadAllgather(int size) : size_(size) {}
  BlobAllgather of(int rank) {
    return [this, rank](const transport::AddressBlob& mine) {
      std::unique_lock lock(mutex_);
      const std::uint64_t round = round_;
      blobs_.resize(static_cast<std::size_t>(size_));
      blobs_[static_cast<std::size_t>(rank)] = mine;
      if (++arrived_ == size_) {
        result_ = blobs_;
        arrived_ = 0;
        ++round_;
        cv_.notify_all();
      } else {
        cv_.wait(lock, [&] { return round_ != round; });
      }
      return result_;
    };
  }

 private:
  const int size_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<transport::AddressBlob> blobs_, result_;
  int arrived_ = 0;
  std::uint64_t round_ = 0;
};

// Over a caller's all-gather (MPI's, a framework's), ranks asking for
// different transports all fail at the first exchange, naming them; before,
// one rank's agreement step met the others' address step, and each went on
// with the other's bytes (through libchorus_pmpi: a job that hung).
TEST(TransportKind, RanksAskingForDifferentTransportsOverAnAllgatherAllFailNamingThem) {
  constexpr int p = 3;
  const TransportKind kinds[p] = {TransportKind::tcp, TransportKind::automatic, TransportKind::tcp};
  ThreadAllgather allgather(p);
  std::vector<std::string> errors(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r)
    threads.emplace_back([&, r] {
      try {
        connect_transport(kinds[r], r, p, allgather.of(r), transport::deadline_after(10));
        errors[static_cast<std::size_t>(r)] = "connected";
      } catch (const Error& e) {
        errors[static_cast<std::size_t>(r)] =
            e.code() == ErrorCode::mismatched_collective ? e.what() : "wrong code: " + std::string(e.what());
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < p; ++r) {
    const std::string& e = errors[static_cast<std::size_t>(r)];
    EXPECT_NE(e.find("the ranks ask for different transports"), std::string::npos) << "rank " << r << ": " << e;
    EXPECT_NE(e.find(r == 1 ? "auto here" : "tcp here"), std::string::npos) << "rank " << r << ": " << e;
    EXPECT_NE(e.find(r == 1 ? "rank 0 asks for tcp" : "rank 1 asks for auto"), std::string::npos)
        << "rank " << r << ": " << e;
  }
}

// Rank 0 of 2 asking for tcp (eager: 2 ranks), its all-gather's rank 1 a
// fake that answers `rank1` in the first exchange: the Error rank 0 throws.
Error rank0_against(const std::string& rank1) {
  const BlobAllgather with_fake_rank1 = [&](const transport::AddressBlob& mine) {
    const auto* bytes = reinterpret_cast<const std::byte*>(rank1.data());
    return std::vector<transport::AddressBlob>{mine, transport::AddressBlob(bytes, bytes + rank1.size())};
  };
  try {
    connect_transport(TransportKind::tcp, 0, 2, with_fake_rank1, transport::deadline_after(5));
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "rank 0 connected against the answer '" << rank1 << "'";
  return Error(ErrorCode::internal, "connected");
}

// And ranks that would connect the transport differently (one lazily, the
// others eagerly) the same way, naming the setting.
TEST(TransportKind, RanksConnectingDifferentlyOverAnAllgatherAllFailNamingTheSetting) {
  const Error e = rank0_against("tcp:100:");  // rank 1 connects TCP lazily
  EXPECT_EQ(e.code(), ErrorCode::mismatched_collective) << e.what();
  EXPECT_NE(std::string(e.what()).find("connect TCP links differently: eagerly here, lazily on 1 "
                                       "of 2 ranks (CHORUS_SOCKET_CONNECT)"),
            std::string::npos)
      << e.what();
}

// A rank whose connect setting is invalid says so in the same exchange:
// the others fail at once, naming it and what is wrong.
TEST(TransportKind, AnInvalidSettingOfAPeerOverAnAllgatherFailsNamingIt) {
  const Error e = rank0_against("tcp:001:CHORUS_SOCKET_CONNECT='x' is not one of auto, eager, lazy");
  EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
  EXPECT_NE(std::string(e.what()).find("a setting of another rank is invalid, rank 1: "
                                       "CHORUS_SOCKET_CONNECT='x'"),
            std::string::npos)
      << e.what();
}

// A peer's answer in that first exchange is checked before it is believed.
TEST(TransportKind, AMalformedTransportAnswerFailsNamingThePeer) {
  for (const std::string& garbage : {std::string("\x01\x02no kind", 10), std::string("tcp:1"),
                                    std::string("tcp:1x0:"), std::string("udp:000:")}) {
    const Error e = rank0_against(garbage);
    EXPECT_EQ(e.code(), ErrorCode::peer_failure) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1 sent a malformed transport answer"), std::string::npos)
        << e.what();
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

// ---- connecting through the store ---------------------------------------------

// A store client that counts the values its gets returned.
class CountingStore final : public Store {
 public:
  explicit CountingStore(std::unique_ptr<Store> inner) : inner_(std::move(inner)) {}
  void set(const std::string& key, std::span<const std::byte> value, Deadline deadline) override {
    inner_->set(key, value, deadline);
  }
  std::vector<Bytes> get(std::span<const std::string> keys, Deadline deadline) override {
    values_fetched += keys.size();
    return inner_->get(keys, deadline);
  }
  std::int64_t add(const std::string& key, std::int64_t delta, Deadline deadline) override {
    return inner_->add(key, delta, deadline);
  }
  std::string url() const override { return inner_->url(); }
  void park(Deadline deadline) override { inner_->park(deadline); }
  std::atomic<std::size_t> values_fetched{0};

 private:
  std::unique_ptr<Store> inner_;
};

// Issue 19: start-up without every rank pulling every address from one
// server. With lazy TCP links or UCX endpoints (beyond 64 ranks, or forced
// as here) a rank fetches rank 0's address and then only those of the
// peers it talks to: around a ring of 9 ranks at most 4 values each (the
// arrival counter's "done", rank 0's address and its two neighbours'; with
// eager links: all 9), and one more for the ranks' agreement on the
// transport (its arrival counter's "done": every rank asks for the same
// one, and each could start UCX). Then every rank still reaches every other (looking
// the rest up), and once the store is gone a lookup fails naming the rank.
struct Connecting {
  TransportKind kind;
  const char* variable;  // what makes it lazy or eager
  bool lazy;
};
class ConnectThroughStore : public ::testing::TestWithParam<Connecting> {};

TEST_P(ConnectThroughStore, LazyRanksLookUpOnlyThePeersTheyTalkTo) {
  constexpr int p = 9;
  const Connecting mode = GetParam();
  setenv(mode.variable, mode.lazy ? "lazy" : "eager", 1);
  struct Unset {
    const char* name;
    ~Unset() { unsetenv(name); }
  } unset{mode.variable};
  auto server = std::make_unique<StoreServer>("127.0.0.1", 0);
  std::vector<std::unique_ptr<transport::Transport>> ranks(p);
  std::vector<std::shared_ptr<CountingStore>> stores(p);
  std::vector<std::size_t> fetched_for_ring(p);
  std::vector<std::string> errors(p);
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r)
    threads.emplace_back([&, r] {
      const auto i = static_cast<std::size_t>(r);
      try {
        stores[i] = std::make_shared<CountingStore>(
            std::make_unique<TcpStore>("127.0.0.1", server->port(), transport::deadline_after(10)));
        auto& t = ranks[i];
        t = connect_transport(mode.kind, r, p, stores[i], "job", transport::deadline_after(30));
        std::uint32_t from_left = 0;
        const std::uint32_t mine = 1000u + static_cast<std::uint32_t>(r);
        auto recv = t->irecv((r + p - 1) % p, 4, &from_left, 4);
        t->wait(*t->isend((r + 1) % p, 4, &mine, 4), transport::deadline_after(30));
        t->wait(*recv, transport::deadline_after(30));
        if (from_left != 1000u + static_cast<std::uint32_t>((r + p - 1) % p))
          throw std::runtime_error("wrong ring message");
        fetched_for_ring[i] = stores[i]->values_fetched;
        // Every rank to every rank: links (and lookups) the ring never made.
        std::vector<std::uint32_t> got(p, 0);
        std::vector<transport::RequestPtr> requests;
        for (int q = 0; q < p; ++q) {
          if (q == r) continue;
          requests.push_back(t->irecv(q, 5, &got[static_cast<std::size_t>(q)], 4));
          requests.push_back(t->isend(q, 5, &mine, 4));
        }
        t->wait_all(requests, transport::deadline_after(30));
        for (int q = 0; q < p; ++q)
          if (q != r && got[static_cast<std::size_t>(q)] != 1000u + static_cast<std::uint32_t>(q))
            throw std::runtime_error("wrong message from rank " + std::to_string(q));
        // Until every rank is done: a rank that left early would fail the
        // others' sends to it.
        stores[i]->barrier("done", p, transport::deadline_after(30));
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  constexpr std::size_t agreement = 1;  // the transport agreement's "done"
  for (int r = 0; r < p; ++r) {
    const auto i = static_cast<std::size_t>(r);
    EXPECT_EQ(errors[i], "") << "rank " << r;
    if (mode.lazy)
      EXPECT_LE(fetched_for_ring[i], 4u + agreement) << "rank " << r << " looked up more than its ring";
    else
      EXPECT_EQ(fetched_for_ring[i], std::size_t{p} + agreement) << "rank " << r;
  }
  if (mode.lazy) {
    // The store goes; the lazy ranks' connections are parked, so it does
    // not wait out its 10 s drain for them.
    const auto stopping = std::chrono::steady_clock::now();
    server.reset();
    EXPECT_LT(std::chrono::steady_clock::now() - stopping, std::chrono::seconds(5));
    // A new rank 1 whose peers are unknown: its lookup fails, naming why.
    auto late = make_transport(mode.kind, 1, p);
    late->connect_looking_up(
        ranks[0]->address(),
        [store = stores[1]](int q, transport::Deadline until) {
          const std::string key[] = {"job/address/" + std::to_string(q)};
          return store->get(key, until)[0];
        },
        transport::deadline_after(5));
    std::uint32_t x = 7;
    auto s = late->isend(4, 6, &x, 4);
    try {
      late->wait(*s, transport::deadline_after(10));
      ADD_FAILURE() << "a send whose peer cannot be looked up succeeded";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::peer_failure) << e.what();
      EXPECT_NE(std::string(e.what()).find("cannot look up rank 4's address"), std::string::npos)
          << e.what();
    }
  }
  ranks.clear();
}

INSTANTIATE_TEST_SUITE_P(
    Transports, ConnectThroughStore,
    ::testing::Values(Connecting{TransportKind::tcp, "CHORUS_SOCKET_CONNECT", true},
                      Connecting{TransportKind::tcp, "CHORUS_SOCKET_CONNECT", false}
#if defined(CHORUS_HAVE_UCX)
                      ,
                      Connecting{TransportKind::ucx, "CHORUS_UCX_CONNECT", true},
                      Connecting{TransportKind::ucx, "CHORUS_UCX_CONNECT", false}
#endif
                      ),
    [](const ::testing::TestParamInfo<Connecting>& info) {
      return std::string(info.param.kind == TransportKind::tcp ? "tcp" : "ucx") +
             (info.param.lazy ? "_lazy" : "_eager");
    });

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

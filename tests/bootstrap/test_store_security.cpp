// Issue 19's findings about start-up, each with the test that shows it fixed:
// who may use a store, what a store holds, how long anything may wait.
#include "bootstrap/file_store.hpp"
#include "bootstrap/launch.hpp"
#include "bootstrap/tcp_store.hpp"
#include "common/config.hpp"
#include "common/secret.hpp"
#include "common/socket.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <thread>

namespace chorus::bootstrap {
namespace {

using transport::deadline_after;

std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

StoreAccess access(std::optional<std::string> secret, std::string job = "") {
  StoreAccess a;
  if (secret) a.secret = auth::Secret(*secret);
  a.job = std::move(job);
  return a;
}

std::unique_ptr<TcpStore> client(const StoreServer& server, StoreAccess a = {}) {
  return std::make_unique<TcpStore>("127.0.0.1", server.port(), deadline_after(5), std::move(a));
}

// Finding 1: anyone could use the store. With a secret only those who
// prove it are served; the secret itself never travels.
TEST(StoreSecret, OnlyClientsThatProveTheSecretAreServed) {
  StoreServer server("127.0.0.1", 0, auth::Secret("the job's secret"));
  auto member = client(server, access("the job's secret"));
  member->set("k", to_bytes("v"), deadline_after(5));

  const std::string wrong = error_text([&] { client(server, access("a guess")); });
  EXPECT_NE(wrong.find("refused this rank: wrong job secret"), std::string::npos) << wrong;
  const std::string none = error_text([&] { client(server); });
  EXPECT_NE(none.find("requires the job secret"), std::string::npos) << none;

  const std::string keys[] = {"k"};
  EXPECT_EQ(to_string(member->get(keys, deadline_after(5))[0]), "v");
}

// A rank with a secret does not trust a store that cannot prove it (a
// planted store, or one started without the secret).
TEST(StoreSecret, AClientWithASecretRefusesAStoreWithout) {
  StoreServer planted("127.0.0.1", 0);
  const std::string e = error_text([&] { client(planted, access("the job's secret")); });
  EXPECT_NE(e.find("does not know the job secret"), std::string::npos) << e;
}

TEST(StoreSecret, SecretFileMustBeOursAndPrivate) {
  const std::string path = "/tmp/chorus-secret-test-" + std::to_string(getpid());
  std::ofstream(path) << "s3cret\n";
  ::chmod(path.c_str(), 0644);
  setenv("CHORUS_SECRET_FILE", path.c_str(), 1);
  unsetenv("CHORUS_SECRET");
  const std::string loose = error_text([] { auth::Secret::from_env(); });
  EXPECT_NE(loose.find("lets group or others read it"), std::string::npos) << loose;
  ::chmod(path.c_str(), 0600);
  auto secret = auth::Secret::from_env();
  ASSERT_TRUE(secret);
  // The trailing newline is not part of the secret.
  EXPECT_EQ(secret->fingerprint(), auth::Secret("s3cret").fingerprint());
  unsetenv("CHORUS_SECRET_FILE");
  std::filesystem::remove(path);
}

// Finding 2: a 217-byte GET naming one large key 40 times made the server
// build gigabytes and die of bad_alloc. Now the reply is bounded and the
// request answered with an error; the server serves on.
TEST(StoreLimits, AGetWhoseReplyIsTooLargeIsAnErrorAndTheServerServesOn) {
  StoreServer server("127.0.0.1", 0);
  auto a = client(server);
  a->set("large", Bytes(8u << 20), deadline_after(5));  // 8 MiB, half the value limit
  std::vector<std::string> keys(40, "large");           // 320 MiB asked for
  const std::string e = error_text([&] { a->get(keys, deadline_after(5)); });
  EXPECT_NE(e.find("the reply would be"), std::string::npos) << e;
  EXPECT_NE(e.find("over the store's limit"), std::string::npos) << e;
  auto b = client(server);
  const std::string one[] = {"large"};
  EXPECT_EQ(b->get(one, deadline_after(5))[0].size(), 8u << 20);
}

TEST(StoreLimits, ValuesCountersAndClientsAreBounded) {
  setenv("CHORUS_STORE_MAX_VALUE", "1K", 1);
  setenv("CHORUS_STORE_MAX_CLIENTS", "2", 1);
  StoreServer server("127.0.0.1", 0);
  unsetenv("CHORUS_STORE_MAX_VALUE");
  unsetenv("CHORUS_STORE_MAX_CLIENTS");
  auto a = client(server), b = client(server);
  const std::string big = error_text([&] { a->set("big", Bytes(2048), deadline_after(5)); });
  EXPECT_NE(big.find("over the store's limit of 1024 (CHORUS_STORE_MAX_VALUE)"), std::string::npos)
      << big;
  a->add("n", std::numeric_limits<std::int64_t>::max(), deadline_after(5));
  const std::string overflow = error_text([&] { a->add("n", 1, deadline_after(5)); });
  EXPECT_NE(overflow.find("would overflow"), std::string::npos) << overflow;
  a->set("text", to_bytes("abc"), deadline_after(5));
  const std::string not_counter = error_text([&] { a->add("text", 1, deadline_after(5)); });
  EXPECT_NE(not_counter.find("not a counter"), std::string::npos) << not_counter;
  const std::string third = error_text([&] { client(server); });
  EXPECT_NE(third.find("CHORUS_STORE_MAX_CLIENTS"), std::string::npos) << third;
  b.reset();  // room again, once the server has seen b leave
  std::string again = "(never tried)";
  for (int i = 0; i < 100 && !again.empty(); ++i) {
    again = error_text([&] { client(server); }) == "(no error)" ? "" : "refused";
    if (!again.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(again, "");
}

// Finding 7: a second job on the same server read the first job's keys.
// Keys live in the namespace of the client's job, and go with its last
// client.
TEST(StoreJobs, TwoJobsOnOneServerDoNotSeeEachOthersKeys) {
  StoreServer server("127.0.0.1", 0);
  auto a = client(server, access(std::nullopt, "job-a"));
  auto b = client(server, access(std::nullopt, "job-b"));
  a->set("chorus/0/0/0", to_bytes("a's address"), deadline_after(5));
  const std::string keys[] = {"chorus/0/0/0"};
  EXPECT_THROW(b->get(keys, deadline_after(0.2)), StoreTimeout);
  b->set("chorus/0/0/0", to_bytes("b's address"), deadline_after(5));
  EXPECT_EQ(to_string(a->get(keys, deadline_after(5))[0]), "a's address");
  EXPECT_EQ(to_string(b->get(keys, deadline_after(5))[0]), "b's address");
}

TEST(StoreJobs, TwoJobsUnderOneNameAreToldSoAtOnce) {
  StoreServer server("127.0.0.1", 0);
  auto first = client(server), second = client(server);
  first->set("chorus/0/0/1", to_bytes("first job's rank 1"), deadline_after(5));
  const std::string e = error_text(
      [&] { second->set("chorus/0/0/1", to_bytes("second job's rank 1"), deadline_after(5)); });
  EXPECT_NE(e.find("two jobs share this store"), std::string::npos) << e;
  EXPECT_NE(e.find("CHORUS_JOB_ID"), std::string::npos) << e;
}

TEST(StoreJobs, AJobsKeysGoWithItsLastClient) {
  StoreServer server("127.0.0.1", 0);
  client(server)->set("old", to_bytes("stale address"), deadline_after(5));
  const std::string keys[] = {"old"};
  EXPECT_THROW(client(server)->get(keys, deadline_after(0.2)), StoreTimeout);
}

// Finding 3: every pass rescanned every waiting GET's keys (p^3). Now a key
// wakes only the GETs waiting for it. 512 clients each set a key and wait
// for all 512 (the address exchange of a 512-rank job).
TEST(StoreScale, FiveHundredTwelveClientsExchangeAddresses) {
  StoreServer server("127.0.0.1", 0);
  constexpr int p = 512;
  std::vector<std::string> keys;
  for (int r = 0; r < p; ++r) keys.push_back("addr/" + std::to_string(r));
  std::vector<std::unique_ptr<TcpStore>> clients;
  for (int r = 0; r < p; ++r) clients.push_back(client(server));
  std::atomic<int> complete{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < p; ++r)
    threads.emplace_back([&, r] {
      clients[r]->set(keys[r], to_bytes(std::string(64, 'a' + r % 26)), deadline_after(60));
      const auto values = clients[r]->get(keys, deadline_after(60));
      if (values.size() == p && to_string(values[p - 1]) == std::string(64, 'a' + (p - 1) % 26))
        ++complete;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(complete, p);
}

// Finding 8: an existing directory was used whoever owned it.
TEST(FileStoreSafety, ADirectoryOthersMayUseOrThatIsNotOursIsRefused) {
  const std::string dir = "/tmp/chorus-planted-" + std::to_string(getpid());
  std::filesystem::create_directory(dir);
  ::chmod(dir.c_str(), 0777);
  const std::string open_dir = error_text([&] { FileStore store(dir); });
  EXPECT_NE(open_dir.find("group or others may use it"), std::string::npos) << open_dir;
  ::chmod(dir.c_str(), 0700);
  EXPECT_NO_THROW(FileStore store(dir));
  if (::geteuid() == 0) {  // root can plant as another user
    ASSERT_EQ(::chown(dir.c_str(), 65534, 65534), 0);
    const std::string planted = error_text([&] { FileStore store(dir); });
    EXPECT_NE(planted.find("someone else made it"), std::string::npos) << planted;
  }
  std::filesystem::remove_all(dir);
  const std::string link = dir + "-link";
  std::filesystem::create_directory_symlink("/tmp", link);
  const std::string symlink = error_text([&] { FileStore store(link); });
  EXPECT_NE(symlink.find("not a directory"), std::string::npos) << symlink;
  std::filesystem::remove(link);
}

// Finding 6: CHORUS_TIMEOUT=inf, 1e300 or 1e10 overflowed the deadline
// arithmetic, and jobs failed at once with a misleading message.
TEST(Timeouts, AbsurdTimeoutsAreRefusedNamingTheSetting) {
  for (double bad : {std::numeric_limits<double>::infinity(), 1e300, 1e10, 0.0, -1.0,
                     std::numeric_limits<double>::quiet_NaN()}) {
    const std::string e = error_text([&] { checked_timeout(bad, "CHORUS_TIMEOUT"); });
    EXPECT_NE(e.find("CHORUS_TIMEOUT"), std::string::npos) << e;
    EXPECT_NE(e.find("at most 1e+07"), std::string::npos) << e;
  }
  EXPECT_EQ(checked_timeout(1e7, "t"), 1e7);
  EXPECT_EQ(checked_timeout(0.5, "t"), 0.5);
  // The arithmetic itself never overflows, whatever it is given.
  const auto far = deadline_after(std::numeric_limits<double>::infinity());
  EXPECT_GT(far, transport::Clock::now() + std::chrono::hours(24 * 100));
  const auto nan_deadline = deadline_after(std::nan(""));
  EXPECT_LE(nan_deadline, transport::Clock::now());
}

TEST(ByteCounts, UnitsAndOverflowAreChecked) {
  EXPECT_EQ(config::parse_byte_count("16M", "X", 0, std::size_t{1} << 40), 16u << 20);
  EXPECT_EQ(config::parse_byte_count("3k", "X", 0, 1 << 20), 3072u);
  EXPECT_EQ(config::parse_byte_count("1G", "X", 0, std::size_t{1} << 40), std::size_t{1} << 30);
  for (const char* bad : {"", "M", "5X", "1.5M", "-1", "99999999999999999999", "17179869184G"}) {
    const std::string e =
        error_text([&] { config::parse_byte_count(bad, "CHORUS_STORE_MAX_VALUE", 0, SIZE_MAX); });
    EXPECT_NE(e.find("CHORUS_STORE_MAX_VALUE='" + std::string(bad) + "' is not a byte count"),
              std::string::npos)
        << bad << ": " << e;
  }
}

}  // namespace
}  // namespace chorus::bootstrap

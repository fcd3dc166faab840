// The UCX transport's control messages against a peer that breaks the
// protocol (issue 19, finding 10): three UcxTransport objects in this
// process are three ranks of one host; rank 1 sends raw UCX messages under
// the control tags that an honest rank never would. (The abort notice's
// case runs over processes: test_multiprocess.cpp.)
#include "transport/ucx/state.hpp"
#include "transport/ucx/ucx_transport.hpp"

#include <gtest/gtest.h>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace chorus {
namespace {

using transport::UcxTransport;

class UcxProtocol : public ::testing::Test {
 protected:
  void SetUp() override {
    std::vector<transport::AddressBlob> blobs;
    for (auto& t : ranks) blobs.push_back(t.address());
    for (auto& t : ranks) t.connect(blobs, deadline);
  }
  void drive(int rounds) {
    for (int i = 0; i < rounds; ++i)
      for (auto& t : ranks) t.progress();
  }
  // Rank 1 sends `bytes` under the raw UCX tag `tag` to rank 0, bypassing
  // its transport's protocol.
  void send_raw_to_rank0(ucp_tag_t tag, const void* bytes, std::size_t length) {
    auto& s = ranks[1].state();
    ASSERT_TRUE(transport::ucx::endpoint_ready(s, 0));  // made now if endpoints are lazy
    ucp_request_param_t param{};
    void* request = ucp_tag_send_nbx(s.endpoints[0], bytes, length, tag, &param);
    ASSERT_FALSE(UCS_PTR_IS_ERR(request));
    while (request != nullptr && ucp_request_check_status(request) == UCS_INPROGRESS) drive(1);
    if (request != nullptr) ucp_request_free(request);
  }

  UcxTransport ranks[3] = {UcxTransport{0, 3}, UcxTransport{1, 3}, UcxTransport{2, 3}};
  const transport::Deadline deadline = transport::deadline_after(30);
};

// Acks of cross-memory-attach sends carry only the send's cookie. A peer
// that sends acks for the first thousand cookies (what a counter from zero
// would give) ends no send of rank 0 to rank 2: each peer's cookies start
// at a random point. The send still ends when rank 2 takes it.
TEST_F(UcxProtocol, GuessedCrossMemoryAttachAcksEndNoSend) {
  if (!UcxTransport::cross_memory_attach_usable())
    GTEST_SKIP() << "cross-memory attach is off here";
  constexpr std::size_t kBytes = 4 << 20;
  std::vector<std::byte> out(kBytes, std::byte{0x42}), in(kBytes);
  auto send = ranks[0].isend(2, 7, out.data(), kBytes);
  drive(1000);
  ASSERT_FALSE(send->done()) << "the send ended before anyone received it";
  std::uint64_t ack_payload[8] = {};
  for (ucp_tag_t cookie = 0; cookie < 1000; ++cookie)
    send_raw_to_rank0((transport::ucx::kAckSource << transport::ucx::kRankShift) | cookie,
                      ack_payload, sizeof ack_payload);
  drive(1000);
  EXPECT_FALSE(send->done()) << "a guessed ack ended the send";
  auto receive = ranks[2].irecv(0, 7, in.data(), kBytes);
  for (int i = 0; i < 200000 && !(receive->done() && send->done()); ++i) drive(1);
  ASSERT_EQ(receive->state(), transport::Request::State::complete);
  EXPECT_EQ(send->state(), transport::Request::State::complete);
  EXPECT_EQ(in, out);
}

// UCX lists the network interfaces at ucp_init() and opens them at
// ucp_worker_create(): an interface removed in between failed the worker
// with "No such device" (a lab test's bridge going away made a concurrent
// test's rank fail so in CI). A bridge with an address is added and
// removed in a loop meanwhile; every transport must still come up. It
// changes the host's interfaces, so it runs only where asked
// (CHORUS_TEST_NETWORK_CHURN=1: ctest's transport.ucx_interface_churn,
// alone, as root).
TEST(UcxCreation, SurvivesAnInterfaceVanishingMeanwhile) {
  if (std::getenv("CHORUS_TEST_NETWORK_CHURN") == nullptr)
    GTEST_SKIP() << "changes the host's network interfaces: ctest runs it alone";
  if (::geteuid() != 0 || std::system("ip link show lo >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "needs root and ip(8)";
  const std::string bridge = "chorus-churn";
  const std::string add = "ip link add " + bridge + " type bridge 2>/dev/null && ip addr add "
                          "10.254.253.1/24 dev " + bridge + " 2>/dev/null && ip link set " +
                          bridge + " up 2>/dev/null";
  const std::string remove = "ip link del " + bridge + " 2>/dev/null";
  [[maybe_unused]] int leftover = std::system(remove.c_str());  // a killed run's
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    for (unsigned i = 0; !stop.load(); ++i) {
      [[maybe_unused]] int rc = std::system(add.c_str());
      std::this_thread::sleep_for(std::chrono::milliseconds(i % 9));
      rc = std::system(remove.c_str());
    }
  });
  int made = 0;
  std::string failure;
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (std::chrono::steady_clock::now() < end && failure.empty()) {
    try {
      UcxTransport t(0, 1);
      ++made;
    } catch (const std::exception& e) {
      failure = e.what();
    }
  }
  stop.store(true);
  churn.join();
  [[maybe_unused]] int rc = std::system(remove.c_str());
  EXPECT_EQ(failure, "") << "after " << made << " transports";
  EXPECT_GE(made, 20);
}

}  // namespace
}  // namespace chorus

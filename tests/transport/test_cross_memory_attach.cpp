// The UCX transport's cross-memory-attach path (messages of 64 KiB-8 MiB
// between ranks of one host), where its own protocol decides the outcome:
// two UcxTransport objects in this process are two ranks of one host.
// (The named suite stays out of transport.ucx_without_cma's filter: these
// tests need the path on.)
#include "transport/ucx/ucx_transport.hpp"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace chorus {
namespace {

using transport::UcxTransport;

// Two ranks of one host, connected, and a 4 MiB send from rank 1 to rank 0
// (the cross-memory-attach range) whose descriptor, after both have been
// driven a while (wire-up included), waits at the receiver, untaken.
class CrossMemoryAttach : public ::testing::Test {
 protected:
  static constexpr std::size_t kBytes = 4 << 20;

  void SetUp() override {
    if (!UcxTransport::cross_memory_attach_usable())
      GTEST_SKIP() << "cross-memory attach is off here";
    const std::vector<transport::AddressBlob> blobs = {receiver.address(), sender.address()};
    receiver.connect(blobs, deadline);
    sender.connect(blobs, deadline);
    send = sender.isend(0, 7, out.data(), kBytes);
    for (int i = 0; i < 20000; ++i) {
      sender.progress();
      receiver.progress();
    }
  }

  UcxTransport receiver{0, 2}, sender{1, 2};
  const transport::Deadline deadline = transport::deadline_after(30);
  std::vector<std::byte> out = std::vector<std::byte>(kBytes, std::byte{0x42});
  std::vector<std::byte> in = std::vector<std::byte>(kBytes, std::byte{0});
  transport::RequestPtr send;
};

// A send that fails before the receiver has taken its data (here: its rank
// aborts) withdraws the message, and the receiver, which finds the
// descriptor first and reads the data after, refuses what it copied instead
// of completing with a buffer its sender has given up.
TEST_F(CrossMemoryAttach, AWithdrawnSendIsNeverTaken) {
  ASSERT_FALSE(send->done()) << "the send ended before anyone received it";
  sender.abort("test: the sender gives the message up");
  ASSERT_TRUE(send->done());
  EXPECT_EQ(send->state(), transport::Request::State::failed);

  auto receive = receiver.irecv(1, 7, in.data(), kBytes);
  try {
    receiver.wait(*receive, deadline);
    FAIL() << "the receive completed with a withdrawn message";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::peer_failure) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 1 withdrew it"), std::string::npos) << e.what();
  }
}

// A receive ends only once its ack has left: a receiver that stops driving
// its transport after the receive (back to the user's computation, or on
// to a store barrier) must not leave its sender waiting. The ack is made to
// queue behind small sends the sender has not taken yet.
TEST_F(CrossMemoryAttach, ASendEndsEvenWhenItsReceiverStopsAfterTheReceive) {
  // Fill the receiver's queue to the sender with messages it does not take.
  constexpr int kSmall = 1000;
  std::vector<std::uint64_t> words(kSmall, 1), taken(kSmall);
  std::vector<transport::RequestPtr> small;
  for (int i = 0; i < kSmall; ++i) small.push_back(receiver.isend(1, 9, &words[i], 8));
  auto receive = receiver.irecv(1, 7, in.data(), kBytes);
  // Both move until the receive ends; from then on only the sender does.
  const auto until = transport::Clock::now() + std::chrono::seconds(10);
  while (!receive->done() && transport::Clock::now() < until) {
    receiver.progress();
    sender.progress();
  }
  ASSERT_EQ(receive->state(), transport::Request::State::complete);
  EXPECT_EQ(in, out);
  const auto stop = transport::Clock::now() + std::chrono::seconds(2);
  while (!send->done() && transport::Clock::now() < stop) sender.progress();
  EXPECT_EQ(send->state(), transport::Request::State::complete)
      << "the send did not end while its receiver was idle";
  // Take the small messages, so that both close cleanly.
  std::vector<transport::RequestPtr> receives;
  for (int i = 0; i < kSmall; ++i) receives.push_back(sender.irecv(0, 9, &taken[i], 8));
  for (int i = 0; i < 200000 && !receives.back()->done(); ++i) {
    receiver.progress();
    sender.progress();
  }
  EXPECT_TRUE(receives.back()->done());
}

}  // namespace
}  // namespace chorus

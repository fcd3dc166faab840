// The UCX transport's cross-memory-attach path (messages of 64 KiB-8 MiB
// between ranks of one host), where its own protocol decides the outcome:
// two UcxTransport objects in this process are two ranks of one host.
// (The named suite stays out of transport.ucx_without_cma's filter: these
// tests need the path on.)
#include "transport/ucx/ucx_transport.hpp"

#include <gtest/gtest.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace chorus {
namespace {

using transport::UcxTransport;

// Whether this process may use the path at all (the transport's own test:
// not turned off, no Yama restriction, the system call allowed).
bool cross_memory_attach_allowed() {
  if (const char* env = std::getenv("CHORUS_UCX_CMA"); env && std::strcmp(env, "0") == 0)
    return false;
  if (std::FILE* f = std::fopen("/proc/sys/kernel/yama/ptrace_scope", "r")) {
    const int scope = std::fgetc(f);
    std::fclose(f);
    if (scope != '0') return false;
  }
  char from = 1, to = 0;
  iovec local{&to, 1}, remote{&from, 1};
  return ::process_vm_readv(::getpid(), &local, 1, &remote, 1, 0) == 1;
}

// A send that fails before the receiver has taken its data (here: its rank
// aborts) withdraws the message, and the receiver, which finds the
// descriptor first and reads the data after, refuses what it copied instead
// of completing with a buffer its sender has given up.
TEST(CrossMemoryAttach, AWithdrawnSendIsNeverTaken) {
  if (!cross_memory_attach_allowed()) GTEST_SKIP() << "cross-memory attach is off here";
  UcxTransport receiver(0, 2), sender(1, 2);
  const std::vector<transport::AddressBlob> blobs = {receiver.address(), sender.address()};
  const auto deadline = transport::deadline_after(30);
  receiver.connect(blobs, deadline);
  sender.connect(blobs, deadline);

  constexpr std::size_t kBytes = 4 << 20;
  std::vector<std::byte> out(kBytes, std::byte{0x42}), in(kBytes, std::byte{0});
  auto send = sender.isend(0, 7, out.data(), kBytes);
  // Until the descriptor is waiting at the receiver (wire-up included).
  for (int i = 0; i < 20000; ++i) {
    sender.progress();
    receiver.progress();
  }
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

}  // namespace
}  // namespace chorus

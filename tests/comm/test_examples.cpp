// The examples, run the way a user runs them: one process per rank, rank and
// store from the environment, on loopback.
#include "process_group.hpp"

#include <gtest/gtest.h>

namespace chorus {
namespace {

void run_example(const char* program, const std::string& transport, int size) {
  testing::LoopbackJob job(program);
  job.start(transport, {}, size);
  const auto results = job.processes.wait(std::chrono::seconds(60));
  for (std::size_t r = 0; r < results.size(); ++r) {
    EXPECT_EQ(results[r].exit_code, 0) << testing::describe(results);
    EXPECT_NE(results[r].output.find("rank " + std::to_string(r) + " of " + std::to_string(size)),
              std::string::npos)
        << testing::describe(results);
    EXPECT_NE(results[r].output.find(": ok"), std::string::npos) << testing::describe(results);
  }
}

TEST(Examples, AllreduceHelloOverTcp) { run_example(CHORUS_EXAMPLE_HELLO, "tcp", 3); }
TEST(Examples, AllreduceCOverTcp) { run_example(CHORUS_EXAMPLE_C, "tcp", 3); }
#if defined(CHORUS_HAVE_UCX)
TEST(Examples, AllreduceHelloOverUcx) { run_example(CHORUS_EXAMPLE_HELLO, "ucx", 2); }
TEST(Examples, AllreduceCOverUcx) { run_example(CHORUS_EXAMPLE_C, "ucx", 4); }
#endif
TEST(Examples, SingleRankNeedsNoStore) {
  testing::ProcessGroup group;
  group.start({CHORUS_EXAMPLE_HELLO}, {{"CHORUS_RANK", "0"}, {"CHORUS_SIZE", "1"}});
  const auto results = group.wait(std::chrono::seconds(30));
  EXPECT_EQ(results[0].exit_code, 0) << testing::describe(results);
  EXPECT_NE(results[0].output.find("rank 0 of 1 over local"), std::string::npos)
      << testing::describe(results);
}

}  // namespace
}  // namespace chorus

#include "common/logging.hpp"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

namespace chorus::log {
namespace {

// Captures lines for the duration of a test and restores everything after.
class LoggingTest : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_ = threshold();
    set_sink([this](std::string_view line) { lines_.emplace_back(line); });
  }
  void TearDown() override {
    set_sink({});
    set_threshold(saved_);
    set_rank(-1);
  }
  std::vector<std::string> lines_;
  Level saved_ = Level::warn;
};

TEST_F(LoggingTest, ParsesLevelsInAnyCase) {
  EXPECT_EQ(parse_level("WARN"), Level::warn);
  EXPECT_EQ(parse_level("info"), Level::info);
  EXPECT_EQ(parse_level("Trace"), Level::trace);
  EXPECT_EQ(parse_level("NONE"), Level::none);
  EXPECT_EQ(parse_level("verbose"), std::nullopt);
  EXPECT_EQ(parse_level(""), std::nullopt);
}

TEST_F(LoggingTest, ThresholdFiltersLines) {
  set_threshold(Level::warn);
  warn("w {}", 1);
  info("i {}", 2);
  trace("t {}", 3);
  ASSERT_EQ(lines_.size(), 1u);
  EXPECT_NE(lines_[0].find("WARN w 1\n"), std::string::npos) << lines_[0];

  set_threshold(Level::trace);
  info("i");
  trace("t");
  EXPECT_EQ(lines_.size(), 3u);

  set_threshold(Level::none);
  warn("dropped");
  EXPECT_EQ(lines_.size(), 3u);
}

TEST_F(LoggingTest, PrefixCarriesHostPidAndRankOnceKnown) {
  set_threshold(Level::info);
  info("before");
  set_rank(5);
  info("after");
  ASSERT_EQ(lines_.size(), 2u);
  const std::string pid = fmt::format(":{}", getpid());
  EXPECT_EQ(lines_[0].rfind("[chorus ", 0), 0u) << lines_[0];
  EXPECT_NE(lines_[0].find(pid + "] INFO before"), std::string::npos) << lines_[0];
  EXPECT_NE(lines_[1].find(pid + " rank 5] INFO after"), std::string::npos) << lines_[1];
}

TEST_F(LoggingTest, ConcurrentLinesStayWhole) {
  set_threshold(Level::info);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([t] {
      for (int i = 0; i < 200; ++i) info("thread {} line {} end", t, i);
    });
  for (auto& th : threads) th.join();
  ASSERT_EQ(lines_.size(), 800u);
  for (const auto& line : lines_) {
    EXPECT_EQ(line.find("thread"), line.rfind("thread")) << line;
    EXPECT_EQ(line.substr(line.size() - 4), "end\n") << line;
  }
}

}  // namespace
}  // namespace chorus::log

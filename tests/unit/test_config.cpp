// The table of CHORUS_* variables (src/common/config.cpp) and the one in
// docs/tuning.md list the same names, and the library reads no other.
#include "common/config.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace chorus::config {
namespace {

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::set<std::string> names_in(const std::string& text) {
  std::set<std::string> names;
  const std::regex name("CHORUS_[A-Z0-9_]+");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), name); it != std::sregex_iterator(); ++it)
    names.insert(it->str());
  return names;
}

TEST(Config, DocsTuningTableListsEveryVariableOfTheTable) {
  // The rows of docs/tuning.md's first table: lines starting "| `CHORUS_".
  std::istringstream doc(read(CHORUS_SOURCE_DIR "/docs/tuning.md"));
  std::string line, rows;
  while (std::getline(doc, line))
    if (line.rfind("| `CHORUS_", 0) == 0) rows += line.substr(0, line.find(" | ", 2)) + "\n";
  std::set<std::string> in_code;
  for (const VariableInfo& v : variables()) in_code.insert(std::string(v.name));
  EXPECT_EQ(names_in(rows), in_code);
}

TEST(Config, EveryVariableHasItsNameAndMeaning) {
  for (const VariableInfo& v : variables()) {
    EXPECT_EQ(name(v.variable), v.name);
    EXPECT_FALSE(v.meaning.empty()) << v.name;
  }
}

TEST(Config, GetReturnsTheValueAndNothingForEmpty) {
  ::setenv("CHORUS_SPIN_US", "7", 1);
  EXPECT_EQ(get(Variable::spin_us), "7");
  ::setenv("CHORUS_SPIN_US", "", 1);
  EXPECT_EQ(get(Variable::spin_us), std::nullopt);
  ::unsetenv("CHORUS_SPIN_US");
  EXPECT_EQ(raw(Variable::spin_us), nullptr);
}

}  // namespace
}  // namespace chorus::config

#include "common/logging.hpp"
#include "common/config.hpp"

#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <mutex>

namespace chorus::log {
namespace {

std::atomic<int> g_rank{-1};

std::mutex& sink_mutex() {
  static std::mutex m;
  return m;
}
Sink& sink() {
  static Sink s;
  return s;
}

const std::string& host_and_pid() {
  static const std::string text = [] {
    char host[256] = {};
    if (gethostname(host, sizeof host - 1) != 0) host[0] = '?';
    return fmt::format("{}:{}", host, getpid());
  }();
  return text;
}

void write_to_stderr(std::string_view line) {
  while (!line.empty()) {
    ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // nowhere left to report a failing stderr
    line.remove_prefix(static_cast<std::size_t>(n));
  }
}

void deliver(std::string_view line) {
  std::lock_guard lock(sink_mutex());
  if (sink())
    sink()(line);
  else
    write_to_stderr(line);
}

// Reads CHORUS_DEBUG once; a value it does not know is reported, not ignored.
std::atomic<int>& threshold_storage() {
  static std::atomic<int> level = [] {
    const char* env = config::raw(config::Variable::debug);
    if (env == nullptr || *env == '\0') return static_cast<int>(Level::warn);
    if (auto parsed = parse_level(env)) return static_cast<int>(*parsed);
    deliver(fmt::format("{}CHORUS_DEBUG='{}' is not one of NONE, WARN, INFO, TRACE; using WARN\n",
                        line_prefix(Level::warn), env));
    return static_cast<int>(Level::warn);
  }();
  return level;
}

}  // namespace

std::optional<Level> parse_level(std::string_view name) noexcept {
  for (Level level : {Level::none, Level::warn, Level::info, Level::trace}) {
    std::string_view canonical = to_string(level);
    if (canonical.size() != name.size()) continue;
    bool same = true;
    for (std::size_t i = 0; i < name.size() && same; ++i) {
      char c = name[i];
      if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
      same = c == canonical[i];
    }
    if (same) return level;
  }
  return std::nullopt;
}

std::string_view to_string(Level level) noexcept {
  switch (level) {
    case Level::none:
      return "NONE";
    case Level::warn:
      return "WARN";
    case Level::info:
      return "INFO";
    case Level::trace:
      return "TRACE";
  }
  return "?";
}

Level threshold() noexcept {
  return static_cast<Level>(threshold_storage().load(std::memory_order_relaxed));
}
void set_threshold(Level level) noexcept {
  threshold_storage().store(static_cast<int>(level), std::memory_order_relaxed);
}

void set_rank(int rank) noexcept { g_rank.store(rank, std::memory_order_relaxed); }

std::string line_prefix(Level level) {
  int rank = g_rank.load(std::memory_order_relaxed);
  if (rank < 0) return fmt::format("[chorus {}] {} ", host_and_pid(), to_string(level));
  return fmt::format("[chorus {} rank {}] {} ", host_and_pid(), rank, to_string(level));
}

void set_sink(Sink new_sink) {
  std::lock_guard lock(sink_mutex());
  sink() = std::move(new_sink);
}

void emit(Level level, std::string_view message) {
  std::string line = line_prefix(level);
  line.append(message);
  line.push_back('\n');
  deliver(line);
}

}  // namespace chorus::log

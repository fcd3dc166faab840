// The one logger of chorus.
//
// The level comes from CHORUS_DEBUG (NONE, WARN, INFO or TRACE, any case;
// WARN when unset) and is read once. Each line is written whole, with one
// write, prefixed with host and pid and, once the process knows it, its rank:
//   [chorus node7:4242 rank 3] INFO ring chosen for 4 MiB ...
// Logging below the threshold costs one relaxed atomic load: the message is
// not even formatted.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace chorus::log {

enum class Level : int { none = 0, warn = 1, info = 2, trace = 3 };

std::optional<Level> parse_level(std::string_view name) noexcept;
std::string_view to_string(Level level) noexcept;

Level threshold() noexcept;
void set_threshold(Level level) noexcept;
inline bool enabled(Level level) noexcept {
  return level != Level::none && static_cast<int>(level) <= static_cast<int>(threshold());
}

// Called once the process knows its rank; -1 forgets it.
void set_rank(int rank) noexcept;

// The text that starts every line at `level`, e.g. "[chorus node7:4242 rank 3] WARN ".
std::string line_prefix(Level level);

// Where finished lines go (one call per line, newline included). Tests capture
// lines with it; an empty function restores the default, standard error.
using Sink = std::function<void(std::string_view line)>;
void set_sink(Sink sink);

void emit(Level level, std::string_view message);

template <class... Args>
void write(Level level, fmt::format_string<Args...> format, Args&&... args) {
  if (enabled(level)) emit(level, fmt::format(format, std::forward<Args>(args)...));
}
template <class... Args>
void warn(fmt::format_string<Args...> format, Args&&... args) {
  write(Level::warn, format, std::forward<Args>(args)...);
}
template <class... Args>
void info(fmt::format_string<Args...> format, Args&&... args) {
  write(Level::info, format, std::forward<Args>(args)...);
}
template <class... Args>
void trace(fmt::format_string<Args...> format, Args&&... args) {
  write(Level::trace, format, std::forward<Args>(args)...);
}

}  // namespace chorus::log

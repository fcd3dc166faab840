// Every CHORUS_* environment variable, in one table: its name, default and
// meaning. The library reads its variables through get()/raw() and nowhere
// else (libchorus_pmpi, a separate library, reads its two CHORUS_MPI_*
// itself; the launcher variables CHORUS_RANK/SIZE/STORE are read with
// torchrun's, Open MPI's and Slurm's by bootstrap/launch.cpp), so this table
// is the whole list; docs/tuning.md's table documents the same names, and
// tests/unit/test_config.cpp keeps the two equal.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace chorus::config {

enum class Variable {
  algo,
  check,
  debug,
  job_id,
  mpi_min_bytes,
  mpi_pass,
  mpi_verbose,
  rank,
  secret,
  secret_file,
  shm,
  shm_bytes,
  simd,
  size,
  socket_addr,
  socket_buffer,
  socket_connect,
  socket_ifname,
  socket_unexpected_bytes,
  spin_us,
  store,
  store_max_bytes,
  store_max_clients,
  store_max_value,
  timeout,
  topology,
  transport,
  tuning_file,
  ucx_cma,
  ucx_connect,
};

struct VariableInfo {
  Variable variable;
  std::string_view name;          // "CHORUS_ALGO"
  std::string_view default_value;  // as the reader treats an unset variable
  std::string_view meaning;       // one line
};

std::span<const VariableInfo> variables() noexcept;
const VariableInfo& info(Variable variable) noexcept;
std::string_view name(Variable variable) noexcept;

// The variable's value, or nullopt when it is unset or empty.
std::optional<std::string> get(Variable variable);
// As getenv returns it: null when unset.
const char* raw(Variable variable);

// A byte count: digits with an optional K, M or G (powers of 1024), within
// [min, max]; `fallback` when the variable is unset. Anything else, or a
// count that does not fit, is an invalid_argument Error naming the variable.
std::size_t byte_count(Variable variable, std::size_t fallback, std::size_t min, std::size_t max);
// The same for text (`what` names it in the error).
std::size_t parse_byte_count(std::string_view text, std::string_view what, std::size_t min,
                             std::size_t max);

}  // namespace chorus::config

// allreduce_perf's output: the text table in nccl-tests' layout (so that
// parsers written for all_reduce_perf read it unchanged), and the same
// results as CSV and JSON.
//
// A row is nccl-tests' row (size count type redop root, then time algbw
// busbw #wrong for out-of-place and for in-place) followed by Chorus's
// columns: the algorithm that ran and, with --mpi, MPI's time and busbw and
// the speedup (MPI time / Chorus out-of-place time), then the same in place
// (MPI_IN_PLACE; speedup: MPI in place / Chorus in place), N/A where the
// collective has no in-place form here.
#pragma once

#include <chorus/types.hpp>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace chorus::perf {

struct Timing {
  double time_us = 0;
  double algbw = 0;  // GB/s
  double busbw = 0;
  std::int64_t wrong = -1;  // -1: not checked (N/A)
  // The fastest and the slowest series' time (--rounds; with one round
  // both are time_us): the JSON carries them.
  double min_us = 0, max_us = 0;
};

struct Row {
  std::size_t bytes = 0, count = 0;
  DataType type = DataType::float32;
  ReduceOp op = ReduceOp::sum;
  std::string algorithm;  // the variant that ran
  bool automatic = false;  // chosen by the selector (the table shows "auto:<variant>")
  bool has_op = true;      // false: the redop column says "none" (nccl-tests)
  int root = -1;           // -1: no root
  Timing out_of_place;
  std::optional<Timing> in_place;  // none: N/A (the collective has no in-place form)
  std::optional<Timing> mpi;       // MPI's same collective, out of place
  std::optional<Timing> mpi_in_place;  // and with MPI_IN_PLACE, as in_place lays it out
};

// algbw and busbw (algbw x `busbw_factor`) for `bytes` in `seconds`.
Timing bandwidth(std::size_t bytes, double seconds, double busbw_factor);

// The median of `values` (the mean of the middle two when even; 0 when
// empty): a cell's time over --rounds series.
double median(std::vector<double> values);

// nccl-tests' time column: 7 wide, fewer decimals as it grows.
std::string format_time(double us);

std::string header(bool with_mpi);
std::string format_row(const Row& row);
// The with---mpi columns of one placement: MPI's time, busbw and speedup
// over `chorus`; N/A where `mpi` is none.
std::string mpi_block(const std::optional<Timing>& mpi, const Timing& chorus);
std::string footer(int failed_sizes, double average_busbw);

std::string csv_header(bool with_mpi);
std::string csv_row(const Row& row, int ranks, const std::string& transport);
std::string json_document(const std::vector<Row>& rows, int ranks, const std::string& transport,
                          const std::string& tool);

}  // namespace chorus::perf

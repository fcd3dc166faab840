// allreduce_perf's command line: nccl-tests' all_reduce_perf flags with
// their meanings and defaults, plus Chorus's own (letters nccl-tests does
// not use). parse() never exits: it returns the options or throws
// UsageError, which main() prints with the usage and exit status 2.
#pragma once

#include "coll/call_check.hpp"

#include <chorus/algorithm.hpp>
#include <chorus/types.hpp>

#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace chorus::perf {

// The collective a run measures; the program's name chooses it
// (allreduce_perf, allgather_perf, broadcast_perf, reduce_perf,
// reduce_scatter_perf, alltoall_perf: one binary, several names).
enum class PerfCollective { allreduce, allgather, broadcast, reduce, reduce_scatter, alltoall };
// "all_reduce" -> nccl-tests' spelling is not used: Chorus's names, as above.
std::string_view to_string(PerfCollective c);
// From a program path ("/usr/bin/allgather_perf"); nullopt for an unknown name.
std::optional<PerfCollective> collective_from_program(std::string_view path);
// Whether it combines values (and so has an op), has a root, and has an
// in-place form measured in the in-place columns.
bool reduces(PerfCollective c);
bool rooted(PerfCollective c);
bool has_in_place(PerfCollective c);
// nccl-tests' bus bandwidth factor: busbw = algbw * factor.
double busbw_factor(PerfCollective c, int ranks);
// Whether size S covers every rank's block (count per rank x p): the
// gathering and scattering collectives, as nccl-tests sizes them.
bool size_is_all_blocks(PerfCollective c);

struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct PerfOptions {
  std::size_t min_bytes = 32 << 20;  // -b
  std::size_t max_bytes = 32 << 20;  // -e
  std::size_t step_bytes = 1 << 20;  // -i
  std::size_t step_factor = 1;       // -f (> 1: multiply instead of adding)
  int iters = 20;                    // -n
  int warmup_iters = 5;              // -w
  int agg_iters = 1;                 // -m
  int run_cycles = 1;                // -N (0: forever)
  // --rounds: each size's cells timed this many times in turn (round
  // robin), each reporting its median series (Chorus's own)
  int rounds = 1;
  int check = 1;                     // -c: check iterations (0: none, #wrong prints N/A)
  std::vector<ReduceOp> ops = {ReduceOp::sum};            // -o
  std::vector<DataType> types = {DataType::float32};      // -d
  int average = 1;                   // -a: 0 rank 0, 1 mean, 2 min, 3 max
  bool blocking = false;             // -z: a barrier after every call
  bool rewrite = false;              // --rewrite: write the input before every call, untimed
  bool async = false;                // --async: each call is the async form and its wait
  int timeout_seconds = 0;           // -T (0: CHORUS_TIMEOUT)
  std::size_t unalign = 0;           // -u: buffers start this many elements past a page
  std::string json_file;             // -J
  std::string csv_file;              // --csv
  // Chorus's own:
  // -A: registry names of the collective's algorithms, "auto" for the
  // automatic choice ("all": every one, then auto).
  std::vector<std::string> algorithms = {"auto"};
  std::string transport;             // -X: auto, ucx, tcp ("" = CHORUS_TRANSPORT)
  int np = 0;                        // --np: start this many local ranks
  bool mpi = false;                  // --mpi: also time MPI_Allreduce
  std::string tune_file;             // --tune: write the measured best algorithms
  bool inject_error = false;         // --inject-error: corrupt one checked element (tests)
  bool help = false;                 // -h
  int root = 0;                      // -r: broadcast's and reduce's root
  PerfCollective collective = PerfCollective::allreduce;  // from the program's name

  // The sizes of the sweep, in order.
  std::vector<std::size_t> sizes() const;
};

// `collective`: the program's (its -A names are checked against it).
PerfOptions parse(const std::vector<std::string>& args,
                  PerfCollective collective = PerfCollective::allreduce);
// The registry's collective that `c` measures.
coll::CollectiveKind kind_of(PerfCollective c);
// The usage text of `program` (its collective's name in it).
std::string usage(const std::string& program);
// "64M" -> 67108864; K, M, G are binary; throws UsageError naming `what`.
std::size_t parse_size(const std::string& text, const std::string& what);
// nccl-tests' names: int8 uint8 int32 uint32 int64 uint64 half float double bfloat16.
std::string_view nccl_type_name(DataType type);

}  // namespace chorus::perf

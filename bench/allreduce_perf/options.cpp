#include "options.hpp"

#include "coll/registry.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <map>

namespace chorus::perf {

namespace {

constexpr std::pair<std::string_view, DataType> kTypeNames[] = {
    {"int8", DataType::int8},       {"uint8", DataType::uint8},     {"int32", DataType::int32},
    {"uint32", DataType::uint32},   {"int64", DataType::int64},     {"uint64", DataType::uint64},
    {"half", DataType::float16},    {"float", DataType::float32},   {"double", DataType::float64},
    {"bfloat16", DataType::bfloat16}};

long parse_int(const std::string& text, const std::string& what, long low, long high) {
  errno = 0;
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 0);
  if (text.empty() || *end != '\0' || errno != 0 || v < low || v > high)
    throw UsageError(fmt::format("{}: '{}' is not an integer in {}..{}", what, text, low, high));
  return v;
}

std::vector<DataType> parse_types(const std::string& text) {
  if (text == "all") {
    std::vector<DataType> all;
    for (const auto& [name, type] : kTypeNames) all.push_back(type);
    return all;
  }
  for (const auto& [name, type] : kTypeNames)
    if (name == text || to_string(type) == text) return {type};
  throw UsageError(fmt::format(
      "-d/--datatype: '{}' is not one of int8, uint8, int32, uint32, int64, uint64, half, float, "
      "double, bfloat16, all",
      text));
}

std::vector<ReduceOp> parse_ops(const std::string& text) {
  if (text == "all")
    return {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg};
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::prod, ReduceOp::min, ReduceOp::max, ReduceOp::avg,
                      ReduceOp::band, ReduceOp::bor, ReduceOp::bxor})
    if (to_string(op) == text) return {op};
  throw UsageError(fmt::format(
      "-o/--op: '{}' is not one of sum, prod, min, max, avg, band, bor, bxor, all", text));
}

// "all": every family of the collective's rows (AllReduce's one-shot and
// two-shot as "direct", chosen between by cost), then auto.
std::vector<std::string> parse_algorithms(const std::string& text, coll::CollectiveKind kind) {
  if (text == "all") {
    std::vector<std::string> names;
    for (std::string_view family : coll::family_names(kind)) names.emplace_back(family);
    names.emplace_back("auto");
    return names;
  }
  if (text == "auto" || text == "automatic") return {"auto"};
  if (coll::find_row(kind, text) != nullptr) return {text};
  throw UsageError(fmt::format("-A/--algo: '{}' is not one of {}, all (the algorithms of {})", text,
                               coll::names_of(kind), coll::to_string(kind)));
}

constexpr std::pair<std::string_view, PerfCollective> kCollectives[] = {
    {"allreduce", PerfCollective::allreduce},   {"allgather", PerfCollective::allgather},
    {"broadcast", PerfCollective::broadcast},   {"reduce", PerfCollective::reduce},
    {"reduce_scatter", PerfCollective::reduce_scatter}, {"alltoall", PerfCollective::alltoall}};

}  // namespace

std::string_view to_string(PerfCollective c) {
  for (const auto& [name, collective] : kCollectives)
    if (collective == c) return name;
  return "?";
}

std::optional<PerfCollective> collective_from_program(std::string_view path) {
  std::string_view name = path.substr(path.find_last_of('/') == std::string_view::npos
                                          ? 0
                                          : path.find_last_of('/') + 1);
  for (const auto& [collective_name, collective] : kCollectives)
    if (name == std::string(collective_name) + "_perf") return collective;
  return std::nullopt;
}

bool reduces(PerfCollective c) {
  return c == PerfCollective::allreduce || c == PerfCollective::reduce ||
         c == PerfCollective::reduce_scatter;
}
bool rooted(PerfCollective c) { return c == PerfCollective::broadcast || c == PerfCollective::reduce; }
bool has_in_place(PerfCollective c) {
  // Chorus's broadcast has one buffer; its alltoall refuses overlapping ones.
  return c != PerfCollective::broadcast && c != PerfCollective::alltoall;
}
double busbw_factor(PerfCollective c, int ranks) {
  if (ranks <= 0) return 0;
  switch (c) {
    case PerfCollective::allreduce: return 2.0 * (ranks - 1) / ranks;
    case PerfCollective::broadcast:
    case PerfCollective::reduce: return 1.0;
    default: return static_cast<double>(ranks - 1) / ranks;
  }
}
bool size_is_all_blocks(PerfCollective c) {
  return c == PerfCollective::allgather || c == PerfCollective::reduce_scatter ||
         c == PerfCollective::alltoall;
}

std::string_view nccl_type_name(DataType type) {
  for (const auto& [name, t] : kTypeNames)
    if (t == type) return name;
  return "?";
}

std::size_t parse_size(const std::string& text, const std::string& what) {
  std::size_t unit = 1;
  std::string digits = text;
  if (!digits.empty()) {
    switch (digits.back()) {
      case 'K': case 'k': unit = std::size_t{1} << 10; break;
      case 'M': case 'm': unit = std::size_t{1} << 20; break;
      case 'G': case 'g': unit = std::size_t{1} << 30; break;
      default: break;
    }
    if (unit != 1) digits.pop_back();
  }
  errno = 0;
  char* end = nullptr;
  const unsigned long long v = std::strtoull(digits.c_str(), &end, 10);
  if (digits.empty() || *end != '\0' || errno != 0 || digits.front() == '-' ||
      v > (std::size_t{1} << 40) / unit)
    throw UsageError(fmt::format("{}: '{}' is not a size (a count of bytes, with K, M or G)", what, text));
  return static_cast<std::size_t>(v) * unit;
}

std::vector<std::size_t> PerfOptions::sizes() const {
  std::vector<std::size_t> out;
  for (std::size_t s = min_bytes; s <= max_bytes;) {
    out.push_back(s);
    const std::size_t next = step_factor > 1 ? s * step_factor : s + step_bytes;
    if (next <= s) break;  // a zero step or size 0 times a factor: one row
    s = next;
  }
  return out;
}

coll::CollectiveKind kind_of(PerfCollective c) {
  switch (c) {
    case PerfCollective::allreduce: return coll::CollectiveKind::allreduce;
    case PerfCollective::allgather: return coll::CollectiveKind::allgather;
    case PerfCollective::broadcast: return coll::CollectiveKind::broadcast;
    case PerfCollective::reduce: return coll::CollectiveKind::reduce;
    case PerfCollective::reduce_scatter: return coll::CollectiveKind::reduce_scatter;
    case PerfCollective::alltoall: return coll::CollectiveKind::alltoall;
  }
  return coll::CollectiveKind::allreduce;
}

PerfOptions parse(const std::vector<std::string>& args, PerfCollective collective) {
  PerfOptions o;
  o.collective = collective;
  // Long names and the short letter each stands for.
  static const std::map<std::string, char> kLong = {
      {"minbytes", 'b'}, {"maxbytes", 'e'},     {"stepbytes", 'i'}, {"stepfactor", 'f'},
      {"iters", 'n'},    {"warmup_iters", 'w'}, {"agg_iters", 'm'}, {"run_cycles", 'N'},
      {"check", 'c'},    {"op", 'o'},           {"datatype", 'd'},  {"average", 'a'},
      {"blocking", 'z'}, {"timeout", 'T'},      {"unalign", 'u'},   {"output_file", 'J'},
      {"algo", 'A'},     {"transport", 'X'},    {"help", 'h'},      {"csv", 'C'},
      {"np", 'P'},       {"mpi", 'M'},          {"tune", 'U'},      {"inject-error", 'E'},
      {"root", 'r'},     {"rewrite", 'W'},      {"async", 'Y'},     {"rounds", 'R'}};
  const std::string flags_without_value = "hMEWY";
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    char flag = 0;
    std::string name = arg, value;
    bool has_value = false;
    if (arg.rfind("--", 0) == 0) {
      name = arg.substr(2);
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name.resize(eq);
        has_value = true;
      }
      auto it = kLong.find(name);
      if (it == kLong.end()) throw UsageError(fmt::format("unknown option '{}'", arg));
      flag = it->second;
    } else if (arg.size() >= 2 && arg[0] == '-') {
      flag = arg[1];
      if (arg.size() > 2) {  // -b8
        value = arg.substr(2);
        has_value = true;
      }
      static const std::string kShort = "beifnwmNcodazTuJAXhr";
      if (kShort.find(flag) == std::string::npos)
        throw UsageError(fmt::format("unknown option '{}'", arg));
    } else {
      throw UsageError(fmt::format("unexpected argument '{}'", arg));
    }
    const bool needs_value = flags_without_value.find(flag) == std::string::npos;
    if (needs_value && !has_value) {
      if (i + 1 >= args.size()) throw UsageError(fmt::format("option '{}' needs a value", arg));
      value = args[++i];
    } else if (!needs_value && has_value) {
      throw UsageError(fmt::format("option '{}' takes no value", arg));
    }
    const std::string what = arg.rfind("--", 0) == 0 ? "--" + name : std::string("-") + flag;
    switch (flag) {
      case 'b': o.min_bytes = parse_size(value, what); break;
      case 'e': o.max_bytes = parse_size(value, what); break;
      case 'i': o.step_bytes = parse_size(value, what); break;
      case 'f': o.step_factor = static_cast<std::size_t>(parse_int(value, what, 1, 1 << 20)); break;
      case 'n': o.iters = static_cast<int>(parse_int(value, what, 1, 1 << 30)); break;
      case 'w': o.warmup_iters = static_cast<int>(parse_int(value, what, 0, 1 << 30)); break;
      case 'm': o.agg_iters = static_cast<int>(parse_int(value, what, 1, 1 << 20)); break;
      case 'R':
        o.rounds = static_cast<int>(parse_int(value, what, 1, 1 << 10));
        break;
      case 'N': o.run_cycles = static_cast<int>(parse_int(value, what, 0, 1 << 30)); break;
      case 'c': o.check = static_cast<int>(parse_int(value, what, 0, 1 << 20)); break;
      case 'o': o.ops = parse_ops(value); break;
      case 'd': o.types = parse_types(value); break;
      case 'a': o.average = static_cast<int>(parse_int(value, what, 0, 3)); break;
      case 'z': o.blocking = parse_int(value, what, 0, 1) == 1; break;
      case 'T': o.timeout_seconds = static_cast<int>(parse_int(value, what, 0, 1 << 24)); break;
      case 'u': o.unalign = static_cast<std::size_t>(parse_int(value, what, 0, 4096)); break;
      case 'J': o.json_file = value; break;
      case 'C': o.csv_file = value; break;
      case 'A': o.algorithms = parse_algorithms(value, kind_of(collective)); break;
      case 'X':
        if (value != "auto" && value != "ucx" && value != "tcp")
          throw UsageError(fmt::format("{}: '{}' is not one of auto, ucx, tcp", what, value));
        o.transport = value;
        break;
      case 'P': o.np = static_cast<int>(parse_int(value, what, 1, 4096)); break;
      case 'M': o.mpi = true; break;
      case 'U': o.tune_file = value; break;
      case 'E': o.inject_error = true; break;
      case 'W': o.rewrite = true; break;
      case 'Y': o.async = true; break;
      case 'h': o.help = true; break;
      case 'r': o.root = static_cast<int>(parse_int(value, what, 0, 1 << 20)); break;
      default: throw UsageError(fmt::format("unknown option '{}'", arg));
    }
  }
  if (o.min_bytes > o.max_bytes)
    throw UsageError(fmt::format("invalid sizes for 'minbytes' and 'maxbytes': {} > {}",
                                 o.min_bytes, o.max_bytes));
  if (o.step_factor == 1 && o.step_bytes == 0 && o.min_bytes != o.max_bytes)
    throw UsageError("-i/--stepbytes 0 with -f 1 would never reach maxbytes");
  if (collective != PerfCollective::allreduce && !o.tune_file.empty())
    throw UsageError("--tune writes AllReduce's tuning file: allreduce_perf only");
  return o;
}

std::string usage(const std::string& program) {
  return fmt::format(R"(USAGE: {} [options]
  Measures a Chorus collective like nccl-tests' *_perf tools: one row per size,
  out-of-place then in-place, with time, algbw, busbw and #wrong (checked).
  The program's name picks the collective: allreduce_perf, allgather_perf,
  broadcast_perf, reduce_perf, reduce_scatter_perf, alltoall_perf.

  -b,--minbytes <size>      smallest size (K/M/G binary suffixes). Default 32M
  -e,--maxbytes <size>      largest size. Default 32M
  -i,--stepbytes <size>     add this between sizes (when -f is 1). Default 1M
  -f,--stepfactor <n>       multiply by this between sizes. Default 1 (use -i)
  -n,--iters <n>            timed iterations per size. Default 20
  -w,--warmup_iters <n>     untimed iterations before every timed series (nccl-tests: at the
                            largest and smallest size only). Default 5
  -m,--agg_iters <n>        calls per timed iteration. Default 1
  -N,--run_cycles <n>       repeat the whole sweep n times (0: forever). Default 1
  -c,--check <n>            check the result bit-exactly n times per size (0: #wrong is N/A). Default 1
  -o,--op <op>              sum, prod, min, max, avg, band, bor, bxor, or all. Default sum
  -d,--datatype <type>      int8, uint8, int32, uint32, int64, uint64, half, float, double,
                            bfloat16, or all. Default float
  -a,--average <0|1|2|3>    time reported: 0 rank 0's, 1 mean, 2 min, 3 max over ranks. Default 1
  -z,--blocking <0|1>       1: a barrier after every call, inside the timing. Default 0
  -T,--timeout <seconds>    deadline of every wait (0: CHORUS_TIMEOUT, 300 s). Default 0
  -u,--unalign <n>          start buffers n elements past a page boundary. Default 0
  -J,--output_file <file>   also write the results as JSON
  -r,--root <rank>          root of broadcast and reduce. Default 0
  -h,--help                 this text
 Chorus's own:
  -A,--algo <name>          an algorithm of the collective (allreduce: ring, tree, direct,
                            halving_doubling, recursive_doubling, ...; docs/tuning.md lists
                            every collective's), auto, or all (each in turn, then auto).
                            Default auto
  -X,--transport <name>     auto, ucx, tcp. Default: CHORUS_TRANSPORT, else auto
  --np <n>                  start n local ranks on this machine (a loopback store);
                            without it, rank and size come from the launcher
                            (mpirun, srun, torchrun, CHORUS_RANK/SIZE/STORE)
  --mpi                     also time the matching MPI collective (MPI_Allreduce, _Allgather,
                            _Bcast, _Reduce, _Reduce_scatter_block, _Alltoall) on the same
                            buffers, per size (launch with mpirun); adds mpi_time, mpi_busbw,
                            speedup
  --rewrite                 write each rank's input before every call, as a training step
                            writes its gradients; only the calls are timed (without it, as
                            nccl-tests, an out-of-place call reads the input unchanged since
                            the last call, which peers may still hold in their caches)
  --async                   each timed call is the collective's async form and its wait
                            (what a framework's async call costs: the hand-off to Chorus's
                            worker thread, or the wait running the call itself)
  --rounds <n>              time each size's cells (every algorithm's out-of-place and in-place
                            series, and MPI's with --mpi) n times, all cells in turn, and
                            report each cell's median series: a machine whose speed drifts
                            then slows every cell alike, not whichever ran at the time.
                            Default 1
  --csv <file>              also write the results as CSV
  --tune <file>             (allreduce) measure every algorithm and write the fastest per size
                            as a tuning file (CHORUS_TUNING_FILE reads it)

  size: allreduce, broadcast, reduce: the buffer; allgather, reduce_scatter,
  alltoall: all p blocks (count per rank = size / type size / p), as nccl-tests.
  algbw = size / 1e9 / seconds; busbw = algbw * 2(p-1)/p for allreduce, (p-1)/p
  for allgather, reduce_scatter and alltoall, 1 for broadcast and reduce; in-place
  columns are N/A for broadcast (one buffer) and alltoall. Exit status: 0 when
  every checked element was right, 1 when any was wrong or a rank failed, 2 for
  a bad command line.
)",
                     program);
}

}  // namespace chorus::perf

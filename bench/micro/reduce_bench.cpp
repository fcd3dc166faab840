// Throughput of the reduction kernels beside memcpy of the same size, both
// measured in the same run, in cache (256 KiB) and out of cache (64 MiB).
//
// bytes/s counts the destination buffer once per call for every benchmark:
// memcpy(dst, src, n) and reduce(dst, src, n / size) both "process n bytes",
// so the ratio says how much slower combining a chunk is than copying it,
// which is what matters inside an AllReduce. (The in-place kernel moves 3n
// bytes through memory, memcpy 2n.)
//
// Defaults: the active ISA, 5 repetitions interleaved in random order, and a
// table of medians with ratios at the end. Any Google Benchmark flag still
// works; --isa=all|generic|avx2|avx512 picks the kernel sets.
#include "reduce/reduce.hpp"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace {

using chorus::DataType;
using chorus::ReduceOp;
using chorus::reduce::Isa;

constexpr std::size_t kInCache = 256 << 10;
constexpr std::size_t kOutOfCache = 64 << 20;

// Three buffers of the largest size, allocated and touched once so that no
// benchmark pays for page faults.
struct Buffers {
  std::unique_ptr<unsigned char[]> dst, a, b;
  Buffers()
      : dst(new unsigned char[kOutOfCache]),
        a(new unsigned char[kOutOfCache]),
        b(new unsigned char[kOutOfCache]) {
    // Small integers as bits: finite, non-special values in every type.
    for (std::size_t i = 0; i < kOutOfCache; ++i) {
      a[i] = static_cast<unsigned char>(i % 7 + 1);
      b[i] = static_cast<unsigned char>(i % 5 + 1);
      dst[i] = 0;
    }
  }
};
Buffers& buffers() {
  static Buffers b;
  return b;
}

void bench_memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  auto& buf = buffers();
  for (auto _ : state) {
    std::memcpy(buf.dst.get(), buf.a.get(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

void bench_reduce(benchmark::State& state, Isa isa, DataType type, ReduceOp op, bool in_place) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  const std::size_t count = bytes / chorus::size_of(type);
  auto fn = chorus::reduce::kernels(isa).reduce[static_cast<int>(type)][static_cast<int>(op)];
  auto& buf = buffers();
  // The in-place form accumulates into dst run after run, so its values drift
  // (floats may reach infinity); vector instructions take no slow path for
  // infinities or NaNs, so the speed does not depend on it.
  std::memcpy(buf.dst.get(), buf.a.get(), bytes);
  for (auto _ : state) {
    if (in_place)
      fn(buf.dst.get(), buf.dst.get(), buf.b.get(), count);
    else
      fn(buf.dst.get(), buf.a.get(), buf.b.get(), count);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

std::string size_label(std::size_t bytes) {
  return bytes >= (1 << 20) ? std::to_string(bytes >> 20) + " MiB"
                            : std::to_string(bytes >> 10) + " KiB";
}

// Collects the median bytes/s of every benchmark while the console reporter
// prints as usual.
class MedianCollector : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& run : runs) {
      const bool median = run.run_type == Run::RT_Aggregate && run.aggregate_name == "median";
      const bool single = run.run_type == Run::RT_Iteration && run.repetitions <= 1;
      if (!median && !single) continue;
      auto it = run.counters.find("bytes_per_second");
      if (it != run.counters.end()) rates[run.run_name.str()] = it->second.value;
    }
  }
  std::map<std::string, double> rates;
};

struct Entry {
  std::string name;  // benchmark name without the size
  std::string label;
  double target_out_of_cache;  // 0: none
};

void print_ratio_table(const std::vector<Entry>& entries, const MedianCollector& collected) {
  std::printf("\n# Kernel bytes/s beside memcpy of the same size, same run (medians)\n");
  std::printf("%-34s %8s %10s %12s %7s  %s\n", "kernel", "size", "GB/s", "memcpy GB/s", "ratio",
              "target");
  for (const Entry& e : entries) {
    for (std::size_t size : {kInCache, kOutOfCache}) {
      auto kernel = collected.rates.find(e.name + "/" + std::to_string(size));
      auto copy = collected.rates.find("memcpy/" + std::to_string(size));
      if (kernel == collected.rates.end() || copy == collected.rates.end()) continue;
      const double ratio = kernel->second / copy->second;
      std::string target;
      if (size == kOutOfCache && e.target_out_of_cache > 0) {
        char text[64];
        std::snprintf(text, sizeof text, ">= %.1fx %s", e.target_out_of_cache,
                      ratio >= e.target_out_of_cache ? "met" : "MISSED");
        target = text;
      }
      std::printf("%-34s %8s %10.2f %12.2f %6.2fx  %s\n", e.label.c_str(), size_label(size).c_str(),
                  kernel->second / 1e9, copy->second / 1e9, ratio, target.c_str());
    }
  }
}

bool has_flag(int argc, char** argv, const char* prefix) {
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], prefix, std::strlen(prefix)) == 0) return true;
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  // Our own flag first, then Google Benchmark's defaults for a fair A/B run.
  std::string isa_choice = "active";
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strncmp(argv[i], "--isa=", 6) == 0)
      isa_choice = argv[i] + 6;
    else
      args.push_back(argv[i]);
  }
  std::string reps = "--benchmark_repetitions=5",
              interleave = "--benchmark_enable_random_interleaving=true",
              min_time = "--benchmark_min_time=0.1",
              aggregates = "--benchmark_report_aggregates_only=true";
  int n = static_cast<int>(args.size());
  if (!has_flag(n, args.data(), "--benchmark_repetitions")) args.push_back(reps.data());
  if (!has_flag(n, args.data(), "--benchmark_enable_random_interleaving"))
    args.push_back(interleave.data());
  if (!has_flag(n, args.data(), "--benchmark_min_time")) args.push_back(min_time.data());
  if (!has_flag(n, args.data(), "--benchmark_report_aggregates_only"))
    args.push_back(aggregates.data());
  int new_argc = static_cast<int>(args.size());
  args.push_back(nullptr);
  benchmark::Initialize(&new_argc, args.data());
  if (benchmark::ReportUnrecognizedArguments(new_argc, args.data())) return 2;

  std::vector<Isa> isas;
  try {
    if (isa_choice == "active") {
      isas = {chorus::reduce::active_isa()};
    } else if (isa_choice == "all") {
      isas = chorus::reduce::runnable_isas();
    } else {
      for (Isa isa : {Isa::generic, Isa::avx2, Isa::avx512})
        if (chorus::reduce::to_string(isa) == isa_choice) isas = {isa};
      if (isas.empty()) {
        std::fprintf(stderr, "--isa=%s: expected all, generic, avx2 or avx512\n",
                     isa_choice.c_str());
        return 2;
      }
      chorus::reduce::kernels(isas[0]);  // throws if this CPU cannot run it
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }

  benchmark::RegisterBenchmark("memcpy", bench_memcpy)->Arg(kInCache)->Arg(kOutOfCache);
  std::vector<Entry> entries;
  for (Isa isa : isas) {
    const std::string isa_name(chorus::reduce::to_string(isa));
    for (int t = 0; t < chorus::kDataTypeCount; ++t) {
      for (int o = 0; o < chorus::kReduceOpCount; ++o) {
        const auto type = static_cast<DataType>(t);
        const auto op = static_cast<ReduceOp>(o);
        if (!chorus::is_supported(type, op) || op == ReduceOp::avg) continue;  // avg == sum
        const std::string type_name(chorus::to_string(type)), op_name(chorus::to_string(op));
        const std::string name = "reduce/" + isa_name + "/" + type_name + "/" + op_name;
        benchmark::RegisterBenchmark(name.c_str(), bench_reduce, isa, type, op, true)
            ->Arg(kInCache)
            ->Arg(kOutOfCache);
        double target = 0;
        if (op == ReduceOp::sum && (type == DataType::float32 || type == DataType::int32))
          target = 0.8;
        if (op == ReduceOp::sum && (type == DataType::float16 || type == DataType::bfloat16))
          target = 0.5;
        entries.push_back(
            {name, isa_name + " " + type_name + " " + op_name + " (in place)", target});
      }
    }
    // The three-operand form, as the first step of a reduce-scatter uses it.
    const std::string name = "reduce3/" + isa_name + "/float32/sum";
    benchmark::RegisterBenchmark(name.c_str(), bench_reduce, isa, DataType::float32, ReduceOp::sum,
                                 false)
        ->Arg(kInCache)
        ->Arg(kOutOfCache);
    entries.push_back({name, isa_name + " float32 sum (dst = a + b)", 0});
  }

  MedianCollector collector;
  benchmark::RunSpecifiedBenchmarks(&collector);
  print_ratio_table(entries, collector);
  benchmark::Shutdown();
  return 0;
}

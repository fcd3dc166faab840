#include "report.hpp"

#include "options.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace chorus::perf {

Timing bandwidth(std::size_t bytes, double seconds, double busbw_factor) {
  Timing t;
  t.time_us = seconds * 1e6;
  t.algbw = seconds > 0 ? static_cast<double>(bytes) / 1e9 / seconds : 0;
  t.busbw = t.algbw * busbw_factor;
  return t;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t half = values.size() / 2;
  return values.size() % 2 ? values[half] : (values[half - 1] + values[half]) / 2;
}

std::string format_time(double us) {
  if (us >= 10000.0) return fmt::format("{:7.0f}", us);
  if (us >= 100.0) return fmt::format("{:7.1f}", us);
  return fmt::format("{:7.2f}", us);
}

namespace {
std::string algo_column(const Row& row) { return (row.automatic ? "auto:" : "") + row.algorithm; }
std::string wrong_text(std::int64_t wrong) {
  return wrong < 0 ? fmt::format("{:>5}", "N/A") : fmt::format("{:5}", wrong);
}
std::string block(const Timing& t) {
  return fmt::format("  {}  {:6.2f}  {:6.2f}  {}", format_time(t.time_us), t.algbw, t.busbw,
                     wrong_text(t.wrong));
}
std::string block(const std::optional<Timing>& t) {
  if (t) return block(*t);
  return fmt::format("  {:>7}  {:>6}  {:>6}  {:>5}", "N/A", "N/A", "N/A", "N/A");
}
std::string op_text(const Row& row) { return row.has_op ? std::string(to_string(row.op)) : "none"; }
// MPI's time at `mpi` beside Chorus's `chorus` in the same placement: MPI's
// time, its busbw, and the speedup (MPI's time / Chorus's).
double speedup(const Timing& mpi, const Timing& chorus) {
  return chorus.time_us > 0 ? mpi.time_us / chorus.time_us : 0;
}
}  // namespace

std::string mpi_block(const std::optional<Timing>& mpi, const Timing& chorus) {
  if (!mpi) return fmt::format("  {:>8}  {:>9}  {:>7}", "N/A", "N/A", "N/A");
  return fmt::format("  {:>8}  {:9.2f}  {:7.2f}", format_time(mpi->time_us), mpi->busbw,
                     speedup(*mpi, chorus));
}

std::string header(bool with_mpi) {
  std::string h;
  h += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place          \n",
                   "", "", "", "", "");
  h += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6} {:>6}  {:>7}  {:>6}  {:>6} {:>6}  {:<24}",
                   "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                   "time", "algbw", "busbw", "#wrong", "algo");
  if (with_mpi)
    h += fmt::format("  {:>8}  {:>9}  {:>7}  {:>8}  {:>9}  {:>7}", "mpi_time", "mpi_busbw",
                     "speedup", "mpi_ip", "ip_busbw", "ip_speed");
  h += "\n";
  h += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>5}  {:>7}  {:>6}  {:>6}  {:>5}  {:<24}",
                   "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                   "(GB/s)", "", "");
  if (with_mpi)
    h += fmt::format("  {:>8}  {:>9}  {:>7}  {:>8}  {:>9}  {:>7}", "(us)", "(GB/s)", "", "(us)",
                     "(GB/s)", "up");
  return h + "\n";
}

std::string format_row(const Row& row) {
  std::string line = fmt::format("{:12}  {:12}  {:>8}  {:>6}  {:6}", row.bytes, row.count,
                                 nccl_type_name(row.type), op_text(row), row.root);
  line += block(row.out_of_place) + block(row.in_place);
  line += fmt::format("  {:<24}", algo_column(row));
  if (row.mpi) {
    line += mpi_block(row.mpi, row.out_of_place);
    line += row.in_place ? mpi_block(row.mpi_in_place, *row.in_place) : mpi_block(std::nullopt, {});
  }
  return line + "\n";
}

std::string footer(int failed_sizes, double average_busbw) {
  return fmt::format("# Out of bounds values : {} {}\n# Avg bus bandwidth    : {:g} \n#\n",
                     failed_sizes, failed_sizes ? "FAILED" : "OK", average_busbw);
}

std::string csv_header(bool with_mpi) {
  std::string h =
      "size,count,type,redop,root,algo,ranks,transport,"
      "oop_time_us,oop_algbw,oop_busbw,oop_wrong,ip_time_us,ip_algbw,ip_busbw,ip_wrong";
  if (with_mpi)
    h += ",mpi_time_us,mpi_algbw,mpi_busbw,speedup,mpi_ip_time_us,mpi_ip_algbw,mpi_ip_busbw,ip_"
         "speedup";
  return h + "\n";
}

std::string csv_row(const Row& row, int ranks, const std::string& transport) {
  auto t = [](const std::optional<Timing>& x) {
    if (!x) return std::string("NA,NA,NA,NA");
    return fmt::format("{:.3f},{:.4f},{:.4f},{}", x->time_us, x->algbw, x->busbw, x->wrong);
  };
  std::string line = fmt::format("{},{},{},{},{},{},{},{},{},{}", row.bytes, row.count,
                                 nccl_type_name(row.type), op_text(row), row.root, algo_column(row),
                                 ranks, transport, t(row.out_of_place), t(row.in_place));
  auto mpi = [](const std::optional<Timing>& x, const std::optional<Timing>& chorus) {
    if (!x || !chorus) return std::string(",NA,NA,NA,NA");
    return fmt::format(",{:.3f},{:.4f},{:.4f},{:.4f}", x->time_us, x->algbw, x->busbw,
                       speedup(*x, *chorus));
  };
  if (row.mpi) line += mpi(row.mpi, row.out_of_place) + mpi(row.mpi_in_place, row.in_place);
  return line + "\n";
}

std::string json_document(const std::vector<Row>& rows, int ranks, const std::string& transport,
                          const std::string& tool) {
  auto t = [](const std::optional<Timing>& x) {
    if (!x) return std::string("null");
    return fmt::format(
        R"({{"time_us": {:.3f}, "algbw": {:.4f}, "busbw": {:.4f}, "wrong": {}, "min_us": {:.3f}, "max_us": {:.3f}}})",
        x->time_us, x->algbw, x->busbw,
        x->wrong < 0 ? std::string("null") : std::to_string(x->wrong), x->min_us, x->max_us);
  };
  std::string out = fmt::format(R"({{"tool": "{}", "ranks": {}, "transport": "{}", "results": [)",
                                tool, ranks, transport);
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    out += fmt::format(
        R"({}
  {{"size": {}, "count": {}, "type": "{}", "redop": "{}", "root": {}, "algo": "{}", "out_of_place": {}, "in_place": {})",
        i ? "," : "", r.bytes, r.count, nccl_type_name(r.type), op_text(r), r.root, algo_column(r),
        t(r.out_of_place), t(r.in_place));
    if (r.mpi)
      out += fmt::format(R"(, "mpi": {}, "mpi_in_place": {})", t(*r.mpi), t(r.mpi_in_place));
    out += "}";
  }
  return out + "\n]}\n";
}

}  // namespace chorus::perf

#include "report.hpp"

#include "options.hpp"

#include <fmt/format.h>

namespace chorus::perf {

Timing bandwidth(std::size_t bytes, double seconds, double busbw_factor) {
  Timing t;
  t.time_us = seconds * 1e6;
  t.algbw = seconds > 0 ? static_cast<double>(bytes) / 1e9 / seconds : 0;
  t.busbw = t.algbw * busbw_factor;
  return t;
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
}  // namespace

std::string header(bool with_mpi) {
  std::string h;
  h += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}           out-of-place                       in-place          \n",
                   "", "", "", "", "");
  h += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6} {:>6}  {:>7}  {:>6}  {:>6} {:>6}  {:<24}",
                   "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                   "time", "algbw", "busbw", "#wrong", "algo");
  if (with_mpi) h += fmt::format("  {:>8}  {:>9}  {:>7}", "mpi_time", "mpi_busbw", "speedup");
  h += "\n";
  h += fmt::format("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>5}  {:>7}  {:>6}  {:>6}  {:>5}  {:<24}",
                   "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)",
                   "(GB/s)", "", "");
  if (with_mpi) h += fmt::format("  {:>8}  {:>9}  {:>7}", "(us)", "(GB/s)", "");
  return h + "\n";
}

std::string format_row(const Row& row) {
  std::string line = fmt::format("{:12}  {:12}  {:>8}  {:>6}  {:6}", row.bytes, row.count,
                                 nccl_type_name(row.type), op_text(row), row.root);
  line += block(row.out_of_place) + block(row.in_place);
  line += fmt::format("  {:<24}", algo_column(row));
  if (row.mpi) {
    const double speedup = row.out_of_place.time_us > 0 ? row.mpi->time_us / row.out_of_place.time_us : 0;
    line += fmt::format("  {:>8}  {:9.2f}  {:7.2f}", format_time(row.mpi->time_us), row.mpi->busbw, speedup);
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
  if (with_mpi) h += ",mpi_time_us,mpi_algbw,mpi_busbw,speedup";
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
  if (row.mpi)
    line += fmt::format(",{:.3f},{:.4f},{:.4f},{:.4f}", row.mpi->time_us, row.mpi->algbw,
                        row.mpi->busbw, row.mpi->time_us / row.out_of_place.time_us);
  return line + "\n";
}

std::string json_document(const std::vector<Row>& rows, int ranks, const std::string& transport,
                          const std::string& tool) {
  auto t = [](const std::optional<Timing>& x) {
    if (!x) return std::string("null");
    return fmt::format(R"({{"time_us": {:.3f}, "algbw": {:.4f}, "busbw": {:.4f}, "wrong": {}}})",
                       x->time_us, x->algbw, x->busbw,
                       x->wrong < 0 ? std::string("null") : std::to_string(x->wrong));
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
    if (r.mpi) out += fmt::format(R"(, "mpi": {})", t(*r.mpi));
    out += "}";
  }
  return out + "\n]}\n";
}

}  // namespace chorus::perf

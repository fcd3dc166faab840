// allreduce_perf: its flags (nccl-tests' names and defaults), its table (read
// by a parser written for nccl-tests output), its verifiable data, and short
// runs with --np that check the exit status, #wrong and the files it writes.
#include "../scratch_file.hpp"
#include "coll/selector.hpp"
#include "options.hpp"
#include "process_group.hpp"
#include "reduce/reduce.hpp"
#include "report.hpp"
#include "verify.hpp"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

namespace chorus::perf {
namespace {

// ---- a parser written for nccl-tests' all_reduce_perf output ---------------
// Data rows are the lines that do not start with '#': size count type redop
// root, then time algbw busbw #wrong twice (in place: N/A when the
// collective has no such form, read as -1). Extra columns are ignored.
struct ParsedRow {
  long size, count;
  std::string type, redop;
  int root;
  double time[2], algbw[2], busbw[2];
  std::string wrong[2];
  std::string algo;  // Chorus's first extra column ("" if none)
};
struct Parsed {
  std::vector<ParsedRow> rows;
  std::string out_of_bounds;  // "0 OK"
  double avg_busbw = -1;
};
Parsed parse_nccl_tests_output(const std::string& text) {
  Parsed p;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("# Out of bounds values : ", 0) == 0) p.out_of_bounds = line.substr(25);
    if (line.rfind("# Avg bus bandwidth    : ", 0) == 0) p.avg_busbw = std::stod(line.substr(25));
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    ParsedRow r;
    std::string in_place[3];
    if (!(f >> r.size >> r.count >> r.type >> r.redop >> r.root >> r.time[0] >> r.algbw[0] >>
          r.busbw[0] >> r.wrong[0] >> in_place[0] >> in_place[1] >> in_place[2] >> r.wrong[1]))
      continue;  // not a result row (a launcher's message, say)
    double* fields[3] = {&r.time[1], &r.algbw[1], &r.busbw[1]};
    for (int i = 0; i < 3; ++i) *fields[i] = in_place[i] == "N/A" ? -1 : std::stod(in_place[i]);
    f >> r.algo;
    p.rows.push_back(r);
  }
  return p;
}

TEST(NcclTestsParser, ReadsGenuineNcclTestsOutput) {
  // Published all_reduce_perf output (8 GPUs), to show the parser is the
  // nccl-tests one before it reads ours.
  const std::string nccl =
      "#                                                              out-of-place                       in-place          \n"
      "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong\n"
      "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)       \n"
      " 10737418240    2684354560     float     sum      -1    80922  132.69  232.20      0    80948  132.65  232.13      0\n"
      "# Out of bounds values : 0 OK\n"
      "# Avg bus bandwidth    : 232.167 \n";
  const Parsed p = parse_nccl_tests_output(nccl);
  ASSERT_EQ(p.rows.size(), 1u);
  EXPECT_EQ(p.rows[0].size, 10737418240L);
  EXPECT_DOUBLE_EQ(p.rows[0].busbw[1], 232.13);
  EXPECT_EQ(p.out_of_bounds, "0 OK");
  EXPECT_DOUBLE_EQ(p.avg_busbw, 232.167);
}

TEST(Report, RowsHaveNcclTestsColumnsAndWidths) {
  Row row;
  row.bytes = 1048576;
  row.count = 262144;
  row.algorithm = "ring";
  row.out_of_place = bandwidth(row.bytes, 123.456e-6, busbw_factor(PerfCollective::allreduce, 4));
  row.out_of_place.wrong = 0;
  row.in_place = bandwidth(row.bytes, 12345.6e-6, busbw_factor(PerfCollective::allreduce, 4));
  row.in_place->wrong = 3;
  const std::string line = format_row(row);
  // nccl-tests: "%12li  %12li  %8s  %6s  %6i" then "  %7s  %6.2f  %6.2f  %5li" twice.
  EXPECT_EQ(line.substr(0, 61), "     1048576        262144     float     sum      -1    123.5");
  EXPECT_NE(line.find("    123.5    8.49   12.74      0    12346    0.08    0.13      3  ring "), std::string::npos)
      << line;
  const Parsed p = parse_nccl_tests_output(header(false) + line + footer(1, 6.4));
  ASSERT_EQ(p.rows.size(), 1u);
  EXPECT_EQ(p.rows[0].size, 1048576);
  EXPECT_EQ(p.rows[0].type, "float");
  EXPECT_EQ(p.rows[0].root, -1);
  EXPECT_DOUBLE_EQ(p.rows[0].time[0], 123.5);
  EXPECT_EQ(p.rows[0].wrong[1], "3");
  EXPECT_EQ(p.out_of_bounds, "1 FAILED");
}

TEST(Report, MedianOfRoundsIsTheMiddleOrTheMeanOfTheMiddleTwo) {
  EXPECT_EQ(median({}), 0.0);
  EXPECT_EQ(median({7.0}), 7.0);
  EXPECT_EQ(median({9.0, 1.0, 4.0}), 4.0);              // unsorted in
  EXPECT_EQ(median({9.0, 1.0, 4.0, 2.0}), 3.0);         // (2 + 4) / 2
  EXPECT_EQ(median({5.0, 100.0, 5.5, 4.5, 6.0}), 5.5);  // one slow round does not move it
}

TEST(Report, TimeColumnSqueezesLikeNcclTests) {
  EXPECT_EQ(format_time(1.234), "   1.23");
  EXPECT_EQ(format_time(123.44), "  123.4");
  EXPECT_EQ(format_time(12345.6), "  12346");
  Row row;
  row.in_place = Timing{};
  row.out_of_place.wrong = row.in_place->wrong = -1;  // -c 0
  EXPECT_NE(format_row(row).find("    N/A"), std::string::npos);
}

TEST(Report, BusBandwidthFactorsAreNcclTests) {
  const Timing t = bandwidth(1000000000, 1.0, busbw_factor(PerfCollective::allreduce, 4));
  EXPECT_DOUBLE_EQ(t.algbw, 1.0);
  EXPECT_DOUBLE_EQ(t.busbw, 1.5);  // 2(p-1)/p
  EXPECT_DOUBLE_EQ(t.time_us, 1e6);
  for (auto c : {PerfCollective::allgather, PerfCollective::reduce_scatter, PerfCollective::alltoall})
    EXPECT_DOUBLE_EQ(busbw_factor(c, 4), 0.75) << to_string(c);  // (p-1)/p
  for (auto c : {PerfCollective::broadcast, PerfCollective::reduce})
    EXPECT_DOUBLE_EQ(busbw_factor(c, 4), 1.0) << to_string(c);
}

TEST(Report, CollectivesWithoutAnOpOrInPlaceFormSayNoneAndNA) {
  Row row;
  row.bytes = 4096;
  row.count = 1024;
  row.has_op = false;
  row.root = 2;
  row.algorithm = "binomial_tree";
  const std::string line = format_row(row);
  EXPECT_EQ(line.substr(0, 52), "        4096          1024     float    none       2");
  EXPECT_NE(line.find("    N/A     N/A     N/A    N/A  binomial_tree"), std::string::npos) << line;
}

// With --mpi: MPI's out-of-place time beside Chorus's out of place, its
// MPI_IN_PLACE time beside Chorus's in place, each with its own speedup.
TEST(Report, MpiColumnsCompareEachPlacementWithItsOwn) {
  Row row;
  row.bytes = 4096;
  row.count = 1024;
  row.algorithm = "ring";
  const double factor = busbw_factor(PerfCollective::allreduce, 2);
  row.out_of_place = bandwidth(row.bytes, 100e-6, factor);
  row.in_place = bandwidth(row.bytes, 50e-6, factor);
  row.mpi = bandwidth(row.bytes, 150e-6, factor);
  row.mpi_in_place = bandwidth(row.bytes, 100e-6, factor);
  const std::string line = format_row(row);
  EXPECT_NE(line.find("150.0       0.03     1.50     100.0       0.04     2.00\n"),
            std::string::npos)
      << line;
  const std::string csv = csv_row(row, 2, "ucx");
  EXPECT_NE(csv.find(",150.000,0.0273,0.0273,1.5000,100.000,0.0410,0.0410,2.0000\n"),
            std::string::npos)
      << csv;
  // No in-place form: its MPI columns are N/A.
  row.in_place.reset();
  row.mpi_in_place.reset();
  EXPECT_NE(format_row(row).find("1.50       N/A        N/A      N/A\n"), std::string::npos)
      << format_row(row);
  EXPECT_NE(csv_row(row, 2, "ucx").find(",1.5000,NA,NA,NA,NA\n"), std::string::npos);
  // The header names the six columns, the CSV header its eight fields.
  EXPECT_NE(header(true).find("mpi_time  mpi_busbw  speedup    mpi_ip   ip_busbw  ip_speed"),
            std::string::npos)
      << header(true);
  EXPECT_NE(csv_header(true).find(",speedup,mpi_ip_time_us,mpi_ip_algbw,mpi_ip_busbw,ip_speedup\n"),
            std::string::npos);
}

TEST(Options, TheProgramsNameChoosesTheCollective) {
  EXPECT_EQ(collective_from_program("/usr/bin/allgather_perf"), PerfCollective::allgather);
  EXPECT_EQ(collective_from_program("reduce_scatter_perf"), PerfCollective::reduce_scatter);
  EXPECT_EQ(collective_from_program("./build/bin/broadcast_perf"), PerfCollective::broadcast);
  EXPECT_EQ(collective_from_program("my_copy"), std::nullopt);
  EXPECT_EQ(parse({"-r", "3"}).root, 3);
}

// ---- flags ------------------------------------------------------------------

TEST(Options, DefaultsAreNcclTestsDefaults) {
  const PerfOptions o = parse({});
  EXPECT_EQ(o.min_bytes, 32u << 20);
  EXPECT_EQ(o.max_bytes, 32u << 20);
  EXPECT_EQ(o.step_bytes, 1u << 20);
  EXPECT_EQ(o.step_factor, 1u);
  EXPECT_EQ(o.iters, 20);
  EXPECT_EQ(o.warmup_iters, 5);
  EXPECT_EQ(o.agg_iters, 1);
  EXPECT_EQ(o.check, 1);
  EXPECT_EQ(o.average, 1);
  EXPECT_EQ(o.types, std::vector<DataType>{DataType::float32});
  EXPECT_EQ(o.ops, std::vector<ReduceOp>{ReduceOp::sum});
  EXPECT_EQ(o.rounds, 1);  // Chorus's own: one series a cell, as nccl-tests
}

TEST(Options, ShortLongAndAttachedFormsAndSuffixes) {
  const PerfOptions o = parse({"-b", "8", "--maxbytes", "64M", "-f2", "--iters=7", "-d", "bfloat16",
                               "-o", "all", "-A", "all", "-X", "tcp", "--np", "3", "-c", "0",
                               "-J", "out.json", "--csv", "out.csv", "-a", "3", "-z", "1",
                               "--rewrite"});
  EXPECT_EQ(o.min_bytes, 8u);
  EXPECT_EQ(o.max_bytes, 64u << 20);
  EXPECT_EQ(o.step_factor, 2u);
  EXPECT_EQ(o.iters, 7);
  EXPECT_EQ(o.types, std::vector<DataType>{DataType::bfloat16});
  EXPECT_EQ(o.ops.size(), 5u);
  EXPECT_EQ(o.algorithms.size(), 8u);  // the five flat families, shm, hierarchical, auto
  EXPECT_EQ(o.algorithms.back(), "auto");
  EXPECT_EQ(o.transport, "tcp");
  EXPECT_EQ(o.np, 3);
  EXPECT_EQ(o.check, 0);
  EXPECT_EQ(o.json_file, "out.json");
  EXPECT_EQ(o.csv_file, "out.csv");
  EXPECT_EQ(o.average, 3);
  EXPECT_TRUE(o.blocking);
  EXPECT_TRUE(o.rewrite);
  EXPECT_FALSE(parse({}).rewrite);
  EXPECT_TRUE(parse({"--async"}).async);
  EXPECT_FALSE(parse({}).async);
  EXPECT_THROW(parse({"--async=1"}), UsageError);
  EXPECT_THROW(parse({"--rewrite=1"}), UsageError);  // a switch, like --mpi
  EXPECT_EQ(parse({"-d", "all"}).types.size(), 10u);
  EXPECT_EQ(parse({"--rounds", "5"}).rounds, 5);
  EXPECT_EQ(parse({"--rounds=3"}).rounds, 3);
  EXPECT_EQ(parse_size("1K", "-b"), 1024u);
  EXPECT_EQ(parse_size("2G", "-b"), std::size_t{2} << 30);
}

TEST(Options, SweepSizesByFactorAndByStep) {
  EXPECT_EQ(parse({"-b", "8", "-e", "64", "-f", "2"}).sizes(), (std::vector<std::size_t>{8, 16, 32, 64}));
  EXPECT_EQ(parse({"-b", "1K", "-e", "3K", "-i", "1K"}).sizes(),
            (std::vector<std::size_t>{1024, 2048, 3072}));
  EXPECT_EQ(parse({"-b", "0", "-e", "0"}).sizes(), (std::vector<std::size_t>{0}));
}

TEST(Options, AlgoTakesTheAlgorithmsOfTheProgramsCollective) {
  EXPECT_EQ(parse({"-A", "bruck"}, PerfCollective::allgather).algorithms,
            std::vector<std::string>{"bruck"});
  EXPECT_EQ(parse({"-A", "all"}, PerfCollective::alltoall).algorithms,
            (std::vector<std::string>{"shm", "bruck", "pairwise", "auto"}));
  EXPECT_EQ(parse({"-A", "all"}, PerfCollective::allreduce).algorithms,
            (std::vector<std::string>{"ring", "tree", "direct", "halving_doubling",
                                      "recursive_doubling", "shm", "hierarchical", "auto"}));
  try {
    parse({"-A", "bruck"}, PerfCollective::allreduce);
    ADD_FAILURE() << "allreduce has no bruck";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("(the algorithms of allreduce)"), std::string::npos)
        << e.what();
  }
}

TEST(Options, BadInputNamesWhatIsWrong) {
  auto error_of = [](std::vector<std::string> args) {
    try {
      parse(args);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of({"-b", "12Q"}), "-b: '12Q' is not a size (a count of bytes, with K, M or G)");
  EXPECT_EQ(error_of({"-b", "64M", "-e", "8"}), "invalid sizes for 'minbytes' and 'maxbytes': 67108864 > 8");
  EXPECT_EQ(error_of({"-q"}), "unknown option '-q'");
  EXPECT_EQ(error_of({"--bogus"}), "unknown option '--bogus'");
  EXPECT_EQ(error_of({"-n"}), "option '-n' needs a value");
  EXPECT_EQ(error_of({"-n", "0"}), "-n: '0' is not an integer in 1..1073741824");
  EXPECT_NE(error_of({"-d", "float128"}).find("'float128' is not one of int8"), std::string::npos);
  EXPECT_NE(error_of({"-o", "mean"}).find("'mean' is not one of sum"), std::string::npos);
  EXPECT_NE(error_of({"-A", "butterfly"}).find("'butterfly' is not one of auto, ring"), std::string::npos);
  EXPECT_EQ(error_of({"-X", "rdma"}), "-X: 'rdma' is not one of auto, ucx, tcp");
  EXPECT_EQ(error_of({"stray"}), "unexpected argument 'stray'");
  EXPECT_EQ(error_of({"--rounds", "0"}), "--rounds: '0' is not an integer in 1..1024");
  EXPECT_EQ(error_of({"-R", "2"}), "unknown option '-R'");  // nccl-tests' -R is another flag
}

// ---- verifiable data ----------------------------------------------------------

TEST(Verify, ExpectedEqualsTheReductionInAnyOrderForEveryTypeAndOp) {
  for (int t = 0; t < kDataTypeCount; ++t)
    for (int o = 0; o < kReduceOpCount; ++o) {
      const auto type = static_cast<DataType>(t);
      const auto op = static_cast<ReduceOp>(o);
      if (!is_supported(type, op)) continue;
      for (int ranks : {1, 2, 3, 7, 16, 64}) {
        const std::size_t count = 1000, bytes = count * size_of(type);
        std::vector<std::vector<std::byte>> in(static_cast<std::size_t>(ranks), std::vector<std::byte>(bytes));
        for (int r = 0; r < ranks; ++r) fill_input(in[r].data(), count, type, op, r, ranks, 42);
        std::vector<std::byte> want(bytes), forward(in[0]), backward(in[ranks - 1]);
        fill_expected(want.data(), count, type, op, ranks, 42);
        for (int r = 1; r < ranks; ++r) {
          reduce::reduce(forward.data(), in[r].data(), count, type, op);
          reduce::reduce(backward.data(), in[ranks - 1 - r].data(), count, type, op);
        }
        if (op == ReduceOp::avg) {
          reduce::divide(forward.data(), count, type, static_cast<std::size_t>(ranks));
          reduce::divide(backward.data(), count, type, static_cast<std::size_t>(ranks));
        }
        SCOPED_TRACE(::testing::Message() << to_string(type) << " " << to_string(op) << " p " << ranks);
        EXPECT_EQ(count_wrong(forward.data(), want.data(), count, type), 0u);
        EXPECT_EQ(count_wrong(backward.data(), want.data(), count, type), 0u);
        forward[0] = static_cast<std::byte>(~std::to_integer<unsigned>(forward[0]));
        EXPECT_EQ(count_wrong(forward.data(), want.data(), count, type), 1u);
      }
    }
}

// ---- runs ---------------------------------------------------------------------

struct PerfRun {
  testing::ProcessResult result;
  std::string text() const { return result.output; }
};
PerfRun run_perf(const std::vector<std::string>& args, int seconds = 120,
                 const std::string& program = CHORUS_ALLREDUCE_PERF) {
  testing::ProcessGroup group;
  std::vector<std::string> argv = {program};
  argv.insert(argv.end(), args.begin(), args.end());
  group.start(argv, {{"CHORUS_TIMEOUT", "60"}});
  return {group.wait(std::chrono::seconds(seconds)).at(0)};
}

TEST(AllreducePerf, LocalRunWithThreeRanksPassesAndIsParsable) {
  const testing::ScratchFile json("perf.json"), csv("perf.csv");
  const PerfRun run = run_perf({"--np", "3", "-b", "8", "-e", "64K", "-f", "8", "-n", "3", "-w", "1",
                            "-X", "tcp", "-J", json.path(), "--csv", csv.path()});
  ASSERT_EQ(run.result.exit_code, 0) << run.text();
  const Parsed p = parse_nccl_tests_output(run.text());
  ASSERT_EQ(p.rows.size(), 5u) << run.text();  // 8, 64, 512, 4096, 32768
  for (const auto& r : p.rows) {
    EXPECT_EQ(r.wrong[0], "0");
    EXPECT_EQ(r.wrong[1], "0");
    EXPECT_EQ(r.type, "float");
    EXPECT_EQ(r.root, -1);
  }
  EXPECT_EQ(p.out_of_bounds, "0 OK");
  EXPECT_NE(run.text().find("nThread 1 nGpus 1 minBytes 8 maxBytes 65536 step: 8(factor) warmup iters: 1 iters: 3"),
            std::string::npos);
  EXPECT_NE(run.text().find("#  Rank  2 Group  0 Pid"), std::string::npos);
  std::stringstream js, cs;
  js << std::ifstream(json.path()).rdbuf();
  cs << std::ifstream(csv.path()).rdbuf();
  EXPECT_NE(js.str().find(R"("size": 4096, "count": 1024, "type": "float")"), std::string::npos) << js.str();
  EXPECT_NE(cs.str().find("4096,1024,float,sum,-1,"), std::string::npos) << cs.str();
}

// The other collectives' tools: allreduce_perf under their names (the
// symbolic links beside it), checked at p = 3 (uneven splits of the sizes)
// with every type, in place where the collective has that form, and with a
// root other than 0 where it has one.
std::string tool(const std::string& name) {
  const std::string perf = CHORUS_ALLREDUCE_PERF;
  return perf.substr(0, perf.rfind('/') + 1) + name;
}

TEST(CollectivePerf, EveryToolChecksCleanWithNcclTestsColumns) {
  struct Case {
    const char* name;
    const char* redop;
    int root;
    bool in_place;
  };
  for (const Case c : {Case{"allgather_perf", "none", -1, true}, Case{"broadcast_perf", "none", 2, false},
                       Case{"reduce_perf", "sum", 2, true}, Case{"reduce_scatter_perf", "sum", -1, true},
                       Case{"alltoall_perf", "none", -1, false}}) {
    std::vector<std::string> args = {"--np", "3", "-b", "96", "-e", "1536K", "-f", "16", "-n", "2",
                                     "-w", "1", "-X", "tcp", "-d", "all"};
    if (c.root >= 0) args.insert(args.end(), {"-r", std::to_string(c.root)});
    const PerfRun run = run_perf(args, 240, tool(c.name));
    ASSERT_EQ(run.result.exit_code, 0) << c.name << "\n" << run.text();
    EXPECT_NE(run.text().find(std::string("# Collective test starting: ") + c.name), std::string::npos);
    const Parsed p = parse_nccl_tests_output(run.text());
    ASSERT_EQ(p.rows.size(), 40u) << c.name << "\n" << run.text();  // 4 sizes x 10 types
    for (const auto& r : p.rows) {
      EXPECT_EQ(r.redop, c.redop) << c.name;
      EXPECT_EQ(r.root, c.root) << c.name;
      EXPECT_EQ(r.wrong[0], "0") << c.name << " " << r.size << " " << r.type;
      EXPECT_EQ(r.wrong[1], c.in_place ? "0" : "N/A") << c.name << " " << r.size << " " << r.type;
    }
    EXPECT_EQ(p.out_of_bounds, "0 OK") << c.name;
  }
}

// --async: every collective's async form and its wait, checked like the
// blocking calls (the checked call takes the same path as the timed ones).
TEST(CollectivePerf, AsyncFormsOfEveryCollectiveCheckClean) {
  for (const char* name : {"allreduce_perf", "allgather_perf", "broadcast_perf", "reduce_perf",
                           "reduce_scatter_perf", "alltoall_perf"}) {
    const PerfRun run = run_perf({"--np", "2", "-b", "96", "-e", "96K", "-f", "32", "-n", "3", "-w",
                                  "1", "-X", "tcp", "--async"},
                                 120, tool(name));
    ASSERT_EQ(run.result.exit_code, 0) << name << "\n" << run.text();
    const Parsed p = parse_nccl_tests_output(run.text());
    ASSERT_EQ(p.rows.size(), 3u) << name << "\n" << run.text();  // 96 B, 3 KiB, 96 KiB
    for (const auto& r : p.rows) EXPECT_EQ(r.wrong[0], "0") << name << " " << r.size;
    EXPECT_EQ(p.out_of_bounds, "0 OK") << name;
  }
}

TEST(CollectivePerf, ACorruptedResultOfAnyCollectiveIsCounted) {
  for (const char* name : {"allgather_perf", "broadcast_perf", "reduce_perf", "reduce_scatter_perf",
                           "alltoall_perf"}) {
    const PerfRun run = run_perf({"--np", "2", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0", "-X",
                                  "tcp", "--inject-error", "-r", "1"}, 120, tool(name));
    EXPECT_EQ(run.result.exit_code, 1) << name << "\n" << run.text();
    EXPECT_NE(run.text().find("FAILED"), std::string::npos) << name << "\n" << run.text();
  }
}

TEST(CollectivePerf, AlgorithmFlagsAndBadRootsAreRefused) {
  // Every collective takes -A, with its own algorithms' names; --tune is AllReduce's.
  PerfRun run = run_perf({"--np", "2", "-A", "tree"}, 60, tool("allgather_perf"));
  EXPECT_EQ(run.result.exit_code, 2) << run.text();
  EXPECT_NE(run.text().find("-A/--algo: 'tree' is not one of auto, shm, bruck, ring, hierarchical, all (the "
                            "algorithms of allgather)"),
            std::string::npos)
      << run.text();
  run = run_perf({"--np", "2", "--tune", "t.txt"}, 60, tool("allgather_perf"));
  EXPECT_EQ(run.result.exit_code, 2) << run.text();
  EXPECT_NE(run.text().find("allreduce_perf only"), std::string::npos) << run.text();
  run = run_perf({"--np", "2", "-r", "2", "-b", "8", "-e", "8"}, 60, tool("broadcast_perf"));
  EXPECT_EQ(run.result.exit_code, 2) << run.text();
  EXPECT_NE(run.text().find("-r/--root: 2 is not a rank of the 2 ranks"), std::string::npos) << run.text();
}

TEST(AllreducePerf, CorruptedResultIsCountedAndFails) {
  const PerfRun run = run_perf({"--np", "2", "-b", "1K", "-e", "1K", "-n", "2", "-w", "0", "-X", "tcp",
                            "--inject-error"});
  EXPECT_EQ(run.result.exit_code, 1) << run.text();
  const Parsed p = parse_nccl_tests_output(run.text());
  ASSERT_EQ(p.rows.size(), 1u) << run.text();
  EXPECT_EQ(p.rows[0].wrong[0], "1");
  EXPECT_EQ(p.rows[0].wrong[1], "1");
  EXPECT_EQ(p.out_of_bounds, "2 FAILED");
}

TEST(AllreducePerf, EveryAlgorithmEveryTypeAndOpChecksClean) {
  const PerfRun run = run_perf({"--np", "3", "-b", "4K", "-e", "4K", "-n", "1", "-w", "0", "-X", "tcp",
                            "-A", "all", "-d", "all", "-o", "all"}, 240);
  ASSERT_EQ(run.result.exit_code, 0) << run.text();
  const Parsed p = parse_nccl_tests_output(run.text());
  EXPECT_GT(p.rows.size(), 100u);
  EXPECT_EQ(p.out_of_bounds, "0 OK");
}

// Every timing of a -J file: time_us with the fastest and slowest series'.
struct JsonTiming {
  double time_us, min_us, max_us;
};
std::vector<JsonTiming> json_timings(const std::string& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  const std::string all = text.str();
  static const std::regex timing(
      R"re("time_us": ([0-9.]+), "algbw": [0-9.]+, "busbw": [0-9.]+, "wrong": [a-z0-9]+, "min_us": ([0-9.]+), "max_us": ([0-9.]+))re");
  std::vector<JsonTiming> found;
  for (auto it = std::sregex_iterator(all.begin(), all.end(), timing); it != std::sregex_iterator();
       ++it)
    found.push_back({std::stod((*it)[1]), std::stod((*it)[2]), std::stod((*it)[3])});
  return found;
}

// --rounds: every algorithm's cells timed in turn, each row once, checked;
// each time a median within its series' range (the JSON's), which more
// than one series makes wider than a point somewhere.
TEST(AllreducePerf, RoundsReportEachAlgorithmOnceCheckedWithTheirCount) {
  const testing::ScratchFile rounds_json("rounds.json");
  const std::string& json = rounds_json.path();
  const PerfRun run =
      run_perf({"--np", "2", "-b", "1K",  "-e", "64K", "-f",       "64", "-n", "2",
                "-w",   "1", "-X", "tcp", "-A", "all", "--rounds", "3",  "-J", json},
               240);
  ASSERT_EQ(run.result.exit_code, 0) << run.text();
  EXPECT_NE(run.text().find("# Rounds: 3 ("), std::string::npos) << run.text();
  const Parsed p = parse_nccl_tests_output(run.text());
  const std::size_t algorithms = parse({"-A", "all"}).algorithms.size();
  ASSERT_EQ(p.rows.size(), 2 * algorithms) << run.text();  // 1 KiB and 64 KiB
  for (long size : {1024L, 65536L}) {
    std::set<std::string> algos;
    for (const ParsedRow& r : p.rows) {
      if (r.size != size) continue;
      algos.insert(r.algo);
      EXPECT_EQ(r.wrong[0], "0") << r.algo;
      EXPECT_EQ(r.wrong[1], "0") << r.algo;
    }
    EXPECT_EQ(algos.size(), algorithms) << size << "\n" << run.text();  // each once
  }
  EXPECT_EQ(p.rows.back().algo.rfind("auto:", 0), 0u) << p.rows.back().algo;
  EXPECT_EQ(p.out_of_bounds, "0 OK");
  const std::vector<JsonTiming> timings = json_timings(json);
  ASSERT_EQ(timings.size(), 2 * p.rows.size());  // out of place and in place
  int spread = 0;
  for (const JsonTiming& t : timings) {
    // (The file's three decimals: a median equal to an end may print past it by 0.001.)
    EXPECT_LE(t.min_us, t.time_us + 0.001);
    EXPECT_GE(t.max_us, t.time_us - 0.001);
    spread += t.max_us > t.min_us;
  }
  EXPECT_GT(spread, 0) << "no cell timed more than once";
  // One round: each cell's range is its one time.
  const testing::ScratchFile single_json("single.json");
  const std::string& single = single_json.path();
  ASSERT_EQ(run_perf({"--np", "2", "-b", "1K", "-e", "1K", "-n", "2", "-w", "0", "-X", "tcp", "-J",
                      single})
                .result.exit_code,
            0);
  for (const JsonTiming& t : json_timings(single)) {
    EXPECT_EQ(t.min_us, t.time_us);
    EXPECT_EQ(t.max_us, t.time_us);
  }
  EXPECT_EQ(json_timings(single).size(), 2u);
}

TEST(AllreducePerf, TuneWritesAFileTheSelectorReads) {
  const testing::ScratchFile file("chorus.tune");
  const PerfRun run = run_perf({"--np", "2", "-b", "8", "-e", "64K", "-f", "64", "-n", "2", "-w", "0",
                            "-X", "tcp", "--tune", file.path()});
  ASSERT_EQ(run.result.exit_code, 0) << run.text();
  const coll::Tuning t = coll::read_tuning(file.path());
  ASSERT_TRUE(t.model.has_value());
  ASSERT_EQ(t.entries.size(), 3u);  // 8, 512, 32768
  EXPECT_EQ(t.entries[0].ranks, 2);
  EXPECT_EQ(t.entries[2].max_bytes, 32768u);
}

TEST(AllreducePerf, BadFlagPrintsWhatIsWrongAndUsageWithStatusTwo) {
  const PerfRun run = run_perf({"-b", "lots"});
  EXPECT_EQ(run.result.exit_code, 2);
  EXPECT_NE(run.text().find("-b: 'lots' is not a size"), std::string::npos) << run.text();
  EXPECT_NE(run.text().find("USAGE: allreduce_perf"), std::string::npos) << run.text();
  const PerfRun help = run_perf({"-h"});
  EXPECT_EQ(help.result.exit_code, 0);
  EXPECT_NE(help.text().find("-A,--algo"), std::string::npos);
}

}  // namespace
}  // namespace chorus::perf

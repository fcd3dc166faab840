#include "coll/selector.hpp"

#include "coll/call_check.hpp"
#include "coll/recursive_doubling.hpp"
#include "coll/registry.hpp"
#include "coll/topology.hpp"
#include "common/pages.hpp"
#include "reduce/reduce.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>
#include <sstream>

namespace chorus::coll {

namespace {
// A variant by its exact name (not a family's: a tuning file names what ran).
std::optional<Variant> parse_variant(std::string_view name) {
  const AlgorithmRow* row = find_row(CollectiveKind::allreduce, name);
  if (row == nullptr || row->name != name) return std::nullopt;
  return static_cast<Variant>(row->id);
}
}  // namespace

std::string_view to_string(Variant v) noexcept {
  return algorithm_name(static_cast<std::uint8_t>(v));
}

Algorithm family(Variant v) noexcept {
  return parse_algorithm(registry()[static_cast<std::size_t>(v)].family)
      .value_or(Algorithm::automatic);
}

double predicted_seconds(Variant v, const CostModel& m, std::size_t bytes, int ranks) {
  if (ranks <= 1) return 0;
  if (m.calibrated) {
    const auto& t = m.measured[static_cast<int>(v)];
    const auto& at = CostModel::kCalibrationBytes;
    int i = 0;  // the segment of the line to use: at[i] < bytes <= at[i + 1], or the last
    while (i + 2 < CostModel::kCalibrationPoints && bytes > at[i + 1]) ++i;
    const double slope = std::max(0.0, (t[i + 1] - t[i]) / static_cast<double>(at[i + 1] - at[i]));
    return std::max(0.0, t[i] + slope * (static_cast<double>(bytes) - static_cast<double>(at[i])));
  }
  return registry()[static_cast<std::size_t>(v)].cost(m, static_cast<double>(bytes), ranks);
}

Tuning read_tuning(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw Error(ErrorCode::invalid_argument, fmt::format("tuning file {}: cannot be read", path));
  Tuning tuning;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (auto hash = line.find('#'); hash != std::string::npos) line.erase(hash);
    std::istringstream fields(line);
    std::string kind;
    if (!(fields >> kind)) continue;
    auto bad = [&](std::string_view why) {
      return Error(ErrorCode::invalid_argument,
                   fmt::format("tuning file {} line {}: {} (in '{}')", path, number, why, line));
    };
    if (kind == "model") {
      CostModel m;
      if (!(fields >> m.alpha >> m.beta >> m.gamma >> m.overhead) || m.alpha < 0 || m.beta < 0 ||
          m.gamma < 0 || m.overhead < 0)
        throw bad("expected 'model <alpha> <beta> <gamma> <overhead>' with non-negative seconds");
      tuning.model = m;
    } else if (kind == "line") {
      std::string name;
      double t[CostModel::kCalibrationPoints];
      bool ok = static_cast<bool>(fields >> name);
      for (double& x : t) ok = ok && (fields >> x) && x >= 0;
      if (!ok)
        throw bad(fmt::format("expected 'line <algorithm>' and {} times in seconds",
                              CostModel::kCalibrationPoints));
      const auto v = parse_variant(name);
      if (!v) throw bad(fmt::format("unknown algorithm '{}'", name));
      if (!tuning.model) throw bad("a 'line' needs a 'model' line before it");
      std::copy(t, t + CostModel::kCalibrationPoints, tuning.model->measured[static_cast<int>(*v)]);
      tuning.model->calibrated = true;
    } else if (kind == "best") {
      TuningEntry e;
      std::string name;
      if (!(fields >> e.ranks >> e.max_bytes >> name) || e.ranks < 1)
        throw bad("expected 'best <ranks> <max bytes> <algorithm>'");
      const auto v = parse_variant(name);
      if (!v) throw bad(fmt::format("unknown algorithm '{}'", name));
      e.variant = *v;
      tuning.entries.push_back(e);
    } else {
      throw bad(fmt::format("unknown record '{}'", kind));
    }
    std::string extra;
    if (fields >> extra) throw bad(fmt::format("unexpected '{}'", extra));
  }
  std::sort(tuning.entries.begin(), tuning.entries.end(), [](const auto& a, const auto& b) {
    return a.ranks != b.ranks ? a.ranks < b.ranks : a.max_bytes < b.max_bytes;
  });
  return tuning;
}

void write_tuning(const std::string& path, const Tuning& tuning) {
  std::ofstream out(path);
  out << "# chorus tuning file: see docs/tuning.md\n";
  if (tuning.model)
    out << fmt::format("model {:.6g} {:.6g} {:.6g} {:.6g}\n", tuning.model->alpha,
                       tuning.model->beta, tuning.model->gamma, tuning.model->overhead);
  if (tuning.model && tuning.model->calibrated)
    for (int v = 0; v < kVariantCount; ++v)
    {
      out << "line " << to_string(static_cast<Variant>(v));
      for (double x : tuning.model->measured[v]) out << fmt::format(" {:.6g}", x);
      out << "\n";
    }
  for (const auto& e : tuning.entries)
    out << fmt::format("best {} {} {}\n", e.ranks, e.max_bytes, to_string(e.variant));
  if (!out)
    throw Error(ErrorCode::invalid_argument, fmt::format("tuning file {}: cannot be written", path));
}

Selector::Selector(CostModel model, Tuning tuning) : model_(model), tuning_(std::move(tuning)) {}

Choice Selector::choose(Algorithm requested, std::size_t bytes, int ranks) const {
  if (requested == Algorithm::automatic) {
    for (const auto& e : tuning_.entries)
      if (e.ranks == ranks && bytes <= e.max_bytes)
        return {e.variant, predicted_seconds(e.variant, model_, bytes, ranks), "tuning file"};
  }
  Choice best{Variant::ring, 0, requested == Algorithm::automatic ? "cost model" : "forced"};
  bool found = false;
  // Several variants often cost the same in the model (at p = 2 ring, tree,
  // two-shot and halving-doubling move the same bytes in the same steps); a
  // tie goes to the earlier row: the order in which they pipelined best in
  // allreduce_perf -A all on the development machine (docs/tuning.md).
  for (const AlgorithmRow& row : rows_of(CollectiveKind::allreduce)) {
    if (row.cost == nullptr) continue;  // not priced: shared memory, chosen before the model
    const auto v = static_cast<Variant>(row.id);
    if (requested != Algorithm::automatic && family(v) != requested) continue;
    const double t = predicted_seconds(v, model_, bytes, ranks);
    if (!found || t < best.predicted_seconds * (1 - 1e-9)) {  // a tie keeps the earlier one
      best.variant = v;
      best.predicted_seconds = t;
      found = true;
    }
  }
  // From 1 MiB the ring is the prior: bandwidth-optimal and pipelined, it was
  // the fastest at 2-32 MiB in 28 of 30 (size, launch) pairs of ten launches
  // at p = 2 and 4 (docs/performance.md), while the probe, noisy on a shared
  // machine, made another variant look best in some launches and that one
  // then ran up to 1.8x slower (with a 1.5x margin still once in ten
  // launches: a probe that timed the ring 10x too slow). Another variant
  // displaces the ring only when the model predicts it at least 2x faster.
  if (requested == Algorithm::automatic && bytes >= kRingPriorBytes && best.variant != Variant::ring) {
    const double ring = predicted_seconds(Variant::ring, model_, bytes, ranks);
    if (best.predicted_seconds * kDisplaceRingFactor > ring) {
      best.variant = Variant::ring;
      best.predicted_seconds = ring;
      best.reason = "cost model (ring prior)";
    }
  }
  return best;
}

namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

CostModel probe_cost_model(const Collective& c, bool with_call_check, bool time_variants) {
  transport::Transport& t = c.transport;
  const int r = t.rank(), p = t.size();
  CostModel model;
  if (p == 1) return model;
  // Every rank takes part in every measured step, as in a real collective:
  // with more ranks than cores, a step's cost includes waiting for peers to
  // be scheduled, and the model should know.
  // What the steps below use (the variants' rounds grow them), their pages
  // mapped at once: touched page by page, the 6 MiB these were took 18 ms of
  // a 31 ms probe at p = 2 (common/pages.hpp).
  std::vector<std::byte> out, in;
  fill_populated(out, std::size_t{1} << 20);
  fill_populated(in, std::size_t{1} << 20);
  // Each step and call gets the whole timeout of its own, as every call of
  // a communicator does: the probe is many of them.
  const auto budget = c.deadline - transport::Clock::now();
  auto fresh = [&](std::uint32_t sequence) {
    return Collective{t, sequence, transport::Clock::now() + budget, nullptr, c.abort_requested,
                      c.scratch};
  };
  unsigned step_number = 0;
  // One step: this rank sends `messages` messages of `bytes` (message k to
  // to(k)) and receives as many (from from(k)); the median time of `iters`
  // steps after two warm-ups. By default, to the next ranks in turn and
  // from the previous ones.
  using Peer = std::function<int(int)>;
  const Peer next = [&](int k) { return (r + 1 + k % (p - 1)) % p; };
  const Peer previous = [&](int k) { return (r - 1 - k % (p - 1) + p) % p; };
  auto step = [&](std::size_t bytes, int messages, int iters, const Peer& to = nullptr,
                  const Peer& from = nullptr) {
    std::vector<double> samples;
    for (int i = 0; i < iters + 2; ++i, ++step_number) {
      std::vector<transport::RequestPtr> reqs;
      const Collective sc = fresh(c.sequence);
      const auto start = transport::Clock::now();
      for (int k = 0; k < messages; ++k) {
        const auto tag = sc.message_tag(0, step_number % kMaxSteps, static_cast<unsigned>(k));
        reqs.push_back(t.irecv((from ? from : previous)(k), tag, in.data() + (k % 4) * bytes, bytes));
        reqs.push_back(t.isend((to ? to : next)(k), tag, out.data(), bytes));
      }
      sc.wait_all(reqs);
      if (i >= 2) samples.push_back(std::chrono::duration<double>(transport::Clock::now() - start).count());
    }
    return median(samples);
  };
  constexpr int kFanout = 4;
  const double one = step(8, 1, 30);
  const double many = step(8, kFanout, 30);
  const double large = step(1 << 20, 1, 6);
  model.alpha = one;
  model.overhead = std::max(0.0, (many - one) / (kFanout - 1));
  model.beta = std::max(0.0, large - one) / static_cast<double>(1 << 20);
  // Across hosts of equal rank counts, each level on its own: a ring among
  // each host's ranks (every host at once), and one among the ranks of
  // each local rank on every host (every local rank at once, sharing their
  // host's link as the hierarchical algorithms' stages do).
  if (c.topology != nullptr && c.topology->hosts() > 1 && c.topology->uniform()) {
    const Topology& hosts = *c.topology;
    auto level = [&](const std::vector<int>& ring, int me) {
      const int n = static_cast<int>(ring.size());
      const Peer to = [&](int) { return ring[static_cast<std::size_t>((me + 1) % n)]; };
      const Peer from = [&](int) { return ring[static_cast<std::size_t>((me - 1 + n) % n)]; };
      const double small = step(8, 1, 20, to, from);
      return LevelCost{small, std::max(0.0, step(1 << 20, 1, 4, to, from) - small) /
                                  static_cast<double>(1 << 20)};
    };
    const int host = hosts.host_of(r), local_rank = hosts.local_rank(r);
    if (hosts.local_size(r) > 1) model.within_host = level(hosts.ranks_on(host), local_rank);
    model.across_hosts = level(hosts.peers_across_hosts(local_rank), host);
  }
  // gamma, measured by rank 0, and rank 0's constants (with every rank's
  // variant times, merged already) to every rank.
  auto share_rank0_model = [&] {
    if (r == 0) {
      // gamma: c = a + b on float32, the reduction every algorithm runs.
      const std::size_t count = 256 * 1024;
      std::vector<float> a, b, out;
      fill_populated(a, count, 1.0f);
      fill_populated(b, count, 2.0f);
      fill_populated(out, count);
      std::vector<double> samples;
      for (int i = 0; i < 7; ++i) {
        const auto start = transport::Clock::now();
        reduce::reduce(out.data(), a.data(), b.data(), count, DataType::float32, ReduceOp::sum);
        samples.push_back(std::chrono::duration<double>(transport::Clock::now() - start).count());
      }
      model.gamma = median(samples) / static_cast<double>(count * sizeof(float));
      std::vector<transport::RequestPtr> sends;
      for (int q = 1; q < p; ++q)
        sends.push_back(t.isend(q, c.message_tag(1, 0, 0), &model, sizeof model));
      fresh(c.sequence).wait_all(sends);
    } else {
      auto received = t.irecv(0, c.message_tag(1, 0, 0), &model, sizeof model);
      const Collective last = fresh(c.sequence);
      last.wait(*received);
      bool sane = received->received_bytes() == sizeof model;
      for (double x : {model.alpha, model.beta, model.gamma, model.overhead})
        sane = sane && std::isfinite(x) && x >= 0;
      if (!sane)
        last.fail(Error(ErrorCode::peer_failure,
                        fmt::format("rank {}: the cost model from rank 0 is malformed", r)));
    }
    return model;
  };
  if (!time_variants) return share_rank0_model();
  // Every variant at every calibration size, float32 sum, on sequence
  // numbers of the probe's own (about 5300 calls), half the tags' 16-bit
  // sequence space away from the first calls'.
  std::uint32_t sequence = 0x8000;
  // What a variant costs is what a run of back-to-back calls of it costs
  // per call, as allreduce_perf and a training loop see it, so each sample
  // is a block of calls timed together, and a variant's cost is the
  // slowest rank's median: a collective is done when its last rank is. (One
  // rank's view flatters a variant without round trips, one-shot: a rank
  // that comes last finds its peers' messages waiting and takes nothing,
  // while they took the whole wait.) The variants take turns block by
  // block, in an order that rotates every round, so that a burst of noise
  // (a rank descheduled) and the skew one variant leaves the next fall on
  // all of them alike.
  // Small calls are cheap and the variants close: many rounds there. Large
  // calls are long beside any skew: shorter blocks and fewer rounds there.
  // Each size is a race: after kRounds of every variant, the (at most
  // kRaceMost) within kRaceReach of the best run kRaceRounds more, so that
  // the time goes to telling apart what is close (a variant twice as slow
  // is known after five rounds; four processes on two cores vary a 2 MiB
  // call's time 2-3x from one call to the next). A call's cost grows with p
  // and so does what one call averages over, so the rounds shrink beyond 4
  // ranks, keeping the probe's time roughly level (at 64 in-process ranks
  // on two cores the full count took a minute).
  constexpr int kRounds[CostModel::kCalibrationPoints] = {31, 31, 31, 31, 15, 15, 15, 9, 5, 5, 3};
  constexpr int kRaceRounds[CostModel::kCalibrationPoints] = {31, 31, 31, 31, 15, 15, 20, 15, 16, 10, 2};
  constexpr int kBlock[CostModel::kCalibrationPoints] = {3, 3, 3, 3, 3, 3, 3, 3, 2, 1, 1};
  constexpr double kRaceReach = 1.3;  // of the best median, to race on
  constexpr int kRaceMost = 3;        // variants in a race
  constexpr int kMinRounds = 3;
  const int shrink = std::max(1, p / 4);
  using Samples = std::vector<std::vector<double>>;  // seconds per call, by variant
  // `rounds` rounds of `variants` at calibration point `size` (after a
  // warm-up round if asked), appending to `samples`.
  auto time_rounds = [&](int size, const std::vector<int>& variants, int rounds, bool warm_up,
                         Samples& samples) {
    const std::size_t bytes = CostModel::kCalibrationBytes[size];
    if (out.size() < bytes) fill_populated(out, bytes);
    if (in.size() < bytes) fill_populated(in, bytes);
    const std::size_t count = bytes / sizeof(float);
    const int n = static_cast<int>(variants.size());
    for (int round = warm_up ? -1 : 0; round < rounds; ++round)
      for (int turn = 0; turn < n; ++turn) {
        const int v = variants[(turn + round + n) % n];
        const auto start = transport::Clock::now();
        for (int call = 0; call < kBlock[size]; ++call) {
          Collective one = fresh(sequence++);
          // A call runs beside its call check, whose rounds a variant with
          // few steps of its own cannot hide (one-shot): time them together.
          std::optional<MessageCallCheck> check;
          if (with_call_check) {
            const CallSignature signature{static_cast<std::uint8_t>(CollectiveKind::allreduce),
                                          static_cast<std::uint8_t>(DataType::float32),
                                          static_cast<std::uint8_t>(ReduceOp::sum),
                                          static_cast<std::uint8_t>(v), -1, count, 0};
            check.emplace(one, signature, algorithm_name);
            one.check = &*check;
          }
          Operands operands;
          operands.send = out.data();
          operands.recv = in.data();
          operands.count = count;
          registry()[static_cast<std::size_t>(v)].run(one, operands);
          if (check) check->finish(one.deadline);
        }
        if (round >= 0)
          samples[v].push_back(
              std::chrono::duration<double>(transport::Clock::now() - start).count() / kBlock[size]);
      }
  };
  // Into model.measured: the slowest rank's median of each of `variants`,
  // merged by a max-allreduce, so that every rank has the same times and
  // all choose alike.
  auto record_slowest = [&](int size, const std::vector<int>& variants, const Samples& samples) {
    double row[kVariantCount] = {};
    for (int v : variants) row[v] = median(samples[v]);
    recursive_doubling_allreduce(fresh(sequence++), row, row, kVariantCount, DataType::float64,
                                 ReduceOp::max);
    for (int v : variants) model.measured[v][size] = row[v];
  };
  // The `most` variants of `from` that cost least at `size`, within `reach` of the least.
  auto closest = [&](int size, std::vector<int> from, double reach, int most) {
    auto cost = [&](int v) { return model.measured[v][size]; };
    std::sort(from.begin(), from.end(), [&](int a, int b) { return cost(a) < cost(b); });
    const double best = cost(from.front());
    std::erase_if(from, [&](int v) { return cost(v) > reach * best; });
    if (from.size() > static_cast<std::size_t>(most)) from.resize(most);
    return from;
  };
  auto calibrate = [&](int size, const std::vector<int>& variants) {
    Samples samples(kVariantCount);
    time_rounds(size, variants, std::max(kMinRounds, kRounds[size] / shrink), true, samples);
    record_slowest(size, variants, samples);
    const auto race = closest(size, variants, kRaceReach, kRaceMost);
    if (race.size() < 2) return;
    time_rounds(size, race, std::max(kMinRounds, kRaceRounds[size] / shrink), false, samples);
    record_slowest(size, race, samples);
  };
  // From 128 KiB on, a variant more than kDropBehind times the best at the
  // size before is not timed again: large calls are slow (one-shot takes
  // 10 ms at 2 MiB, p = 4) and in the bandwidth regime the order of the
  // variants settles. An untimed variant is taken to grow from the size
  // before no more slowly than the timed variant that grew least, so it
  // cannot overtake what was timed (carrying its own slope on would let it:
  // a timed variant may meet the cache's edge, an untimed one never does).
  constexpr int kDropFrom = 7;
  constexpr double kDropBehind = 2.0;
  auto time_at = [&](int size, const std::vector<int>& timed) {
    calibrate(size, timed);
    double growth = std::numeric_limits<double>::infinity();
    for (int v : timed)
      growth = std::min(growth, model.measured[v][size] / std::max(1e-12, model.measured[v][size - 1]));
    for (int v = 0; v < kVariantCount; ++v)
      if (std::find(timed.begin(), timed.end(), v) == timed.end())
        model.measured[v][size] = model.measured[v][size - 1] * growth;
  };
  std::vector<int> every(kVariantCount);
  std::iota(every.begin(), every.end(), 0);
  const int top = CostModel::kCalibrationPoints - 1;
  for (int size = 0; size < top; ++size)
    if (size < kDropFrom)
      calibrate(size, every);
    else
      time_at(size, closest(size - 1, every, kDropBehind, kVariantCount));
  // The 8 MiB point, up to kLargePointRanks: the three best at 2 MiB
  // (within 1.5x of the best) timed. Beyond, every variant carries its
  // 512 KiB-2 MiB slope on, as predicted_seconds does past the last point.
  if (p <= CostModel::kLargePointRanks) {
    time_at(top, closest(top - 1, every, 1.5, 3));
  } else {
    const auto& at = CostModel::kCalibrationBytes;
    for (auto& t : model.measured) {
      const double slope = std::max(0.0, (t[top - 1] - t[top - 2]) /
                                             static_cast<double>(at[top - 1] - at[top - 2]));
      t[top] = t[top - 1] + slope * static_cast<double>(at[top] - at[top - 1]);
    }
  }
  model.calibrated = true;
  return share_rank0_model();
}

}  // namespace chorus::coll

// Which algorithm runs an AllReduce: every variant by name, its
// alpha-beta-gamma cost, and the choice among them.
//
// A variant is what actually runs; the public Algorithm "direct" has two
// (one-shot and two-shot), chosen by cost like everything else. The model:
//   alpha  seconds per step (one message each way, latency and overhead)
//   beta   seconds per byte moved between two ranks
//   gamma  seconds per byte reduced
//   overhead  seconds each further message sent in the same step adds
//          (messages of one step overlap: a step costs alpha, not alpha
//          per message)
// measured at communicator creation by probe_cost_model(), which also times
// each variant (CostModel::measured; those times decide when present), or
// read from a tuning file (CHORUS_TUNING_FILE, written by allreduce_perf --tune). A
// tuning file may also name the measured-best algorithm per rank count and
// size; such an entry wins over the model.
#pragma once

#include "coll/collective.hpp"

#include <chorus/algorithm.hpp>
#include <chorus/types.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::coll {

// AllReduce's rows of the registry (coll/registry.hpp), by id: the cost
// model's arrays are indexed by them.
enum class Variant : std::uint8_t {
  ring,
  tree,
  direct_one_shot,
  direct_two_shot,
  halving_doubling,
  recursive_doubling,
};
inline constexpr int kVariantCount = 6;

std::string_view to_string(Variant v) noexcept;
// The public Algorithm a variant belongs to (the counters' index).
Algorithm family(Variant v) noexcept;

struct CostModel {
  double alpha = 0, beta = 0, gamma = 0;
  double overhead = 0;  // seconds each further message of one step adds
  // Each variant's time at kCalibrationBytes, as the probe measured it (a
  // variant it stopped timing, far behind, grows from its last time as the
  // least-growing timed one did, so it never overtakes them); between them the
  // time is taken as linear in the size (beyond the last, with the last
  // slope): alpha-beta-gamma terms with this machine's and this
  // implementation's constants, which the formulas cannot know (what a step
  // costs when ranks outnumber cores, how well a variant pipelines). When
  // present they decide; the formulas are the fallback.
  // The last point (8 MiB) is where buffers leave the cache and the
  // variants that do not pipeline fall behind (beyond 2 MiB the slope from
  // 512 KiB chose a 1.2-1.8x slower variant at 8-32 MiB, p = 4, in 9 of 15
  // probes). The probe times only the three best at 2 MiB there, and only
  // up to kLargePointRanks ranks; beyond, every variant carries its
  // 512 KiB-2 MiB slope on.
  static constexpr int kCalibrationPoints = 11;  // 8 B to 8 MiB, by factors of 4
  static constexpr std::size_t kCalibrationBytes[kCalibrationPoints] = {
      8, 32, 128, 512, 2 << 10, 8 << 10, 32 << 10, 128 << 10, 512 << 10, 2 << 20, 8 << 20};
  static constexpr int kLargePointRanks = 8;
  bool calibrated = false;
  double measured[kVariantCount][kCalibrationPoints] = {};  // seconds at kCalibrationBytes
};
// Predicted seconds for `bytes` over `ranks` ranks: the measured line when
// the model is calibrated, else the alpha-beta-gamma formula.
double predicted_seconds(Variant v, const CostModel& model, std::size_t bytes, int ranks);

// Measured best choices: for `ranks` ranks and sizes up to `max_bytes`.
struct TuningEntry {
  int ranks = 0;
  std::size_t max_bytes = 0;
  Variant variant = Variant::ring;
};
struct Tuning {
  std::optional<CostModel> model;
  std::vector<TuningEntry> entries;  // by ranks, then max_bytes ascending
};
// The tuning file format, one record per line ('#' starts a comment):
//   model <alpha s> <beta s/byte> <gamma s/byte> <overhead s>
//   line <variant name> <seconds at each of CostModel::kCalibrationBytes>
//   best <ranks> <max bytes> <variant name>
// Throws chorus::Error naming the file, line and problem.
Tuning read_tuning(const std::string& path);
void write_tuning(const std::string& path, const Tuning& tuning);

struct Choice {
  Variant variant;
  double predicted_seconds;  // by the model (also for a forced choice)
  const char* reason;        // "forced", "tuning file", "cost model"
};

class Selector {
 public:
  Selector(CostModel model, Tuning tuning = {});
  // `requested` is the caller's algorithm (automatic to choose freely);
  // a forced family is kept, and only its variants are compared.
  Choice choose(Algorithm requested, std::size_t bytes, int ranks) const;
  const CostModel& model() const noexcept { return model_; }

 private:
  CostModel model_;
  Tuning tuning_;
};

// Measures alpha, overhead and beta with steps in which every rank sends and
// receives at once, gamma by reducing, and then times every variant at
// CostModel::kCalibrationBytes (0.35 s at p = 2, about 0.9 s at p = 4 on two
// cores); every rank gets the same model (the slowest rank's variant times,
// rank 0's constants), so that all ranks decide alike. Collective: every
// rank calls it with the same `c`. `with_call_check`: time each call with
// its call check beside it, as the communicator runs calls unless
// CHORUS_CHECK=0.
CostModel probe_cost_model(const Collective& c, bool with_call_check);


}  // namespace chorus::coll

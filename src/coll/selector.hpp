// Which algorithm runs an AllReduce: the choice among its registry rows
// (coll/registry.hpp) by the alpha-beta-gamma model (coll/cost_model.hpp).
//
// A variant is a row, what actually runs; the public Algorithm "direct" has
// two (one-shot and two-shot), chosen by cost like everything else. The
// model is measured at communicator creation by probe_cost_model(), which
// also times each variant (CostModel::measured; those times decide when
// present; the rows' formulas are the fallback), or read from a tuning file
// (CHORUS_TUNING_FILE, written by allreduce_perf --tune). A tuning file may
// also name the measured-best algorithm per rank count and size; such an
// entry wins over the model.
#pragma once

#include <cstddef>

#include "coll/collective.hpp"
#include "coll/cost_model.hpp"

#include <chorus/algorithm.hpp>
#include <chorus/types.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace chorus::coll {

std::string_view to_string(Variant v) noexcept;
// The public Algorithm a variant belongs to (the counters' index).
Algorithm family(Variant v) noexcept;

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

// The automatic choice keeps the ring from kRingPriorBytes unless the model
// predicts another variant kDisplaceRingFactor times faster (selector.cpp).
inline constexpr std::size_t kRingPriorBytes = std::size_t{1} << 20;
inline constexpr double kDisplaceRingFactor = 2.0;

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
// receives at once, gamma by reducing, and then, with `time_variants`,
// times every variant at CostModel::kCalibrationBytes (0.35 s at p = 2,
// 1-2.6 s at p = 3-4 on two cores; without, tens of milliseconds and the
// model is not `calibrated`: the formulas decide). Every rank gets the same
// model (the slowest rank's variant times, rank 0's constants), so that all
// ranks decide alike. Collective: every rank calls it with the same `c` and
// `time_variants`. `with_call_check`: time each call with its call check
// beside it, as the communicator runs calls unless CHORUS_CHECK=0.
CostModel probe_cost_model(const Collective& c, bool with_call_check, bool time_variants = true);

}  // namespace chorus::coll

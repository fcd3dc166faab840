// AllReduce's alpha-beta-gamma cost model: what the selector (selector.hpp)
// decides with, and what each algorithm's cost formula (beside the
// algorithm, named in its registry row) is written in.
//   alpha  seconds per step (one message each way, latency and overhead)
//   beta   seconds per byte moved between two ranks
//   gamma  seconds per byte reduced
//   overhead  seconds each further message sent in the same step adds
//          (messages of one step overlap: a step costs alpha, not alpha
//          per message)
#pragma once

#include <cstddef>
#include <cstdint>

namespace chorus::coll {

// AllReduce's rows of the registry (coll/registry.hpp), by id, in the
// order ties go (the registry's order of preference): the cost model's
// arrays are indexed by them. A new AllReduce algorithm is a new row (and
// kVariantCount one higher); it needs no name here.
enum class Variant : std::uint8_t {
  tree,
  direct_two_shot,
  ring,
  halving_doubling,
  recursive_doubling,
  direct_one_shot,
};
inline constexpr int kVariantCount = 6;

// One level of ranks on several hosts (coll/topology.hpp), as the probe
// measures it: a step in which every rank of the level sends one message
// and receives one at once costs alpha + bytes x beta.
struct LevelCost {
  double alpha = 0, beta = 0;
  bool measured() const noexcept { return alpha > 0; }
};

struct CostModel {
  double alpha = 0, beta = 0, gamma = 0;
  double overhead = 0;  // seconds each further message of one step adds
  // Across hosts of equal rank counts (else unmeasured): a step among each
  // host's ranks, every host at once (unmeasured with one rank per host),
  // and a step among the ranks of one local rank on every host, every local
  // rank at once, so that they share their host's link as the hierarchical
  // algorithms' cross-host stages do. What each level costs a hierarchical
  // call is what its log line reports (registry.hpp hierarchical_levels).
  LevelCost within_host, across_hosts;
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
// An algorithm's predicted seconds for `bytes` on `ranks` ranks.
using CostFormula = double (*)(const CostModel& model, double bytes, int ranks);

// What folding a rank count that is not a power of two costs (fold.hpp):
// the extra ranks hand their whole buffer to a partner, reduced there, and
// get the result back; 0 for a power of two.
double fold_cost(const CostModel& model, double bytes, int ranks);

}  // namespace chorus::coll

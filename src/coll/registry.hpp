// Every algorithm of every collective, one row each, and the one place where
// a call's algorithm is chosen.
//
// A row names an algorithm (the name users force it by: CHORUS_ALGO,
// Options::algorithms, CallOptions::algorithm_name, perf tools' -A), says on
// which rank counts it can run, when the automatic choice prefers it, and
// how to run it. Rows of one collective are contiguous and their order is
// the order of preference; a row's index in the table is its id, carried in
// the call signature so that ranks running different algorithms are told
// so. AllReduce's rows come first, in coll::Variant order, and AllReduce is
// chosen by its measured cost model (coll/selector.hpp) instead of the
// rows' `preferred` thresholds.
//
// Adding an algorithm: its file in coll/ (the algorithm, and for AllReduce
// its cost formula), and its row in registry.cpp (for AllReduce,
// kVariantCount one higher: a static_assert says so). Nothing else names it.
#pragma once

#include "coll/call_check.hpp"
#include "coll/collectives.hpp"
#include "coll/cost_model.hpp"

#include <chorus/algorithm.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace chorus::coll {

class Selector;
class Topology;

// The v-forms' layouts (gatherv's and scatterv's at the root), apart from
// Operands: the common call then carries one null pointer instead of four
// vectors to construct, copy and destroy (a small call's own time is about
// 100 ns).
struct VFormLayouts {
  BlockLayout send_blocks, recv_blocks;
};

// Who holds a call's VFormLayouts. A blocking call borrows a pair of its
// thread's (kept between calls with their vectors' memory: a small v-form
// call made five allocations without them) and gives it back when the call
// ends, on that thread; an async call's queue entry owns a copy
// (Impl::submit_async), since another thread may end it. No use count: a
// shared_ptr's cost every v-form call two locked instructions, about a tenth
// of an 8-byte MPI_Gatherv root's samples (docs/performance.md
// "Twenty-second pass").
struct SpareLayouts;  // a thread's (registry.cpp)
struct VFormLayoutsRelease {
  SpareLayouts* home = nullptr;  // where borrowed layouts go back; null: owned
  void operator()(VFormLayouts* layouts) const noexcept;
};
using VFormLayoutsPtr = std::unique_ptr<VFormLayouts, VFormLayoutsRelease>;
// A pair of this thread's layouts (every vector empty), or new ones where a
// call of this thread still holds them all (a call started from another's
// progress or completion callback).
VFormLayoutsPtr borrow_v_form_layouts();
// An owned copy of `layouts`, or null.
VFormLayoutsPtr own_copy(const VFormLayoutsPtr& layouts);

// One call's buffers and arguments as the algorithms read them, checked by
// the communicator before anything is sent (see core/arguments.hpp for what
// `count` and the layouts mean per collective).
struct Operands {
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  DataType type = DataType::float32;
  ReduceOp op = ReduceOp::sum;
  int root = -1;
  VFormLayoutsPtr layouts;  // null but for the v-forms (at their root)
  // Empty where `layouts` is null (a gather's or scatter's other ranks).
  const BlockLayout& send_blocks() const { return (layouts ? *layouts : no_layouts()).send_blocks; }
  const BlockLayout& recv_blocks() const { return (layouts ? *layouts : no_layouts()).recv_blocks; }

 private:
  static const VFormLayouts& no_layouts() {
    static const VFormLayouts none;
    return none;
  }
};

using AlgorithmId = std::uint8_t;

struct AlgorithmRow {
  AlgorithmId id;
  CollectiveKind kind;
  std::string_view name;
  // Forcing by this name takes the cheapest of the rows sharing it
  // (AllReduce's "direct": one-shot or two-shot); usually the name itself.
  std::string_view family;
  std::string_view summary;  // one line, for --help and docs
  // Whether it runs on p ranks; forcing it where it cannot is an error.
  bool (*runs_on)(int p);
  // The automatic choice takes the first eligible row that prefers a call
  // of `bytes` (choice_bytes()) on p ranks, else the last eligible row.
  // Thresholds measured at p = 4 (docs/tuning.md). Unused for AllReduce.
  bool (*preferred)(std::size_t bytes, int p);
  void (*run)(const Collective& c, const Operands& operands);
  // AllReduce: its alpha-beta-gamma price (cost_model.hpp), beside the
  // algorithm; null for the other collectives.
  CostFormula cost = nullptr;
  // A shared-memory row (coll/shared_memory.hpp): the bytes a rank writes
  // into its slot for a call of choice_bytes() `bytes` on p ranks. It runs
  // only with a host segment whose slots hold that, and is then chosen
  // before every other row. Null for the rows that send messages.
  std::size_t (*host_slot_need)(std::size_t bytes, int p) = nullptr;
  // A hierarchical row (coll/hierarchical.hpp): runs where every host has
  // as many ranks as the others; chosen before the cost model when ranks
  // are on several hosts, several on each, and it prefers the size.
  bool across_hosts = false;
  // A row through each host's own segment, across hosts
  // (shm_hierarchical_allreduce): the bytes it writes into a slot for a
  // call of `bytes`. It runs only where the ranks are on several hosts and
  // every host has a segment whose slots hold that, and is then chosen
  // before every other row while it prefers the size, which it is asked
  // by what a host's leader sends through its link (bytes x its steps,
  // ceil(log2 hosts)).
  // Null for the others.
  std::size_t (*own_host_need)(std::size_t bytes, int p) = nullptr;
};

// From this AllReduce size the hierarchical row is chosen across hosts...
inline constexpr std::size_t kHierarchicalFromBytes = 16 << 10;
// ...when the flat ring would send at least this many times more through
// the busiest host link (its extra stages cost messages and copies: at
// 8 hosts x 2 ranks, a gain of 1.07, it was 5-10% slower than the ring).
inline constexpr double kHierarchicalMinLinkGain = 1.2;

// All rows, by id.
std::span<const AlgorithmRow> registry() noexcept;
// The rows of one collective, in order of preference.
std::span<const AlgorithmRow> rows_of(CollectiveKind kind) noexcept;
// The row whose name or family is `name` (the first of a family), or null.
const AlgorithmRow* find_row(CollectiveKind kind, std::string_view name) noexcept;
// "ring"; "unknown algorithm" for an id no row has (a peer's byte may be anything).
std::string_view algorithm_name(std::uint8_t id) noexcept;
// The names that force a family of `kind`'s rows, each once: AllReduce's in
// the public Algorithm order (ring, tree, direct, ...), the others' in row order.
std::vector<std::string_view> family_names(CollectiveKind kind);
// "auto, ring, bruck": every name forcing accepts for `kind` (families, then
// the rows named apart from their family), for messages.
std::string names_of(CollectiveKind kind);

// The size the thresholds speak of: AllReduce's, broadcast's and reduce's
// buffer; allgather's and alltoall's block per rank; reduce_scatter's whole
// input (all blocks).
std::size_t choice_bytes(CollectiveKind kind, const Operands& operands, int p) noexcept;

struct AlgorithmChoice {
  const AlgorithmRow* row;
  double predicted_seconds;  // AllReduce only (0 for the others)
  const char* reason;  // "forced", "host segment", "host segments", "tuning file", "cost model", "threshold", "only one", "hosts"
};
// What runs a call: `forced` (a name or family of `kind`'s rows; empty or
// "auto" for the automatic choice). `host_slot_bytes`: the slot size of the
// communicator's host segment, none without one. A shared-memory row that
// fits is chosen first; otherwise AllReduce asks `allreduce_selector`.
// Throws Error(invalid_argument) for an unknown name, and for a forced row
// that cannot run on p ranks (or without a host segment, or beyond its
// slots, or a hierarchical one on hosts of unequal rank counts), naming
// both. `topology`: which ranks share hosts (null: one host); a
// hierarchical row that prefers the size is chosen when there are several
// hosts with several ranks on each ("hosts"). `own_host_slot_bytes`: the
// slot size of the per-host segments of a communicator across hosts (none
// without them); a row through them that fits and prefers the size is
// chosen before that ("host segments").
AlgorithmChoice choose_algorithm(CollectiveKind kind, std::string_view forced, std::size_t bytes,
                                 int p, const Selector& allreduce_selector,
                                 std::optional<std::size_t> host_slot_bytes = std::nullopt,
                                 const Topology* topology = nullptr,
                                 std::optional<std::size_t> own_host_slot_bytes = std::nullopt);

// Whether a host segment of `host_slot_bytes` slots takes every automatic
// AllReduce of p ranks (up to the 2 GiB a stream's size word holds), so that
// choose_algorithm() never asks the selector for one.
bool host_segment_takes_every_allreduce(std::size_t host_slot_bytes, int p);

// What each level of hosts costs a hierarchical call of `kind` (its
// choice_bytes `bytes`), by the levels the probe measured (CostModel::
// within_host, across_hosts): the steps and the bytes each rank exchanges
// within its host and across hosts, each level's time on its own (the
// pipelined algorithms overlap them; the larger one is what the call
// waits for). None where a level it needs was not measured, or `kind` has
// no hierarchical row. For the log line of the choice.
struct LevelSplit {
  double within_host = 0, across_hosts = 0;  // seconds
};
std::optional<LevelSplit> hierarchical_levels(CollectiveKind kind, const CostModel& model,
                                              const Topology& topology, std::size_t bytes);

}  // namespace chorus::coll

#include "coll/registry.hpp"

#include "coll/direct.hpp"
#include "coll/halving_doubling.hpp"
#include "coll/hierarchical.hpp"
#include "coll/recursive_doubling.hpp"
#include "coll/ring.hpp"
#include "coll/selector.hpp"
#include "coll/shared_memory.hpp"
#include "coll/topology.hpp"
#include "coll/tree.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <bit>
#include <iterator>
#include <vector>

namespace chorus::coll {
namespace {

using K = CollectiveKind;

bool any_p(int) { return true; }
bool power_of_two(int p) { return p > 0 && (p & (p - 1)) == 0; }
bool never(std::size_t, int) { return false; }
bool always(std::size_t, int) { return true; }

// ---- the thresholds of the automatic choice (measured at p = 4; docs/tuning.md)

// Below this many bytes per rank Bruck's fewer steps win over the ring's
// fewer copies.
bool allgather_bruck_preferred(std::size_t block_bytes, int p) {
  return p > 2 && block_bytes < 32 * 1024;
}
// From 4 ranks, while a rank sends at most 16 KiB in all (also measured at p = 8).
bool alltoall_bruck_preferred(std::size_t block_bytes, int p) {
  return p >= 4 && block_bytes <= 16 * 1024 / static_cast<std::size_t>(p);
}
// From here every link carrying the buffer once beats log2(p) whole copies.
bool broadcast_chain_preferred(std::size_t bytes, int p) { return p > 2 && bytes >= 256 * 1024; }
// From here the shared reduction and (p - 1) / p traffic beat the tree's fewer steps.
bool reduce_scatter_gather_preferred(std::size_t bytes, int p) {
  return p > 2 && bytes >= 1024 * 1024;
}
// While the whole input is below this, log2(p) steps beat the ring's p - 1.
bool reduce_scatter_halving_preferred(std::size_t total_bytes, int p) {
  return p > 2 && total_bytes < 64 * 1024;
}

// While every rank reading every other slot whole costs less than
// two-shot's second step and copy out. One-shot reads (p - 1) whole
// buffers from its peers, two-shot 2 (p - 1) / p of one. Since one-shot
// reduces its own input from where it is (twentieth pass) the edge is 64
// KiB at every p (it was 8 KiB at p = 2): p = 2, auto, this build against
// the one before (which ran two-shot past 8 KiB), 3 alternating runs, out
// of place: 16 KiB 1.44x as fast, 32 KiB 1.23x, 64 KiB 1.08x. From 128 to
// 512 KiB the two are level, either one ahead with the machine's state
// (forced, two-shot / one-shot, medians of two series of 3 runs: 128 KiB
// 0.95 and 1.12, 256 KiB 1.00 and 1.05, 512 KiB 0.94 and 1.06; one-shot
// chosen up to 512 KiB ran 0.90-0.95x as fast as two-shot in a third), so
// two-shot stays there. p = 3: 64 KiB 1.16 and 1.23, 128 KiB 0.84 and
// 0.97; p = 4: 64 KiB 1.04 and 1.05, 128 KiB 0.85 and 0.84
// (docs/performance.md "Twentieth pass"). (p = 8, seventh pass: 64 KiB
// 107 against 158.)
bool shm_one_shot_preferred(std::size_t bytes, int) { return bytes <= 64 * std::size_t{1024}; }
// Two-shot from one-shot's edge, at every p and size (in rounds through its
// slot beyond it). Since a rank's own chunk stays out of its slot it beats
// the ring at p = 2 too, and in place by more (the ring's in-place pass
// lands in scratch and copies over): allreduce_perf -A shm_two_shot / ring,
// alternating, 2 runs, out of place / in place, us: p = 2, 2 MiB 289-575 /
// 305-334 against 371-386 / 458-509, 32 MiB 6435-7501 / 5282-5879 against
// 12164-13650 / 10783-12433; p = 4, 2 MiB 817-1344 / 715-1180 against
// 1402-1403 / 1578-1759, 32 MiB 15968-17481 / 12143-12518 against
// 33606-33630 / 33368-36582 (docs/performance.md "Eighth pass").
bool shm_two_shot_preferred(std::size_t, int) { return true; }

// Broadcast, reduce and allgather go through the segment at every size
// (streamed in chunks, beyond a slot through it as through a ring buffer:
// shm_streamed_need()). Allgather: two copies in user space beat the
// ring's one cross-memory copy (allgather_perf -A ring / shm, p = 2: 64
// MiB 6.4-8.3 ms against 8.2-10.4, 16 MiB 1.0-1.2 against 1.6-1.8, even at
// 1 MiB; p = 4: 64 MiB 12.4-14.8 against 21.5-25.9). Broadcast and reduce:
// the writers return at once and the copies in and
// out overlap, so it beat every message algorithm at every size measured
// (allreduce_perf -A all, float, p = 2: broadcast 44 us against
// binomial_tree's 101 at 1 MiB, 3.3 ms against 5.8 at 64 MiB; reduce 40
// against 167 at 1 MiB, 4.5 ms against reduce_scatter_gather's 15.6 at 64
// MiB; p = 4: broadcast 8.5 ms against 16.7 at 64 MiB, reduce 15.6 against
// 27.8).
// Reduce-scatter of `bytes` in all: through the segment while the input
// fits a slot, at every p. Since a rank's own block stays out of its slot
// (and the copies go in pieces) it beats the ring at p = 2 too, where one
// cross-memory copy of half the input each way had won from 1 MiB:
// reduce_scatter_perf --np 2 -A shm / ring, 3 runs, out of place us: 1 MiB
// 37-45 against 51-73, 2 MiB 78-86 against 116-153 (in place 32-37 / 68-81
// against 74-89 / 146-182; docs/performance.md "Eighth pass").
bool shm_reduce_scatter_preferred(std::size_t, int) { return true; }

// Across hosts (several ranks on each), from this size the hierarchical
// AllReduce's traffic (the link bound) beats every flat algorithm
// (measured in scripts/netlab's lab: docs/performance.md).
bool hierarchical_preferred(std::size_t bytes, int) { return bytes >= kHierarchicalFromBytes; }
// Across hosts, through each host's own segment (shm_hierarchical_allreduce),
// by what a leader sends through its link (the buffer once per step of its
// recursive doubling): fewer steps across the links than the flat
// algorithms' log2 p and the pipelined hierarchical row's win while that is
// small. At 2 hosts it is the link bound itself (measured in the lab,
// docs/performance.md "Many hosts": 32 KiB 272-274 us against
// hierarchical's 326-578).
bool hierarchical_shm_preferred(std::size_t link_bytes, int) { return link_bytes <= 32 << 10; }
// Reduce-scatter, by its whole input: measured in the 2 x 2 lab at 1 Gbit/s
// (against the flat ring, ms): 64 KiB 0.44-0.48 against 0.39-0.43, 512 KiB
// 2.07 against 3.03-3.11 (the link bound: 2.1), 4-32 MiB within noise of
// the ring (docs/performance.md "Many hosts").
bool hierarchical_reduce_scatter_preferred(std::size_t bytes, int) { return bytes >= (256 << 10); }
// Broadcast and reduce: where the flat chain and reduce-scatter-gather
// take over from the trees (whose link loads are the hierarchical rows'
// at 2 x 2: the same times in the lab, docs/performance.md "Many hosts").
bool hierarchical_broadcast_preferred(std::size_t bytes, int p) {
  return broadcast_chain_preferred(bytes, p);
}
bool hierarchical_reduce_preferred(std::size_t bytes, int p) {
  return reduce_scatter_gather_preferred(bytes, p);
}
// Allgather: by all p blocks, the same.
bool hierarchical_allgather_preferred(std::size_t block_bytes, int p) {
  return block_bytes * static_cast<std::size_t>(p) >= kHierarchicalFromBytes;
}

// How many times more a flat ring sends through the busiest host link than
// the hierarchical row: AllReduce's ring (in host order: one edge leaves
// each host) sends 2(p-1)/p of the buffer along it, the hierarchical
// 2(H-1)/H through each link; allgather's and reduce-scatter's rings p - 1
// blocks per edge, the hierarchical L(H-1). Broadcast's flat chain sends
// the buffer once per such edge, the hierarchical once per link; reduce's
// reduce-scatter-gather (p-1)/p of it per edge and, into the root's host,
// the blocks of the ranks elsewhere ((H-1)/H), the hierarchical the buffer
// once. (AllReduce at 2 hosts x 2: 1.5, at 8 x 2: 1.07; broadcast on
// consecutive ranks 1, interleaved on 2 hosts 2; reduce at 2 x 2 1.25.)
double hierarchical_link_gain(CollectiveKind kind, const Topology& t) {
  const double p = t.size(), hosts = t.hosts(), per_host = t.local_size(0);
  const double edges = t.ring_edges_leaving_a_host();
  if (kind == K::allgather || kind == K::reduce_scatter)
    return edges * (p - 1) / (per_host * (hosts - 1));
  if (kind == K::broadcast) return edges;
  if (kind == K::reduce) return edges * (p - 1) / p + (hosts - 1) / hosts;
  // AllReduce's ring runs in host order (ring.cpp): it leaves each host once.
  return (2 * (p - 1) / p) / (2 * (hosts - 1) / hosts);
}

// ---- what a shared-memory row writes into its slot, for a call of
// choice_bytes() `bytes` on p ranks (it runs while that fits CHORUS_SHM_BYTES)

std::size_t whole(std::size_t bytes, int) { return bytes; }
std::size_t every_block(std::size_t block_bytes, int p) {
  return block_bytes * static_cast<std::size_t>(p);
}
std::size_t nothing(std::size_t, int) { return 0; }

// Gather and scatter go through the host segment while a block is at most
// 64 KiB (as the v-forms' blocks: shm_gatherv()): beyond, the transport's
// cross-memory attach (one copy, where the segment costs two, one after the
// other) was faster (p = 2: allgather of 1 MiB 110 us by ring against 142
// us; alltoall 99 us against 176 us, before both streamed). Up to there the
// segment wins: 64 KiB blocks through libchorus_pmpi, 3 alternating runs,
// us, segment against linear (Open MPI alone): p = 2 gather 3.6-3.9
// against 9.7-10.7 (7.2-8.3), scatter 3.2-3.8 against 9.7-11.0 (6.2-7.3);
// p = 4 gather 14.6-29 against 34-38 (29-43), scatter 14-17 against 33-76
// (23-25) (docs/performance.md "Twelfth pass").
bool small_blocks(std::size_t block_bytes, int) { return block_bytes <= 64 * 1024; }
// Alltoall streams through the segment beyond that (shm_alltoall_need()),
// and beats pairwise's cross-memory copies (alltoall_perf -A pairwise /
// shm, p = 2, two runs: 256 KiB 16-17 us against 23-33, 16 MiB 1.2-1.3 ms
// against 1.2-1.9, 64 MiB 5.8-7.9 against 7.9-10.3; p = 4 on 2 cores, eight
// runs: 64 MiB 18-36 ms against 20-31, medians 20 against 23; three of
// them with --mpi: 256 KiB 92 us against 161, 16 MiB 4.6 ms against 7.9).

// ---- how each row runs a call

template <void (*Algorithm)(const Collective&, const void*, void*, std::size_t, DataType, ReduceOp)>
void allreduce(const Collective& c, const Operands& o) {
  Algorithm(c, o.send, o.recv, o.count, o.type, o.op);
}

// Gather's and scatter's p blocks of `count` at the root (none elsewhere):
// made by the rows that need them, since a call carries layouts only for
// the v-forms (three allocations a call, which the segment's rows never read).
BlockLayout uniform_at_root(const Collective& c, const Operands& o) {
  return c.transport.rank() == o.root ? BlockLayout::uniform(c.transport.size(), o.count)
                                      : BlockLayout{};
}

std::vector<std::size_t> equal_counts(const Collective& c, std::size_t count) {
  return std::vector<std::size_t>(static_cast<std::size_t>(c.transport.size()), count);
}

constexpr AlgorithmRow kRows[] = {
    // AllReduce, in Variant order (ties go to the earlier); chosen by the
    // cost model (selector.hpp), each priced by its formula when the probe
    // has not measured it.
    {0, K::allreduce, "tree", "tree", "double binary tree, pipelined", any_p, never,
     allreduce<tree_allreduce>, tree_cost},
    {1, K::allreduce, "direct_two_shot", "direct",
     "all-to-all reduce-scatter, then all-to-all allgather", any_p, never,
     allreduce<direct_two_shot_allreduce>, direct_two_shot_cost},
    {2, K::allreduce, "ring", "ring", "reduce-scatter + allgather around a ring, pipelined", any_p,
     never, allreduce<ring_allreduce>, ring_cost},
    {3, K::allreduce, "halving_doubling", "halving_doubling",
     "recursive halving + doubling (Rabenseifner), odd ranks folded", any_p, never,
     allreduce<halving_doubling_allreduce>, halving_doubling_cost},
    {4, K::allreduce, "recursive_doubling", "recursive_doubling",
     "pairwise exchange of the whole buffer, log2 p steps", any_p, never,
     allreduce<recursive_doubling_allreduce>, recursive_doubling_cost},
    {5, K::allreduce, "direct_one_shot", "direct", "every rank sends its whole buffer to all",
     any_p, never, allreduce<direct_one_shot_allreduce>, direct_one_shot_cost},
    // Not Variants: chosen before the cost model whenever they fit a slot.
    {6, K::allreduce, "shm_one_shot", "shm",
     "each rank's buffer in its slot of the host segment; every rank reduces all, in rank order",
     any_p, shm_one_shot_preferred, shm_one_shot_allreduce, nullptr, whole},
    {7, K::allreduce, "shm_two_shot", "shm",
     "each rank's buffer in its slot; rank r reduces chunk r of all, then all copy the chunks",
     any_p, shm_two_shot_preferred, shm_two_shot_allreduce, nullptr, shm_two_shot_need},
    // Not a Variant either: chosen before the cost model when the ranks are
    // on several hosts, the same number on each and more than one.
    {8, K::allreduce, "hierarchical", "hierarchical",
     "reduce-scatter within each host, AllReduce of each shard across hosts, allgather within",
     any_p, hierarchical_preferred, allreduce<hierarchical_allreduce>, nullptr, nullptr, true},

    // Not a Variant: chosen first across hosts while it fits the slots of
    // each host's own segment and prefers the size.
    {9, K::allreduce, "hierarchical_shm", "hierarchical",
     "each host's ranks through their host's segment, one message between host leaders",
     any_p, hierarchical_shm_preferred, shm_hierarchical_allreduce, nullptr, nullptr, false,
     shm_hierarchical_need},

    {10, K::broadcast, "shm", "shm", "the root's buffer through its slot of the host segment",
     any_p, always, shm_broadcast, nullptr, shm_streamed_need},
    {11, K::broadcast, "chain", "chain", "segments passed along the ring from the root", any_p,
     broadcast_chain_preferred,
     [](const Collective& c, const Operands& o) {
       broadcast_chain(c, o.recv, o.count, o.type, o.root);
     }},
    {12, K::broadcast, "binomial_tree", "binomial_tree", "binomial tree of the whole buffer",
     any_p, never,
     [](const Collective& c, const Operands& o) {
       broadcast_binomial(c, o.recv, o.count, o.type, o.root);
     }},
    {13, K::broadcast, "hierarchical", "hierarchical",
     "shards along a chain of hosts by local rank, then within each host", any_p,
     hierarchical_broadcast_preferred,
     [](const Collective& c, const Operands& o) {
       hierarchical_broadcast(c, o.recv, o.count, o.type, o.root);
     },
     nullptr, nullptr, true},

    {14, K::reduce, "shm", "shm", "every slot of the host segment reduced at the root, in rank order",
     any_p, always, shm_reduce, nullptr, shm_streamed_need},
    {15, K::reduce, "reduce_scatter_gather", "reduce_scatter_gather",
     "ring reduce-scatter, then a gather at the root", any_p, reduce_scatter_gather_preferred,
     [](const Collective& c, const Operands& o) {
       reduce_scatter_gather(c, o.send, o.recv, o.count, o.type, o.op, o.root);
     }},
    {16, K::reduce, "binomial_tree", "binomial_tree", "binomial tree towards the root, segmented",
     any_p, never,
     [](const Collective& c, const Operands& o) {
       reduce_binomial(c, o.send, o.recv, o.count, o.type, o.op, o.root);
     }},
    {17, K::reduce, "hierarchical", "hierarchical",
     "within each host by shard, the shards' partials along a chain of hosts to the root's",
     any_p, hierarchical_reduce_preferred,
     [](const Collective& c, const Operands& o) {
       hierarchical_reduce(c, o.send, o.recv, o.count, o.type, o.op, o.root);
     },
     nullptr, nullptr, true},

    {18, K::allgather, "shm", "shm", "every block through its rank's slot of the host segment",
     any_p, always, shm_allgather, nullptr, shm_streamed_need},
    {19, K::allgather, "bruck", "bruck", "Bruck: ceil(log2 p) steps of growing block sets",
     any_p, allgather_bruck_preferred,
     [](const Collective& c, const Operands& o) {
       allgather_bruck(c, o.send, o.recv, o.count, o.type);
     }},
    {20, K::allgather, "ring", "ring", "each block passed once around the ring", any_p, never,
     [](const Collective& c, const Operands& o) {
       allgatherv(c, o.send, o.recv, BlockLayout::uniform(c.transport.size(), o.count), o.type);
     }},
    {21, K::allgather, "hierarchical", "hierarchical",
     "across hosts by local rank, then within each host", any_p, hierarchical_allgather_preferred,
     [](const Collective& c, const Operands& o) {
       hierarchical_allgather(c, o.send, o.recv, o.count, o.type);
     },
     nullptr, nullptr, true},

    {22, K::reduce_scatter, "shm", "shm",
     "every rank reduces its block from all slots of the host segment", any_p,
     shm_reduce_scatter_preferred, shm_reduce_scatter, nullptr, whole},
    {23, K::reduce_scatter, "hierarchical", "hierarchical",
     "within each host by local rank, then each block's host partials across hosts", any_p,
     hierarchical_reduce_scatter_preferred,
     [](const Collective& c, const Operands& o) {
       hierarchical_reduce_scatter(c, o.send, o.recv, o.count, o.type, o.op);
     },
     nullptr, nullptr, true},
    {24, K::reduce_scatter, "recursive_halving", "recursive_halving",
     "recursive halving: log2 p steps (p a power of two)", power_of_two,
     reduce_scatter_halving_preferred,
     [](const Collective& c, const Operands& o) {
       reduce_scatter_halving(c, o.send, o.recv, equal_counts(c, o.count), o.type, o.op);
     }},
    {25, K::reduce_scatter, "ring", "ring", "partial sums passed around the ring", any_p, never,
     [](const Collective& c, const Operands& o) {
       reduce_scatter_ring(c, o.send, o.recv, equal_counts(c, o.count), o.type, o.op);
     }},

    {26, K::alltoall, "shm", "shm", "every rank's blocks through its slot of the host segment",
     any_p, always, shm_alltoall, nullptr, shm_alltoall_need},
    {27, K::alltoall, "bruck", "bruck", "Bruck: ceil(log2 p) steps, blocks packed per step",
     any_p, alltoall_bruck_preferred,
     [](const Collective& c, const Operands& o) {
       alltoall_bruck(c, o.send, o.recv, o.count, o.type);
     }},
    {28, K::alltoall, "pairwise", "pairwise", "every pair exchanges once, all posted at once",
     any_p, never,
     [](const Collective& c, const Operands& o) {
       alltoall_pairwise(c, o.send, o.recv, o.count, o.type);
     }},

    {29, K::barrier, "shm", "shm", "a flag per rank in the host segment", any_p, always,
     shm_barrier, nullptr, nothing},
    {30, K::barrier, "dissemination", "dissemination", "ceil(log2 p) rounds of empty messages",
     any_p, never, [](const Collective& c, const Operands&) { barrier(c); }},

    {31, K::allgatherv, "shm", "shm",
     "every block through its rank's slot of the host segment (streamed beyond 64 KiB)", any_p,
     always, shm_allgatherv, nullptr, shm_allgatherv_need},
    {32, K::allgatherv, "ring", "ring", "each block passed once around the ring", any_p, never,
     [](const Collective& c, const Operands& o) {
       allgatherv(c, o.send, o.recv, o.recv_blocks(), o.type);
     }},

    {33, K::reduce_scatter_v, "shm", "shm",
     "every rank reduces its block from all slots of the host segment", any_p,
     shm_reduce_scatter_preferred, shm_reduce_scatter_v, nullptr, whole},
    {34, K::reduce_scatter_v, "recursive_halving", "recursive_halving",
     "recursive halving: log2 p steps (p a power of two)", power_of_two,
     reduce_scatter_halving_preferred,
     [](const Collective& c, const Operands& o) {
       reduce_scatter_halving(c, o.send, o.recv, o.recv_blocks().counts, o.type, o.op);
     }},
    {35, K::reduce_scatter_v, "ring", "ring", "partial sums passed around the ring", any_p, never,
     [](const Collective& c, const Operands& o) {
       reduce_scatter_ring(c, o.send, o.recv, o.recv_blocks().counts, o.type, o.op);
     }},

    {36, K::alltoallv, "shm", "shm",
     "blocks up to 64 KiB through the slots of the host segment, larger ones as messages", any_p,
     always, shm_alltoallv, nullptr, shm_block_table_need},
    {37, K::alltoallv, "pairwise", "pairwise", "every pair exchanges once, all posted at once",
     any_p, never,
     [](const Collective& c, const Operands& o) {
       alltoallv(c, o.send, o.send_blocks(), o.recv, o.recv_blocks(), o.type);
     }},

    {38, K::gather, "shm", "shm", "the root reads every rank's slot of the host segment", any_p,
     small_blocks, shm_gather, nullptr, whole},
    {39, K::gather, "linear", "linear", "the root receives from every rank at once", any_p, never,
     [](const Collective& c, const Operands& o) {
       gatherv(c, o.send, o.count, o.recv, uniform_at_root(c, o), o.type, o.root);
     }},
    {40, K::gatherv, "shm", "shm",
     "blocks up to 64 KiB through the slots of the host segment, larger ones as messages", any_p,
     always, shm_gatherv, nullptr, nothing},
    {41, K::gatherv, "linear", "linear", "the root receives from every rank at once", any_p, never,
     [](const Collective& c, const Operands& o) {
       gatherv(c, o.send, o.count, o.recv, o.recv_blocks(), o.type, o.root);
     }},
    {42, K::scatter, "shm", "shm", "every rank reads its block from the root's slot", any_p,
     small_blocks, shm_scatter, nullptr, every_block},
    {43, K::scatter, "linear", "linear", "the root sends to every rank at once", any_p, never,
     [](const Collective& c, const Operands& o) {
       scatterv(c, o.send, uniform_at_root(c, o), o.recv, o.count, o.type, o.root);
     }},
    {44, K::scatterv, "shm", "shm",
     "blocks up to 64 KiB through the root's slot of the host segment, larger ones as messages",
     any_p, always, shm_scatterv, nullptr, shm_block_table_need},
    {45, K::scatterv, "linear", "linear", "the root sends to every rank at once", any_p, never,
     [](const Collective& c, const Operands& o) {
       scatterv(c, o.send, o.send_blocks(), o.recv, o.count, o.type, o.root);
     }},
};

constexpr bool ids_are_indices_and_kinds_in_order() {
  for (std::size_t i = 0; i < std::size(kRows); ++i)
    if (kRows[i].id != i || (i > 0 && kRows[i].kind < kRows[i - 1].kind)) return false;
  return true;
}
static_assert(ids_are_indices_and_kinds_in_order(),
              "a row's id is its index, and a collective's rows are contiguous");
// (By family: a sanitized build cannot compare function pointers at compile
// time. tests/coll/test_registry.cpp checks which rows carry a formula.)
constexpr bool is_variant_row(const AlgorithmRow& row) {
  return row.kind == K::allreduce && row.family != "shm" && row.family != "hierarchical";
}
constexpr bool allreduce_rows_are_variants() {
  int rows = 0;
  for (const AlgorithmRow& row : kRows) rows += is_variant_row(row);
  for (int i = 0; i < kVariantCount; ++i)
    if (!is_variant_row(kRows[i])) return false;
  return rows == kVariantCount && kRows[static_cast<int>(Variant::ring)].name == "ring" &&
         kRows[static_cast<int>(Variant::direct_one_shot)].name == "direct_one_shot";
}
static_assert(allreduce_rows_are_variants(),
              "AllReduce's rows come first, kVariantCount of them (each with its cost "
              "formula), in Variant order");

}  // namespace

std::span<const AlgorithmRow> registry() noexcept { return kRows; }

std::span<const AlgorithmRow> rows_of(CollectiveKind kind) noexcept {
  const auto* first = std::find_if(std::begin(kRows), std::end(kRows),
                                   [&](const AlgorithmRow& r) { return r.kind == kind; });
  const auto* last = std::find_if(first, std::end(kRows),
                                  [&](const AlgorithmRow& r) { return r.kind != kind; });
  return {first, last};
}

const AlgorithmRow* find_row(CollectiveKind kind, std::string_view name) noexcept {
  for (const AlgorithmRow& row : rows_of(kind))
    if (row.name == name || row.family == name) return &row;
  return nullptr;
}

std::string_view algorithm_name(std::uint8_t id) noexcept {
  return id < std::size(kRows) ? kRows[id].name : "unknown algorithm";
}

std::vector<std::string_view> family_names(CollectiveKind kind) {
  std::vector<std::string_view> names;
  if (kind == CollectiveKind::allreduce) {  // the public Algorithm's order
    for (int a = 1; a < kAlgorithmCount; ++a) names.push_back(to_string(static_cast<Algorithm>(a)));
    return names;
  }
  for (const AlgorithmRow& row : rows_of(kind))
    if (std::find(names.begin(), names.end(), row.family) == names.end())
      names.push_back(row.family);
  return names;
}

std::string names_of(CollectiveKind kind) {
  std::vector<std::string_view> names{"auto"};
  for (std::string_view family : family_names(kind)) names.push_back(family);
  for (const AlgorithmRow& row : rows_of(kind))
    if (row.family != row.name) names.push_back(row.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

std::size_t choice_bytes(CollectiveKind kind, const Operands& o, int p) noexcept {
  const std::size_t bytes = o.count * size_of(o.type);
  return kind == CollectiveKind::reduce_scatter ? bytes * static_cast<std::size_t>(p) : bytes;
}

AlgorithmChoice choose_algorithm(CollectiveKind kind, std::string_view forced, std::size_t bytes,
                                 int p, const Selector& allreduce_selector,
                                 std::optional<std::size_t> host_slot_bytes,
                                 const Topology* topology,
                                 std::optional<std::size_t> own_host_slot_bytes) {
  auto fits_host = [&](const AlgorithmRow& r) {
    return r.host_slot_need != nullptr && host_slot_bytes &&
           r.host_slot_need(bytes, p) <= *host_slot_bytes;
  };
  auto fits_own_host = [&](const AlgorithmRow& r) {
    return r.own_host_need != nullptr && own_host_slot_bytes && topology != nullptr &&
           r.own_host_need(bytes, p) <= *own_host_slot_bytes;
  };
  const AlgorithmRow* row = nullptr;
  if (!forced.empty() && forced != "auto") {
    row = find_row(kind, forced);
    if (row == nullptr)
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("{}: no algorithm '{}' (it has: {})", to_string(kind), forced,
                              names_of(kind)));
    if (!row->runs_on(p))
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("{}: algorithm {} cannot run on {} ranks ({})", to_string(kind),
                              row->name, p, row->summary));
    if (row->host_slot_need != nullptr) {
      if (!host_slot_bytes)
        throw Error(ErrorCode::invalid_argument,
                    fmt::format("{}: algorithm {} needs every rank on one host (a host segment; "
                                "CHORUS_SHM=1), and this communicator has none",
                                to_string(kind), row->name));
      // A family name ("shm") takes its preferred row that fits, else any that fits.
      const AlgorithmRow* fitting = nullptr;
      for (const AlgorithmRow& r : rows_of(kind))
        if ((r.name == forced || r.family == forced) && fits_host(r)) {
          if (r.preferred(bytes, p)) return {&r, 0, "forced"};
          if (fitting == nullptr) fitting = &r;
        }
      if (fitting != nullptr) return {fitting, 0, "forced"};
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("{}: algorithm {} writes {} bytes per rank here, more than the "
                              "host segment's {}-byte slots (CHORUS_SHM_BYTES)",
                              to_string(kind), row->name, row->host_slot_need(bytes, p),
                              *host_slot_bytes));
    }
  }
  if (row != nullptr && row->own_host_need != nullptr) {
    if (!own_host_slot_bytes)
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("{}: algorithm {} needs ranks on several hosts, each host's ranks "
                              "sharing a segment (CHORUS_SHM=1), and this communicator has none",
                              to_string(kind), row->name));
    if (!fits_own_host(*row))
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("{}: algorithm {} writes {} bytes per rank here, more than the "
                              "per-host segments' {}-byte slots",
                              to_string(kind), row->name, row->own_host_need(bytes, p),
                              *own_host_slot_bytes));
    return {row, 0, "forced"};
  }
  if (row != nullptr && row->across_hosts) {
    if (topology != nullptr && !topology->uniform())
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("{}: algorithm {} needs the same number of ranks on every host; "
                              "this communicator has {}",
                              to_string(kind), row->name, topology->describe()));
    return {row, 0, "forced"};
  }
  if (row == nullptr)
    for (const AlgorithmRow& r : rows_of(kind))
      if (fits_host(r) && r.preferred(bytes, p)) return {&r, 0, "host segment"};
  if (row == nullptr)
    for (const AlgorithmRow& r : rows_of(kind))
      if (fits_own_host(r) &&
          r.preferred(bytes * std::bit_width(static_cast<unsigned>(topology->hosts() - 1)), p))
        return {&r, 0, "host segments"};
  const bool hosts_share_work = topology != nullptr && topology->hosts() > 1 &&
                                topology->uniform() && topology->local_size(0) > 1 &&
                                hierarchical_link_gain(kind, *topology) >= kHierarchicalMinLinkGain;
  if (row == nullptr && hosts_share_work)
    for (const AlgorithmRow& r : rows_of(kind))
      if (r.across_hosts && r.preferred(bytes, p)) return {&r, 0, "hosts"};
  if (kind == CollectiveKind::allreduce) {
    // A family is compared among its own rows by the cost model; a single
    // row of a family ("direct_one_shot") is taken as it is.
    Algorithm requested = Algorithm::automatic;
    if (row != nullptr) requested = parse_algorithm(row->family).value_or(Algorithm::automatic);
    if (row != nullptr && forced != row->family) {
      const auto variant = static_cast<Variant>(row->id);
      return {row, predicted_seconds(variant, allreduce_selector.model(), bytes, p), "forced"};
    }
    const Choice c = allreduce_selector.choose(requested, bytes, p);
    return {&kRows[static_cast<std::size_t>(c.variant)], c.predicted_seconds, c.reason};
  }
  if (row != nullptr) return {row, 0, "forced"};
  const auto rows = rows_of(kind);
  const auto messaging = std::count_if(rows.begin(), rows.end(), [](const AlgorithmRow& r) {
    return r.host_slot_need == nullptr;
  });
  const char* reason = messaging == 1 ? "only one" : "threshold";
  const AlgorithmRow* fallback = nullptr;
  for (const AlgorithmRow& r : rows) {
    if (!r.runs_on(p) || r.host_slot_need != nullptr || r.own_host_need != nullptr ||
        r.across_hosts)
      continue;
    if (r.preferred(bytes, p)) return {&r, 0, reason};
    fallback = &r;
  }
  if (fallback == nullptr)
    throw Error(ErrorCode::internal,
                fmt::format("{}: no algorithm runs on {} ranks", to_string(kind), p));
  return {fallback, 0, reason};
}

bool host_segment_takes_every_allreduce(std::size_t host_slot_bytes, int p) {
  // A row's need grows with the size: what fits at the largest fits below.
  constexpr std::size_t largest = (std::size_t{1} << 31) - 1;
  for (const AlgorithmRow& r : rows_of(CollectiveKind::allreduce))
    if (r.host_slot_need != nullptr && r.runs_on(p) && r.preferred(largest, p) &&
        r.host_slot_need(largest, p) <= host_slot_bytes)
      return true;
  return false;
}

std::optional<LevelSplit> hierarchical_levels(CollectiveKind kind, const CostModel& model,
                                              const Topology& topology, std::size_t bytes) {
  if (topology.hosts() < 2 || !topology.uniform() || !model.across_hosts.measured())
    return std::nullopt;
  const double L = topology.local_size(0), H = topology.hosts(), N = static_cast<double>(bytes);
  if (L > 1 && !model.within_host.measured()) return std::nullopt;
  const LevelCost& w = model.within_host;
  const LevelCost& a = model.across_hosts;
  // Steps and bytes per rank within the host, then across hosts.
  double within_steps = 0, within_bytes = 0, across_steps = 0, across_bytes = 0;
  switch (kind) {
    case K::allreduce:  // reduce-scatter + allgather within; the same of a shard across
      within_steps = 2 * (L - 1), within_bytes = 2 * (L - 1) / L * N;
      across_steps = 2 * (H - 1), across_bytes = 2 * (H - 1) / H * N / L;
      break;
    case K::allgather:  // N: one block
      within_steps = L - 1, within_bytes = (L - 1) * H * N;
      across_steps = H - 1, across_bytes = (H - 1) * N;
      break;
    case K::reduce_scatter:  // N: every block
      within_steps = L - 1, within_bytes = (L - 1) * H * N / (L * H);
      across_steps = H - 1, across_bytes = (H - 1) * N / (L * H);
      break;
    case K::broadcast:
    case K::reduce:  // a shard each within the host; a chain of hosts
      within_steps = L - 1, within_bytes = (L - 1) / L * N;
      across_steps = H - 1, across_bytes = N / L;
      break;
    default:
      return std::nullopt;
  }
  return LevelSplit{within_steps * w.alpha + within_bytes * w.beta,
                    across_steps * a.alpha + across_bytes * a.beta};
}

// The pairs a thread's blocking calls borrow: rarely more than one out at
// a time, so a few are kept and the rest freed.
struct SpareLayouts {
  std::array<std::unique_ptr<VFormLayouts>, 4> kept;
  std::size_t count = 0;
};

void VFormLayoutsRelease::operator()(VFormLayouts* layouts) const noexcept {
  if (home == nullptr || home->count == home->kept.size()) {
    delete layouts;
    return;
  }
  home->kept[home->count++].reset(layouts);
}

VFormLayoutsPtr borrow_v_form_layouts() {
  thread_local SpareLayouts spares;
  if (spares.count == 0) return VFormLayoutsPtr(new VFormLayouts, VFormLayoutsRelease{&spares});
  VFormLayoutsPtr layouts(spares.kept[--spares.count].release(), VFormLayoutsRelease{&spares});
  for (BlockLayout* b : {&layouts->send_blocks, &layouts->recv_blocks}) b->counts.clear(), b->displs.clear();
  return layouts;
}

VFormLayoutsPtr own_copy(const VFormLayoutsPtr& layouts) {
  return layouts ? VFormLayoutsPtr(new VFormLayouts(*layouts)) : VFormLayoutsPtr();
}

}  // namespace chorus::coll

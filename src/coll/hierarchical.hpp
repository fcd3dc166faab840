// Hierarchical AllReduce, for ranks on several hosts, where each host's
// network link is the bottleneck. Host h has L ranks (local ranks 0..L-1);
// the buffer is cut into pieces, each piece into L shards, each shard into
// H sub-shards. Per piece, local rank l of host h:
//
//   A  within the host: sends shard q of its input to local rank q and
//      receives the others' shard l; reduces them: its host's partial of
//      shard l
//   B  across hosts: sends sub-shard g of that partial to local rank l of
//      host g and receives the other hosts' partials of sub-shard h;
//      reduces them: sub-shard h of shard l is final
//   C  across hosts: sends it to local rank l of every other host and
//      receives their final sub-shards: shard l is final
//   D  within the host: sends shard l to every local rank and receives
//      theirs: the piece is final
//
// Each host link carries 2(H-1)/H of the buffer each way, the least
// possible (the link bound), split evenly over the host's L ranks so that
// all of them drive it; a flat ring (in host order: ring.cpp) sends
// 2(p-1)/p of it along the one ring edge that leaves each host (1.5x as
// much at 2 hosts x 2, 1.07x at 8 x 2).
// Pieces are software-pipelined: while piece i crosses
// the links, piece i+1 is reduced within the host and piece i-1 is spread
// within it, so the intra-host steps hide behind the link.
//
// Every element is reduced by exactly one rank in a fixed order (its
// host's ranks in local-rank order from the owner's own, then the hosts'
// partials from the owner's own host), then copied: bit-identical on every
// rank. avg sums throughout and divides once, by p. In place is allowed.
// Needs the same number of ranks on every host (Topology::uniform()).
#pragma once

#include "coll/collective.hpp"

#include <chorus/types.hpp>

#include <cstddef>

namespace chorus::coll {

// The buffer is cut into pieces of this many bytes (more when it would
// take more than kMaxSteps pieces): small, so that the first and the last
// pieces' stages, which nothing hides, are short. Measured in the 2 x 2
// lab at 1 Gbit/s (docs/performance.md "Many hosts"): 64-256 KiB pieces
// take 1.00-1.05x the link bound from 1 to 64 MiB, 1 MiB pieces 1.10-1.21x,
// 4 MiB pieces 1.2-1.7x. 64 KiB, TCP's eager limit: a piece goes without a
// rendezvous, whose clear-to-send would cross the loaded link the other way
// (behind up to 50 ms of the shaper's queue there): the reduce-scatter's
// partials, made one by one, went at half the link's rate in 128 KiB
// pieces (16 MiB: 118 ms, now 89; the bound 67).
inline constexpr std::size_t kHierarchicalPieceBytes = 64 << 10;
// ...but at least this much per message: 8 hosts x 2 ranks (p = 16, 8 KiB
// messages) took 1.61-1.76 s at 64 MiB, with 32 KiB messages 1.36-1.42 s,
// with 128 KiB 1.47-1.51 s.
inline constexpr std::size_t kHierarchicalMessageBytes = 32 << 10;

// c.topology (null: one host) must be uniform, else invalid_argument.
void hierarchical_allreduce(const Collective& c, const void* send, void* recv, std::size_t count,
                            DataType type, ReduceOp op);

// Hierarchical allgather: every rank first sends its block to the ranks of
// its local rank on the other hosts, then passes each of the H blocks it
// then holds to its host's other ranks, each as soon as it is here. Each
// host link carries L(H-1) blocks each way, exactly what must enter a host;
// a flat ring sends p - 1 = HL - 1 along each edge that leaves a host. In place (send at recv's block of
// this rank) is allowed; c.topology as above.
void hierarchical_allgather(const Collective& c, const void* send, void* recv, std::size_t count,
                            DataType type);

// Hierarchical reduce-scatter (equal blocks): within the host, every rank
// sends each other local rank q the blocks of the ranks of local rank q on
// every host, and adds what it receives for its own local rank into one
// partial per host (the host's ranks in local-rank order); across hosts,
// it sends each other host's partial to that host's rank of its local rank,
// and adds the hosts' partials of its own block in host order. Each host
// link carries L(H-1) blocks each way, what must leave a host; a flat ring
// sends p - 1 along each edge that leaves a host. In pieces, as the
// allgather. In place (recv at this rank's block of send) is allowed;
// c.topology as above.
void hierarchical_reduce_scatter(const Collective& c, const void* send, void* recv,
                                 std::size_t count, DataType type, ReduceOp op);

// Hierarchical broadcast from `root`, in pieces, each cut into L shards
// (the root's host's local ranks): the root hands shard q to its host's
// local rank q; local rank q of each host passes shard q on to local rank q
// of the next host, in host order from the root's (a chain, each piece
// forwarded as soon as it is here), and to its own host's other ranks. Each
// host link carries the buffer once in and once out, the least a broadcast
// can, split over all of the host's ranks; a flat chain in rank order
// crosses each link as often as the ring leaves a host (once when each
// host's ranks are consecutive). c.topology as above.
void hierarchical_broadcast(const Collective& c, void* buffer, std::size_t count, DataType type,
                            int root);

// Hierarchical reduce to `root`, the broadcast's mirror: within each host,
// local rank q reduces shard q of every piece over its host's ranks (local-
// rank order); across hosts, local rank q's partials travel along a chain
// of hosts ending at the root's, each host adding its own (received partial
// first); on the root's host, local rank q hands its final shard to the
// root. Each host link carries the buffer once each way at most. recv is
// the root's only; send == recv at the root is in place. c.topology as
// above.
void hierarchical_reduce(const Collective& c, const void* send, void* recv, std::size_t count,
                         DataType type, ReduceOp op, int root);

}  // namespace chorus::coll

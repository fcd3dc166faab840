#include "coll/hierarchical.hpp"

#include "coll/patterns/ring.hpp"
#include "coll/recursive_doubling.hpp"
#include "coll/ring.hpp"
#include "coll/topology.hpp"
#include "common/logging.hpp"
#include "reduce/reduce.hpp"
#include "transport/subgroup.hpp"

#include <chrono>
#include <cstring>

namespace chorus::coll {

void hierarchical_allreduce(const Collective& c, const void* send, void* recv, std::size_t count,
                            DataType type, ReduceOp op) {
  const Topology& topology = *c.topology;
  if (!topology.uniform())
    throw Error(ErrorCode::invalid_argument,
                "hierarchical AllReduce needs the same number of ranks on every host: " +
                    topology.describe());
  const int me = c.transport.rank();
  const int local_rank = topology.local_rank(me);
  const int local_size = topology.local_size(me);
  const int p = c.transport.size();
  const std::size_t esize = size_of(type);
  auto* out = static_cast<std::byte*>(recv);
  const auto* in = static_cast<const std::byte*>(send);

  transport::Subgroup host(c.transport, topology.ranks_on(topology.host_of(me)));
  transport::Subgroup across(c.transport, topology.peers_across_hosts(local_rank));
  const Collective on_host{host,      c.sequence, c.deadline,  c.check,   c.abort_requested,
                           c.scratch, nullptr,    c.signature, c.topology};
  const Collective across_hosts{across,    c.sequence, c.deadline,  c.check,   c.abort_requested,
                                c.scratch, nullptr,    c.signature, c.topology};

  // avg: sums all the way, one division by p at the end (each phase's own
  // avg would divide by its group's size).
  const ReduceOp sum_op = op == ReduceOp::avg ? ReduceOp::sum : op;
  const BlockLayout shards = BlockLayout::near_equal(count, local_size);
  std::byte* shard = out + shards.offset(local_rank, esize);
  const std::size_t shard_count = shards.counts[static_cast<std::size_t>(local_rank)];

  // Each phase's time at TRACE: which level dominated a call.
  const bool traced = log::enabled(log::Level::trace);
  const auto start = transport::Clock::now();
  auto since = [&, last = start]() mutable {
    const auto now = transport::Clock::now();
    const double ms = std::chrono::duration<double, std::milli>(now - last).count();
    last = now;
    return ms;
  };
  double on_host_ms = 0, across_ms = 0;

  // 1. Local rank l ends with shard l of its host's sum.
  ring_reduce_scatter(on_host, {.blocks = shards,
                                .type = type,
                                .op = sum_op,
                                .input = in,
                                .partial = [&](int j) { return out + shards.offset(j, esize); },
                                .result = shard,
                                .finish = 0,
                                .phase = 0});
  if (traced) on_host_ms = since();
  // 2. Shard l over all hosts, by the ranks of local rank l (in place).
  if (shard_count * esize < kCrossHostRingFromBytes)
    recursive_doubling_allreduce(across_hosts, shard, shard, shard_count, type, sum_op);
  else
    ring_allreduce(across_hosts, shard, shard, shard_count, type, sum_op);
  if (op == ReduceOp::avg && shard_count > 0)
    reduce::divide(shard, shard_count, type, static_cast<std::size_t>(p));
  if (traced) across_ms = since();
  // 3. Every shard to every local rank.
  ring_allgather(on_host, shards, esize, out, 0, 1);
  if (traced)
    log::trace("hierarchical allreduce #{} of {} bytes: within the host {:.2f} ms + {:.2f} ms, "
               "across hosts {:.2f} ms ({} bytes per rank)",
               c.sequence, count * esize, on_host_ms, since(), across_ms, shard_count * esize);
}

}  // namespace chorus::coll

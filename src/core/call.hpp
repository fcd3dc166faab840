// One collective call: what the caller passed (CallArgs), and what the
// engine runs after checking it (Call).
#pragma once

#include "coll/call_check.hpp"
#include "coll/registry.hpp"

#include <chorus/types.hpp>

#include <cstddef>
#include <cstdint>
#include <span>

namespace chorus::core {

// What a collective call was given; which fields matter depends on the
// kind (include/chorus/communicator.hpp). `count`: the uniform forms' count
// per rank, gatherv's send count, scatterv's recv count.
struct CallArgs {
  const void* send = nullptr;
  void* recv = nullptr;
  std::size_t count = 0;
  DataType type = DataType::float32;
  ReduceOp op = ReduceOp::sum;
  int root = -1;
  std::span<const std::size_t> send_counts{}, send_displs{}, recv_counts{}, recv_displs{};
};

// One checked call, as this rank made it.
struct Call {
  coll::CollectiveKind kind = coll::CollectiveKind::allreduce;
  coll::CallSignature signature;  // what the call check compares across ranks
  const coll::AlgorithmRow* algorithm = nullptr;  // what runs it, chosen once
  std::uint64_t sequence = 0;
  bool deferred = false;  // CallOptions::deferred (async calls)
  // The v-forms' layouts are copies: an async call must not depend on the
  // caller's arrays.
  coll::Operands operands;
};

// Checks a call's arguments on a communicator of `size` ranks where this is
// `rank`, and fills `call`'s operands and signature (all but the
// algorithm). Throws Error(invalid_argument) "<collective>: <what and why>"
// before anything is sent: unknown dtype or op, an op the dtype lacks, a
// root that is no rank, null buffers that should hold bytes, sizes that
// overflow, buffers that overlap other than in the documented in-place way,
// v-form counts and displacements of the wrong length or inconsistent.
//
// What `count` becomes in the operands: the uniform forms' count per rank;
// allgatherv: this rank's block; reduce_scatter_v: the sum of the counts;
// alltoallv: what this rank sends in all; gatherv's
// send count and scatterv's recv count.
void check_arguments(coll::CollectiveKind kind, const CallArgs& args, int rank, int size,
                     Call& call);

}  // namespace chorus::core

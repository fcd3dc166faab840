// libchorus_pmpi's collectives: each MPI function decides where the call
// goes (pmpi_interposer.hpp: from what every rank passes alike), passes it
// to PMPI_ unchanged, or runs it on Chorus, blocking or as a generalized
// request. Buffers of any datatype reach Chorus as bytes (Staged: in place
// when dense, else packed); reductions as their element type.
#include "mpi/pmpi_interposer.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <vector>

using namespace chorus::pmpi;

namespace {

constexpr DataType kBytes = DataType::uint8;

bool in_place(const void* buffer) { return buffer == MPI_IN_PLACE; }

// Chorus's blocking `call`, or its async form: the `start` of run(). An
// async call is deferred: the MPI_Wait that usually follows runs it on its
// own thread (Work::wait_progressing()), so Chorus's worker is not woken
// for it; an MPI_Test, or any other wait, starts it on the worker.
const chorus::CallOptions& deferred() {
  static const chorus::CallOptions options = [] {
    chorus::CallOptions o;
    o.deferred = true;
    return o;
  }();
  return options;
}
#define CHORUS_START(async, comm, call, ...)                                      \
  ((async) ? (comm).call##_async(__VA_OPT__(__VA_ARGS__, ) deferred())        \
           : ((comm).call(__VA_ARGS__), chorus::Work{}))

// A described datatype for a call that moves data; false sends the call
// to MPI as invalid arguments (MPI reports what is wrong).
bool describe_into(MPI_Datatype type, TypeInfo& info) {
  if (type == MPI_DATATYPE_NULL) return false;
  describe(type, info);
  return info.valid;
}

bool valid_root(int root, int p) { return root >= 0 && root < p; }
bool valid_root(int root, MPI_Comm comm) { return valid_root(root, comm_size(comm)); }

// p non-negative counts (and, for valid_blocks, displacements) of a v-form.
bool valid_counts(const int* counts, int p) {
  if (counts == nullptr) return false;
  for (int j = 0; j < p; ++j)
    if (counts[j] < 0) return false;
  return true;
}
bool valid_blocks(const int* counts, const int* displs, int p) {
  return displs != nullptr && valid_counts(counts, p);
}

std::size_t total_items(const int* counts, int p) {
  std::size_t total = 0;
  for (int j = 0; j < p; ++j) total += static_cast<std::size_t>(counts[j]);
  return total;
}

std::size_t bytes_of(int count, const TypeInfo& info) { return static_cast<std::size_t>(count) * info.size; }

// One side of a call must hold the bytes the other side's signature says.
void expect_bytes(std::size_t have, std::size_t want, const char* what) {
  if (have != want)
    throw chorus::Error(chorus::ErrorCode::invalid_argument,
                        std::string(what) + " holds " + std::to_string(have) +
                            " bytes where the receiving side describes " + std::to_string(want));
}

// A forced staging copy of `info`'s buffer: the send side of an in-place
// alltoall, read before Chorus writes the same memory.
TypeInfo copied(TypeInfo info) {
  info.dense = false;
  return info;
}

// ---- Reductions -----------------------------------------------------------------

int allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
              MPI_Comm comm, MPI_Request* request) {
  auto& it = interposer();
  Taken taken;
  const Collective c = request ? kIallreduce : kAllreduce;
  Route r = start(it, comm, c);
  if (r == Route::chorus && (count < 0 || (count > 0 && recvbuf == nullptr)))
    r = Route::invalid_arguments;
  if (r == Route::chorus) r = reduction(datatype, op, taken);
  if (r == Route::chorus) r = connect(it, c, bytes_of(count, taken.info), comm, taken);
  tally(it, c, r);
  if (r != Route::chorus)
    return request ? PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request)
                   : PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  const std::size_t n = taken.elements(count);
  // The commonest call of all, an AllReduce of a dense type, goes straight
  // to Chorus: staging (the Staged objects, a finish to hold them) costs a
  // small call more than the interposer's other work. The calls on dense
  // types below do the same.
  if (taken.info.dense)
    return run(it, comm, kCollectiveNames[c], request, [&](bool async) {
      return CHORUS_START(async, *taken.chorus, allreduce, in_place(sendbuf) ? recvbuf : sendbuf,
                          recvbuf, n, taken.type, taken.op);
    });
  const Staged recv(recvbuf, count, datatype, taken.info);
  const Staged send =
      in_place(sendbuf) ? recv : Staged(const_cast<void*>(sendbuf), count, datatype, taken.info);
  return run(
      it, comm, kCollectiveNames[c], request,
      [&](bool async) {
        send.pack();
        return CHORUS_START(async, *taken.chorus, allreduce, send.data(), recv.data(), n,
                            taken.type, taken.op);
      },
      [recv, send] { recv.unpack(); });
}

int reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
           int root, MPI_Comm comm, MPI_Request* request) {
  auto& it = interposer();
  Taken taken;
  // recvbuf matters at the root only, so it is no part of the decision.
  const Collective c = request ? kIreduce : kReduce;
  Route r = start(it, comm, c);
  if (r == Route::chorus && count < 0) r = Route::invalid_arguments;
  if (r == Route::chorus) r = reduction(datatype, op, taken);
  // The threshold before the root's checks (as MPI_Bcast's).
  if (r == Route::chorus) r = threshold(it, c, bytes_of(count, taken.info), taken);
  if (r == Route::chorus &&
      (!valid_root(root, comm) || (in_place(sendbuf) && comm_rank(comm) != root)))
    r = Route::invalid_arguments;
  if (r == Route::chorus) r = connect(it, c, kAnySize, comm, taken);  // threshold passed above
  tally(it, c, r);
  if (r != Route::chorus)
    return request ? PMPI_Ireduce(sendbuf, recvbuf, count, datatype, op, root, comm, request)
                   : PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
  const bool at_root = taken.chorus->rank() == root;
  const std::size_t n = taken.elements(count);
  if (taken.info.dense)  // as MPI_Allreduce: no staging
    return run(it, comm, kCollectiveNames[c], request, [&](bool async) {
      return CHORUS_START(async, *taken.chorus, reduce,
                          at_root && in_place(sendbuf) ? recvbuf : sendbuf,
                          at_root ? recvbuf : nullptr, n, taken.type, taken.op, root);
    });
  const Staged recv = at_root ? Staged(recvbuf, count, datatype, taken.info) : Staged{};
  const Staged send = at_root && in_place(sendbuf)
                          ? recv
                          : Staged(const_cast<void*>(sendbuf), count, datatype, taken.info);
  return run(
      it, comm, kCollectiveNames[c], request,
      [&](bool async) {
        send.pack();
        return CHORUS_START(async, *taken.chorus, reduce, send.data(), recv.data(), n, taken.type,
                            taken.op, root);
      },
      [recv, send, at_root] {
        if (at_root) recv.unpack();
      });
}

// MPI_Reduce_scatter_block (counts null: `count` items per block) and
// MPI_Reduce_scatter (counts per rank).
int reduce_scatter(const void* sendbuf, void* recvbuf, int count, const int* counts,
                   MPI_Datatype datatype, MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  auto& it = interposer();
  Taken taken;
  const Collective which =
      counts ? kReduceScatter : (request ? kIreduceScatterBlock : kReduceScatterBlock);
  Route r = start(it, comm, which);
  const int p = r == Route::chorus ? comm_size(comm) : 0;
  if (r == Route::chorus && (counts ? !valid_counts(counts, p) : count < 0))
    r = Route::invalid_arguments;
  if (r == Route::chorus) r = reduction(datatype, op, taken);
  const std::size_t items =
      r == Route::chorus ? (counts ? total_items(counts, p) : static_cast<std::size_t>(count) * p) : 0;
  // The input is staged as one block of int items (every rank knows `items`).
  if (r == Route::chorus && items > static_cast<std::size_t>(INT_MAX)) r = Route::too_large;
  if (r == Route::chorus) r = connect(it, which, items * taken.info.size, comm, taken);
  tally(it, which, r);
  if (r != Route::chorus) {
    if (counts) return PMPI_Reduce_scatter(sendbuf, recvbuf, counts, datatype, op, comm);
    return request ? PMPI_Ireduce_scatter_block(sendbuf, recvbuf, count, datatype, op, comm, request)
                   : PMPI_Reduce_scatter_block(sendbuf, recvbuf, count, datatype, op, comm);
  }
  const int me = taken.chorus->rank();
  const int mine = counts ? counts[me] : count;
  std::size_t before = 0;  // items of the blocks before this rank's
  for (int j = 0; j < me; ++j) before += static_cast<std::size_t>(counts ? counts[j] : count);
  const std::size_t per_item = taken.elements(1);
  std::vector<std::size_t> element_counts;
  if (counts)
    for (int j = 0; j < p; ++j) element_counts.push_back(static_cast<std::size_t>(counts[j]) * per_item);
  // All blocks' input (in place: in recvbuf), and this rank's result. In
  // place, Chorus leaves the result in this rank's block of the input,
  // moved to the start of recvbuf afterwards.
  const std::size_t result_bytes = bytes_of(mine, taken.info);
  const auto reduce_scatter_into = [&](bool async, std::byte* input, std::byte* out) {
    if (counts)
      return CHORUS_START(async, *taken.chorus, reduce_scatter_v, input, out, element_counts,
                          taken.type, taken.op);
    return CHORUS_START(async, *taken.chorus, reduce_scatter, input, out,
                        static_cast<std::size_t>(count) * per_item, taken.type, taken.op);
  };
  // Dense: no staging. (In place the result is moved after the call: a
  // finish, so the nonblocking form stages.)
  if (taken.info.dense && (request == nullptr || !in_place(sendbuf)))
    return run(it, comm, kCollectiveNames[which], request, [&](bool async) {
      auto* result = static_cast<std::byte*>(recvbuf);
      auto* input =
          in_place(sendbuf) ? result : static_cast<std::byte*>(const_cast<void*>(sendbuf));
      std::byte* out = in_place(sendbuf) ? input + before * taken.info.size : result;
      chorus::Work work = reduce_scatter_into(async, input, out);
      if (out != recvbuf && result_bytes) std::memmove(recvbuf, out, result_bytes);  // blocking
      return work;
    });
  const Staged result(recvbuf, mine, datatype, taken.info);
  const Staged input(in_place(sendbuf) ? recvbuf : const_cast<void*>(sendbuf),
                     static_cast<int>(items), datatype, taken.info);
  std::byte* out = in_place(sendbuf) ? input.data() + before * taken.info.size : result.data();
  return run(
      it, comm, kCollectiveNames[which], request,
      [&](bool async) {
        input.pack();
        return reduce_scatter_into(async, input.data(), out);
      },
      [result, input, out, result_bytes] {
        if (out != result.data() && result_bytes) std::memmove(result.data(), out, result_bytes);
        result.unpack();
      });
}

// ---- Data movement -----------------------------------------------------------

int bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
          MPI_Request* request) {
  auto& it = interposer();
  Taken taken;
  const Collective c = request ? kIbcast : kBcast;
  Route r = start(it, comm, c);
  if (r == Route::chorus && (count < 0 || !describe_into(datatype, taken.info)))
    r = Route::invalid_arguments;
  // The threshold before the root's check: a call MPI keeps (which checks
  // its root itself) need not ask MPI for the communicator's size.
  if (r == Route::chorus) r = threshold(it, c, bytes_of(count, taken.info), taken);
  if (r == Route::chorus && !valid_root(root, comm)) r = Route::invalid_arguments;
  if (r == Route::chorus) r = connect(it, c, kAnySize, comm, taken);  // threshold passed above
  tally(it, c, r);
  if (r != Route::chorus)
    return request ? PMPI_Ibcast(buffer, count, datatype, root, comm, request)
                   : PMPI_Bcast(buffer, count, datatype, root, comm);
  if (taken.info.dense)
    return run(it, comm, kCollectiveNames[c], request, [&](bool async) {
      return CHORUS_START(async, *taken.chorus, broadcast, buffer, bytes_of(count, taken.info),
                          kBytes, root);
    });
  const bool at_root = taken.chorus->rank() == root;
  const Staged data(buffer, count, datatype, taken.info);
  return run(
      it, comm, kCollectiveNames[c], request,
      [&](bool async) {
        if (at_root) data.pack();
        return CHORUS_START(async, *taken.chorus, broadcast, data.data(), data.bytes(), kBytes, root);
      },
      [data, at_root] {
        if (!at_root) data.unpack();
      });
}

// The route of Allgather and Alltoall: decided on the receive side
// (`recvcount` items of `recvtype` from each of the `p` ranks), which every
// rank describes alike; the send side (unless in place) is described into
// `send_info` and must hold the same bytes, else the call is erroneous.
Route route_exchange(Interposer& it, Collective c, const void* sendbuf, int sendcount,
                     MPI_Datatype sendtype, int recvcount, MPI_Datatype recvtype, MPI_Comm comm,
                     Taken& taken, TypeInfo& send_info, int& p) {
  Route r = start(it, comm, c);
  if (r == Route::chorus &&
      (recvcount < 0 || !describe_into(recvtype, taken.info) ||
       (!in_place(sendbuf) && (sendcount < 0 || !describe_into(sendtype, send_info)))))
    r = Route::invalid_arguments;
  if (r != Route::chorus) return r;
  p = comm_size(comm);
  return connect(it, c, bytes_of(recvcount, taken.info) * static_cast<std::size_t>(p), comm,
                 taken);
}

int allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
              int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  auto& it = interposer();
  Taken taken;
  TypeInfo send_info;
  int p = 0;
  const Collective c = request ? kIallgather : kAllgather;
  const Route r = route_exchange(it, c, sendbuf, sendcount, sendtype, recvcount, recvtype, comm,
                                 taken, send_info, p);
  const std::size_t block = bytes_of(recvcount, taken.info);
  tally(it, c, r);
  if (r != Route::chorus)
    return request ? PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                                     comm, request)
                   : PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  const int me = taken.chorus->rank();
  if (taken.info.dense && (in_place(sendbuf) || send_info.dense))
    return run(it, comm, kCollectiveNames[c], request, [&](bool async) {
      auto* out = static_cast<std::byte*>(recvbuf);
      const void* mine = out + static_cast<std::size_t>(me) * block;  // in place
      if (!in_place(sendbuf)) {
        expect_bytes(bytes_of(sendcount, send_info), block, "the send buffer");
        mine = sendbuf;
      }
      return CHORUS_START(async, *taken.chorus, allgather, mine, out, block, kBytes);
    });
  const Staged recv(recvbuf, p, recvcount, recvtype, taken.info);
  const Staged send = in_place(sendbuf)
                          ? Staged{}
                          : Staged(const_cast<void*>(sendbuf), sendcount, sendtype, send_info);
  return run(
      it, comm, kCollectiveNames[c], request,
      [&](bool async) {
        const std::byte* mine = recv.data() + recv.block_offset(me);  // in place
        if (in_place(sendbuf)) {
          recv.pack(me);
        } else {
          expect_bytes(send.bytes(), block, "the send buffer");
          send.pack();
          mine = send.data();
        }
        return CHORUS_START(async, *taken.chorus, allgather, mine, recv.data(), block, kBytes);
      },
      [recv, send] { recv.unpack(); });
}

// A v-form's block sizes and offsets as Chorus takes them (`side`: 0 or 1,
// one pair per side of a call), in vectors this thread keeps: a small call
// allocates nothing for them. Valid until this thread's next call of it
// with the same side.
struct BlockArrays {
  std::span<const std::size_t> bytes, offsets;
};
struct BlockArrayStorage {
  std::vector<std::size_t> bytes, offsets;
  BlockArrays view() const { return {bytes, offsets}; }
};
BlockArrayStorage& block_array_storage(int side) {
  thread_local BlockArrayStorage sides[2];
  return sides[side];
}
BlockArrays block_arrays(const Staged& staged, int side) {
  BlockArrayStorage& arrays = block_array_storage(side);
  staged.all_block_bytes(arrays.bytes);
  staged.all_block_offsets(arrays.offsets);
  return arrays.view();
}
// The same for a dense root buffer's blocks without a Staged (a gatherv's
// or scatterv's one side): item i of block j at (displs[j] + i) * size. The
// caller has checked that no displacement is negative (dense_blocks()).
BlockArrays dense_block_arrays(const int* counts, const int* displs, int p, std::size_t size) {
  BlockArrayStorage& arrays = block_array_storage(0);
  const auto up = static_cast<std::size_t>(p);
  arrays.bytes.resize(up);
  arrays.offsets.resize(up);
  for (std::size_t j = 0; j < up; ++j) {
    arrays.bytes[j] = static_cast<std::size_t>(counts[j]) * size;
    arrays.offsets[j] = static_cast<std::size_t>(displs[j]) * size;
  }
  return arrays.view();
}
// Whether a v-form's buffer of `info` goes to Chorus as it is: dense, and
// no block before its start (Chorus's offsets are unsigned; such a buffer
// is staged).
bool dense_blocks(const int* displs, int p, const TypeInfo& info) {
  return info.dense && std::none_of(displs, displs + p, [](int d) { return d < 0; });
}

int allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
               const int* recvcounts, const int* displs, MPI_Datatype recvtype, MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  TypeInfo send_info;
  Route r = start(it, comm, kAllgatherv);
  const int p = r == Route::chorus ? comm_size(comm) : 0;
  if (r == Route::chorus &&
      (!valid_blocks(recvcounts, displs, p) || !describe_into(recvtype, taken.info) ||
       (!in_place(sendbuf) && (sendcount < 0 || !describe_into(sendtype, send_info)))))
    r = Route::invalid_arguments;
  // Every rank passes every count: the total is known alike everywhere.
  if (r == Route::chorus)
    r = connect(it, kAllgatherv, total_items(recvcounts, p) * taken.info.size, comm, taken);
  tally(it, kAllgatherv, r);
  if (r != Route::chorus)
    return PMPI_Allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
  const int me = taken.chorus->rank();
  // Dense buffers go straight to Chorus, as MPI_Allgather's do: through the
  // staging objects an 8-byte call took 0.06-0.12 us more than
  // MPI_Allgather's at p = 2 (docs/performance.md "Twenty-second pass").
  if (dense_blocks(displs, p, taken.info) && (in_place(sendbuf) || send_info.dense))
    return on_chorus(it, comm, "MPI_Allgatherv", [&] {
      auto* out = static_cast<std::byte*>(recvbuf);
      const BlockArrays blocks = dense_block_arrays(recvcounts, displs, p, taken.info.size);
      const auto self = static_cast<std::size_t>(me);
      const void* mine = out + blocks.offsets[self];  // in place
      if (!in_place(sendbuf)) {
        expect_bytes(bytes_of(sendcount, send_info), blocks.bytes[self], "the send buffer");
        mine = sendbuf;
      }
      taken.chorus->allgatherv(mine, out, blocks.bytes, blocks.offsets, kBytes);
    });
  const Staged recv(recvbuf, recvcounts, displs, p, recvtype, taken.info);
  return on_chorus(it, comm, "MPI_Allgatherv", [&] {
    Staged send;
    const std::byte* mine = recv.data() + recv.block_offset(me);  // in place
    if (in_place(sendbuf)) {
      recv.pack(me);
    } else {
      send = Staged(const_cast<void*>(sendbuf), sendcount, sendtype, send_info);
      expect_bytes(send.bytes(), recv.block_bytes(me), "the send buffer");
      send.pack();
      mine = send.data();
    }
    const BlockArrays blocks = block_arrays(recv, 0);
    taken.chorus->allgatherv(mine, recv.data(), blocks.bytes, blocks.offsets, kBytes);
    recv.unpack();
  });
}

int alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
             int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  auto& it = interposer();
  Taken taken;
  TypeInfo send_info;
  int p = 0;
  const Collective c = request ? kIalltoall : kAlltoall;
  const Route r = route_exchange(it, c, sendbuf, sendcount, sendtype, recvcount, recvtype, comm,
                                 taken, send_info, p);
  const std::size_t block = bytes_of(recvcount, taken.info);
  tally(it, c, r);
  if (r != Route::chorus)
    return request ? PMPI_Ialltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype,
                                    comm, request)
                   : PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  if (!in_place(sendbuf) && taken.info.dense && send_info.dense)
    return run(it, comm, kCollectiveNames[c], request, [&](bool async) {
      const auto blocks = static_cast<std::size_t>(p);
      expect_bytes(bytes_of(sendcount, send_info) * blocks, block * blocks, "the send buffer");
      return CHORUS_START(async, *taken.chorus, alltoall, sendbuf, recvbuf, block, kBytes);
    });
  const Staged recv(recvbuf, p, recvcount, recvtype, taken.info);
  // In place, the blocks to send are copied out of recvbuf first.
  const Staged send = in_place(sendbuf)
                          ? Staged(recvbuf, p, recvcount, recvtype, copied(taken.info))
                          : Staged(const_cast<void*>(sendbuf), p, sendcount, sendtype, send_info);
  return run(
      it, comm, kCollectiveNames[c], request,
      [&](bool async) {
        expect_bytes(send.bytes(), recv.bytes(), "the send buffer");
        send.pack();
        return CHORUS_START(async, *taken.chorus, alltoall, send.data(), recv.data(), block, kBytes);
      },
      [recv, send] { recv.unpack(); });
}

int alltoallv(const void* sendbuf, const int* sendcounts, const int* sdispls,
              MPI_Datatype sendtype, void* recvbuf, const int* recvcounts, const int* rdispls,
              MPI_Datatype recvtype, MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  TypeInfo send_info;
  Route r = start(it, comm, kAlltoallv);
  const int p = r == Route::chorus ? comm_size(comm) : 0;
  if (r == Route::chorus &&
      (!valid_blocks(recvcounts, rdispls, p) || !describe_into(recvtype, taken.info) ||
       (!in_place(sendbuf) &&
        (!valid_blocks(sendcounts, sdispls, p) || !describe_into(sendtype, send_info)))))
    r = Route::invalid_arguments;
  // Each rank knows only its own counts: no size threshold.
  if (r == Route::chorus) r = connect(it, kAlltoallv, kAnySize, comm, taken);
  tally(it, kAlltoallv, r);
  if (r != Route::chorus)
    return PMPI_Alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls,
                          recvtype, comm);
  return on_chorus(it, comm, "MPI_Alltoallv", [&] {
    const Staged recv(recvbuf, recvcounts, rdispls, p, recvtype, taken.info);
    const Staged send =
        in_place(sendbuf)
            ? Staged(recvbuf, recvcounts, rdispls, p, recvtype, copied(taken.info))
            : Staged(const_cast<void*>(sendbuf), sendcounts, sdispls, p, sendtype, send_info);
    send.pack();
    const BlockArrays sends = block_arrays(send, 0), receives = block_arrays(recv, 1);
    taken.chorus->alltoallv(send.data(), sends.bytes, sends.offsets, recv.data(), receives.bytes,
                            receives.offsets, kBytes);
    recv.unpack();
  });
}

// MPI_Gather (`recvcount` items per block) and MPI_Gatherv (`counts`, `displs`).
int gather(Collective which, const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf, int recvcount,
           const int* counts, const int* displs, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  TypeInfo send_info;
  Route r = start(it, comm, which);
  const int p = r == Route::chorus ? comm_size(comm) : 0;
  const int me = r == Route::chorus ? comm_rank(comm) : 0;
  const bool at_root = me == root;
  const bool uses_send = !(at_root && in_place(sendbuf));
  if (r == Route::chorus &&
      (!valid_root(root, p) || (!at_root && in_place(sendbuf)) ||
       (uses_send && (sendcount < 0 || !describe_into(sendtype, send_info))) ||
       (at_root && !describe_into(recvtype, taken.info)) ||
       (at_root && (which == kGatherv ? !valid_blocks(counts, displs, p) : recvcount < 0))))
    r = Route::invalid_arguments;
  // Gather: every rank knows the block (the root from its receive side).
  // Gatherv: only the root knows the blocks, so no size threshold.
  std::size_t bytes = kAnySize;
  if (which == kGather)
    bytes = static_cast<std::size_t>(p) *
            (at_root ? bytes_of(recvcount, taken.info) : bytes_of(sendcount, send_info));
  if (r == Route::chorus) r = connect(it, which, bytes, comm, taken);
  tally(it, which, r);
  if (r != Route::chorus) {
    if (which == kGatherv)
      return PMPI_Gatherv(sendbuf, sendcount, sendtype, recvbuf, counts, displs, recvtype, root, comm);
    return PMPI_Gather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  }
  // Dense buffers go straight to Chorus, as MPI_Allreduce's do: a rank's
  // own block everywhere, and the root's whole receive buffer.
  if ((!uses_send || send_info.dense) &&
      (!at_root || (which == kGather ? taken.info.dense : dense_blocks(displs, p, taken.info))))
    return on_chorus(it, comm, kCollectiveNames[which], [&] {
      auto* out = static_cast<std::byte*>(recvbuf);
      const std::size_t send_bytes = uses_send ? bytes_of(sendcount, send_info) : 0;
      if (which == kGatherv) {
        const BlockArrays blocks =
            at_root ? dense_block_arrays(counts, displs, p, taken.info.size) : BlockArrays{};
        const auto self = static_cast<std::size_t>(me);
        if (at_root && uses_send)
          expect_bytes(send_bytes, blocks.bytes[self], "the root's send buffer");
        taken.chorus->gatherv(uses_send ? sendbuf : out + blocks.offsets[self],
                              uses_send ? send_bytes : blocks.bytes[self], at_root ? out : nullptr,
                              blocks.bytes, blocks.offsets, kBytes, root);
        return;
      }
      const std::size_t block = at_root ? bytes_of(recvcount, taken.info) : 0;
      const void* mine = uses_send ? sendbuf : out + static_cast<std::size_t>(me) * block;
      const std::size_t my_bytes = uses_send ? send_bytes : block;
      if (at_root) expect_bytes(my_bytes, block, "the root's send buffer");
      taken.chorus->gather(mine, at_root ? out : nullptr, my_bytes, kBytes, root);
    });
  return on_chorus(it, comm, kCollectiveNames[which], [&] {
    const Staged recv = !at_root            ? Staged{}
                        : which == kGatherv ? Staged(recvbuf, counts, displs, p, recvtype, taken.info)
                                            : Staged(recvbuf, p, recvcount, recvtype, taken.info);
    Staged send;
    const std::byte* mine = recv.data() + (at_root ? recv.block_offset(me) : 0);  // in place
    if (uses_send) {
      send = Staged(const_cast<void*>(sendbuf), sendcount, sendtype, send_info);
      if (at_root) expect_bytes(send.bytes(), recv.block_bytes(me), "the root's send buffer");
      send.pack();
      mine = send.data();
    } else {
      recv.pack(me);
    }
    const std::size_t my_bytes = uses_send ? send.bytes() : recv.block_bytes(me);
    if (which == kGatherv) {
      const BlockArrays blocks = at_root ? block_arrays(recv, 0) : BlockArrays{};
      taken.chorus->gatherv(mine, my_bytes, recv.data(), blocks.bytes, blocks.offsets, kBytes, root);
    } else {
      taken.chorus->gather(mine, recv.data(), my_bytes, kBytes, root);
    }
    if (at_root) recv.unpack();
  });
}

// MPI_Scatter (`sendcount` items per block) and MPI_Scatterv (`counts`, `displs`).
int scatter(Collective which, const void* sendbuf, int sendcount, const int* counts, const int* displs,
            MPI_Datatype sendtype, void* recvbuf, int recvcount, MPI_Datatype recvtype, int root,
            MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  TypeInfo send_info;
  Route r = start(it, comm, which);
  const int p = r == Route::chorus ? comm_size(comm) : 0;
  const int me = r == Route::chorus ? comm_rank(comm) : 0;
  const bool at_root = me == root;
  const bool uses_recv = !(at_root && in_place(recvbuf));
  if (r == Route::chorus &&
      (!valid_root(root, p) || (!at_root && in_place(recvbuf)) ||
       (uses_recv && (recvcount < 0 || !describe_into(recvtype, taken.info))) ||
       (at_root && !describe_into(sendtype, send_info)) ||
       (at_root && (which == kScatterv ? !valid_blocks(counts, displs, p) : sendcount < 0))))
    r = Route::invalid_arguments;
  std::size_t bytes = kAnySize;
  if (which == kScatter)
    bytes = static_cast<std::size_t>(p) *
            (at_root ? bytes_of(sendcount, send_info) : bytes_of(recvcount, taken.info));
  if (r == Route::chorus) r = connect(it, which, bytes, comm, taken);
  tally(it, which, r);
  if (r != Route::chorus) {
    if (which == kScatterv)
      return PMPI_Scatterv(sendbuf, counts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm);
    return PMPI_Scatter(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm);
  }
  // Dense buffers straight to Chorus (as gather()'s): a rank's own block
  // everywhere, and the root's whole send buffer.
  if ((!uses_recv || taken.info.dense) &&
      (!at_root || (which == kScatter ? send_info.dense : dense_blocks(displs, p, send_info))))
    return on_chorus(it, comm, kCollectiveNames[which], [&] {
      auto* in = static_cast<std::byte*>(const_cast<void*>(sendbuf));
      const std::size_t recv_bytes = uses_recv ? bytes_of(recvcount, taken.info) : 0;
      if (which == kScatterv) {
        const BlockArrays blocks =
            at_root ? dense_block_arrays(counts, displs, p, send_info.size) : BlockArrays{};
        const auto self = static_cast<std::size_t>(me);
        if (at_root && uses_recv) expect_bytes(blocks.bytes[self], recv_bytes, "the root's block");
        taken.chorus->scatterv(at_root ? in : nullptr, blocks.bytes, blocks.offsets,
                               uses_recv ? recvbuf : in + blocks.offsets[self],
                               uses_recv ? recv_bytes : blocks.bytes[self], kBytes, root);
        return;
      }
      const std::size_t block = at_root ? bytes_of(sendcount, send_info) : 0;
      void* mine = uses_recv ? recvbuf : in + static_cast<std::size_t>(me) * block;
      const std::size_t my_bytes = uses_recv ? recv_bytes : block;
      if (at_root) expect_bytes(block, my_bytes, "the root's block");
      taken.chorus->scatter(at_root ? in : nullptr, mine, my_bytes, kBytes, root);
    });
  return on_chorus(it, comm, kCollectiveNames[which], [&] {
    const Staged send = !at_root             ? Staged{}
                        : which == kScatterv ? Staged(const_cast<void*>(sendbuf), counts, displs, p,
                                                      sendtype, send_info)
                                             : Staged(const_cast<void*>(sendbuf), p, sendcount,
                                                      sendtype, send_info);
    const Staged recv = uses_recv ? Staged(recvbuf, recvcount, recvtype, taken.info) : Staged{};
    if (at_root) {
      send.pack();
      if (uses_recv) expect_bytes(send.block_bytes(me), recv.bytes(), "the root's block");
    }
    std::byte* mine = uses_recv ? recv.data() : send.data() + send.block_offset(me);  // in place
    const std::size_t my_bytes = uses_recv ? recv.bytes() : send.block_bytes(me);
    if (which == kScatterv) {
      const BlockArrays blocks = at_root ? block_arrays(send, 0) : BlockArrays{};
      taken.chorus->scatterv(send.data(), blocks.bytes, blocks.offsets, mine, my_bytes, kBytes, root);
    } else {
      taken.chorus->scatter(send.data(), mine, my_bytes, kBytes, root);
    }
    recv.unpack();
  });
}

// A barrier moves no bytes: it goes to Chorus by default (kEverySize), and
// with CHORUS_MPI_MIN_BYTES set only when it is 0.
int barrier(MPI_Comm comm, MPI_Request* request) {
  auto& it = interposer();
  Taken taken;
  const Collective c = request ? kIbarrier : kBarrier;
  Route r = start(it, comm, c);
  if (r == Route::chorus) r = connect(it, c, 0, comm, taken);
  tally(it, c, r);
  if (r != Route::chorus) return request ? PMPI_Ibarrier(comm, request) : PMPI_Barrier(comm);
  return run(it, comm, kCollectiveNames[c], request,
             [&](bool async) { return CHORUS_START(async, *taken.chorus, barrier); });
}

#undef CHORUS_START

}  // namespace

// ---- The MPI functions ---------------------------------------------------------

extern "C" {

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm comm) {
  return allreduce(sendbuf, recvbuf, count, datatype, op, comm, nullptr);
}

int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
                   MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  if (request == nullptr) return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  return allreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
}

int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               int root, MPI_Comm comm) {
  return reduce(sendbuf, recvbuf, count, datatype, op, root, comm, nullptr);
}

int MPI_Ireduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                int root, MPI_Comm comm, MPI_Request* request) {
  if (request == nullptr) return PMPI_Ireduce(sendbuf, recvbuf, count, datatype, op, root, comm, request);
  return reduce(sendbuf, recvbuf, count, datatype, op, root, comm, request);
}

int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
                             MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  return reduce_scatter(sendbuf, recvbuf, recvcount, nullptr, datatype, op, comm, nullptr);
}

int MPI_Ireduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
                              MPI_Datatype datatype, MPI_Op op, MPI_Comm comm,
                              MPI_Request* request) {
  if (request == nullptr)
    return PMPI_Ireduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm, request);
  return reduce_scatter(sendbuf, recvbuf, recvcount, nullptr, datatype, op, comm, request);
}

int MPI_Reduce_scatter(const void* sendbuf, void* recvbuf, const int recvcounts[],
                       MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  if (recvcounts == nullptr) return PMPI_Reduce_scatter(sendbuf, recvbuf, recvcounts, datatype, op, comm);
  return reduce_scatter(sendbuf, recvbuf, 0, recvcounts, datatype, op, comm, nullptr);
}

int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  return bcast(buffer, count, datatype, root, comm, nullptr);
}

int MPI_Ibcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm,
               MPI_Request* request) {
  if (request == nullptr) return PMPI_Ibcast(buffer, count, datatype, root, comm, request);
  return bcast(buffer, count, datatype, root, comm, request);
}

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  return allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, nullptr);
}

int MPI_Iallgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                   int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  if (request == nullptr)
    return PMPI_Iallgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
  return allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
}

int MPI_Allgatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                   const int recvcounts[], const int displs[], MPI_Datatype recvtype, MPI_Comm comm) {
  return allgatherv(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm);
}

int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  return alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, nullptr);
}

int MPI_Ialltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm, MPI_Request* request) {
  if (request == nullptr)
    return PMPI_Ialltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
  return alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm, request);
}

int MPI_Alltoallv(const void* sendbuf, const int sendcounts[], const int sdispls[],
                  MPI_Datatype sendtype, void* recvbuf, const int recvcounts[], const int rdispls[],
                  MPI_Datatype recvtype, MPI_Comm comm) {
  return alltoallv(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype,
                   comm);
}

int MPI_Gather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
               int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return gather(kGather, sendbuf, sendcount, sendtype, recvbuf, recvcount, nullptr, nullptr,
                recvtype, root, comm);
}

int MPI_Gatherv(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                const int recvcounts[], const int displs[], MPI_Datatype recvtype, int root,
                MPI_Comm comm) {
  return gather(kGatherv, sendbuf, sendcount, sendtype, recvbuf, 0, recvcounts, displs, recvtype,
                root, comm);
}

int MPI_Scatter(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                int recvcount, MPI_Datatype recvtype, int root, MPI_Comm comm) {
  return scatter(kScatter, sendbuf, sendcount, nullptr, nullptr, sendtype, recvbuf, recvcount,
                 recvtype, root, comm);
}

int MPI_Scatterv(const void* sendbuf, const int sendcounts[], const int displs[],
                 MPI_Datatype sendtype, void* recvbuf, int recvcount, MPI_Datatype recvtype,
                 int root, MPI_Comm comm) {
  return scatter(kScatterv, sendbuf, 0, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype,
                 root, comm);
}

int MPI_Barrier(MPI_Comm comm) { return barrier(comm, nullptr); }

int MPI_Ibarrier(MPI_Comm comm, MPI_Request* request) {
  if (request == nullptr) return PMPI_Ibarrier(comm, request);
  return barrier(comm, request);
}

}  // extern "C"

// libchorus_pmpi: runs an unchanged MPI program's MPI_Allreduce,
// MPI_Iallreduce, MPI_Bcast, MPI_Reduce, MPI_Allgather,
// MPI_Reduce_scatter_block, MPI_Alltoall and MPI_Barrier on Chorus, through
// the MPI profiling interface.
//
//   mpirun -np 4 -x LD_PRELOAD=libchorus_pmpi.so ./program
//
// This library defines MPI_ functions; loaded first, its definitions win over
// libmpi's, and it reaches MPI itself through the PMPI_ names. What it takes
// over (docs/mpi.md):
//  - calls on intra-communicators of two or more ranks, of at least
//    CHORUS_MPI_MIN_BYTES, MPI_IN_PLACE included (but for Alltoall): for
//    reductions, a predefined datatype that maps exactly onto a Chorus one
//    and a predefined op Chorus has (MPI_SUM, PROD, MIN, MAX, BAND, BOR,
//    BXOR); for data movement, any predefined datatype without holes;
//  - everything else goes to PMPI_ unchanged, and is counted with its reason
//    (CHORUS_MPI_VERBOSE=1 prints the counts at MPI_Finalize).
// Every rank of a communicator decides alike, from arguments MPI requires to
// agree, so a call never runs on Chorus on one rank and on MPI on another.
//
// One Chorus communicator per MPI communicator, made at its first taken-over
// call (collective: every rank makes that call), kept in an MPI attribute
// whose delete callback frees it on MPI_Comm_free, and freed at
// MPI_Finalize otherwise. Chorus's errors go to the communicator's MPI error
// handler as MPI error codes whose MPI_Error_string is Chorus's message.
#include "mpi/pmpi_interposer.hpp"

#include <cstring>

using namespace chorus::pmpi;

// ---- The MPI functions ---------------------------------------------------------

extern "C" {

int MPI_Init(int* argc, char*** argv) {
  const int rc = PMPI_Init(argc, argv);
  if (rc == MPI_SUCCESS) set_up(interposer());
  return rc;
}

int MPI_Init_thread(int* argc, char*** argv, int required, int* provided) {
  const int rc = PMPI_Init_thread(argc, argv, required, provided);
  if (rc == MPI_SUCCESS) set_up(interposer());
  return rc;
}

int MPI_Finalize() {
  auto& it = interposer();
  std::list<CommEntry> closing;
  {
    std::lock_guard lock(it.mutex);
    if (it.ready && it.verbose) print_counts(it);
    // Communicators the program never freed: closed in creation order, the
    // same on every rank. Their entries stay until PMPI_Finalize has run the
    // attributes' delete callbacks.
    for (auto& entry : it.entries) entry.chorus.reset();
  }
  const int rc = PMPI_Finalize();
  std::lock_guard lock(it.mutex);
  it.entries.clear();
  return rc;
}

int MPI_Allreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
                  MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  const Route r = route(it, sendbuf, recvbuf, count, datatype, op, comm, taken);
  tally(it, kAllreduce, r);
  if (r != Route::chorus) return PMPI_Allreduce(sendbuf, recvbuf, count, datatype, op, comm);
  return on_chorus(it, comm, "MPI_Allreduce", [&] {
    taken.chorus->allreduce(taken.send, recvbuf, static_cast<std::size_t>(count), taken.type,
                            taken.op);
  });
}

int MPI_Iallreduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype,
                   MPI_Op op, MPI_Comm comm, MPI_Request* request) {
  auto& it = interposer();
  Taken taken;
  const Route r = request == nullptr
                      ? Route::invalid_arguments
                      : route(it, sendbuf, recvbuf, count, datatype, op, comm, taken);
  tally(it, kIallreduce, r);
  if (r != Route::chorus)
    return PMPI_Iallreduce(sendbuf, recvbuf, count, datatype, op, comm, request);
  chorus::Work work;
  try {
    work = taken.chorus->allreduce_async(taken.send, recvbuf, static_cast<std::size_t>(count),
                                         taken.type, taken.op);
  } catch (const std::exception& e) {
    return raise_error(it, comm, "MPI_Iallreduce", e);
  }
  const int rc = PMPI_Grequest_start(query_request, free_request, cancel_request, nullptr, request);
  if (rc != MPI_SUCCESS) {
    try {
      work.wait();
    } catch (...) {
    }
    return rc;
  }
  std::lock_guard lock(it.mutex);
  it.pending.emplace(*request,
                     Interposer::Pending{std::make_shared<chorus::Work>(std::move(work)), comm});
  return MPI_SUCCESS;
}

int MPI_Bcast(void* buffer, int count, MPI_Datatype datatype, int root, MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  const std::size_t size = contiguous_named_size(datatype);
  Route r = start(it, comm);
  if (r == Route::chorus && count < 0) r = Route::invalid_arguments;
  if (r == Route::chorus && size == 0) r = Route::datatype;
  if (r == Route::chorus) r = connect(it, static_cast<std::size_t>(count) * size, comm, taken);
  tally(it, kBcast, r);
  if (r != Route::chorus) return PMPI_Bcast(buffer, count, datatype, root, comm);
  return on_chorus(it, comm, "MPI_Bcast", [&] {
    taken.chorus->broadcast(buffer, static_cast<std::size_t>(count) * size, DataType::uint8, root);
  });
}

int MPI_Reduce(const void* sendbuf, void* recvbuf, int count, MPI_Datatype datatype, MPI_Op op,
               int root, MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  // recvbuf matters at the root only, so it is no part of the decision.
  Route r = start(it, comm);
  if (r == Route::chorus && count < 0) r = Route::invalid_arguments;
  if (r == Route::chorus) r = reduction(datatype, op, taken);
  if (r == Route::chorus)
    r = connect(it, static_cast<std::size_t>(count) * chorus::size_of(taken.type), comm, taken);
  tally(it, kReduce, r);
  if (r != Route::chorus) return PMPI_Reduce(sendbuf, recvbuf, count, datatype, op, root, comm);
  const void* send = sendbuf == MPI_IN_PLACE ? recvbuf : sendbuf;
  return on_chorus(it, comm, "MPI_Reduce", [&] {
    taken.chorus->reduce(send, recvbuf, static_cast<std::size_t>(count), taken.type, taken.op, root);
  });
}

int MPI_Allgather(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                  int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  // Decided on the receive side, which every rank describes alike; the
  // send side must then hold the same bytes (else the call is erroneous).
  const std::size_t size = contiguous_named_size(recvtype);
  Route r = start(it, comm);
  if (r == Route::chorus && (recvcount < 0 || (sendbuf != MPI_IN_PLACE && sendcount < 0)))
    r = Route::invalid_arguments;
  if (r == Route::chorus && size == 0) r = Route::datatype;
  const std::size_t block = static_cast<std::size_t>(recvcount) * size;
  if (r == Route::chorus) r = connect(it, block * static_cast<std::size_t>(comm_size(comm)), comm, taken);
  tally(it, kAllgather, r);
  if (r != Route::chorus)
    return PMPI_Allgather(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  return on_chorus(it, comm, "MPI_Allgather", [&] {
    const void* send = sendbuf;
    if (sendbuf == MPI_IN_PLACE) {
      send = static_cast<std::byte*>(recvbuf) + static_cast<std::size_t>(comm_rank(comm)) * block;
    } else if (static_cast<std::size_t>(sendcount) * contiguous_named_size(sendtype) != block) {
      throw chorus::Error(chorus::ErrorCode::invalid_argument,
                          "the send side does not hold the bytes of one receive block");
    }
    taken.chorus->allgather(send, recvbuf, block, DataType::uint8);
  });
}

int MPI_Reduce_scatter_block(const void* sendbuf, void* recvbuf, int recvcount,
                             MPI_Datatype datatype, MPI_Op op, MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  Route r = start(it, comm);
  if (r == Route::chorus && recvcount < 0) r = Route::invalid_arguments;
  if (r == Route::chorus) r = reduction(datatype, op, taken);
  const std::size_t block = static_cast<std::size_t>(recvcount) * chorus::size_of(taken.type);
  if (r == Route::chorus) r = connect(it, block * static_cast<std::size_t>(comm_size(comm)), comm, taken);
  tally(it, kReduceScatterBlock, r);
  if (r != Route::chorus)
    return PMPI_Reduce_scatter_block(sendbuf, recvbuf, recvcount, datatype, op, comm);
  return on_chorus(it, comm, "MPI_Reduce_scatter_block", [&] {
    const auto n = static_cast<std::size_t>(recvcount);
    if (sendbuf != MPI_IN_PLACE) {
      taken.chorus->reduce_scatter(sendbuf, recvbuf, n, taken.type, taken.op);
      return;
    }
    // In place, MPI's input is all of recvbuf and the result goes to its
    // start; Chorus's result lands in this rank's block, moved after.
    auto* all = static_cast<std::byte*>(recvbuf);
    std::byte* mine = all + static_cast<std::size_t>(comm_rank(comm)) * block;
    taken.chorus->reduce_scatter(all, mine, n, taken.type, taken.op);
    if (mine != all && block) std::memmove(all, mine, block);
  });
}

int MPI_Alltoall(const void* sendbuf, int sendcount, MPI_Datatype sendtype, void* recvbuf,
                 int recvcount, MPI_Datatype recvtype, MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  const std::size_t size = contiguous_named_size(recvtype);
  Route r = start(it, comm);
  if (r == Route::chorus && sendbuf == MPI_IN_PLACE) r = Route::in_place_alltoall;
  if (r == Route::chorus && (recvcount < 0 || sendcount < 0)) r = Route::invalid_arguments;
  if (r == Route::chorus && size == 0) r = Route::datatype;
  const std::size_t block = static_cast<std::size_t>(recvcount) * size;
  if (r == Route::chorus) r = connect(it, block * static_cast<std::size_t>(comm_size(comm)), comm, taken);
  tally(it, kAlltoall, r);
  if (r != Route::chorus)
    return PMPI_Alltoall(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm);
  return on_chorus(it, comm, "MPI_Alltoall", [&] {
    if (static_cast<std::size_t>(sendcount) * contiguous_named_size(sendtype) != block)
      throw chorus::Error(chorus::ErrorCode::invalid_argument,
                          "the send blocks do not hold the bytes of the receive blocks");
    taken.chorus->alltoall(sendbuf, recvbuf, block, DataType::uint8);
  });
}

// A barrier moves no bytes: it goes to Chorus only with CHORUS_MPI_MIN_BYTES=0.
int MPI_Barrier(MPI_Comm comm) {
  auto& it = interposer();
  Taken taken;
  Route r = start(it, comm);
  if (r == Route::chorus) r = connect(it, 0, comm, taken);
  tally(it, kBarrier, r);
  if (r != Route::chorus) return PMPI_Barrier(comm);
  return on_chorus(it, comm, "MPI_Barrier", [&] { taken.chorus->barrier(); });
}

int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  if (request == nullptr || !any_pending(1, request)) return PMPI_Wait(request, status);
  auto failure = wait_while_progressing(1, request, [] { return false; });
  const int rc = PMPI_Wait(request, status);
  return report(std::move(failure), "MPI_Wait", rc);
}

int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  if (request == nullptr || !any_pending(1, request)) return PMPI_Test(request, flag, status);
  auto failure = settle(1, request, false);
  const int rc = PMPI_Test(request, flag, status);
  return report(std::move(failure), "MPI_Test", rc);
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  if (requests == nullptr || !any_pending(count, requests))
    return PMPI_Waitall(count, requests, statuses);
  auto failure = wait_while_progressing(count, requests, [] { return false; });
  const int rc = PMPI_Waitall(count, requests, statuses);
  return report(std::move(failure), "MPI_Waitall", rc);
}

int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  if (requests == nullptr || !any_pending(count, requests))
    return PMPI_Testall(count, requests, flag, statuses);
  auto failure = settle(count, requests, false);
  const int rc = PMPI_Testall(count, requests, flag, statuses);
  return report(std::move(failure), "MPI_Testall", rc);
}

int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  if (requests == nullptr || !any_pending(count, requests))
    return PMPI_Waitany(count, requests, index, status);
  int rc = MPI_SUCCESS, flag = 0;
  auto failure = wait_while_progressing(count, requests, [&] {
    rc = PMPI_Testany(count, requests, index, &flag, status);
    return flag != 0 || rc != MPI_SUCCESS;
  });
  if (!flag && rc == MPI_SUCCESS) rc = PMPI_Waitany(count, requests, index, status);
  return report(std::move(failure), "MPI_Waitany", rc);
}

int MPI_Testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) {
  if (requests == nullptr || !any_pending(count, requests))
    return PMPI_Testany(count, requests, index, flag, status);
  auto failure = settle(count, requests, false);
  const int rc = PMPI_Testany(count, requests, index, flag, status);
  return report(std::move(failure), "MPI_Testany", rc);
}

int MPI_Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                 MPI_Status statuses[]) {
  if (requests == nullptr || !any_pending(incount, requests))
    return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
  int rc = MPI_SUCCESS;
  *outcount = 0;
  auto failure = wait_while_progressing(incount, requests, [&] {
    rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
    return *outcount != 0 || rc != MPI_SUCCESS;
  });
  if (*outcount == 0 && rc == MPI_SUCCESS)
    rc = PMPI_Waitsome(incount, requests, outcount, indices, statuses);
  return report(std::move(failure), "MPI_Waitsome", rc);
}

int MPI_Testsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                 MPI_Status statuses[]) {
  if (requests == nullptr || !any_pending(incount, requests))
    return PMPI_Testsome(incount, requests, outcount, indices, statuses);
  auto failure = settle(incount, requests, false);
  const int rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
  return report(std::move(failure), "MPI_Testsome", rc);
}

int MPI_Request_get_status(MPI_Request request, int* flag, MPI_Status* status) {
  if (!any_pending(1, &request)) return PMPI_Request_get_status(request, flag, status);
  auto failure = settle(1, &request, false);
  const int rc = PMPI_Request_get_status(request, flag, status);
  return report(std::move(failure), "MPI_Request_get_status", rc);
}

int MPI_Request_free(MPI_Request* request) {
  // Freeing an active request lets it finish unobserved; ours must still be
  // completed, so it is waited for here.
  if (request != nullptr && any_pending(1, request)) (void)settle(1, request, true);
  return PMPI_Request_free(request);
}

}  // extern "C"

// libchorus_pmpi: runs an unchanged MPI program's collectives on Chorus,
// through the MPI profiling interface.
//
//   mpirun -np 4 -x LD_PRELOAD=libchorus_pmpi.so ./program
//
// This library defines MPI_ functions; loaded first, its definitions win over
// libmpi's, and it reaches MPI itself through the PMPI_ names. What it takes
// over (docs/mpi.md): MPI_Allreduce, Reduce, Reduce_scatter_block,
// Reduce_scatter, Bcast, Allgather, Allgatherv, Alltoall, Alltoallv, Gather,
// Gatherv, Scatter, Scatterv, Barrier, and the nonblocking Iallreduce,
// Ireduce, Ireduce_scatter_block, Ibcast, Iallgather, Ialltoall, Ibarrier
// (pmpi_collectives.cpp):
//  - calls on intra-communicators of two or more ranks, of at least
//    CHORUS_MPI_MIN_BYTES (the v-forms whose sizes not every rank knows, at
//    any size), MPI_IN_PLACE included: for reductions, a datatype whose
//    signature has one element type Chorus represents exactly and a
//    predefined op Chorus has; for data movement, any datatype, moved as
//    its signature's bytes (packed when the layout has holes);
//  - everything else goes to PMPI_ unchanged, and is counted with its reason
//    (CHORUS_MPI_VERBOSE=1 prints the counts at MPI_Finalize).
// Every rank of a communicator decides alike, from what MPI requires to
// agree (the type signature, not the datatype handle), so a call never runs
// on Chorus on one rank and on MPI on another.
//
// One Chorus communicator per MPI communicator, made at its first
// taken-over call (collective: every rank makes that call), kept in an MPI
// attribute whose delete callback frees it on MPI_Comm_free, and freed at
// MPI_Finalize otherwise. Chorus's errors go to the communicator's MPI error
// handler as MPI error codes whose MPI_Error_string is Chorus's message.
// This file: MPI_Init, MPI_Finalize and the request functions that
// complete the nonblocking collectives' generalized requests.
#include "mpi/pmpi_interposer.hpp"

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
    it.generation.fetch_add(1, std::memory_order_release);
    for (auto& entry : it.entries) entry.chorus.reset();
  }
  const int rc = PMPI_Finalize();
  std::lock_guard lock(it.mutex);
  it.generation.fetch_add(1, std::memory_order_release);
  it.entries.clear();
  return rc;
}

int MPI_Wait(MPI_Request* request, MPI_Status* status) {
  auto failure = request != nullptr ? wait_for_ours(1, request) : std::nullopt;
  const int rc = PMPI_Wait(request, status);
  return report(std::move(failure), "MPI_Wait", rc);
}

int MPI_Test(MPI_Request* request, int* flag, MPI_Status* status) {
  auto failure = request != nullptr ? settle(1, request, false) : std::nullopt;
  const int rc = PMPI_Test(request, flag, status);
  return report(std::move(failure), "MPI_Test", rc);
}

int MPI_Waitall(int count, MPI_Request requests[], MPI_Status statuses[]) {
  auto failure = requests != nullptr ? wait_for_ours(count, requests) : std::nullopt;
  const int rc = PMPI_Waitall(count, requests, statuses);
  return report(std::move(failure), "MPI_Waitall", rc);
}

int MPI_Testall(int count, MPI_Request requests[], int* flag, MPI_Status statuses[]) {
  auto failure = requests != nullptr ? settle(count, requests, false) : std::nullopt;
  const int rc = PMPI_Testall(count, requests, flag, statuses);
  return report(std::move(failure), "MPI_Testall", rc);
}

int MPI_Waitany(int count, MPI_Request requests[], int* index, MPI_Status* status) {
  if (requests == nullptr || !any_pending(count, requests))
    return PMPI_Waitany(count, requests, index, status);
  int rc = MPI_SUCCESS, flag = 0;
  auto failure = settle_until(count, requests, [&] {
    rc = PMPI_Testany(count, requests, index, &flag, status);
    return flag != 0 || rc != MPI_SUCCESS;
  });
  if (!flag && rc == MPI_SUCCESS) rc = PMPI_Waitany(count, requests, index, status);
  return report(std::move(failure), "MPI_Waitany", rc);
}

int MPI_Testany(int count, MPI_Request requests[], int* index, int* flag, MPI_Status* status) {
  auto failure = requests != nullptr ? settle(count, requests, false) : std::nullopt;
  const int rc = PMPI_Testany(count, requests, index, flag, status);
  return report(std::move(failure), "MPI_Testany", rc);
}

int MPI_Waitsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                 MPI_Status statuses[]) {
  if (requests == nullptr || !any_pending(incount, requests))
    return PMPI_Waitsome(incount, requests, outcount, indices, statuses);
  int rc = MPI_SUCCESS;
  *outcount = 0;
  auto failure = settle_until(incount, requests, [&] {
    rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
    return *outcount != 0 || rc != MPI_SUCCESS;
  });
  if (*outcount == 0 && rc == MPI_SUCCESS)
    rc = PMPI_Waitsome(incount, requests, outcount, indices, statuses);
  return report(std::move(failure), "MPI_Waitsome", rc);
}

int MPI_Testsome(int incount, MPI_Request requests[], int* outcount, int indices[],
                 MPI_Status statuses[]) {
  auto failure = requests != nullptr ? settle(incount, requests, false) : std::nullopt;
  const int rc = PMPI_Testsome(incount, requests, outcount, indices, statuses);
  return report(std::move(failure), "MPI_Testsome", rc);
}

int MPI_Request_get_status(MPI_Request request, int* flag, MPI_Status* status) {
  auto failure = settle(1, &request, false);
  const int rc = PMPI_Request_get_status(request, flag, status);
  return report(std::move(failure), "MPI_Request_get_status", rc);
}

int MPI_Request_free(MPI_Request* request) {
  // Freeing an active request lets it finish unobserved; ours must still be
  // completed, so it is waited for here.
  if (request != nullptr) (void)settle(1, request, true);
  return PMPI_Request_free(request);
}

}  // extern "C"

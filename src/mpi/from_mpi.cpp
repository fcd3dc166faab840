// libchorus_mpi: Communicator::from_mpi and chorus_comm_init_from_mpi. Only
// PMPI_ entry points are called, so that the PMPI interposition library
// (which wraps MPI_ ones) can build its communicators through this code.
#include <chorus/chorus_mpi.h>
#include <chorus/mpi.hpp>

#include "api/c_interop.hpp"

#include <string>

namespace chorus {

namespace {

std::string mpi_error_string(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (PMPI_Error_string(code, text, &length) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS)
    throw Error(ErrorCode::transport_error,
                std::string("from_mpi: ") + what + " failed: " + mpi_error_string(rc));
}

// Rank and size of `comm`, once it is known to be usable.
std::pair<int, int> place_in(MPI_Comm comm) {
  int initialized = 0, finalized = 0;
  PMPI_Initialized(&initialized);
  PMPI_Finalized(&finalized);
  if (!initialized || finalized)
    throw Error(ErrorCode::invalid_argument,
                "from_mpi: MPI is not initialized (call it between MPI_Init and MPI_Finalize)");
  if (comm == MPI_COMM_NULL)
    throw Error(ErrorCode::invalid_argument, "from_mpi: the communicator is MPI_COMM_NULL");
  int inter = 0;
  check_mpi(PMPI_Comm_test_inter(comm, &inter), "MPI_Comm_test_inter");
  if (inter)
    throw Error(ErrorCode::invalid_argument,
                "from_mpi: the communicator is an inter-communicator; Chorus needs an "
                "intra-communicator (MPI_Intercomm_merge makes one)");
  int rank = 0, size = 0;
  check_mpi(PMPI_Comm_rank(comm, &rank), "MPI_Comm_rank");
  check_mpi(PMPI_Comm_size(comm, &size), "MPI_Comm_size");
  return {rank, size};
}

int allgather_bytes(MPI_Comm comm, const void* send, std::size_t bytes, void* recv) {
  if (bytes > static_cast<std::size_t>(INT32_MAX)) return MPI_ERR_COUNT;
  return PMPI_Allgather(send, static_cast<int>(bytes), MPI_BYTE, recv, static_cast<int>(bytes),
                        MPI_BYTE, comm);
}

}  // namespace

template <class MpiComm>
Communicator Communicator::from_mpi(MpiComm comm, const Options& options) {
  const auto [rank, size] = place_in(comm);
  return connect(
      rank, size,
      [comm](const void* send, std::size_t bytes, void* recv) {
        check_mpi(allgather_bytes(comm, send, bytes, recv), "MPI_Allgather of the addresses");
      },
      options);
}

template Communicator Communicator::from_mpi<MPI_Comm>(MPI_Comm comm,
                                                                  const Options& options);

}  // namespace chorus

extern "C" chorus_result_t chorus_comm_init_from_mpi(chorus_comm_t* comm, MPI_Comm mpi_comm) {
  return chorus::c_interop::init_comm(
      comm, [mpi_comm] { return chorus::Communicator::from_mpi(mpi_comm); });
}

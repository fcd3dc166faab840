// The C ABI: each function turns every C++ exception into a result code and
// keeps the message for chorus_get_last_error().
#include <chorus/chorus.h>

#include <chorus/communicator.hpp>

#include "api/c_interop.hpp"

#include <new>
#include <string>

struct chorus_comm {
  chorus::Communicator communicator;
  std::string last_error;
};

namespace {

static_assert(static_cast<int>(chorus::ErrorCode::invalid_argument) == chorus_invalid_argument);
static_assert(static_cast<int>(chorus::ErrorCode::aborted) == chorus_aborted);
static_assert(static_cast<int>(chorus::DataType::float64) == chorus_float64);
static_assert(static_cast<int>(chorus::ReduceOp::bxor) == chorus_bxor);

thread_local std::string init_error;  // for failures with no communicator yet

// Runs `body`, mapping what it throws to a result and a message in `where`.
template <class Body>
chorus_result_t guarded(std::string& where, Body&& body) noexcept {
  try {
    body();
    return chorus_success;
  } catch (const chorus::Error& e) {
    where = e.what();
    return static_cast<chorus_result_t>(e.code());
  } catch (const std::bad_alloc&) {
    where = "out of memory";
    return chorus_internal_error;
  } catch (const std::exception& e) {
    where = e.what();
    return chorus_internal_error;
  } catch (...) {
    where = "unknown exception";
    return chorus_internal_error;
  }
}

chorus_result_t null_comm(const char* function) {
  init_error = std::string(function) + ": the communicator is NULL";
  return chorus_invalid_argument;
}

// A C array of one entry per rank; NULL is an empty span, an error when
// `required` (the message names the array).
std::span<const std::size_t> per_rank(const size_t* array, int size, const char* name,
                                      bool required) {
  if (array == nullptr) {
    if (required)
      throw chorus::Error(chorus::ErrorCode::invalid_argument, std::string(name) + " is NULL");
    return {};
  }
  return {array, static_cast<std::size_t>(size)};
}

template <class Make>
chorus_result_t init(chorus_comm_t* comm, Make&& make) noexcept {
  if (comm == nullptr) {
    init_error = "chorus_comm_init: the output pointer is NULL";
    return chorus_invalid_argument;
  }
  *comm = nullptr;
  return guarded(init_error, [&] { *comm = new chorus_comm{make(), {}}; });
}

}  // namespace

chorus_result_t chorus::c_interop::init_comm(chorus_comm_t* comm,
                                             const std::function<Communicator()>& make) noexcept {
  return init(comm, make);
}

extern "C" {

const char* chorus_get_error_string(chorus_result_t result) {
  switch (result) {
    case chorus_success: return "success";
    case chorus_invalid_argument: return "invalid argument";
    case chorus_unsupported: return "unsupported";
    case chorus_timeout: return "timeout";
    case chorus_peer_failure: return "peer failure";
    case chorus_mismatched_collective: return "mismatched collective";
    case chorus_transport_error: return "transport error";
    case chorus_internal_error: return "internal error";
    case chorus_aborted: return "aborted";
  }
  return "unknown result";
}

const char* chorus_get_last_error(chorus_comm_t comm) {
  return comm == nullptr ? init_error.c_str() : comm->last_error.c_str();
}

chorus_result_t chorus_comm_init_from_env(chorus_comm_t* comm) {
  return init(comm, [] { return chorus::Communicator::from_env(); });
}

chorus_result_t chorus_comm_init(chorus_comm_t* comm, int rank, int size, const char* store) {
  if (store == nullptr && size > 1) {
    init_error = "chorus_comm_init: store is NULL (want tcp://host:port or file:///dir)";
    return chorus_invalid_argument;
  }
  return init(comm, [&] { return chorus::Communicator::connect(rank, size, store ? store : ""); });
}

chorus_result_t chorus_comm_init_with_allgather(chorus_comm_t* comm, int rank, int size,
                                               chorus_allgather_fn allgather, void* context) {
  if (allgather == nullptr) {
    init_error = "chorus_comm_init_with_allgather: allgather is NULL";
    return chorus_invalid_argument;
  }
  const chorus::Communicator::Allgather gather = [&](const void* send, std::size_t bytes,
                                                     void* recv) {
    if (const int rc = allgather(send, bytes, recv, context); rc != 0)
      throw chorus::Error(chorus::ErrorCode::transport_error,
                          "chorus_comm_init_with_allgather: the all-gather returned " +
                              std::to_string(rc));
  };
  return init(comm, [&] { return chorus::Communicator::connect(rank, size, gather); });
}

chorus_result_t chorus_comm_split(chorus_comm_t comm, int color, int key, chorus_comm_t* newcomm) {
  if (comm == nullptr) return null_comm("chorus_comm_split");
  return guarded(comm->last_error, [&] {
    if (newcomm == nullptr)
      throw chorus::Error(chorus::ErrorCode::invalid_argument, "chorus_comm_split: newcomm is NULL");
    *newcomm = nullptr;
    auto split = comm->communicator.split(color, key);
    if (split) *newcomm = new chorus_comm{std::move(*split), {}};
  });
}

chorus_result_t chorus_comm_dup(chorus_comm_t comm, chorus_comm_t* newcomm) {
  if (comm == nullptr) return null_comm("chorus_comm_dup");
  return guarded(comm->last_error, [&] {
    if (newcomm == nullptr)
      throw chorus::Error(chorus::ErrorCode::invalid_argument, "chorus_comm_dup: newcomm is NULL");
    *newcomm = nullptr;
    *newcomm = new chorus_comm{comm->communicator.dup(), {}};
  });
}

chorus_result_t chorus_comm_rank(chorus_comm_t comm, int* rank) {
  if (comm == nullptr) return null_comm("chorus_comm_rank");
  return guarded(comm->last_error, [&] {
    if (rank == nullptr) throw chorus::Error(chorus::ErrorCode::invalid_argument, "chorus_comm_rank: rank is NULL");
    *rank = comm->communicator.rank();
  });
}

chorus_result_t chorus_comm_size(chorus_comm_t comm, int* size) {
  if (comm == nullptr) return null_comm("chorus_comm_size");
  return guarded(comm->last_error, [&] {
    if (size == nullptr) throw chorus::Error(chorus::ErrorCode::invalid_argument, "chorus_comm_size: size is NULL");
    *size = comm->communicator.size();
  });
}

chorus_result_t chorus_comm_destroy(chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_comm_destroy");
  return guarded(init_error, [&] { delete comm; });
}

chorus_result_t chorus_comm_abort(chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_comm_abort");
  return guarded(init_error, [&] {
    comm->communicator.abort("chorus_comm_abort");
    delete comm;
  });
}

chorus_result_t chorus_allreduce(const void* sendbuf, void* recvbuf, size_t count,
                                 chorus_datatype_t datatype, chorus_redop_t op, chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_allreduce");
  return guarded(comm->last_error, [&] {
    comm->communicator.allreduce(sendbuf, recvbuf, count, static_cast<chorus::DataType>(datatype),
                                 static_cast<chorus::ReduceOp>(op));
  });
}

chorus_result_t chorus_broadcast(void* buffer, size_t count, chorus_datatype_t datatype, int root,
                                 chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_broadcast");
  return guarded(comm->last_error, [&] {
    comm->communicator.broadcast(buffer, count, static_cast<chorus::DataType>(datatype), root);
  });
}

chorus_result_t chorus_reduce(const void* sendbuf, void* recvbuf, size_t count,
                              chorus_datatype_t datatype, chorus_redop_t op, int root,
                              chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_reduce");
  return guarded(comm->last_error, [&] {
    comm->communicator.reduce(sendbuf, recvbuf, count, static_cast<chorus::DataType>(datatype),
                              static_cast<chorus::ReduceOp>(op), root);
  });
}

chorus_result_t chorus_allgather(const void* sendbuf, void* recvbuf, size_t count_per_rank,
                                 chorus_datatype_t datatype, chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_allgather");
  return guarded(comm->last_error, [&] {
    comm->communicator.allgather(sendbuf, recvbuf, count_per_rank,
                                 static_cast<chorus::DataType>(datatype));
  });
}

chorus_result_t chorus_reduce_scatter(const void* sendbuf, void* recvbuf, size_t count_per_rank,
                                      chorus_datatype_t datatype, chorus_redop_t op,
                                      chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_reduce_scatter");
  return guarded(comm->last_error, [&] {
    comm->communicator.reduce_scatter(sendbuf, recvbuf, count_per_rank,
                                      static_cast<chorus::DataType>(datatype),
                                      static_cast<chorus::ReduceOp>(op));
  });
}

chorus_result_t chorus_alltoall(const void* sendbuf, void* recvbuf, size_t count_per_rank,
                                chorus_datatype_t datatype, chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_alltoall");
  return guarded(comm->last_error, [&] {
    comm->communicator.alltoall(sendbuf, recvbuf, count_per_rank,
                                static_cast<chorus::DataType>(datatype));
  });
}

chorus_result_t chorus_gather(const void* sendbuf, void* recvbuf, size_t count,
                              chorus_datatype_t datatype, int root, chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_gather");
  return guarded(comm->last_error, [&] {
    comm->communicator.gather(sendbuf, recvbuf, count, static_cast<chorus::DataType>(datatype), root);
  });
}

chorus_result_t chorus_scatter(const void* sendbuf, void* recvbuf, size_t count,
                               chorus_datatype_t datatype, int root, chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_scatter");
  return guarded(comm->last_error, [&] {
    comm->communicator.scatter(sendbuf, recvbuf, count, static_cast<chorus::DataType>(datatype), root);
  });
}

chorus_result_t chorus_allgatherv(const void* sendbuf, void* recvbuf, const size_t* counts,
                                  const size_t* displs, chorus_datatype_t datatype,
                                  chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_allgatherv");
  return guarded(comm->last_error, [&] {
    const int p = comm->communicator.size();
    comm->communicator.allgatherv(sendbuf, recvbuf, per_rank(counts, p, "chorus_allgatherv: counts", true),
                                  per_rank(displs, p, "chorus_allgatherv: displs", false),
                                  static_cast<chorus::DataType>(datatype));
  });
}

chorus_result_t chorus_reduce_scatter_v(const void* sendbuf, void* recvbuf,
                                        const size_t* recvcounts, chorus_datatype_t datatype,
                                        chorus_redop_t op, chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_reduce_scatter_v");
  return guarded(comm->last_error, [&] {
    comm->communicator.reduce_scatter_v(
        sendbuf, recvbuf, per_rank(recvcounts, comm->communicator.size(), "recvcounts", true),
        static_cast<chorus::DataType>(datatype), static_cast<chorus::ReduceOp>(op));
  });
}

chorus_result_t chorus_alltoallv(const void* sendbuf, const size_t* sendcounts,
                                 const size_t* sdispls, void* recvbuf, const size_t* recvcounts,
                                 const size_t* rdispls, chorus_datatype_t datatype,
                                 chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_alltoallv");
  return guarded(comm->last_error, [&] {
    const int p = comm->communicator.size();
    comm->communicator.alltoallv(sendbuf, per_rank(sendcounts, p, "chorus_alltoallv: sendcounts", true),
                                 per_rank(sdispls, p, "chorus_alltoallv: sdispls", false), recvbuf,
                                 per_rank(recvcounts, p, "chorus_alltoallv: recvcounts", true),
                                 per_rank(rdispls, p, "chorus_alltoallv: rdispls", false),
                                 static_cast<chorus::DataType>(datatype));
  });
}

chorus_result_t chorus_gatherv(const void* sendbuf, size_t sendcount, void* recvbuf,
                               const size_t* recvcounts, const size_t* displs,
                               chorus_datatype_t datatype, int root, chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_gatherv");
  return guarded(comm->last_error, [&] {
    const int p = comm->communicator.size();
    const bool at_root = comm->communicator.rank() == root;
    comm->communicator.gatherv(sendbuf, sendcount, recvbuf,
                               per_rank(recvcounts, p, "chorus_gatherv: recvcounts", at_root),
                               per_rank(displs, p, "chorus_gatherv: displs", false),
                               static_cast<chorus::DataType>(datatype), root);
  });
}

chorus_result_t chorus_scatterv(const void* sendbuf, const size_t* sendcounts,
                                const size_t* displs, void* recvbuf, size_t recvcount,
                                chorus_datatype_t datatype, int root, chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_scatterv");
  return guarded(comm->last_error, [&] {
    const int p = comm->communicator.size();
    const bool at_root = comm->communicator.rank() == root;
    comm->communicator.scatterv(sendbuf, per_rank(sendcounts, p, "chorus_scatterv: sendcounts", at_root),
                                per_rank(displs, p, "chorus_scatterv: displs", false), recvbuf, recvcount,
                                static_cast<chorus::DataType>(datatype), root);
  });
}

chorus_result_t chorus_barrier(chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_barrier");
  return guarded(comm->last_error, [&] { comm->communicator.barrier(); });
}

chorus_result_t chorus_send(const void* buf, size_t count, chorus_datatype_t datatype, int peer,
                            uint32_t tag, chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_send");
  return guarded(comm->last_error, [&] {
    comm->communicator.send(buf, count, static_cast<chorus::DataType>(datatype), peer, tag);
  });
}

chorus_result_t chorus_recv(void* buf, size_t count, chorus_datatype_t datatype, int peer,
                            uint32_t tag, int* source, chorus_comm_t comm) {
  if (comm == nullptr) return null_comm("chorus_recv");
  return guarded(comm->last_error, [&] {
    const int from =
        comm->communicator.recv(buf, count, static_cast<chorus::DataType>(datatype), peer, tag);
    if (source != nullptr) *source = from;
  });
}

}  // extern "C"

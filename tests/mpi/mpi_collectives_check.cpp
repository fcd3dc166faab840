// A plain MPI program (it knows nothing of Chorus) that runs MPI_Allreduce
// and MPI_Iallreduce over many sizes, datatypes, ops, in place and not (and
// MPI_Bcast, Reduce, Allgather, Reduce_scatter_block, Alltoall, Barrier), on
// MPI_COMM_WORLD, a split and a dup, and checks every result against values
// it computes itself. The tests run it under mpirun with and without
// LD_PRELOAD=libchorus_pmpi.so; it must pass alike.
//
//   mpi_collectives_check            the correctness sweep
//   mpi_collectives_check --errors   (under the preload) a mismatched call
//       on a communicator with MPI_ERRORS_RETURN must return an MPI error
//       whose MPI_Error_string names the mismatch, on every rank.
//   mpi_collectives_check --errors-fatal   the same under the default
//       MPI_ERRORS_ARE_FATAL: the job must abort with Chorus's message.
#include <mpi.h>

#include <cinttypes>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

namespace {

int world_rank = 0;
long failures = 0;
long checked_calls = 0;

void fail(const std::string& what) {
  if (failures++ < 10) std::fprintf(stderr, "rank %d: WRONG: %s\n", world_rank, what.c_str());
}

enum class Op { sum, prod, min, max, band, bor, bxor };
const char* name(Op op) {
  constexpr const char* names[] = {"sum", "prod", "min", "max", "band", "bor", "bxor"};
  return names[static_cast<int>(op)];
}
MPI_Op mpi_op(Op op) {
  switch (op) {
    case Op::sum: return MPI_SUM;
    case Op::prod: return MPI_PROD;
    case Op::min: return MPI_MIN;
    case Op::max: return MPI_MAX;
    case Op::band: return MPI_BAND;
    case Op::bor: return MPI_BOR;
    case Op::bxor: return MPI_BXOR;
  }
  return MPI_OP_NULL;
}

// Rank r's element i: integers cover the whole range so that sums and
// products wrap (MPI's arithmetic is two's complement); floats are small
// integers (sums exact in any order) or, for products, +-1 and 2.
template <class T>
T value(int r, std::size_t i, Op op) {
  if constexpr (std::is_floating_point_v<T>) {
    if (op == Op::prod) {
      constexpr T choices[] = {1, -1, 2, 1, 1};
      return choices[(i + static_cast<std::size_t>(r) * 3) % 5];
    }
    return static_cast<T>(static_cast<int>((i * 7 + static_cast<std::size_t>(r) * 5) % 41) - 20);
  } else {
    const std::uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(r) * 0xBF58476D1CE4E5B9ull;
    return static_cast<T>(x >> 17);
  }
}

template <class T>
T combine(T a, T b, Op op) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    switch (op) {
      case Op::sum: return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
      case Op::prod: return static_cast<T>(static_cast<U>(static_cast<U>(a) * static_cast<U>(b)));
      case Op::band: return static_cast<T>(a & b);
      case Op::bor: return static_cast<T>(a | b);
      case Op::bxor: return static_cast<T>(a ^ b);
      default: break;
    }
  } else {
    if (op == Op::sum) return a + b;
    if (op == Op::prod) return a * b;
  }
  return op == Op::min ? (b < a ? b : a) : (a < b ? b : a);
}

// Completes three requests: with MPI_Waitall, MPI_Wait on each, an
// MPI_Request_get_status then MPI_Testall loop, or an MPI_Waitany loop.
int finish(MPI_Request* requests, std::size_t style) {
  int rc = MPI_SUCCESS;
  switch (style) {
    case 0:
      return MPI_Waitall(3, requests, MPI_STATUSES_IGNORE);
    case 1:
      for (int i = 0; i < 3 && rc == MPI_SUCCESS; ++i) rc = MPI_Wait(&requests[i], MPI_STATUS_IGNORE);
      return rc;
    case 2:  // the collective's status first (it stays allocated), then all
      for (int done = 0; !done && rc == MPI_SUCCESS;)
        rc = MPI_Request_get_status(requests[1], &done, MPI_STATUS_IGNORE);
      for (int done = 0; !done && rc == MPI_SUCCESS;)
        rc = MPI_Testall(3, requests, &done, MPI_STATUSES_IGNORE);
      return rc;
    default:
      for (int left = 3; left > 0 && rc == MPI_SUCCESS; --left) {
        int index = MPI_UNDEFINED;
        rc = MPI_Waitany(3, requests, &index, MPI_STATUS_IGNORE);
        if (index == MPI_UNDEFINED) break;
      }
      return rc;
  }
}

// One MPI_Allreduce or MPI_Iallreduce, checked.
template <class T>
void check_allreduce(MPI_Comm comm, MPI_Datatype type, const char* type_name, Op op,
                     std::size_t count, bool in_place, bool nonblocking) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<T> send(count), recv(count, T(99)), want(count);
  for (std::size_t i = 0; i < count; ++i) {
    send[i] = value<T>(rank, i, op);
    T acc = value<T>(0, i, op);
    for (int r = 1; r < size; ++r) acc = combine(acc, value<T>(r, i, op), op);
    want[i] = acc;
  }
  if (in_place) recv = send;
  const void* sendbuf = in_place ? MPI_IN_PLACE : send.data();
  const int n = static_cast<int>(count);
  int rc = MPI_SUCCESS;
  if (nonblocking) {
    // Beside point-to-point traffic, finished in one of four ways.
    MPI_Request requests[3];
    int token_out = rank, token_in = -1;
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    MPI_Irecv(&token_in, 1, MPI_INT, left, 7, comm, &requests[0]);
    rc = MPI_Iallreduce(sendbuf, recv.data(), n, type, mpi_op(op), comm, &requests[1]);
    MPI_Isend(&token_out, 1, MPI_INT, right, 7, comm, &requests[2]);
    static std::size_t nonblocking_calls = 0;  // the same sequence on every rank
    if (rc == MPI_SUCCESS) rc = finish(requests, nonblocking_calls++ % 4);
    if (token_in != left) fail("the point-to-point message beside MPI_Iallreduce was lost");
  } else {
    rc = MPI_Allreduce(sendbuf, recv.data(), n, type, mpi_op(op), comm);
  }
  ++checked_calls;
  char where[200];
  std::snprintf(where, sizeof where, "%s(count=%zu, %s, %s%s) on %d ranks",
                nonblocking ? "MPI_Iallreduce" : "MPI_Allreduce", count, type_name, name(op),
                in_place ? ", in place" : "", size);
  if (rc != MPI_SUCCESS) return fail(std::string(where) + ": returned an error");
  if (count > 0 && std::memcmp(recv.data(), want.data(), count * sizeof(T)) != 0) {
    std::size_t i = 0;
    while (std::memcmp(&recv[i], &want[i], sizeof(T)) == 0) ++i;
    fail(std::string(where) + ": element " + std::to_string(i) + " differs");
  }
}

template <class T>
void sweep_type(MPI_Comm comm, MPI_Datatype type, const char* type_name, bool bitwise_only = false) {
  static const std::size_t counts[] = {0, 1, 3, 1000, 4099, 70000};
  std::vector<Op> ops;
  if (!bitwise_only) ops = {Op::sum, Op::prod, Op::min, Op::max};
  if (std::is_integral_v<T>) ops.insert(ops.end(), {Op::band, Op::bor, Op::bxor});
  int variant = 0;
  for (Op op : ops)
    for (std::size_t count : counts) {
      // Every combination of in place and nonblocking, spread over the sweep.
      ++variant;
      check_allreduce<T>(comm, type, type_name, op, count, variant % 2 == 0, variant % 3 == 0);
    }
}

// Under libchorus_pmpi: a small 8-bit integer sum that overflows wraps, as
// MPI says (Open MPI 4.1's op/avx alone saturates it, so this runs only
// with the library preloaded; the library sends such sums to Chorus at
// every size).
void check_int8_sums_wrap(MPI_Comm comm) {
  const char* preload = std::getenv("LD_PRELOAD");
  if (preload == nullptr || std::strstr(preload, "chorus_pmpi") == nullptr) return;
  int p = 0;
  MPI_Comm_size(comm, &p);
  std::int8_t send[8], recv[8];
  std::fill(send, send + 8, std::int8_t{100});
  MPI_Allreduce(send, recv, 8, MPI_INT8_T, MPI_SUM, comm);
  const auto want = static_cast<std::int8_t>(static_cast<std::uint8_t>(100 * p));  // modulo 256
  for (std::int8_t v : recv)
    if (v != want) return fail("MPI_Allreduce of 8 MPI_INT8_T did not wrap: got " + std::to_string(v) +
                               ", want " + std::to_string(want));
}

void sweep(MPI_Comm comm) {
  check_int8_sums_wrap(comm);
  sweep_type<float>(comm, MPI_FLOAT, "MPI_FLOAT");
  sweep_type<double>(comm, MPI_DOUBLE, "MPI_DOUBLE");
  sweep_type<int>(comm, MPI_INT, "MPI_INT");
  sweep_type<unsigned>(comm, MPI_UNSIGNED, "MPI_UNSIGNED");
  sweep_type<long>(comm, MPI_LONG, "MPI_LONG");
  sweep_type<unsigned long>(comm, MPI_UNSIGNED_LONG, "MPI_UNSIGNED_LONG");
  sweep_type<long long>(comm, MPI_LONG_LONG, "MPI_LONG_LONG");
  sweep_type<std::int8_t>(comm, MPI_INT8_T, "MPI_INT8_T");
  sweep_type<std::uint8_t>(comm, MPI_UINT8_T, "MPI_UINT8_T");
  sweep_type<std::int32_t>(comm, MPI_INT32_T, "MPI_INT32_T");
  sweep_type<std::uint64_t>(comm, MPI_UINT64_T, "MPI_UINT64_T");
  sweep_type<signed char>(comm, MPI_SIGNED_CHAR, "MPI_SIGNED_CHAR");
  sweep_type<unsigned char>(comm, MPI_UNSIGNED_CHAR, "MPI_UNSIGNED_CHAR");
  sweep_type<unsigned char>(comm, MPI_BYTE, "MPI_BYTE", /*bitwise_only=*/true);
  sweep_type<short>(comm, MPI_SHORT, "MPI_SHORT");  // not Chorus's: passes through
}

// ---- The other collectives --------------------------------------------------

std::string where_of(const char* call, std::size_t count, const char* type, int size,
                     const char* extra = "") {
  return std::string(call) + "(count=" + std::to_string(count) + ", " + type + extra + ") on " +
         std::to_string(size) + " ranks";
}

template <class T>
void check_bcast(MPI_Comm comm, MPI_Datatype type, const char* type_name, std::size_t count) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  for (int root : {0, size - 1}) {
    std::vector<T> data(count);
    for (std::size_t i = 0; i < count; ++i) data[i] = rank == root ? value<T>(root, i, Op::sum) : T(7);
    const int rc = MPI_Bcast(data.data(), static_cast<int>(count), type, root, comm);
    ++checked_calls;
    const std::string where = where_of("MPI_Bcast", count, type_name, size) + " root " + std::to_string(root);
    if (rc != MPI_SUCCESS) return fail(where + ": returned an error");
    for (std::size_t i = 0; i < count; ++i) {
      const T want = value<T>(root, i, Op::sum);
      if (std::memcmp(&data[i], &want, sizeof(T)) != 0)
        return fail(where + ": element " + std::to_string(i) + " differs");
    }
  }
}

template <class T>
void check_reduce(MPI_Comm comm, MPI_Datatype type, const char* type_name, Op op, std::size_t count,
                  bool in_place) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int root = size / 2;
  std::vector<T> send(count), recv(count), want(count);
  for (std::size_t i = 0; i < count; ++i) {
    send[i] = value<T>(rank, i, op);
    T acc = value<T>(0, i, op);
    for (int r = 1; r < size; ++r) acc = combine(acc, value<T>(r, i, op), op);
    want[i] = acc;
  }
  const void* sendbuf = send.data();
  if (in_place && rank == root) {
    recv = send;
    sendbuf = MPI_IN_PLACE;
  }
  const int rc = MPI_Reduce(sendbuf, recv.data(), static_cast<int>(count), type, mpi_op(op), root, comm);
  ++checked_calls;
  const std::string where = where_of("MPI_Reduce", count, type_name, size, in_place ? ", in place" : "") + " " + name(op);
  if (rc != MPI_SUCCESS) return fail(where + ": returned an error");
  if (rank == root && count && std::memcmp(recv.data(), want.data(), count * sizeof(T)) != 0)
    fail(where + ": wrong result at the root");
}

// Rank r's block for rank j (alltoall) or its own block (allgather, j = 0).
int block_value(int r, int j, std::size_t i) { return static_cast<int>(r * 1000003 + j * 7919 + static_cast<int>(i)); }

void check_allgather(MPI_Comm comm, std::size_t count, bool in_place, bool as_bytes) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<int> send(count), recv(count * static_cast<std::size_t>(size), -1);
  for (std::size_t i = 0; i < count; ++i) send[i] = block_value(rank, 0, i);
  const void* sendbuf = send.data();
  if (in_place) {
    std::copy(send.begin(), send.end(), recv.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(rank) * count));
    sendbuf = MPI_IN_PLACE;
  }
  // as_bytes: the send side says MPI_BYTE, the receive side MPI_INT (same bytes).
  const int rc = MPI_Allgather(sendbuf, static_cast<int>(count * (as_bytes ? sizeof(int) : 1)),
                               as_bytes ? MPI_BYTE : MPI_INT, recv.data(), static_cast<int>(count),
                               MPI_INT, comm);
  ++checked_calls;
  const std::string where = where_of("MPI_Allgather", count, as_bytes ? "MPI_BYTE to MPI_INT" : "MPI_INT", size,
                                     in_place ? ", in place" : "");
  if (rc != MPI_SUCCESS) return fail(where + ": returned an error");
  for (int r = 0; r < size; ++r)
    for (std::size_t i = 0; i < count; ++i)
      if (recv[static_cast<std::size_t>(r) * count + i] != block_value(r, 0, i))
        return fail(where + ": block " + std::to_string(r) + " differs");
}

template <class T>
void check_reduce_scatter_block(MPI_Comm comm, MPI_Datatype type, const char* type_name, Op op,
                                std::size_t count, bool in_place) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const std::size_t p = static_cast<std::size_t>(size);
  // Block j of rank r: value(r, j * count + i); rank j gets op over r.
  std::vector<T> send(count * p), recv(count), want(count);
  for (std::size_t k = 0; k < count * p; ++k) send[k] = value<T>(rank, k, op);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t k = static_cast<std::size_t>(rank) * count + i;
    T acc = value<T>(0, k, op);
    for (int r = 1; r < size; ++r) acc = combine(acc, value<T>(r, k, op), op);
    want[i] = acc;
  }
  int rc;
  if (in_place) {
    rc = MPI_Reduce_scatter_block(MPI_IN_PLACE, send.data(), static_cast<int>(count), type, mpi_op(op), comm);
    std::copy(send.begin(), send.begin() + static_cast<std::ptrdiff_t>(count), recv.begin());
  } else {
    rc = MPI_Reduce_scatter_block(send.data(), recv.data(), static_cast<int>(count), type, mpi_op(op), comm);
  }
  ++checked_calls;
  const std::string where = where_of("MPI_Reduce_scatter_block", count, type_name, size,
                                     in_place ? ", in place" : "") + " " + name(op);
  if (rc != MPI_SUCCESS) return fail(where + ": returned an error");
  if (count && std::memcmp(recv.data(), want.data(), count * sizeof(T)) != 0) fail(where + ": wrong block");
}

void check_alltoall(MPI_Comm comm, std::size_t count) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const std::size_t p = static_cast<std::size_t>(size);
  std::vector<int> send(count * p), recv(count * p, -1);
  for (int j = 0; j < size; ++j)
    for (std::size_t i = 0; i < count; ++i) send[static_cast<std::size_t>(j) * count + i] = block_value(rank, j, i);
  const int rc = MPI_Alltoall(send.data(), static_cast<int>(count), MPI_INT, recv.data(),
                              static_cast<int>(count), MPI_INT, comm);
  ++checked_calls;
  const std::string where = where_of("MPI_Alltoall", count, "MPI_INT", size);
  if (rc != MPI_SUCCESS) return fail(where + ": returned an error");
  for (int j = 0; j < size; ++j)
    for (std::size_t i = 0; i < count; ++i)
      if (recv[static_cast<std::size_t>(j) * count + i] != block_value(j, rank, i))
        return fail(where + ": block from " + std::to_string(j) + " differs");
}

void sweep_other_collectives(MPI_Comm comm) {
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{70000}}) {
    check_bcast<int>(comm, MPI_INT, "MPI_INT", count);
    check_bcast<double>(comm, MPI_DOUBLE, "MPI_DOUBLE", count);
    check_bcast<short>(comm, MPI_SHORT, "MPI_SHORT", count);  // moved as bytes
    check_reduce<float>(comm, MPI_FLOAT, "MPI_FLOAT", Op::sum, count, false);
    check_reduce<std::int8_t>(comm, MPI_INT8_T, "MPI_INT8_T", Op::sum, count, true);
    check_reduce<int>(comm, MPI_INT, "MPI_INT", Op::max, count, true);
    check_reduce<short>(comm, MPI_SHORT, "MPI_SHORT", Op::sum, count, false);  // passes through
    for (bool in_place : {false, true}) {
      check_allgather(comm, count, in_place, false);
      check_reduce_scatter_block<float>(comm, MPI_FLOAT, "MPI_FLOAT", Op::sum, count, in_place);
      check_reduce_scatter_block<std::uint64_t>(comm, MPI_UINT64_T, "MPI_UINT64_T", Op::bxor, count, in_place);
    }
    check_allgather(comm, count, false, true);
    check_alltoall(comm, count);
    if (MPI_Barrier(comm) != MPI_SUCCESS) fail("MPI_Barrier returned an error");
    ++checked_calls;
  }
}

// A derived datatype and a user-defined op must pass through to MPI.
void pair_sum(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<int*>(in);
  auto* b = static_cast<int*>(inout);
  for (int i = 0; i < 2 * *len; ++i) b[i] += a[i];
}

void check_derived_and_user_op(MPI_Comm comm) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Datatype pair;
  MPI_Type_contiguous(2, MPI_INT, &pair);
  MPI_Type_commit(&pair);
  MPI_Op op;
  MPI_Op_create(pair_sum, 1, &op);
  const int count = 50000;
  std::vector<int> send(2 * count), recv(2 * count);
  for (int i = 0; i < 2 * count; ++i) send[static_cast<std::size_t>(i)] = rank * 1000 + i;
  MPI_Allreduce(send.data(), recv.data(), count, pair, op, comm);
  ++checked_calls;
  for (int i = 0; i < 2 * count; ++i) {
    const int want = 1000 * size * (size - 1) / 2 + size * i;
    if (recv[static_cast<std::size_t>(i)] != want) {
      fail("MPI_Allreduce with a derived datatype and a user op: element " + std::to_string(i));
      break;
    }
  }
  MPI_Op_free(&op);
  MPI_Type_free(&pair);
}

// Under the preload: ranks disagree on the count; Chorus's call check names
// it, and MPI_ERRORS_RETURN turns it into a returned MPI error.
int check_error_reporting(bool fatal) {
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  if (!fatal) MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  const std::size_t count = 100000 + static_cast<std::size_t>(world_rank) * 1000;
  std::vector<float> data(count, 1.0f);
  const int rc = MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(count), MPI_FLOAT,
                               MPI_SUM, comm);
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(rc, text, &length);
  const bool ok = rc != MPI_SUCCESS && std::strstr(text, "called different collectives") != nullptr;
  std::printf("rank %d: mismatched MPI_Allreduce returned %d: %s: %s\n", world_rank, rc, text,
              ok ? "ok" : "WRONG");
  // The Chorus communicator behind `comm` is unusable now; MPI's is not.
  MPI_Comm_free(&comm);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (argc > 1 && (std::strcmp(argv[1], "--errors") == 0 || std::strcmp(argv[1], "--errors-fatal") == 0)) {
    const int bad = check_error_reporting(std::strcmp(argv[1], "--errors-fatal") == 0);
    MPI_Finalize();
    return bad;
  }

  sweep(MPI_COMM_WORLD);
  sweep_other_collectives(MPI_COMM_WORLD);
  // Halves in reverse order (ranks of the split differ from the world's),
  // and a dup: each gets communicators of its own.
  MPI_Comm half, dup;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_size - world_rank, &half);
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  sweep(half);
  sweep(dup);
  sweep_other_collectives(half);
  sweep_other_collectives(dup);
  check_derived_and_user_op(MPI_COMM_WORLD);
  MPI_Comm_free(&half);
  MPI_Comm_free(&dup);

  long all_failures = 0;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0)
    std::printf("mpi_collectives_check: %d ranks, %ld calls checked per rank: %s\n", world_size,
                checked_calls, all_failures == 0 ? "all results right" : "WRONG RESULTS");
  MPI_Finalize();
  return all_failures == 0 ? 0 : 1;
}

// A plain MPI program (it knows nothing of Chorus) that runs every
// collective libchorus_pmpi wraps (MPI_Allreduce and MPI_Iallreduce over
// many sizes, datatypes and ops; Bcast, Reduce, Allgather(v),
// Reduce_scatter(_block), Alltoall(v), Gather(v), Scatter(v), Barrier and
// the nonblocking forms; C_BOOL logical ops, Fortran-named types, derived
// datatypes that ranks describe differently), in place and not, on
// MPI_COMM_WORLD, a split, a dup and communicators made from groups
// (MPI_Comm_create, MPI_Comm_create_group), and checks every result against
// values it computes itself. The tests run it under mpirun with and without
// LD_PRELOAD=libchorus_pmpi.so; it must pass alike.
//
//   mpi_collectives_check            the correctness sweep
//   mpi_collectives_check --quick    a few calls of each kind (settings tests)
//   mpi_collectives_check --errors   (under the preload) a mismatched call
//       on a communicator with MPI_ERRORS_RETURN must return an MPI error
//       whose MPI_Error_string names the mismatch, on every rank.
//   mpi_collectives_check --errors-fatal   the same under the default
//       MPI_ERRORS_ARE_FATAL: the job must abort with Chorus's message.
//   mpi_collectives_check --threads   under MPI_THREAD_MULTIPLE, two
//       threads run nonblocking collectives at once, each on a
//       communicator of its own, and wait for them in three ways.
#include <mpi.h>

#include <cinttypes>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <atomic>
#include <cstring>
#include <thread>
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
bool preloaded() {
  const char* preload = std::getenv("LD_PRELOAD");
  return preload != nullptr && std::strstr(preload, "chorus_pmpi") != nullptr;
}

void check_int8_sums_wrap(MPI_Comm comm) {
  if (!preloaded()) return;
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

// ---- Every other wrapped call: v-forms, rooted, nonblocking -----------------

// Starts one nonblocking collective beside point-to-point traffic and
// finishes it in one of finish()'s four ways; returns its error code.
template <class Start>
int beside_point_to_point(MPI_Comm comm, Start&& start) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  MPI_Request requests[3];
  int token_out = rank, token_in = -1;
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  MPI_Irecv(&token_in, 1, MPI_INT, left, 9, comm, &requests[0]);
  int rc = start(&requests[1]);
  MPI_Isend(&token_out, 1, MPI_INT, right, 9, comm, &requests[2]);
  static std::size_t calls = 0;  // the same sequence on every rank
  if (rc == MPI_SUCCESS) rc = finish(requests, calls++ % 4);
  if (token_in != left) fail("the point-to-point message beside a nonblocking collective was lost");
  return rc;
}

// Rank j's block size in the v-form checks: uneven, and 0 for one rank.
int v_count(int j, std::size_t base) { return j == 1 ? 0 : static_cast<int>(base) + 3 * j; }

void expect(bool ok, const std::string& where, const char* what) {
  ++checked_calls;
  if (!ok) fail(where + ": " + what);
}

// `from_past_start`: the receive buffer passed as a pointer past its
// blocks, every displacement negative (the library stages such a buffer;
// a dense one goes to Chorus as it is).
void check_allgatherv(MPI_Comm comm, std::size_t base, bool in_place, bool from_past_start = false) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<int> counts(static_cast<std::size_t>(size)), displs(counts.size());
  int total = 0;
  for (int j = 0; j < size; ++j) {
    counts[static_cast<std::size_t>(j)] = v_count(j, base);
    displs[static_cast<std::size_t>(j)] = total + 2;  // gaps between blocks
    total += counts[static_cast<std::size_t>(j)] + 2;
  }
  std::vector<int> send(static_cast<std::size_t>(counts[static_cast<std::size_t>(rank)]));
  for (std::size_t i = 0; i < send.size(); ++i) send[i] = block_value(rank, 0, i);
  std::vector<int> recv(static_cast<std::size_t>(total + 2), -5);
  if (in_place) std::copy(send.begin(), send.end(), recv.begin() + displs[static_cast<std::size_t>(rank)]);
  const int shift = from_past_start ? total : 0;
  std::vector<int> passed_displs(displs);
  for (int& d : passed_displs) d -= shift;
  const int rc = MPI_Allgatherv(in_place ? MPI_IN_PLACE : send.data(), static_cast<int>(send.size()),
                                MPI_INT, recv.data() + shift, counts.data(), passed_displs.data(),
                                MPI_INT, comm);
  bool ok = rc == MPI_SUCCESS;
  for (int j = 0; j < size && ok; ++j)
    for (int i = 0; i < counts[static_cast<std::size_t>(j)]; ++i)
      ok = recv[static_cast<std::size_t>(displs[static_cast<std::size_t>(j)] + i)] == block_value(j, 0, static_cast<std::size_t>(i));
  ok = ok && recv[0] == -5 && recv[1] == -5;  // the gap before block 0 untouched
  const std::string extra = std::string(in_place ? ", in place" : "") +
                            (from_past_start ? ", negative displacements" : "");
  expect(ok, where_of("MPI_Allgatherv", base, "MPI_INT", size, extra.c_str()), "wrong blocks");
}

template <class T>
void check_reduce_scatter(MPI_Comm comm, MPI_Datatype type, const char* type_name, Op op,
                          std::size_t base, bool in_place) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<int> counts(static_cast<std::size_t>(size));
  std::size_t total = 0, mine_at = 0;
  for (int j = 0; j < size; ++j) {
    counts[static_cast<std::size_t>(j)] = v_count(j, base);
    if (j == rank) mine_at = total;
    total += static_cast<std::size_t>(counts[static_cast<std::size_t>(j)]);
  }
  const auto mine = static_cast<std::size_t>(counts[static_cast<std::size_t>(rank)]);
  std::vector<T> send(total), recv(in_place ? total : mine), want(mine);
  for (std::size_t k = 0; k < total; ++k) send[k] = value<T>(rank, k, op);
  for (std::size_t i = 0; i < mine; ++i) {
    T acc = value<T>(0, mine_at + i, op);
    for (int r = 1; r < size; ++r) acc = combine(acc, value<T>(r, mine_at + i, op), op);
    want[i] = acc;
  }
  if (in_place) recv = send;
  const int rc = MPI_Reduce_scatter(in_place ? MPI_IN_PLACE : send.data(), recv.data(), counts.data(),
                                    type, mpi_op(op), comm);
  expect(rc == MPI_SUCCESS && (mine == 0 || std::memcmp(recv.data(), want.data(), mine * sizeof(T)) == 0),
         where_of("MPI_Reduce_scatter", base, type_name, size, in_place ? ", in place" : "") + " " + name(op),
         "wrong block");
}

void check_alltoallv(MPI_Comm comm, std::size_t base, bool in_place) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const auto p = static_cast<std::size_t>(size);
  // Rank r sends rank j (base + r + 2j) ints (in place: both sides' count
  // must then be symmetric, so (base + r + j)).
  auto count_of = [&](int from, int to) {
    return static_cast<int>(base) + from + (in_place ? to : 2 * to);
  };
  std::vector<int> scounts(p), sdispls(p), rcounts(p), rdispls(p);
  int stotal = 0, rtotal = 0;
  for (int j = 0; j < size; ++j) {
    const auto u = static_cast<std::size_t>(j);
    scounts[u] = count_of(rank, j);
    rcounts[u] = count_of(j, rank);
  }
  for (int j = size - 1; j >= 0; --j) {  // blocks in reverse order, with gaps
    const auto u = static_cast<std::size_t>(j);
    sdispls[u] = stotal + 1;
    stotal += scounts[u] + 1;
    rdispls[u] = rtotal + 1;
    rtotal += rcounts[u] + 1;
  }
  std::vector<int> send(static_cast<std::size_t>(stotal), -3), recv(static_cast<std::size_t>(rtotal), -3);
  for (int j = 0; j < size; ++j)
    for (int i = 0; i < scounts[static_cast<std::size_t>(j)]; ++i)
      send[static_cast<std::size_t>(sdispls[static_cast<std::size_t>(j)] + i)] = block_value(rank, j, static_cast<std::size_t>(i));
  if (in_place) {  // the blocks to send lie where the received ones will
    for (int j = 0; j < size; ++j)
      for (int i = 0; i < rcounts[static_cast<std::size_t>(j)]; ++i)
        recv[static_cast<std::size_t>(rdispls[static_cast<std::size_t>(j)] + i)] = block_value(rank, j, static_cast<std::size_t>(i));
  }
  const int rc = MPI_Alltoallv(in_place ? MPI_IN_PLACE : send.data(), scounts.data(), sdispls.data(), MPI_INT,
                               recv.data(), rcounts.data(), rdispls.data(), MPI_INT, comm);
  bool ok = rc == MPI_SUCCESS;
  for (int j = 0; j < size && ok; ++j)
    for (int i = 0; i < rcounts[static_cast<std::size_t>(j)]; ++i)
      ok = recv[static_cast<std::size_t>(rdispls[static_cast<std::size_t>(j)] + i)] == block_value(j, rank, static_cast<std::size_t>(i));
  expect(ok && recv[0] == -3, where_of("MPI_Alltoallv", base, "MPI_INT", size, in_place ? ", in place" : ""),
         "wrong blocks");
}

// MPI_Gather(v) and MPI_Scatter(v) at the first and last rank as root.
void check_rooted(MPI_Comm comm, std::size_t count, bool in_place) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const auto p = static_cast<std::size_t>(size);
  const int n = static_cast<int>(count);
  const char* extra = in_place ? ", in place" : "";
  for (int root : {0, size - 1}) {
    const bool at_root = rank == root;
    const std::string suffix = " root " + std::to_string(root);
    // Gather: rank j's block j at the root.
    std::vector<int> mine(count), all(count * p, -1);
    for (std::size_t i = 0; i < count; ++i) mine[i] = block_value(rank, root, i);
    if (in_place && at_root) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(root) * count));
    int rc = MPI_Gather(in_place && at_root ? MPI_IN_PLACE : mine.data(), n, MPI_INT, all.data(), n, MPI_INT, root, comm);
    bool ok = rc == MPI_SUCCESS;
    for (int j = 0; at_root && j < size && ok; ++j)
      for (std::size_t i = 0; i < count; ++i) ok = ok && all[static_cast<std::size_t>(j) * count + i] == block_value(j, root, i);
    expect(ok, where_of("MPI_Gather", count, "MPI_INT", size, extra) + suffix, "wrong blocks");

    // Gatherv: uneven blocks in reverse order at the root.
    std::vector<int> counts(p), displs(p);
    int total = 0;
    for (int j = size - 1; j >= 0; --j) {
      counts[static_cast<std::size_t>(j)] = v_count(j, count);
      displs[static_cast<std::size_t>(j)] = total;
      total += counts[static_cast<std::size_t>(j)];
    }
    std::vector<int> vmine(static_cast<std::size_t>(counts[static_cast<std::size_t>(rank)])), vall(static_cast<std::size_t>(total), -1);
    for (std::size_t i = 0; i < vmine.size(); ++i) vmine[i] = block_value(rank, root + 1, i);
    if (in_place && at_root) std::copy(vmine.begin(), vmine.end(), vall.begin() + displs[static_cast<std::size_t>(root)]);
    rc = MPI_Gatherv(in_place && at_root ? MPI_IN_PLACE : vmine.data(), static_cast<int>(vmine.size()), MPI_INT,
                     vall.data(), counts.data(), displs.data(), MPI_INT, root, comm);
    ok = rc == MPI_SUCCESS;
    for (int j = 0; at_root && j < size && ok; ++j)
      for (int i = 0; i < counts[static_cast<std::size_t>(j)]; ++i)
        ok = vall[static_cast<std::size_t>(displs[static_cast<std::size_t>(j)] + i)] == block_value(j, root + 1, static_cast<std::size_t>(i));
    expect(ok, where_of("MPI_Gatherv", count, "MPI_INT", size, extra) + suffix, "wrong blocks");

    // Scatter: the root's block j to rank j.
    std::vector<double> source(count * p), got(count, -1.0);
    for (std::size_t k = 0; k < source.size(); ++k) source[k] = static_cast<double>(k) * 0.5 + root;
    rc = MPI_Scatter(source.data(), n, MPI_DOUBLE, in_place && at_root ? MPI_IN_PLACE : got.data(), n,
                     MPI_DOUBLE, root, comm);
    ok = rc == MPI_SUCCESS;
    for (std::size_t i = 0; i < count && ok && !(in_place && at_root); ++i)
      ok = got[i] == static_cast<double>(static_cast<std::size_t>(rank) * count + i) * 0.5 + root;
    expect(ok, where_of("MPI_Scatter", count, "MPI_DOUBLE", size, extra) + suffix, "wrong block");

    // Scatterv: uneven blocks, reverse order (the layout of gatherv above).
    std::vector<int> vsource(static_cast<std::size_t>(total));
    for (std::size_t k = 0; k < vsource.size(); ++k) vsource[k] = static_cast<int>(k * 3 + static_cast<std::size_t>(root));
    std::vector<int> vgot(static_cast<std::size_t>(counts[static_cast<std::size_t>(rank)]), -1);
    rc = MPI_Scatterv(vsource.data(), counts.data(), displs.data(), MPI_INT,
                      in_place && at_root ? MPI_IN_PLACE : vgot.data(), static_cast<int>(vgot.size()), MPI_INT,
                      root, comm);
    ok = rc == MPI_SUCCESS;
    for (std::size_t i = 0; i < vgot.size() && ok && !(in_place && at_root); ++i)
      ok = vgot[i] == static_cast<int>((static_cast<std::size_t>(displs[static_cast<std::size_t>(rank)]) + i) * 3 + static_cast<std::size_t>(root));
    expect(ok, where_of("MPI_Scatterv", count, "MPI_INT", size, extra) + suffix, "wrong block");
  }
}

// The nonblocking forms, each beside point-to-point traffic.
void check_nonblocking(MPI_Comm comm, std::size_t count, bool in_place) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const auto p = static_cast<std::size_t>(size);
  const int n = static_cast<int>(count);
  const int root = size - 1;
  const char* extra = in_place ? ", in place" : "";

  std::vector<double> data(count, -1.0);
  for (std::size_t i = 0; i < count && rank == root; ++i) data[i] = static_cast<double>(i) + 0.25;
  int rc = beside_point_to_point(comm, [&](MPI_Request* r) { return MPI_Ibcast(data.data(), n, MPI_DOUBLE, root, comm, r); });
  bool ok = rc == MPI_SUCCESS;
  for (std::size_t i = 0; i < count && ok; ++i) ok = data[i] == static_cast<double>(i) + 0.25;
  expect(ok, where_of("MPI_Ibcast", count, "MPI_DOUBLE", size), "wrong data");

  std::vector<std::int8_t> send(count), recv(count, 0), want(count);
  for (std::size_t i = 0; i < count; ++i) {
    send[i] = value<std::int8_t>(rank, i, Op::sum);
    std::int8_t acc = value<std::int8_t>(0, i, Op::sum);
    for (int r = 1; r < size; ++r) acc = combine(acc, value<std::int8_t>(r, i, Op::sum), Op::sum);
    want[i] = acc;
  }
  if (in_place && rank == root) recv = send;
  rc = beside_point_to_point(comm, [&](MPI_Request* r) {
    return MPI_Ireduce(in_place && rank == root ? MPI_IN_PLACE : send.data(), recv.data(), n, MPI_INT8_T, MPI_SUM,
                       root, comm, r);
  });
  expect(rc == MPI_SUCCESS && (rank != root || recv == want), where_of("MPI_Ireduce", count, "MPI_INT8_T", size, extra) + " sum",
         "wrong result at the root");

  std::vector<int> mine(count), all(count * p, -1);
  for (std::size_t i = 0; i < count; ++i) mine[i] = block_value(rank, 0, i);
  if (in_place) std::copy(mine.begin(), mine.end(), all.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(rank) * count));
  rc = beside_point_to_point(comm, [&](MPI_Request* r) {
    return MPI_Iallgather(in_place ? MPI_IN_PLACE : mine.data(), n, MPI_INT, all.data(), n, MPI_INT, comm, r);
  });
  ok = rc == MPI_SUCCESS;
  for (int j = 0; j < size && ok; ++j)
    for (std::size_t i = 0; i < count; ++i) ok = ok && all[static_cast<std::size_t>(j) * count + i] == block_value(j, 0, i);
  expect(ok, where_of("MPI_Iallgather", count, "MPI_INT", size, extra), "wrong blocks");

  std::vector<float> blocks(count * p), block(in_place ? count * p : count), fwant(count);
  for (std::size_t k = 0; k < blocks.size(); ++k) blocks[k] = value<float>(rank, k, Op::sum);
  for (std::size_t i = 0; i < count; ++i) {
    const std::size_t k = static_cast<std::size_t>(rank) * count + i;
    float acc = 0;
    for (int r = 0; r < size; ++r) acc += value<float>(r, k, Op::sum);
    fwant[i] = acc;
  }
  if (in_place) block = blocks;
  rc = beside_point_to_point(comm, [&](MPI_Request* r) {
    return MPI_Ireduce_scatter_block(in_place ? MPI_IN_PLACE : blocks.data(), block.data(), n, MPI_FLOAT, MPI_SUM, comm, r);
  });
  expect(rc == MPI_SUCCESS && (count == 0 || std::memcmp(block.data(), fwant.data(), count * sizeof(float)) == 0),
         where_of("MPI_Ireduce_scatter_block", count, "MPI_FLOAT", size, extra) + " sum", "wrong block");

  std::vector<int> out(count * p), in(count * p, -1);
  for (int j = 0; j < size; ++j)
    for (std::size_t i = 0; i < count; ++i) out[static_cast<std::size_t>(j) * count + i] = block_value(rank, j, i);
  if (in_place) in = out;
  rc = beside_point_to_point(comm, [&](MPI_Request* r) {
    return MPI_Ialltoall(in_place ? MPI_IN_PLACE : out.data(), n, MPI_INT, in.data(), n, MPI_INT, comm, r);
  });
  ok = rc == MPI_SUCCESS;
  for (int j = 0; j < size && ok; ++j)
    for (std::size_t i = 0; i < count; ++i) ok = ok && in[static_cast<std::size_t>(j) * count + i] == block_value(j, rank, i);
  expect(ok, where_of("MPI_Ialltoall", count, "MPI_INT", size, extra), "wrong blocks");

  rc = beside_point_to_point(comm, [&](MPI_Request* r) { return MPI_Ibarrier(comm, r); });
  expect(rc == MPI_SUCCESS, "MPI_Ibarrier on " + std::to_string(size) + " ranks", "returned an error");
}

// A nonblocking collective that rank 0 waits for (MPI_Wait, then
// MPI_Waitall) while the other ranks can start it only once rank 0's MPI
// has progressed another of its requests: each sends to rank 0 with
// MPI_Ssend, which returns once rank 0 has matched the message (its MPI
// must take the message in and answer). libchorus_pmpi's MPI_Wait may run
// the collective on its own thread, and must then let MPI progress inside
// the call's waits: otherwise rank 0 would wait for the broadcast until
// Chorus's timeout, and the others in MPI_Ssend forever.
void check_progress_inside_wait(MPI_Comm comm, std::size_t count) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int root = size - 1, n = static_cast<int>(count);
  for (bool waitall : {false, true}) {
    std::vector<double> data(count, rank == root ? 0.5 : -1.0);
    bool ok = true;
    if (rank == 0) {
      std::vector<int> tokens(static_cast<std::size_t>(size), -1);
      std::vector<MPI_Request> requests(static_cast<std::size_t>(size));  // [0]: the broadcast
      for (int q = 1; q < size; ++q) MPI_Irecv(&tokens[static_cast<std::size_t>(q)], 1, MPI_INT, q, 11, comm, &requests[static_cast<std::size_t>(q)]);
      int rc = MPI_Ibcast(data.data(), n, MPI_DOUBLE, root, comm, &requests[0]);
      if (rc == MPI_SUCCESS && waitall) {
        rc = MPI_Waitall(size, requests.data(), MPI_STATUSES_IGNORE);
      } else if (rc == MPI_SUCCESS) {
        rc = MPI_Wait(&requests[0], MPI_STATUS_IGNORE);
        if (rc == MPI_SUCCESS) rc = MPI_Waitall(size - 1, requests.data() + 1, MPI_STATUSES_IGNORE);
      }
      ok = rc == MPI_SUCCESS;
      for (int q = 1; q < size && ok; ++q) ok = tokens[static_cast<std::size_t>(q)] == q;
    } else {
      MPI_Ssend(&rank, 1, MPI_INT, 0, 11, comm);
      MPI_Request request;
      ok = MPI_Ibcast(data.data(), n, MPI_DOUBLE, root, comm, &request) == MPI_SUCCESS &&
           MPI_Wait(&request, MPI_STATUS_IGNORE) == MPI_SUCCESS;
    }
    for (std::size_t i = 0; i < count && ok; ++i) ok = data[i] == 0.5;
    expect(ok, where_of("MPI_Ibcast", count, "MPI_DOUBLE", size) +
                   (waitall ? ", MPI_Waitall" : ", MPI_Wait") + " while rank 0 matches an MPI_Ssend",
           "wrong data or a failed call");
  }
}

void check_alltoall_in_place(MPI_Comm comm, std::size_t count) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  std::vector<int> data(count * static_cast<std::size_t>(size));
  for (int j = 0; j < size; ++j)
    for (std::size_t i = 0; i < count; ++i) data[static_cast<std::size_t>(j) * count + i] = block_value(rank, j, i);
  const int rc = MPI_Alltoall(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data.data(), static_cast<int>(count), MPI_INT, comm);
  bool ok = rc == MPI_SUCCESS;
  for (int j = 0; j < size && ok; ++j)
    for (std::size_t i = 0; i < count; ++i) ok = ok && data[static_cast<std::size_t>(j) * count + i] == block_value(j, rank, i);
  expect(ok, where_of("MPI_Alltoall", count, "MPI_INT", size, ", in place"), "wrong blocks");
}

void sweep_more_collectives(MPI_Comm comm) {
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{70000}}) {
    for (bool in_place : {false, true}) {
      check_allgatherv(comm, count, in_place);
      check_allgatherv(comm, count, in_place, true);
      check_reduce_scatter<float>(comm, MPI_FLOAT, "MPI_FLOAT", Op::sum, count, in_place);
      check_reduce_scatter<int>(comm, MPI_INT, "MPI_INT", Op::max, count, in_place);
      check_alltoallv(comm, count, in_place);
      check_rooted(comm, count, in_place);
      check_nonblocking(comm, count, in_place);
    }
    check_alltoall_in_place(comm, count);
    check_progress_inside_wait(comm, count);
  }
}

// ---- Datatypes beyond the predefined C numbers -------------------------------

// Logical ops on MPI_C_BOOL, and the Fortran-named numbers where they map.
void check_more_types(MPI_Comm comm) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  for (std::size_t count : {std::size_t{5}, std::size_t{3000}}) {
    for (MPI_Op op : {MPI_LAND, MPI_LOR, MPI_LXOR}) {
      const char* op_name = op == MPI_LAND ? "land" : op == MPI_LOR ? "lor" : "lxor";
      std::vector<bool> want_bits(count);
      std::vector<unsigned char> send(count), recv(count, 7);  // _Bool is one byte here
      for (std::size_t i = 0; i < count; ++i) {
        auto bit = [&](int r) { return ((i + static_cast<std::size_t>(r) * 5) % 3) != 0 || (i % 7 == 0); };
        send[i] = bit(rank);
        bool acc = bit(0);
        for (int r = 1; r < size; ++r) acc = op == MPI_LAND ? (acc && bit(r)) : op == MPI_LOR ? (acc || bit(r)) : (acc != bit(r));
        want_bits[i] = acc;
      }
      const int rc = MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), MPI_C_BOOL, op, comm);
      bool ok = rc == MPI_SUCCESS;
      for (std::size_t i = 0; i < count && ok; ++i) ok = recv[i] == (want_bits[i] ? 1 : 0);
      expect(ok, where_of("MPI_Allreduce", count, "MPI_C_BOOL", size) + " " + op_name, "wrong result");
    }
  }
  auto fortran = [&](MPI_Datatype type, const char* type_name) {
    if (type == MPI_DATATYPE_NULL) return;
    int bytes = 0;
    MPI_Type_size(type, &bytes);
    const std::size_t count = 2000;
    if (bytes == 4 && (type == MPI_REAL)) {
      std::vector<float> send(count), recv(count);
      for (std::size_t i = 0; i < count; ++i) send[i] = value<float>(rank, i, Op::sum);
      const int rc = MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), type, MPI_SUM, comm);
      bool ok = rc == MPI_SUCCESS;
      for (std::size_t i = 0; i < count && ok; ++i) {
        float acc = 0;
        for (int r = 0; r < size; ++r) acc += value<float>(r, i, Op::sum);
        ok = recv[i] == acc;
      }
      expect(ok, where_of("MPI_Allreduce", count, type_name, size) + " sum", "wrong result");
    } else if (bytes == 8 && type == MPI_DOUBLE_PRECISION) {
      std::vector<double> send(count), recv(count);
      for (std::size_t i = 0; i < count; ++i) send[i] = value<double>(rank, i, Op::max);
      const int rc = MPI_Allreduce(send.data(), recv.data(), static_cast<int>(count), type, MPI_MAX, comm);
      bool ok = rc == MPI_SUCCESS;
      for (std::size_t i = 0; i < count && ok; ++i) {
        double acc = value<double>(0, i, Op::max);
        for (int r = 1; r < size; ++r) acc = std::max(acc, value<double>(r, i, Op::max));
        ok = recv[i] == acc;
      }
      expect(ok, where_of("MPI_Allreduce", count, type_name, size) + " max", "wrong result");
    } else if (bytes == 4 || bytes == 8) {  // Fortran integers
      std::vector<std::int64_t> send(count), recv(count);
      std::vector<unsigned char> sbytes(count * static_cast<std::size_t>(bytes)), rbytes(sbytes.size());
      for (std::size_t i = 0; i < count; ++i) {
        const std::int64_t v = value<std::int64_t>(rank, i, Op::sum);
        if (bytes == 4) { const auto w = static_cast<std::int32_t>(v); std::memcpy(&sbytes[i * 4], &w, 4); }
        else std::memcpy(&sbytes[i * 8], &v, 8);
      }
      const int rc = MPI_Allreduce(sbytes.data(), rbytes.data(), static_cast<int>(count), type, MPI_SUM, comm);
      bool ok = rc == MPI_SUCCESS;
      for (std::size_t i = 0; i < count && ok; ++i) {
        std::uint64_t acc = 0;
        for (int r = 0; r < size; ++r) acc += static_cast<std::uint64_t>(value<std::int64_t>(r, i, Op::sum));
        if (bytes == 4) {
          std::int32_t got = 0;
          std::memcpy(&got, &rbytes[i * 4], 4);
          ok = static_cast<std::uint32_t>(got) == static_cast<std::uint32_t>(acc);
        } else {
          std::uint64_t got = 0;
          std::memcpy(&got, &rbytes[i * 8], 8);
          ok = got == acc;
        }
      }
      expect(ok, where_of("MPI_Allreduce", count, type_name, size) + " sum", "wrong result");
    }
  };
  fortran(MPI_INTEGER, "MPI_INTEGER");
  fortran(MPI_REAL, "MPI_REAL");
  fortran(MPI_DOUBLE_PRECISION, "MPI_DOUBLE_PRECISION");
#ifdef MPI_INTEGER8
  fortran(MPI_INTEGER8, "MPI_INTEGER8");
#endif
}

// Ranks describe the same signature with different datatypes: legal MPI,
// so the wrapper must take the call on every rank alike (once it hung).
void check_derived_datatypes(MPI_Comm comm) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int n = 4096;
  MPI_Datatype block, strided, pair_struct, mixed;
  MPI_Type_contiguous(n, MPI_INT, &block);
  MPI_Type_commit(&block);
  MPI_Type_vector(n, 1, 2, MPI_INT, &strided);  // every other int: holes
  MPI_Type_commit(&strided);
  {
    const int lengths[2] = {1, 1};
    const MPI_Aint offsets[2] = {4, 0};  // the second int first: reordered
    const MPI_Datatype types[2] = {MPI_INT, MPI_INT};
    MPI_Type_create_struct(2, lengths, offsets, types, &pair_struct);
    MPI_Type_commit(&pair_struct);
    const MPI_Aint mixed_offsets[2] = {0, 8};
    const MPI_Datatype mixed_types[2] = {MPI_INT, MPI_DOUBLE};
    MPI_Type_create_struct(2, lengths, mixed_offsets, mixed_types, &mixed);
    MPI_Type_commit(&mixed);
  }
  for (int root : {0, size - 1}) {
    const std::string suffix = " root " + std::to_string(root);
    // The root sends one contiguous(4096, MPI_INT); others receive 4096 MPI_INT.
    std::vector<int> data(static_cast<std::size_t>(n), -1);
    if (rank == root) for (int i = 0; i < n; ++i) data[static_cast<std::size_t>(i)] = i * 3 + root;
    int rc = rank == root ? MPI_Bcast(data.data(), 1, block, root, comm)
                          : MPI_Bcast(data.data(), n, MPI_INT, root, comm);
    bool ok = rc == MPI_SUCCESS;
    for (int i = 0; i < n && ok; ++i) ok = data[static_cast<std::size_t>(i)] == i * 3 + root;
    expect(ok, "MPI_Bcast(1 x contiguous(4096, MPI_INT) at the root, 4096 MPI_INT elsewhere)" + suffix, "wrong data");

    // The root sends every other int (a vector type); others receive them packed.
    std::vector<int> spread(2 * static_cast<std::size_t>(n), -2), packed(static_cast<std::size_t>(n), -1);
    for (int i = 0; i < n; ++i) spread[2 * static_cast<std::size_t>(i)] = i + 11 * root;
    rc = rank == root ? MPI_Bcast(spread.data(), 1, strided, root, comm)
                      : MPI_Bcast(packed.data(), n, MPI_INT, root, comm);
    ok = rc == MPI_SUCCESS;
    for (int i = 0; i < n && ok && rank != root; ++i) ok = packed[static_cast<std::size_t>(i)] == i + 11 * root;
    expect(ok, "MPI_Bcast(vector(4096, 1, 2, MPI_INT) at the root, 4096 MPI_INT elsewhere)" + suffix, "wrong data");

    // Gather of reordered int pairs into plain ints, and back with scatter.
    int pair[2] = {rank * 10 + 1, rank * 10 + 2};  // sent as (pair[1], pair[0])
    std::vector<int> gathered(2 * static_cast<std::size_t>(size), -1);
    rc = MPI_Gather(pair, 1, pair_struct, gathered.data(), 2, MPI_INT, root, comm);
    ok = rc == MPI_SUCCESS;
    for (int j = 0; j < size && ok && rank == root; ++j)
      ok = gathered[2 * static_cast<std::size_t>(j)] == j * 10 + 2 && gathered[2 * static_cast<std::size_t>(j) + 1] == j * 10 + 1;
    expect(ok, "MPI_Gather(struct {int@4, int@0} to 2 MPI_INT)" + suffix, "wrong blocks");
  }
  // Reductions over derived types of one element type, as their elements
  // (under the preload only: Open MPI 4.1 refuses predefined ops on derived
  // datatypes, "MPI_SUM is not defined for non-intrinsic datatypes", where
  // MPICH and Chorus take them; and the library leaves a communicator of
  // one rank, and calls below CHORUS_MPI_MIN_BYTES, to MPI).
  for (std::size_t count : {std::size_t{300}, std::size_t{5000}}) {
    if (!preloaded() || size < 2) break;
    const int c = static_cast<int>(count);
    MPI_Datatype quad;
    MPI_Type_contiguous(4, MPI_FLOAT, &quad);
    MPI_Type_commit(&quad);
    std::vector<float> send(4 * count), recv(4 * count, -1.0f);
    for (std::size_t i = 0; i < send.size(); ++i) send[i] = value<float>(rank, i, Op::sum);
    int rc = MPI_Allreduce(send.data(), recv.data(), c, quad, MPI_SUM, comm);
    bool ok = rc == MPI_SUCCESS;
    for (std::size_t i = 0; i < send.size() && ok; ++i) {
      float acc = 0;
      for (int r = 0; r < size; ++r) acc += value<float>(r, i, Op::sum);
      ok = recv[i] == acc;
    }
    expect(ok, where_of("MPI_Allreduce", count, "contiguous(4, MPI_FLOAT)", size) + " sum", "wrong result");
    MPI_Type_free(&quad);

    // A strided double (holes stay untouched), in place, max.
    MPI_Datatype every_third;
    MPI_Type_vector(c, 1, 3, MPI_DOUBLE, &every_third);
    MPI_Type_commit(&every_third);
    std::vector<double> holes(3 * count, -7.0);
    for (std::size_t i = 0; i < count; ++i) holes[3 * i] = value<double>(rank, i, Op::max);
    rc = MPI_Allreduce(MPI_IN_PLACE, holes.data(), 1, every_third, MPI_MAX, comm);
    ok = rc == MPI_SUCCESS;
    for (std::size_t i = 0; i < count && ok; ++i) {
      double acc = value<double>(0, i, Op::max);
      for (int r = 1; r < size; ++r) acc = std::max(acc, value<double>(r, i, Op::max));
      ok = holes[3 * i] == acc && holes[3 * i + 1] == -7.0 && holes[3 * i + 2] == -7.0;
    }
    expect(ok, where_of("MPI_Allreduce", count, "vector(n, 1, 3, MPI_DOUBLE)", size, ", in place") + " max",
           "wrong result or a hole written");
    MPI_Type_free(&every_third);

  }
  for (std::size_t count : {std::size_t{3}, std::size_t{5000}}) {
    const int c = static_cast<int>(count);
    // A mixed struct moves as its bytes (broadcast), but no reduction takes it.
    struct Mixed { int i; int pad; double d; };
    std::vector<Mixed> items(count, Mixed{-1, -9, -1.0});
    if (rank == 0) for (std::size_t i = 0; i < count; ++i) items[i] = Mixed{static_cast<int>(i), -9, 0.5 * static_cast<double>(i)};
    const int rc = MPI_Bcast(items.data(), c, mixed, 0, comm);
    bool ok = rc == MPI_SUCCESS;
    for (std::size_t i = 0; i < count && ok; ++i) ok = items[i].i == static_cast<int>(i) && items[i].d == 0.5 * static_cast<double>(i);
    expect(ok, where_of("MPI_Bcast", count, "struct {int, double}", size), "wrong data");
  }
  MPI_Type_free(&block);
  MPI_Type_free(&strided);
  MPI_Type_free(&pair_struct);
  MPI_Type_free(&mixed);
}

// MPI_Gatherv and MPI_Scatterv whose root buffer is laid out three ways:
// blocks before the buffer's start (negative displacements, which Chorus's
// unsigned offsets cannot say: staged), a dense derived type of two ints
// (displacements in pairs), and ints 8 bytes apart (not dense: staged,
// the holes untouched). Small blocks and blocks larger than a slot takes.
void check_v_form_layouts(MPI_Comm comm) {
  int rank = 0, size = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const auto p = static_cast<std::size_t>(size);
  MPI_Datatype pair, spaced;
  MPI_Type_contiguous(2, MPI_INT, &pair);
  MPI_Type_commit(&pair);
  MPI_Type_create_resized(MPI_INT, 0, 8, &spaced);
  MPI_Type_commit(&spaced);
  for (std::size_t base : {std::size_t{3}, std::size_t{20000}}) {
    const int root = size - 1;
    const bool at_root = rank == root;
    // Block j: base + j items, in reverse order, back to back (in items).
    std::vector<int> counts(p), displs(p);
    int total = 0;
    for (int j = size - 1; j >= 0; --j) {
      counts[static_cast<std::size_t>(j)] = static_cast<int>(base) + j;
      displs[static_cast<std::size_t>(j)] = total;
      total += counts[static_cast<std::size_t>(j)];
    }
    const auto mine = static_cast<std::size_t>(counts[static_cast<std::size_t>(rank)]);
    const auto value = [&](int j, std::size_t i) { return j * 100000 + static_cast<int>(i) + 7; };
    std::vector<int> send(2 * mine);
    for (std::size_t i = 0; i < send.size(); ++i) send[i] = value(rank, i);

    // Negative displacements: the root's recvbuf is the end of its buffer.
    std::vector<int> below(static_cast<std::size_t>(total), -1), got(mine, -1);
    std::vector<int> back(p);
    for (std::size_t j = 0; j < p; ++j) back[j] = displs[j] - total;
    int rc = MPI_Gatherv(send.data(), static_cast<int>(mine), MPI_INT, below.data() + total,
                         counts.data(), back.data(), MPI_INT, root, comm);
    bool ok = rc == MPI_SUCCESS;
    for (int j = 0; j < size && ok && at_root; ++j)
      for (int i = 0; i < counts[static_cast<std::size_t>(j)] && ok; ++i)
        ok = below[static_cast<std::size_t>(displs[static_cast<std::size_t>(j)] + i)] ==
             value(j, static_cast<std::size_t>(i));
    expect(ok, where_of("MPI_Gatherv", base, "MPI_INT", size, ", negative displacements"),
           "wrong blocks");
    rc = MPI_Scatterv(below.data() + total, counts.data(), back.data(), MPI_INT, got.data(),
                      static_cast<int>(mine), MPI_INT, root, comm);
    ok = rc == MPI_SUCCESS;
    for (std::size_t i = 0; i < mine && ok; ++i) ok = got[i] == value(rank, i);
    expect(ok, where_of("MPI_Scatterv", base, "MPI_INT", size, ", negative displacements"),
           "wrong block");

    // Pairs of ints at the root, plain ints elsewhere: block j is counts[j] pairs.
    std::vector<int> pairs(2 * static_cast<std::size_t>(total), -1);
    rc = MPI_Gatherv(send.data(), static_cast<int>(2 * mine), MPI_INT, pairs.data(), counts.data(),
                     displs.data(), pair, root, comm);
    ok = rc == MPI_SUCCESS;
    for (int j = 0; j < size && ok && at_root; ++j)
      for (int i = 0; i < 2 * counts[static_cast<std::size_t>(j)] && ok; ++i)
        ok = pairs[2 * static_cast<std::size_t>(displs[static_cast<std::size_t>(j)]) +
                   static_cast<std::size_t>(i)] == value(j, static_cast<std::size_t>(i));
    expect(ok, where_of("MPI_Gatherv", base, "contiguous(2, MPI_INT) at the root", size),
           "wrong blocks");
    std::vector<int> got_pairs(2 * mine, -1);
    rc = MPI_Scatterv(pairs.data(), counts.data(), displs.data(), pair, got_pairs.data(),
                      static_cast<int>(2 * mine), MPI_INT, root, comm);
    ok = rc == MPI_SUCCESS;
    for (std::size_t i = 0; i < 2 * mine && ok; ++i) ok = got_pairs[i] == value(rank, i);
    expect(ok, where_of("MPI_Scatterv", base, "contiguous(2, MPI_INT) at the root", size),
           "wrong block");

    // Ints 8 bytes apart at the root: every other int is a hole.
    std::vector<int> holes(2 * static_cast<std::size_t>(total), -3);
    rc = MPI_Gatherv(send.data(), static_cast<int>(mine), MPI_INT, holes.data(), counts.data(),
                     displs.data(), spaced, root, comm);
    ok = rc == MPI_SUCCESS;
    for (int j = 0; j < size && ok && at_root; ++j)
      for (int i = 0; i < counts[static_cast<std::size_t>(j)] && ok; ++i) {
        const std::size_t at =
            2 * static_cast<std::size_t>(displs[static_cast<std::size_t>(j)] + i);
        ok = holes[at] == value(j, static_cast<std::size_t>(i)) && holes[at + 1] == -3;
      }
    expect(ok, where_of("MPI_Gatherv", base, "resized(MPI_INT, 0, 8) at the root", size),
           "wrong blocks or a hole written");
    std::fill(got.begin(), got.end(), -1);
    rc = MPI_Scatterv(holes.data(), counts.data(), displs.data(), spaced, got.data(),
                      static_cast<int>(mine), MPI_INT, root, comm);
    ok = rc == MPI_SUCCESS;
    for (std::size_t i = 0; i < mine && ok; ++i) ok = got[i] == value(rank, i);
    expect(ok, where_of("MPI_Scatterv", base, "resized(MPI_INT, 0, 8) at the root", size),
           "wrong block");
  }
  MPI_Type_free(&pair);
  MPI_Type_free(&spaced);
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
  // Several rounds: what a rank's UCX does with its peer's messages after a
  // failed call, while the peer frees its side, is a race (the test runs it
  // with a fast keepalive, whose checks were what UCX answered loudly).
  const int rounds = fatal ? 1 : 8;
  bool ok = true;
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  for (int round = 0; round < rounds; ++round) {
    MPI_Comm comm;
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    if (!fatal) MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    const std::size_t count = 100000 + static_cast<std::size_t>(world_rank) * 1000;
    std::vector<float> data(count, 1.0f);
    const int rc = MPI_Allreduce(MPI_IN_PLACE, data.data(), static_cast<int>(count), MPI_FLOAT,
                                 MPI_SUM, comm);
    MPI_Error_string(rc, text, &length);
    const bool named =
        rc != MPI_SUCCESS && std::strstr(text, "called different collectives") != nullptr;
    if (round == 0 || !named)
      std::printf("rank %d: mismatched MPI_Allreduce returned %d: %s: %s\n", world_rank, rc, text,
                  named ? "ok" : "WRONG");
    ok = ok && named;
    // The Chorus communicator behind `comm` is unusable now; MPI's is not.
    MPI_Comm_free(&comm);
  }
  if (fatal) return ok ? 0 : 1;
  // A send side that does not hold what the receive side describes (an
  // erroneous program, alike on every rank): the library names it.
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  int size = 0;
  MPI_Comm_size(comm, &size);
  constexpr int kItems = 1024;
  std::vector<int> send(kItems + 1), all(static_cast<std::size_t>(kItems) * size);
  const int rc_gather = MPI_Allgather(send.data(), kItems + 1, MPI_INT, all.data(), kItems,
                                      MPI_INT, comm);
  MPI_Error_string(rc_gather, text, &length);
  const bool refused =
      rc_gather != MPI_SUCCESS && std::strstr(text, "the send buffer holds") != nullptr;
  std::printf("rank %d: MPI_Allgather sending more than it receives returned %d: %s: %s\n",
              world_rank, rc_gather, text, refused ? "ok" : "WRONG");
  MPI_Comm_free(&comm);
  return ok && refused ? 0 : 1;
}

// Communicators freed and made again, in one order and then the reverse:
// MPI reuses a freed communicator's handle, and the library must not take
// the new communicator for the one it remembers by that handle (a wrong
// rank order shows in the gathered ranks).
void check_reused_handles() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  constexpr int kItems = 1024;  // 4 KiB a rank: taken over at the default threshold
  std::vector<int> mine(kItems), all(static_cast<std::size_t>(kItems) * size);
  for (int round = 0; round < 6; ++round) {
    const bool reversed = round % 2 == 1;
    MPI_Comm comm;
    MPI_Comm_split(MPI_COMM_WORLD, 0, reversed ? size - world_rank : world_rank, &comm);
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    std::fill(mine.begin(), mine.end(), world_rank);
    MPI_Allgather(mine.data(), kItems, MPI_INT, all.data(), kItems, MPI_INT, comm);
    ++checked_calls;
    for (int q = 0; q < size; ++q) {
      const int want = reversed ? size - 1 - q : q;  // the world rank at comm rank q
      if (all[static_cast<std::size_t>(q) * kItems] != want) {
        fail("MPI_Allgather on a communicator made again (round " + std::to_string(round) +
             "): block " + std::to_string(q) + " came from world rank " +
             std::to_string(all[static_cast<std::size_t>(q) * kItems]));
        break;
      }
    }
    MPI_Comm_free(&comm);
  }
}

// Every check, on every kind of communicator.
void run_full_sweep(int world_rank, int world_size) {
  check_reused_handles();
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
  // Communicators made from groups: the even ranks (MPI_Comm_create: the
  // others get MPI_COMM_NULL), and every rank in reverse order
  // (MPI_Comm_create_group).
  MPI_Group world_group, evens_group, reversed_group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  std::vector<int> evens, reversed;
  for (int r = 0; r < world_size; ++r) {
    if (r % 2 == 0) evens.push_back(r);
    reversed.push_back(world_size - 1 - r);
  }
  MPI_Group_incl(world_group, static_cast<int>(evens.size()), evens.data(), &evens_group);
  MPI_Group_incl(world_group, world_size, reversed.data(), &reversed_group);
  MPI_Comm created = MPI_COMM_NULL, grouped = MPI_COMM_NULL;
  MPI_Comm_create(MPI_COMM_WORLD, evens_group, &created);
  MPI_Comm_create_group(MPI_COMM_WORLD, reversed_group, 5, &grouped);
  for (MPI_Comm comm : {MPI_COMM_WORLD, half, created, grouped}) {
    if (comm == MPI_COMM_NULL) continue;
    sweep_more_collectives(comm);
    check_more_types(comm);
    check_derived_datatypes(comm);
    check_v_form_layouts(comm);
  }
  sweep(grouped);
  if (created != MPI_COMM_NULL) sweep_other_collectives(created);
  for (MPI_Comm* comm : {&half, &dup, &created, &grouped})
    if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
  for (MPI_Group* group : {&world_group, &evens_group, &reversed_group}) MPI_Group_free(group);
}

// --threads: two threads at once, each on a dup of MPI_COMM_WORLD of its
// own, make nonblocking calls (a sum, a broadcast, a barrier) and wait for
// them with MPI_Waitall, MPI_Wait one by one, or MPI_Testall until done:
// the library's requests are started and settled by several threads.
// Returns this rank's wrong results.
long check_threads(int rank, int size) {
  MPI_Comm comms[2];
  for (MPI_Comm& comm : comms) MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  std::atomic<long> wrong{0};
  const auto run = [&](int t) {
    MPI_Comm comm = comms[t];
    for (int i = 0; i < 300; ++i) {
      const int mine = rank + i + 1000 * t;
      int sum = -1;
      std::vector<int> block(4, rank == 0 ? i + t : -1);
      MPI_Request requests[3];
      MPI_Iallreduce(&mine, &sum, 1, MPI_INT, MPI_SUM, comm, &requests[0]);
      MPI_Ibcast(block.data(), 4, MPI_INT, 0, comm, &requests[1]);
      MPI_Ibarrier(comm, &requests[2]);
      if (i % 3 == 0) {
        MPI_Waitall(3, requests, MPI_STATUSES_IGNORE);
      } else if (i % 3 == 1) {
        for (MPI_Request& request : requests) MPI_Wait(&request, MPI_STATUS_IGNORE);
      } else {
        for (int done = 0; !done;) MPI_Testall(3, requests, &done, MPI_STATUSES_IGNORE);
      }
      const int want = size * (i + 1000 * t) + size * (size - 1) / 2;
      const bool ok =
          sum == want && std::all_of(block.begin(), block.end(), [&](int v) { return v == i + t; });
      if (!ok && wrong++ < 10)
        std::fprintf(stderr, "rank %d: WRONG: thread %d, call %d: sum %d (want %d), broadcast %d\n",
                     rank, t, i, sum, want, block[0]);
    }
  };
  std::thread other(run, 1);
  run(0);
  other.join();
  for (MPI_Comm& comm : comms) MPI_Comm_free(&comm);
  checked_calls += 2 * 300 * 3;
  return wrong.load();
}

}  // namespace

int main(int argc, char** argv) {
  const bool threads = argc > 1 && std::strcmp(argv[1], "--threads") == 0;
  int provided = MPI_THREAD_SINGLE;
  MPI_Init_thread(&argc, &argv, threads ? MPI_THREAD_MULTIPLE : MPI_THREAD_SINGLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  if (threads && provided < MPI_THREAD_MULTIPLE) {
    if (world_rank == 0) std::printf("mpi_collectives_check: MPI_THREAD_MULTIPLE not provided\n");
    MPI_Finalize();
    return 1;
  }
  if (argc > 1 && (std::strcmp(argv[1], "--errors") == 0 || std::strcmp(argv[1], "--errors-fatal") == 0)) {
    const int bad = check_error_reporting(std::strcmp(argv[1], "--errors-fatal") == 0);
    MPI_Finalize();
    return bad;
  }

  if (threads) {
    failures += check_threads(world_rank, world_size);
  } else if (argc > 1 && std::strcmp(argv[1], "--quick") == 0) {  // a few calls of each kind
    check_int8_sums_wrap(MPI_COMM_WORLD);
    check_allreduce<float>(MPI_COMM_WORLD, MPI_FLOAT, "MPI_FLOAT", Op::sum, 4099, false, false);
    check_nonblocking(MPI_COMM_WORLD, 1000, false);
    check_progress_inside_wait(MPI_COMM_WORLD, 1000);
    check_rooted(MPI_COMM_WORLD, 1000, true);
    // Below the default threshold (MPI's by default), and a barrier (Chorus's).
    check_bcast<int>(MPI_COMM_WORLD, MPI_INT, "MPI_INT", 2);
    if (MPI_Barrier(MPI_COMM_WORLD) != MPI_SUCCESS) fail("MPI_Barrier: returned an error");
  } else {
    run_full_sweep(world_rank, world_size);
  }
  long all_failures = 0;
  MPI_Allreduce(&failures, &all_failures, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (world_rank == 0)
    std::printf("mpi_collectives_check: %d ranks, %ld calls checked per rank: %s\n", world_size,
                checked_calls, all_failures == 0 ? "all results right" : "WRONG RESULTS");
  MPI_Finalize();
  return all_failures == 0 ? 0 : 1;
}

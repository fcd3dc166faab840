// A plain MPI program (it knows nothing of Chorus) that runs MPI_Allreduce
// and MPI_Iallreduce over many sizes, datatypes, ops, in place and not, on
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
#include <cstdint>
#include <cstdio>
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

void sweep(MPI_Comm comm) {
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
  // Halves in reverse order (ranks of the split differ from the world's),
  // and a dup: each gets communicators of its own.
  MPI_Comm half, dup;
  MPI_Comm_split(MPI_COMM_WORLD, world_rank % 2, world_size - world_rank, &half);
  MPI_Comm_dup(MPI_COMM_WORLD, &dup);
  sweep(half);
  sweep(dup);
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

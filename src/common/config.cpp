#include "common/config.hpp"

#include <chorus/error.hpp>

#include <fmt/format.h>

#include <cstdlib>
#include <iterator>

namespace chorus::config {
namespace {

using V = Variable;

// In Variable order.
constexpr VariableInfo kVariables[] = {
    {V::algo, "CHORUS_ALGO", "auto",
     "forced algorithms: an AllReduce name, or collective=name pairs separated by commas"},
    {V::check, "CHORUS_CHECK", "1", "0 turns off the call check across ranks"},
    {V::debug, "CHORUS_DEBUG", "WARN", "log level: NONE, WARN, INFO, TRACE"},
    {V::job_id, "CHORUS_JOB_ID", "the launcher's job id, if any",
     "the job's name at a shared store: keys of other jobs are not seen"},
    {V::mpi_min_bytes, "CHORUS_MPI_MIN_BYTES", "1024 (0 for MPI_Allreduce, _Allgather, _Alltoall, _Reduce_scatter(_block))",
     "libchorus_pmpi: smaller calls stay with MPI (8-bit integer sums never do)"},
    {V::mpi_pass, "CHORUS_MPI_PASS", "",
     "libchorus_pmpi: MPI function names whose calls always stay with MPI"},
    {V::mpi_verbose, "CHORUS_MPI_VERBOSE", "0",
     "libchorus_pmpi: 1 prints what Chorus took over at MPI_Finalize"},
    {V::rank, "CHORUS_RANK", "", "this process's rank"},
    {V::secret, "CHORUS_SECRET", "",
     "the job secret (any text): ranks, store and peers prove they hold it"},
    {V::secret_file, "CHORUS_SECRET_FILE", "",
     "a file holding the job secret, owned by this user, mode 600"},
    {V::shm, "CHORUS_SHM", "1",
     "0 turns off the host segment (shared-memory collectives and call check on one host)"},
    {V::shm_bytes, "CHORUS_SHM_BYTES", "4 MiB, at most 8 MiB / p",
     "slot size of the host segment: the largest a rank writes in a shared-memory collective"},
    {V::simd, "CHORUS_SIMD", "auto", "reduction kernels: auto, generic, avx2, avx512"},
    {V::size, "CHORUS_SIZE", "", "the number of ranks"},
    {V::socket_addr, "CHORUS_SOCKET_ADDR", "", "the address the TCP transport listens on"},
    {V::socket_buffer, "CHORUS_SOCKET_BUFFER", "0",
     "SO_SNDBUF/SO_RCVBUF of TCP sockets in bytes (0: the kernel's autotuning)"},
    {V::socket_connect, "CHORUS_SOCKET_CONNECT", "auto",
     "TCP links: eager (the full mesh at creation), lazy (at the first message), auto (eager up "
     "to 64 ranks)"},
    {V::socket_ifname, "CHORUS_SOCKET_IFNAME", "", "interfaces the TCP transport may use"},
    {V::socket_unexpected_bytes, "CHORUS_SOCKET_UNEXPECTED_BYTES", "64 MiB",
     "TCP: messages from one peer that no receive has asked for yet, before reading it pauses"},
    {V::spin_us, "CHORUS_SPIN_US", "50", "microseconds a wait polls before sleeping"},
    {V::store, "CHORUS_STORE", "", "where ranks meet: tcp://host:port or file:///dir"},
    {V::store_max_bytes, "CHORUS_STORE_MAX_BYTES", "1 GiB",
     "store server: all keys and values it holds, and the largest reply"},
    {V::store_max_clients, "CHORUS_STORE_MAX_CLIENTS", "16384",
     "store server: connected clients (more are refused with a message)"},
    {V::store_max_value, "CHORUS_STORE_MAX_VALUE", "16 MiB", "store server: the largest value"},
    {V::timeout, "CHORUS_TIMEOUT", "300", "seconds every wait may take"},
    {V::topology, "CHORUS_TOPOLOGY", "",
     "the host of each rank, overriding what ranks find: HxL (H hosts of L ranks, in rank "
     "order) or one host number per rank, comma-separated"},
    {V::transport, "CHORUS_TRANSPORT", "auto", "auto, ucx, tcp, local"},
    {V::tuning_file, "CHORUS_TUNING_FILE", "", "a tuning file from allreduce_perf --tune"},
    {V::ucx_cma, "CHORUS_UCX_CMA", "1",
     "0 turns off the UCX transport's cross-memory attach between local ranks"},
    {V::ucx_connect, "CHORUS_UCX_CONNECT", "auto",
     "UCX endpoints: eager (to every peer at creation), lazy (at the first message), auto "
     "(eager up to 64 ranks)"},
};

constexpr bool in_order() {
  for (std::size_t i = 0; i < std::size(kVariables); ++i)
    if (static_cast<std::size_t>(kVariables[i].variable) != i) return false;
  return true;
}
static_assert(in_order(), "kVariables lists every Variable, in order");

}  // namespace

std::span<const VariableInfo> variables() noexcept { return kVariables; }

const VariableInfo& info(Variable variable) noexcept {
  return kVariables[static_cast<std::size_t>(variable)];
}

std::string_view name(Variable variable) noexcept { return info(variable).name; }

const char* raw(Variable variable) {
  // The names are literals: their views end in a NUL.
  return std::getenv(name(variable).data());
}

std::optional<std::string> get(Variable variable) {
  const char* value = raw(variable);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::size_t parse_byte_count(std::string_view text, std::string_view what, std::size_t min,
                             std::size_t max) {
  auto fail = [&] {
    return Error(ErrorCode::invalid_argument,
                 fmt::format("{}='{}' is not a byte count from {} to {} (digits, then K, M or G "
                             "for KiB, MiB or GiB)",
                             what, text, min, max));
  };
  std::size_t value = 0, i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (__builtin_mul_overflow(value, 10, &value) ||
        __builtin_add_overflow(value, static_cast<std::size_t>(text[i] - '0'), &value))
      throw fail();
  }
  if (i == 0) throw fail();
  if (i < text.size()) {
    const char unit = text[i++];
    const int shift = unit == 'K' || unit == 'k' ? 10 : unit == 'M' || unit == 'm' ? 20
                    : unit == 'G' || unit == 'g' ? 30 : -1;
    if (shift < 0 || i != text.size() || value > (max >> shift)) throw fail();
    value <<= shift;
  }
  if (value < min || value > max) throw fail();
  return value;
}

std::size_t byte_count(Variable variable, std::size_t fallback, std::size_t min, std::size_t max) {
  const auto value = get(variable);
  return value ? parse_byte_count(*value, name(variable), min, max) : fallback;
}

}  // namespace chorus::config

#include "common/config.hpp"

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
    {V::mpi_min_bytes, "CHORUS_MPI_MIN_BYTES", "1024",
     "libchorus_pmpi: smaller calls stay with MPI (8-bit integer sums never do)"},
    {V::mpi_verbose, "CHORUS_MPI_VERBOSE", "0",
     "libchorus_pmpi: 1 prints what Chorus took over at MPI_Finalize"},
    {V::rank, "CHORUS_RANK", "", "this process's rank"},
    {V::shm, "CHORUS_SHM", "1",
     "0 turns off the host segment (shared-memory collectives and call check on one host)"},
    {V::shm_bytes, "CHORUS_SHM_BYTES", "4 MiB, at most 8 MiB / p",
     "slot size of the host segment: the largest a rank writes in a shared-memory collective"},
    {V::simd, "CHORUS_SIMD", "auto", "reduction kernels: auto, generic, avx2, avx512"},
    {V::size, "CHORUS_SIZE", "", "the number of ranks"},
    {V::socket_addr, "CHORUS_SOCKET_ADDR", "", "the address the TCP transport listens on"},
    {V::socket_buffer, "CHORUS_SOCKET_BUFFER", "0",
     "SO_SNDBUF/SO_RCVBUF of TCP sockets in bytes (0: the kernel's autotuning)"},
    {V::socket_ifname, "CHORUS_SOCKET_IFNAME", "", "interfaces the TCP transport may use"},
    {V::spin_us, "CHORUS_SPIN_US", "50", "microseconds a wait polls before sleeping"},
    {V::store, "CHORUS_STORE", "", "where ranks meet: tcp://host:port or file:///dir"},
    {V::timeout, "CHORUS_TIMEOUT", "300", "seconds every wait may take"},
    {V::topology, "CHORUS_TOPOLOGY", "",
     "the host of each rank, overriding what ranks find: HxL (H hosts of L ranks, in rank "
     "order) or one host number per rank, comma-separated"},
    {V::transport, "CHORUS_TRANSPORT", "auto", "auto, ucx, tcp, local"},
    {V::tuning_file, "CHORUS_TUNING_FILE", "", "a tuning file from allreduce_perf --tune"},
    {V::ucx_cma, "CHORUS_UCX_CMA", "1",
     "0 turns off the UCX transport's cross-memory attach between local ranks"},
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

}  // namespace chorus::config

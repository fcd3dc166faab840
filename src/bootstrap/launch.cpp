#include "bootstrap/launch.hpp"
#include "common/config.hpp"

#include "common/logging.hpp"
#include "transport/local/local_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"
#if defined(CHORUS_HAVE_UCX)
#include "transport/ucx/ucx_transport.hpp"
#endif

#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

namespace chorus::bootstrap {
namespace {

std::optional<int> parse_int(const std::string& text) {
  char* end = nullptr;
  const long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v < 0 || v > (1 << 30)) return std::nullopt;
  return static_cast<int>(v);
}

struct Source {
  const char* name;
  const char* rank_var;
  const char* size_var;
};
constexpr Source kSources[] = {
    {"CHORUS_RANK/CHORUS_SIZE", "CHORUS_RANK", "CHORUS_SIZE"},
    {"torchrun (RANK/WORLD_SIZE)", "RANK", "WORLD_SIZE"},
    {"Open MPI (OMPI_COMM_WORLD_RANK/SIZE)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
    {"PMI (PMI_RANK/PMI_SIZE)", "PMI_RANK", "PMI_SIZE"},
    {"Slurm (SLURM_PROCID/SLURM_NTASKS)", "SLURM_PROCID", "SLURM_NTASKS"},
};

}  // namespace

LaunchInfo launch_info_from_env(const EnvLookup& env) {
  std::string found;  // every relevant variable seen, for error messages
  auto note = [&](const char* var) {
    if (auto v = env(var)) found += fmt::format("{}{}={}", found.empty() ? "" : ", ", var, *v);
  };
  for (const auto& s : kSources) note(s.rank_var), note(s.size_var);
  for (const char* v : {"CHORUS_STORE", "MASTER_ADDR", "MASTER_PORT"}) note(v);
  const std::string seen = found.empty() ? "none of them is set" : "found " + found;
  auto fail = [&](const std::string& what) {
    return Error(ErrorCode::invalid_argument,
                 fmt::format("cannot tell this process's rank: {}. Chorus reads CHORUS_RANK, "
                             "CHORUS_SIZE and CHORUS_STORE, or the variables of torchrun, Open "
                             "MPI, PMI or Slurm (with CHORUS_STORE or MASTER_ADDR/MASTER_PORT); "
                             "{}",
                             what, seen));
  };

  std::optional<LaunchInfo> chosen;
  for (const auto& s : kSources) {
    auto r = env(s.rank_var), n = env(s.size_var);
    if (!r && !n) continue;
    if (!r || !n)
      throw fail(fmt::format("{} is set but {} is not", r ? s.rank_var : s.size_var,
                             r ? s.size_var : s.rank_var));
    auto rank = parse_int(*r), size = parse_int(*n);
    if (size && *size > kMaxRanks)
      throw fail(fmt::format("{}={} is more ranks than Chorus supports ({})", s.size_var, *n,
                             kMaxRanks));
    if (!rank || !size || *size < 1 || *rank >= *size)
      throw fail(fmt::format("{}={} and {}={} are not a rank in 0..size-1", s.rank_var, *r,
                             s.size_var, *n));
    if (!chosen) {
      chosen = LaunchInfo{*rank, *size, "", s.name};
    } else if (chosen->size != *size || chosen->rank != *rank) {
      throw fail(fmt::format("{} says rank {} of {}, but {} says rank {} of {}", chosen->source,
                             chosen->rank, chosen->size, s.name, *rank, *size));
    }
  }
  if (!chosen) throw fail("no launcher variables");

  if (auto store = env("CHORUS_STORE")) {
    chosen->store = *store;
  } else if (auto addr = env("MASTER_ADDR"), port = env("MASTER_PORT"); addr && port) {
    auto p = parse_int(*port);
    if (!p || *p >= 65535) throw fail("MASTER_PORT=" + *port + " is not a port");
    const bool v6 = addr->find(':') != std::string::npos && addr->front() != '[';
    chosen->store = fmt::format("tcp://{}:{}", v6 ? "[" + *addr + "]" : *addr, *p + 1);
  } else if (auto ns = env("PMIX_NAMESPACE");
             ns && env("OMPI_COMM_WORLD_LOCAL_SIZE") &&
             env("OMPI_COMM_WORLD_LOCAL_SIZE") == env("OMPI_COMM_WORLD_SIZE")) {
    // Open MPI with every rank on this host: a file store private to the
    // job, in the job's own session directory (PMIX_SERVER_TMPDIR, named
    // after mpirun's pid and removed by Open MPI when the job ends). The
    // namespace alone is no name for it: it carries a 16-bit hash of
    // mpirun, so a /tmp directory named after it outlives its job and is
    // met again by a later one, whose ranks then read the old job's
    // addresses (seen: two ranks of one job disagreeing on the job's
    // identity, each refusing the other until the test's timeout).
    const auto session = env("PMIX_SERVER_TMPDIR");
    chosen->store = fmt::format("file://{}/chorus-{}",
                                session && !session->empty() ? *session : "/tmp", *ns);
  } else if (chosen->size == 1) {
    // A job of one rank meets no one: it needs no store.
  } else {
    throw fail(
        fmt::format("{} gives rank {} of {}, but there is no store: set CHORUS_STORE "
                    "(tcp://host:port served by rank 0, or file:///shared/dir) or "
                    "MASTER_ADDR and MASTER_PORT",
                    chosen->source, chosen->rank, chosen->size));
  }
  return *chosen;
}

LaunchInfo launch_info_from_env() {
  return launch_info_from_env([](const char* name) -> std::optional<std::string> {
    const char* v = std::getenv(name);
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  });
}

double checked_timeout(double seconds, std::string_view what) {
  if (!(seconds > 0) || !(seconds <= transport::kMaxTimeoutSeconds))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{} = {} s: a timeout must be a number of seconds above 0 and at most "
                            "{:g} (about 116 days)",
                            what, seconds, transport::kMaxTimeoutSeconds));
  return seconds;
}

double timeout_seconds() {
  static const double seconds = [] {
    const char* env = config::raw(config::Variable::timeout);
    if (env == nullptr || *env == '\0') return 300.0;
    char* end = nullptr;
    const double v = std::strtod(env, &end);
    if (*end != '\0' || end == env)
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("CHORUS_TIMEOUT='{}' is not a positive number of seconds", env));
    return checked_timeout(v, fmt::format("CHORUS_TIMEOUT='{}'", env));
  }();
  return seconds;
}

TransportKind parse_transport_kind(const std::string& v, std::string_view what) {
  if (v.empty() || v == "auto") return TransportKind::automatic;
  if (v == "ucx") return TransportKind::ucx;
  if (v == "tcp") return TransportKind::tcp;
  if (v == "local") return TransportKind::local;
  throw Error(ErrorCode::invalid_argument,
              fmt::format("{}='{}' is not one of auto, ucx, tcp, local", what, v));
}

TransportKind transport_kind_from_env() {
  const char* env = config::raw(config::Variable::transport);
  return parse_transport_kind(env ? env : "", "CHORUS_TRANSPORT");
}

std::string_view to_string(TransportKind kind) {
  switch (kind) {
    case TransportKind::automatic:
      return "auto";
    case TransportKind::ucx:
      return "ucx";
    case TransportKind::tcp:
      return "tcp";
    case TransportKind::local:
      return "local";
  }
  return "?";
}

namespace {

std::unique_ptr<transport::Transport> make_ucx(int rank, int size) {
#if defined(CHORUS_HAVE_UCX)
  return std::make_unique<transport::UcxTransport>(rank, size);
#else
  (void)rank, (void)size;
  throw Error(ErrorCode::unsupported, "this chorus was built without UCX (CHORUS_WITH_UCX=OFF)");
#endif
}

}  // namespace

std::unique_ptr<transport::Transport> make_transport(TransportKind kind, int rank, int size) {
  switch (kind) {
    case TransportKind::ucx: return make_ucx(rank, size);
    case TransportKind::tcp: return std::make_unique<transport::TcpTransport>(rank, size);
    default:
      throw Error(ErrorCode::internal,
                  fmt::format("make_transport: {} is not a networked transport", to_string(kind)));
  }
}

BlobAllgather store_allgather(Store& store, const std::string& key_prefix, int rank, int size,
                              transport::Deadline deadline) {
  auto calls = std::make_shared<int>(0);
  return [&store, key_prefix, rank, size, deadline, calls](const transport::AddressBlob& blob) {
    const std::string prefix = fmt::format("{}/{}", key_prefix, (*calls)++);
    store.set(fmt::format("{}/{}", prefix, rank), blob, deadline);
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back(fmt::format("{}/{}", prefix, r));
    try {
      return store.get(keys, deadline);
    } catch (const StoreTimeout& e) {
      // At most 16 named: a job of thousands would otherwise print pages.
      std::string ranks;
      const auto& missing = e.missing();
      for (std::size_t i = 0; i < missing.size() && i < 16; ++i)
        ranks += (i ? ", " : "") + missing[i].substr(missing[i].rfind('/') + 1);
      if (missing.size() > 16) ranks += fmt::format(" and {} more", missing.size() - 16);
      throw Error(ErrorCode::timeout,
                  fmt::format("rank {}: ranks {} of {} never arrived at the store {} (waited "
                              "until the deadline; CHORUS_TIMEOUT sets it)",
                              rank, ranks, size, store.url()));
    }
  };
}

std::unique_ptr<transport::Transport> connect_transport(TransportKind kind, int rank, int size,
                                                        const BlobAllgather& allgather,
                                                        transport::Deadline deadline) {
  std::unique_ptr<transport::Transport> t;
  if (kind == TransportKind::local) {
    if (size != 1)
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("CHORUS_TRANSPORT=local links ranks that are threads of one "
                              "process; a job of {} processes needs ucx or tcp",
                              size));
    t = std::make_unique<transport::LocalTransport>(transport::LocalFabric::create(1), 0);
  } else if (kind == TransportKind::automatic) {
    // Every rank tells whether it could start UCX; UCX is used only if all
    // could, so that no two ranks ever pick different transports.
    std::string why_not;
    try {
      t = make_ucx(rank, size);
    } catch (const Error& e) {
      why_not = e.what();
    }
    const auto answers = allgather(to_bytes(t ? "1" : why_not));
    for (int r = 0; r < size && t; ++r) {
      if (to_string(answers[static_cast<std::size_t>(r)]) != "1") {
        why_not =
            fmt::format("rank {} cannot: {}", r, to_string(answers[static_cast<std::size_t>(r)]));
        t.reset();
      }
    }
    if (!t) {
      if (rank == 0) log::info("transport: tcp (UCX not used: {})", why_not);
      t = std::make_unique<transport::TcpTransport>(rank, size);
    }
  } else if (kind == TransportKind::ucx) {
    t = make_ucx(rank, size);
  } else {
    t = std::make_unique<transport::TcpTransport>(rank, size);
  }
  const auto blobs = allgather(t->address());
  if (blobs.size() != static_cast<std::size_t>(size))
    throw Error(ErrorCode::internal, fmt::format("rank {}: the address all-gather returned {} "
                                                 "blobs for {} ranks", rank, blobs.size(), size));
  t->connect(blobs, deadline);
  log::info("transport: {} connected, {} ranks", t->name(), size);
  return t;
}

std::unique_ptr<transport::Transport> connect_transport(TransportKind kind, int rank, int size,
                                                        Store& store, const std::string& key_prefix,
                                                        transport::Deadline deadline) {
  return connect_transport(kind, rank, size, store_allgather(store, key_prefix, rank, size, deadline),
                           deadline);
}

}  // namespace chorus::bootstrap

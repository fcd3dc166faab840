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
#include <optional>
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

namespace {

// The error for a rendezvous that timed out with `missing` keys, each
// ending in "/<rank>": at most 16 ranks named, since a job of thousands
// would otherwise print pages.
Error never_arrived(const Store& store, int rank, int size, const std::vector<std::string>& missing) {
  std::string ranks;
  for (std::size_t i = 0; i < missing.size() && i < 16; ++i)
    ranks += (i ? ", " : "") + missing[i].substr(missing[i].rfind('/') + 1);
  if (missing.size() > 16) ranks += fmt::format(" and {} more", missing.size() - 16);
  return Error(ErrorCode::timeout,
               fmt::format("rank {}: ranks {} of {} never arrived at the store {} (waited until "
                           "the deadline; CHORUS_TIMEOUT sets it)",
                           rank, ranks, size, store.url()));
}

std::string stage_key(const std::string& stage, int rank) { return fmt::format("{}/{}", stage, rank); }

// Returns once every rank has set its key `stage`/<rank> (the caller has
// set its own): a counter at the store, so O(1) work per rank where a GET
// of every rank's key is O(p). A timeout names the ranks that never came.
void wait_for_every_rank(Store& store, const std::string& stage, int rank, int size,
                         Deadline deadline) {
  try {
    store.barrier(stage + "/arrival", size, deadline);
  } catch (const StoreTimeout&) {
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back(stage_key(stage, r));
    try {
      store.get(keys, transport::deadline_after(2));
    } catch (const StoreTimeout& e) {
      throw never_arrived(store, rank, size, e.missing());
    }
    throw Error(ErrorCode::timeout,
                fmt::format("rank {}: the {} ranks met at the store {} only after the deadline "
                            "(CHORUS_TIMEOUT sets it)",
                            rank, size, store.url()));
  }
}

// What the ranks agree on before any transport exists. Every rank tells
// what it asks for: the transport (CHORUS_TRANSPORT or Options::transport),
// whether it would connect each networked transport lazily
// (CHORUS_SOCKET_CONNECT, CHORUS_UCX_CONNECT) and, unless it asks for tcp,
// whether it could start UCX; or that one of those settings is invalid on
// it. All get the same verdict. Each rank starts only the rendezvous its
// own settings call for, so ranks that differ would otherwise each wait at
// the store for keys the others never set, until the deadline, and report
// ranks that "never arrived" (or, over a caller's all-gather, take one
// step's answers as another step's addresses: through libchorus_pmpi, a
// job that hung).
struct TransportAsk {
  TransportKind kind;
  bool lazy[2];         // connecting lazily, by networked_index(): tcp, ucx
  std::string why_not;  // why this rank could not start UCX; "" if it could (or did not try)
  std::string invalid;  // what is wrong with this rank's settings (then nothing else counts); "" if nothing
};
struct TransportVerdict {
  std::string invalid;     // "rank R: <what>" of a rank whose settings are invalid; "" if none
  std::string differing;   // "rank R asks for K" of a rank asking for another kind; "" if none
  std::string cannot_ucx;  // "rank R cannot: <why>" of a rank that could not start UCX; "" if none
  int lazy_ranks = 0;      // the ranks that connect the transport used lazily
};

// tcp 0, ucx 1.
std::size_t networked_index(TransportKind kind) { return kind == TransportKind::tcp ? 0 : 1; }

// The transport the ranks use once they agree on what they ask for.
TransportKind used_transport(TransportKind asked, const TransportVerdict& verdict) {
  return asked == TransportKind::tcp || !verdict.cannot_ucx.empty() ? TransportKind::tcp
                                                                    : TransportKind::ucx;
}

// Through the store: counters, so O(1) store work per rank (the first rank
// to ask for a kind, and the first that cannot start UCX, leave their
// names for the others' messages).
TransportVerdict agree_on_transport(Store& store, const std::string& prefix, int rank, int size,
                                    const TransportAsk& ask, Deadline deadline) {
  const std::string stage = prefix + "/transport";
  const auto asking_for = [&](TransportKind k) { return fmt::format("{}/asked/{}", stage, to_string(k)); };
  const auto lazy_with = [&](TransportKind k) { return fmt::format("{}/lazy/{}", stage, to_string(k)); };
  if (!ask.invalid.empty() && store.add(stage + "/invalid", 1, deadline) == 1)
    store.set(stage + "/invalid/what", to_bytes(fmt::format("rank {}: {}", rank, ask.invalid)), deadline);
  if (store.add(asking_for(ask.kind), 1, deadline) == 1)
    store.set(asking_for(ask.kind) + "/first", to_bytes(std::to_string(rank)), deadline);
  for (const TransportKind k : {TransportKind::tcp, TransportKind::ucx})
    if (ask.lazy[networked_index(k)]) store.add(lazy_with(k), 1, deadline);
  if (!ask.why_not.empty() && store.add(stage + "/cannot", 1, deadline) == 1)
    store.set(stage + "/why", to_bytes(fmt::format("rank {} cannot: {}", rank, ask.why_not)), deadline);
  store.set(stage_key(stage, rank), to_bytes("1"), deadline);
  wait_for_every_rank(store, stage, rank, size, deadline);
  TransportVerdict verdict;
  if (store.add(stage + "/invalid", 0, deadline) != 0) {
    const std::string what[] = {stage + "/invalid/what"};
    verdict.invalid = to_string(store.get(what, deadline)[0]);
    return verdict;
  }
  if (store.add(asking_for(ask.kind), 0, deadline) != size) {
    for (const TransportKind other : {TransportKind::automatic, TransportKind::ucx, TransportKind::tcp}) {
      if (other == ask.kind || store.add(asking_for(other), 0, deadline) == 0) continue;
      const std::string first[] = {asking_for(other) + "/first"};
      verdict.differing = fmt::format("rank {} asks for {}", to_string(store.get(first, deadline)[0]),
                                      to_string(other));
      return verdict;
    }
  }
  if (store.add(stage + "/cannot", 0, deadline) != 0) {
    const std::string why[] = {stage + "/why"};
    verdict.cannot_ucx = to_string(store.get(why, deadline)[0]);
  }
  verdict.lazy_ranks =
      static_cast<int>(store.add(lazy_with(used_transport(ask.kind, verdict)), 0, deadline));
  return verdict;
}

// The same over an all-gather of every rank's "<kind>:<tcp lazy><ucx
// lazy><invalid>:<text>" (the three as 0 or 1; the text is what is
// invalid where that is 1, else why not UCX). A peer's answer is checked
// before it is believed: one not of that form (a peer that is not at this
// step, or garbage) fails this rank.
TransportVerdict agree_on_transport(const BlobAllgather& allgather, int rank, int size,
                                    const TransportAsk& ask) {
  const bool invalid = !ask.invalid.empty();
  const auto answers = allgather(to_bytes(fmt::format("{}:{}{}{}:{}", to_string(ask.kind),
                                                      ask.lazy[0] ? 1 : 0, ask.lazy[1] ? 1 : 0,
                                                      invalid ? 1 : 0,
                                                      invalid ? ask.invalid : ask.why_not)));
  if (answers.size() != static_cast<std::size_t>(size))
    throw Error(ErrorCode::internal, fmt::format("rank {}: the all-gather returned {} answers for {} "
                                                 "ranks", rank, answers.size(), size));
  TransportVerdict verdict;
  int lazy_ranks[2] = {0, 0};
  for (int r = 0; r < size; ++r) {
    const std::string answer = to_string(answers[static_cast<std::size_t>(r)]);
    const std::size_t colon = answer.find(':');
    const std::string asked = answer.substr(0, colon);
    const auto is_bit = [&](std::size_t at) { return answer[at] == '0' || answer[at] == '1'; };
    if (colon == std::string::npos || (asked != "auto" && asked != "ucx" && asked != "tcp") ||
        answer.size() < colon + 5 || !is_bit(colon + 1) || !is_bit(colon + 2) ||
        !is_bit(colon + 3) || answer[colon + 4] != ':')
      throw Error(ErrorCode::peer_failure,
                  fmt::format("rank {}: rank {} sent a malformed transport answer at start-up "
                              "({} bytes, not \"<auto|ucx|tcp>:<0|1><0|1><0|1>:<text>\")",
                              rank, r, answer.size()));
    const std::string text = answer.substr(colon + 5);
    if (answer[colon + 3] == '1') {
      if (verdict.invalid.empty()) verdict.invalid = fmt::format("rank {}: {}", r, text);
      continue;
    }
    if (verdict.differing.empty() && asked != to_string(ask.kind))
      verdict.differing = fmt::format("rank {} asks for {}", r, asked);
    for (std::size_t k = 0; k < 2; ++k) lazy_ranks[k] += answer[colon + 1 + k] == '1' ? 1 : 0;
    if (verdict.cannot_ucx.empty() && !text.empty())
      verdict.cannot_ucx = fmt::format("rank {} cannot: {}", r, text);
  }
  verdict.lazy_ranks = lazy_ranks[networked_index(used_transport(ask.kind, verdict))];
  return verdict;
}

// Whether this rank would connect a transport of `kind` among `size` ranks
// lazily (its transport's own rule; throws on a bad setting).
bool connects_lazily(TransportKind kind, int size) {
  if (kind == TransportKind::tcp) return transport::TcpTransport::lazy_links(size);
#if defined(CHORUS_HAVE_UCX)
  return transport::UcxTransport::lazy_endpoints(size);
#else
  return false;
#endif
}

// This rank's transport of `kind`, once `agree` (one of the above) has
// heard every rank: all must ask for the same kind and connect the
// transport used alike (else every rank fails at once, naming what
// differs); with automatic, UCX is used only if every rank could start it,
// so that no two ranks ever pick different transports; with ucx (forced,
// no fallback), a rank that cannot start it fails every rank at once,
// naming itself and why, instead of leaving them at the store until the
// deadline to report it as a rank that never came.
std::unique_ptr<transport::Transport> choose_transport(
    TransportKind kind, int rank, int size,
    const std::function<TransportVerdict(const TransportAsk& ask)>& agree) {
  if (kind == TransportKind::local) {
    if (size != 1)
      throw Error(ErrorCode::invalid_argument,
                  fmt::format("CHORUS_TRANSPORT=local links ranks that are threads of one "
                              "process; a job of {} processes needs ucx or tcp",
                              size));
    return std::make_unique<transport::LocalTransport>(transport::LocalFabric::create(1), 0);
  }
  // A rank asking for tcp never uses UCX: its UCX setting is not compared.
  // A setting that is invalid here fails every rank at the agreement, not
  // this rank alone while the others wait for it until the deadline.
  TransportAsk ask{kind, {false, false}, {}, {}};
  std::optional<Error> invalid_here;
  try {
    ask.lazy[0] = connects_lazily(TransportKind::tcp, size);
    ask.lazy[1] = kind != TransportKind::tcp && connects_lazily(TransportKind::ucx, size);
  } catch (const Error& e) {
    invalid_here = e;
    ask.invalid = e.what();
    ask.lazy[0] = ask.lazy[1] = false;
  }
  std::unique_ptr<transport::Transport> t;
  ErrorCode code = ErrorCode::peer_failure;  // another rank's failure, unless this one's
  if (kind != TransportKind::tcp && !invalid_here) {
    try {
      t = make_ucx(rank, size);
    } catch (const Error& e) {
      ask.why_not = e.what();
      code = e.code();
    }
  }
  const TransportVerdict verdict = agree(ask);
  if (invalid_here) throw *invalid_here;
  if (!verdict.invalid.empty())
    throw Error(ErrorCode::invalid_argument,
                fmt::format("rank {}: a setting of another rank is invalid, {}", rank, verdict.invalid));
  if (!verdict.differing.empty())
    throw Error(ErrorCode::mismatched_collective,
                fmt::format("rank {}: the ranks ask for different transports: {} here "
                            "(CHORUS_TRANSPORT or Options::transport), and {}; every rank must "
                            "ask for the same",
                            rank, to_string(kind), verdict.differing));
  const TransportKind used = used_transport(kind, verdict);
  if (kind == TransportKind::ucx && used != TransportKind::ucx)
    throw Error(code, fmt::format("rank {}: the transport is ucx (CHORUS_TRANSPORT or "
                                  "Options::transport), and {}",
                                  rank, verdict.cannot_ucx));
  if (verdict.lazy_ranks != 0 && verdict.lazy_ranks != size) {
    const bool lazy = ask.lazy[networked_index(used)];
    throw Error(ErrorCode::mismatched_collective,
                fmt::format("rank {}: the ranks connect {} differently: {} here, {} on {} of {} "
                            "ranks ({}); every rank must be given the same",
                            rank, used == TransportKind::tcp ? "TCP links" : "UCX endpoints",
                            lazy ? "lazily" : "eagerly", lazy ? "eagerly" : "lazily",
                            lazy ? size - verdict.lazy_ranks : verdict.lazy_ranks, size,
                            used == TransportKind::tcp ? "CHORUS_SOCKET_CONNECT" : "CHORUS_UCX_CONNECT"));
  }
  if (used == TransportKind::tcp) {
    if (kind == TransportKind::automatic && rank == 0)
      log::info("transport: tcp (UCX not used: {})", verdict.cannot_ucx);
    t = std::make_unique<transport::TcpTransport>(rank, size);
  }
  return t;
}

void connect_with(transport::Transport& t, std::span<const transport::AddressBlob> blobs, int rank,
                  int size, transport::Deadline deadline) {
  if (blobs.size() != static_cast<std::size_t>(size))
    throw Error(ErrorCode::internal, fmt::format("rank {}: the address all-gather returned {} "
                                                 "blobs for {} ranks", rank, blobs.size(), size));
  t.connect(blobs, deadline);
  log::info("transport: {} connected, {} ranks", t.name(), size);
}

}  // namespace

BlobAllgather store_allgather(Store& store, const std::string& key_prefix, int rank, int size,
                              transport::Deadline deadline) {
  auto calls = std::make_shared<int>(0);
  return [&store, key_prefix, rank, size, deadline, calls](const transport::AddressBlob& blob) {
    const std::string prefix = fmt::format("{}/{}", key_prefix, (*calls)++);
    store.set(stage_key(prefix, rank), blob, deadline);
    std::vector<std::string> keys;
    for (int r = 0; r < size; ++r) keys.push_back(stage_key(prefix, r));
    try {
      return store.get(keys, deadline);
    } catch (const StoreTimeout& e) {
      throw never_arrived(store, rank, size, e.missing());
    }
  };
}

void connect_looking_up(transport::Transport& t, std::shared_ptr<Store> store,
                        const std::string& key_prefix, transport::Deadline deadline) {
  const int rank = t.rank(), size = t.size();
  const std::string stage = key_prefix + "/address";
  const auto mine = t.address();
  store->set(stage_key(stage, rank), mine, deadline);
  wait_for_every_rank(*store, stage, rank, size, deadline);
  const std::string rank0_key[] = {stage_key(stage, 0)};
  const auto rank0 = rank == 0 ? mine : store->get(rank0_key, deadline)[0];
  store->park(deadline);
  t.connect_looking_up(
      rank0,
      [store, stage](int r, transport::Deadline until) {
        const std::string key[] = {stage_key(stage, r)};
        return store->get(key, until)[0];  // every rank's is there: one round trip
      },
      deadline);
  log::info("transport: {} connected, {} ranks (addresses looked up when first needed)", t.name(),
            size);
}

std::unique_ptr<transport::Transport> connect_transport(TransportKind kind, int rank, int size,
                                                        const BlobAllgather& allgather,
                                                        transport::Deadline deadline) {
  auto t = choose_transport(kind, rank, size, [&](const TransportAsk& ask) {
    return agree_on_transport(allgather, rank, size, ask);
  });
  connect_with(*t, allgather(t->address()), rank, size, deadline);
  return t;
}

std::unique_ptr<transport::Transport> connect_transport(TransportKind kind, int rank, int size,
                                                        std::shared_ptr<Store> store,
                                                        const std::string& key_prefix,
                                                        transport::Deadline deadline) {
  auto t = choose_transport(kind, rank, size, [&](const TransportAsk& ask) {
    return agree_on_transport(*store, key_prefix, rank, size, ask, deadline);
  });
  if (t->connects_lazily()) {
    connect_looking_up(*t, std::move(store), key_prefix, deadline);
  } else {
    const auto blobs = store_allgather(*store, key_prefix, rank, size, deadline)(t->address());
    connect_with(*t, blobs, rank, size, deadline);
  }
  return t;
}

}  // namespace chorus::bootstrap

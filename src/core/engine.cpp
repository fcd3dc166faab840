#include "core/engine.hpp"

#include "bootstrap/launch.hpp"
#include "common/config.hpp"
#include "common/logging.hpp"
#include "common/wait_hook.hpp"
#include "coll/shared_memory.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <optional>

namespace chorus {
namespace {

double us(double seconds) { return seconds * 1e6; }

// Deferred calls (CallOptions::deferred): the worker leaves one alone for
// kDeferredGrace, for its waiter to run; while such calls came within
// kDeferredRecent, an idle worker looks at the queue every kDeferredPoll
// instead of sleeping until woken, so that their submit need not wake it
// (and a call nobody waits for still starts within about 11 ms).
constexpr auto kDeferredGrace = std::chrono::milliseconds(1);
constexpr auto kDeferredPoll = std::chrono::milliseconds(10);
constexpr auto kDeferredRecent = std::chrono::milliseconds(100);

// "allgather=bruck,allreduce=ring", or a bare AllReduce name ("ring"), as
// CHORUS_ALGO and Options::algorithms spell it; every name is checked
// against the registry. `where` names the source in errors.
AlgorithmNames parse_algorithm_names(std::string_view text, std::string_view where) {
  AlgorithmNames names;
  const std::string_view whole = text;
  auto bad = [&](const std::string& why) {
    return Error(ErrorCode::invalid_argument, fmt::format("{}='{}': {}", where, whole, why));
  };
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    std::string_view entry = text.substr(0, comma);
    text = comma == std::string_view::npos ? std::string_view{} : text.substr(comma + 1);
    auto kind = coll::CollectiveKind::allreduce;
    const std::size_t equals = entry.find('=');
    if (equals != std::string_view::npos) {
      const std::string_view collective = entry.substr(0, equals);
      entry = entry.substr(equals + 1);
      bool found = false;
      for (int k = 0; k < coll::kCollectiveKinds && !found; ++k)
        if (coll::to_string(static_cast<coll::CollectiveKind>(k)) == collective) {
          kind = static_cast<coll::CollectiveKind>(k);
          found = true;
        }
      if (!found) throw bad(fmt::format("'{}' is not a collective", collective));
    }
    if (entry.empty()) throw bad("an entry names no algorithm");
    if (entry == "automatic") entry = "auto";
    if (entry != "auto" && coll::find_row(kind, entry) == nullptr)
      throw bad(fmt::format("'{}' is not one of {} (the algorithms of {})", entry,
                            coll::names_of(kind), coll::to_string(kind)));
    names[static_cast<std::size_t>(kind)] = entry == "auto" ? "" : std::string(entry);
  }
  return names;
}

// A 0-or-1 variable (unset: `otherwise`).
bool switch_from_env(config::Variable variable, bool otherwise) {
  const auto value = config::get(variable);
  if (!value) return otherwise;
  if (*value == "1") return true;
  if (*value == "0") return false;
  throw Error(ErrorCode::invalid_argument,
              fmt::format("{}='{}' is not 0 or 1", config::name(variable), *value));
}

// CHORUS_SHM: whether the ranks on a host share a segment (the default).
bool host_segment_wanted() { return switch_from_env(config::Variable::shm, true); }

// The host segment's slot size: CHORUS_SHM_BYTES (64 B to 1 GiB), else
// 4 MiB while the segment (2 p slots) stays within 16 MiB (p = 2: 4 MiB,
// p = 4: 2 MiB, p = 8: 1 MiB, ...; never under 64 KiB).
std::size_t shm_slot_bytes(int p) {
  const auto value = config::get(config::Variable::shm_bytes);
  if (!value)
    return std::max<std::size_t>(64 << 10,
                                 std::min<std::size_t>(4 << 20, (8 << 20) / static_cast<std::size_t>(p)));
  char* end = nullptr;
  const unsigned long long bytes = std::strtoull(value->c_str(), &end, 10);
  if (*end != '\0' || bytes < 64 || bytes > (std::size_t{1} << 30))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("CHORUS_SHM_BYTES='{}' is not a byte count from 64 to 1 GiB", *value));
  return static_cast<std::size_t>(bytes);
}

// The host segment when every rank is on this host (null otherwise): set up
// with all-gathers over the freshly connected transport.
// A fixed-size all-gather over the freshly connected transport, for set-up.
shm::Allgather setup_allgather(transport::Transport& t, double timeout_seconds,
                               const std::atomic<bool>* abort_requested, coll::Scratch* scratch) {
  return [&t, timeout_seconds, abort_requested, scratch](const void* mine, std::size_t bytes,
                                                         void* out) {
    const coll::Collective setup{t, 0, transport::deadline_after(timeout_seconds), nullptr,
                                 abort_requested, scratch};
    coll::allgather_bruck(setup, mine, out, bytes, DataType::uint8);
  };
}

// Settings that change what a rank sends from its first call on, which
// every rank must share; compared at creation before anything uses them
// (one all-gather of a word each), so that a job whose ranks were given
// different ones fails on every rank at once, naming the setting, rather
// than later on some of them with a message about bytes: a rank without
// the host segment (CHORUS_SHM=0) exchanged set-up messages of another size
// ("has 608 bytes but the receive buffer holds only 160"), and a rank
// without the call check (CHORUS_CHECK=0) left its calls' signatures blank,
// so that the others failed its first call as a different collective
// while it succeeded.
void check_settings_agree(int rank, int size, bool host_segment, bool call_check,
                          const shm::Allgather& allgather) {
  struct Setting {
    config::Variable variable;
    bool on;
  };
  const Setting settings[] = {{config::Variable::shm, host_segment},
                              {config::Variable::check, call_check}};
  std::uint64_t mine = 0;
  for (std::size_t i = 0; i < std::size(settings); ++i)
    if (settings[i].on) mine |= std::uint64_t{1} << i;
  std::vector<std::uint64_t> all(static_cast<std::size_t>(size));
  allgather(&mine, sizeof mine, all.data());
  for (int r = 0; r < size; ++r) {
    const std::uint64_t differ = all[static_cast<std::size_t>(r)] ^ mine;
    for (std::size_t i = 0; i < std::size(settings); ++i)
      if ((differ >> i) & 1)
        throw Error(ErrorCode::mismatched_collective,
                    fmt::format("rank {}: {} differs between this rank ({}) and rank {} ({}): every "
                                "rank must be given the same",
                                rank, config::name(settings[i].variable), settings[i].on ? 1 : 0, r,
                                settings[i].on ? 0 : 1));
  }
}

// The host segment when every rank is on this host (null otherwise). A
// topology given by CHORUS_TOPOLOGY that puts ranks on several hosts is
// taken at its word: no segment, as on real hosts.
std::unique_ptr<shm::Segment> attach_host_segment(transport::Transport& t,
                                                  const coll::Topology& topology,
                                                  const shm::Allgather& allgather) {
  if (!host_segment_wanted() || topology.hosts() > 1) return nullptr;
  return shm::Segment::attach(t.rank(), t.size(), shm_slot_bytes(t.size()), allgather);
}

// The slots of each host's own segment across hosts: what
// shm_hierarchical_allreduce runs at (below kHierarchicalFromBytes) fits.
constexpr std::size_t kOwnHostSlotBytes = 64 << 10;

// A fixed-size all-gather among the ranks of this rank's host (`members`,
// ascending; this rank is one), by messages: each sends to each. Its
// messages use phase 1 of segment kCheckSegment of the set-up's calls
// (sequence 0), step by step: no other set-up exchange does.
shm::Allgather own_host_allgather(transport::Transport& t, std::vector<int> members,
                                  double timeout_seconds, const std::atomic<bool>* abort_requested) {
  auto exchanges = std::make_shared<unsigned>(0);
  return [&t, members = std::move(members), timeout_seconds, abort_requested,
          exchanges](const void* mine, std::size_t bytes, void* out) {
    const coll::Collective setup{t, 0, transport::deadline_after(timeout_seconds), nullptr,
                                 abort_requested};
    const auto tag = setup.message_tag(1, (*exchanges)++ % coll::kMaxSteps, coll::kCheckSegment);
    std::vector<transport::RequestPtr> requests;
    for (std::size_t i = 0; i < members.size(); ++i) {
      auto* slot = static_cast<std::byte*>(out) + i * bytes;
      if (members[i] == t.rank()) {
        std::memcpy(slot, mine, bytes);
        continue;
      }
      requests.push_back(t.irecv(members[i], tag, slot, bytes));
      requests.push_back(t.isend(members[i], tag, mine, bytes));
    }
    setup.wait_all(requests);
  };
}

// Each host's own segment when the ranks are on several hosts (null
// otherwise): made among each host's ranks, then kept only when every host
// has one, so that every rank chooses alike. A topology given by
// CHORUS_TOPOLOGY is taken at its word here too: its "hosts" get a segment
// each where their ranks do share a machine.
std::unique_ptr<shm::Segment> attach_own_host_segment(transport::Transport& t,
                                                      const coll::Topology& topology,
                                                      double timeout_seconds,
                                                      const std::atomic<bool>* abort_requested,
                                                      const shm::Allgather& allgather) {
  if (!host_segment_wanted() || topology.hosts() == 1) return nullptr;
  const std::vector<int>& members = topology.ranks_on(topology.host_of(t.rank()));
  auto segment = shm::Segment::attach(
      topology.local_rank(t.rank()), static_cast<int>(members.size()), kOwnHostSlotBytes,
      own_host_allgather(t, members, timeout_seconds, abort_requested), members);
  const std::uint8_t mine = segment ? 1 : 0;
  std::vector<std::uint8_t> all(static_cast<std::size_t>(t.size()));
  allgather(&mine, 1, all.data());
  const auto without = std::find(all.begin(), all.end(), 0);
  if (without == all.end()) return segment;
  if (t.rank() == 0)
    log::info("shm: no per-host segments across hosts: {} has none", topology.name_rank(
        static_cast<int>(without - all.begin())));
  return nullptr;
}

// Cost models this process has probed, by what they measured: the
// transport, the ranks' places on hosts, the host segment, the call check,
// whether the variants were timed. A new communicator whose every rank has
// probed one for its key takes rank 0's instead of probing again: a probe
// that times the variants takes 1-2.6 s at p = 3-4 on two cores, and an
// MPI program under libchorus_pmpi makes a communicator per MPI
// communicator it uses (test suites make hundreds).
struct ProbedModels {
  std::mutex mutex;
  std::map<std::string, coll::CostModel> by_key;
};
ProbedModels& probed_models() {
  static ProbedModels* models = new ProbedModels;  // never destroyed: used until exit
  return *models;
}

// A cost model that lets every rank skip the probe, and what it says of
// where the models came from; none when any rank has no model. Each rank
// offers its tuning file's model (which replaces the probe's anyway), else
// the one it probed before for `key`: the probe takes every rank, so it
// runs when any rank has neither. Rank 0's offer is returned, so that a
// model probed before is the same on every rank and all choose alike.
std::optional<std::pair<coll::CostModel, std::string>> model_every_rank_has(
    const std::string& key, int ranks, const std::optional<coll::CostModel>& from_file,
    const shm::Allgather& allgather) {
  enum : std::uint8_t { none, probed_before, tuning_file };
  struct Offer {
    std::uint8_t from = none;
    coll::CostModel model;
  } mine;
  if (from_file) {
    mine = {tuning_file, *from_file};
  } else {
    auto& models = probed_models();
    std::lock_guard lock(models.mutex);
    if (auto found = models.by_key.find(key); found != models.by_key.end())
      mine = {probed_before, found->second};
  }
  std::vector<Offer> offers(static_cast<std::size_t>(ranks));
  allgather(&mine, sizeof mine, offers.data());
  bool files = false;
  for (const Offer& offer : offers) {
    if (offer.from == none) return std::nullopt;
    files = files || offer.from == tuning_file;
  }
  return std::pair{offers[0].model, std::string(files ? "no probe: every rank had a model"
                                                      : "probed before in this process")};
}

}  // namespace

WaitingStripe& waiting_stripe(const Work::State* state) {
  // Never destroyed: a communicator that is itself a static may end its
  // calls after this file's statics are gone.
  constexpr std::size_t kStripes = 16;
  static WaitingStripe* const stripes = new WaitingStripe[kStripes];
  return stripes[(reinterpret_cast<std::uintptr_t>(state) >> 6) % kStripes];
}

void Work::State::finish(std::optional<Error> e) {
  error = std::move(e);
  // Sequentially consistent, as the watchers' store of `watched` and their
  // load of `done`: either this sees `watched`, or they see `done`.
  done.store(true);
  if (!watched.load()) return;
  std::vector<std::function<void()>> callbacks;
  WaitingStripe& stripe = waiting_stripe(this);
  {
    std::lock_guard lock(stripe.mutex);
    callbacks.swap(on_complete);
  }
  stripe.cv.notify_all();
  for (auto& callback : callbacks) callback();
}

Communicator::Impl::Impl(std::unique_ptr<transport::Transport> t,
                         std::shared_ptr<bootstrap::Store> s, const Options& given,
                         const coll::CostModel* inherited, bool split)
    : store(std::move(s)), transport(std::move(t)), options(given) {
  timeout_seconds = options.timeout
                        ? bootstrap::checked_timeout(options.timeout->count(), "Options::timeout")
                        : bootstrap::timeout_seconds();
  if (!(timeout_seconds > 0))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("timeout {} s: must be positive", timeout_seconds));
  options.timeout = std::chrono::duration<double>(timeout_seconds);
  if (!is_valid(options.algorithm))
    throw Error(ErrorCode::invalid_argument, "Options::algorithm is not an Algorithm");
  if (options.algorithm != Algorithm::automatic)
    communicator_choice[0] = std::string(to_string(options.algorithm));
  const AlgorithmNames per_collective =
      parse_algorithm_names(options.algorithms, "Options::algorithms");
  for (std::size_t k = 0; k < per_collective.size(); ++k)
    if (!per_collective[k].empty()) communicator_choice[k] = per_collective[k];
  forced_by_env = parse_algorithm_names(config::get(config::Variable::algo).value_or(""),
                                        config::name(config::Variable::algo));
  coll::Tuning tuning;
  if (const auto path = config::get(config::Variable::tuning_file)) tuning = coll::read_tuning(*path);
  check_calls = switch_from_env(config::Variable::check, true);
  const shm::Allgather allgather =
      setup_allgather(*transport, timeout_seconds, &abort_requested, &scratch);
  check_settings_agree(transport->rank(), transport->size(), host_segment_wanted(), check_calls,
                       allgather);
  topology = coll::discover_topology(transport->rank(), transport->size(), allgather,
                                     config::get(config::Variable::topology));
  host = attach_host_segment(*transport, *topology, allgather);
  own_host = attach_own_host_segment(*transport, *topology, timeout_seconds, &abort_requested,
                                     allgather);
  // Threads share the log; a split communicator's rank is not the process's.
  if (transport->name() != "local" && !split) log::set_rank(transport->rank());

  // No rank probes when every rank has a model already (probed before in
  // this process, or its tuning file's); otherwise every rank probes, also
  // one with a tuning file, so that the ranks without one still meet. A
  // tuning file's model then replaces the probe's.
  coll::CostModel model;
  if (inherited) {
    model = *inherited;
    cost_model_source = "parent communicator";
  } else {
    // Where the host segment takes every automatic AllReduce (the other
    // collectives choose by size alone), the variants' times would decide
    // only among a forced family's variants ("direct"), where the formulas
    // with the measured constants do. Timing them took 0.35 s at p = 2 and
    // 1-2.6 s at p = 3-4 on two cores.
    const bool time_variants =
        !host || !coll::host_segment_takes_every_allreduce(host->slot_bytes(), transport->size());
    const std::string key = fmt::format("{}|{}|{}|{}|{}", transport->name(), topology->describe(),
                                        host ? 1 : 0, check_calls ? 1 : 0, time_variants ? 1 : 0);
    if (auto agreed = model_every_rank_has(key, transport->size(), tuning.model, allgather)) {
      std::tie(model, cost_model_source) = std::move(*agreed);
    } else {
      coll::Collective probe{*transport, 0, transport::deadline_after(timeout_seconds), nullptr,
                             &abort_requested, &scratch};
      probe.topology = &*topology;  // the levels of hosts are measured too
      const auto start = transport::Clock::now();
      model = coll::probe_cost_model(probe, check_calls, time_variants);
      cost_model_source = fmt::format(
          "probe, {:.0f} ms{}",
          std::chrono::duration<double, std::milli>(transport::Clock::now() - start).count(),
          time_variants ? "" : ", variants untimed: the host segment takes every AllReduce");
      auto& models = probed_models();
      std::lock_guard lock(models.mutex);
      models.by_key.emplace(key, model);
    }
  }
  if (tuning.model) {
    model = *tuning.model;
    cost_model_source = "tuning file; " + cost_model_source;
  }
  const std::string& allreduce_forced = forced_by_env[0].empty() ? communicator_choice[0] : forced_by_env[0];
  log::info("communicator: rank {} of {} over {}, {}; cost model ({}): alpha {:.2f} us, overhead "
            "{:.2f} us, beta {:.3f} GB/s, gamma {:.3f} GB/s; allreduce algorithm {}{}",
            transport->rank(), transport->size(), transport->name(), topology->describe(),
            cost_model_source,
            us(model.alpha),
            us(model.overhead), model.beta > 0 ? 1e-9 / model.beta : 0.0,
            model.gamma > 0 ? 1e-9 / model.gamma : 0.0,
            allreduce_forced.empty() ? "auto" : allreduce_forced,
            forced_by_env[0].empty() ? "" : " (CHORUS_ALGO)");
  if (model.across_hosts.measured())
    log::info("communicator: levels of hosts: within a host alpha {:.2f} us, beta {:.3f} GB/s; "
              "across hosts (every local rank at once) alpha {:.2f} us, beta {:.3f} GB/s per rank",
              us(model.within_host.alpha),
              model.within_host.beta > 0 ? 1e-9 / model.within_host.beta : 0.0,
              us(model.across_hosts.alpha),
              model.across_hosts.beta > 0 ? 1e-9 / model.across_hosts.beta : 0.0);
  selector = std::make_unique<coll::Selector>(model, std::move(tuning));
}

Communicator::Impl::~Impl() {
  queue_access->close();  // no waiter runs a call from here on
  {
    std::lock_guard lock(queue_mutex);
    stopping = true;
  }
  queue_cv.notify_all();
  drained_cv.notify_all();
  if (worker.joinable()) worker.join();  // runs what is queued first
}

coll::AlgorithmChoice Communicator::Impl::choose(coll::CollectiveKind kind,
                                                 std::string_view requested,
                                                 std::size_t bytes) const {
  const auto k = static_cast<std::size_t>(kind);
  std::string_view name = forced_by_env[k];
  if (name.empty() && !requested.empty() && requested != "auto") name = requested;
  if (name.empty()) name = communicator_choice[k];
  return coll::choose_algorithm(kind, name, bytes, transport->size(), *selector,
                                host ? std::optional(host->slot_bytes()) : std::nullopt,
                                &*topology,
                                own_host ? std::optional(own_host->slot_bytes()) : std::nullopt);
}

core::Call Communicator::Impl::make_call(coll::CollectiveKind kind, const core::CallArgs& args,
                                         const CallOptions& options) {
  if (!is_valid(options.algorithm))
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: algorithm {} is not a chorus::Algorithm", coll::to_string(kind),
                            static_cast<int>(options.algorithm)));
  if (options.algorithm != Algorithm::automatic && kind != coll::CollectiveKind::allreduce)
    throw Error(ErrorCode::invalid_argument,
                fmt::format("{}: CallOptions::algorithm = {} names an AllReduce algorithm; other "
                            "collectives take CallOptions::algorithm_name",
                            coll::to_string(kind), to_string(options.algorithm)));
  core::Call call;
  call.kind = kind;
  call.deferred = options.deferred;
  core::check_arguments(kind, args, transport->rank(), transport->size(), call);
  const std::string_view requested = !options.algorithm_name.empty() ? options.algorithm_name
                                     : options.algorithm != Algorithm::automatic
                                         ? to_string(options.algorithm)
                                         : std::string_view{};
  const std::size_t bytes = coll::choice_bytes(kind, call.operands, transport->size());
  // The automatic choice is a function of the size alone (the selector and
  // the segments are fixed at creation): the last one is remembered per
  // collective, so that a loop of equal calls does not choose again.
  const bool automatic = requested.empty() || requested == "auto";
  const bool logging = log::enabled(log::Level::info);
  auto& memo = last_automatic_choice[static_cast<std::size_t>(kind)];
  if (automatic && !logging && bytes < kChoiceMemoBytesLimit) {
    const std::uint64_t seen = memo.load(std::memory_order_relaxed);
    if (seen != 0 && seen >> 8 == bytes) {
      call.algorithm = &coll::registry()[seen & 0xFF];
      call.signature.algorithm = call.algorithm->id;
      return call;
    }
  }
  const coll::AlgorithmChoice choice = choose(kind, requested, bytes);
  call.algorithm = choice.row;
  call.signature.algorithm = choice.row->id;
  if (automatic && bytes < kChoiceMemoBytesLimit)
    memo.store(bytes << 8 | choice.row->id, std::memory_order_relaxed);
  if (logging) log_choice(call, choice);
  return call;
}

void Communicator::Impl::log_choice(const core::Call& call, const coll::AlgorithmChoice& choice) {
  const int p = transport->size();
  const std::size_t bytes = coll::choice_bytes(call.kind, call.operands, p);
  const int size_class = static_cast<int>(std::bit_width(bytes));
  std::lock_guard lock(log_mutex);
  if (!logged_choices.emplace(static_cast<int>(call.kind), size_class, choice.row->id).second)
    return;
  // A hierarchical row: what each level of hosts costs it (the larger is
  // what the call waits for); AllReduce: the model's price of each row.
  std::string prices;
  const auto levels = choice.row->across_hosts
                          ? coll::hierarchical_levels(call.kind, selector->model(), *topology, bytes)
                          : std::nullopt;
  if (levels)
    prices = fmt::format(", predicted {:.1f} us within the hosts and {:.1f} us across them: {}",
                         us(levels->within_host), us(levels->across_hosts),
                         levels->across_hosts >= levels->within_host
                             ? "the host links dominate"
                             : "the hosts' own exchanges dominate");
  if (call.kind == coll::CollectiveKind::allreduce) {
    if (choice.predicted_seconds > 0)  // (the rows chosen before the model have no price)
      prices = fmt::format(", predicted {:.1f} us", us(choice.predicted_seconds));
    prices += " (others, us:";
    for (const coll::AlgorithmRow& row : coll::rows_of(coll::CollectiveKind::allreduce))
      if (&row != choice.row && row.cost != nullptr)
        prices += fmt::format(" {} {:.1f}", row.name,
                              us(coll::predicted_seconds(static_cast<coll::Variant>(row.id),
                                                         selector->model(), bytes, p)));
    prices += ")";
  }
  log::info("{} of {} bytes on {} ranks (size class {}): {} by {}{}", coll::to_string(call.kind),
            bytes, p, size_class, choice.row->name, choice.reason, prices);
}

std::string Communicator::Impl::describe(const core::Call& call) const {
  return fmt::format("rank {}: call #{}, {},", transport->rank(), call.sequence,
                     coll::describe(call.signature, coll::algorithm_name(call.signature.algorithm)));
}

Error Communicator::Impl::poisoned_error() const {
  std::lock_guard lock(error_mutex);
  return Error(first_error->code(), "the communicator is unusable after an earlier error: " +
                                        std::string(first_error->what()));
}

std::optional<Error> Communicator::Impl::error() const {
  std::lock_guard lock(error_mutex);
  return first_error;
}

void Communicator::Impl::Count::add(std::uint64_t call_bytes, std::uint64_t call_ticks) noexcept {
  // One writer at a time (run_mutex): plain loads and stores, no locked
  // instructions; atomics so that counters() may read meanwhile.
  auto bump = [](std::atomic<std::uint64_t>& a, std::uint64_t by) {
    a.store(a.load(std::memory_order_relaxed) + by, std::memory_order_relaxed);
  };
  bump(calls, 1);
  bump(bytes, call_bytes);
  bump(ticks, call_ticks);
}

Counters::Entry Communicator::Impl::Count::read(const TickClock& clock) const noexcept {
  return {calls.load(std::memory_order_relaxed), bytes.load(std::memory_order_relaxed),
          clock.seconds(ticks.load(std::memory_order_relaxed))};
}

Counters Communicator::Impl::counters() const {
  Counters c;
  c.total = total_count.read(call_clock);
  for (std::size_t a = 0; a < c.by_algorithm.size(); ++a)
    c.by_algorithm[a] = count_by_algorithm[a].read(call_clock);
  return c;
}

[[noreturn]] void Communicator::Impl::fail_call(const core::Call& call, const std::exception& e) {
  const auto* error = dynamic_cast<const Error*>(&e);
  const ErrorCode code = error ? error->code() : ErrorCode::internal;
  // Across hosts, which rank lives where: the error names peers by rank.
  const std::string hosts =
      topology->hosts() > 1 ? fmt::format(" [{}]", topology->describe()) : std::string();
  Error failure(code, fmt::format("{} failed: {}{}", describe(call), e.what(), hosts));
  {
    std::lock_guard lock(error_mutex);
    if (!first_error) first_error = failure;
    poisoned.store(true);
  }
  log::warn("{}", failure.what());
  if (host) host->announce_abort(failure.what());
  if (own_host) own_host->announce_abort(failure.what());
  transport->abort(failure.what());  // again is harmless; ends what a bare throw left
  throw failure;
}

// Out of line: the checks' storage is set up only by the calls that need
// it (a host segment's small call does not; zeroing it cost 10 ns a call).
[[gnu::noinline]] void Communicator::Impl::run_checked(coll::Collective& c, const core::Call& call) {
  // Declared outside the try: a posted receive must not outlive its
  // buffer, and fail_call() aborts the transport before they go.
  std::optional<coll::MessageCallCheck> message_check;
  std::optional<coll::HostCallCheck> host_check;
  coll::CallCheck* check = nullptr;
  try {
    // With a host segment the check goes through it; else by messages (but
    // across hosts, hierarchical_shm carries it in its own exchange).
    if (host) {
      if (check_calls) check = &host_check.emplace(c, call.signature, coll::algorithm_name);
      else coll::announce_call(c);
    } else if (check_calls && call.algorithm->own_host_need == nullptr) {
      check = &message_check.emplace(c, call.signature, coll::algorithm_name);
    }
    // Across hosts every call marks its slot in its host's segment (what
    // lets a slot be reused, and shows a host's ranks what each called).
    if (own_host && call.algorithm->own_host_need == nullptr) coll::announce_call(coll::on_own_host(c));
    c.check = check;
    call.algorithm->run(c, call.operands);
    if (check) {
      try {
        check->finish(c.deadline);
      } catch (const Error& e) {
        c.fail(e);
      }
    }
  } catch (const std::exception& e) {
    fail_call(call, e);
  }
}

void Communicator::Impl::run(core::Call& call) {
  // A parked call run first is finished after the lock is released (its
  // callbacks may make calls), whatever this call's outcome.
  std::optional<HandedOff> earlier;
  struct FinishEarlier {
    std::optional<HandedOff>& handed;
    ~FinishEarlier() {
      if (handed) handed->finish();
    }
  } finish_earlier{earlier};
  std::lock_guard run_lock(run_mutex);
  earlier = run_handed_off();
  run_locked(call);
}

std::optional<Communicator::Impl::HandedOff> Communicator::Impl::run_handed_off() {
  Work::State* parked = handoff.load(std::memory_order_acquire);
  // Emptied meanwhile only by abort() (every other taker holds run_mutex).
  if (parked == nullptr ||
      !handoff.compare_exchange_strong(parked, nullptr, std::memory_order_acq_rel))
    return std::nullopt;
  HandedOff handed{std::move(parked->parked_self), std::nullopt};
  core::Call call = std::move(*parked->parked_call);
  parked->parked_call.reset();
  try {
    run_locked(call);
  } catch (const Error& e) {
    handed.error = e;
  } catch (const std::exception& e) {
    handed.error = Error(ErrorCode::internal, e.what());
  }
  return handed;
}

bool Communicator::Impl::handoff_due() const {
  return handoff.load(std::memory_order_acquire) != nullptr &&
         (handoff_expedited.load(std::memory_order_relaxed) ||
          time_since(handoff_since.load(std::memory_order_relaxed)) >= kDeferredGrace);
}

bool Communicator::Impl::park(const std::shared_ptr<Work::State>& state, core::Call& call,
                              std::uint64_t now) {
  // Nothing queued and nothing running queued calls (read in this order:
  // the worker sets worker_busy before `queued` drops), so that no older
  // call is left to run after it; the worker started (it takes the call
  // if nobody waits for it); the slot empty.
  if (!worker_started.load(std::memory_order_acquire) ||
      queued.load(std::memory_order_acquire) != 0 || worker_busy.load(std::memory_order_acquire) ||
      handoff.load(std::memory_order_relaxed) != nullptr)
    return false;
  state->parked_call.emplace(std::move(call));
  state->parked_self = state;
  // Before the slot is claimed: another thread racing to park may
  // overwrite them with its own, microseconds apart; the worker reads them
  // only to decide when to take the call.
  handoff_since.store(now, std::memory_order_relaxed);
  handoff_expedited.store(false, std::memory_order_relaxed);
  Work::State* empty = nullptr;
  if (!handoff.compare_exchange_strong(empty, state.get(), std::memory_order_seq_cst)) {
    call = std::move(*state->parked_call);
    state->parked_call.reset();
    state->parked_self.reset();
    return false;
  }
  // A worker asleep until notified would not look at the slot: wake it
  // (Dekker with its worker_sleeps; the lock makes the notify come after it
  // sleeps, not between its look and its sleep). Once: the later parks
  // before it runs again (ranks on every core) need not.
  if (worker_sleeps.load(std::memory_order_seq_cst) &&
      worker_sleeps.exchange(false, std::memory_order_seq_cst)) {
    { std::lock_guard queue_lock(queue_mutex); }
    deferred_wakes.fetch_add(1, std::memory_order_relaxed);
    queue_cv.notify_all();
  }
  return true;
}

void Communicator::Impl::run_locked(core::Call& call) {
  if (poisoned.load()) throw poisoned_error();
  // Numbered as they run, so that the numbers follow the order in which the
  // ranks' segments and transports see the calls.
  call.sequence = next_sequence++;
  // Two clocks cheaper than steady_clock's (common/tick_clock.hpp): a small
  // call's own work is about 100 ns, and steady_clock costs 30 ns a read here.
  const std::uint64_t start_ticks = call_clock.now();
  const auto deadline =
      coarse_steady_now() + std::chrono::duration_cast<transport::Clock::duration>(
                                std::chrono::duration<double>(timeout_seconds));
  coll::Collective c{*transport, call.sequence, deadline,  nullptr,
                     &abort_requested, &scratch,  host.get(), own_host.get(),
                     check_calls ? &call.signature : nullptr, &*topology};
  // A host segment's row carries the call check in its own exchange.
  if (host && call.algorithm->host_slot_need != nullptr) {
    try {
      call.algorithm->run(c, call.operands);
    } catch (const std::exception& e) {
      fail_call(call, e);
    }
  } else {
    run_checked(c, call);
  }
  const std::uint64_t end_ticks = call_clock.now();
  const std::uint64_t ticks = end_ticks > start_ticks ? end_ticks - start_ticks : 0;  // another core's counter may lag
  const std::uint64_t bytes = call.operands.count * size_of(call.operands.type);
  total_count.add(bytes, ticks);
  if (call.kind == coll::CollectiveKind::allreduce)
    count_by_algorithm[static_cast<std::size_t>(
                           call.algorithm->host_slot_need != nullptr ? Algorithm::shared_memory
                           : call.algorithm->across_hosts || call.algorithm->own_host_need != nullptr
                               ? Algorithm::hierarchical
                               : coll::family(static_cast<coll::Variant>(call.algorithm->id)))]
        .add(bytes, ticks);
}

void Communicator::Impl::submit(core::Call call) {
  if (poisoned.load()) throw poisoned_error();
  // This thread's earlier async calls run first. (Another thread's may be
  // queued meanwhile and run before this one: calls from several threads
  // are serialized, in an order that is theirs to race for.) `queued` is
  // read before `worker_busy`, which the worker sets before `queued` drops.
  if (queued.load() != 0 || worker_busy.load()) {
    std::unique_lock queue_lock(queue_mutex);
    drained_cv.wait(queue_lock, [&] { return queue.empty() && !worker_busy.load(); });
  }
  run(call);
}

Work Communicator::Impl::submit_async(core::Call call) {
  auto state = std::make_shared<Work::State>();
  bool wake = true;
  if (poisoned.load()) {
    state->finish(poisoned_error());
    return Work(state);
  }
  state->queue_access = queue_access;
  const bool deferred = call.deferred;
  const std::uint64_t now = deferred ? call_clock.now() : 0;
  if (deferred) {
    state->deferred_since = now;
    state->deferred.store(true, std::memory_order_relaxed);
  }
  // The v-forms' layouts of its own (another thread may end this call): the
  // calling thread's borrowed ones go back to it now (coll::VFormLayoutsPtr).
  call.operands.layouts = coll::own_copy(call.operands.layouts);
  if (deferred && park(state, call, now)) return Work(std::move(state));
  {
    std::lock_guard queue_lock(queue_mutex);
    start_worker();
    queue.emplace_back(std::move(call), state);
    queued.store(queue.size(), std::memory_order_release);
    if (deferred) last_deferred = now;
    ++submitted;
    // A worker that looks at the deferred calls anyway need not be woken,
    // nor one woken already.
    wake = (!deferred || !worker_polls) && !worker_notified;
    if (wake) worker_notified = true;
  }
  if (wake) {
    if (deferred) deferred_wakes.fetch_add(1, std::memory_order_relaxed);
    queue_cv.notify_all();
  }
  return Work(std::move(state));
}

bool QueueAccess::enter() {
  if ((users.fetch_add(1, std::memory_order_acquire) & kClosed) == 0) return true;
  leave();
  return false;
}

bool QueueAccess::run_if_next(const Work::State* target, double timeout_seconds,
                              const std::function<void()>* progress) {
  if (!enter()) return false;
  bool ran = false;
  try {
    ran = engine->run_queued_next(target, timeout_seconds, progress);
  } catch (...) {  // run_front() keeps a call's errors in its state; this is a lock failing
  }
  leave();
  return ran;
}

void QueueAccess::close() {
  users.fetch_or(kClosed, std::memory_order_acq_rel);
  // Rare (the engine's destructor), and a thread inside may be running a
  // call: polled, so that entering and leaving need not signal.
  while ((users.load(std::memory_order_acquire) & ~kClosed) != 0)
    std::this_thread::sleep_for(std::chrono::microseconds(200));
}

void QueueAccess::expedite(Work::State* target) {
  if (!target->deferred.exchange(false)) return;  // started already, or never deferred
  if (!enter()) return;
  try {
    engine->expedite(target);
  } catch (...) {  // a lock failing: the worker starts it at its time anyway
  }
  leave();
}

void Communicator::Impl::expedite(Work::State* target) {
  if (handoff.load(std::memory_order_acquire) == target) {
    handoff_expedited.store(true, std::memory_order_relaxed);
    { std::lock_guard lock(queue_mutex); }  // a worker between its look and its wait
    queue_cv.notify_all();
    return;
  }
  {
    // The calls before it run first: they start now too. (Not queued any
    // more: it runs or ran, and nothing waits for it.)
    std::lock_guard lock(queue_mutex);
    const auto it = std::find_if(queue.begin(), queue.end(),
                                 [&](const auto& entry) { return entry.second.get() == target; });
    if (it == queue.end()) return;
    for (auto at = queue.begin(); at != std::next(it); ++at) {
      at->second->deferred_since = 0;
      at->second->deferred.store(false, std::memory_order_relaxed);
    }
  }
  queue_cv.notify_all();
}

bool Communicator::Impl::run_queued_next(const Work::State* target, double wait_seconds,
                                         const std::function<void()>* progress) {
  // The call runs to its end or its deadline (the communicator's timeout):
  // a wait that must return sooner leaves it to the worker, unless what it
  // must do meanwhile is a hook that the call's own waits can run.
  if (progress == nullptr && wait_seconds < timeout_seconds) return false;
  if (handoff.load(std::memory_order_acquire) == target) {
    // Parked: run here, unless a call runs now (then the worker takes it
    // once expedited, and this thread waits on its state).
    std::optional<HandedOff> handed;
    {
      std::unique_lock run_lock(run_mutex, std::try_to_lock);
      if (!run_lock.owns_lock()) return false;
      std::optional<ScopedWaitHook> hook;
      if (progress != nullptr) hook.emplace(*progress);
      handed = run_handed_off();
    }
    if (handed) handed->finish();
    return true;
  }
  std::unique_lock lock(queue_mutex);
  if (worker_busy.load() || stopping || queue.empty() || queue.front().second.get() != target)
    return false;
  std::optional<ScopedWaitHook> hook;
  if (progress != nullptr) hook.emplace(*progress);
  run_front(lock);  // the worker leaves the queue alone meanwhile
  const bool more = !queue.empty();
  lock.unlock();
  drained_cv.notify_all();  // a blocking call waiting for the queue
  if (more) queue_cv.notify_all();  // the worker, for what is queued behind it
  return true;
}

void Communicator::Impl::run_front(std::unique_lock<std::mutex>& lock) {
  // Set before `queued` drops (released by its store): submit() reads the
  // two without the lock. Stores without a locked instruction, as in
  // submit_async(): the mutex orders them for the rest.
  worker_busy.store(true, std::memory_order_relaxed);
  auto [call, state] = std::move(queue.front());
  queue.pop_front();
  queued.store(queue.size(), std::memory_order_release);
  lock.unlock();
  std::optional<Error> error;
  try {
    run(call);
  } catch (const Error& e) {
    error = e;
  } catch (const std::exception& e) {
    error = Error(ErrorCode::internal, e.what());
  }
  state->finish(std::move(error));
  lock.lock();
  worker_busy.store(false, std::memory_order_release);
}

std::chrono::duration<double> Communicator::Impl::time_since(std::uint64_t ticks) const {
  const std::uint64_t now = call_clock.now();
  // Another core's counter may lag: no time has passed then.
  return std::chrono::duration<double>(now > ticks ? call_clock.seconds_roughly(now - ticks) : 0.0);
}

void Communicator::Impl::start_worker() {
  if (!worker.joinable()) {
    worker = std::thread([this] { worker_loop(); });
    worker_started.store(true, std::memory_order_release);
  }
}

void Communicator::Impl::worker_loop() {
  // While point-to-point messages are pending, the worker also polls them
  // between calls (every kPointToPointPoll); otherwise it sleeps until a
  // call is queued.
  constexpr auto kPointToPointPoll = std::chrono::microseconds(50);
  std::unique_lock lock(queue_mutex);
  for (;;) {
    // A waiter running its queued call itself (run_queued_next()) holds
    // worker_busy; the worker takes none meanwhile, nor a deferred call
    // before its time (stopping runs it at once).
    const auto front_due = [&] {
      const std::uint64_t since = queue.front().second->deferred_since;
      return since == 0 || time_since(since) >= kDeferredGrace;
    };
    const auto ready = [&] {
      return stopping || handoff_due() || (!queue.empty() && !worker_busy.load() && front_due());
    };
    if (!ready() && point_to_point_pending.load() == 0) {
      // Spin briefly first (yielding): a framework that posts the next call
      // right after the last one ended (DDP's buckets, a sync call made
      // async) then finds the worker awake; a sleep and wake-up costs
      // several microseconds, more than a small collective. A deferred
      // call submitted meanwhile need not wake it: the spin sees `queued`.
      worker_polls = true;
      lock.unlock();
      const auto spin_end = transport::Clock::now() + transport::spin_before_sleep();
      while (queued.load() == 0 && handoff.load(std::memory_order_relaxed) == nullptr &&
             transport::Clock::now() < spin_end)
        std::this_thread::yield();
      lock.lock();
      worker_polls = false;
    }
    // Every wait ends at a submit it is notified of, or at what it waits
    // for; the loop then looks again.
    const std::uint64_t submitted_before = submitted;
    const auto woken = [&] {
      return ready() || point_to_point_pending.load() > 0 || submitted != submitted_before;
    };
    worker_notified = false;
    if (point_to_point_pending.load() > 0) {
      queue_cv.wait_for(lock, kPointToPointPoll,
                        [&] { return ready() || submitted != submitted_before; });
    } else if (handoff.load(std::memory_order_acquire) != nullptr) {
      worker_polls = true;  // a parked call's time: its waiter may run it first
      const auto left =
          kDeferredGrace - time_since(handoff_since.load(std::memory_order_relaxed));
      queue_cv.wait_for(lock, left, woken);
      worker_polls = false;
    } else if (!queue.empty() && !worker_busy.load() && !front_due()) {
      worker_polls = true;  // a deferred call's time: its waiter may run it first
      // Read now: the waiter may run the call and free its state meanwhile.
      const auto left = kDeferredGrace - time_since(queue.front().second->deferred_since);
      queue_cv.wait_for(lock, left, woken);
      worker_polls = false;
    } else if (const std::uint64_t latest =
                   std::max(last_deferred, handoff_since.load(std::memory_order_relaxed));
               (queue.empty() || worker_busy.load()) && latest != 0 &&
               time_since(latest) < kDeferredRecent) {
      // Nothing to take now (a waiter may be running queued calls): a look
      // every kDeferredPoll, so that deferred calls need not wake it.
      worker_polls = true;
      queue_cv.wait_for(lock, kDeferredPoll, woken);
      worker_polls = false;
    } else {
      // Until a call it may take, or a submit: then it looks again, and
      // waits for a deferred call's time as above, where submits need not
      // wake it. (Woken only by a call it could take, an idle worker stayed
      // here through a run of deferred calls that their waiters took first,
      // and every submit woke it in vain: 2.0-3.8 us a call instead of 0.9,
      // 8-byte nonblocking calls through libchorus_pmpi after 100 ms
      // without any.) A call parked meanwhile wakes it (park()), also one
      // that its waiter took before the worker looked: then it polls as
      // above while such calls keep coming.
      const std::uint64_t parked_before = handoff_since.load(std::memory_order_relaxed);
      worker_sleeps.store(true, std::memory_order_seq_cst);
      queue_cv.wait(lock, [&] {
        return woken() || handoff.load(std::memory_order_seq_cst) != nullptr ||
               handoff_since.load(std::memory_order_relaxed) != parked_before;
      });
      worker_sleeps.store(false, std::memory_order_relaxed);
    }
    if (stopping ? handoff.load(std::memory_order_acquire) != nullptr : handoff_due()) {
      lock.unlock();
      std::optional<HandedOff> handed;
      {
        std::lock_guard run_lock(run_mutex);
        handed = run_handed_off();
      }
      if (handed) handed->finish();
      lock.lock();
      continue;
    }
    if (queue.empty() || worker_busy.load() || (!stopping && !front_due())) {
      if (point_to_point_pending.load() > 0) {
        const bool ending = stopping;
        lock.unlock();
        EndedWork ended;
        {
          std::lock_guard run_lock(run_mutex);
          progress_point_to_point(ending, ended);
        }
        for (auto& [state, error] : ended) state->finish(std::move(error));
        lock.lock();
        continue;
      }
      if (stopping) return;  // everything queued has run
      continue;
    }
    run_front(lock);
    drained_cv.notify_all();  // a blocking call waiting for the queue
  }
}

void Communicator::Impl::abort(const std::string& reason) {
  const Error aborted(ErrorCode::aborted, fmt::format("rank {}: the communicator was aborted: {}",
                                                      transport->rank(), reason));
  {
    std::lock_guard lock(error_mutex);
    if (!first_error) first_error = aborted;
    poisoned.store(true);
  }
  abort_requested.store(true);
  if (host) host->announce_abort(aborted.what());  // wakes a call sleeping on the segment
  if (own_host) own_host->announce_abort(aborted.what());
  // A running call sees abort_requested within one wake-up (<= 100 ms) and
  // aborts the transport itself; otherwise it is done here.
  if (std::unique_lock run_lock(run_mutex, std::try_to_lock); run_lock.owns_lock())
    transport->abort(reason);
  std::deque<std::pair<core::Call, std::shared_ptr<Work::State>>> dropped;
  {
    std::lock_guard lock(queue_mutex);
    dropped.swap(queue);
    queued.store(0);
  }
  if (Work::State* parked = handoff.exchange(nullptr, std::memory_order_acq_rel)) {
    std::shared_ptr<Work::State> state = std::move(parked->parked_self);
    state->parked_call.reset();
    state->finish(aborted);
  }
  for (auto& [call, state] : dropped) state->finish(aborted);
  queue_cv.notify_all();
  drained_cv.notify_all();
}

Communicator make_communicator(std::unique_ptr<transport::Transport> transport,
                               std::shared_ptr<bootstrap::Store> store, const Options& options) {
  return CommunicatorAccess::make(
      std::make_unique<Communicator::Impl>(std::move(transport), std::move(store), options));
}

}  // namespace chorus

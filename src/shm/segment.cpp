#include "shm/segment.hpp"

#include "common/host.hpp"
#include "common/logging.hpp"
#include "common/wait_hook.hpp"

#include <fmt/format.h>

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/membarrier.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

namespace chorus::shm {
namespace {

constexpr std::uint64_t kMagic = 0x43484f5255534831ull;  // "CHORUSH1"
constexpr std::uint32_t kVersion = 7;  // 2: ring entries and retired words; 3: second counts
                                       // consumption; 4: sleepers issue membarrier() (fenceless
                                       // publishes); 5: signature digests; 6: rings of 256 calls;
                                       // 7: entries of 512 bytes
constexpr std::string_view kPrefix = "chorus.";

std::size_t round_up(std::size_t n) { return (n + kCacheLine - 1) / kCacheLine * kCacheLine; }

struct Control {
  std::uint64_t magic;
  std::uint32_t version;
  std::int32_t size;
  std::uint64_t slot_bytes;
  std::uint64_t nonce;
  std::byte pad[kCacheLine - 32];
};
struct Wake {
  std::atomic<std::uint32_t> word;
  std::atomic<std::uint32_t> sleepers;
  std::byte pad[kCacheLine - 8];
};
struct AbortNotice {
  std::atomic<std::int32_t> claimed;        // the first announcer sets it, then writes
  std::atomic<std::int32_t> rank_plus_one;  // 0: nobody aborted; set once `reason` is written
  char reason[256 - 8];
};
struct RankRecord {
  std::int32_t pid;
  std::uint32_t pad0;
  std::uint64_t start_time;  // /proc/<pid>/stat field 22: tells a reused pid apart
  std::byte pad[kCacheLine - 16];
};
static_assert(sizeof(Control) == kCacheLine && sizeof(Wake) == kCacheLine &&
              sizeof(RankRecord) == kCacheLine);
static_assert(std::atomic<std::uint32_t>::is_always_lock_free &&
              std::atomic<std::uint64_t>::is_always_lock_free);

constexpr std::size_t kRecordsOffset = sizeof(Control) + sizeof(Wake) + sizeof(AbortNotice);

struct RetiredWord {
  std::atomic<std::uint64_t> call;  // see Segment::retired()
  std::byte pad[kCacheLine - 8];
};
static_assert(sizeof(RetiredWord) == kCacheLine && kEntryBytes % kCacheLine == 0);

std::size_t slot_stride(std::size_t slot_bytes) { return round_up(slot_bytes); }
std::size_t retired_offset(int size) {
  return kRecordsOffset + static_cast<std::size_t>(size) * kCacheLine;
}
std::size_t digests_offset(int size) {
  return retired_offset(size) + static_cast<std::size_t>(size) * kCacheLine;
}
std::size_t ring_offset(int size) {
  return digests_offset(size) + static_cast<std::size_t>(size) * kDigestStride;
}
std::size_t data_rings_offset(int size) {
  return ring_offset(size) + static_cast<std::size_t>(size) * kRingStride;
}
std::size_t slots_offset(int size) {
  return data_rings_offset(size) + static_cast<std::size_t>(size) * kDataRingStride;
}

// Faults in this process's mapping of the segment's first `bytes` (its
// rings: entries, digests, data rings, which every call touches) now
// rather than page by page in the first calls. On this machine (a virtual
// machine) a process's first access to a page costs about 5 us even once
// the kernel has mapped it (11-12 us before): the first pass through
// the rings paid it call by call, 8-byte AllReduce taking 49 us a call for
// its first 256 calls (the ring's depth) and 12-14 after at p = 4 (four
// ranks on two cores), 4.0 against 0.2 at p = 2 (docs/performance.md,
// twenty-sixth pass). MADV_POPULATE_WRITE (Linux 5.14) maps every page
// writable in one call, cheaper than a fault each; the reads then take
// what a first access still costs (and fault the pages in where the
// kernel refuses the advice). The large slots are left to their first
// use: at p = 4 their 16 MiB would cost every rank tens of milliseconds
// here, for calls whose own copies take as long.
void prefault(std::byte* base, std::size_t bytes) noexcept {
#ifdef MADV_POPULATE_WRITE
  static_cast<void>(::madvise(base, bytes, MADV_POPULATE_WRITE));
#endif
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  for (std::size_t at = 0; at < bytes; at += page)
    static_cast<void>(*reinterpret_cast<volatile const unsigned char*>(base + at));
}

// State (field 3) and start time (field 22) of a process; false when it is gone.
bool read_process(int pid, char& state, std::uint64_t& start_time) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string line;
  if (!std::getline(in, line)) return false;
  const std::size_t close = line.rfind(')');  // the command name may hold anything
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  const char* p = line.c_str() + close + 2;
  state = *p;
  for (int field = 3; field < 22 && *p != '\0'; ++p)
    if (*p == ' ') ++field;
  start_time = std::strtoull(p, nullptr, 10);
  return true;
}

long futex(std::atomic<std::uint32_t>& word, int op, std::uint32_t value,
           const struct timespec* timeout) {
  // Not FUTEX_PRIVATE_FLAG: the word is shared between processes.
  return ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), op, value, timeout,
                   nullptr, 0);
}

long membarrier(int command) { return ::syscall(SYS_membarrier, command, 0u, 0); }

// Whether this process may publish without a fence (Segment::fenceless_):
// the kernel has the expedited global membarrier and this process is
// registered for it, so that a sleeper's barrier reaches its CPU.
bool register_for_membarrier() {
  const long commands = membarrier(MEMBARRIER_CMD_QUERY);
  const long needed = MEMBARRIER_CMD_GLOBAL_EXPEDITED | MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED;
  return commands >= 0 && (commands & needed) == needed &&
         membarrier(MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED) == 0;
}

// The CPUs this process may run on: its affinity, or every online CPU
// where that cannot be read (a machine of more CPUs than cpu_set_t holds).
cpu_set_t own_cpus() {
  cpu_set_t set;
  if (::sched_getaffinity(0, sizeof set, &set) == 0) return set;
  CPU_ZERO(&set);
  const long online = std::clamp(::sysconf(_SC_NPROCESSORS_ONLN), 1L, long{CPU_SETSIZE});
  for (long cpu = 0; cpu < online; ++cpu) CPU_SET(static_cast<int>(cpu), &set);
  return set;
}

struct Identity {
  std::uint64_t host;
  std::uint64_t nonce;
  std::uint64_t slot_bytes;
  std::int32_t pid;
  std::int32_t fenceless;  // register_for_membarrier() succeeded
  cpu_set_t cpus;          // own_cpus()
};

}  // namespace

struct Segment::Layout {
  static Control& control(void* base) { return *static_cast<Control*>(base); }
  static Wake& wake(void* base) {
    return *reinterpret_cast<Wake*>(static_cast<std::byte*>(base) + sizeof(Control));
  }
  static AbortNotice& abort(void* base) {
    return *reinterpret_cast<AbortNotice*>(static_cast<std::byte*>(base) + sizeof(Control) +
                                           sizeof(Wake));
  }
  static RankRecord& record(void* base, int rank) {
    return *reinterpret_cast<RankRecord*>(static_cast<std::byte*>(base) + kRecordsOffset +
                                          static_cast<std::size_t>(rank) * kCacheLine);
  }
};

std::size_t segment_bytes(int size, std::size_t slot_bytes) noexcept {
  return slots_offset(size) + static_cast<std::size_t>(size) * 2 * slot_stride(slot_bytes);
}

int remove_stale_segments() {
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return 0;
  int removed = 0;
  while (const dirent* entry = ::readdir(dir)) {
    const std::string_view name = entry->d_name;
    if (!name.starts_with(kPrefix)) continue;
    const int pid = std::atoi(std::string(name.substr(kPrefix.size())).c_str());
    char state = 0;
    std::uint64_t start = 0;
    if (pid <= 0 || (read_process(pid, state, start) && state != 'Z' && state != 'X')) continue;
    if (::shm_unlink(("/" + std::string(name)).c_str()) == 0) {
      log::info("shm: removed {} (its creator, pid {}, is gone)", name, pid);
      ++removed;
    }
  }
  ::closedir(dir);
  return removed;
}

std::unique_ptr<Segment> Segment::attach(int rank, int size, std::size_t slot_bytes,
                                         const Allgather& allgather, std::vector<int> members) {
  const auto p = static_cast<std::size_t>(size);
  Identity mine{host::identity(), std::random_device{}() * 4294967296ull + std::random_device{}(),
                slot_bytes, static_cast<std::int32_t>(::getpid()), register_for_membarrier() ? 1 : 0,
                own_cpus()};
  const auto named = [&](std::size_t r) { return members.empty() ? static_cast<int>(r) : members[r]; };
  std::vector<Identity> all(p);
  allgather(&mine, sizeof mine, all.data());
  for (std::size_t r = 1; r < p; ++r)
    if (all[r].host != all[0].host) {
      log::info("shm: no host segment: rank {} is on another host than rank {}", named(r),
                named(0));
      return nullptr;
    }
  // Ranks may have been given different sizes (CHORUS_SHM_BYTES per rank):
  // all take the smallest, so that every rank agrees on the layout.
  for (const Identity& id : all) slot_bytes = std::min<std::size_t>(slot_bytes, id.slot_bytes);
  // Fenceless only if every rank is: a sleeper must be able to reach every publisher.
  const bool fenceless = std::all_of(all.begin(), all.end(), [](const Identity& id) { return id.fenceless == 1; });
  // Crowded: more ranks than the CPUs they may run on between them (the
  // union of their affinities). Not this rank's affinity alone: a launcher
  // that binds each rank to a core of its own (mpirun does at p <= 2)
  // leaves each one CPU, and its peer another.
  cpu_set_t cpus_of_all;
  CPU_ZERO(&cpus_of_all);
  for (const Identity& id : all) CPU_OR(&cpus_of_all, &cpus_of_all, &id.cpus);
  const int cpus = CPU_COUNT(&cpus_of_all);
  const bool crowded = size > cpus;
  const std::string name = fmt::format("/{}{}.{:016x}", kPrefix, all[0].pid, all[0].nonce);
  const std::size_t length = segment_bytes(size, slot_bytes);

  // Every rank reports 0 or an errno; all see the same list, so all decide alike.
  std::vector<std::int32_t> status(p);
  auto agree = [&](std::int32_t my_status, std::string_view step) {
    allgather(&my_status, sizeof my_status, status.data());
    for (std::size_t r = 0; r < p; ++r)
      if (status[r] != 0) {
        log::warn("shm: no host segment: rank {} could not {} {} ({} bytes): {}", named(r), step, name,
                  length, std::strerror(status[r]));
        return false;
      }
    return true;
  };

  void* base = MAP_FAILED;
  auto map = [&](int flags) -> std::int32_t {
    const int fd = ::shm_open(name.c_str(), flags, 0600);
    if (fd < 0) return errno;
    std::int32_t error = 0;
    struct stat st {};
    // Reserved now, not on first touch: a /dev/shm too small for it (a
    // container's 64 MB) is an error here, never a SIGBUS in a collective.
    if ((flags & O_CREAT) != 0) error = ::posix_fallocate(fd, 0, static_cast<off_t>(length));
    if (error == 0 && ::fstat(fd, &st) != 0) error = errno;
    if (error == 0 && static_cast<std::size_t>(st.st_size) != length) error = EBADF;
    if (error == 0) {
      base = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
      if (base == MAP_FAILED) error = errno;
    }
    ::close(fd);
    return error;
  };
  auto unmap = [&] {
    if (base != MAP_FAILED) ::munmap(base, length);
    base = MAP_FAILED;
  };

  std::int32_t created = 0;
  if (rank == 0) {
    remove_stale_segments();
    created = map(O_CREAT | O_EXCL | O_RDWR);
    if (created == 0) {
      Control& c = Layout::control(base);
      c.magic = kMagic;
      c.version = kVersion;
      c.size = size;
      c.slot_bytes = slot_bytes;
      c.nonce = all[0].nonce;
    }
  }
  if (!agree(created, "create")) {
    if (rank == 0 && created == 0) ::shm_unlink(name.c_str());
    unmap();
    return nullptr;
  }
  std::int32_t opened = 0;
  if (rank != 0) {
    opened = map(O_RDWR);
    if (opened == 0) {
      const Control& c = Layout::control(base);
      if (c.magic != kMagic || c.version != kVersion || c.size != size ||
          c.slot_bytes != slot_bytes || c.nonce != all[0].nonce)
        opened = EBADF;  // not the segment rank 0 announced
    }
  }
  if (opened == 0) {
    RankRecord& record = Layout::record(base, rank);
    char state = 0;
    record.pid = static_cast<std::int32_t>(::getpid());
    read_process(record.pid, state, record.start_time);
  }
  const bool everyone = agree(opened, "open");
  if (rank == 0) ::shm_unlink(name.c_str());  // mapped everywhere (or abandoned): the name goes
  if (!everyone) {
    unmap();
    return nullptr;
  }
  prefault(static_cast<std::byte*>(base), slots_offset(size));
  if (rank == 0)
    log::info("shm: host segment {} ({} bytes: {} ranks, slots of {} bytes; publishes {}; {} CPUs "
              "between them: waits {})",
              name, length, size, slot_bytes,
              fenceless ? "without a fence (membarrier)" : "fenced (no expedited membarrier)", cpus,
              crowded || !members.empty() ? "yield" : "spin");
  return std::unique_ptr<Segment>(new Segment(rank, size, slot_bytes, name, base, length,
                                              std::move(members), fenceless, crowded));
}

Segment::Segment(int rank, int size, std::size_t slot_bytes, std::string name, void* base,
                 std::size_t length, std::vector<int> members, bool fenceless, bool crowded)
    : rank_(rank), size_(size), slot_bytes_(slot_bytes), name_(std::move(name)), base_(base),
      length_(length),
      digests_(reinterpret_cast<std::atomic<std::uint64_t>*>(static_cast<std::byte*>(base) +
                                                             digests_offset(size))),
      ring_(static_cast<std::byte*>(base) + ring_offset(size)),
      data_rings_(static_cast<std::byte*>(base) + data_rings_offset(size)),
      slots_(static_cast<std::byte*>(base) + slots_offset(size)),
      slot_stride_(slot_stride(slot_bytes)),
      // A segment of one host's ranks within a larger communicator yields
      // too: its leader drives the transport meanwhile, and other "hosts"
      // may share these cores (namespaces, CHORUS_TOPOLOGY).
      oversubscribed_(crowded || !members.empty()), fenceless_(fenceless),
      members_(std::move(members)) {}

Segment::~Segment() { ::munmap(base_, length_); }

std::atomic<std::uint64_t>& Segment::retired_word(int rank) const noexcept {
  return reinterpret_cast<RetiredWord*>(static_cast<std::byte*>(base_) + retired_offset(size_))[rank].call;
}

std::string Segment::describe_writable_wait(int behind, std::uint64_t sequence, bool ring_full,
                                            std::uint64_t free_from) const {
  if (ring_full)
    return fmt::format("rank {} to finish with call #{} (before rank {}'s call #{} may reuse its "
                       "shared-memory ring entry; it compares its successor's call {} calls late)",
                       comm_rank(behind), sequence - kRingDepth, comm_rank(rank_), sequence,
                       kRingDepth);
  return fmt::format("rank {} to begin call #{} (before rank {}'s call #{} may reuse its "
                     "shared-memory slot)",
                     comm_rank(behind), free_from, comm_rank(rank_), sequence);
}

void Segment::publish(std::uint64_t sequence, std::uint64_t bytes) {
  SlotHeader& mine = header(rank_, sequence);
  // Below 2 GiB (a slot, or a stream's whole size), under the place bit.
  mine.size_and_place = (mine.size_and_place & SlotHeader::kInSlot) | static_cast<std::uint32_t>(bytes);
  store_and_wake(mine.sequence, sequence);
  // The next call's entry was last read a ring ago: taken back now, its
  // transfer overlaps the caller's work instead of holding up the next
  // call's stores (without it, even fenceless, 8-byte broadcast and reduce
  // at p = 2 took 1.6-2x as long: a rooted writer rewrites entries its
  // readers have just read). With its data lines, for a next call of the
  // same size. But not while a reader may still read it (a rooted writer a
  // ring ahead): taking the lines it is reading would stall the slower side.
  if (sequence + 1 <= kRingDepth || retired_floor_ >= sequence + 1 - kRingDepth)
    prefetch(rank_, sequence + 1, bytes, true);
  // The same for the next line of digests when the next call begins one:
  // always, as its readers read only digests of calls long begun
  // (retire_compared_calls() in coll/shared_memory.cpp). An 8-byte reduce at
  // p = 2 took 0.133 us without it, 0.117 with it (medians of 6 runs).
  if ((sequence + 1) % kDigestsPerLine == 0) prefetch_for_write(&digest_word(rank_, sequence + 1));
}

template <class T>
void Segment::store_and_wake(std::atomic<T>& word, T value) noexcept {
  std::atomic<std::uint32_t>& sleepers = Layout::wake(base_).sleepers;
  // The store and the load of `sleepers` must not pass each other, and a
  // sleeper's increment and its re-check of `word` neither (wait_slowly):
  // then either this load sees the sleeper, or the re-check sees the store.
  // So a publish writes nothing shared but its own word unless someone
  // sleeps. Fenced, both sides are seq_cst; but a seq_cst store waits for
  // its cache line, which a peer polling it has just taken (the exchange
  // alone, bench/micro/publish_bench.cpp: 425 ns a round against 264
  // fenceless). Fenceless, only the compiler is kept from reordering
  // the two; the sleeper's membarrier() makes every registered CPU fence
  // before its re-check, which orders them as a fence here would have.
  if (fenceless_) {
    word.store(value, std::memory_order_release);
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_relaxed) != 0) wake_all();
  } else {
    word.store(value, std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_seq_cst) != 0) wake_all();
  }
}

void Segment::stream(std::uint64_t sequence, std::size_t bytes) {
  store_and_wake(header(rank_, sequence).streamed, static_cast<std::uint32_t>(bytes));
}

void Segment::consume(std::uint64_t sequence, std::size_t bytes) {
  store_and_wake(tail(rank_, sequence).second, static_cast<std::uint64_t>(bytes));
}

void Segment::publish_second(std::uint64_t sequence) {
  store_and_wake(tail(rank_, sequence).second, sequence);
}

void Segment::wake_all() noexcept {
  Wake& w = Layout::wake(base_);
  w.word.fetch_add(1, std::memory_order_seq_cst);
  futex(w.word, FUTEX_WAKE, INT_MAX, nullptr);
}

void Segment::announce_abort(const std::string& reason) noexcept {
  AbortNotice& notice = Layout::abort(base_);
  // Only the first announcer (of any rank or thread) writes the reason, and
  // names itself after it: a reader that sees the rank sees the whole text.
  std::int32_t unclaimed = 0;
  if (notice.claimed.compare_exchange_strong(unclaimed, 1, std::memory_order_acq_rel)) {
    const std::size_t length = std::min(reason.size(), sizeof notice.reason - 1);
    std::memcpy(notice.reason, reason.data(), length);
    notice.reason[length] = '\0';
    notice.rank_plus_one.store(rank_ + 1, std::memory_order_release);
  }
  wake_all();
}

void Segment::throw_if_aborted() const {
  const AbortNotice& notice = Layout::abort(base_);
  const std::int32_t who = notice.rank_plus_one.load(std::memory_order_acquire);
  if (who == 0 || who == rank_ + 1) return;
  char text[sizeof notice.reason];
  std::memcpy(text, notice.reason, sizeof text);
  text[sizeof text - 1] = '\0';
  throw Error(ErrorCode::peer_failure, fmt::format("rank {} failed: {}", comm_rank(who - 1), text));
}

void Segment::check_alive() const {
  const int self = ::getpid();
  for (int r = 0; r < size_; ++r) {
    const RankRecord& record = Layout::record(base_, r);
    if (record.pid == self) continue;
    char state = 0;
    std::uint64_t start = 0;
    if (!read_process(record.pid, state, start) || state == 'Z' || state == 'X' ||
        start != record.start_time)
      throw Error(ErrorCode::peer_failure,
                  fmt::format("rank {} (pid {}) died: its process is gone", comm_rank(r),
                              record.pid));
  }
}

void Segment::wait_slowly(const std::function<bool()>& ready, transport::Deadline deadline,
                          const std::function<void()>& poll,
                          const std::function<std::string()>& what) {
  using namespace std::chrono;
  const auto start = transport::Clock::now();
  const auto spin_end = start + transport::spin_before_sleep();
  const std::function<void()>* hook = current_wait_hook();
  auto next_hook = start + kHookInterval;
  for (unsigned i = 1;; ++i) {
    if (ready()) return;
    if ((i & 15) == 0) {
      const auto now = transport::Clock::now();
      if (hook && now >= next_hook) {
        (*hook)();
        next_hook = now + kHookInterval;
      }
      if (now >= spin_end) break;
      // With more ranks than cores, the rank we wait for may need this core.
      if (oversubscribed_) std::this_thread::yield();
    }
    cpu_relax();
  }
  Wake& w = Layout::wake(base_);
  // Reading /proc costs microseconds: only a wait that has slept a while looks.
  auto next_liveness = transport::Clock::now() + milliseconds(100);
  for (;;) {
    if (ready()) return;
    throw_if_aborted();
    if (poll) poll();
    if (hook) (*hook)();
    const auto now = transport::Clock::now();
    if (now >= next_liveness) {
      check_alive();
      next_liveness = now + milliseconds(100);
    }
    if (now >= deadline)
      throw Error(ErrorCode::timeout,
                  fmt::format("rank {}: timed out after {:.1f} s waiting for {} (shared memory)",
                              comm_rank(rank_), duration<double>(now - start).count(), what()));
    const std::uint32_t seen = w.word.load(std::memory_order_seq_cst);
    w.sleepers.fetch_add(1, std::memory_order_seq_cst);
    // See store_and_wake(). Should the barrier fail, the 10 ms timeout
    // below still bounds what a missed wake-up costs.
    if (fenceless_ && membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED) != 0) {
      static std::atomic<bool> warned{false};
      if (!warned.exchange(true))
        log::warn("shm: membarrier failed ({}): wake-ups may come up to 10 ms late",
                  std::strerror(errno));
    }
    if (!ready()) {  // a publish after this re-check sees sleepers != 0, and bumps `word`
      const struct timespec ten_ms {0, 10'000'000};
      const struct timespec hooked {0, std::chrono::nanoseconds(kHookedSleep).count()};
      futex(w.word, FUTEX_WAIT, seen, hook ? &hooked : &ten_ms);
    }
    w.sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }
}

}  // namespace chorus::shm

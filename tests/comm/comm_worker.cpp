// One rank of a multi-process Communicator test: made from the environment
// (CHORUS_RANK/SIZE/STORE, CHORUS_TRANSPORT), it runs the scenario named by
// argv[1], checks its own results, prints what the harness needs, and exits
// 0 when its part passed.
#include <chorus/chorus.hpp>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

namespace {

using namespace chorus;
using namespace std::chrono_literals;

long long epoch_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void fail(const std::string& why) { throw std::runtime_error(why); }

constexpr Algorithm kForced[] = {Algorithm::ring, Algorithm::tree, Algorithm::direct,
                                 Algorithm::halving_doubling, Algorithm::recursive_doubling};

// Element i of rank r: exact under every op used below.
template <class T>
T value(int r, std::size_t i, ReduceOp op) {
  if (op == ReduceOp::prod) return static_cast<T>(((r + i) % 3 == 0) ? -1 : 1);
  return static_cast<T>((static_cast<std::size_t>(r) * 7 + i) % 11);
}
template <class T>
T expected(int p, std::size_t i, ReduceOp op) {
  T acc = value<T>(0, i, op);
  for (int r = 1; r < p; ++r) {
    const T v = value<T>(r, i, op);
    switch (op) {
      case ReduceOp::sum: acc = static_cast<T>(acc + v); break;
      case ReduceOp::prod: acc = static_cast<T>(acc * v); break;
      case ReduceOp::min: acc = std::min(acc, v); break;
      case ReduceOp::max: acc = std::max(acc, v); break;
      case ReduceOp::bxor:
        if constexpr (std::is_integral_v<T>) {
          acc = static_cast<T>(acc ^ v);
          break;
        }
        [[fallthrough]];
      default: fail("op not in this test");
    }
  }
  return acc;
}

template <class T>
void check_allreduce(Communicator& comm, std::size_t count, ReduceOp op, Algorithm a, bool in_place) {
  const int p = comm.size(), r = comm.rank();
  std::vector<T> send(count), recv(count);
  for (std::size_t i = 0; i < count; ++i) send[i] = value<T>(r, i, op);
  if (in_place) {
    comm.allreduce(std::span<T>(send), op, {a});
    recv = send;
  } else {
    comm.allreduce(std::span<const T>(send), std::span<T>(recv), op, {a});
  }
  for (std::size_t i = 0; i < count; ++i)
    if (recv[i] != expected<T>(p, i, op))
      fail("wrong element " + std::to_string(i) + " of " + std::to_string(count) + " with " +
           std::string(to_string(a)) + " " + std::string(to_string(datatype_of_v<T>)) + " " +
           std::string(to_string(op)));
}

void algorithms(Communicator& comm) {
  int k = 0;
  for (Algorithm a : {Algorithm::automatic, Algorithm::ring, Algorithm::tree, Algorithm::direct,
                      Algorithm::halving_doubling, Algorithm::recursive_doubling})
    for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{4099}, std::size_t{300001}}) {
      const bool in_place = ++k % 2 == 0;
      check_allreduce<float>(comm, count, ReduceOp::sum, a, in_place);
      check_allreduce<std::int64_t>(comm, count, ReduceOp::max, a, !in_place);
      check_allreduce<double>(comm, count, ReduceOp::prod, a, in_place);
      check_allreduce<std::uint8_t>(comm, count, ReduceOp::bxor, a, !in_place);
      check_allreduce<std::int32_t>(comm, count, ReduceOp::min, a, in_place);
    }
  std::printf("counters: %llu calls, %.3f s\n",
              static_cast<unsigned long long>(comm.counters().total.calls), comm.counters().total.seconds);
}

void async100(Communicator& comm) {
  const int p = comm.size();
  std::vector<std::vector<float>> buffers(100);
  std::vector<Work> work;
  for (int k = 0; k < 100; ++k) {
    buffers[k].assign(static_cast<std::size_t>(1 + (k * 7919) % 20000), static_cast<float>(comm.rank() + k));
    work.push_back(comm.allreduce_async(std::span<float>(buffers[k]), ReduceOp::sum, {kForced[k % 5]}));
  }
  for (int k = 0; k < 100; ++k) {
    if (!work[k].wait(60s)) fail("async call " + std::to_string(k) + " did not finish");
    const float want = static_cast<float>(p * k + p * (p - 1) / 2);
    for (float v : buffers[k])
      if (v != want) fail("async call " + std::to_string(k) + " wrong");
  }
}

// An AllReduce of `count` floats that must fail (the ranks called
// differently): prints the error; a success is this rank's failure.
void allreduce_must_fail(Communicator& comm, std::size_t count) {
  std::vector<float> v(count, 1.0f);
  try {
    comm.allreduce(std::span<float>(v), ReduceOp::sum);
  } catch (const Error& e) {
    std::printf("error (%s): %s\n", std::string(to_string(e.code())).c_str(), e.what());
    return;
  }
  fail("a mismatched allreduce succeeded");
}

// Rank 1 calls with another count: every rank must fail, none may succeed.
void mismatch(Communicator& comm) { allreduce_must_fail(comm, comm.rank() == 1 ? 2000 : 1000); }

// The last rank kills itself in the middle of a large allreduce; the others
// must fail within seconds, naming it.
// The last rank starts `collective` asynchronously and is killed while it
// runs; the others keep calling it and must fail naming the victim.
void die_during(Communicator& comm, const std::function<Work()>& async_call,
                const std::function<void()>& call) {
  const int victim = comm.size() - 1;
  for (int iteration = 0;; ++iteration) {
    if (comm.rank() == victim && iteration == 3) {
      Work w = async_call();
      std::this_thread::sleep_for(5ms);  // let the transfer start
      std::printf("dying_at_ms=%lld\n", epoch_ms());
      std::fflush(stdout);
      ::raise(SIGKILL);
    }
    try {
      call();
    } catch (const Error& e) {
      std::printf("failed_at_ms=%lld\nerror (%s): %s\n", epoch_ms(),
                  std::string(to_string(e.code())).c_str(), e.what());
      return;
    }
    if (iteration > 1000) fail("the victim never died");
  }
}

void peer_death(Communicator& comm) {
  std::vector<float> v(4 << 20, 1.0f);
  die_during(
      comm, [&] { return comm.allreduce_async(std::span<float>(v), ReduceOp::sum, {Algorithm::ring}); },
      [&] { comm.allreduce(std::span<float>(v), ReduceOp::sum, {Algorithm::ring}); });
}

// The same during an alltoall (every rank talks to every other).
void peer_death_alltoall(Communicator& comm) {
  const std::size_t block = 1 << 20;  // floats per destination
  std::vector<float> send(block * static_cast<std::size_t>(comm.size()), 1.0f), recv(send.size());
  die_during(
      comm, [&] { return comm.alltoall_async(send.data(), recv.data(), block, DataType::float32); },
      [&] { comm.alltoall(send.data(), recv.data(), block, DataType::float32); });
}

// Across hosts (CHORUS_TOPOLOGY "0,1" or "2x2"), the upper half of the
// ranks (the last host) calls a large AllReduce and the others a small one:
// whole hosts agree among themselves and take different algorithms. Every
// rank must still fail.
void mismatch_hosts(Communicator& comm) {
  allreduce_must_fail(comm, comm.rank() >= comm.size() / 2 ? std::size_t{1} << 20 : 1000);
}

// The last rank is killed between small AllReduces, which go through the
// host segment (across hosts, CHORUS_TOPOLOGY: through each host's own
// segment and its leader's messages): the others are left waiting on its
// slot or its messages and must fail within seconds, naming it.
void peer_death_shm(Communicator& comm) {
  const int victim = comm.size() - 1;
  const bool across_hosts = std::getenv("CHORUS_TOPOLOGY") != nullptr;
  std::vector<float> v(8, 1.0f);
  for (int iteration = 0;; ++iteration) {
    if (comm.rank() == victim && iteration == 3) {
      std::printf("dying_at_ms=%lld\n", epoch_ms());
      std::fflush(stdout);
      ::raise(SIGKILL);
    }
    try {
      comm.allreduce(std::span<float>(v), ReduceOp::sum,
                     across_hosts ? CallOptions{Algorithm::automatic, "hierarchical_shm"}
                                  : CallOptions{Algorithm::shared_memory, ""});
    } catch (const Error& e) {
      std::printf("failed_at_ms=%lld\nerror (%s): %s\n", epoch_ms(),
                  std::string(to_string(e.code())).c_str(), e.what());
      return;
    }
    if (iteration > 1000) fail("the victim never died");
  }
}

// AllReduces of 4 MiB in a loop until one fails (the lab's failure tests
// cut a host off or kill it from outside): prints when and why, and
// "looping" once the first calls went through.
void until_failure(Communicator& comm) {
  std::vector<float> v(1 << 20, 1.0f);
  for (int iteration = 0;; ++iteration) {
    if (iteration == 3) {
      std::printf("looping\n");
      std::fflush(stdout);
    }
    try {
      comm.allreduce(std::span<float>(v), ReduceOp::max);
    } catch (const Error& e) {
      std::printf("failed_at_ms=%lld\nerror (%s): %s\n", epoch_ms(),
                  std::string(to_string(e.code())).c_str(), e.what());
      std::fflush(stdout);
      return;
    }
  }
}

// The last rank never calls: the others time out (CHORUS_TIMEOUT) naming
// the call and whom they waited for.
void timeout(Communicator& comm) {
  if (comm.rank() == comm.size() - 1) {
    std::this_thread::sleep_for(6s);
    return;
  }
  std::vector<float> v(1000, 1.0f);
  try {
    comm.allreduce(std::span<float>(v), ReduceOp::sum, {Algorithm::ring});
  } catch (const Error& e) {
    std::printf("error (%s): %s\n", std::string(to_string(e.code())).c_str(), e.what());
    return;
  }
  fail("an allreduce without one rank succeeded");
}

// Every collective other than AllReduce, over sizes that cross the
// broadcast chain threshold, checked against values computed here.
void collectives(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  auto v = [](int rank, std::size_t i) { return static_cast<float>((static_cast<std::size_t>(rank) * 7 + i) % 11); };
  for (std::size_t count : {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{300000}}) {
    const std::string at = " (count " + std::to_string(count) + ")";
    for (int root = 0; root < p; ++root) {
      std::vector<float> buffer(count);
      for (std::size_t i = 0; i < count; ++i) buffer[i] = r == root ? v(root, i) : -1.0f;
      comm.broadcast(buffer.data(), count, DataType::float32, root);
      for (std::size_t i = 0; i < count; ++i)
        if (buffer[i] != v(root, i)) fail("broadcast from " + std::to_string(root) + at);
      std::vector<float> mine(count), reduced(count);
      for (std::size_t i = 0; i < count; ++i) mine[i] = v(r, i);
      comm.reduce(mine.data(), reduced.data(), count, DataType::float32, ReduceOp::sum, root);
      for (std::size_t i = 0; r == root && i < count; ++i) {
        float want = 0;
        for (int k = 0; k < p; ++k) want += v(k, i);
        if (reduced[i] != want) fail("reduce to " + std::to_string(root) + at);
      }
    }
    std::vector<float> mine(count), all(count * static_cast<std::size_t>(p)), block(count);
    for (std::size_t i = 0; i < count; ++i) mine[i] = v(r, i);
    comm.allgather(mine.data(), all.data(), count, DataType::float32);
    for (int k = 0; k < p; ++k)
      for (std::size_t i = 0; i < count; ++i)
        if (all[static_cast<std::size_t>(k) * count + i] != v(k, i)) fail("allgather" + at);
    // Rank r's block j is v(r + j, i): after reduce-scatter rank r holds the
    // sum over k of v(k + r, i).
    for (int j = 0; j < p; ++j)
      for (std::size_t i = 0; i < count; ++i) all[static_cast<std::size_t>(j) * count + i] = v(r + j, i);
    comm.reduce_scatter(all.data(), block.data(), count, DataType::float32, ReduceOp::sum);
    for (std::size_t i = 0; i < count; ++i) {
      float want = 0;
      for (int k = 0; k < p; ++k) want += v(k + r, i);
      if (block[i] != want) fail("reduce_scatter" + at);
    }
    // Alltoall: rank r sends v(r * p + j, i) to rank j.
    std::vector<float> out(count * static_cast<std::size_t>(p)), in(out.size());
    for (int j = 0; j < p; ++j)
      for (std::size_t i = 0; i < count; ++i) out[static_cast<std::size_t>(j) * count + i] = v(r * p + j, i);
    comm.alltoall(out.data(), in.data(), count, DataType::float32);
    for (int k = 0; k < p; ++k)
      for (std::size_t i = 0; i < count; ++i)
        if (in[static_cast<std::size_t>(k) * count + i] != v(k * p + r, i)) fail("alltoall" + at);
    // The v-forms: rank j's block holds (j % 3) * count / 2 elements, back to
    // back; rank 1's is empty.
    std::vector<std::size_t> counts(static_cast<std::size_t>(p)), displs(counts.size());
    std::size_t total = 0;
    for (int j = 0; j < p; ++j) {
      counts[j] = static_cast<std::size_t>(j % 3) * count / 2;
      displs[j] = total;
      total += counts[j];
    }
    std::vector<float> gathered(total);
    comm.allgatherv(mine.data(), gathered.data(), counts, displs, DataType::float32);
    for (int k = 0; k < p; ++k)
      for (std::size_t i = 0; i < counts[k]; ++i)
        if (gathered[displs[k] + i] != v(k, i)) fail("allgatherv" + at);
    std::vector<float> spread(total), mine_v(counts[r]);
    for (int j = 0; j < p; ++j)
      for (std::size_t i = 0; i < counts[j]; ++i) spread[displs[j] + i] = v(r + j, i);
    comm.reduce_scatter_v(spread.data(), mine_v.data(), counts, DataType::float32, ReduceOp::sum);
    for (std::size_t i = 0; i < counts[r]; ++i) {
      float want = 0;
      for (int k = 0; k < p; ++k) want += v(k + r, i);
      if (mine_v[i] != want) fail("reduce_scatter_v" + at);
    }
    // alltoallv: rank r sends counts[j] elements v(r * p + j, i) to rank j
    // and receives counts[r] from each.
    std::vector<std::size_t> recv_counts(counts.size(), counts[r]), recv_displs(counts.size());
    for (int k = 0; k < p; ++k) recv_displs[k] = static_cast<std::size_t>(k) * counts[r];
    std::vector<float> received(counts[r] * static_cast<std::size_t>(p));
    for (int j = 0; j < p; ++j)
      for (std::size_t i = 0; i < counts[j]; ++i) spread[displs[j] + i] = v(r * p + j, i);
    comm.alltoallv(spread.data(), counts, displs, received.data(), recv_counts, recv_displs,
                   DataType::float32);
    for (int k = 0; k < p; ++k)
      for (std::size_t i = 0; i < counts[r]; ++i)
        if (received[recv_displs[k] + i] != v(k * p + r, i)) fail("alltoallv" + at);
    const int root = p - 1;
    std::vector<float> at_root(r == root ? count * static_cast<std::size_t>(p) : 0);
    comm.gather(mine.data(), at_root.data(), count, DataType::float32, root);
    for (int k = 0; r == root && k < p; ++k)
      for (std::size_t i = 0; i < count; ++i)
        if (at_root[static_cast<std::size_t>(k) * count + i] != v(k, i)) fail("gather" + at);
    std::vector<float> back(count);
    comm.scatter(at_root.data(), back.data(), count, DataType::float32, root);
    if (back != mine) fail("scatter" + at);
    std::vector<float> at_root_v(r == root ? total : 0), back_v(counts[r]);
    comm.gatherv(mine.data(), counts[r], at_root_v.data(), counts, displs, DataType::float32, root);
    if (r == root && at_root_v != gathered) fail("gatherv" + at);
    comm.scatterv(at_root_v.data(), counts, displs, back_v.data(), counts[r], DataType::float32, root);
    for (std::size_t i = 0; i < counts[r]; ++i)
      if (back_v[i] != v(r, i)) fail("scatterv" + at);
    comm.barrier();
  }
}

// Sub-communicators across processes: a split by parity (reversed keys)
// and a dup, each running 50 allreduces from its own thread while the
// parent runs 50 of its own, then a split in which rank 0 joins none.
void split(Communicator& comm) {
  const int p = comm.size(), r = comm.rank();
  const auto start = std::chrono::steady_clock::now();
  Communicator copy = comm.dup();
  auto parity = comm.split(r % 2, -r);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  std::printf("rank %d: dup + split took %.1f ms\n", r, ms);
  if (!parity) fail("no communicator from split");
  std::int64_t parity_sum = 0;
  int members = 0;
  for (int j = r % 2; j < p; j += 2, ++members) parity_sum += j;
  if (parity->size() != members) fail("split size");
  // Reversed keys: the highest parent rank of the color is rank 0.
  if (parity->rank() != members - 1 - r / 2) fail("split rank");
  auto run = [&](Communicator& c, std::int64_t want, const char* what) {
    for (int i = 0; i < 50; ++i) {
      std::vector<std::int64_t> x(1000 + static_cast<std::size_t>(i) * 37, r);
      c.allreduce(std::span<std::int64_t>(x), ReduceOp::sum);
      for (std::int64_t v : x)
        if (v != want) fail(what);
    }
  };
  const std::int64_t all_sum = static_cast<std::int64_t>(p) * (p - 1) / 2;
  std::thread a([&] { run(copy, all_sum, "allreduce on the dup"); });
  std::thread b([&] { run(*parity, parity_sum, "allreduce on the split"); });
  run(comm, all_sum, "allreduce on the parent");
  a.join();
  b.join();
  auto rest = comm.split(r == 0 ? Communicator::kNoColor : 0, r);
  if (rest.has_value() != (r != 0)) fail("kNoColor");
  if (rest) {
    std::vector<std::int64_t> x(10, r);
    rest->allreduce(std::span<std::int64_t>(x), ReduceOp::sum);
    if (x[0] != all_sum) fail("allreduce without rank 0");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::map<std::string, std::function<void(Communicator&)>> scenarios = {
      {"algorithms", algorithms}, {"async100", async100}, {"mismatch", mismatch},
      {"peer_death", peer_death}, {"timeout", timeout}, {"collectives", collectives},
      {"split", split}, {"peer_death_alltoall", peer_death_alltoall},
      {"peer_death_shm", peer_death_shm}, {"until_failure", until_failure},
      {"mismatch_hosts", mismatch_hosts}, {"connect", [](Communicator&) {}}};
  if (argc != 2 || !scenarios.count(argv[1])) {
    std::fprintf(stderr, "usage: comm_worker algorithms|async100|mismatch|peer_death|timeout|collectives|split|peer_death_alltoall|peer_death_shm|until_failure|mismatch_hosts|connect\n");
    return 2;
  }
  try {
    Communicator comm = Communicator::from_env();
    scenarios.at(argv[1])(comm);
    std::printf("rank %d passed\n", comm.rank());
    return 0;
  } catch (const Error& e) {
    std::printf("FAILED: error (%s): %s\n", std::string(to_string(e.code())).c_str(), e.what());
    return 1;
  } catch (const std::exception& e) {
    std::printf("FAILED: %s\n", e.what());
    return 1;
  }
}

// Starts a group of worker processes for a multi-process test, bounds their
// time, and cleans them up: every process is killed and reaped when the
// group is destroyed, whatever happened.
#pragma once

#include "bootstrap/tcp_store.hpp"
#include "common/secret.hpp"

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace chorus::testing {

struct ProcessResult {
  int exit_code = -1;  // when it exited
  int signal = 0;      // when a signal ended it
  std::string output;  // its stdout and stderr
  bool timed_out = false;
};

class ProcessGroup {
 public:
  ProcessGroup() = default;
  ~ProcessGroup();
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;

  // Starts `argv` with the current environment plus `env`.
  void start(const std::vector<std::string>& argv, const std::map<std::string, std::string>& env);
  // Waits for all; those still running after `limit` are killed (timed_out).
  std::vector<ProcessResult> wait(std::chrono::seconds limit);

 private:
  struct Child {
    int pid;
    std::string log_path;
  };
  std::vector<Child> children_;
};

// A job of `program` processes on loopback, meeting at a store that this
// process serves on a free port with a fresh job secret, as Chorus's own
// launcher does: CHORUS_RANK/SIZE/STORE, CHORUS_SECRET, the transport,
// CHORUS_SOCKET_ADDR=127.0.0.1 and CHORUS_TIMEOUT=60 are set for each rank.
struct LoopbackJob {
  explicit LoopbackJob(std::string program_path) : program(std::move(program_path)) {}
  // Starts ranks 0..started-1 (all when started < 0) of a job of `size`,
  // each as `program args...`, with `extra` added to (or replacing) the
  // variables above, and then rank r's own `per_rank[r]`.
  void start(const std::string& transport, const std::vector<std::string>& args, int size,
             const std::map<std::string, std::string>& extra = {}, int started = -1,
             const std::map<int, std::map<std::string, std::string>>& per_rank = {});

  std::string program;
  std::string secret = auth::generate_secret_text();
  bootstrap::StoreServer server{"127.0.0.1", 0, auth::Secret(secret)};
  // How this process itself reaches the job's store.
  bootstrap::StoreAccess access() const { return {auth::Secret(secret), ""}; }
  ProcessGroup processes;
};

// A process's results, readable in a failure message.
std::string describe(const std::vector<ProcessResult>& results);

}  // namespace chorus::testing

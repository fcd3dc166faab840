#include "local_launch.hpp"

#include "bootstrap/tcp_store.hpp"
#include "common/secret.hpp"

#include <fmt/format.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

namespace chorus::perf {
namespace {

volatile sig_atomic_t g_interrupted = 0;
void on_interrupt(int) { g_interrupted = 1; }

}  // namespace

int launch_local(const std::vector<std::string>& argv, int ranks) {
  // The children prove this secret to the store and to each other, so that
  // nothing else on the machine can join them.
  const std::string secret = auth::generate_secret_text();
  bootstrap::StoreServer server("127.0.0.1", 0, auth::Secret(secret));
  struct sigaction action {};
  action.sa_handler = on_interrupt;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);

  std::vector<pid_t> children;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::fprintf(stderr, "allreduce_perf: fork failed: %s\n", std::strerror(errno));
      for (pid_t c : children) ::kill(c, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      setenv("CHORUS_RANK", std::to_string(r).c_str(), 1);
      setenv("CHORUS_SIZE", std::to_string(ranks).c_str(), 1);
      setenv("CHORUS_STORE", server.url().c_str(), 1);
      setenv("CHORUS_SECRET", secret.c_str(), 1);
      unsetenv("CHORUS_SECRET_FILE");
      setenv("CHORUS_SOCKET_ADDR", "127.0.0.1", 0);  // one machine: loopback unless told otherwise
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execv("/proc/self/exe", args.data());
      std::fprintf(stderr, "allreduce_perf: cannot start rank %d: %s\n", r, std::strerror(errno));
      ::_exit(127);
    }
    children.push_back(pid);
  }

  int status_to_return = 0;
  int running = ranks;
  bool stopping = false;
  auto stop_all = [&](int signal_number) {
    for (pid_t c : children)
      if (c > 0) ::kill(c, signal_number);
  };
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  while (running > 0) {
    if (g_interrupted && !stopping) {
      std::fprintf(stderr, "allreduce_perf: interrupted; stopping the ranks\n");
      stop_all(SIGTERM);
      stopping = true;
      status_to_return = 130;
      stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    }
    if (stopping && std::chrono::steady_clock::now() > stop_deadline) stop_all(SIGKILL);
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    int rank = -1;
    for (int r = 0; r < ranks; ++r)
      if (children[static_cast<std::size_t>(r)] == pid) rank = r;
    if (rank < 0) continue;
    children[static_cast<std::size_t>(rank)] = -1;
    --running;
    int code = 0;
    if (WIFSIGNALED(status)) {
      if (!stopping)
        std::fprintf(stderr, "allreduce_perf: rank %d was killed by signal %d (%s)\n", rank,
                     WTERMSIG(status), strsignal(WTERMSIG(status)));
      code = 1;
    } else if (WIFEXITED(status) && WEXITSTATUS(status) != 0) {
      code = WEXITSTATUS(status);
      if (!stopping) std::fprintf(stderr, "allreduce_perf: rank %d exited with status %d\n", rank, code);
    }
    if (code != 0 && status_to_return == 0) {
      status_to_return = code;
      if (!stopping) {
        // The others would wait for it until their deadline: stop them now,
        // after a moment for them to report their own view of the failure.
        stopping = true;
        stop_deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
      }
    }
  }
  return status_to_return;
}

}  // namespace chorus::perf

#include "process_group.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace chorus::testing {

ProcessGroup::~ProcessGroup() {
  for (auto& c : children_) {
    if (c.pid > 0) {
      ::kill(c.pid, SIGKILL);
      ::waitpid(c.pid, nullptr, 0);
    }
    ::unlink(c.log_path.c_str());
  }
}

void ProcessGroup::start(const std::vector<std::string>& argv,
                         const std::map<std::string, std::string>& env) {
  char path[] = "/tmp/chorus-worker-XXXXXX";
  const int log_fd = mkstemp(path);
  if (log_fd < 0) throw std::runtime_error("mkstemp failed");
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    if (!env.count(entry.substr(0, entry.find('=')))) env_strings.push_back(entry);
  }
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const int pid = ::fork();
  if (pid == 0) {
    ::dup2(log_fd, 1);
    ::dup2(log_fd, 2);
    ::execve(args[0], args.data(), envp.data());
    ::_exit(127);
  }
  ::close(log_fd);
  if (pid < 0) throw std::runtime_error("fork failed");
  children_.push_back({pid, path});
}

std::vector<ProcessResult> ProcessGroup::wait(std::chrono::seconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  std::vector<ProcessResult> results(children_.size());
  std::size_t running = children_.size();
  while (running > 0) {
    for (std::size_t i = 0; i < children_.size(); ++i) {
      if (children_[i].pid <= 0) continue;
      int status = 0;
      if (::waitpid(children_[i].pid, &status, WNOHANG) == children_[i].pid) {
        if (WIFEXITED(status)) results[i].exit_code = WEXITSTATUS(status);
        if (WIFSIGNALED(status)) results[i].signal = WTERMSIG(status);
        children_[i].pid = 0;
        --running;
      }
    }
    if (running == 0) break;
    if (std::chrono::steady_clock::now() > deadline) {
      for (std::size_t i = 0; i < children_.size(); ++i) {
        if (children_[i].pid <= 0) continue;
        ::kill(children_[i].pid, SIGKILL);
        ::waitpid(children_[i].pid, nullptr, 0);
        children_[i].pid = 0;
        results[i].timed_out = true;
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  for (std::size_t i = 0; i < children_.size(); ++i) {
    std::ifstream in(children_[i].log_path);
    std::stringstream ss;
    ss << in.rdbuf();
    results[i].output = ss.str();
  }
  return results;
}

std::string describe(const std::vector<ProcessResult>& results) {
  std::string text;
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    text += fmt::format("--- process {}: {}\n{}", i,
                        r.timed_out ? "TIMED OUT (killed)"
                        : r.signal  ? fmt::format("killed by signal {}", r.signal)
                                    : fmt::format("exit {}", r.exit_code),
                        r.output);
  }
  return text;
}

void LoopbackJob::start(const std::string& transport, const std::vector<std::string>& args,
                        int size, const std::map<std::string, std::string>& extra, int started,
                        const std::map<int, std::map<std::string, std::string>>& per_rank) {
  for (int r = 0; r < (started < 0 ? size : started); ++r) {
    std::map<std::string, std::string> env = {
        {"CHORUS_RANK", std::to_string(r)},  {"CHORUS_SIZE", std::to_string(size)},
        {"CHORUS_STORE", server.url()},      {"CHORUS_TRANSPORT", transport},
        {"CHORUS_SOCKET_ADDR", "127.0.0.1"}, {"CHORUS_TIMEOUT", "60"},
        {"CHORUS_SECRET", secret},           {"CHORUS_SECRET_FILE", ""}};
    for (const auto& [k, v] : extra) env[k] = v;
    if (const auto own = per_rank.find(r); own != per_rank.end())
      for (const auto& [k, v] : own->second) env[k] = v;
    std::vector<std::string> argv = {program};
    argv.insert(argv.end(), args.begin(), args.end());
    processes.start(argv, env);
  }
}

}  // namespace chorus::testing

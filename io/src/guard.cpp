// crash_guard (guard.hpp): by geomopt-inspect --check where it can be found, by fork() otherwise.
#include "guard.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "geomopt/io/error.hpp"
#include "geomopt/io/inspect.hpp"

extern char** environ;

namespace geomopt::io::detail {
namespace {

// geomopt-inspect beside this library (the build tree) or in ../bin (an installed prefix); GEOMOPT_IO_CHECKER
// names another one, and an empty value turns the helper off.
std::string find_checker() {
  if (const char* env = std::getenv("GEOMOPT_IO_CHECKER")) return env;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&find_checker), &info) == 0 || info.dli_fname == nullptr) return "";
  std::error_code ec;
  const std::filesystem::path lib = std::filesystem::canonical(info.dli_fname, ec).parent_path();
  if (ec) return "";
  for (const auto& candidate : {lib / "geomopt-inspect", lib.parent_path() / "bin" / "geomopt-inspect"})
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  return "";
}

[[noreturn]] void corrupt(const std::string& context, const std::string& filename, int status) {
  const std::string how =
      WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status)) + " (" + ::strsignal(WTERMSIG(status)) + ")"
                          : "exit status " + std::to_string(WEXITSTATUS(status));
  throw Error(context, {{ProblemKind::file, "",
                         filename + " is corrupt: reading its structure crashed the HDF5 library (" + how +
                             ", in a child process)"}});
}

// Waits for the child until `timeout` seconds have passed; then kills it and throws. Polls, from 0.1 ms doubling up
// to 10 ms: a check takes tens of milliseconds, and the poll adds at most a tenth of its own time.
bool wait_for(pid_t child, int& status, const std::string& context, const std::string& filename, double timeout) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  auto pause = std::chrono::microseconds(100);
  for (;;) {
    const pid_t r = ::waitpid(child, &status, WNOHANG);
    if (r == child) return true;
    if (r < 0 && errno != EINTR) return false;
    if (std::chrono::steady_clock::now() >= deadline) {
      ::kill(child, SIGKILL);
      while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
      }
      char seconds[32];
      std::snprintf(seconds, sizeof seconds, "%g", timeout);
      throw Error(context, {{ProblemKind::file, "",
                             filename + " is corrupt or too large to check: reading its structure did not finish within " +
                                 seconds + " s in a child process (HDF5 1.10 loops forever on some corrupt files; "
                                           "LoadOptions::isolate_timeout sets the limit)"}});
    }
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(10000));
  }
}

// A spawned process shares nothing with this one and costs no copy of its memory, unlike fork(), which copies the
// page tables of a process holding a large tree (seconds on some virtual machines).
bool spawn_checker(const std::string& checker, const std::string& context, const std::string& filename,
                   const std::vector<std::string>& groups, double timeout) {
  std::vector<const char*> argv = {checker.c_str(), "--check", filename.c_str()};
  for (const auto& g : groups) argv.push_back(g.c_str());
  argv.push_back(nullptr);
  pid_t child = 0;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  // Quiet: a sanitizer's report of the crash would only repeat what the Error says.
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  const int rc =
      ::posix_spawn(&child, checker.c_str(), &actions, nullptr, const_cast<char* const*>(argv.data()), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return false;
  int status = 0;
  if (!wait_for(child, status, context, filename, timeout)) return false;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return true;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 127) return false;  // could not run it after all
  corrupt(context, filename, status);
}

}  // namespace

void poison_heap() {
#ifdef M_PERTURB
  // New blocks are filled with 0xa5 ^ 0xff = 0x5a, freed ones with 0xa5: a pointer read from either is
  // non-canonical on x86-64 and misaligned, so following or freeing it faults.
  ::mallopt(M_PERTURB, 0xa5);
#endif
}

namespace {
void die_with_parent(pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(1);  // the parent died before prctl took effect
}
}  // namespace

void crash_guard(const std::string& context, const std::string& filename, const std::vector<std::string>& groups,
                 const std::function<void()>& work, double timeout) {
  const std::string checker = find_checker();  // not cached: GEOMOPT_IO_CHECKER may change
  if (!checker.empty() && spawn_checker(checker, context, filename, groups, timeout)) return;

  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child < 0) {
    // Without a child the check cannot run; reading in-process is what any HDF5 reader does.
    return;
  }
  if (child == 0) {
    // Die quietly of the signal: the parent reports it.
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) ::signal(sig, SIG_DFL);
    die_with_parent(parent);
    poison_heap();
    try {
      work();
    } catch (...) {
      // Errors are the parent's to report, from its own pass.
    }
    ::_exit(0);
  }
  int status = 0;
  if (!wait_for(child, status, context, filename, timeout)) return;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  corrupt(context, filename, status);
}

}  // namespace geomopt::io::detail

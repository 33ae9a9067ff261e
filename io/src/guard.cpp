// crash_guard (guard.hpp): by geomopt-inspect --check where it can be found, by fork() otherwise.
#include "guard.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>

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

bool wait_for(pid_t child, int& status) {
  while (::waitpid(child, &status, 0) < 0)
    if (errno != EINTR) return false;
  return true;
}

// A spawned process shares nothing with this one and costs no copy of its memory, unlike fork(), which copies the
// page tables of a process holding a large tree (seconds on some virtual machines).
bool spawn_checker(const std::string& checker, const std::string& context, const std::string& filename,
                   const std::vector<std::string>& groups) {
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
  if (!wait_for(child, status)) return false;
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

void crash_guard(const std::string& context, const std::string& filename, const std::vector<std::string>& groups,
                 const std::function<void()>& work) {
  const std::string checker = find_checker();  // not cached: GEOMOPT_IO_CHECKER may change
  if (!checker.empty() && spawn_checker(checker, context, filename, groups)) return;

  const pid_t child = ::fork();
  if (child < 0) {
    // Without a child the check cannot run; reading in-process is what any HDF5 reader does.
    return;
  }
  if (child == 0) {
    // Die quietly of the signal: the parent reports it.
    for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) ::signal(sig, SIG_DFL);
    poison_heap();
    try {
      work();
    } catch (...) {
      // Errors are the parent's to report, from its own pass.
    }
    ::_exit(0);
  }
  int status = 0;
  if (!wait_for(child, status)) return;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  corrupt(context, filename, status);
}

}  // namespace geomopt::io::detail

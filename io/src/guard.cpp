// crash_guard (guard.hpp): by geomopt-inspect --check where it can be found, by fork() otherwise; the verdict comes
// over a pipe.
#include "guard.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "geomopt/io/error.hpp"
#include "geomopt/io/inspect.hpp"

extern char** environ;

namespace geomopt::io::detail {
namespace {

// The descriptor the spawned checker finds its end of the verdict pipe on.
constexpr int kVerdictFd = 3;

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

std::string seconds_text(double seconds) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", seconds);
  return text;
}

// The verdict pipe: both ends close-on-exec, so no other program this process starts meanwhile holds them (a
// writer held elsewhere would delay the end-of-file that reports a crash).
class VerdictPipe {
 public:
  VerdictPipe() {
    if (::pipe2(fd_, O_CLOEXEC) != 0) fd_[0] = fd_[1] = -1;
  }
  VerdictPipe(const VerdictPipe&) = delete;
  VerdictPipe& operator=(const VerdictPipe&) = delete;
  ~VerdictPipe() {
    close_read();
    close_write();
  }
  bool ok() const { return fd_[0] >= 0; }
  int read_end() const { return fd_[0]; }
  int write_end() const { return fd_[1]; }
  void close_read() {
    if (fd_[0] >= 0) ::close(fd_[0]);
    fd_[0] = -1;
  }
  void close_write() {
    if (fd_[1] >= 0) ::close(fd_[1]);
    fd_[1] = -1;
  }
  // posix_spawn's dup2 onto the same number would keep close-on-exec set: keep the write end off kVerdictFd.
  bool move_write_end_above(int fd) {
    if (fd_[1] > fd) return true;
    const int moved = ::fcntl(fd_[1], F_DUPFD_CLOEXEC, fd + 1);
    if (moved < 0) return false;
    ::close(fd_[1]);
    fd_[1] = moved;
    return true;
  }

 private:
  int fd_[2] = {-1, -1};
};

// How a child's check ended.
struct Outcome {
  enum class Kind { survived, died, never_started, timed_out, unwaitable } kind;
  bool have_status = false;  // the exit status, when this process could still collect it
  int status = 0;
  int error = 0;  // errno of a failed poll() or read()
};

// Collects the child's exit status if this process still can. The child has closed its end of the pipe (it has
// exited or is about to): waits at most about a second, in steps from 50 us, and never blocks in waitpid(), which
// with SIGCHLD ignored would wait for every other child of the application too. ECHILD (SIGCHLD ignored, or an
// application handler reaped it first) means the status is gone, which costs only the signal's name in a message.
bool reap(pid_t child, int& status) {
  auto pause = std::chrono::microseconds(50);
  auto waited = std::chrono::microseconds(0);
  for (;;) {
    const pid_t r = ::waitpid(child, &status, WNOHANG);
    if (r == child) return true;
    if (r < 0 && errno != EINTR) return false;
    if (waited > std::chrono::seconds(1)) return false;
    if (r == 0) {
      std::this_thread::sleep_for(pause);
      waited += pause;
      pause = std::min(pause * 2, std::chrono::microseconds(20000));
    }
  }
}

// Reads the verdict until kSurvived, end-of-file or the deadline. poll() wakes at the verdict's arrival: no polling
// interval is added to the check's own time.
Outcome await_verdict(pid_t child, int fd, double timeout) {
  using Clock = std::chrono::steady_clock;
  const bool limited = std::isfinite(timeout) && timeout < 1e9;
  const Clock::time_point deadline =
      limited ? Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout))
              : Clock::time_point::max();
  bool started = false;
  Outcome out{Outcome::Kind::died};
  for (;;) {
    int wait_ms = -1;
    if (limited) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
      wait_ms = static_cast<int>(std::clamp<long long>(left, 0, INT_MAX));
    }
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, wait_ms);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) {
      out = {Outcome::Kind::unwaitable, false, 0, errno};
      break;
    }
    if (ready == 0) {
      if (Clock::now() < deadline) continue;
      out.kind = Outcome::Kind::timed_out;
      break;
    }
    char bytes[16];
    const ssize_t n = ::read(fd, bytes, sizeof bytes);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) {
      out = {Outcome::Kind::unwaitable, false, 0, errno};
      break;
    }
    if (n == 0) {
      out.kind = started ? Outcome::Kind::died : Outcome::Kind::never_started;
      break;
    }
    started = true;
    if (std::find(bytes, bytes + n, kSurvived) != bytes + n) {
      out.kind = Outcome::Kind::survived;
      break;
    }
  }
  // Without end-of-file the child has not exited, so its pid is still its own: the kill cannot hit another process.
  if (out.kind == Outcome::Kind::timed_out || out.kind == Outcome::Kind::unwaitable) ::kill(child, SIGKILL);
  out.have_status = reap(child, out.status);
  return out;
}

// The Error of a child that did not survive, or the return of one that did. `spawned`: a checker that could not run
// at all (exit status 127 from the shell or the dynamic loader, or end-of-file before it started) is no verdict,
// and the caller falls back to fork().
bool judge(const Outcome& o, bool spawned, const std::string& context, const std::string& filename, double timeout) {
  auto fail = [&](const std::string& why) { throw Error(context, {{ProblemKind::file, "", why}}); };
  switch (o.kind) {
    case Outcome::Kind::survived:
      return true;
    case Outcome::Kind::timed_out:
      fail(filename + " is corrupt or too large to check: reading its structure did not finish within " +
           seconds_text(timeout) +
           " s in a child process (HDF5 1.10 loops forever on some corrupt files; LoadOptions::isolate_timeout and "
           "describe's check_timeout set the limit)");
      break;
    case Outcome::Kind::unwaitable:
      fail("cannot check " + filename + ": waiting for the check's child process failed (" +
           std::string(::strerror(o.error)) + ")");
      break;
    case Outcome::Kind::never_started:
    case Outcome::Kind::died: {
      const bool exited = o.have_status && WIFEXITED(o.status);
      if (spawned && (o.kind == Outcome::Kind::never_started || (exited && WEXITSTATUS(o.status) == 127)) &&
          !(o.have_status && WIFSIGNALED(o.status)))
        return false;
      std::string how = "it ended without a verdict";
      if (o.have_status && WIFSIGNALED(o.status))
        how = "signal " + std::to_string(WTERMSIG(o.status)) + " (" + ::strsignal(WTERMSIG(o.status)) + ")";
      else if (exited)
        how = "exit status " + std::to_string(WEXITSTATUS(o.status));
      fail(filename + " is corrupt: reading its structure crashed the HDF5 library (" + how + ", in a child process)");
    }
  }
  return false;
}

// A spawned process shares nothing with this one and costs no copy of its memory (posix_spawn runs no code of this
// process between its clone and the exec), unlike fork(), which copies the page tables of a process holding a
// large tree and leaves the child only async-signal-safe calls in a multi-threaded caller. False when the checker
// could not be run (the caller forks instead).
bool spawn_checker(const std::string& checker, const std::string& context, const std::string& filename,
                   const std::vector<std::string>& groups, double timeout) {
  VerdictPipe pipe;
  if (!pipe.ok() || !pipe.move_write_end_above(kVerdictFd)) return false;
  const std::string fd_text = std::to_string(kVerdictFd);
  std::vector<const char*> argv = {checker.c_str(), "--check", "--verdict-fd", fd_text.c_str(), filename.c_str()};
  for (const auto& g : groups) argv.push_back(g.c_str());
  argv.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe.write_end(), kVerdictFd);
  // Quiet: a sanitizer's report of the crash would only repeat what the Error says.
  posix_spawn_file_actions_addopen(&actions, 2, "/dev/null", O_WRONLY, 0);
  // The application's signal mask and ignored signals are not the checker's: a blocked or ignored SIGSEGV or SIGPIPE
  // must not change how it dies.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGPIPE, SIGCHLD, SIGTERM, SIGINT, SIGHUP})
    sigaddset(&defaults, sig);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t child = 0;
  const int rc =
      ::posix_spawn(&child, checker.c_str(), &actions, &attr, const_cast<char* const*>(argv.data()), environ);
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return false;
  pipe.close_write();  // the child's copy is then the only writer: its exit is the pipe's end-of-file
  return judge(await_verdict(child, pipe.read_end(), timeout), true, context, filename, timeout);
}

// The forked child: between fork() and _exit() it calls, besides work(), only async-signal-safe functions.
[[noreturn]] void run_forked_child(int verdict, const std::function<void()>& work) {
  // Die of the signal itself: the parent reports it.
  for (int sig : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGPIPE}) ::signal(sig, SIG_DFL);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // The parent holds the read end: an error on the write end means it died before prctl took effect.
  pollfd p{verdict, 0, 0};
  if (::poll(&p, 1, 0) < 0 || (p.revents & (POLLERR | POLLHUP)) != 0) ::_exit(1);
  if (::write(verdict, &kStarted, 1) != 1) ::_exit(1);
  poison_heap();
  try {
    work();
  } catch (...) {
    // Errors are the parent's to report, from its own pass.
  }
  if (::write(verdict, &kSurvived, 1) != 1) ::_exit(1);
  ::_exit(0);
}

}  // namespace

void poison_heap() {
#ifdef M_PERTURB
  // New blocks are filled with 0xa5 ^ 0xff = 0x5a, freed ones with 0xa5: a pointer read from either is
  // non-canonical on x86-64 and misaligned, so following or freeing it faults.
  ::mallopt(M_PERTURB, 0xa5);
#endif
}

std::string timeout_problem(const std::string& setting, double seconds) {
  if (seconds > 0) return "";
  return setting + " must be a positive number of seconds (infinity for no limit), got " + seconds_text(seconds);
}

void crash_guard(const std::string& context, const std::string& filename, const std::vector<std::string>& groups,
                 const std::function<void()>& work, double timeout) {
  const std::string checker = find_checker();  // not cached: GEOMOPT_IO_CHECKER may change
  if (!checker.empty() && spawn_checker(checker, context, filename, groups, timeout)) return;

  VerdictPipe pipe;
  const pid_t child = pipe.ok() ? ::fork() : -1;
  if (child < 0)
    throw Error(context, {{ProblemKind::file, "",
                           "cannot check " + filename + " in a child process (" + ::strerror(errno) +
                               "); LoadOptions::isolate = false reads a trusted file without the check"}});
  if (child == 0) {
    pipe.close_read();
    run_forked_child(pipe.write_end(), work);
  }
  pipe.close_write();
  judge(await_verdict(child, pipe.read_end(), timeout), false, context, filename, timeout);
}

}  // namespace geomopt::io::detail

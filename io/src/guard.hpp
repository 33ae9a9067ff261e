// crash_guard: runs a read-only pass over an untrusted file in a child process first, so that a file that crashes
// the HDF5 library (HDF5 1.10 dereferences some corrupt structures without checking them; the fuzz target finds
// such files within seconds) ends in an Error rather than in the caller's process dying. A file the child survived
// is then read by the parent.
//
// Invariants:
// - The verdict comes over a pipe, never from waitpid(): the child writes kStarted before it opens the file and
//   kSurvived after its pass, and a crash closes the pipe without kSurvived. So the verdict does not depend on the
//   application's SIGCHLD disposition (SIG_IGN, or a handler that reaps every child), on this process's PID (a
//   container's PID 1) or on who reaps the child. The exit status, when this process can still collect it, only
//   names the signal in the message.
// - The child dies with the thread that started it (PR_SET_PDEATHSIG); whether the parent is still there is
//   learned from the pipe (its read end closes with the parent), not from getppid(), which is 1 or 0 for a
//   legitimate parent in a PID namespace.
// - The child is `geomopt-inspect --check` started by posix_spawn (no copy of this process, nothing run between
//   fork and exec, so a caller with many busy threads is safe), or, where no checker is found, a fork() of this
//   process that runs work(): a copy of a multi-threaded process may only rely on what fork() keeps consistent
//   (glibc's malloc; HDF5, which the io lock held across the fork keeps idle).
// - HDF5 is deterministic except where a damaged file makes it use memory it never wrote (1.10.8 frees a pointer
//   from a half-decoded link table): the child poisons its heap (poison_heap, inspect.hpp) so that such a read
//   faults there every time, whatever this process's heap holds.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace geomopt::io::detail {

/// Throws Error(context, file problem) when the checker (`geomopt-inspect --check --verdict-fd FD filename
/// groups...`) or, without one, work() in a forked child dies before reporting that it survived (a signal, a
/// sanitizer's report). A child still running after `timeout` seconds (HDF5 looping on a corrupt file) is killed,
/// and that is an Error too; an infinite timeout waits without limit. Also an Error: no child process can be started
/// at all (the check cannot run; LoadOptions::isolate = false reads without it). `timeout` must pass
/// timeout_problem().
void crash_guard(const std::string& context, const std::string& filename, const std::vector<std::string>& groups,
                 const std::function<void()>& work, double timeout = 60);

/// The one rule for a crash guard's time limit, for every setting that holds one: empty when `seconds` is positive
/// (infinity: no limit), else the message naming `setting` and the value.
std::string timeout_problem(const std::string& setting, double seconds);

/// The bytes a checker writes to its verdict descriptor (see the invariants above).
inline constexpr char kStarted = 's';
inline constexpr char kSurvived = 'k';

}  // namespace geomopt::io::detail

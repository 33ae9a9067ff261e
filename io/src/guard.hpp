// crash_guard: runs a read-only pass over an untrusted file in a forked child first, so that a file that crashes
// the HDF5 library (HDF5 1.10 dereferences some corrupt structures without checking them; the fuzz target finds
// such files within seconds) ends in an Error rather than in the caller's process dying. Invariant: work() runs in
// the child only, sees a copy of the process, and its effects are lost; the parent learns only whether it
// survived. HDF5 is deterministic except where a damaged file makes it use memory it never wrote (1.10.8 frees a
// pointer from a half-decoded link table): the child poisons its heap (poison_heap, inspect.hpp) so that such a
// read faults there every time, whatever this process's heap holds. A file the child survived is then read by the
// parent.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace geomopt::io::detail {

/// Throws Error(context, file problem) when the checker (`geomopt-inspect --check filename groups...`) or, without
/// one, work() in a forked child dies of a signal (or of a sanitizer's report).
/// A child still running after `timeout` seconds (HDF5 looping on a corrupt file) is killed, and that is an Error
/// too. The child dies with this process (PR_SET_PDEATHSIG), so a caller killed while it waits leaves no orphan.
void crash_guard(const std::string& context, const std::string& filename, const std::vector<std::string>& groups,
                 const std::function<void()>& work, double timeout = 60);

}  // namespace geomopt::io::detail

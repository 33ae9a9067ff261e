// geomopt-inspect FILE...: prints each file's tree summary, optimizer state and metadata (geomopt::io::describe).
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "../src/guard.hpp"
#include "geomopt/io/error.hpp"
#include "geomopt/io/inspect.hpp"

namespace {

// `--check [--verdict-fd FD] FILE [GROUP...]`: the crash guard's child (io/src/guard.hpp). It survives the file or
// dies of it; errors are not its business. With a verdict descriptor (the write end of the guard's pipe) it writes
// kStarted before opening the file and kSurvived after the pass; the exit status is then only a courtesy.
int check(int argc, char** argv) {
  int verdict = -1;
  if (argc >= 2 && std::strcmp(argv[0], "--verdict-fd") == 0) {
    char* end = nullptr;
    const long fd = std::strtol(argv[1], &end, 10);
    if (end == argv[1] || *end != '\0' || fd < 0 || fd > 1 << 20) return 2;
    verdict = static_cast<int>(fd);
    argc -= 2;
    argv += 2;
  }
  if (argc < 1) return 2;
  // Die with the load that spawned us (it may be killed while it waits). Whether it is still there is asked of the
  // pipe, whose read end it holds: getppid() is 1 (or 0) for a legitimate parent that is a PID namespace's init.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (verdict >= 0) {
    pollfd p{verdict, 0, 0};
    if (::poll(&p, 1, 0) < 0 || (p.revents & (POLLERR | POLLHUP)) != 0) return 1;
    if (::write(verdict, &geomopt::io::detail::kStarted, 1) != 1) return 1;
  }
  geomopt::io::detail::poison_heap();
  try {
    geomopt::io::detail::check_structure(argv[0], std::vector<std::string>(argv + 1, argv + argc));
  } catch (const std::exception&) {
  }
  if (verdict < 0) return 0;
  if (::write(verdict, &geomopt::io::detail::kSurvived, 1) != 1) return 1;
  // Nothing is left to do: the guard's wait ends with this exit, so skip the library's teardown.
  ::_exit(0);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fprintf(argc < 2 ? stderr : stdout,
                 "usage: geomopt-inspect FILE...\n"
                 "Prints the parameters (path, type, shape, free parameters, bytes, trainable or buffer), aliases,\n"
                 "optimizer state and metadata of files written by geomopt::io (docs/file_format.md).\n");
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--check") == 0) return check(argc - 2, argv + 2);
  int status = 0;
  for (int i = 1; i < argc; ++i) {
    try {
      std::fputs(geomopt::io::describe(argv[i]).c_str(), stdout);
    } catch (const geomopt::io::Error& e) {
      std::fprintf(stderr, "geomopt-inspect: %s\n", e.what());
      status = 1;
    }
  }
  return status;
}

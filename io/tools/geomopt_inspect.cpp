// geomopt-inspect FILE...: prints each file's tree summary, optimizer state and metadata (geomopt::io::describe).
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "geomopt/io/error.hpp"
#include "geomopt/io/inspect.hpp"

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fprintf(argc < 2 ? stderr : stdout,
                 "usage: geomopt-inspect FILE...\n"
                 "Prints the parameters (path, type, shape, free parameters, bytes, trainable or buffer), aliases,\n"
                 "optimizer state and metadata of files written by geomopt::io (docs/file_format.md).\n");
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--check") == 0) {
    // The crash guard's child (io/src/guard.hpp): survive the file, or die of it; errors are not its business.
    if (argc < 3) return 2;
    // Die with the load that spawned us (it may be killed while it waits); a parent already gone leaves init.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::getppid() == 1) return 1;
    geomopt::io::detail::poison_heap();
    try {
      geomopt::io::detail::check_structure(argv[2], std::vector<std::string>(argv + 3, argv + argc));
    } catch (const std::exception&) {
    }
    return 0;
  }
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

// docs_examples: the programs behind the C++ blocks of docs/ and the README, one run() per page.
//
//   docs_examples [PAGE...]     runs the named pages (all when none); exits non-zero when one fails
//
// Every page's file is compiled into this one executable, in one translation unit (a unity build,
// docs/examples/CMakeLists.txt), so the pages share the parse of Eigen and geomopt and every instantiation they have
// in common; each page keeps its code in a namespace of its own.
#include <cstdio>
#include <cstring>

namespace docs_getting_started { int run(); }
namespace docs_concepts { int run(); }
namespace docs_ptree { int run(); }
namespace docs_manifolds { int run(); }
namespace docs_optimizers { int run(); }
namespace docs_solvers { int run(); }
#ifdef GEOMOPT_DOCS_HAVE_IO
namespace docs_file_format { int run(); }
#endif
#ifdef GEOMOPT_DOCS_HAVE_CERES
namespace docs_ceres { int run(); }
#endif

namespace {

struct Page {
  const char* name;
  int (*run)();
};

constexpr Page kPages[] = {
    {"getting_started", docs_getting_started::run},
    {"concepts", docs_concepts::run},
    {"ptree", docs_ptree::run},
    {"manifolds", docs_manifolds::run},
    {"optimizers", docs_optimizers::run},
    {"solvers", docs_solvers::run},
#ifdef GEOMOPT_DOCS_HAVE_IO
    {"file_format", docs_file_format::run},
#endif
#ifdef GEOMOPT_DOCS_HAVE_CERES
    {"ceres", docs_ceres::run},
#endif
};

}  // namespace

int main(int argc, char** argv) {
  int failures = 0;
  for (const Page& page : kPages) {
    bool wanted = argc == 1;
    for (int i = 1; i < argc; ++i) wanted = wanted || std::strcmp(argv[i], page.name) == 0;
    if (!wanted) continue;
    std::printf("== %s\n", page.name);
    const int failed = page.run();
    std::printf("== %s: %s\n", page.name, failed == 0 ? "ok" : "FAILED");
    failures += failed;
  }
  for (int i = 1; i < argc; ++i) {
    bool known = false;
    for (const Page& page : kPages) known = known || std::strcmp(argv[i], page.name) == 0;
    if (!known) {
      std::printf("docs_examples: no page named '%s' in this build\n", argv[i]);
      ++failures;
    }
  }
  return failures == 0 ? 0 : 1;
}

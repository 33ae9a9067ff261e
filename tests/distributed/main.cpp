// The doctest runner of the distributed tests: every rank runs every test case, in the same order (a case's MPI
// calls are collective, so a case uses CHECK, never REQUIRE, around them: a rank that left a case early would leave
// the others waiting). The exit status is the worst of all ranks', so mpirun fails when any rank failed.
#define DOCTEST_CONFIG_IMPLEMENT
#include <mpi.h>

#include <doctest/doctest.h>

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  doctest::Context context(argc, argv);
  int failed = context.run();
  int worst = 0;
  MPI_Allreduce(&failed, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  const bool stop = context.shouldExit();
  MPI_Finalize();
  return stop ? failed : worst;
}

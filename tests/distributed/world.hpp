// Helpers of the distributed tests over MPI_COMM_WORLD, asked of MPI directly (not through geomopt).
#pragma once

#include <mpi.h>

#include <cstring>
#include <vector>

namespace dtest {

inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

inline int world_size() {
  int p = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  return p;
}

// Whether every rank holds these bytes (all-gathered and compared with rank 0's). Collective.
inline bool same_on_every_rank(const std::vector<unsigned char>& mine) {
  const int P = world_size();
  std::vector<unsigned char> all(mine.size() * static_cast<std::size_t>(P) + 1);
  MPI_Allgather(mine.data(), static_cast<int>(mine.size()), MPI_BYTE, all.data(), static_cast<int>(mine.size()),
                MPI_BYTE, MPI_COMM_WORLD);
  for (int q = 1; q < P; ++q)
    if (std::memcmp(all.data(), all.data() + static_cast<std::size_t>(q) * mine.size(), mine.size()) != 0) return false;
  return true;
}

}  // namespace dtest

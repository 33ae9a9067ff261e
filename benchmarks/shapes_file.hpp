// A shapes file as a tree of float32 matrices: one leaf per line, "rows [cols]" (cols 1 when absent), '#' starts a
// comment line (benchmarks/tree_small.shapes, ../shared/bench/*.shapes). Entries uniform in [-1, 1].
#pragma once

#include <Eigen/Core>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace bench {

inline std::vector<Eigen::MatrixXf> read_shapes(const char* file) {
  std::ifstream in(file);
  std::vector<Eigen::MatrixXf> leaves;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    Eigen::Index rows = 0, cols = 1;
    words >> rows;
    if (!(words >> cols)) cols = 1;
    leaves.push_back(Eigen::MatrixXf::Random(rows, cols));
  }
  return leaves;
}

}  // namespace bench

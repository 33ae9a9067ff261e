// A shapes file: one leaf per line, "rows [cols]" (cols 1 when absent), '#' starts a comment line
// (benchmarks/tree_small.shapes, ../shared/bench/*.shapes). The one reader of the format in C++, for the distributed
// benchmarks and tests; scripts/comm_model.py reads it in Python.
#pragma once

#include <Eigen/Core>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace bench {

/// The file's leaves as (rows, cols); throws std::runtime_error naming the file when it cannot be read, and the line
/// when a line is not "rows [cols]" with positive sizes.
inline std::vector<std::pair<Eigen::Index, Eigen::Index>> read_shape_list(const std::string& file) {
  std::ifstream in(file);
  if (!in) throw std::runtime_error("shapes file " + file + ": cannot be read");
  std::vector<std::pair<Eigen::Index, Eigen::Index>> shapes;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream words(line);
    Eigen::Index rows = 0, cols = 1;
    if (!(words >> rows) || (!(words >> cols) && !words.eof()) || rows <= 0 || cols <= 0)
      throw std::runtime_error("shapes file " + file + ", line " + std::to_string(number) +
                               ": expected rows [cols], got \"" + line + "\"");
    shapes.emplace_back(rows, cols);
  }
  return shapes;
}

/// The file's leaves as float32 matrices, entries uniform in [-1, 1] (Eigen's Random).
inline std::vector<Eigen::MatrixXf> read_shapes(const std::string& file) {
  std::vector<Eigen::MatrixXf> leaves;
  for (const auto& [rows, cols] : read_shape_list(file)) leaves.push_back(Eigen::MatrixXf::Random(rows, cols));
  return leaves;
}

}  // namespace bench

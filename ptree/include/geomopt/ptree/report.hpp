// Reports on a tree's structure, over all its leaves (trainable and buffers).
//
//   visits(tree)    one line per leaf and per report ("scale: absent", "enc: alternative 1", "layers: 2 elements",
//                   "dec.weight: tied to enc.weight", "layers.0.bias: leaf 4"), for structure tests
//   aliases(tree)   each tied alias path with the path it repeats
//   summary(tree)   a table of path, type, dims, free parameters, bytes and trainable, with totals
#pragma once

#include <cstddef>
#include <cstdio>
#include <string>
#include <typeinfo>
#include <unordered_map>
#include <utility>
#include <vector>

#if __has_include(<cxxabi.h>)
#include <cxxabi.h>
#include <cstdlib>
#define GEOMOPT_PTREE_HAS_CXXABI 1
#endif

#include "geomopt/ptree/count.hpp"
#include "geomopt/ptree/flatten.hpp"
#include "geomopt/ptree/walk.hpp"

namespace geomopt::ptree {
namespace detail {

inline std::string demangle(const char* name) {
#ifdef GEOMOPT_PTREE_HAS_CXXABI
  int status = 0;
  char* out = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  if (status == 0 && out != nullptr) {
    std::string s(out);
    std::free(out);
    return s;
  }
#endif
  return name;
}

template <class S>
std::string scalar_name() {
  if constexpr (std::is_same_v<S, float>) return "float";
  else if constexpr (std::is_same_v<S, double>) return "double";
  else if constexpr (std::is_same_v<S, long double>) return "long double";
  else if constexpr (std::is_same_v<S, int>) return "int";
  else if constexpr (std::is_same_v<S, bool>) return "bool";
  else return demangle(typeid(S).name());
}

inline std::string extent(int n) { return n == Eigen::Dynamic ? std::string("X") : std::to_string(n); }

// Eigen's own spelling where it has one (MatrixXf, Vector3d, ArrayXXf), Matrix<scalar, R, C> otherwise.
template <class L>
std::string leaf_type_name(const L& leaf) {
  if constexpr (eigen_plain<L>) {
    using S = typename L::Scalar;
    constexpr bool is_array = std::is_base_of_v<Eigen::ArrayBase<L>, L>;
    constexpr int r = L::RowsAtCompileTime, c = L::ColsAtCompileTime;
    std::string suffix = std::is_same_v<S, float> ? "f" : std::is_same_v<S, double> ? "d" : "";
    if (!suffix.empty()) {
      if (c == 1) return std::string(is_array ? "Array" : "Vector") + extent(r) + suffix;
      if (r == 1 && !is_array) return "RowVector" + extent(c) + suffix;
      if (r == c) return std::string(is_array ? "Array" : "Matrix") + extent(r) + (is_array ? extent(c) : "") + suffix;
    }
    return std::string(is_array ? "Array<" : "Matrix<") + scalar_name<S>() + ", " + extent(r) + ", " + extent(c) +
           ">";
  } else if constexpr (any_scalar<L>) {
    return scalar_name<L>();
  } else if constexpr (requires { ptree_type_name(leaf); }) {
    return std::string(ptree_type_name(leaf));
  } else {
    return demangle(typeid(L).name());
  }
}

inline std::string dims_text(const std::vector<Eigen::Index>& dims) {
  if (dims.empty()) return "scalar";
  std::string s;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    if (i != 0) s += 'x';
    s += std::to_string(dims[i]);
  }
  return s;
}

// One visitor for visits() and summary(): every leaf and every branch report, in walk order.
struct StructureLog {
  static constexpr bool kPaths = true;
  static constexpr bool kBufferHook = true;

  struct Row {
    std::string path, type, dims;
    Eigen::Index params = 0;
    std::size_t bytes = 0;
    bool trainable = true;
  };
  std::vector<std::string> lines;
  std::vector<Row> rows;
  std::unordered_map<const void*, std::string> first_path;

  void report(const Path& path, const std::string& what) { lines.push_back(path.display() + ": " + what); }

  void on_vector(const Path& path, std::size_t n) {
    report(path, std::to_string(n) + (n == 1 ? " element" : " elements"));
  }
  template <class M>
  void on_map(const Path& path, const M& m) {
    report(path, std::to_string(m.size()) + (m.size() == 1 ? " key" : " keys"));
  }
  void on_optional(const Path& path, bool present) { report(path, present ? "present" : "absent"); }
  void on_variant(const Path& path, std::size_t index) { report(path, "alternative " + std::to_string(index)); }
  template <class Ids, class N>
  void on_shared(const Path& path, const Ids& ids, const N& node) {
    if (!node) {
      report(path, "absent");
    } else if (ids[0] == kNotTied) {
      first_path.emplace(node.get(), path.str());
    } else {
      report(path, "tied to " + first_path.at(node.get()));
    }
  }

  template <class L>
  void add(const Path& path, const L& leaf, bool trainable) {
    Row row{path.str(), leaf_type_name(leaf), dims_text(leaf_dims(leaf)), 0, 0, trainable};
    for_each_block(
        [&](const auto& b) {
          row.params += block_size(b);
          row.bytes += static_cast<std::size_t>(block_size(b)) * sizeof(block_scalar_t<bare<decltype(b)>>);
        },
        leaf);
    report(path, std::string(trainable ? "leaf " : "buffer ") + row.dims);
    rows.push_back(std::move(row));
  }
  template <class L>
  void leaf(const Path& path, const L& leaf) {
    add(path, leaf, true);
  }
  template <class L>
  void buffer(const Path& path, const L& leaf) {
    add(path, leaf, false);
  }
};

inline std::string human_bytes(std::size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u == 0 ? "%.0f %s" : "%.1f %s", v, units[u]);
  return buf;
}

}  // namespace detail

template <class Tree>
std::vector<std::string> visits(const Tree& tree) {
  detail::StructureLog log;
  detail::walk<all_t>(log, tree);
  return std::move(log.lines);
}

template <class Tree>
std::vector<std::pair<std::string, std::string>> aliases(const Tree& tree) {
  return detail::collect_aliases(tree);
}

template <class Tree>
std::string summary(const Tree& tree) {
  detail::StructureLog log;
  detail::walk<all_t>(log, tree);
  using Row = detail::StructureLog::Row;
  const std::vector<std::string> head = {"path", "type", "dims", "params", "bytes", "trainable"};
  std::vector<std::vector<std::string>> cells;
  Eigen::Index params = 0, buffer_values = 0;
  std::size_t param_bytes = 0, buffer_bytes = 0;
  for (const Row& r : log.rows) {
    cells.push_back({r.path.empty() ? "(root)" : r.path, r.type, r.dims, std::to_string(r.params),
                     std::to_string(r.bytes), r.trainable ? "yes" : "no"});
    (r.trainable ? params : buffer_values) += r.params;
    (r.trainable ? param_bytes : buffer_bytes) += r.bytes;
  }
  std::vector<std::size_t> width(head.size());
  for (std::size_t c = 0; c < head.size(); ++c) {
    width[c] = head[c].size();
    for (const auto& row : cells) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& row) {
    std::string s;
    for (std::size_t c = 0; c < row.size(); ++c) {
      const std::string pad(width[c] - row[c].size(), ' ');
      const bool numeric = c == 3 || c == 4;
      if (c != 0) s += "  ";
      s += numeric ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : "");
    }
    return s + "\n";
  };
  std::string out = line(head);
  for (const auto& row : cells) out += line(row);
  const auto tied = detail::collect_aliases(tree);
  for (const auto& [alias, target] : tied) out += alias + " -> tied to " + target + "\n";
  out += "total: " + std::to_string(params) + " trainable parameters (" + detail::human_bytes(param_bytes) + "), " +
         std::to_string(buffer_values) + " buffer values (" + detail::human_bytes(buffer_bytes) + "), " +
         std::to_string(log.rows.size()) + " leaves, " + std::to_string(tied.size()) + " tied aliases\n";
  return out;
}

}  // namespace geomopt::ptree

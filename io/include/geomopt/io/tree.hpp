// save and load: a parameter tree to and from one group of an HDF5 file (docs/file_format.md).
//
//   geomopt::io::save("model.h5", tree);                        // options: group, compression, overwrite, durable
//   geomopt::io::LoadReport r = geomopt::io::load("model.h5", tree);  // into an existing tree: the prototype
//
// Invariants: save replaces the target atomically (a reader, or a writer killed at any moment, sees the old file
// or the new one, never a mixture); load reads a file save wrote back into a tree of the same shape bit for bit;
// a load that throws for anything in the file leaves the tree unchanged (only an operating-system read error
// after every check has passed leaves it partly loaded, and says so). The prototype decides the shapes, ties and buffers of the result.
#pragma once

#include <string>

#include "geomopt/io/detail/describe.hpp"
#include "geomopt/io/detail/view.hpp"
#include "geomopt/io/error.hpp"
#include "geomopt/io/options.hpp"

namespace geomopt::io {

template <class Tree>
void save(const std::string& filename, const Tree& tree, const SaveOptions& options = {}) {
  std::vector<detail::GroupView> groups;
  groups.push_back(detail::describe(tree, options.group));
  detail::write_file(filename, groups, options, "save");
}

template <class Tree>
LoadReport load(const std::string& filename, Tree& tree, const LoadOptions& options = {}) {
  std::vector<detail::GroupView> groups;
  groups.push_back(detail::describe(tree, options.group));
  return detail::read_file(filename, groups, options, nullptr, "load");
}

}  // namespace geomopt::io

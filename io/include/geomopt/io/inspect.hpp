// describe(filename): a readable summary of any file in the layout of docs/file_format.md: every leaf with its
// path, type, shape, free parameters, bytes and whether it is trainable (or a buffer, or frozen), every alias (tied
// path), the optimizer's kind, step, hyperparameters, per-leaf options and state arrays, and the metadata. What
// geomopt-inspect prints. Throws Error.
#pragma once

#include <string>
#include <vector>

namespace geomopt::io {

/// The file's structure is read in a child process first, as a load does, limited to `check_timeout` seconds
/// (positive; infinity for no limit: anything else throws Error naming check_timeout).
std::string describe(const std::string& filename, double check_timeout = 60);

namespace detail {
/// Reads every structure of a file that a load or describe may read (superblock, every group, link, attribute,
/// dataset type and shape, and the data of chunked datasets), in this process, unguarded. Returns normally, or
/// throws Error; a file that crashes HDF5 crashes the caller. Each of `groups` ("params", ...) is also walked on its
/// own, as a load walks it. Run by `geomopt-inspect --check FILE [GROUP...]`, the child that the load's crash guard
/// spawns.
void check_structure(const std::string& filename, const std::vector<std::string>& groups = {});
/// Makes this process's allocator fill every new and every freed block with a nonzero byte (glibc's M_PERTURB), so
/// that HDF5 reading memory it never wrote (a pointer in a half-decoded structure) crashes here every time instead of
/// depending on what the heap held before. Only for the checker and the guard's forked child: it slows malloc.
void poison_heap();
}  // namespace detail

}  // namespace geomopt::io

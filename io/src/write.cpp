// write_file: the groups of a save or checkpoint into a temporary file beside the target, flushed to disk, then
// renamed over the target, so that the target name always holds a complete file (docs/file_format.md).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>

#include "checksum.hpp"
#include "geomopt/io/detail/view.hpp"
#include "geomopt/io/error.hpp"
#include "h5.hpp"
#include "transpose.hpp"

namespace geomopt::io::detail {
namespace {

using h5::check;
using h5::checked;
using h5::Failure;
using h5::Id;

std::string system_error(const std::string& what) { return what + ": " + std::strerror(errno); }

void sync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_DIRECTORY : 0) | O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Failure(system_error("open " + path + " to flush it"));
  const int r = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  errno = saved;
  if (r != 0) throw Failure(system_error("fsync " + path));
}

// The temporary file of one save: created beside the target (a rename across file systems would not be atomic),
// removed unless committed.
class Staging {
 public:
  Staging(const std::string& target, const SaveOptions& options) : target_(target), options_(options) {
    const std::filesystem::path t(target);
    dir_ = t.has_parent_path() ? t.parent_path().string() : std::string(".");
    static std::atomic<unsigned> counter{0};
    std::random_device rd;
    path_ = (std::filesystem::path(dir_) / ("." + t.filename().string() + ".tmp." + std::to_string(::getpid()) + "." +
                                            std::to_string(counter++) + "." + std::to_string(rd() % 100000)))
                .string();
  }
  Staging(const Staging&) = delete;
  Staging& operator=(const Staging&) = delete;
  ~Staging() {
    if (!committed_) ::unlink(path_.c_str());
  }
  const std::string& path() const { return path_; }

  void commit() {
    if (options_.durable) sync_path(path_, false);
    if (options_.overwrite) {
      if (::rename(path_.c_str(), target_.c_str()) != 0) throw Failure(system_error("rename to " + target_));
    } else {
      // link() fails when the target exists, so two writers cannot both win.
      if (::link(path_.c_str(), target_.c_str()) != 0)
        throw Failure(errno == EEXIST ? target_ + " exists and overwrite is off" : system_error("link to " + target_));
      ::unlink(path_.c_str());
    }
    committed_ = true;
    if (options_.durable) sync_path(dir_, true);
  }

 private:
  std::string target_, dir_, path_;
  SaveOptions options_;
  bool committed_ = false;
};

class Writer {
 public:
  Writer(hid_t file, const SaveOptions& options) : file_(file), options_(options) {
    gcpl_ = checked(H5Pcreate(H5P_GROUP_CREATE), H5Pclose, "group properties");
    // Listings then follow the tree's walk order rather than name order.
    check(H5Pset_link_creation_order(gcpl_.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), "group properties");
    created_.insert("/");
  }

  void group(const GroupView& g) {
    const std::string root = "/" + g.group;
    ensure_group(root, g.leaves.empty() || !g.leaves[0].segments.empty() || !g.has_tree);
    if (!g.attributes.empty()) {
      Id obj = checked(H5Oopen(file_, root.c_str(), H5P_DEFAULT), H5Oclose, root);
      for (const auto& [name, value] : g.attributes) h5::write_attribute(obj.get(), name, value);
      h5::write_attribute(obj.get(), kAttributesChecksumAttribute,
                          static_cast<std::int64_t>(attributes_crc32(g.attributes)));
    }
    for (const LeafView& leaf : g.leaves) write_leaf(g, leaf);
    for (const AliasView& a : g.aliases) {
      const std::string target = h5::object_path(g.group, a.target_segments);
      const std::string alias = h5::object_path(g.group, a.segments);
      if (!h5::exists(file_, target)) ensure_group(target, true);  // a tied subtree without leaves
      ensure_parent(alias);
      check(H5Lcreate_hard(file_, target.c_str(), file_, alias.c_str(), H5P_DEFAULT, H5P_DEFAULT),
            a.path + ": link to " + a.target);
    }
  }

 private:
  void ensure_group(const std::string& path, bool create_last) {
    std::size_t pos = 1;
    while (pos <= path.size()) {
      std::size_t next = path.find('/', pos);
      if (next == std::string::npos) next = path.size();
      const std::string prefix = path.substr(0, next);
      const bool last = next == path.size();
      if ((!last || create_last) && created_.insert(prefix).second) {
        Id g = checked(H5Gcreate2(file_, prefix.c_str(), H5P_DEFAULT, gcpl_.get(), H5P_DEFAULT), H5Gclose, prefix);
      }
      pos = next + 1;
    }
  }
  void ensure_parent(const std::string& path) { ensure_group(path.substr(0, path.rfind('/')), true); }

  void write_leaf(const GroupView& g, const LeafView& leaf) {
    const std::string path = h5::object_path(g.group, leaf.segments);
    ensure_parent(path);
    if (!leaf.structured) {
      Id d = write_block(file_, path, leaf.blocks.at(0), leaf.path);
      if (g.state) {
        h5::write_attribute(d.get(), "path", leaf.path);
      } else {
        leaf_attributes(d.get(), leaf);
      }
      return;
    }
    created_.insert(path);
    Id grp = checked(H5Gcreate2(file_, path.c_str(), H5P_DEFAULT, gcpl_.get(), H5P_DEFAULT), H5Gclose, leaf.path);
    leaf_attributes(grp.get(), leaf);
    h5::write_attribute(grp.get(), "type", leaf.type);
    for (const auto& [name, value] : leaf.metadata) h5::write_attribute(grp.get(), name, value);
    for (std::size_t b = 0; b < leaf.blocks.size(); ++b)
      write_block(grp.get(), std::to_string(b), leaf.blocks[b], leaf.path + " (block " + std::to_string(b) + ")");
  }

  // A frozen parameter is not trainable in this run: trainable = false says so to any reader, frozen = true tells
  // it from a buffer.
  void leaf_attributes(hid_t obj, const LeafView& leaf) {
    h5::write_attribute(obj, "path", leaf.path);
    h5::write_bool_attribute(obj, "trainable", leaf.trainable && !leaf.frozen);
    if (leaf.frozen) h5::write_bool_attribute(obj, "frozen", true);
  }

  Id write_block(hid_t loc, const std::string& name, const BlockView& b, const std::string& what) {
    hsize_t dims[2] = {static_cast<hsize_t>(b.rows), static_cast<hsize_t>(b.cols)};
    const std::size_t n = static_cast<std::size_t>(b.rows * b.cols);
    Id space = b.rank == 0 ? checked(H5Screate(H5S_SCALAR), H5Sclose, what)
                           : checked(H5Screate_simple(b.rank, dims, nullptr), H5Sclose, what);
    Id dcpl = checked(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, what);
    check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), what);
    const std::size_t esize = dtype_size(b.dtype);
    if (options_.compression > 0 && b.rank > 0 && n > 0) {
      // Chunks of about 1 MiB: whole rows where a row fits.
      constexpr std::size_t kChunkBytes = std::size_t{1} << 20;
      hsize_t chunk[2] = {dims[0], dims[1]};
      if (b.rank == 1) {
        chunk[0] = std::max<hsize_t>(1, std::min<hsize_t>(dims[0], kChunkBytes / esize));
      } else {
        const std::size_t row_bytes = static_cast<std::size_t>(dims[1]) * esize;
        if (row_bytes >= kChunkBytes) {
          chunk[0] = 1;
          chunk[1] = std::max<hsize_t>(1, kChunkBytes / esize);
        } else {
          chunk[0] = std::max<hsize_t>(1, std::min<hsize_t>(dims[0], kChunkBytes / row_bytes));
        }
      }
      check(H5Pset_chunk(dcpl.get(), b.rank, chunk), what);
      check(H5Pset_shuffle(dcpl.get()), what);
      check(H5Pset_deflate(dcpl.get(), static_cast<unsigned>(options_.compression)), what);
    }
    Id ftype = h5::file_type(b.dtype), mtype = h5::memory_type(b.dtype);
    Id d = checked(H5Dcreate2(loc, name.c_str(), ftype.get(), space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
                   H5Dclose, what);
    // The checksum covers the elements in the file's (row-major) order as little-endian bytes: the memory bytes
    // of this little-endian host, taken in the order they are written.
    static_assert(std::endian::native == std::endian::little, "checksums are computed on little-endian bytes");
    std::uint32_t crc = 0;
    auto finish = [&] {
      h5::write_attribute(d.get(), kChecksumAttribute, static_cast<std::int64_t>(crc));
      return std::move(d);
    };
    if (n == 0) return finish();
    if (!(b.rank == 2 && !b.row_major && b.rows > 1 && b.cols > 1)) {
      check(H5Dwrite(d.get(), mtype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, b.data), what);
      crc = crc32(0, b.data, n * esize);
      return finish();
    }
    // Row blocks of about 512 KiB, transposed and written while they are still in cache: one pass over memory
    // instead of two, and a fixed scratch buffer.
    constexpr std::size_t kBlockBytes = std::size_t{512} << 10;
    const std::size_t row_bytes = static_cast<std::size_t>(b.cols) * esize;
    const std::int64_t block_rows =
        std::max<std::int64_t>(1, std::min<std::int64_t>(b.rows, static_cast<std::int64_t>(kBlockBytes / row_bytes)));
    const std::size_t need = static_cast<std::size_t>(block_rows) * row_bytes;
    if (scratch_bytes_ < need) {
      scratch_.reset(new unsigned char[need]);
      scratch_bytes_ = need;
    }
    Id file_space = checked(H5Dget_space(d.get()), H5Sclose, what);
    for (std::int64_t i0 = 0; i0 < b.rows; i0 += block_rows) {
      const std::int64_t r = std::min(block_rows, b.rows - i0);
      transpose(scratch_.get(), static_cast<const unsigned char*>(b.data) + static_cast<std::size_t>(i0) * esize, r,
                b.cols, b.rows, esize);
      const hsize_t start[2] = {static_cast<hsize_t>(i0), 0};
      const hsize_t count[2] = {static_cast<hsize_t>(r), static_cast<hsize_t>(b.cols)};
      check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start, nullptr, count, nullptr), what);
      Id mem_space = checked(H5Screate_simple(2, count, nullptr), H5Sclose, what);
      check(H5Dwrite(d.get(), mtype.get(), mem_space.get(), file_space.get(), H5P_DEFAULT, scratch_.get()), what);
      crc = crc32(crc, scratch_.get(), static_cast<std::size_t>(r) * row_bytes);
    }
    return finish();
  }

  hid_t file_;
  SaveOptions options_;
  Id gcpl_;
  std::set<std::string> created_;
  std::unique_ptr<unsigned char[]> scratch_;
  std::size_t scratch_bytes_ = 0;
};

void check_names(const std::vector<GroupView>& groups, std::vector<Problem>& problems) {
  auto bad = [](const std::string& s) {
    return s.empty() || s == "." || s.find('/') != std::string::npos || s.find('\0') != std::string::npos;
  };
  for (const GroupView& g : groups) {
    for (const LeafView& leaf : g.leaves)
      for (const auto& s : leaf.segments)
        if (bad(s)) {
          problems.push_back({ProblemKind::type, leaf.path,
                              "the segment \"" + s + "\" cannot name an HDF5 link (empty, \".\" or containing '/')"});
          break;
        }
    for (const AliasView& a : g.aliases)
      for (const auto& s : a.segments)
        if (bad(s)) {
          problems.push_back({ProblemKind::type, a.path, "the segment \"" + s + "\" cannot name an HDF5 link"});
          break;
        }
  }
}

std::string joined(const std::vector<std::string>& segments, std::size_t count, char sep) {
  std::string s;
  for (std::size_t i = 0; i < count; ++i) {
    if (i != 0) s += sep;
    s += segments[i];
  }
  return s;
}

// A reader finds a leaf by its dotted path (link names joined with '.'), so two links whose dotted paths agree
// would make the file unreadable: map keys "a" and "a.exp_avg" (the optimizer's /optimizer/a/exp_avg beside the
// group /optimizer/a.exp_avg), or {"a": {"b.c"}} beside {"a.b": {"c"}}. Every link the save creates (leaves, the
// groups on their way, ties and the leaves under a tied subtree) is checked, in each group, before anything is
// written; so are groups of the file that would nest in each other (a tree saved under SaveOptions::group
// "optimizer" or "metadata" beside a checkpoint's own groups).
void check_collisions(const std::vector<GroupView>& groups, std::vector<Problem>& problems) {
  for (std::size_t i = 0; i < groups.size(); ++i)
    for (std::size_t j = i + 1; j < groups.size(); ++j) {
      const std::string& a = groups[i].group;
      const std::string& b = groups[j].group;
      const bool nested = a == b || (a.size() < b.size() && b.compare(0, a.size(), a) == 0 && b[a.size()] == '/') ||
                          (b.size() < a.size() && a.compare(0, b.size(), b) == 0 && a[b.size()] == '/');
      if (nested)
        problems.push_back({ProblemKind::type, "",
                            "the tree's group /" + a + " and the file's group /" + b +
                                " would share links: choose another SaveOptions::group"});
    }
  for (const GroupView& g : groups) {
    struct Link {
      std::string h5path;  // the link in the file
      std::string owner;   // the tree path it belongs to
    };
    std::map<std::string, Link> seen;
    auto add = [&](const std::vector<std::string>& segments, const std::string& owner) {
      for (std::size_t k = 1; k <= segments.size(); ++k) {
        const std::string dotted = joined(segments, k, '.');
        const std::string h5path = "/" + g.group + "/" + joined(segments, k, '/');
        const std::string what = k == segments.size() ? owner : owner + " (its group " + h5path + ")";
        const auto [it, inserted] = seen.emplace(dotted, Link{h5path, what});
        if (inserted || it->second.h5path == h5path) continue;
        const std::string label = g.group == "params" ? dotted : g.group + ":" + dotted;
        problems.push_back({ProblemKind::type, label,
                            "two links of the file would have this dotted path, " + it->second.h5path + " (for " +
                                it->second.owner + ") and " + h5path + " (for " + what +
                                "), and no load could tell them apart: rename one of the keys"});
        return;
      }
    };
    for (const LeafView& leaf : g.leaves) add(leaf.segments, leaf.path);
    for (const AliasView& a : g.aliases) {
      add(a.segments, a.path);
      for (const LeafView& leaf : g.leaves) {
        if (leaf.segments.size() <= a.target_segments.size() ||
            !std::equal(a.target_segments.begin(), a.target_segments.end(), leaf.segments.begin()))
          continue;
        std::vector<std::string> under = a.segments;
        under.insert(under.end(), leaf.segments.begin() + static_cast<std::ptrdiff_t>(a.target_segments.size()),
                     leaf.segments.end());
        add(under, a.path + " (tied to " + a.target + ")");
      }
    }
  }
}

}  // namespace

void write_file(const std::string& filename, const std::vector<GroupView>& groups, const SaveOptions& options,
                const char* what) {
  const std::string context = std::string(what) + "(\"" + filename + "\")";
  std::string why;
  if (!options.is_valid(&why)) throw Error(context, {{ProblemKind::file, "", why}});
  std::vector<Problem> problems;
  check_names(groups, problems);
  if (problems.empty()) check_collisions(groups, problems);
  if (!problems.empty()) throw Error(context, std::move(problems));
  if (!options.overwrite && std::filesystem::exists(filename))
    throw Error(context, {{ProblemKind::file, "", filename + " exists and overwrite is off"}});

  auto lock = h5::enter();
  try {
    Staging staging(filename, options);
    {
      Id fcpl = checked(H5Pcreate(H5P_FILE_CREATE), H5Pclose, "file properties");
      check(H5Pset_link_creation_order(fcpl.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED), "file properties");
      Id fapl = checked(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "file properties");
      // Readable by HDF5 1.8 and later (h5py, MATLAB, HDFView).
      check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_V18), "file properties");
      Id file = checked(H5Fcreate(staging.path().c_str(), H5F_ACC_EXCL, fcpl.get(), fapl.get()), H5Fclose,
                        "create " + staging.path());
      h5::write_attribute(file.get(), "format", std::string("geomopt"));
      h5::write_attribute(file.get(), "format_version", std::int64_t{1});
      {
        Writer w(file.get(), options);
        for (const GroupView& g : groups) w.group(g);
      }
      file.close("close " + staging.path());
    }
    staging.commit();
  } catch (const Failure& f) {
    throw Error(context, {{ProblemKind::file, "", f.what()}});
  }
}

}  // namespace geomopt::io::detail

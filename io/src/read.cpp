// read_file: checks a file against the views of a tree (and of an optimizer's state), collecting every problem, and
// only then writes into the tree (docs/file_format.md has the matching rules).
//
// The data path. A block stored contiguously in the file, in exactly the tree's scalar type, is read with pread()
// from HDF5's own file descriptor at the dataset's address: straight into the tree when the memory orders agree,
// through a cache-sized buffer and a transpose when the tree's matrix is column-major, the blocks shared among up to
// four threads when there is enough data (for_each_block, which also sums the checksums). This is one pass over memory
// and touches no fresh pages (on virtual machines a first touch of fresh memory costs more than the copy). Every other
// block (chunked, compressed, another scalar type, bool) goes through HDF5 into a staging area first, before anything
// in the tree changes. What is left to fail after the checks is the operating system's read of the file (an I/O error
// of the device, or the file cut short underneath the load); the Error then says which leaves were already overwritten.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "checksum.hpp"
#include "geomopt/io/detail/view.hpp"
#include "geomopt/io/error.hpp"
#include "guard.hpp"
#include "h5.hpp"
#include "transpose.hpp"

namespace geomopt::io::detail {
namespace {

using h5::check;
using h5::checked;
using h5::EntryKind;
using h5::Failure;
using h5::Id;

// One block to read: where from, as what, and where it goes.
struct Planned {
  std::string h5path;  // the dataset
  std::string what;    // the leaf path (and block) for messages
  const BlockView* block;
  Dtype memory;            // the type HDF5 converts to while reading
  std::size_t offset = 0;  // in the staging area
  std::size_t bytes = 0;
  haddr_t address = HADDR_UNDEF;       // the data's offset in the file, for a block read by pread(); else staged
  Dtype stored = Dtype::f64;           // the dataset's scalar type in the file
  std::optional<std::uint32_t> crc{};  // the CRC-32 the file records for the data, when it has one and it is checked
  bool finite = false;                 // a parameter or optimizer state: NaN and infinity are checked
  const char* nonnegative = nullptr;   // a second moment (its slot name): negative numbers are checked
};

// The version of the layout this reader understands (the root's format_version).
constexpr std::int64_t kFormatVersion = 1;

// The staging area of the blocks HDF5 reads: one allocation, in huge pages where the kernel offers them, since page
// faults of a fresh buffer cost as much as the copy itself.
struct Arena {
  void* data = nullptr;
  std::size_t size = 0;
  explicit Arena(std::size_t bytes) : size(bytes) {
    if (bytes == 0) return;
    constexpr std::size_t kHuge = std::size_t{2} << 20;
    if (bytes >= kHuge) {
      const std::size_t rounded = (bytes + kHuge - 1) / kHuge * kHuge;
      data = std::aligned_alloc(kHuge, rounded);
#ifdef MADV_HUGEPAGE
      if (data != nullptr) ::madvise(data, rounded, MADV_HUGEPAGE);
#endif
    } else {
      data = std::malloc(bytes);
    }
    if (data == nullptr) throw Failure("cannot allocate " + std::to_string(bytes) + " bytes to stage the load");
  }
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;
  ~Arena() { std::free(data); }
  unsigned char* at(std::size_t offset) const { return static_cast<unsigned char*>(data) + offset; }
};

std::string shape_text(const std::vector<hsize_t>& dims) {
  if (dims.empty()) return "scalar";
  std::string s = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
  return s + (dims.size() == 1 ? ",)" : ")");
}
std::vector<hsize_t> block_dims(const BlockView& b) {
  if (b.rank == 0) return {};
  if (b.rank == 1) return {static_cast<hsize_t>(b.rows)};
  return {static_cast<hsize_t>(b.rows), static_cast<hsize_t>(b.cols)};
}
bool is_float(Dtype d) { return d == Dtype::f32 || d == Dtype::f64; }
bool is_integer(Dtype d) { return !is_float(d) && d != Dtype::boolean; }

class Reader {
 public:
  Reader(hid_t file, const LoadOptions& options, LoadReport& report, std::vector<Problem>& problems)
      : file_(file), options_(options), report_(report), problems_(problems) {}

  std::vector<std::pair<std::string, Attribute>> group(const GroupView& g) {
    const std::string root = "/" + g.group;
    std::vector<std::pair<std::string, Attribute>> attributes;
    const bool present = h5::exists_or_throw(file_, root);
    if (present) {
      Id obj = checked(H5Oopen(file_, root.c_str(), H5P_DEFAULT), H5Oclose, root);
      attributes = h5::read_attributes(obj.get());
      check_attributes_checksum(g, attributes);
    }
    compare_attributes(g, attributes, present);
    check_counters(g, attributes, present);
    if (!g.has_tree) return attributes;
    if (!present) {
      // One problem for the whole group: its leaves are missing because it is, not one by one.
      std::string why = "no group " + root + " in the file (" + root_listing() + ")";
      if (options_.strict) {
        if (!g.leaves.empty())
          why += ": the tree's " + std::to_string(g.leaves.size()) +
                 (g.leaves.size() == 1 ? " leaf is" : " leaves are") + " missing";
        problems_.push_back({ProblemKind::missing, "", why});
      } else {
        for (const LeafView& leaf : g.leaves) missing(g, leaf.path);
      }
      return attributes;
    }
    const auto entries = h5::list_links(file_, root, nullptr);
    std::set<std::string> known;
    for (const LeafView& leaf : g.leaves) {
      known.insert(leaf.path);
      const auto it = entries.find(leaf.path);
      if (it == entries.end()) {
        missing(g, leaf.path);
        continue;
      }
      plan_leaf(g, leaf, it->second);
    }
    for (const AliasView& a : g.aliases) {
      known.insert(a.path);
      const auto alias = entries.find(a.path);
      const auto target = entries.find(a.target);
      const bool linked = alias != entries.end() && target != entries.end() && alias->second.address != HADDR_UNDEF &&
                          alias->second.address == target->second.address;
      if (linked) continue;
      const std::string why = alias == entries.end()
                                  ? "tied to " + a.target + " in the tree; the file has no link here"
                                  : "tied to " + a.target + " in the tree; a separate object in the file";
      if (options_.strict)
        problems_.push_back({ProblemKind::tie, label(g, a.path), why});
      else
        report_.differences.push_back(label(g, a.path) + ": " + why);
    }
    for (const auto& [dotted, e] : entries) {
      if (e.kind == EntryKind::group) continue;
      if (known.count(dotted) != 0 || under_alias(g, dotted)) continue;
      if (options_.strict)
        problems_.push_back({ProblemKind::unexpected, label(g, dotted), "in the file, not in the tree"});
      else
        report_.unexpected.push_back(label(g, dotted));
    }
    return attributes;
  }

  std::vector<Planned>& plan() { return plan_; }
  /// A manifold point to check against its manifold: its blocks are plan()[first], ... in order.
  struct Point {
    std::string where;
    const LeafView* leaf;
    std::size_t first;
  };
  const std::vector<Point>& points() const { return points_; }
  std::size_t total() const { return total_; }

 private:
  // Paths outside /params carry their group, so a report tells parameters from optimizer state.
  static std::string label(const GroupView& g, const std::string& path) {
    if (g.group == "params") return path;
    return g.group + ":" + path;
  }
  static bool under_alias(const GroupView& g, const std::string& dotted) {
    for (const AliasView& a : g.aliases)
      if (dotted.size() > a.path.size() && dotted.compare(0, a.path.size(), a.path) == 0 &&
          dotted[a.path.size()] == '.')
        return true;
    return false;
  }

  std::string root_listing() {
    try {
      std::vector<std::string> order;
      const auto entries = h5::list_links(file_, "/", &order);
      std::string s;
      int n = 0;
      for (const auto& dotted : order) {
        if (dotted.empty() || dotted.find('.') != std::string::npos) continue;
        s += (n++ ? ", /" : "/") + dotted;
        if (n == 8) {
          s += ", ...";
          break;
        }
      }
      return s.empty() ? "the file's root is empty" : "its root holds " + s;
    } catch (const Failure&) {
      return "its root cannot be listed";
    }
  }

  void missing(const GroupView& g, const std::string& path) {
    if (options_.strict)
      problems_.push_back({ProblemKind::missing, label(g, path), "in the tree, not in the file"});
    else
      report_.missing.push_back(label(g, path));
  }

  // The attributes' CRC-32, where the file records one; the checksum attribute itself is then dropped from the
  // list, so that it never reaches a report's metadata.
  void check_attributes_checksum(const GroupView& g, std::vector<std::pair<std::string, Attribute>>& found) {
    const auto it =
        std::find_if(found.begin(), found.end(), [](const auto& a) { return a.first == kAttributesChecksumAttribute; });
    if (it == found.end()) return;
    const Attribute recorded = it->second;
    found.erase(it);
    if (!options_.verify_checksums) return;
    const std::uint32_t actual = attributes_crc32(found);
    const auto* r = std::get_if<std::int64_t>(&recorded);
    if (r != nullptr && *r == static_cast<std::int64_t>(actual)) return;
    problems_.push_back({ProblemKind::checksum, g.group,
                         "the attributes of /" + g.group + " do not match their checksum (" +
                             kAttributesChecksumAttribute + " is " + h5::attribute_text(recorded) +
                             ", the attributes give " + std::to_string(actual) +
                             "): they were changed or damaged after the save"});
  }

  void check_counters(const GroupView& g, const std::vector<std::pair<std::string, Attribute>>& found, bool present) {
    if (!present) return;  // the missing group is reported by itself
    for (const auto& counter : g.counters) {
      const std::string& name = counter.first;  // not a structured binding: clang 14 cannot capture one
      const std::int64_t bound = counter.second;
      const auto it = std::find_if(found.begin(), found.end(), [&](const auto& a) { return a.first == name; });
      const std::string expected = "an integer from 0 to " + std::to_string(bound) + " is expected";
      if (it == found.end()) {
        const std::string why = name + " is absent in the file; " + expected;
        if (options_.strict)
          problems_.push_back({ProblemKind::metadata, g.group, why});
        else
          report_.differences.push_back(g.group + ": " + why + " (the state keeps its own)");
        continue;
      }
      const Attribute& v = it->second;
      if (const auto* i = std::get_if<std::int64_t>(&v); i != nullptr && *i >= 0 && *i <= bound) continue;
      problems_.push_back(
          {ProblemKind::metadata, g.group, name + " is " + counter_text(v) + " in the file; " + expected});
    }
    check_leaf_steps(g, found);
  }

  // A checkpoint's per-leaf step counts ("<path>:step", written for a leaf that sat steps out): each an integer from
  // 0 to the file's step count, always (a load sets them after writing the arrays, so nothing may fail then).
  void check_leaf_steps(const GroupView& g, const std::vector<std::pair<std::string, Attribute>>& found) {
    const auto step = std::find_if(found.begin(), found.end(), [](const auto& a) { return a.first == "step"; });
    const bool counted =
        std::any_of(g.counters.begin(), g.counters.end(), [](const auto& c) { return c.first == "step"; });
    if (!counted || step == found.end() || !std::holds_alternative<std::int64_t>(step->second)) return;
    const std::int64_t bound = std::get<std::int64_t>(step->second);
    for (const auto& [name, v] : found) {
      if (!is_leaf_step(name)) continue;
      if (const auto* i = std::get_if<std::int64_t>(&v); i != nullptr && *i >= 0 && *i <= bound) continue;
      problems_.push_back({ProblemKind::metadata, g.group + ":" + name.substr(0, name.rfind(':')),
                           "step is " + counter_text(v) + " in the file; an integer from 0 to the step count " +
                               std::to_string(bound) + " is expected"});
    }
  }

  // A counter's value as a message shows it: the number when it is an integer, else what it is.
  static std::string counter_text(const Attribute& v) {
    if (const auto* i = std::get_if<std::int64_t>(&v)) return std::to_string(*i);
    if (std::holds_alternative<double>(v)) return "the real number " + h5::attribute_text(v);
    return "the string " + h5::attribute_text(v);
  }

  // The group's attributes against the view's, by one rule for the group's own (a checkpoint's hyperparameters) and
  // for its leaves' (per-leaf options, "<path>:<name>"): equal, or a `metadata` problem in a strict load (except a
  // required one: always) whose message says how to load anyway, and a difference in a lenient one. A lenient load
  // never copies these values into the state: the settings in memory decide the steps.
  void compare_attributes(const GroupView& g, const std::vector<std::pair<std::string, Attribute>>& found,
                          bool present) {
    auto of_leaf = [](const std::string& name) { return name.find(':') != std::string::npos; };
    const bool leaves_here =
        std::any_of(g.attributes.begin(), g.attributes.end(), [&](const auto& a) { return of_leaf(a.first); });
    const bool leaves_in_file =
        std::any_of(found.begin(), found.end(), [&](const auto& a) { return of_leaf(a.first); });
    // A file written before the per-leaf options were recorded has none: nothing to compare them with.
    const bool unrecorded = present && leaves_here && !leaves_in_file;
    if (unrecorded)
      report_.differences.push_back(g.group +
                                    ": the file records no per-leaf options (lr_scale, weight_decay, frozen, "
                                    "retraction): a checkpoint written before geomopt recorded them; not compared");
    auto differ = [&](const std::string& name, const std::string& what, bool required) {
      const auto colon = name.rfind(':');
      const std::string where = colon == std::string::npos ? g.group : g.group + ":" + name.substr(0, colon);
      const std::string why = (colon == std::string::npos ? name : name.substr(colon + 1)) + " " + what;
      if (required)
        problems_.push_back({ProblemKind::metadata, where, why});
      else if (options_.strict)
        problems_.push_back({ProblemKind::metadata, where,
                             why + "; a lenient load (LoadOptions::strict = false) loads anyway, lists it, and steps "
                                   "with the value here"});
      else
        report_.differences.push_back(where + ": " + why);
    };
    // By name: a checkpoint of a few hundred leaves has a thousand or more attributes.
    std::unordered_map<std::string_view, const Attribute*> in_file;
    for (const auto& [n, v] : found) in_file.emplace(n, &v);
    std::unordered_set<std::string_view> here;
    std::set<std::string> leaves;  // the paths the view has options for
    for (const auto& [name, value] : g.attributes) {
      here.insert(name);
      const bool required = std::find(g.required.begin(), g.required.end(), name) != g.required.end();
      if (of_leaf(name)) {
        if (unrecorded) continue;
        leaves.insert(name.substr(0, name.rfind(':')));
      }
      const auto it = in_file.find(name);
      const Attribute* f = it == in_file.end() ? nullptr : it->second;
      if (f != nullptr && *f == value) continue;
      // A hyperparameter written by another tool may be an integer where geomopt has a double.
      if (f != nullptr && std::holds_alternative<std::int64_t>(*f) && std::holds_alternative<double>(value) &&
          static_cast<double>(std::get<std::int64_t>(*f)) == std::get<double>(value))
        continue;
      if (!present && !required && !options_.strict) continue;
      differ(name,
             f == nullptr ? "is " + h5::attribute_text(value) + " here, absent in the file"
                          : "is " + h5::attribute_text(*f) + " in the file, " + h5::attribute_text(value) + " here",
             required);
    }
    // An option the file records for one of these leaves and the state does not (a weight decay the rule no longer
    // sets).
    for (const auto& [name, value] : found) {
      if (!of_leaf(name) || is_leaf_step(name) || here.count(name) != 0 ||
          leaves.count(name.substr(0, name.rfind(':'))) == 0)
        continue;
      differ(name, "is " + h5::attribute_text(value) + " in the file, not set here", false);
    }
  }

  void plan_leaf(const GroupView& g, const LeafView& leaf, const h5::Entry& e) {
    const std::string where = label(g, leaf.path);
    if (e.names > 1) {
      problems_.push_back({ProblemKind::type, where,
                           "ambiguous: " + std::to_string(e.names) + " links in the file have this dotted path"});
      return;
    }
    if (e.kind == EntryKind::other) {
      problems_.push_back({ProblemKind::type, where, "a soft or external link in the file, which is not followed"});
      return;
    }
    if (e.kind == EntryKind::group) {
      problems_.push_back({ProblemKind::type, where,
                           std::string(leaf.structured ? "a " + leaf.type + " leaf" : "a leaf") +
                               " in the tree, a group of branches in the file"});
      return;
    }
    if (!leaf.structured) {
      if (e.kind != EntryKind::dataset) {
        problems_.push_back({ProblemKind::type, where, "a plain array in the tree, a structured leaf in the file"});
        return;
      }
      if (plan_block(where, e.h5path, leaf.blocks.at(0), g, leaf))
        (g.state ? report_.state : report_.loaded).push_back(where);
      return;
    }
    if (e.kind != EntryKind::structured) {
      problems_.push_back({ProblemKind::type, where, leaf.type + " in the tree, a plain dataset in the file"});
      return;
    }
    Id grp = checked(H5Oopen(file_, e.h5path.c_str(), H5P_DEFAULT), H5Oclose, where);
    bool ok = true;
    const auto type = h5::read_attribute(grp.get(), "type");
    const std::string file_type =
        type && std::holds_alternative<std::string>(*type) ? std::get<std::string>(*type) : std::string("(unreadable)");
    if (file_type != leaf.type) {
      problems_.push_back({ProblemKind::type, where, file_type + " in the file, " + leaf.type + " in the tree"});
      return;
    }
    for (const auto& [name, value] : leaf.metadata) {
      const auto f = h5::read_attribute(grp.get(), name);
      if (f && std::holds_alternative<std::int64_t>(*f) && std::get<std::int64_t>(*f) == value) continue;
      std::string found_text = "absent";
      if (f && std::holds_alternative<std::int64_t>(*f))
        found_text = h5::attribute_text(*f);
      else if (f && std::holds_alternative<double>(*f))
        found_text = "the real number " + h5::attribute_text(*f) + " (an integer attribute is expected)";
      else if (f)
        found_text = "the string " + h5::attribute_text(*f) + " (an integer attribute is expected)";
      problems_.push_back({ProblemKind::metadata, where,
                           name + " is " + found_text + " in the file, " + std::to_string(value) + " in the tree"});
      ok = false;
    }
    H5G_info_t info;
    check(H5Gget_info(grp.get(), &info), where);
    if (info.nlinks != leaf.blocks.size()) {
      problems_.push_back({ProblemKind::shape, where,
                           std::to_string(info.nlinks) + " storage blocks in the file, " +
                               std::to_string(leaf.blocks.size()) + " in the tree"});
      return;
    }
    for (std::size_t b = 0; b < leaf.blocks.size(); ++b) {
      const std::string name = std::to_string(b);
      const htri_t has = H5Lexists(grp.get(), name.c_str(), H5P_DEFAULT);
      if (has <= 0) {
        H5Eclear2(H5E_DEFAULT);
        problems_.push_back({ProblemKind::missing, where + " (block " + name + ")", "no dataset \"" + name + "\""});
        ok = false;
        continue;
      }
      ok = plan_block(where + (leaf.blocks.size() > 1 ? " (block " + name + ")" : ""), e.h5path + "/" + name,
                      leaf.blocks[b], g, leaf) &&
           ok;
    }
    if (ok && g.check_points && leaf.validate) points_.push_back({where, &leaf, plan_.size() - leaf.blocks.size()});
    if (ok) (g.state ? report_.state : report_.loaded).push_back(where);
  }

  bool plan_block(const std::string& where, const std::string& h5path, const BlockView& b, const GroupView& g,
                  const LeafView& leaf) {
    Id d = checked(H5Oopen(file_, h5path.c_str(), H5P_DEFAULT), H5Oclose, where);
    if (H5Iget_type(d.get()) != H5I_DATASET) {
      problems_.push_back({ProblemKind::type, where, "a group in the file where a dataset was expected"});
      return false;
    }
    bool ok = true;
    const auto dims = h5::dimensions(d.get());
    const auto want = block_dims(b);
    if (!dims) {
      problems_.push_back(
          {ProblemKind::shape, where, "an empty (null) dataspace in the file, " + shape_text(want) + " in the tree"});
      ok = false;
    } else if (*dims != want) {
      problems_.push_back({ProblemKind::shape, where,
                           "shape " + shape_text(*dims) + " in the file, " + shape_text(want) + " in the tree"});
      ok = false;
    }
    Id type = checked(H5Dget_type(d.get()), H5Tclose, where);
    std::string unsupported;
    const auto dtype = h5::classify(type.get(), &unsupported);
    Dtype memory = b.dtype;
    if (!dtype) {
      problems_.push_back(
          {ProblemKind::dtype, where, unsupported + " in the file, " + dtype_name(b.dtype) + " in the tree"});
      return false;
    }
    if (*dtype != b.dtype) {
      const bool castable =
          options_.cast && ((is_float(*dtype) && is_float(b.dtype)) || (is_integer(*dtype) && is_integer(b.dtype)));
      const bool bool_bytes = b.dtype == Dtype::boolean && dtype_size(*dtype) == 1 && is_integer(*dtype);
      if (bool_bytes) {
        memory = *dtype;
      } else if (castable) {
        report_.cast.push_back(where + ": " + dtype_name(*dtype) + " -> " + dtype_name(b.dtype));
      } else {
        problems_.push_back({ProblemKind::dtype, where,
                             std::string(dtype_name(*dtype)) + " in the file, " + dtype_name(b.dtype) + " in the tree" +
                                 (is_float(*dtype) && is_float(b.dtype) ? " (LoadOptions::cast converts)" : "")});
        ok = false;
      }
    }
    std::optional<std::uint32_t> crc;
    if (options_.verify_checksums) {
      if (const auto recorded = h5::read_attribute(d.get(), kChecksumAttribute)) {
        const auto* r = std::get_if<std::int64_t>(&*recorded);
        if (r == nullptr || *r < 0 || *r > 0xFFFFFFFFLL) {
          problems_.push_back({ProblemKind::checksum, where,
                               std::string("the checksum attribute ") + kChecksumAttribute + " is " +
                                   h5::attribute_text(*recorded) + "; a CRC-32 from 0 to 4294967295 is expected"});
          return false;
        }
        crc = static_cast<std::uint32_t>(*r);
      }
    }
    if (!ok) return false;
    Planned p{h5path, where, &b, memory, 0, dtype_size(b.dtype) * static_cast<std::size_t>(b.rows * b.cols)};
    p.stored = *dtype;
    p.crc = crc;
    p.finite = g.check_values && (g.state || leaf.trainable);
    p.nonnegative = g.check_values && leaf.nonnegative ? leaf.segments.back().c_str() : nullptr;
    if (memory == b.dtype && b.dtype != Dtype::boolean && p.bytes != 0)
      p.address = raw_address(d.get(), type.get(), b, p.bytes);
    if (p.address == HADDR_UNDEF) {
      p.offset = total_;
      total_ += (p.bytes + 63) / 64 * 64;  // every staged block 64-byte aligned
    }
    plan_.push_back(std::move(p));
    return true;
  }

  // Where a block's bytes lie in the file, when pread() can take them as they are: contiguous storage inside the
  // file, no user block, HDF5's own POSIX driver, and the file's type bit-identical to the tree's native type.
  haddr_t raw_address(hid_t dataset, hid_t type, const BlockView& b, std::size_t bytes) {
    if (fd_ < 0) return HADDR_UNDEF;
    Id dcpl = checked(H5Dget_create_plist(dataset), H5Pclose, "dataset properties");
    if (H5Pget_layout(dcpl.get()) != H5D_CONTIGUOUS || H5Pget_external_count(dcpl.get()) != 0) return HADDR_UNDEF;
    Id native = h5::memory_type(b.dtype);
    if (H5Tequal(type, native.get()) <= 0) {
      H5Eclear2(H5E_DEFAULT);
      return HADDR_UNDEF;
    }
    const haddr_t address = H5Dget_offset(dataset);
    if (address == HADDR_UNDEF) {  // never written: HDF5 gives the fill value
      H5Eclear2(H5E_DEFAULT);
      return HADDR_UNDEF;
    }
    if (address > file_size_ || bytes > file_size_ - address) return HADDR_UNDEF;  // HDF5 reports it
    return address;
  }

 public:
  /// Reads by pread() from this descriptor (HDF5's own, so the very file it checked) of a file of this size.
  void allow_raw(int fd, std::uint64_t size) {
    fd_ = fd;
    file_size_ = size;
  }

 private:
  hid_t file_;
  LoadOptions options_;
  LoadReport& report_;
  std::vector<Problem>& problems_;
  std::vector<Planned> plan_;
  std::vector<Point> points_;
  std::size_t total_ = 0;  // bytes of the staging area
  int fd_ = -1;
  std::uint64_t file_size_ = 0;
};

// HDF5's POSIX file descriptor of an open file, and the file's size; -1 when the file is not on that driver or has
// a user block (then every block goes through HDF5).
int raw_descriptor(hid_t file, std::uint64_t* size) {
  Id fcpl = checked(H5Fget_create_plist(file), H5Pclose, "file properties");
  hsize_t user_block = 0;
  check(H5Pget_userblock(fcpl.get(), &user_block), "file properties");
  Id fapl = checked(H5Fget_access_plist(file), H5Pclose, "file properties");
  if (user_block != 0 || H5Pget_driver(fapl.get()) != H5FD_SEC2) return -1;
  void* handle = nullptr;
  if (H5Fget_vfd_handle(file, H5P_DEFAULT, &handle) < 0 || handle == nullptr) {
    H5Eclear2(H5E_DEFAULT);
    return -1;
  }
  const int fd = *static_cast<int*>(handle);
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return -1;
  *size = static_cast<std::uint64_t>(st.st_size);
  return fd;
}

// Reads bytes at offset in full; false with errno set on a failure or a short file.
bool pread_all(int fd, void* into, std::size_t bytes, std::uint64_t offset) {
  auto* p = static_cast<unsigned char*>(into);
  while (bytes != 0) {
    const ssize_t got = ::pread(fd, p, bytes, static_cast<off_t>(offset));
    if (got < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    if (got == 0) {
      errno = ENODATA;
      return false;
    }
    p += got;
    bytes -= static_cast<std::size_t>(got);
    offset += static_cast<std::uint64_t>(got);
  }
  return true;
}

// One block by pread(): whole when the tree's memory order is the file's, else in row panels of about 256 KiB that
// are transposed into the column-major matrix while they are in cache.
bool read_raw(int fd, const Planned& p, std::vector<unsigned char>& panel) {
  const BlockView& b = *p.block;
  if (!(b.rank == 2 && !b.row_major && b.rows > 1 && b.cols > 1)) return pread_all(fd, b.data, p.bytes, p.address);
  const std::size_t esize = dtype_size(b.dtype);
  const std::size_t row_bytes = static_cast<std::size_t>(b.cols) * esize;
  constexpr std::size_t kPanelBytes = std::size_t{256} << 10;
  const std::int64_t panel_rows =
      std::max<std::int64_t>(1, std::min<std::int64_t>(b.rows, static_cast<std::int64_t>(kPanelBytes / row_bytes)));
  if (panel.size() < static_cast<std::size_t>(panel_rows) * row_bytes)
    panel.resize(static_cast<std::size_t>(panel_rows) * row_bytes);
  auto* dst = static_cast<unsigned char*>(b.data);
  for (std::int64_t i0 = 0; i0 < b.rows; i0 += panel_rows) {
    const std::int64_t r = std::min(panel_rows, b.rows - i0);
    if (!pread_all(fd, panel.data(), static_cast<std::size_t>(r) * row_bytes,
                   p.address + static_cast<std::uint64_t>(i0) * row_bytes))
      return false;
    // The panel is r x cols row-major; the destination's rows i0.. are a cols x r row-major view with stride rows.
    transpose(dst + static_cast<std::size_t>(i0) * esize, panel.data(), b.cols, r, b.cols, esize, b.rows);
  }
  return true;
}

// Runs work(block, buffer) for each of `blocks` on up to kMaxReaders threads (this one and helpers) when there is at
// least kBytesPerReader of data for each: copying out of the page cache, transposing and computing checksums are
// bound by one core's memory traffic, not by the device, so a second core nearly halves a large load. Blocks are
// handed out one at a time, each thread with its own buffer; the first block for which work() returns false stops
// the rest. Returns that block (errno, as work() left it, in *error), or nullptr; *done counts the blocks finished,
// whichever thread did them.
template <class Work>
const Planned* for_each_block(const std::vector<const Planned*>& blocks, Work&& work, std::size_t* done, int* error) {
  constexpr std::size_t kMaxReaders = 4;
  constexpr std::size_t kBytesPerReader = std::size_t{16} << 20;
  std::size_t bytes = 0;
  for (const Planned* p : blocks) bytes += p->bytes;
  const std::size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t readers = std::min(
      {kMaxReaders, cores, std::max<std::size_t>(1, bytes / kBytesPerReader), std::max<std::size_t>(1, blocks.size())});
  std::atomic<std::size_t> next{0}, finished{0};
  std::atomic<bool> stop{false};
  std::mutex failure;
  const Planned* failed = nullptr;
  auto run = [&] {
    std::vector<unsigned char> buffer;
    while (!stop.load(std::memory_order_relaxed)) {
      const std::size_t i = next.fetch_add(1, std::memory_order_relaxed);
      if (i >= blocks.size()) return;
      if (work(*blocks[i], buffer)) {
        finished.fetch_add(1, std::memory_order_relaxed);
        continue;
      }
      const int e = errno;
      const std::lock_guard<std::mutex> lock(failure);
      if (failed == nullptr) {
        failed = blocks[i];
        *error = e;
      }
      stop = true;
    }
  };
  std::vector<std::thread> helpers;
  for (std::size_t t = 1; t < readers; ++t) {
    try {
      helpers.emplace_back(run);
    } catch (const std::system_error&) {
      break;  // no thread to spare: the others do it all
    }
  }
  run();
  for (std::thread& h : helpers) h.join();
  *done = finished.load();
  return failed;
}

// The blocks of the plan that pread() reads (at an address in the file, not staged).
std::vector<const Planned*> raw_blocks(const std::vector<Planned>& plan) {
  std::vector<const Planned*> raw;
  for (const Planned& p : plan)
    if (p.address != HADDR_UNDEF) raw.push_back(&p);
  return raw;
}

void commit(const Planned& p, const unsigned char* src) {
  const BlockView& b = *p.block;
  const std::size_t n = static_cast<std::size_t>(b.rows * b.cols);
  if (b.dtype == Dtype::boolean) {
    bool* dst = static_cast<bool*>(b.data);
    for (std::size_t i = 0; i < n; ++i) dst[i] = src[i] != 0;
  } else if (b.rank == 2 && !b.row_major && b.rows > 1 && b.cols > 1) {
    // The staged block is rows x cols row-major, which is its transpose column-major.
    transpose(b.data, src, b.cols, b.rows, b.cols, dtype_size(b.dtype));
  } else if (n != 0) {
    std::memcpy(b.data, src, p.bytes);
  }
}

// The root's format_version: a version this reader does not know is always refused (its layout may mean something
// else); an absent one is accepted for a plain tree (h5py writes none) and refused by a strict checkpoint load, whose
// step and state layout are geomopt's own.
void check_format_version(hid_t file, const std::vector<GroupView>& groups, const LoadOptions& options,
                          std::vector<Problem>& problems) {
  Id root = checked(H5Oopen(file, "/", H5P_DEFAULT), H5Oclose, "/");
  const auto v = h5::read_attribute(root.get(), "format_version");
  const std::string known = "this reader understands format_version " + std::to_string(kFormatVersion);
  if (!v) {
    const bool checkpoint = std::any_of(groups.begin(), groups.end(), [](const GroupView& g) { return g.state; });
    if (checkpoint && options.strict)
      problems.push_back({ProblemKind::metadata, "",
                          "format_version is absent from the file's root; " + known +
                              " (a checkpoint saved by geomopt has it; LoadOptions::strict = false reads without)"});
    return;
  }
  const auto* i = std::get_if<std::int64_t>(&*v);
  if (i != nullptr && *i == kFormatVersion) return;
  std::string found = h5::attribute_text(*v);
  if (i == nullptr) found = (std::holds_alternative<double>(*v) ? "the real number " : "the string ") + found;
  problems.push_back(
      {ProblemKind::metadata, "",
       "format_version is " + found + " in the file; " + known +
           (i != nullptr && *i > kFormatVersion ? " (a newer geomopt wrote the file: update to read it)" : "")});
}

// The CRC-32 of a block's bytes in the file, read by pread() through a buffer that stays in cache; false with errno
// set when the read fails.
// Numbers a parameter or a state array may not hold.
struct ValueCount {
  std::size_t non_finite = 0, negative = 0;
};
template <class S>
void count_values(const unsigned char* p, std::size_t bytes, bool nonnegative, ValueCount& c) {
  for (std::size_t i = 0; i + sizeof(S) <= bytes; i += sizeof(S)) {
    S v;
    std::memcpy(&v, p + i, sizeof(S));
    if (!std::isfinite(v))
      ++c.non_finite;
    else if (nonnegative && v < 0)
      ++c.negative;
  }
}
void count_values(const Planned& p, const unsigned char* data, std::size_t bytes, ValueCount& c) {
  if (!p.finite && p.nonnegative == nullptr) return;
  if (p.block->dtype == Dtype::f64) count_values<double>(data, bytes, p.nonnegative != nullptr, c);
  if (p.block->dtype == Dtype::f32) count_values<float>(data, bytes, p.nonnegative != nullptr, c);
}

// The CRC-32 of a block's bytes in the file and its numbers' count, read by pread() through a buffer that stays in
// cache; false with errno set when the read fails.
bool raw_inspect(int fd, const Planned& p, std::vector<unsigned char>& buffer, std::uint32_t* crc, ValueCount& values) {
  constexpr std::size_t kBufferBytes = std::size_t{256} << 10;
  if (buffer.size() < kBufferBytes) buffer.resize(kBufferBytes);
  std::uint32_t c = 0;
  for (std::size_t done = 0; done < p.bytes;) {
    const std::size_t n = std::min(kBufferBytes, p.bytes - done);
    if (!pread_all(fd, buffer.data(), n, p.address + done)) return false;
    if (p.crc) c = crc32(c, buffer.data(), n);
    count_values(p, buffer.data(), n, values);
    done += n;
  }
  *crc = c;
  return true;
}

std::string checksum_mismatch(std::uint32_t recorded, std::uint32_t actual) {
  return "the data does not match its checksum (crc32 is " + std::to_string(recorded) +
         " in the file, the data gives " + std::to_string(actual) + "): it was changed or damaged after the save";
}

// The whole load; `dry` (in crash_guard's forked child) does all of it, in the same order and with the same
// allocations, but stops before the commit, so the child replays exactly what this process is about to do.
LoadReport read_pass(const std::string& filename, const std::vector<GroupView>& groups, const LoadOptions& options,
                     GroupAttributes* attributes, const std::string& context, bool dry) {
  auto file_problem = [&](const std::string& message) { return Error(context, {{ProblemKind::file, "", message}}); };
  LoadReport report;
  std::vector<Problem> problems;
  try {
    const htri_t is_hdf5 = H5Fis_hdf5(filename.c_str());
    if (is_hdf5 <= 0) {
      h5::last_error();
      throw file_problem(filename + " is not an HDF5 file (no HDF5 signature)");
    }
    Id fapl = checked(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "file properties");
    check(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG), "file properties");
    const hid_t raw = H5Fopen(filename.c_str(), H5F_ACC_RDONLY, fapl.get());
    if (raw < 0)
      throw file_problem("cannot open " + filename + " as HDF5 (corrupt or truncated?): " + h5::last_error());
    Id file(raw, H5Fclose);

    check_format_version(file.get(), groups, options, problems);
    Reader reader(file.get(), options, report, problems);
    std::uint64_t file_size = 0;
    const int fd = raw_descriptor(file.get(), &file_size);
    reader.allow_raw(fd, file_size);
    GroupAttributes found;
    for (const GroupView& g : groups) found.push_back(reader.group(g));
    // The dry pass goes on to the data: a lenient load reads the same blocks as a strict one.
    if (!problems.empty() && !dry) throw Error(context, std::move(problems));

    // The staged blocks first: they go through HDF5's index and filters, the part of a read that a damaged
    // file can make fail.
    Arena arena(reader.total());
    for (Planned& p : reader.plan()) {
      if (p.address != HADDR_UNDEF || p.bytes == 0) continue;
      Id d = checked(H5Dopen2(file.get(), p.h5path.c_str(), H5P_DEFAULT), H5Dclose, p.what);
      Id mtype = h5::memory_type(p.memory);
      if (H5Dread(d.get(), mtype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, arena.at(p.offset)) < 0)
        problems.push_back({ProblemKind::file, p.what, "cannot read the data: " + h5::last_error()});
    }
    if (!problems.empty()) throw Error(context, std::move(problems));
    if (dry) return report;
    // The checksums, before anything in the tree changes. A staged block holds the file's values in the file's own
    // scalar type unless a cast converted it; a converted one is read once more as stored.
    static_assert(std::endian::native == std::endian::little, "checksums are computed on little-endian bytes");
    // The values in the same pass: NaN or infinity in a parameter or in the optimizer's state (buffers may hold
    // them: masks, running maxima) and a negative second moment are errors in a strict load and reported
    // differences in a lenient one, which may need to load a diverged run.
    const std::vector<Planned>& plan = reader.plan();
    auto inspected = [](const Planned& p) {
      return p.crc || ((p.finite || p.nonnegative != nullptr) && is_float(p.block->dtype));
    };
    // The blocks read by pread() are inspected on the reader threads (for_each_block), every one of them: each
    // failure is reported.
    std::vector<std::uint32_t> raw_sums(plan.size(), 0);
    std::vector<ValueCount> raw_counts(plan.size());
    std::vector<int> raw_errors(plan.size(), 0);
    {
      std::vector<const Planned*> todo;
      for (const Planned* p : raw_blocks(plan))
        if (inspected(*p) && p->bytes != 0) todo.push_back(p);
      std::size_t done = 0;
      int unused = 0;
      for_each_block(
          todo,
          [&](const Planned& p, std::vector<unsigned char>& buffer) {
            const auto i = static_cast<std::size_t>(&p - plan.data());
            if (!raw_inspect(fd, p, buffer, &raw_sums[i], raw_counts[i])) raw_errors[i] = errno;
            return true;
          },
          &done, &unused);
    }
    for (const Planned& p : plan) {
      if (!inspected(p)) continue;
      const auto i = static_cast<std::size_t>(&p - plan.data());
      std::uint32_t actual = 0;
      ValueCount count;
      if (p.bytes == 0) {
        actual = crc32(0, nullptr, 0);
      } else if (p.address != HADDR_UNDEF) {
        if (raw_errors[i] != 0) {
          problems.push_back({ProblemKind::file, p.what,
                              std::string("cannot read the data to check it: ") + std::strerror(raw_errors[i])});
          continue;
        }
        actual = raw_sums[i];
        count = raw_counts[i];
      } else {
        count_values(p, arena.at(p.offset), p.bytes, count);
      }
      const std::size_t n = static_cast<std::size_t>(p.block->rows * p.block->cols);
      auto value_problem = [&](const std::string& why) {
        if (options.strict)
          problems.push_back({ProblemKind::value, p.what, why});
        else
          report.differences.push_back(p.what + ": " + why);
      };
      if (count.non_finite != 0)
        value_problem(std::to_string(count.non_finite) + " of " + std::to_string(n) +
                      " numbers are NaN or infinite in the file; a strict load refuses them in parameters and "
                      "optimizer state (LoadOptions::strict = false loads them and reports them)");
      if (count.negative != 0)
        value_problem(std::to_string(count.negative) + " of " + std::to_string(n) +
                      " numbers are negative in the file; " + p.nonnegative + " is a second moment, never negative");
      if (!p.crc || p.bytes == 0 || p.address != HADDR_UNDEF) {
        if (p.crc && actual != *p.crc)
          problems.push_back({ProblemKind::checksum, p.what, checksum_mismatch(*p.crc, actual)});
        continue;
      }
      if (p.memory == p.stored) {
        actual = crc32(0, arena.at(p.offset), p.bytes);
      } else {
        const std::size_t n = static_cast<std::size_t>(p.block->rows * p.block->cols);
        std::vector<unsigned char> as_stored(n * dtype_size(p.stored));
        Id d = checked(H5Dopen2(file.get(), p.h5path.c_str(), H5P_DEFAULT), H5Dclose, p.what);
        Id mtype = h5::memory_type(p.stored);
        if (H5Dread(d.get(), mtype.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, as_stored.data()) < 0) {
          problems.push_back({ProblemKind::file, p.what, "cannot read the data: " + h5::last_error()});
          continue;
        }
        actual = crc32(0, as_stored.data(), as_stored.size());
      }
      if (actual != *p.crc) problems.push_back({ProblemKind::checksum, p.what, checksum_mismatch(*p.crc, actual)});
    }
    // Manifold points, from their blocks as the file holds them.
    for (const Reader::Point& point : reader.points()) {
      std::vector<std::vector<unsigned char>> raw;
      std::vector<const void*> blocks;
      bool readable = true;
      for (std::size_t b = 0; b < point.leaf->blocks.size(); ++b) {
        const Planned& p = reader.plan()[point.first + b];
        if (p.address == HADDR_UNDEF) {
          blocks.push_back(arena.at(p.offset));
          continue;
        }
        raw.emplace_back(p.bytes);
        if (!pread_all(fd, raw.back().data(), p.bytes, p.address)) {
          problems.push_back({ProblemKind::file, p.what, std::string("cannot read the data: ") + std::strerror(errno)});
          readable = false;
          break;
        }
        blocks.push_back(raw.back().data());
      }
      if (!readable) continue;
      const std::string why = point.leaf->validate(blocks);
      if (why.empty()) continue;
      if (options.strict)
        problems.push_back({ProblemKind::value, point.where, why});
      else
        report.differences.push_back(point.where + ": " + why);
    }
    if (!problems.empty()) throw Error(context, std::move(problems));
    // Everything is checked: the tree changes now. Only the operating system's read can still fail.
    std::size_t written = 0;
    int error = 0;
    if (const Planned* failed = for_each_block(
            raw_blocks(reader.plan()),
            [fd](const Planned& p, std::vector<unsigned char>& panel) { return read_raw(fd, p, panel); }, &written,
            &error)) {
      problems.push_back({ProblemKind::file, failed->what,
                          "the operating system failed to read the data (" + std::string(std::strerror(error)) +
                              ") after every check had passed; the tree is partly loaded (" + std::to_string(written) +
                              " blocks were already read into it)"});
      throw Error(context, std::move(problems));
    }
    for (const Planned& p : reader.plan())
      if (p.address == HADDR_UNDEF) commit(p, arena.at(p.offset));
    if (attributes != nullptr) *attributes = std::move(found);
  } catch (const Failure& f) {
    throw file_problem(std::string("the file is damaged or not in geomopt's layout: ") + f.what());
  }
  return report;
}

// What the path names, when it is not a regular file a load can open, and a file another HDF5 writer holds locked
// (HDF5's own message would only say that the open failed).
void check_openable(const std::string& filename, const std::string& context) {
  auto refuse = [&](const std::string& why) { throw Error(context, {{ProblemKind::file, "", why}}); };
  struct stat st {};
  if (::stat(filename.c_str(), &st) != 0) {
    if (errno == ENOENT || errno == ENOTDIR) refuse("no such file: " + filename);
    refuse("cannot open " + filename + ": " + std::strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) refuse(filename + " is a directory, not a file");
  if (!S_ISREG(st.st_mode)) {
    const char* what = S_ISCHR(st.st_mode)    ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISFIFO(st.st_mode) ? "a pipe"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a file";
    refuse(filename + " is not a regular file (" + std::string(what) + "); a load reads a file save wrote");
  }
  const int fd = ::open(filename.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) refuse("cannot open " + filename + ": " + std::strerror(errno));
  // HDF5 1.10 takes a shared flock() to read and an exclusive one to write, unless HDF5_USE_FILE_LOCKING=FALSE.
  const char* locking = std::getenv("HDF5_USE_FILE_LOCKING");
  const bool locks = locking == nullptr || std::strcmp(locking, "FALSE") != 0;
  const bool locked = locks && ::flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  ::close(fd);
  if (locked)
    refuse(filename +
           " is locked by another process (an HDF5 writer has it open): wait until that writer closes it; "
           "if you know the file is complete and nobody writes it, HDF5_USE_FILE_LOCKING=FALSE reads it "
           "without the lock");
}

}  // namespace

LoadReport read_file(const std::string& filename, const std::vector<GroupView>& groups, const LoadOptions& options,
                     GroupAttributes* attributes, const char* what) {
  const std::string context = std::string(what) + "(\"" + filename + "\")";
  std::string why;
  if (!options.is_valid(&why)) throw Error(context, {{ProblemKind::file, "", why}});
  check_openable(filename, context);
  auto lock = h5::enter();
  if (options.isolate) {
    std::vector<std::string> names;
    for (const GroupView& g : groups) names.push_back(g.group);
    crash_guard(
        context, filename, names, [&] { read_pass(filename, groups, options, nullptr, context, true); },
        options.isolate_timeout);
  }
  return read_pass(filename, groups, options, attributes, context, false);
}

}  // namespace geomopt::io::detail

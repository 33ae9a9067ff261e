// describe(filename): the summary geomopt-inspect prints, from the file alone (no tree needed).
#include <algorithm>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "checksum.hpp"
#include "geomopt/io/error.hpp"
#include "geomopt/io/inspect.hpp"
#include "geomopt/ptree/report.hpp"
#include "guard.hpp"
#include "h5.hpp"

namespace geomopt::io {
namespace {

using detail::h5::checked;
using detail::h5::EntryKind;
using detail::h5::Id;
using geomopt::ptree::detail::human_bytes;

struct Row {
  std::string path, type, shape;
  unsigned long long params = 0, bytes = 0;
  int trainable = -1;   // 1 trainable, 0 a buffer or frozen, -1 neither (optimizer state)
  bool frozen = false;  // a parameter its optimizer does not step (trainable 0)
};

std::string shape_of(const std::optional<std::vector<hsize_t>>& dims) {
  if (!dims) return "null";
  if (dims->empty()) return "scalar";
  std::string s;
  for (std::size_t i = 0; i < dims->size(); ++i) s += (i ? "x" : "") + std::to_string((*dims)[i]);
  return s;
}

// Elements, bytes, type and shape of one dataset.
void dataset_row(hid_t d, Row& row, std::string* type) {
  const auto dims = detail::h5::dimensions(d);
  unsigned long long n = dims ? 1 : 0;
  if (dims)
    for (hsize_t x : *dims) n *= x;
  Id t = checked(H5Dget_type(d), H5Tclose, "type");
  std::string unsupported;
  const auto dt = detail::h5::classify(t.get(), &unsupported);
  if (type != nullptr) *type = dt ? detail::dtype_name(*dt) : unsupported;
  row.params += n;
  row.bytes += n * H5Tget_size(t.get());
  row.shape += (row.shape.empty() ? "" : " + ") + shape_of(dims);
}

std::string table(const std::vector<Row>& rows) {
  std::vector<std::vector<std::string>> cells = {{"path", "type", "shape", "params", "bytes", "trainable"}};
  for (const Row& r : rows)
    cells.push_back({r.path.empty() ? "(root)" : r.path, r.type, r.shape, std::to_string(r.params),
                     std::to_string(r.bytes),
                     r.trainable < 0 ? "-"
                     : r.trainable   ? "yes"
                     : r.frozen      ? "no (frozen)"
                                     : "no (buffer)"});
  std::vector<std::size_t> width(6, 0);
  for (const auto& c : cells)
    for (std::size_t i = 0; i < 6; ++i) width[i] = std::max(width[i], c[i].size());
  std::string out;
  for (const auto& c : cells) {
    out += "  ";
    for (std::size_t i = 0; i < 6; ++i) {
      const std::string pad(width[i] - c[i].size(), ' ');
      out += (i == 3 || i == 4) ? pad + c[i] : c[i] + (i < 5 ? pad : "");
      if (i < 5) out += "  ";
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    out += "\n";
  }
  return out;
}

void describe_group(hid_t file, const std::string& name, std::string& out) {
  const std::string root = "/" + name;
  Id obj = checked(H5Oopen(file, root.c_str(), H5P_DEFAULT), H5Oclose, root);
  auto attrs = detail::h5::read_attributes(obj.get());
  // The checksum guards the attributes; it is not one of them (docs/file_format.md, "Checksums").
  std::erase_if(attrs, [](const auto& a) { return a.first == detail::kAttributesChecksumAttribute; });
  // A checkpoint's per-leaf options ("<path>:<name>"), one line per leaf after the group's own attributes.
  std::vector<std::pair<std::string, std::string>> leaf_options;  // path, "name=value ..."
  std::erase_if(attrs, [&](const auto& a) {
    const auto colon = a.first.rfind(':');
    if (colon == std::string::npos) return false;
    const std::string path = a.first.substr(0, colon);
    const std::string text = a.first.substr(colon + 1) + "=" + detail::h5::attribute_text(a.second);
    const auto same =
        std::find_if(leaf_options.begin(), leaf_options.end(), [&](const auto& l) { return l.first == path; });
    if (same == leaf_options.end())
      leaf_options.emplace_back(path, text);
    else
      same->second += " " + text;
    return true;
  });
  obj.reset();
  std::vector<std::string> order;
  const auto entries = detail::h5::list_links(file, root, &order);
  std::vector<Row> rows;
  std::vector<std::string> aliases;
  std::map<haddr_t, std::string> first;
  for (const auto& dotted : order) {
    const auto& e = entries.at(dotted);
    if (e.kind == EntryKind::group || (dotted.empty() && e.kind != EntryKind::dataset)) {
      if (!dotted.empty() && !first.emplace(e.address, dotted).second) {
        // A tied subtree: the link repeats a group seen before.
        aliases.push_back(dotted + " -> " + first[e.address]);
      }
      continue;
    }
    if (e.kind == EntryKind::other) {
      aliases.push_back(dotted + " -> (soft or external link, not followed)");
      continue;
    }
    bool inside_alias = false;  // a leaf of a tied subtree, listed under its first path
    for (const auto& a : aliases)
      if (dotted.rfind(a.substr(0, a.find(" -> ")) + ".", 0) == 0) inside_alias = true;
    if (inside_alias) continue;
    const auto [it, fresh] = first.emplace(e.address, dotted);
    if (!fresh) {
      aliases.push_back(dotted + " -> " + it->second);
      continue;
    }
    Row row;
    row.path = dotted;
    Id o = checked(H5Oopen(file, e.h5path.c_str(), H5P_DEFAULT), H5Oclose, e.h5path);
    if (auto t = detail::h5::read_attribute(o.get(), "trainable"); t && std::holds_alternative<std::int64_t>(*t))
      row.trainable = std::get<std::int64_t>(*t) != 0 ? 1 : 0;
    if (auto f = detail::h5::read_attribute(o.get(), "frozen"); f && std::holds_alternative<std::int64_t>(*f))
      row.frozen = std::get<std::int64_t>(*f) != 0;
    if (e.kind == EntryKind::dataset) {
      dataset_row(o.get(), row, &row.type);
    } else {
      const auto type = detail::h5::read_attribute(o.get(), "type");
      row.type = type ? std::get_if<std::string>(&*type) ? std::get<std::string>(*type) : "?" : "?";
      std::string meta;
      for (const auto& [n, v] : detail::h5::read_attributes(o.get()))
        if (n != "type" && n != "path" && n != "trainable" && n != "frozen")
          meta += (meta.empty() ? "" : ", ") + n + "=" + detail::h5::attribute_text(v);
      if (!meta.empty()) row.type += "(" + meta + ")";
      for (std::size_t b = 0;; ++b) {
        const std::string bp = e.h5path + "/" + std::to_string(b);
        if (!detail::h5::exists(file, bp)) break;
        Id d = checked(H5Dopen2(file, bp.c_str(), H5P_DEFAULT), H5Dclose, bp);
        dataset_row(d.get(), row, nullptr);
      }
    }
    rows.push_back(std::move(row));
  }
  unsigned long long params = 0, params_bytes = 0, buffers = 0, buffer_bytes = 0;
  unsigned long long state = 0, state_bytes = 0, frozen = 0, frozen_bytes = 0;
  for (const Row& r : rows) {
    (r.trainable < 0 ? state : r.trainable ? params : r.frozen ? frozen : buffers) += r.params;
    (r.trainable < 0 ? state_bytes : r.trainable ? params_bytes : r.frozen ? frozen_bytes : buffer_bytes) += r.bytes;
  }
  out += root + ":";
  for (const auto& [n, v] : attrs) out += " " + n + "=" + detail::h5::attribute_text(v);
  out += "\n";
  for (const auto& [path, text] : leaf_options) out += "  options of " + path + ": " + text + "\n";
  if (!rows.empty()) {
    out += table(rows);
    for (const auto& a : aliases) out += "  alias: " + a + "\n";
    out += "  total: ";
    if (state != 0) out += std::to_string(state) + " state values (" + human_bytes(state_bytes) + "), ";
    if (params != 0 || state == 0)
      out += std::to_string(params) + " trainable values (" + human_bytes(params_bytes) + "), ";
    if (frozen != 0) out += std::to_string(frozen) + " frozen values (" + human_bytes(frozen_bytes) + "), ";
    if (buffers != 0 || state == 0)
      out += std::to_string(buffers) + " buffer values (" + human_bytes(buffer_bytes) + "), ";
    out += std::to_string(rows.size()) + (rows.size() == 1 ? " leaf, " : " leaves, ") + std::to_string(aliases.size()) +
           (aliases.size() == 1 ? " alias\n" : " aliases\n");
  }
}

std::string describe_file(const std::string& filename, const std::string& context) {
  try {
    if (H5Fis_hdf5(filename.c_str()) <= 0) {
      detail::h5::last_error();
      throw Error(context, {{ProblemKind::file, "", filename + " is not an HDF5 file"}});
    }
    Id fapl = checked(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "file properties");
    detail::h5::check(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG), "file properties");
    Id file = checked(H5Fopen(filename.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose, "open " + filename);
    std::string out = filename + ":";
    for (const auto& [n, v] : detail::h5::read_attributes(file.get()))
      out += " " + n + "=" + detail::h5::attribute_text(v);
    out += "\n";
    std::vector<std::string> order;
    const auto top = detail::h5::list_links(file.get(), "/", &order);
    for (const auto& dotted : order) {
      if (dotted.empty() || dotted.find('.') != std::string::npos) continue;
      const auto& e = top.at(dotted);
      if (e.kind == EntryKind::other) continue;
      describe_group(file.get(), dotted, out);
    }
    return out;
  } catch (const detail::h5::Failure& f) {
    throw Error(context, {{ProblemKind::file, "", f.what()}});
  }
}

// Every object under a group, as check_structure reads it.
void check_object(hid_t file, const std::string& h5path, const detail::h5::Entry& e) {
  Id o = checked(H5Oopen(file, h5path.c_str(), H5P_DEFAULT), H5Oclose, h5path);
  (void)detail::h5::read_attributes(o.get());  // by index, then each one opened and read by name
  if (e.kind == EntryKind::structured) {
    H5G_info_t info;
    detail::h5::check(H5Gget_info(o.get(), &info), h5path);
    for (std::size_t b = 0; b < info.nlinks && b < 1024; ++b) {
      const std::string bp = h5path + "/" + std::to_string(b);
      if (!detail::h5::exists(file, bp)) continue;
      Id d = checked(H5Oopen(file, bp.c_str(), H5P_DEFAULT), H5Oclose, bp);
      if (H5Iget_type(d.get()) == H5I_DATASET) check_object(file, bp, {bp, HADDR_UNDEF, EntryKind::dataset, 1});
    }
    return;
  }
  if (e.kind != EntryKind::dataset) return;
  const auto dims = detail::h5::dimensions(o.get());
  Id t = checked(H5Dget_type(o.get()), H5Tclose, h5path);
  std::string unsupported;
  const auto dtype = detail::h5::classify(t.get(), &unsupported);
  Id dcpl = checked(H5Dget_create_plist(o.get()), H5Pclose, h5path);
  // Contiguous data is one read at a checked address; chunked data goes through an index and filters, which is
  // where a damaged file can mislead the library.
  if (!dtype || !dims || H5Pget_layout(dcpl.get()) != H5D_CHUNKED) return;
  unsigned long long n = 1;
  for (hsize_t x : *dims) n *= x;
  const std::size_t bytes = static_cast<std::size_t>(n) * detail::dtype_size(*dtype);
  if (bytes > (std::size_t{1} << 30)) return;  // larger than any tree this could be checked for in one go
  std::unique_ptr<unsigned char[]> scratch(new unsigned char[bytes == 0 ? 1 : bytes]);
  Id m = detail::h5::memory_type(*dtype);
  H5Dread(o.get(), m.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, scratch.get());
  H5Eclear2(H5E_DEFAULT);
}

}  // namespace

namespace detail {
void check_structure(const std::string& filename, const std::vector<std::string>& groups) {
  const std::string context = "check(\"" + filename + "\")";
  auto lock = detail::h5::enter();
  try {
    if (H5Fis_hdf5(filename.c_str()) <= 0) return;
    Id fapl = checked(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "file properties");
    detail::h5::check(H5Pset_fclose_degree(fapl.get(), H5F_CLOSE_STRONG), "file properties");
    Id file = checked(H5Fopen(filename.c_str(), H5F_ACC_RDONLY, fapl.get()), H5Fclose, "open " + filename);
    // The whole file, and each group a load will walk on its own (a damaged sibling must not hide it).
    std::vector<std::string> roots{"/"};
    for (const auto& g : groups) roots.push_back("/" + g);
    std::set<std::string> checked_paths;  // an object met again under another root is not read twice
    for (const auto& root : roots) {
      std::map<std::string, detail::h5::Entry> entries;
      try {
        if (root != "/" && !detail::h5::exists(file.get(), root)) continue;
        entries = detail::h5::list_links(file.get(), root, nullptr, true);
      } catch (const detail::h5::Failure&) {
        H5Eclear2(H5E_DEFAULT);
      }
      for (const auto& [dotted, e] : entries) {
        if (e.kind == EntryKind::other || !checked_paths.insert(e.h5path).second) continue;
        try {
          check_object(file.get(), e.h5path, e);
        } catch (const detail::h5::Failure&) {
          H5Eclear2(H5E_DEFAULT);
        }
      }
    }
  } catch (const detail::h5::Failure& f) {
    throw Error(context, {{ProblemKind::file, "", f.what()}});
  }
}
}  // namespace detail

std::string describe(const std::string& filename, double check_timeout) {
  const std::string context = "describe(\"" + filename + "\")";
  const std::string why = detail::timeout_problem("check_timeout", check_timeout);
  if (!why.empty()) throw Error(context, {{ProblemKind::file, "", why}});
  std::error_code ec;
  if (!std::filesystem::is_regular_file(filename, ec))
    throw Error(context, {{ProblemKind::file, "", "no such file: " + filename}});
  auto lock = detail::h5::enter();
  detail::crash_guard(
      context, filename, {}, [&] { describe_file(filename, context); }, check_timeout);
  return describe_file(filename, context);
}

}  // namespace geomopt::io

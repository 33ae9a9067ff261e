// The HDF5 layer (h5.hpp).
#include "h5.hpp"

#include <cstring>
#include <set>

namespace geomopt::io::detail::h5 {

std::unique_lock<std::mutex> enter() {
  static std::mutex m;
  std::unique_lock<std::mutex> lock(m);
  static const bool silenced = [] {
    // Errors become exceptions with HDF5's message; printing the stack would only add noise to a user's stderr.
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)silenced;
  return lock;
}

namespace {
struct Walk {
  std::string text;
  int count = 0;
};
herr_t collect(unsigned, const H5E_error2_t* e, void* data) {
  auto& w = *static_cast<Walk*>(data);
  if (w.count++ >= 3) return 0;  // the innermost few say what went wrong; the rest is the call chain
  char minor[160] = "";
  H5Eget_msg(e->min_num, nullptr, minor, sizeof minor);
  if (!w.text.empty()) w.text += "; ";
  w.text += (e->desc != nullptr && e->desc[0] != '\0') ? e->desc : minor;
  if (minor[0] != '\0' && e->desc != nullptr && std::strcmp(e->desc, minor) != 0)
    w.text += std::string(" (") + minor + ")";
  return 0;
}
}  // namespace

std::string last_error() {
  Walk w;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, collect, &w);
  H5Eclear2(H5E_DEFAULT);
  return w.text.empty() ? std::string("HDF5 reported no detail") : w.text;
}

void Id::close(const std::string& what) {
  if (id_ < 0) return;
  const herr_t status = close_(id_);
  id_ = H5I_INVALID_HID;
  check(status, what);
}

Id checked(hid_t id, Id::Closer close, const std::string& what) {
  if (id < 0) throw Failure(what + ": " + last_error());
  return Id(id, close);
}

void check(herr_t status, const std::string& what) {
  if (status < 0) throw Failure(what + ": " + last_error());
}

// ---- scalar types ----------------------------------------------------------------------------------------------

namespace {
Id bool_type(hid_t base) {
  // h5py's spelling of numpy.bool_, so Python reads a bool buffer as bool.
  Id t = checked(H5Tenum_create(base), H5Tclose, "bool type");
  const std::int8_t f = 0, tr = 1;
  check(H5Tenum_insert(t.get(), "FALSE", &f), "bool type");
  check(H5Tenum_insert(t.get(), "TRUE", &tr), "bool type");
  return t;
}
Id borrowed(hid_t t) { return Id(t, nullptr); }
}  // namespace

Id memory_type(Dtype d) {
  switch (d) {
    case Dtype::f32:
      return borrowed(H5T_NATIVE_FLOAT);
    case Dtype::f64:
      return borrowed(H5T_NATIVE_DOUBLE);
    case Dtype::i8:
      return borrowed(H5T_NATIVE_INT8);
    case Dtype::u8:
      return borrowed(H5T_NATIVE_UINT8);
    case Dtype::i16:
      return borrowed(H5T_NATIVE_INT16);
    case Dtype::u16:
      return borrowed(H5T_NATIVE_UINT16);
    case Dtype::i32:
      return borrowed(H5T_NATIVE_INT32);
    case Dtype::u32:
      return borrowed(H5T_NATIVE_UINT32);
    case Dtype::i64:
      return borrowed(H5T_NATIVE_INT64);
    case Dtype::u64:
      return borrowed(H5T_NATIVE_UINT64);
    case Dtype::boolean:
      return bool_type(H5T_NATIVE_INT8);
  }
  return borrowed(H5T_NATIVE_DOUBLE);
}

Id file_type(Dtype d) {
  switch (d) {
    case Dtype::f32:
      return borrowed(H5T_IEEE_F32LE);
    case Dtype::f64:
      return borrowed(H5T_IEEE_F64LE);
    case Dtype::i8:
      return borrowed(H5T_STD_I8LE);
    case Dtype::u8:
      return borrowed(H5T_STD_U8LE);
    case Dtype::i16:
      return borrowed(H5T_STD_I16LE);
    case Dtype::u16:
      return borrowed(H5T_STD_U16LE);
    case Dtype::i32:
      return borrowed(H5T_STD_I32LE);
    case Dtype::u32:
      return borrowed(H5T_STD_U32LE);
    case Dtype::i64:
      return borrowed(H5T_STD_I64LE);
    case Dtype::u64:
      return borrowed(H5T_STD_U64LE);
    case Dtype::boolean:
      return bool_type(H5T_STD_I8LE);
  }
  return borrowed(H5T_IEEE_F64LE);
}

std::optional<Dtype> classify(hid_t type, std::string* what) {
  const H5T_class_t c = H5Tget_class(type);
  const std::size_t size = H5Tget_size(type);
  if (c == H5T_FLOAT) {
    if (size == 4) return Dtype::f32;
    if (size == 8) return Dtype::f64;
    *what = std::to_string(8 * size) + "-bit floating point";
    return std::nullopt;
  }
  if (c == H5T_INTEGER) {
    const bool is_signed = H5Tget_sign(type) == H5T_SGN_2;
    switch (size) {
      case 1:
        return is_signed ? Dtype::i8 : Dtype::u8;
      case 2:
        return is_signed ? Dtype::i16 : Dtype::u16;
      case 4:
        return is_signed ? Dtype::i32 : Dtype::u32;
      case 8:
        return is_signed ? Dtype::i64 : Dtype::u64;
      default:
        break;
    }
    *what = std::to_string(8 * size) + "-bit integer";
    return std::nullopt;
  }
  if (c == H5T_ENUM && size == 1) return Dtype::boolean;
  switch (c) {
    case H5T_STRING:
      *what = "strings";
      break;
    case H5T_COMPOUND:
      *what = "a compound type";
      break;
    case H5T_ENUM:
      *what = "an enum";
      break;
    case H5T_ARRAY:
      *what = "an array type";
      break;
    case H5T_VLEN:
      *what = "variable-length data";
      break;
    default:
      *what = "an unsupported type";
      break;
  }
  return std::nullopt;
}

// ---- attributes ------------------------------------------------------------------------------------------------

namespace {
Id string_type() {
  Id t = checked(H5Tcopy(H5T_C_S1), H5Tclose, "string type");
  check(H5Tset_size(t.get(), H5T_VARIABLE), "string type");
  check(H5Tset_cset(t.get(), H5T_CSET_UTF8), "string type");
  return t;
}

void write_raw_attribute(hid_t object, const std::string& name, hid_t file_t, hid_t mem_t, const void* data) {
  if (H5Aexists(object, name.c_str()) > 0) check(H5Adelete(object, name.c_str()), "attribute " + name);
  Id space = checked(H5Screate(H5S_SCALAR), H5Sclose, "attribute " + name);
  Id a = checked(H5Acreate2(object, name.c_str(), file_t, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose,
                 "attribute " + name);
  check(H5Awrite(a.get(), mem_t, data), "attribute " + name);
}

std::optional<Attribute> read_open_attribute(hid_t a) {
  Id space = checked(H5Aget_space(a), H5Sclose, "attribute space");
  if (H5Sget_simple_extent_npoints(space.get()) != 1) return std::nullopt;  // arrays are not geomopt's
  Id type = checked(H5Aget_type(a), H5Tclose, "attribute type");
  const H5T_class_t c = H5Tget_class(type.get());
  if (c == H5T_INTEGER) {
    std::int64_t v = 0;
    if (H5Aread(a, H5T_NATIVE_INT64, &v) < 0) return std::nullopt;
    return Attribute(v);
  }
  if (c == H5T_ENUM) {
    Id base = checked(H5Tget_super(type.get()), H5Tclose, "attribute type");
    if (H5Tget_size(type.get()) > 8) return std::nullopt;
    Id native = checked(H5Tget_native_type(type.get(), H5T_DIR_ASCEND), H5Tclose, "attribute type");
    unsigned char raw[8] = {};
    if (H5Aread(a, native.get(), raw) < 0) return std::nullopt;
    std::int64_t v = 0;
    const std::size_t size = H5Tget_size(type.get());
    const bool is_signed = H5Tget_sign(base.get()) == H5T_SGN_2;
    if (size == 1)
      v = is_signed ? std::int64_t(std::int8_t(raw[0])) : std::int64_t(raw[0]);
    else {
      std::int64_t tmp = 0;
      std::memcpy(&tmp, raw, size);
      v = tmp;
    }
    return Attribute(v);
  }
  if (c == H5T_FLOAT) {
    double v = 0;
    if (H5Aread(a, H5T_NATIVE_DOUBLE, &v) < 0) return std::nullopt;
    return Attribute(v);
  }
  if (c == H5T_STRING) {
    if (H5Tis_variable_str(type.get()) > 0) {
      Id mem = string_type();
      char* s = nullptr;
      if (H5Aread(a, mem.get(), &s) < 0) return std::nullopt;
      std::string out = s != nullptr ? s : "";
      H5free_memory(s);
      return Attribute(out);
    }
    const std::size_t size = H5Tget_size(type.get());
    if (size == 0 || size > (1u << 20)) return std::nullopt;
    std::string out(size, '\0');
    Id mem = checked(H5Tcopy(H5T_C_S1), H5Tclose, "string type");
    check(H5Tset_size(mem.get(), size), "string type");
    if (H5Aread(a, mem.get(), out.data()) < 0) return std::nullopt;
    out.resize(std::strlen(out.c_str()));
    return Attribute(out);
  }
  return std::nullopt;
}
}  // namespace

void write_attribute(hid_t object, const std::string& name, const Attribute& value) {
  if (const auto* i = std::get_if<std::int64_t>(&value)) {
    write_raw_attribute(object, name, H5T_STD_I64LE, H5T_NATIVE_INT64, i);
  } else if (const auto* d = std::get_if<double>(&value)) {
    write_raw_attribute(object, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, d);
  } else {
    Id t = string_type();
    const char* s = std::get<std::string>(value).c_str();
    write_raw_attribute(object, name, t.get(), t.get(), &s);
  }
}

void write_bool_attribute(hid_t object, const std::string& name, bool value) {
  Id f = file_type(Dtype::boolean), m = memory_type(Dtype::boolean);
  const std::int8_t v = value ? 1 : 0;
  write_raw_attribute(object, name, f.get(), m.get(), &v);
}

namespace {
struct AttributeList {
  std::vector<std::pair<std::string, Attribute>> out;
};
herr_t add_attribute(hid_t object, const char* name, const H5A_info_t*, void* data) {
  auto& list = *static_cast<AttributeList*>(data);
  const hid_t a = H5Aopen(object, name, H5P_DEFAULT);
  if (a < 0) return -1;
  std::optional<Attribute> v;
  try {
    v = read_open_attribute(a);
  } catch (const Failure&) {
    v.reset();
  }
  H5Aclose(a);
  if (v) list.out.emplace_back(name, std::move(*v));
  return 0;
}
}  // namespace

std::vector<std::pair<std::string, Attribute>> read_attributes(hid_t object) {
  AttributeList list;
  hsize_t idx = 0;
  check(H5Aiterate2(object, H5_INDEX_NAME, H5_ITER_INC, &idx, add_attribute, &list), "attributes");
  return std::move(list.out);
}

std::optional<Attribute> read_attribute(hid_t object, const std::string& name) {
  const htri_t has = H5Aexists(object, name.c_str());
  if (has < 0) H5Eclear2(H5E_DEFAULT);
  if (has <= 0) return std::nullopt;
  Id a = checked(H5Aopen(object, name.c_str(), H5P_DEFAULT), H5Aclose, "attribute " + name);
  return read_open_attribute(a.get());
}

std::string attribute_text(const Attribute& a) {
  if (const auto* i = std::get_if<std::int64_t>(&a)) return std::to_string(*i);
  if (const auto* d = std::get_if<double>(&a)) {
    char buf[40];
    std::snprintf(buf, sizeof buf, "%.17g", *d);
    return buf;
  }
  return "\"" + std::get<std::string>(a) + "\"";
}

// ---- the link tree ---------------------------------------------------------------------------------------------

namespace {
constexpr std::size_t kMaxLinks = std::size_t{1} << 20;
constexpr std::size_t kMaxDepth = 64;

struct Link {
  std::string name;
  H5L_type_t type;
  haddr_t address;
};
herr_t add_link(hid_t, const char* name, const H5L_info_t* info, void* data) {
  auto& links = *static_cast<std::vector<Link>*>(data);
  if (links.size() >= kMaxLinks) return -1;
  links.push_back({name, info->type, info->type == H5L_TYPE_HARD ? info->u.address : HADDR_UNDEF});
  return 0;
}

std::vector<Link> links_of(hid_t group) {
  std::vector<Link> links;
  hsize_t idx = 0;
  // Creation order when the group tracks it (files geomopt writes), so listings follow the tree's walk order.
  H5_index_t index = H5_INDEX_NAME;
  {
    const hid_t gcpl = H5Gget_create_plist(group);
    unsigned flags = 0;
    if (gcpl >= 0) {
      if (H5Pget_link_creation_order(gcpl, &flags) >= 0 && (flags & H5P_CRT_ORDER_INDEXED) != 0)
        index = H5_INDEX_CRT_ORDER;
      H5Pclose(gcpl);
    }
    H5Eclear2(H5E_DEFAULT);
  }
  check(H5Literate(group, index, H5_ITER_INC, &idx, add_link, &links), "list links");
  return links;
}

struct Lister {
  hid_t file;
  std::map<std::string, Entry>* out;
  std::vector<std::string>* order;
  bool tolerant = false;
  std::vector<haddr_t> ancestors;
  std::size_t count = 0;

  void add(const std::string& dotted, Entry e) {
    if (++count > kMaxLinks) throw Failure("more than " + std::to_string(kMaxLinks) + " links");
    auto [it, fresh] = out->emplace(dotted, e);
    if (!fresh)
      ++it->second.names;
    else if (order)
      order->push_back(dotted);
  }

  void group(hid_t g, const std::string& h5path, const std::string& dotted) {
    if (ancestors.size() > kMaxDepth) throw Failure(h5path + ": groups nested deeper than 64 levels");
    std::vector<Link> links;
    try {
      links = links_of(g);
    } catch (const Failure&) {
      if (!tolerant) throw;
    }
    for (const Link& l : links) {
      const std::string child = h5path == "/" ? "/" + l.name : h5path + "/" + l.name;
      const std::string child_dotted = dotted.empty() ? l.name : dotted + "." + l.name;
      if (l.type != H5L_TYPE_HARD) {
        add(child_dotted, {child, HADDR_UNDEF, EntryKind::other, 1});
        continue;
      }
      try {
        Id obj = checked(H5Oopen(g, l.name.c_str(), H5P_DEFAULT), H5Oclose, child);
        object(obj.get(), child, child_dotted, l.address);
      } catch (const Failure&) {
        if (!tolerant) throw;
      }
    }
  }

  void object(hid_t obj, const std::string& h5path, const std::string& dotted, haddr_t address) {
    const H5I_type_t t = H5Iget_type(obj);
    if (t == H5I_DATASET) {
      add(dotted, {h5path, address, EntryKind::dataset, 1});
    } else if (t == H5I_GROUP) {
      const htri_t structured = H5Aexists(obj, "type");
      if (structured < 0) H5Eclear2(H5E_DEFAULT);
      if (structured > 0) {
        add(dotted, {h5path, address, EntryKind::structured, 1});
        return;
      }
      add(dotted, {h5path, address, EntryKind::group, 1});
      for (haddr_t a : ancestors)
        if (a == address) return;  // a cycle of hard links
      ancestors.push_back(address);
      group(obj, h5path, dotted);
      ancestors.pop_back();
    } else {
      add(dotted, {h5path, address, EntryKind::other, 1});
    }
  }
};
}  // namespace

std::map<std::string, Entry> list_links(hid_t file, const std::string& h5path, std::vector<std::string>* order,
                                        bool tolerant) {
  std::map<std::string, Entry> out;
  Lister l{file, &out, order, tolerant, {}, 0};
  Id obj = checked(H5Oopen(file, h5path.c_str(), H5P_DEFAULT), H5Oclose, h5path);
  H5O_info_t info;
  check(H5Oget_info2(obj.get(), &info, H5O_INFO_BASIC), h5path);
  l.object(obj.get(), h5path, "", info.addr);
  return out;
}

std::string object_path(const std::string& group, const std::vector<std::string>& segments) {
  std::string p = "/" + group;
  for (const auto& s : segments) p += "/" + s;
  return p;
}

namespace {
// H5Lexists needs each parent to exist, so walk down one link at a time. A link that cannot be looked up counts as
// absent, or with `damaged_throws` is a Failure.
bool walk_exists(hid_t file, const std::string& h5path, bool damaged_throws) {
  if (h5path == "/") return true;
  std::size_t pos = 1;
  while (true) {
    const std::size_t next = h5path.find('/', pos);
    const std::string prefix = h5path.substr(0, next);
    const htri_t e = H5Lexists(file, prefix.c_str(), H5P_DEFAULT);
    if (e < 0 && damaged_throws)
      throw Failure("cannot look up " + prefix + " (the group holding it is damaged): " + last_error());
    if (e < 0) H5Eclear2(H5E_DEFAULT);
    if (e <= 0) return false;
    if (next == std::string::npos) return true;
    pos = next + 1;
  }
}
}  // namespace

bool exists(hid_t file, const std::string& h5path) { return walk_exists(file, h5path, false); }

bool exists_or_throw(hid_t file, const std::string& h5path) { return walk_exists(file, h5path, true); }

std::optional<std::vector<hsize_t>> dimensions(hid_t dataset) {
  Id space = checked(H5Dget_space(dataset), H5Sclose, "dataspace");
  const H5S_class_t c = H5Sget_simple_extent_type(space.get());
  if (c == H5S_SCALAR) return std::vector<hsize_t>{};
  if (c != H5S_SIMPLE) return std::nullopt;
  const int rank = H5Sget_simple_extent_ndims(space.get());
  if (rank < 0 || rank > H5S_MAX_RANK) throw Failure("dataspace: " + last_error());
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  check(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "dataspace");
  return dims;
}

}  // namespace geomopt::io::detail::h5

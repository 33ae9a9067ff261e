// geomopt's own thin layer over the HDF5 C API, private to the io library: handles that close themselves, HDF5's
// error stack turned into exceptions (never printed), the file's scalar types, attributes, and the walk that lists
// every link of a group tree. Invariants: every hid_t opened here is owned by exactly one Id; a failed HDF5 call
// throws Failure with HDF5's innermost message and leaves the error stack empty.
#pragma once

#include <hdf5.h>

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "geomopt/io/detail/view.hpp"
#include "geomopt/io/options.hpp"

namespace geomopt::io::detail::h5 {

/// A failed HDF5 or system call, turned into an Error at the library's entry points.
class Failure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// Held by every entry point: the serial HDF5 library of Debian is not thread-safe. Also silences HDF5's printing
/// of its error stack, once.
std::unique_lock<std::mutex> enter();

/// The current error stack as one line (innermost first), then clears it.
std::string last_error();

class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id() = default;
  Id(hid_t id, Closer close) noexcept : id_(id), close_(close) {}
  Id(Id&& o) noexcept : id_(std::exchange(o.id_, H5I_INVALID_HID)), close_(o.close_) {}
  Id& operator=(Id&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = std::exchange(o.id_, H5I_INVALID_HID);
      close_ = o.close_;
    }
    return *this;
  }
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;
  ~Id() { reset(); }

  hid_t get() const noexcept { return id_; }
  explicit operator bool() const noexcept { return id_ >= 0; }
  void reset() noexcept {
    if (id_ >= 0 && close_ != nullptr) close_(id_);
    id_ = H5I_INVALID_HID;
  }
  /// Closes now and throws on failure (a file's close is where its last writes happen).
  void close(const std::string& what);

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer close_ = nullptr;
};

/// id, or throws Failure naming `what`.
Id checked(hid_t id, Id::Closer close, const std::string& what);
void check(herr_t status, const std::string& what);

// ---- scalar types ----------------------------------------------------------------------------------------------

/// The native memory type of a Dtype (an h5py-style enum for bool); owned by HDF5 except for bool.
Id memory_type(Dtype d);
/// The little-endian file type of a Dtype.
Id file_type(Dtype d);
/// What a dataset's type is, as a Dtype, or nullopt (with a description in *what) for one geomopt does not read.
std::optional<Dtype> classify(hid_t type, std::string* what);

// ---- attributes ------------------------------------------------------------------------------------------------

void write_attribute(hid_t object, const std::string& name, const Attribute& value);
void write_bool_attribute(hid_t object, const std::string& name, bool value);
/// Every attribute of an object that is an integer (or enum), a real number or a string, in name order.
std::vector<std::pair<std::string, Attribute>> read_attributes(hid_t object);
std::optional<Attribute> read_attribute(hid_t object, const std::string& name);
std::string attribute_text(const Attribute& a);

// ---- the link tree ---------------------------------------------------------------------------------------------

enum class EntryKind { dataset, group, structured, other };

struct Entry {
  std::string h5path;  ///< absolute path in the file
  haddr_t address = HADDR_UNDEF;
  EntryKind kind = EntryKind::other;
  int names = 1;  ///< links whose dotted path is this one (more than 1: ambiguous)
};

/// Every link under the object at h5path (and the object itself, as dotted path ""), by dotted path: link names
/// joined with '.'. Groups are entered through every link (a tied subtree appears under each of its paths) but
/// never twice on one path (cycles), and not inside a structured leaf (a group with a "type" attribute). Soft and
/// external links are listed as `other` and never followed. `order` lists the dotted paths in the file's order.
/// `tolerant` (the checker's mode) skips a link or group that cannot be read and goes on with the others.
std::map<std::string, Entry> list_links(hid_t file, const std::string& h5path, std::vector<std::string>* order,
                                        bool tolerant = false);

/// "/params/layers/0/weight" from the group and the segments.
std::string object_path(const std::string& group, const std::vector<std::string>& segments);
bool exists(hid_t file, const std::string& h5path);
/// Like exists, but a link that cannot be looked up (a damaged group) throws Failure instead of counting as absent.
bool exists_or_throw(hid_t file, const std::string& h5path);

/// The dimensions of a dataset (empty for a scalar); nullopt for a null dataspace.
std::optional<std::vector<hsize_t>> dimensions(hid_t dataset);

}  // namespace geomopt::io::detail::h5

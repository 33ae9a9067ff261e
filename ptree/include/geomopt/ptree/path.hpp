// Path: where a node sits in a parameter tree, as a sequence of segments (field name, index or map key).
//
// str() joins the segments with '.', so a leaf reads "layers.0.weight"; the root is "". A Path handed to a walk
// views names owned by the tree and by the declaration (string literals): copy str() to keep it beyond the call.
// Pushing and popping never allocates; a tree deeper than Path::kMaxDepth is rejected with StructureError.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "geomopt/ptree/error.hpp"

namespace geomopt::ptree {

class Path {
 public:
  static constexpr std::size_t kMaxDepth = 64;

  struct Segment {
    enum class Kind : unsigned char { field, index, key };
    Kind kind = Kind::field;
    std::string_view name;   // field and key
    std::size_t index = 0;   // index
    friend bool operator==(const Segment&, const Segment&) = default;
  };

  std::size_t size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  const Segment& operator[](std::size_t i) const noexcept { return segments_[i]; }
  const Segment* begin() const noexcept { return segments_.data(); }
  const Segment* end() const noexcept { return segments_.data() + size_; }

  std::string str() const {
    std::string out;
    for (std::size_t i = 0; i < size_; ++i) {
      if (i != 0) out += '.';
      const Segment& s = segments_[i];
      if (s.kind == Segment::Kind::index) {
        out += std::to_string(s.index);
      } else {
        out += s.name;
      }
    }
    return out;
  }

  /// str(), or "(root)" for the root: for messages.
  std::string display() const { return size_ == 0 ? std::string("(root)") : str(); }

  friend bool operator==(const Path& a, const Path& b) {
    if (a.size_ != b.size_) return false;
    for (std::size_t i = 0; i < a.size_; ++i)
      if (!(a.segments_[i] == b.segments_[i])) return false;
    return true;
  }

  void push_field(std::string_view name) { push({Segment::Kind::field, name, 0}); }
  void push_index(std::size_t i) { push({Segment::Kind::index, {}, i}); }
  void push_key(std::string_view key) { push({Segment::Kind::key, key, 0}); }
  void pop() noexcept { --size_; }

 private:
  void push(const Segment& s) {
    if (size_ == kMaxDepth)
      throw StructureError(display() + ": parameter tree deeper than " + std::to_string(kMaxDepth) + " levels");
    segments_[size_++] = s;
  }

  std::array<Segment, kMaxDepth> segments_{};
  std::size_t size_ = 0;
};

}  // namespace geomopt::ptree

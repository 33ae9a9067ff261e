#include "idx.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <type_traits>
#include <climits>
#include <memory>

namespace geomopt::examples {
namespace {

constexpr std::uint32_t kImagesMagic = 0x00000803;  // unsigned byte, rank 3
constexpr std::uint32_t kLabelsMagic = 0x00000801;  // unsigned byte, rank 1
// Far above any IDX file of this family (Fashion-MNIST's training images are 47 MB) and below what gzread takes.
constexpr std::int64_t kMaxBytes = std::int64_t{1} << 30;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

class Reader {
 public:
  explicit Reader(const std::filesystem::path& file) : name_(file.string()) {
    std::error_code ec;
    if (!std::filesystem::exists(file, ec))
      throw IdxError(name_ + ": no such file (install Debian's dataset-fashion-mnist, or pass --data DIR)");
    if (!std::filesystem::is_regular_file(file, ec)) throw IdxError(name_ + ": not a regular file");
    file_.reset(gzopen(name_.c_str(), "rb"));
    if (!file_) throw IdxError(name_ + ": cannot be opened");
  }

  const std::string& name() const { return name_; }

  void read(void* out, std::int64_t bytes, const char* what) {
    auto* p = static_cast<unsigned char*>(out);
    while (bytes > 0) {
      const unsigned chunk = static_cast<unsigned>(std::min<std::int64_t>(bytes, INT_MAX / 2));
      const int got = gzread(file_.get(), p, chunk);
      if (got < 0) {
        int code = 0;
        const char* message = gzerror(file_.get(), &code);
        throw IdxError(name_ + ": corrupt data while reading the " + what + " (" + message + ")");
      }
      if (got == 0) throw IdxError(name_ + ": the file ends inside the " + what);
      p += got;
      bytes -= got;
    }
  }

  std::uint32_t big_endian_u32(const char* what) {
    std::array<unsigned char, 4> b{};
    read(b.data(), 4, what);
    return (std::uint32_t{b[0]} << 24) | (std::uint32_t{b[1]} << 16) | (std::uint32_t{b[2]} << 8) | b[3];
  }

  void expect_end() {
    unsigned char extra = 0;
    const int got = gzread(file_.get(), &extra, 1);
    if (got != 0) throw IdxError(name_ + ": trailing bytes after the data the header announces");
  }

  void expect_magic(std::uint32_t expected, const char* kind) {
    const std::uint32_t magic = big_endian_u32("header");
    if (magic == expected) return;
    char buffer[160];
    std::snprintf(buffer, sizeof buffer, ": not an IDX %s file (magic number 0x%08x, expected 0x%08x)", kind,
                  static_cast<unsigned>(magic), static_cast<unsigned>(expected));
    throw IdxError(name_ + buffer);
  }

 private:
  std::string name_;
  GzFile file_;
};

}  // namespace

IdxImages read_idx_images(const std::filesystem::path& file) {
  Reader reader(file);
  reader.expect_magic(kImagesMagic, "images (unsigned byte, rank 3)");
  IdxImages out;
  out.count = reader.big_endian_u32("header");
  out.rows = reader.big_endian_u32("header");
  out.cols = reader.big_endian_u32("header");
  if (out.rows == 0 || out.cols == 0) throw IdxError(reader.name() + ": images of size 0");
  const std::int64_t bytes = out.count * out.rows * out.cols;
  if (out.rows > 65536 || out.cols > 65536 || bytes > kMaxBytes)
    throw IdxError(reader.name() + ": the header announces " + std::to_string(out.count) + " images of " +
                   std::to_string(out.rows) + " x " + std::to_string(out.cols) + ", more than this reader takes");
  out.pixels.resize(static_cast<std::size_t>(bytes));
  reader.read(out.pixels.data(), bytes, "pixels");
  reader.expect_end();
  return out;
}

IdxLabels read_idx_labels(const std::filesystem::path& file) {
  Reader reader(file);
  reader.expect_magic(kLabelsMagic, "labels (unsigned byte, rank 1)");
  const std::int64_t count = reader.big_endian_u32("header");
  if (count > kMaxBytes) throw IdxError(reader.name() + ": the header announces too many labels");
  IdxLabels out;
  out.labels.resize(static_cast<std::size_t>(count));
  reader.read(out.labels.data(), count, "labels");
  reader.expect_end();
  return out;
}

LabelledImages read_idx_pair(const std::filesystem::path& images, const std::filesystem::path& labels,
                             int classes) {
  LabelledImages out{read_idx_images(images), read_idx_labels(labels)};
  const auto n = static_cast<std::int64_t>(out.labels.labels.size());
  if (n != out.images.count)
    throw IdxError(labels.string() + ": " + std::to_string(n) + " labels for the " +
                   std::to_string(out.images.count) + " images of " + images.string());
  for (std::int64_t i = 0; i < n; ++i)
    if (out.labels.labels[static_cast<std::size_t>(i)] >= classes)
      throw IdxError(labels.string() + ": label " + std::to_string(out.labels.labels[static_cast<std::size_t>(i)]) +
                     " at index " + std::to_string(i) + ", expected 0.." + std::to_string(classes - 1));
  return out;
}

}  // namespace geomopt::examples

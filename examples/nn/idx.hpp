// IDX files (the MNIST family's format): a big-endian header, then unsigned bytes. An images file has the magic
// number 0x00000803 and dimensions count x rows x cols; a labels file 0x00000801 and count. Files may be gzip
// compressed (as Debian's dataset packages ship them) or plain; zlib reads both.
//
// Every failure throws IdxError naming the file and what was wrong: missing, not IDX, a wrong element type or rank, a
// size that does not match the header, or trailing bytes.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace geomopt::examples {

class IdxError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct IdxImages {
  std::int64_t count = 0, rows = 0, cols = 0;
  std::vector<std::uint8_t> pixels;  // count * rows * cols, image after image, each row-major
};

struct IdxLabels {
  std::vector<std::uint8_t> labels;
};

IdxImages read_idx_images(const std::filesystem::path& file);
IdxLabels read_idx_labels(const std::filesystem::path& file);

// A dataset split: images and labels of one count, labels checked to be below `classes`.
struct LabelledImages {
  IdxImages images;
  IdxLabels labels;
};
LabelledImages read_idx_pair(const std::filesystem::path& images, const std::filesystem::path& labels,
                             int classes);

}  // namespace geomopt::examples

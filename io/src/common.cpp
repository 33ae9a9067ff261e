// Error, LoadReport and the options' checks: everything of the io library that does not touch HDF5.
#include <string>

#include "geomopt/io/detail/view.hpp"
#include "geomopt/io/error.hpp"
#include "geomopt/io/options.hpp"
#include "guard.hpp"

namespace geomopt::io {

const char* kind_name(ProblemKind kind) noexcept {
  switch (kind) {
    case ProblemKind::file:
      return "file";
    case ProblemKind::missing:
      return "missing";
    case ProblemKind::unexpected:
      return "unexpected";
    case ProblemKind::shape:
      return "shape";
    case ProblemKind::dtype:
      return "dtype";
    case ProblemKind::type:
      return "type";
    case ProblemKind::metadata:
      return "metadata";
    case ProblemKind::tie:
      return "tie";
    case ProblemKind::checksum:
      return "checksum";
    case ProblemKind::value:
      return "value";
  }
  return "problem";
}

namespace {
std::string message(const std::string& context, const std::vector<Problem>& problems) {
  std::string m = "geomopt::io::" + context + ": ";
  if (problems.size() == 1 && problems[0].path.empty()) return m + problems[0].message;
  m += std::to_string(problems.size()) + (problems.size() == 1 ? " problem" : " problems");
  for (const Problem& p : problems) {
    m += "\n  ";
    m += p.path.empty() ? std::string("(file)") : p.path;
    m += ": ";
    m += kind_name(p.kind);
    m += ": ";
    m += p.message;
  }
  return m;
}
}  // namespace

Error::Error(const std::string& context, std::vector<Problem> problems)
    : std::runtime_error(message(context, problems)), problems_(std::move(problems)) {}

Error::~Error() = default;

bool Error::has(ProblemKind kind, const std::string& path) const noexcept {
  for (const Problem& p : problems_)
    if (p.kind == kind && p.path == path) return true;
  return false;
}

bool SaveOptions::is_valid(std::string* error) const {
  std::string why;
  if (compression < 0 || compression > 9)
    why = "compression must be 0 to 9, got " + std::to_string(compression);
  else if (group.empty() || group.front() == '/' || group.back() == '/' || group.find("//") != std::string::npos)
    why = "group must be a relative path like \"params\" or \"run/params\", got \"" + group + "\"";
  if (!why.empty() && error != nullptr) *error = why;
  return why.empty();
}

bool LoadOptions::is_valid(std::string* error) const {
  std::string why;
  if (group.empty() || group.front() == '/' || group.back() == '/' || group.find("//") != std::string::npos)
    why = "group must be a relative path like \"params\" or \"run/params\", got \"" + group + "\"";
  else
    why = detail::timeout_problem("isolate_timeout", isolate_timeout);
  if (!why.empty() && error != nullptr) *error = why;
  return why.empty();
}

std::string LoadReport::brief_report() const {
  std::string s = "loaded " + std::to_string(loaded.size()) + (loaded.size() == 1 ? " leaf" : " leaves");
  if (!state.empty())
    s += " and " + std::to_string(state.size()) + (state.size() == 1 ? " state array" : " state arrays");
  s += "; " + std::to_string(missing.size()) + " missing, " + std::to_string(unexpected.size()) + " unexpected";
  if (!cast.empty()) s += ", " + std::to_string(cast.size()) + " cast";
  if (!differences.empty()) s += ", " + std::to_string(differences.size()) + " differences";
  return s;
}

std::string LoadReport::full_report() const {
  std::string s = brief_report() + "\n";
  auto list = [&](const char* title, const std::vector<std::string>& v) {
    for (const auto& p : v) s += std::string("  ") + title + ": " + p + "\n";
  };
  list("missing", missing);
  list("unexpected", unexpected);
  list("cast", cast);
  list("difference", differences);
  return s;
}

namespace detail {

const char* dtype_name(Dtype d) noexcept {
  switch (d) {
    case Dtype::f32:
      return "float32";
    case Dtype::f64:
      return "float64";
    case Dtype::i8:
      return "int8";
    case Dtype::u8:
      return "uint8";
    case Dtype::i16:
      return "int16";
    case Dtype::u16:
      return "uint16";
    case Dtype::i32:
      return "int32";
    case Dtype::u32:
      return "uint32";
    case Dtype::i64:
      return "int64";
    case Dtype::u64:
      return "uint64";
    case Dtype::boolean:
      return "bool";
  }
  return "?";
}

std::size_t dtype_size(Dtype d) noexcept {
  switch (d) {
    case Dtype::f32:
    case Dtype::i32:
    case Dtype::u32:
      return 4;
    case Dtype::f64:
    case Dtype::i64:
    case Dtype::u64:
      return 8;
    case Dtype::i16:
    case Dtype::u16:
      return 2;
    case Dtype::i8:
    case Dtype::u8:
    case Dtype::boolean:
      return 1;
  }
  return 1;
}

void throw_not_contiguous(const std::string& path) {
  throw Error("describe", {{ProblemKind::type, path,
                            "a storage block must be one dense array (inner stride 1, no padding between columns)"}});
}

}  // namespace detail
}  // namespace geomopt::io

// geomopt's SGD, Adam, AdamW, RMSprop and Adagrad against torch.optim (1.13, foreach=False): the same initial
// parameters and the same 100 gradients, and the parameters compared after every recorded step, in float and double.
//
// The reference is tests/optimizers/data/torch_trajectories.txt, made by make_torch_trajectories.py next to it (its
// docstring describes the file). Each configuration's constructor arguments are read from the file, so geomopt's
// optimizer gets exactly the arguments torch got; the test names the configurations it requires, so a file that lost
// one fails rather than passing with less.
//
// Error measure. For entry i after step k, with a = geomopt, b = torch:
//
//     err = |a - b| / max(1e-3, max |b_i| over the initial value and the recorded steps up to k)
//
// and err <= 1e-5 in float, 1e-12 in double. Two implementations of the same formulas differ by rounding only
// (operation order, FMA contraction), and a rounding difference is absolute at the magnitude the number had when it
// was rounded: an entry that has been at 300 and is now at 1e-3 carries differences of a few ulp(300), a relative
// 1e-2 of its current value in float. Measured against its current value (max(|b|, 1e-3)), entries passing near
// zero fail for rounding alone, and whether they do hangs on a recorded step falling near a zero crossing: with this
// data, five float configs reach 1.2e-5 .. 4e-5 that way. Measured against the largest magnitude the entry has held
// (a step's update, the difference of two consecutive values, is at most twice that), err is the relative rounding
// error of the numbers the steps computed, which is what the tolerances bound: it measures <= 5e-7 in float and
// <= 2.2e-15 in double. It is not lax: the initial values are 0.03..2 in magnitude, and a formula or coefficient
// that differs from torch's changes every step's update by a fraction of lr * |g|; changing one hyperparameter
// (beta2 by 1e-4 relative, eps or dampening or lr_decay by 10%) gives err 1e-4 .. 1e-1, dampening from step 2 on.
// Adam's and RMSprop's smallest-gradient entries (1e-9 .. 1e-6, where eps dominates) still move by ~lr a step, so
// eps is checked at that resolution. The 1e-3 floor only matters for an entry that has stayed below 1e-3 all along
// (none does in this data) and keeps a zero from dividing.
#include <doctest/doctest.h>

#include <Eigen/Core>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <geomopt/optimizers.hpp>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace {

template <class T>
struct Net {
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> w;  // 3 x 4
  Eigen::Matrix<T, Eigen::Dynamic, 1> b;               // 5
  geomopt::SymmetricMatrix<T> s;                       // 3 x 3, packed: a 6-vector of storage
  GEOMOPT_PTREE(w, b, s)
};

constexpr Eigen::Index kRowsW = 3, kColsW = 4, kSizeB = 5, kSizeS = 6;
constexpr std::size_t kEntries = kRowsW * kColsW + kSizeB + kSizeS;  // 23 numbers a row
constexpr int kSteps = 100;
constexpr std::size_t kMinRecords = 30;  // the file records steps 1..20 and every 5th after

const char* const kPath = GEOMOPT_TEST_SOURCE_DIR "/optimizers/data/torch_trajectories.txt";

// The configurations the test requires, by optimizer family (the file may hold more; they are run as well).
const std::map<std::string, std::vector<std::string>> kRequired = {
    {"SGD", {"sgd_plain", "sgd_momentum", "sgd_nesterov", "sgd_weight_decay"}},
    {"Adam", {"adam", "adam_betas_eps", "adam_amsgrad", "adam_weight_decay"}},
    {"AdamW", {"adamw", "adamw_amsgrad"}},
    {"RMSprop", {"rmsprop", "rmsprop_centered_momentum"}},
    {"Adagrad", {"adagrad"}},
};

template <class T>
using Row = std::vector<T>;

template <class T>
struct Config {
  std::string name, optimizer;
  std::vector<std::pair<std::string, std::string>> args;  // key, value as written
  std::vector<Row<T>> steps;                              // one per recorded step, in order
};

template <class T>
struct Block {
  bool present = false;
  Row<T> init;
  std::vector<Row<T>> grads;  // grads[k - 1] is the gradient of step k
  std::vector<Config<T>> configs;
};

struct Reference {
  std::string error;  // empty when the file was read whole
  int steps = 0;
  std::vector<int> record;
  std::size_t configs = 0;
  Block<float> f32;
  Block<double> f64;

  template <class T>
  const Block<T>& block() const {
    if constexpr (std::is_same_v<T, float>) {
      return f32;
    } else {
      return f64;
    }
  }
};

// A std::string, which doctest's messages print as text (a const char* they would print as a pointer).
template <class T>
std::string dtype_name() {
  return std::is_same_v<T, float> ? "float32" : "float64";
}

class Parser {
 public:
  explicit Parser(std::istream& in) : in_(in) {}

  // The next non-empty, non-comment line, split into words; false at the end of the file.
  bool next() {
    std::string line;
    while (std::getline(in_, line)) {
      ++line_no_;
      std::istringstream ss(line);
      words_.clear();
      for (std::string w; ss >> w;) words_.push_back(w);
      if (!words_.empty() && words_[0][0] != '#') return true;
    }
    words_.clear();
    return false;
  }
  const std::vector<std::string>& words() const { return words_; }
  const std::string& word(std::size_t i) const {
    if (i >= words_.size()) fail("expected at least " + std::to_string(i + 1) + " words");
    return words_[i];
  }
  void expect_head(const std::string& head) const {
    if (words_.empty() || words_[0] != head)
      fail("expected a '" + head + "' line, got '" + (words_.empty() ? std::string("end of file") : words_[0]) + "'");
  }
  void expect_size(std::size_t n) const {
    if (words_.size() != n)
      fail("expected " + std::to_string(n) + " words on a '" + words_[0] + "' line, got " +
           std::to_string(words_.size()));
  }
  long integer(std::size_t i) const {
    const std::string& w = word(i);
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(w.c_str(), &end, 10);
    if (errno != 0 || end != w.c_str() + w.size() || w.empty()) fail("'" + w + "' is not an integer");
    return v;
  }
  // Words [first, first + n) as numbers of type T, each parsed exactly (strtof / strtod round correctly).
  template <class T>
  Row<T> numbers(std::size_t first, std::size_t n) const {
    if (words_.size() != first + n)
      fail("expected " + std::to_string(n) + " numbers on a '" + words_[0] + "' line, got " +
           std::to_string(words_.size() < first ? 0 : words_.size() - first));
    Row<T> out(n);
    for (std::size_t i = 0; i < n; ++i) out[i] = number<T>(words_[first + i]);
    return out;
  }
  template <class T>
  T number(const std::string& w) const {
    char* end = nullptr;
    errno = 0;
    T v{};
    if constexpr (std::is_same_v<T, float>) {
      v = std::strtof(w.c_str(), &end);
    } else {
      v = std::strtod(w.c_str(), &end);
    }
    if (errno != 0 || w.empty() || end != w.c_str() + w.size() || !std::isfinite(v))
      fail("'" + w + "' is not a finite " + dtype_name<T>() + " number");
    return v;
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error(std::string(kPath) + ":" + std::to_string(line_no_) + ": " + what);
  }

 private:
  std::istream& in_;
  std::vector<std::string> words_;
  int line_no_ = 0;
};

template <class T>
void read_block(Parser& p, Reference& ref, Block<T>& blk) {
  const std::string dtype = dtype_name<T>();
  if (blk.present) p.fail("a second 'dtype " + dtype + "' block");
  blk.present = true;
  if (!p.next()) p.fail("the file ends after 'dtype'");
  p.expect_head("init");
  blk.init = p.numbers<T>(1, kEntries);
  for (int k = 1; k <= ref.steps; ++k) {
    if (!p.next()) p.fail("the file ends in the gradients");
    p.expect_head("grad");
    if (p.integer(1) != k) p.fail("expected 'grad " + std::to_string(k) + "', got 'grad " + p.word(1) + "'");
    blk.grads.push_back(p.numbers<T>(2, kEntries));
  }
  for (std::size_t c = 0; c < ref.configs; ++c) {
    if (!p.next()) p.fail("the file ends after " + std::to_string(c) + " configs of " + dtype);
    p.expect_head("config");
    Config<T> cfg;
    cfg.name = p.word(1);
    cfg.optimizer = p.word(2);
    for (std::size_t i = 3; i < p.words().size(); ++i) {
      const std::string& kv = p.words()[i];
      const auto eq = kv.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == kv.size()) p.fail("'" + kv + "' is not key=value");
      cfg.args.emplace_back(kv.substr(0, eq), kv.substr(eq + 1));
    }
    for (const Config<T>& other : blk.configs)
      if (other.name == cfg.name) p.fail("config " + cfg.name + " appears twice in " + dtype);
    for (const int k : ref.record) {
      if (!p.next()) p.fail("the file ends in config " + cfg.name + " " + dtype);
      p.expect_head("step");
      if (p.integer(1) != k)
        p.fail("config " + cfg.name + " " + dtype + ": expected 'step " + std::to_string(k) + "', got 'step " +
               p.word(1) + "'");
      cfg.steps.push_back(p.numbers<T>(2, kEntries));
    }
    blk.configs.push_back(std::move(cfg));
  }
}

Reference read_reference() {
  Reference ref;
  try {
    std::ifstream in(kPath);
    if (!in) throw std::runtime_error(std::string("cannot open ") + kPath);
    Parser p(in);
    if (!p.next()) p.fail("empty file");
    p.expect_head("geomopt-torch-trajectories");
    p.expect_size(2);
    if (p.integer(1) != 1) p.fail("format version " + p.word(1) + ", this test reads version 1");
    if (!p.next()) p.fail("the file ends in the header");
    p.expect_head("torch");
    if (!p.next()) p.fail("the file ends in the header");
    p.expect_head("steps");
    p.expect_size(2);
    ref.steps = static_cast<int>(p.integer(1));
    if (ref.steps != kSteps) p.fail("steps " + p.word(1) + ", expected " + std::to_string(kSteps));
    if (!p.next()) p.fail("the file ends in the header");
    p.expect_head("record");
    const long n = p.integer(1);
    if (n < static_cast<long>(kMinRecords) || n > ref.steps)
      p.fail("record " + p.word(1) + ": expected " + std::to_string(kMinRecords) + ".." + std::to_string(ref.steps) +
             " recorded steps");
    p.expect_size(2 + static_cast<std::size_t>(n));
    for (long i = 0; i < n; ++i) {
      const long k = p.integer(2 + static_cast<std::size_t>(i));
      if (k < 1 || k > ref.steps || (!ref.record.empty() && k <= ref.record.back()))
        p.fail("recorded steps must increase within 1.." + std::to_string(ref.steps));
      ref.record.push_back(static_cast<int>(k));
    }
    if (ref.record.back() != ref.steps) p.fail("the last step must be recorded");
    if (!p.next()) p.fail("the file ends in the header");
    p.expect_head("leaves");
    const std::vector<std::string> leaves = {"leaves", "3", "w", "3", "4", "b", "5", "1", "s", "6", "1"};
    if (p.words() != leaves) p.fail("expected the leaves 'w 3 4 b 5 1 s 6 1'");
    if (!p.next()) p.fail("the file ends in the header");
    p.expect_head("configs");
    p.expect_size(2);
    const long m = p.integer(1);
    if (m < 1) p.fail("no configs");
    ref.configs = static_cast<std::size_t>(m);
    while (p.next()) {
      if (p.words()[0] == "end") {
        p.expect_size(1);
        if (p.next()) p.fail("text after 'end'");
        if (!ref.f32.present || !ref.f64.present) p.fail("expected a float32 and a float64 block");
        return ref;
      }
      p.expect_head("dtype");
      p.expect_size(2);
      if (p.word(1) == "float32") {
        read_block(p, ref, ref.f32);
      } else if (p.word(1) == "float64") {
        read_block(p, ref, ref.f64);
      } else {
        p.fail("unknown dtype " + p.word(1));
      }
    }
    p.fail("no 'end' line: the file is truncated");
  } catch (const std::exception& e) {
    ref.error = e.what();
  }
  return ref;
}

// Read once; every test case REQUIREs that it was read whole.
const Reference& reference() {
  static const Reference ref = read_reference();
  return ref;
}

template <class T>
Net<T> make_net(const Row<T>& row) {
  Net<T> net;
  net.w.resize(kRowsW, kColsW);
  std::size_t k = 0;
  for (Eigen::Index i = 0; i < kRowsW; ++i)
    for (Eigen::Index j = 0; j < kColsW; ++j) net.w(i, j) = row[k++];  // torch's order: row by row
  net.b.resize(kSizeB);
  for (Eigen::Index i = 0; i < kSizeB; ++i) net.b[i] = row[k++];
  Eigen::Matrix<T, Eigen::Dynamic, 1> s(kSizeS);
  for (Eigen::Index i = 0; i < kSizeS; ++i) s[i] = row[k++];
  net.s = geomopt::SymmetricMatrix<T>::from_storage(std::move(s));
  return net;
}

// Entry k of a row, as the name of the leaf entry it is.
std::string entry_name(std::size_t k) {
  const auto i = static_cast<Eigen::Index>(k);
  if (i < kRowsW * kColsW) return "w(" + std::to_string(i / kColsW) + "," + std::to_string(i % kColsW) + ")";
  if (i < kRowsW * kColsW + kSizeB) return "b[" + std::to_string(i - kRowsW * kColsW) + "]";
  return "s[" + std::to_string(i - kRowsW * kColsW - kSizeB) + "]";
}

template <class T>
T entry(const Net<T>& net, std::size_t k) {
  const auto i = static_cast<Eigen::Index>(k);
  if (i < kRowsW * kColsW) return net.w(i / kColsW, i % kColsW);
  if (i < kRowsW * kColsW + kSizeB) return net.b[i - kRowsW * kColsW];
  return free_parameters(net.s)[i - kRowsW * kColsW - kSizeB];  // found by ADL
}

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// A config's arguments as written, each to be taken exactly once.
template <class T>
class Args {
 public:
  explicit Args(const Config<T>& c) : c_(c) {}
  double number(const std::string& key) {
    const std::string& v = find(key);
    char* end = nullptr;
    const double x = std::strtod(v.c_str(), &end);
    if (end != v.c_str() + v.size() || !std::isfinite(x)) throw std::runtime_error(where(key) + " is not a number");
    return x;
  }
  bool flag(const std::string& key) {
    const std::string& v = find(key);
    if (v != "0" && v != "1") throw std::runtime_error(where(key) + " is not 0 or 1");
    return v == "1";
  }
  // Every argument torch got must have been given to geomopt.
  void all_taken() const {
    for (const auto& [key, value] : c_.args)
      if (!taken_.count(key)) throw std::runtime_error(where(key) + " has no geomopt counterpart in this test");
  }

 private:
  const std::string& find(const std::string& key) {
    for (const auto& [k, v] : c_.args) {
      if (k == key) {
        if (!taken_.insert(key).second) throw std::runtime_error(where(key) + " is given twice");
        return v;
      }
    }
    throw std::runtime_error("config " + c_.name + " (" + c_.optimizer + "): no argument " + key);
  }
  std::string where(const std::string& key) const {
    return "config " + c_.name + " (" + c_.optimizer + "): argument " + key;
  }
  const Config<T>& c_;
  std::set<std::string> taken_;
};

struct Outcome {
  double max_err = 0;
  std::string worst;          // where max_err is
  std::string first_failure;  // the first recorded step with an entry over the tolerance, if any
  std::size_t compared = 0;   // entries compared
};

// Steps a fresh optimizer through the reference gradients, comparing after every recorded step.
template <class T, class Optimizer>
Outcome run(Optimizer opt, const Reference& ref, const Block<T>& blk, const Config<T>& cfg, double tol) {
  Outcome out;
  Net<T> params = make_net(blk.init);
  auto state = opt.init(params);
  Row<double> scale(kEntries);
  for (std::size_t i = 0; i < kEntries; ++i) scale[i] = std::max(1e-3, std::abs(static_cast<double>(blk.init[i])));
  std::size_t r = 0;
  for (int k = 1; k <= ref.steps; ++k) {
    const Net<T> grads = make_net(blk.grads[static_cast<std::size_t>(k - 1)]);
    opt.step(params, grads, state);
    if (r >= ref.record.size() || ref.record[r] != k) continue;
    const Row<T>& torch = cfg.steps[r++];
    for (std::size_t i = 0; i < kEntries; ++i) {
      const double a = entry(params, i), b = torch[i];
      scale[i] = std::max(scale[i], std::abs(b));
      const double err = std::abs(a - b) / scale[i];
      ++out.compared;
      const std::string at = "config " + cfg.name + " " + dtype_name<T>() + " step " + std::to_string(k) + " leaf " +
                             entry_name(i) + ": geomopt " + num(a) + ", torch " + num(b) + ", relative error " +
                             num(err) + " (scale " + num(scale[i]) + ")";
      if (!(err <= out.max_err)) {  // a NaN counts as infinitely wrong
        out.max_err = std::isnan(err) ? std::numeric_limits<double>::infinity() : err;
        out.worst = at;
      }
      if (out.first_failure.empty() && !(err <= tol)) out.first_failure = at;
    }
  }
  return out;
}

template <class T>
Outcome run_config(const Reference& ref, const Block<T>& blk, const Config<T>& cfg, double tol) {
  Args<T> a(cfg);
  auto go = [&](auto opt) {
    a.all_taken();
    return run<T>(std::move(opt), ref, blk, cfg, tol);
  };
  if (cfg.optimizer == "SGD") {
    return go(geomopt::SGD({.lr = a.number("lr"),
                            .momentum = a.number("momentum"),
                            .dampening = a.number("dampening"),
                            .nesterov = a.flag("nesterov"),
                            .weight_decay = a.number("weight_decay")}));
  }
  if (cfg.optimizer == "Adam") {
    return go(geomopt::Adam({.lr = a.number("lr"),
                             .beta1 = a.number("beta1"),
                             .beta2 = a.number("beta2"),
                             .eps = a.number("eps"),
                             .weight_decay = a.number("weight_decay"),
                             .amsgrad = a.flag("amsgrad")}));
  }
  if (cfg.optimizer == "AdamW") {
    return go(geomopt::AdamW({.lr = a.number("lr"),
                              .beta1 = a.number("beta1"),
                              .beta2 = a.number("beta2"),
                              .eps = a.number("eps"),
                              .weight_decay = a.number("weight_decay"),
                              .amsgrad = a.flag("amsgrad")}));
  }
  if (cfg.optimizer == "RMSprop") {
    return go(geomopt::RMSprop({.lr = a.number("lr"),
                                .alpha = a.number("alpha"),
                                .eps = a.number("eps"),
                                .weight_decay = a.number("weight_decay"),
                                .momentum = a.number("momentum"),
                                .centered = a.flag("centered")}));
  }
  if (cfg.optimizer == "Adagrad") {
    return go(geomopt::Adagrad({.lr = a.number("lr"),
                                .lr_decay = a.number("lr_decay"),
                                .weight_decay = a.number("weight_decay"),
                                .initial_accumulator_value = a.number("initial_accumulator_value"),
                                .eps = a.number("eps")}));
  }
  throw std::runtime_error("config " + cfg.name + ": unknown optimizer " + cfg.optimizer);
}

// Every config of one optimizer family in one dtype, on one kernel path; requires the family's named configs to be
// among them.
template <class T>
void check_family_on_path(const std::string& family, double tol) {
  const Reference& ref = reference();
  REQUIRE_MESSAGE(ref.error.empty(), ref.error);
  const Block<T>& blk = ref.block<T>();
  REQUIRE(blk.configs.size() == ref.configs);
  REQUIRE(blk.grads.size() == static_cast<std::size_t>(kSteps));

  std::set<std::string> seen;
  for (const Config<T>& cfg : blk.configs) {
    if (cfg.optimizer != family) continue;
    seen.insert(cfg.name);
    INFO("config ", cfg.name, " ", dtype_name<T>(), " (", cfg.optimizer, ")");
    REQUIRE(cfg.steps.size() == ref.record.size());
    // Not vacuous: torch moved the parameters away from where they started.
    const Row<T>& last = cfg.steps.back();
    double moved = 0;
    for (std::size_t i = 0; i < kEntries; ++i)
      moved = std::max(moved, std::abs(static_cast<double>(last[i]) - static_cast<double>(blk.init[i])));
    REQUIRE_MESSAGE(moved > 1e-2, "config ", cfg.name, " ", dtype_name<T>(), ": torch's parameters did not move");

    Outcome out;
    try {
      out = run_config<T>(ref, blk, cfg, tol);
    } catch (const std::exception& e) {
      FAIL_CHECK("config ", cfg.name, " ", dtype_name<T>(), ": ", std::string(e.what()));
      continue;
    }
    REQUIRE(out.compared == ref.record.size() * kEntries);
    CHECK_MESSAGE(out.first_failure.empty(), "first entry over the tolerance ", tol, ": ", out.first_failure,
                  "; largest: ", out.worst);
    // With --success (-s), the measured error of every config.
    CHECK_MESSAGE(out.max_err <= tol, "max relative error ", num(out.max_err), " <= ", tol, " over ", ref.record.size(),
                  " recorded of ", ref.steps, " steps; at ", out.worst);
  }
  for (const std::string& name : kRequired.at(family)) {
    CAPTURE(name);
    CHECK_MESSAGE(seen.count(name) == 1, "config ", name, " (", family, ") ", dtype_name<T>(),
                  " is missing from the reference file");
  }
}

// On each kernel path this machine has (portable always; AVX2 + FMA where the CPU has them), the default restored.
template <class T>
void check_family(const std::string& family, double tol) {
  const geomopt::KernelPath before = geomopt::kernel_path();
  for (const geomopt::KernelPath path : {geomopt::KernelPath::portable, geomopt::KernelPath::avx2}) {
    const char* name = path == geomopt::KernelPath::avx2 ? "avx2" : "portable";
    if (!geomopt::kernel_path_available(path)) {
      MESSAGE("kernel path ", name, " is not available on this machine");
      continue;
    }
    INFO("kernel path ", name);
    geomopt::set_kernel_path(path);
    check_family_on_path<T>(family, tol);
  }
  geomopt::set_kernel_path(before);
}

constexpr double kTolFloat = 1e-5;
constexpr double kTolDouble = 1e-12;

}  // namespace

TEST_CASE("torch reference file: read whole, every config in both dtypes, every optimizer family known") {
  const Reference& ref = reference();
  REQUIRE_MESSAGE(ref.error.empty(), ref.error);
  REQUIRE(ref.steps == kSteps);
  REQUIRE(ref.record.size() >= kMinRecords);
  REQUIRE(ref.record.back() == ref.steps);
  std::size_t required = 0;
  for (const auto& [family, names] : kRequired) required += names.size();
  REQUIRE(ref.configs >= required);
  REQUIRE(ref.f32.configs.size() == ref.configs);
  REQUIRE(ref.f64.configs.size() == ref.configs);
  for (std::size_t c = 0; c < ref.configs; ++c) {
    const Config<float>& f = ref.f32.configs[c];
    const Config<double>& d = ref.f64.configs[c];
    CAPTURE(d.name);
    CHECK(f.name == d.name);
    CHECK(f.optimizer == d.optimizer);
    CHECK(f.args == d.args);
    CHECK_MESSAGE(kRequired.count(d.optimizer) == 1, "unknown optimizer family ", d.optimizer);
  }
  // The float32 inputs are the float64 ones rounded to float, as torch's .to(torch.float32) rounds them.
  for (std::size_t i = 0; i < kEntries; ++i) CHECK(ref.f32.init[i] == static_cast<float>(ref.f64.init[i]));
  for (std::size_t k = 0; k < ref.f64.grads.size(); ++k)
    for (std::size_t i = 0; i < kEntries; ++i) CHECK(ref.f32.grads[k][i] == static_cast<float>(ref.f64.grads[k][i]));
}

TEST_CASE("SGD matches torch.optim.SGD: plain, momentum with dampening, Nesterov, weight decay") {
  SUBCASE("float") { check_family<float>("SGD", kTolFloat); }
  SUBCASE("double") { check_family<double>("SGD", kTolDouble); }
}

TEST_CASE("Adam matches torch.optim.Adam: defaults, betas and eps, AMSGrad, L2 weight decay") {
  SUBCASE("float") { check_family<float>("Adam", kTolFloat); }
  SUBCASE("double") { check_family<double>("Adam", kTolDouble); }
}

TEST_CASE("AdamW matches torch.optim.AdamW: decoupled weight decay, AMSGrad") {
  SUBCASE("float") { check_family<float>("AdamW", kTolFloat); }
  SUBCASE("double") { check_family<double>("AdamW", kTolDouble); }
}

TEST_CASE("RMSprop matches torch.optim.RMSprop: plain, centered with momentum and weight decay") {
  SUBCASE("float") { check_family<float>("RMSprop", kTolFloat); }
  SUBCASE("double") { check_family<double>("RMSprop", kTolDouble); }
}

TEST_CASE("Adagrad matches torch.optim.Adagrad: lr decay, initial accumulator, weight decay") {
  SUBCASE("float") { check_family<float>("Adagrad", kTolFloat); }
  SUBCASE("double") { check_family<double>("Adagrad", kTolDouble); }
}

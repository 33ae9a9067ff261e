#include "checkpoint.hpp"

#include <pybind11/stl.h>

#include <Eigen/Core>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "engine.hpp"
#include "geomopt/io.hpp"

namespace py = pybind11;

namespace geomopt::python {
namespace {

template <class T>
using Vector = ptree::BorrowedArray<T, 1>;
template <class T>
using Matrix = ptree::BorrowedArray<T>;
using Entry =
    std::variant<Leaf<float>, Leaf<double>, Vector<float>, Vector<double>, ptree::Buffer<Matrix<float>>,
                 ptree::Buffer<Matrix<double>>, ptree::Buffer<Matrix<std::int64_t>>, ptree::Buffer<Vector<float>>,
                 ptree::Buffer<Vector<double>>, ptree::Buffer<Vector<std::int64_t>>>;
using IoTree = std::map<std::string, Entry>;

/// One tensor of the module, as geomopt/io.py describes it.
struct TensorSpec {
  std::string name;
  int kind = 0;                     ///< a Kind; manifold kinds only for parameters
  std::string dtype;                ///< "float32", "float64" or "int64"
  std::uintptr_t data = 0;          ///< the tensor's data pointer
  std::int64_t rows = 0, cols = 0;  ///< a manifold's layout, or the row-major rows x cols of a Euclidean tensor
  bool vector = false;              ///< a 1-D or 0-D Euclidean tensor: the vector form, rows numbers
  bool transposed = false;          ///< a tall Stiefel or Grassmann tensor: through a column-major copy
  bool trainable = true;            ///< false: a buffer
};

/// The tree over the tensors' memory; tall manifold tensors through copies kept here.
struct ModuleTree {
  IoTree tree;
  std::vector<std::pair<std::vector<double>, const TensorSpec*>> copies_d;
  std::vector<std::pair<std::vector<float>, const TensorSpec*>> copies_f;

  explicit ModuleTree(const std::vector<TensorSpec>& specs) {
    for (const TensorSpec& s : specs) {
      if (tree.count(s.name) != 0) throw std::invalid_argument("geomopt.io: two tensors are named '" + s.name + "'");
      if (s.dtype == "float32")
        add<float>(s);
      else if (s.dtype == "float64")
        add<double>(s);
      else if (s.dtype == "int64" && !s.trainable)
        add_buffer<std::int64_t>(s);
      else
        throw std::invalid_argument("geomopt.io: '" + s.name + "' is " + s.dtype + "; parameters are float32 or " +
                                    "float64, buffers also int64");
    }
  }
  /// Copies the loaded numbers of tall manifold tensors back into the tensors.
  void copy_out() {
    copy_back(copies_f);
    copy_back(copies_d);
  }

 private:
  template <class T>
  auto& copies() {
    if constexpr (std::is_same_v<T, double>)
      return copies_d;
    else
      return copies_f;
  }
  template <class C>
  static void copy_back(C& copies) {
    for (auto& [copy, s] : copies) {
      using T = typename std::remove_reference_t<decltype(copy)>::value_type;
      detail::copy_to_row_major(copy.data(), s->rows, s->cols, reinterpret_cast<T*>(s->data));
    }
  }
  template <class T>
  void add(const TensorSpec& s) {
    T* data = reinterpret_cast<T*>(s.data);
    if (!s.trainable) {
      add_buffer<T>(s);
    } else if (s.kind == static_cast<int>(Kind::euclidean) && s.vector) {
      tree.emplace(s.name, Vector<T>(data, s.rows, 1));
    } else {
      Leaf<T> leaf;
      detail::emplace_leaf(leaf, s.kind);
      if (s.transposed) {
        auto& [copy, spec] = copies<T>().emplace_back(std::vector<T>(static_cast<std::size_t>(s.rows * s.cols)), &s);
        detail::copy_to_column_major(data, s.rows, s.cols, copy.data());
        data = copy.data();
      }
      detail::lend(leaf, data, s.rows, s.cols);
      tree.emplace(s.name, std::move(leaf));
    }
  }
  template <class T>
  void add_buffer(const TensorSpec& s) {
    T* data = reinterpret_cast<T*>(s.data);
    if (s.vector)
      tree.emplace(s.name, ptree::Buffer<Vector<T>>(Vector<T>(data, s.rows, 1)));
    else
      tree.emplace(s.name, ptree::Buffer<Matrix<T>>(Matrix<T>(data, s.rows, s.cols)));
  }
};

/// An engine's state (OptimizerState or MuonState) under the module's names, as io's checkpoint functions use a state
/// (checkpoint.hpp's State); the options translated as the header says, by group 0's rates: lr0 and weight_decay0
/// hold one entry, or two for a Muon state (Muon's, then its fallback's).
template <class State>
class NamedState {
 public:
  using T = typename State::Scalar;
  static constexpr bool kMuon = requires(const State& s) { s.muon_leaf(0); };

  NamedState(State& state, std::vector<std::string> names, std::vector<double> lr0, std::vector<double> weight_decay0,
             const std::vector<TensorSpec>& tensors)
      : s_(state), names_(std::move(names)), lr0_(std::move(lr0)), weight_decay0_(std::move(weight_decay0)) {
    const std::size_t rates = kMuon ? 2 : 1;
    if (lr0_.size() != rates || weight_decay0_.size() != rates)
      throw std::invalid_argument("geomopt.io: " + std::to_string(rates) + " rates expected for group 0, got " +
                                  std::to_string(lr0_.size()));
    if (const Tree<T>* ema = s_.ema()) {
      // The moving average, laid out like /params: each leaf over the average's numbers, in its tensor's form.
      std::map<std::string, const TensorSpec*> by_name;
      for (const TensorSpec& t : tensors) by_name[t.name] = &t;
      for (std::size_t i = 0; i < names_.size(); ++i) {
        const TensorSpec& t = *by_name.at(names_[i]);
        T* data = std::visit([](auto& x) { return const_cast<T*>(x.value().data()); }, ema->at(i));
        if (t.kind == static_cast<int>(Kind::euclidean) && t.vector) {
          ema_.emplace(names_[i], Vector<T>(data, t.rows, 1));
        } else {
          Leaf<T> leaf;
          detail::emplace_leaf(leaf, t.kind);
          detail::lend(leaf, data, t.rows, t.cols);
          ema_.emplace(names_[i], std::move(leaf));
        }
      }
    }
  }

  std::string_view optimizer() const { return s_.optimizer(); }
  std::int64_t step_count() const { return s_.step_count(); }
  void set_step_count(std::int64_t t) { s_.set_step_count(t); }
  Hyperparameters hyperparameters() const {
    Hyperparameters h = s_.hyperparameters();
    for (auto& [name, value] : h) {
      if (name == "lr") value = lr0_[0];
      if (name == "weight_decay") value = weight_decay0_[0];
      if (kMuon && name.starts_with("fallback.") && name.ends_with(".lr")) value = lr0_[1];
      if (kMuon && name.starts_with("fallback.") && name.ends_with(".weight_decay")) value = weight_decay0_[1];
    }
    return h;
  }
  template <class F>
  void for_each_slot(F&& f) {
    s_.for_each_slot([&](const std::string& path, std::string_view name, auto data) { f(name_of(path), name, data); });
  }
  const IoTree* ema() const { return s_.ema() != nullptr ? &ema_ : nullptr; }
  template <class F>
  void for_each_leaf_option(F&& f) const {
    s_.for_each_leaf_option([&](const std::string& path, std::string_view name, auto value) {
      using V = decltype(value);
      if constexpr (std::is_same_v<V, double>) {
        const std::size_t r = rate_of(path);
        if (name == "lr_scale") {
          f(name_of(path), name, lr0_[r] != 0 ? value / lr0_[r] : value);
          return;
        }
        if (name == "weight_decay" && value == weight_decay0_[r]) return;  // the hyperparameter's: not an option
      }
      f(name_of(path), name, value);
    });
  }
  template <class F>
  void for_each_leaf_step(F&& f) const {
    s_.for_each_leaf_step([&](const std::string& path, std::int64_t count) { f(name_of(path), count); });
  }
  std::size_t leaf_count() const { return s_.leaf_count(); }
  const std::string& leaf_path(std::size_t i) const { return names_.at(i); }
  bool leaf_frozen(std::size_t i) const { return s_.leaf_frozen(i); }
  void set_leaf_step_count(std::size_t i, std::int64_t t) { s_.set_leaf_step_count(i, t); }

 private:
  const std::string& name_of(const std::string& path) const { return names_.at(std::stoul(path)); }
  // Which of group 0's rates a leaf's options are relative to: Muon's (0) or its fallback's (1).
  std::size_t rate_of(const std::string& path) const {
    if constexpr (kMuon) {
      return s_.muon_leaf(std::stoul(path)) ? 0 : 1;
    } else {
      return 0;
    }
  }

  State& s_;
  std::vector<std::string> names_;  // the module's name of each engine leaf
  std::vector<double> lr0_, weight_decay0_;
  IoTree ema_;
};

py::dict report_dict(const io::LoadReport& r) {
  py::dict d;
  d["loaded"] = r.loaded;
  d["state"] = r.state;
  d["missing"] = r.missing;
  d["unexpected"] = r.unexpected;
  d["differences"] = r.differences;
  d["brief"] = r.brief_report();
  py::dict metadata;
  if (r.metadata.step) metadata["step"] = *r.metadata.step;
  for (const auto& [name, value] : r.metadata.attributes)
    std::visit([&, n = name](const auto& v) { metadata[py::str(n)] = v; }, value);
  d["metadata"] = metadata;
  return d;
}

// Calls f(NamedState<State>&) for the engine's state type: OptimizerState or MuonState, of float or double.
template <class F>
auto with_state(AnyEngine& engine, std::vector<std::string> names, const std::vector<double>& lr0,
                const std::vector<double>& wd0, const std::vector<TensorSpec>& tensors, F&& f) {
  auto named = [&]<class State>(std::type_identity<State>) {
    NamedState<State> s(*static_cast<State*>(engine.optimizer_state()), std::move(names), lr0, wd0, tensors);
    return f(s);
  };
  if (engine.rates() == 2)
    return engine.is_double() ? named(std::type_identity<MuonState<Tree<double>>>{})
                              : named(std::type_identity<MuonState<Tree<float>>>{});
  return engine.is_double() ? named(std::type_identity<OptimizerState<Tree<double>>>{})
                            : named(std::type_identity<OptimizerState<Tree<float>>>{});
}

}  // namespace

void bind_checkpoints(py::module_& m) {
  py::class_<TensorSpec>(m, "TensorSpec")
      .def(py::init<>())
      .def_readwrite("name", &TensorSpec::name)
      .def_readwrite("kind", &TensorSpec::kind)
      .def_readwrite("dtype", &TensorSpec::dtype)
      .def_readwrite("data", &TensorSpec::data)
      .def_readwrite("rows", &TensorSpec::rows)
      .def_readwrite("cols", &TensorSpec::cols)
      .def_readwrite("vector", &TensorSpec::vector)
      .def_readwrite("transposed", &TensorSpec::transposed)
      .def_readwrite("trainable", &TensorSpec::trainable);
  py::register_exception<io::Error>(m, "CheckpointError", PyExc_RuntimeError);

  m.def(
      "save_checkpoint",
      [](const std::string& file, const std::vector<TensorSpec>& tensors, AnyEngine* engine,
         std::vector<std::string> names, const std::vector<double>& lr0, const std::vector<double>& wd0,
         std::optional<std::int64_t> step, const std::map<std::string, io::Attribute>& attributes, bool overwrite,
         bool durable) {
        ModuleTree module(tensors);
        io::SaveOptions options;
        options.overwrite = overwrite;
        options.durable = durable;
        py::gil_scoped_release release;
        if (engine == nullptr) {
          io::save(file, module.tree, options);
          return;
        }
        io::Metadata metadata{step, attributes};
        with_state(*engine, std::move(names), lr0, wd0, tensors, [&](auto& state) {
          io::save_checkpoint(file, module.tree, state, metadata, options);
          return 0;
        });
      },
      py::arg("file"), py::arg("tensors"), py::arg("engine"), py::arg("names"), py::arg("lr0"), py::arg("wd0"),
      py::arg("step"), py::arg("attributes"), py::arg("overwrite"), py::arg("durable"));

  m.def(
      "load_checkpoint",
      [](const std::string& file, const std::vector<TensorSpec>& tensors, AnyEngine* engine,
         std::vector<std::string> names, const std::vector<double>& lr0, const std::vector<double>& wd0, bool strict) {
        ModuleTree module(tensors);
        io::LoadOptions options;
        options.strict = strict;
        io::LoadReport report;
        {
          py::gil_scoped_release release;
          if (engine == nullptr) {
            report = io::load(file, module.tree, options);
          } else {
            report = with_state(*engine, std::move(names), lr0, wd0, tensors,
                                [&](auto& state) { return io::load_checkpoint(file, module.tree, state, options); });
            engine->state_loaded();
          }
          module.copy_out();
        }
        return report_dict(report);
      },
      py::arg("file"), py::arg("tensors"), py::arg("engine"), py::arg("names"), py::arg("lr0"), py::arg("wd0"),
      py::arg("strict"));
}

}  // namespace geomopt::python

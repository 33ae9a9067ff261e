// geomopt._core: the compiled half of the Python package. It knows nothing of PyTorch: tensors reach it as data
// pointers and shapes that geomopt/torch.py has checked, and state arrays leave it as NumPy arrays over the engine's
// memory (torch.from_numpy shares them). So the extension builds against Python and pybind11 alone.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "engine.hpp"
#include "make_engine.hpp"
#include "manifold_functions.hpp"
#ifdef GEOMOPT_PYTHON_IO
#include "checkpoint.hpp"
#endif

namespace py = pybind11;
using geomopt::python::AnyEngine;
using geomopt::python::ParamSpec;
using geomopt::python::Report;
using geomopt::python::SlotView;

namespace {

// A NumPy array over an engine's memory, alive as long as the engine's Python object.
py::object view(const SlotView& v, py::handle owner) {
  if (v.data == nullptr) return py::none();
  if (v.is_double) return py::array_t<double>({v.size}, {sizeof(double)}, static_cast<double*>(v.data), owner);
  return py::array_t<float>({v.size}, {sizeof(float)}, static_cast<float*>(v.data), owner);
}

// Rethrows e, of its kind, with a leading "<leaf>: " (a path of an engine's tree: the leaf's index) replaced by
// "#<k>: ", k the parameter's position among the optimizer's, which geomopt/torch.py turns into its name.
template <class Index>
[[noreturn]] void rethrow_named(const std::exception& e, Index index) {
  std::string message = e.what();
  const auto colon = message.find(": ");
  if (colon != std::string::npos && colon > 0 && message.find_first_not_of("0123456789") == colon) {
    const std::size_t leaf = std::stoul(message.substr(0, colon));
    message = "#" + std::to_string(index(leaf)) + message.substr(colon);
  }
  if (dynamic_cast<const std::domain_error*>(&e) != nullptr) throw std::domain_error(message);
  if (dynamic_cast<const std::invalid_argument*>(&e) != nullptr) throw std::invalid_argument(message);
  throw std::runtime_error(message);
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "geomopt's compiled core: the engines behind geomopt.torch, the functions behind geomopt.manifolds";
  geomopt::python::bind_manifold_functions(m);
#ifdef GEOMOPT_PYTHON_IO
  geomopt::python::bind_checkpoints(m);
#endif

  m.def(
      "tensor_layout",
      [](int kind, const std::vector<std::int64_t>& shape) {
        const geomopt::TensorLayout l = geomopt::tensor_layout(static_cast<geomopt::TensorKind>(kind), shape);
        return py::make_tuple(l.rows, l.cols, l.transposed);
      },
      py::arg("kind"), py::arg("shape"),
      "The shape geomopt sees for a tensor of `shape` as a leaf of `kind`: (rows, cols, transposed) "
      "(geomopt/manifolds/tensor_layout.hpp); ValueError saying what shape the kind needs.");

  m.def(
      "tensor_point_tolerance",
      [](bool is_double, std::int64_t rows, std::int64_t cols) {
        return is_double ? geomopt::tensor_point_tolerance<double>(rows, cols)
                         : geomopt::tensor_point_tolerance<float>(rows, cols);
      },
      py::arg("is_double"), py::arg("rows"), py::arg("cols"),
      "How far a parameter given as a manifold point may be from its manifold (geomopt/manifolds/tensor_layout.hpp).");

  py::class_<ParamSpec>(m, "ParamSpec")
      .def(py::init<>())
      .def_readwrite("kind", &ParamSpec::kind)
      .def_readwrite("rows", &ParamSpec::rows)
      .def_readwrite("cols", &ParamSpec::cols)
      .def_readwrite("transposed", &ParamSpec::transposed)
      .def_readwrite("group", &ParamSpec::group)
      .def_readwrite("index", &ParamSpec::index)
      .def_readwrite("retraction", &ParamSpec::retraction)
      .def_readwrite("muon", &ParamSpec::muon)
      .def_readwrite("matrices", &ParamSpec::matrices);

  py::class_<Report>(m, "Report")
      .def_readonly("applied", &Report::applied)
      .def_readonly("grad_norm", &Report::grad_norm)
      .def_readonly("clip_scale", &Report::clip_scale)
      .def_readonly("non_finite_leaf", &Report::non_finite_leaf)
      .def_readonly("non_finite_reason", &Report::non_finite_reason);

  py::class_<AnyEngine>(m, "Engine")
      .def("__len__", &AnyEngine::size)
      .def("index", &AnyEngine::index)
      .def("slot_names", &AnyEngine::slot_names)
      .def("rates", &AnyEngine::rates)
      .def("slot", [](py::object self, std::size_t leaf,
                      std::size_t s) { return view(self.cast<AnyEngine&>().slot(leaf, s), self); })
      .def("section",
           [](py::object self, std::size_t leaf) { return view(self.cast<AnyEngine&>().section(leaf), self); })
      .def("ema", [](py::object self, std::size_t leaf) { return view(self.cast<AnyEngine&>().ema(leaf), self); })
      .def("steps", [](py::object self) { return view(self.cast<AnyEngine&>().steps(), self); })
      .def("step_count", &AnyEngine::step_count)
      .def("leaf_step_count", &AnyEngine::leaf_step_count)
      .def("set_step_counts", &AnyEngine::set_step_counts)
      .def("nbytes", &AnyEngine::nbytes)
      .def("distance", &AnyEngine::distance);

  m.def(
      "make_engine",
      [](const std::string& kernel, bool is_double, geomopt::python::OptionMap options, double clip_norm,
         double ema_decay, std::string non_finite, int threads, std::string section, std::vector<ParamSpec> specs,
         std::vector<std::uintptr_t> params, std::vector<double> lr, std::vector<double> weight_decay) {
        geomopt::python::EngineArgs a{
            std::move(options), {clip_norm, ema_decay, std::move(non_finite), threads, std::move(section)},
            std::move(specs),   std::move(params),
            std::move(lr),      std::move(weight_decay)};
        try {
          return geomopt::python::make_engine(kernel, is_double, a);
        } catch (const std::exception& e) {
          rethrow_named(e, [&](std::size_t leaf) { return leaf < a.specs.size() ? a.specs[leaf].index : leaf; });
        }
      },
      py::arg("kernel"), py::arg("is_double"), py::arg("options"), py::arg("clip_norm"), py::arg("ema_decay"),
      py::arg("non_finite"), py::arg("threads"), py::arg("section"), py::arg("specs"), py::arg("params"), py::arg("lr"),
      py::arg("weight_decay"),
      "An engine stepping the parameters of `specs` by the optimizer ('SGD', 'Adam', 'AdamW', 'RMSprop', 'Adagrad', "
      "'Muon', 'ManifoldMuon'); lr and weight_decay hold engine.rates() entries per group.");

  // One step of every engine, in order, without the GIL: the one call geomopt.torch makes per step().
  m.def(
      "step",
      [](const std::vector<AnyEngine*>& engines, const std::vector<std::uintptr_t>& params,
         const std::vector<std::uintptr_t>& grads, const std::vector<double>& lr,
         const std::vector<double>& weight_decay) {
        std::vector<Report> reports;
        reports.reserve(engines.size());
        py::gil_scoped_release release;
        for (AnyEngine* e : engines) {
          try {
            reports.push_back(e->step(params, grads, lr, weight_decay));
          } catch (const std::exception& error) {
            rethrow_named(error, [&](std::size_t leaf) { return leaf < e->size() ? e->index(leaf) : leaf; });
          }
        }
        return reports;
      },
      py::arg("engines"), py::arg("params"), py::arg("grads"), py::arg("lr"), py::arg("weight_decay"));
}

// The code of docs/file_format.md, of the checkpoint section of docs/concepts.md and of the README's checkpoint lines.
// Every C++ block of those pages is a region of a compiled file (tests/docs/snippet.cmake); docs_examples runs this
// one (`docs_examples file_format`, in its working directory, where it writes a few small files) and checks that
// what was saved loads back bit for bit and that a resumed run steps exactly like the original.
// snippet-begin: readme
#include <geomopt/io.hpp>

// snippet-end: readme
#include <geomopt/optimizers.hpp>

#include <Eigen/Core>
#include <cstdint>
#include <iostream>
#include <string>
#include <variant>

#include "expect.hpp"

namespace docs_file_format {

template <class T>
struct Model {
  geomopt::Stiefel<T> frame;
  Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic> head;
  GEOMOPT_PTREE(frame, head)
};

int run() {
  geomopt_docs::Expect expect{"file_format"};
  namespace pt = geomopt::ptree;

  geomopt::Rng rng(11);
  const Model<double> start{geomopt::Stiefel<double>::random_point(rng, 6, 2), Eigen::MatrixXd::Random(2, 3)};
  Model<double> params = start;
  const Model<double> grads{geomopt::Stiefel<double>(Eigen::MatrixXd::Random(6, 2)), Eigen::MatrixXd::Random(2, 3)};
  geomopt::Adam adam({.lr = 1e-2});
  auto state = adam.init(params);
  adam.step(params, grads, state);

  {
    Model<double> tree = params;
    // snippet-begin: using
    geomopt::io::save("model.h5", tree);                              // the tree under /params
    geomopt::io::LoadReport r = geomopt::io::load("model.h5", tree);  // into a tree of the same shape

    geomopt::io::save_checkpoint("ckpt.h5", params, state, {.attributes = {{"epoch", std::int64_t{3}}}});
    auto fresh = adam.init(params);                          // same optimizer, same tree shape
    geomopt::io::load_checkpoint("ckpt.h5", params, fresh);  // params, state and step restored
    // snippet-end: using
    expect(r.complete() && r.loaded.size() == 2 && pt::flatten(tree) == pt::flatten(params), "save and load");
    expect(fresh.step_count() == 1, "load_checkpoint restores the step count");

    // snippet-begin: lenient
    geomopt::Adam faster({.lr = 2e-2});  // the run goes on with another learning rate
    auto resumed = faster.init(params);
    // A strict load refuses: "optimizer: metadata: lr is 0.01 in the file, 0.02 here; a lenient load
    // (LoadOptions::strict = false) loads anyway, lists it, and steps with the value here".
    geomopt::io::LoadReport lenient = geomopt::io::load_checkpoint("ckpt.h5", params, resumed, {.strict = false});
    std::cout << lenient.full_report();  // the difference is listed; the steps use the optimizer's own lr = 0.02
    // snippet-end: lenient
    bool refused = false;
    try {
      auto strict = faster.init(params);
      geomopt::io::load_checkpoint("ckpt.h5", params, strict);
    } catch (const geomopt::io::Error& e) {
      refused = e.has(geomopt::io::ProblemKind::metadata, "optimizer") &&
                std::string(e.what()).find(
                    "lr is 0.01 in the file, 0.02 here; a lenient load "
                    "(LoadOptions::strict = false) loads anyway, lists it, and steps with the "
                    "value here") != std::string::npos;
    }
    expect(refused, "a strict load refuses a changed lr, saying how to load anyway");
    expect(lenient.differences.size() == 1 &&
               lenient.differences[0].find("lr is 0.01 in the file, 0.02 here") != std::string::npos,
           "a lenient load lists the changed lr");
    Model<double> p_fresh = params, p_resumed = params;
    faster.step(p_fresh, grads, fresh);  // fresh: the same checkpoint loaded into the lr = 0.01 optimizer's state
    faster.step(p_resumed, grads, resumed);
    expect(pt::flatten(p_fresh) == pt::flatten(p_resumed), "after a lenient load the optimizer's own lr steps");
  }

  {
    // snippet-begin: leaf_options
    auto rule = [](const pt::Path& p) { return geomopt::LeafOptions{.lr_scale = p.str() == "head" ? 0.5 : 1.0}; };
    auto halved = adam.init(params, rule);  // /optimizer records "head:lr_scale" = 0.5, "frame:lr_scale" = 1, ...
    geomopt::io::save_checkpoint("halved.h5", params, halved);

    auto plain = adam.init(params);  // lr_scale 1 everywhere
    // A strict load refuses: "optimizer:head: metadata: lr_scale is 0.5 in the file, 1 here; a lenient load ...".
    geomopt::io::LoadReport r = geomopt::io::load_checkpoint("halved.h5", params, plain, {.strict = false});
    // r.differences: "optimizer:head: lr_scale is 0.5 in the file, 1 here"; plain steps head with lr_scale 1.
    // snippet-end: leaf_options
    bool refused = false;
    try {
      auto strict = adam.init(params);
      geomopt::io::load_checkpoint("halved.h5", params, strict);
    } catch (const geomopt::io::Error& e) {
      refused = e.has(geomopt::io::ProblemKind::metadata, "optimizer:head");
    }
    expect(refused, "a strict load refuses a changed lr_scale, naming the leaf");
    expect(r.differences.size() == 1 && r.differences[0] == "optimizer:head: lr_scale is 0.5 in the file, 1 here",
           "a lenient load lists the changed lr_scale");
    Model<double> p_plain = params, p_halved = params;
    adam.step(p_plain, grads, plain);
    adam.step(p_halved, grads, halved);  // the same moments, head at half the rate
    expect(p_plain.frame.value() == p_halved.frame.value() &&
               ((p_halved.head - params.head) - 0.5 * (p_plain.head - params.head)).norm() <
                   1e-12 * (p_plain.head - params.head).norm(),
           "after a lenient load the lr_scale in memory steps");
  }

  {
    // snippet-begin: readme
    geomopt::io::save_checkpoint("epoch3.h5", params, state, {.step = 3, .attributes = {{"lr", 1e-3}}});  // atomic
    geomopt::io::LoadReport r = geomopt::io::load_checkpoint("epoch3.h5", params, state);  // throws on a mismatch
    // snippet-end: readme
    expect(r.metadata.step == 3 && std::get<double>(r.metadata.attributes.at("lr")) == 1e-3, "README: metadata");
  }

  {
    // snippet-begin: checkpoint
    geomopt::io::save_checkpoint("run.h5", params, state, {.attributes = {{"epoch", std::int64_t{1}}}});

    Model<double> restored = pt::zeros_like(params);  // a prototype: shapes from it, numbers from the file
    auto restored_state = adam.init(restored);        // the same optimizer and settings
    geomopt::io::LoadReport report = geomopt::io::load_checkpoint("run.h5", restored, restored_state);
    std::cout << report.brief_report() << "\n";  // "loaded 2 leaves and 4 state arrays; ..."

    adam.step(params, grads, state);  // the two runs go on bit for bit alike
    adam.step(restored, grads, restored_state);
    // snippet-end: checkpoint
    expect(pt::flatten(restored) == pt::flatten(params) && restored_state.step_count() == state.step_count(),
           "a resumed run steps exactly like the original");
    expect(std::get<std::int64_t>(report.metadata.attributes.at("epoch")) == 1, "user attributes come back");

    Model<float> single = pt::cast<float>(start);
    try {
      geomopt::io::load("model.h5", single);  // float32 tree, float64 file, no cast asked for
      expect(false, "a dtype mismatch throws");
    } catch (const geomopt::io::Error& e) {
      expect(e.has(geomopt::io::ProblemKind::dtype, "head") && pt::flatten(single) == pt::flatten<float>(start),
             "a dtype mismatch throws and leaves the tree unchanged");
    }
  }
  return expect.failures;
}

}  // namespace docs_file_format

// libFuzzer target for the loader: any bytes, written to a file, loaded into a fixed prototype tree strictly and, for
// a quarter of the inputs each, leniently with casts and described. The only acceptable outcomes are success and
// geomopt::io::Error; anything else (another exception, a crash, a sanitizer report) fails the run. Built in a clang
// sanitizer build (tests/CMakeLists.txt) and run by its test io_fuzz_load: scripts/test.sh, scripts/fuzz_io.sh.
//
// Built with -DGEOMOPT_FUZZ_SEEDS it is instead a program that writes the seed corpus, valid files of this tree:
//   io_fuzz_seeds DIR
#include <geomopt/io.hpp>
#include <geomopt/manifolds.hpp>

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>

namespace {

namespace pt = geomopt::ptree;

struct Proto {
  Eigen::MatrixXf w;
  Eigen::VectorXd b;
  std::map<std::string, Eigen::Matrix3d> heads;
  geomopt::SymmetricMatrix<double> sym;
  geomopt::StiefelLieAlgHorMatrix<double> hor;
  std::shared_ptr<Eigen::MatrixXd> enc, dec;
  double scale = 0;
  pt::Buffer<Eigen::VectorXi> counts;
  pt::Buffer<bool> flag;
  GEOMOPT_PTREE(w, b, heads, sym, hor, enc, dec, scale, counts, flag)
};

Proto make_proto(float v) {
  Proto p;
  p.w = Eigen::MatrixXf::Constant(4, 3, v);
  p.b = Eigen::VectorXd::Constant(5, v);
  p.heads = {{"cls", Eigen::Matrix3d::Constant(v)}, {"reg", Eigen::Matrix3d::Identity()}};
  p.sym = geomopt::SymmetricMatrix<double>(3);
  p.hor = geomopt::StiefelLieAlgHorMatrix<double>(4, 2);
  p.enc = std::make_shared<Eigen::MatrixXd>(Eigen::MatrixXd::Constant(2, 2, v));
  p.dec = p.enc;
  p.scale = v;
  p.counts = pt::Buffer<Eigen::VectorXi>{Eigen::VectorXi::Constant(3, 7)};
  return p;
}

}  // namespace

#ifndef GEOMOPT_FUZZ_SEEDS

// A file that makes HDF5 loop forever must end in the guard's timeout Error, well inside libFuzzer's -timeout=10.
constexpr double kCheckSeconds = 3;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string file =
      (std::filesystem::exists("/dev/shm") ? std::string("/dev/shm") : std::string("/tmp")) + "/geomopt_fuzz_load_" +
      std::to_string(::getpid()) + ".h5";
  if (std::FILE* f = std::fopen(file.c_str(), "wb")) {
    if (size != 0) std::fwrite(data, 1, size, f);
    std::fclose(f);
  } else {
    return 0;
  }
  Proto t = make_proto(1.0f);
  try {
    geomopt::io::load(file, t, {.isolate_timeout = kCheckSeconds});
  } catch (const geomopt::io::Error&) {
  }
  // Each guarded call forks (milliseconds here), and throughput is what finds bugs: the lenient load and describe
  // run on a quarter of the inputs each. Both stay guarded: HDF5 1.10 reads uninitialised memory on some corrupt
  // files, so only a child forked right before a pass, with this process's very heap, replays it faithfully.
  if (size % 4 == 1) {
    try {
      geomopt::io::load(file, t, {.strict = false, .cast = true, .isolate_timeout = kCheckSeconds});
    } catch (const geomopt::io::Error&) {
    }
  }
  if (size % 4 == 0) {
    try {
      (void)geomopt::io::describe(file, kCheckSeconds);
    } catch (const geomopt::io::Error&) {
    }
  }
  return 0;
}

#else

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: io_fuzz_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  std::filesystem::create_directories(dir);
  const Proto p = make_proto(2.5f);
  geomopt::io::save(dir + "/plain.h5", p);
  geomopt::io::save(dir + "/gzip.h5", p, {.compression = 4});
  geomopt::io::save(dir + "/other_group.h5", p, {.group = "weights"});
  std::map<std::string, Eigen::VectorXd> small{{"w", Eigen::VectorXd::Ones(3)}};
  geomopt::io::save(dir + "/small.h5", small);
  return 0;
}

#endif

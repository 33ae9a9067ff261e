// Must not compile: an integer member outside a Buffer is not trainable. The error says to wrap it in Buffer<>.
#include <geomopt/ptree.hpp>

struct Model {
  Eigen::VectorXd w;
  int steps = 0;
  GEOMOPT_PTREE(w, steps)
};

int main() {
  Model m;
  return static_cast<int>(geomopt::ptree::count(m));
}

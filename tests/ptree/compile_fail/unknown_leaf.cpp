// Must not compile: a member that is neither a branch nor a leaf. The error names what to define.
#include <geomopt/ptree.hpp>

struct Opaque {
  int handle = 0;
};

struct Model {
  Eigen::VectorXd w;
  Opaque o;
  GEOMOPT_PTREE(w, o)
};

int main() {
  Model m;
  return static_cast<int>(geomopt::ptree::count(m));
}

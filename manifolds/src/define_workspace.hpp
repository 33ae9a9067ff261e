// GEOMOPT_DEFINE_COMPILED_WORKSPACE(Point): the library's definitions of the entry points that
// GEOMOPT_DECLARE_COMPILED_WORKSPACE(Point) declares (include/geomopt/manifolds/any_workspace.hpp), for Point<float>
// and Point<double>: each makes the workspace the headers would have made, so the library computes exactly what a
// header-only use computes.
#pragma once

#include <Eigen/Core>

#include "geomopt/manifolds/any_workspace.hpp"

static_assert(GEOMOPT_COMPILED_KERNELS == EIGEN_MAX_ALIGN_BYTES,
              "libgeomopt_manifolds: GEOMOPT_COMPILED_KERNELS must be the Eigen alignment the library is built with "
              "(manifolds/CMakeLists.txt measures it)");

#define GEOMOPT_DEFINE_COMPILED_WORKSPACE_OF(Point, T)                                                  \
  std::unique_ptr<geomopt::detail::AnyWorkspace<T>> geomopt::detail::compiled_workspace_of(             \
      WorkspaceOf<Point<T>>, Eigen::Index rows, Eigen::Index cols, SectionPolicy policy, const T* y0) { \
    return std::make_unique<WorkspaceModel<Point<T>>>(rows, cols, policy, y0);                          \
  }

#define GEOMOPT_DEFINE_COMPILED_WORKSPACE(Point) \
  GEOMOPT_DEFINE_COMPILED_WORKSPACE_OF(Point, float) GEOMOPT_DEFINE_COMPILED_WORKSPACE_OF(Point, double)

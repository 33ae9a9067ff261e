// Ceres's headers bring glog, whose CHECK, CHECK_EQ, ... macros collide with doctest's (glog's CHECK aborts the whole
// test executable). Every Ceres header a doctest file needs comes first, glog's names are dropped, then doctest: the
// macros inside Ceres's templates were expanded when their definitions were read, so they keep glog's meaning.
#pragma once

#include <ceres/ceres.h>
#include <ceres/sphere_manifold.h>
#include <geomopt/ceres.hpp>

#undef CHECK
#undef CHECK_EQ
#undef CHECK_NE
#undef CHECK_LT
#undef CHECK_LE
#undef CHECK_GT
#undef CHECK_GE

#include <doctest/doctest.h>

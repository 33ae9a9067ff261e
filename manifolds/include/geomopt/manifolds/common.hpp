// Names shared by every manifold: the choice of retraction and of how a kept section follows its point.
#pragma once

#include <random>

namespace geomopt {

/// Which retraction a manifold step uses; each manifold lists the ones it implements in M::kRetractions, its default
/// first (contract.hpp). For Stiefel, Grassmann, Sphere and SpecialOrthogonal, `cayley` is lambda (I - X/2)^-1
/// (I + X/2) [I; 0] and `geodesic` is lambda exp(X) [I; 0] for the lift X (the Riemannian exponential of the canonical
/// metric). For SPD, `geodesic` is the exponential map of the affine-invariant metric and `second_order` the
/// retraction X + U + U X^-1 U / 2 (SPD also accepts `cayley` for it, a deprecated name kept for existing code).
enum class Retraction { cayley, geodesic, second_order };

/// The retraction's name as code writes it: "cayley", "geodesic", "second_order".
inline const char* retraction_name(Retraction r) noexcept {
  switch (r) {
    case Retraction::cayley:
      return "cayley";
    case Retraction::geodesic:
      return "geodesic";
    case Retraction::second_order:
      return "second_order";
  }
  return "retraction";
}

/// How a section kept between steps follows its point.
///   recomputed:  rebuilt from the new point after each retraction (Householder reflectors, O(N n) memory). The
///                frame of the complement jumps from step to step.
///   transported: moved by the retraction itself, lambda <- lambda F with F the N x N orthogonal factor of the step,
///                so tangent coordinates keep one frame. It needs the (N - n)-column complement explicitly: O(N^2)
///                memory and O(N^2 n) time per step.
enum class SectionPolicy { recomputed, transported };

/// The policy's name in code: "recomputed", "transported".
inline const char* section_policy_name(SectionPolicy p) noexcept {
  return p == SectionPolicy::transported ? "transported" : "recomputed";
}

/// The random number generator every random_point and random_tangent takes.
using Rng = std::mt19937_64;

}  // namespace geomopt

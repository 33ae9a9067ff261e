// Learning-rate schedules: factors on an optimizer's lr as functions of the number of steps taken before the
// current one (t = 0 at the first step). Any callable (std::int64_t) -> double is a schedule; these are the usual
// ones. Each is a pure function of t, so a run restarted from a checkpoint resumes its schedule exactly.
#pragma once

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "geomopt/optimizers/options.hpp"

namespace geomopt::schedules {

/// 1 at every step.
inline Schedule constant() {
  return [](std::int64_t) { return 1.0; };
}

/// gamma^(floor(t / step_size)), as torch's StepLR.
inline Schedule step_decay(std::int64_t step_size, double gamma) {
  if (step_size < 1) throw std::invalid_argument("schedules::step_decay: step_size must be >= 1");
  return [=](std::int64_t t) { return std::pow(gamma, static_cast<double>(t / step_size)); };
}

/// gamma^t, as torch's ExponentialLR.
inline Schedule exponential(double gamma) {
  return [=](std::int64_t t) { return std::pow(gamma, static_cast<double>(t)); };
}

/// Linear warmup from 1/(warmup+1) to 1 over the first `warmup` steps, then a half cosine from 1 down to
/// final_factor at step total; final_factor after that.
inline Schedule cosine(std::int64_t total, std::int64_t warmup = 0, double final_factor = 0) {
  if (warmup < 0 || total <= warmup)
    throw std::invalid_argument("schedules::cosine: need 0 <= warmup < total, got warmup = " + std::to_string(warmup) +
                                ", total = " + std::to_string(total));
  return [=](std::int64_t t) {
    if (t < warmup) return static_cast<double>(t + 1) / static_cast<double>(warmup + 1);
    if (t >= total) return final_factor;
    const double progress = static_cast<double>(t - warmup) / static_cast<double>(total - warmup);
    return final_factor + (1 - final_factor) * 0.5 * (1 + std::cos(3.14159265358979323846 * progress));
  };
}

}  // namespace geomopt::schedules

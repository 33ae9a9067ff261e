// geomopt::optimizers: SGD, Adam, AdamW, RMSprop and Adagrad (and any kernel written like them), Muon and
// ManifoldMuon, stepping every leaf of a parameter tree in place, each in its own geometry, with per-leaf options,
// schedules, clipping, EMA and threads; msign (docs/optimizers.md).
#pragma once

#include "geomopt/optimizers/kernel_path.hpp"
#include "geomopt/optimizers/kernels.hpp"
#include "geomopt/optimizers/msign.hpp"
#include "geomopt/optimizers/muon.hpp"
#include "geomopt/optimizers/optimizer.hpp"
#include "geomopt/optimizers/options.hpp"
#include "geomopt/optimizers/partition.hpp"
#include "geomopt/optimizers/schedules.hpp"
#include "geomopt/optimizers/state.hpp"
#include "geomopt/optimizers/step_protocol.hpp"

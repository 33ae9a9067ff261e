// geomopt::io: parameter trees and optimizer state in HDF5 files, by path (docs/file_format.md).
//
//   save / load                       a tree in one group of a file
//   save_checkpoint / load_checkpoint a tree, its optimizer's state and metadata
//   describe                          a file's summary, as geomopt-inspect prints it
// HDF5 is a private dependency of the compiled library geomopt::io; no HDF5 header is included from here.
#pragma once

#include "geomopt/io/checkpoint.hpp"
#include "geomopt/io/error.hpp"
#include "geomopt/io/inspect.hpp"
#include "geomopt/io/options.hpp"
#include "geomopt/io/tree.hpp"

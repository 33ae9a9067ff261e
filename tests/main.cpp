// The doctest runner shared by every test executable (see tests/CMakeLists.txt), so it is compiled once.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

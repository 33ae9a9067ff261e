// The check every docs page's run() makes: expect(ok, what) prints "<page>: FAILED: <what>" when ok is false and counts
// it; run() returns the count.
#pragma once

#include <cstdio>

namespace geomopt_docs {

struct Expect {
  const char* page;
  int failures = 0;

  void operator()(bool ok, const char* what) {
    if (!ok) {
      std::printf("%s: FAILED: %s\n", page, what);
      ++failures;
    }
  }
};

}  // namespace geomopt_docs

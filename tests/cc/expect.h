// The C++ tests' one assertion: EXPECT(cond, printf-style message) records a failure with
// file and line and keeps going, so one run reports every broken case; finish() ends main.
#pragma once

#include <cstdio>

namespace nfn_test {

inline int& failures() {
  static int n = 0;
  return n;
}

// The test's exit code: 0 when every EXPECT held.
inline int finish(const char* name) {
  if (failures()) std::printf("%s: %d failures\n", name, failures());
  else std::printf("%s: PASS\n", name);
  return failures() ? 1 : 0;
}

}  // namespace nfn_test

#define EXPECT(cond, ...)                              \
  do {                                                 \
    if (!(cond)) {                                     \
      std::printf("FAIL %s:%d: ", __FILE__, __LINE__); \
      std::printf(__VA_ARGS__);                        \
      std::printf("\n");                               \
      ++::nfn_test::failures();                        \
    }                                                  \
  } while (0)

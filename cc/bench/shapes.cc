#include "cc/bench/shapes.h"

namespace nfn::bench {

bool shape_named(const std::string& name, Shape* out) {
  static const Shape shapes[] = {
      {"tiny", 1, 2, 128, 64, 2, 512, 512, 256},
      {"small", 4, 4, 256, 256, 8, 8192, 8192, 2048},
      {"demo", 4, 4, 128, 128, 16, 1024, 1024, 2048},
      {"gpt2", 12, 12, 768, 1024, 16, 50257, 50304, 8192},
  };
  for (const Shape& s : shapes)
    if (s.name == name) {
      *out = s;
      return true;
    }
  return false;
}

const char* shape_names() { return "tiny|small|demo|gpt2"; }

}  // namespace nfn::bench

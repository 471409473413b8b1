// What the benchmark tools fail with: one line, which their main prints and exits 1 on.
#pragma once

#include <stdexcept>
#include <string>

namespace nfn::bench {

class BenchError : public std::runtime_error {
 public:
  explicit BenchError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace nfn::bench

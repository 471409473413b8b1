#include "cc/bench/op_timer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <ctime>
#include <vector>

#include "cc/bench/bench_error.h"

namespace nfn::bench {
namespace {

double now_ms(Clock clock) {
  if (clock == Clock::kProcessCpu) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
  }
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

Timing time_op(const nfn_op_table& ops, nfn_ctx* ctx, const std::function<nfn_status()>& op, int samples,
               Clock clock) {
  auto sample = [&](int calls) {
    const double start = now_ms(clock);
    for (int i = 0; i < calls; ++i)
      if (op() != NFN_OK) throw BenchError(ops.ctx_last_error(ctx));
    if (ops.synchronize(ctx) != NFN_OK) throw BenchError(ops.ctx_last_error(ctx));
    return (now_ms(clock) - start) / calls;
  };
  sample(1);
  const double once = sample(1);
  const int calls = once >= 1.0 ? 1 : static_cast<int>(std::min(1000.0, std::ceil(1.0 / std::max(once, 1e-3))));
  std::vector<double> t;
  for (int r = 0; r < std::max(1, samples); ++r) t.push_back(sample(calls));
  std::sort(t.begin(), t.end());
  const size_t mid = t.size() / 2;  // the middle sample, or the mean of the two middle ones
  return {t.size() % 2 ? t[mid] : (t[mid - 1] + t[mid]) / 2, t.front()};
}

}  // namespace nfn::bench

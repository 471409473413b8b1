// The argument checks of muon_step_many, shared by both op libraries so that each refuses the
// same arguments with the same message.
#pragma once

#include <cmath>
#include <cstdio>
#include <string>

#include "cc/ops/nfn_tile_ops.h"
#include "cc/util/polar_express.h"

namespace nfn::muon {

// "" where the arguments are usable, else one line naming the argument.
inline std::string check_args(const nfn_muon_group* groups, int ngroups, float lr, float momentum, int ns_steps,
                              float weight_decay) {
  const char* op = "muon_step_many";
  char why[256] = "";
  if (ngroups < 0 || (ngroups > 0 && groups == nullptr)) {
    std::snprintf(why, sizeof why, "%s: ngroups=%d with null groups", op, ngroups);
  } else if (!std::isfinite(lr) || !std::isfinite(weight_decay)) {
    std::snprintf(why, sizeof why, "%s: lr=%g weight_decay=%g must be finite", op, static_cast<double>(lr),
                  static_cast<double>(weight_decay));
  } else if (!(momentum >= 0.f && momentum < 1.f)) {
    std::snprintf(why, sizeof why, "%s: momentum %g must lie in [0, 1)", op, static_cast<double>(momentum));
  } else if (ns_steps < 0 || ns_steps > kPolarExpressSteps) {
    std::snprintf(why, sizeof why, "%s: ns_steps=%d must lie in [0, %d] (the Polar Express table)", op, ns_steps,
                  kPolarExpressSteps);
  } else {
    for (int k = 0; k < ngroups && !*why; ++k) {
      const nfn_muon_group& g = groups[k];
      if (g.rows <= 0 || g.cols <= 0)
        std::snprintf(why, sizeof why, "%s: group %d is %d x %d (rows and cols must be positive)", op, k, g.rows,
                      g.cols);
      else if (g.master == nullptr || g.grad == nullptr || g.momentum == nullptr)
        std::snprintf(why, sizeof why, "%s: group %d has a null master, grad or momentum", op, k);
    }
  }
  return why;
}

}  // namespace nfn::muon

// The trainer's flags, declared once: the binaries parse them, `--help` prints them, and
// `--describe-flags` prints them as JSON, from which the build caches the table that
// `nfn train` builds its parser from (py/nfn/train/flags.py). A flag added here is a flag of
// both, passed through by nfn train unless its group is kInternalGroup.
#pragma once

#include <string>
#include <vector>

#include "cc/util/flags.h"

namespace nfn {

std::vector<FlagSpec> train_flag_specs();
Flags train_flags(const std::string& program, const std::string& summary);

}  // namespace nfn

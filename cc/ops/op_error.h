// The one line a failed op reads: "what: the library's message", the op named once (the op
// libraries start their messages with the op's name: "attention_forward: head size ...").
#pragma once

#include <string>

#include "cc/ops/nfn_tile_ops.h"

namespace nfn {

inline std::string op_error(const nfn_op_table& ops, nfn_ctx* ctx, const char* what) {
  const std::string said = ops.ctx_last_error(ctx), prefix = std::string(what) + ": ";
  return said.rfind(prefix, 0) == 0 ? said : prefix + said;
}

}  // namespace nfn

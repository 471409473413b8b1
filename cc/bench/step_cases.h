// The ops of one training micro-step of a GPT, each at the shape and with the arguments the
// model calls it with (cc/model/gpt.cc), and how often a micro-step calls it.
#pragma once

#include "cc/bench/op_case.h"
#include "cc/bench/shapes.h"

namespace nfn::bench {

// Appends, in this order, the embedding, layernorm, linear (with each backward's products
// apart, as breakdown cases), attention, LM head and optimizer cases that sink.want takes.
void add_step_cases(const CaseSink& sink, const Shape& shape);

}  // namespace nfn::bench

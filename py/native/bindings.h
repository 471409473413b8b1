// Each native area adds its functions to nfn._native through one bind_* function, in a
// file of its own (ops.cc, data.cc, ...); module.cc calls them all.
#pragma once

#include <nanobind/nanobind.h>

namespace nfn::py {

void bind_ops(nanobind::module_& m);
void bind_data(nanobind::module_& m);
void bind_model(nanobind::module_& m);
void bind_decoder(nanobind::module_& m);
void bind_infer(nanobind::module_& m);
void bind_train(nanobind::module_& m);

}  // namespace nfn::py

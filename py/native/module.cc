// nfn._native: the in-process bridge from Python to the native libraries. Python tests use
// it to check native code against numpy references; commands use it where they need native
// speed inside the Python process.
#include "py/native/bindings.h"

NB_MODULE(_native, m) {
  m.doc() = "nfn native bridge";
  nfn::py::bind_ops(m);
  nfn::py::bind_data(m);
  nfn::py::bind_model(m);
  nfn::py::bind_decoder(m);
  nfn::py::bind_infer(m);
  nfn::py::bind_train(m);
}

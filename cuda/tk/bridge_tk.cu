// Built when NFN_THUNDERKITTENS_DIR names a ThunderKittens tree: this proves its headers
// compile for sm_90a with nfn's toolchain. The attention kernels written on it are not
// there yet, so the path still reports itself unavailable (and says so).
#include "kittens.cuh"

#include "cuda/tk/bridge.h"

extern "C" const char* nfn_tk_unavailable_reason(void) {
  return "ThunderKittens headers compile, but nfn's attention kernels on them are not "
         "written yet";
}

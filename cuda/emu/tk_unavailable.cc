// The ThunderKittens bridge of the emulated CUDA library: never available.
#include "cuda/tk/bridge.h"

extern "C" const char* nfn_tk_unavailable_reason(void) {
  return "ThunderKittens is unavailable: the CUDA emulator runs nfn's own kernels only";
}

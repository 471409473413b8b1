// The bridge where no ThunderKittens kernels were built: it only says why (NFN_TK_REASON, set
// by the build), and takes no call, since attention=thunderkittens is refused before one
// could be made. Host code: the CUDA library links it without a ThunderKittens tree, and so
// does the CUDA emulator's library.
#include "cuda/tk/bridge.h"

extern "C" {

const char* nfn_tk_unavailable_reason(void) { return "ThunderKittens is unavailable: " NFN_TK_REASON; }

int nfn_tk_attention_applies(int, int) { return 0; }

constexpr int kNotSupported = 801;  // cudaErrorNotSupported

int nfn_tk_attention_forward(void*, float*, const void*, int, int, int, int, void*) { return kNotSupported; }

int nfn_tk_attention_backward(void*, const void*, const void*, const float*, const float*, int, int, int, int,
                              void*) {
  return kNotSupported;
}

}  // extern "C"

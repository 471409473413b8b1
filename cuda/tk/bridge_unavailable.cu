// Built when no ThunderKittens tree was supplied: the bridge only says why.
#include "cuda/tk/bridge.h"

extern "C" const char* nfn_tk_unavailable_reason(void) {
  return "ThunderKittens is unavailable: " NFN_TK_REASON;
}

// The ThunderKittens bridge: attention kernels built on the header-only ThunderKittens tree
// when NFN_THUNDERKITTENS_DIR names one at build time (tools/cuda_libs.bzl).
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// NULL when the ThunderKittens attention path can run, else why it cannot.
const char* nfn_tk_unavailable_reason(void);

#ifdef __cplusplus
}
#endif

// The ThunderKittens bridge: causal attention kernels built on the header-only ThunderKittens
// tree when NFN_THUNDERKITTENS_DIR names one at build time (tools/cuda_libs.bzl); without one
// (bridge_unavailable.cu) the bridge only says why. Plain C over the CUDA library's tensors:
// bf16 qkv (B,T,3C), out and dout (B,T,C), dqkv (B,T,3C), lse and delta (B,NH,T) f32.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// NULL when the ThunderKittens attention path can run on the current device, else why not.
const char* nfn_tk_unavailable_reason(void);

// Whether the kernels take a call of this sequence length and head size (T a multiple of
// 64; head size 64 or 128). Others run nfn's own kernels.
int nfn_tk_attention_applies(int T, int head_dim);

// out and lse from qkv, on `stream` (a cudaStream_t). Returns a cudaError_t value.
int nfn_tk_attention_forward(void* out, float* lse, const void* qkv, int B, int T, int C, int NH, void* stream);

// dqkv (overwritten) from dout, qkv, lse and delta = rowsum(dout * out). Returns a
// cudaError_t value.
int nfn_tk_attention_backward(void* dqkv, const void* dout, const void* qkv, const float* lse, const float* delta,
                              int B, int T, int C, int NH, void* stream);

#ifdef __cplusplus
}
#endif

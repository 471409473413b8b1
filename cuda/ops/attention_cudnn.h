// attention=cudnn: causal attention through cuDNN's fused SDPA kernels (cudnn-frontend's
// graph API), for bf16 with a head size that is a multiple of 8 up to 128;
// attention_forward/backward send every other call to flash_simt, as under flash_mma. cuDNN
// is opened at run time (libcudnn.so.9), so the library builds and loads without it. Plain C++ (attention_cudnn.cc is compiled by the
// host compiler); the CUDA emulator links a stand-in that says cuDNN cannot run there.
#pragma once

#include "cuda/ops/context.h"

// Visible although attention_cudnn.cc is compiled with hidden visibility.
#define NFN_CUDNN_API __attribute__((visibility("default")))

namespace nfn::cuda {

// nullptr when cuDNN is loaded and usable, else why not (one line). Loads it on first call.
NFN_CUDNN_API const char* cudnn_unavailable_reason();

// "cuDNN <version> SDPA" once loaded, for the runtime report.
NFN_CUDNN_API const char* cudnn_path_name();

// out (B,T,C) and lse (B*NH*T, natural log of the scaled scores' sum of exponentials) from
// qkv (B,T,3C); bf16, head size a multiple of 8 up to 128, tensors 16-byte aligned.
NFN_CUDNN_API nfn_status cudnn_forward(nfn_ctx* ctx, void* out, float* lse, const void* qkv, int B, int T, int C,
                         int NH);

// dqkv (B,T,3C, overwritten) from dout, qkv, out and lse; same conditions. Deterministic
// (cuDNN's two-kernel backward: no atomics in dQ) where cudnn_deterministic says so.
NFN_CUDNN_API nfn_status cudnn_backward(nfn_ctx* ctx, void* dqkv, const void* dout, const void* qkv,
                          const void* out, const float* lse, int B, int T, int C, int NH);

// Whether cudnn_backward repeats bit for bit: the context's option deterministic (on unless
// configured off), except on sm_100 (B200s), where cuDNN has only its atomic dQ.
NFN_CUDNN_API bool cudnn_deterministic(const nfn_ctx* ctx);

// Frees the context's cuDNN handle and cached graphs (ctx_destroy).
NFN_CUDNN_API void cudnn_release(nfn_ctx* ctx);

}  // namespace nfn::cuda

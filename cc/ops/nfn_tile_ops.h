/* nfn_tile_ops.h: the C op ABI shared by every op library (CPU and CUDA).
 *
 * The trainer and the models call ops only through this ABI, usually through an
 * nfn_op_table filled by nfn_load_op_library (cc/ops/op_library.h). Rules for every op:
 * plain pointers and sizes, the context first, a status code back (never an exception
 * across the ABI), and on failure a message in nfn_ctx_last_error. Ops are ordered on the
 * context's stream; nfn_synchronize waits for them.
 */
#ifndef NFN_TILE_OPS_H_
#define NFN_TILE_OPS_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* 2: linear_backward takes gelu_pre; 3: linear_forward takes residual; 4: graph ops;
 * 5: alloc_host, free_host; 6: event ops; 7: lm_head_cross_entropy takes the padded Vp;
 * 8: layernorm_backward and linear_backward take dinp_colsum; 9: ctx_query;
 * 10: event_create takes flags (NFN_EVENT_TIMING), event_elapsed; 11: muon_step_many;
 * 12: rope_forward/backward, relu_squared_forward/backward, swiglu_forward/backward,
 * softcap_forward/backward; 13: attention_forward/backward/kv_cached take NKV, HD and window
 * (grouped-query heads, sliding windows), rmsnorm_forward takes eps, lm_head_cross_entropy takes
 * softcap, head_rmsnorm_forward/backward, scaled_sum_forward/backward,
 * gated_add_forward/backward; 14: dequantize (nfn_qtype); 15: lm_head_cross_entropy takes
 * per-row weights */
#define NFN_ABI_VERSION 15

typedef enum nfn_status {
  NFN_OK = 0,
  NFN_ERR_INVALID_ARGUMENT = 1,
  NFN_ERR_OUT_OF_MEMORY = 2,
  NFN_ERR_UNSUPPORTED = 3,
  NFN_ERR_BACKEND = 4,
} nfn_status;

typedef enum nfn_dtype {
  NFN_F32 = 0,
  NFN_BF16 = 1,
} nfn_dtype;

/* Block-quantized weights for dequantize: blocks of 32 values, GGML's Q8_0 and Q4_1 and QLoRA's
 * NF4 levels in Q4_0's layout (cc/util/quant.h has the bytes and the formula). */
typedef enum nfn_qtype {
  NFN_Q8_0 = 0,
  NFN_Q4_1 = 1,
  NFN_NF4 = 2,
} nfn_qtype;

typedef enum nfn_epilogue {
  NFN_EPILOGUE_NONE = 0,
  NFN_EPILOGUE_GELU = 1,
} nfn_epilogue;

/* One parameter tensor for adamw_step_many. master, m and v are f32 (n elements); grad is
 * in the op's dtype; param is the compute copy in the op's dtype, or NULL when master is
 * the parameter itself (f32 training). */
typedef struct nfn_adamw_group {
  float* master;
  void* param;
  const void* grad;
  float* m;
  float* v;
  size_t n;
  float weight_decay;
} nfn_adamw_group;

/* One matrix parameter for muon_step_many, row-major (rows, cols) as a linear layer's weight
 * (out, in). master and momentum are f32 (rows*cols elements); grad is in the op's dtype;
 * param is the compute copy in the op's dtype, or NULL when master is the parameter itself. */
typedef struct nfn_muon_group {
  float* master;
  void* param;
  const void* grad;
  float* momentum;
  int rows;
  int cols;
} nfn_muon_group;

typedef enum nfn_copy_kind {
  NFN_HOST_TO_DEVICE = 0,
  NFN_DEVICE_TO_HOST = 1,
  NFN_DEVICE_TO_DEVICE = 2,
} nfn_copy_kind;

/* Backend state: stream, library handles, scratch, the last error message. */
typedef struct nfn_ctx nfn_ctx;

/* A recording of ops, replayed by nfn_graph_launch (the graph ops in nfn_ops.def). */
typedef struct nfn_graph nfn_graph;

/* A point in a context's stream the host can wait for (the event ops in nfn_ops.def). */
typedef struct nfn_event nfn_event;

/* event_create's flags: NFN_EVENT_TIMING makes an event event_elapsed can read. */
typedef enum nfn_event_flags {
  NFN_EVENT_DEFAULT = 0,
  NFN_EVENT_TIMING = 1,
} nfn_event_flags;

int nfn_abi_version(void);
const char* nfn_backend_name(void);
/* device: the device ordinal (ignored by the CPU backend). */
nfn_status nfn_ctx_create(int device, nfn_ctx** out);
void nfn_ctx_destroy(nfn_ctx* ctx);
const char* nfn_ctx_last_error(const nfn_ctx* ctx);
nfn_status nfn_synchronize(nfn_ctx* ctx);
/* Backend options by name, e.g. ("threads", "8") or ("matmul", "bf16"). Unknown keys or
 * values are NFN_ERR_INVALID_ARGUMENT with the reason in nfn_ctx_last_error. */
nfn_status nfn_ctx_configure(nfn_ctx* ctx, const char* key, const char* value);
/* What the library reports about itself by name, for reports and `nfn kernels doctor`:
 *   device           every library: the device's name ("NVIDIA H200"; the CPU's model name,
 *                    "" where the system does not say)
 *   attention        CUDA: the attention path in use and what it falls back to
 *   fused_epilogues  CUDA: how often each fused cuBLASLt epilogue ran fused, e.g.
 *                    "gelu_aux_bias 24/24, dgelu_bgrad 12/12 fused" ("" before a bf16 linear)
 *   gemm_tune        CUDA: "off", or "on: N shapes timed, M taken from FILE"
 *   thunderkittens   CUDA: "available" where attention=thunderkittens runs here, else why not
 * NULL for a key this library does not know. A NULL ctx asks the library rather than a
 * context: only thunderkittens answers then. The string belongs to the context (or is
 * static) and stays valid until the next query or configure on it. */
const char* nfn_ctx_query(const nfn_ctx* ctx, const char* key);

#define NFN_OP(name, category, dtypes, params) nfn_status nfn_##name params;
#include "cc/ops/nfn_ops.def"
#undef NFN_OP

/* Every ABI entry point as a function pointer, so that one trainer binary can drive
 * whichever op library was loaded at run time. */
typedef struct nfn_op_table {
  int (*abi_version)(void);
  const char* (*backend_name)(void);
  nfn_status (*ctx_create)(int device, nfn_ctx** out);
  void (*ctx_destroy)(nfn_ctx* ctx);
  const char* (*ctx_last_error)(const nfn_ctx* ctx);
  nfn_status (*synchronize)(nfn_ctx* ctx);
  nfn_status (*ctx_configure)(nfn_ctx* ctx, const char* key, const char* value);
  const char* (*ctx_query)(const nfn_ctx* ctx, const char* key);
#define NFN_OP(name, category, dtypes, params) nfn_status(*name) params;
#include "cc/ops/nfn_ops.def"
#undef NFN_OP
} nfn_op_table;

#ifdef __cplusplus
}
#endif

#endif /* NFN_TILE_OPS_H_ */

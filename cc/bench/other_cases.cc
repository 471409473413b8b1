#include "cc/bench/other_cases.h"

#include <algorithm>
#include <string>
#include <vector>

namespace nfn::bench {
namespace {

void add_norm_and_elementwise_cases(const CaseSink& s, const Shape& g) {
  const nfn_op_table* o = s.ops;
  nfn_ctx* ctx = s.ctx;
  const nfn_dtype dt = s.dtype();
  const int N = g.B * g.T, C = g.C;
  const size_t NC = size_t(N) * C;
  const double e = s.e(), nc = static_cast<double>(NC), n4 = 4 * nc;
  DeviceBuffers& buf = *s.buf;
  if (s.wants_any({"rmsnorm_forward", "rmsnorm_backward"})) {
    void *x = buf.random(NC, 21, 1.f), *y = buf.zeros(NC), *dy = buf.random(NC, 22, 1.f), *dx = buf.zeros(NC);
    void *w = buf.random(C, 23, 1.f), *dw = buf.zeros(C);
    auto* rstd = static_cast<float*>(buf.zeros(N, true));
    s.add({"rmsnorm_forward", "", 0, false, 0, e * (2 * nc + C) + 4.0 * N, false,
           [=] { return o->rmsnorm_forward(ctx, y, rstd, x, w, N, C, 1e-5f, dt); }});
    s.add({"rmsnorm_backward", "", 0, false, 0, e * (4 * nc + 3.0 * C) + 4.0 * N, false,
           [=] { return o->rmsnorm_backward(ctx, dx, dw, dy, x, w, rstd, N, C, dt); }});
  }
  if (s.wants_any({"gelu_forward", "gelu_backward"})) {
    const size_t n = 4 * NC;
    void *pre = buf.random(n, 24, 1.f), *out = buf.zeros(n), *dout = buf.random(n, 25, 1.f), *din = buf.zeros(n);
    s.add({"gelu_forward", "", 0, false, 0, e * 2 * n4, false, [=] { return o->gelu_forward(ctx, out, pre, n, dt); }});
    s.add({"gelu_backward", "", 0, false, 0, e * 3 * n4, false,
           [=] { return o->gelu_backward(ctx, din, pre, dout, n, dt); }});
  }
  if (s.want("residual_forward")) {
    void *res = buf.random(NC, 26, 1.f), *inp = buf.random(NC, 27, 1.f), *bias = buf.random(C, 28, 0.02f);
    void* out = buf.zeros(NC);
    s.add({"residual_forward", "", 0, false, 0, e * (3 * nc + C), false,
           [=] { return o->residual_forward(ctx, out, res, inp, bias, N, C, dt); }});
  }
}

// The modern decoder's ops at the shape's geometry: rotary embeddings and the QK-norm in place
// on its fused qkv (every head a k head too: NKV = NH), attention with grouped-query heads and
// a sliding window, ReLU² and SwiGLU on an MLP of hidden width 4C, the logit soft-cap
// (nanochat's 15) on the sampling rows.
void add_decoder_cases(const CaseSink& s, const Shape& g) {
  const nfn_op_table* o = s.ops;
  nfn_ctx* ctx = s.ctx;
  const nfn_dtype dt = s.dtype();
  const int N = g.B * g.T, C = g.C, NH = g.NH, H = 4 * g.C;
  const double e = s.e(), nc = double(N) * C, nh = double(N) * H;
  DeviceBuffers& buf = *s.buf;
  if (s.wants_any({"rope_forward", "rope_backward"})) {
    void* qkv = buf.random(size_t(N) * 3 * C, 51, 1.f);
    // q and k read and written, v untouched
    s.add({"rope_forward", "(in place on qkv)", 0, false, 0, e * 4 * nc, false,
           [=] { return o->rope_forward(ctx, qkv, qkv, N, g.T, 0, 3 * C, NH, NH, C / NH, 10000.f, 1, dt); }});
    s.add({"rope_backward", "(in place on dqkv)", 0, false, 0, e * 4 * nc, false,
           [=] { return o->rope_backward(ctx, qkv, qkv, N, g.T, 0, 3 * C, NH, NH, C / NH, 10000.f, 1, dt); }});
  }
  if (s.wants_any({"head_rmsnorm_forward", "head_rmsnorm_backward"})) {
    void *qkv = buf.random(size_t(N) * 3 * C, 58, 1.f), *dqkv = buf.random(size_t(N) * 3 * C, 59, 1.f);
    auto* rstd = static_cast<float*>(buf.zeros(size_t(N) * 2 * NH, true));
    const double stats = 4.0 * N * 2 * NH;
    // q and k: read and written forward; the backward reads dout and out and writes dinp
    s.add({"head_rmsnorm_forward", "(in place on qkv)", 0, false, 0, e * 4 * nc + stats, false,
           [=] { return o->head_rmsnorm_forward(ctx, qkv, rstd, qkv, N, 2 * NH, C / NH, 3 * C, 1.2f, 1e-5f, dt); }});
    s.add({"head_rmsnorm_backward", "(in place on dqkv)", 0, false, 0, e * 6 * nc + stats, false,
           [=] { return o->head_rmsnorm_backward(ctx, dqkv, dqkv, qkv, rstd, N, 2 * NH, C / NH, 3 * C, 1.2f, dt); }});
  }
  if (s.wants_any({"attention_forward", "attention_backward"})) {
    // A quarter of the heads as kv heads (one where NH is not a multiple of 4) and a window of a
    // quarter of T. The work counts the scores each query sees, min(t + 1, W + 1), against the
    // causal rows' half of T x T, so the rates compare and the time shows what the window saves.
    const int NKV = NH % 4 == 0 ? NH / 4 : 1, HD = C / NH, W = std::max(1, g.T / 4), B = g.B, T = g.T;
    double seen = 0;
    for (int t = 0; t < T; ++t) seen += std::min(t, W) + 1;
    const double flops = 2.0 * B * NH * (2.0 * seen * HD);
    const size_t qkv_n = size_t(N) * (NH + 2 * NKV) * HD;
    void *qkv = buf.random(qkv_n, 80, 1.f), *dqkv = buf.zeros(qkv_n);
    void *out = buf.zeros(size_t(N) * C), *dout = buf.random(size_t(N) * C, 81, 1.f);
    auto* lse = static_cast<float*>(buf.zeros(size_t(B) * NH * T, true));
    const std::string variant =
        "GQA " + std::to_string(NH) + ":" + std::to_string(NKV) + " window " + std::to_string(W);
    s.add({"attention_forward", variant, 0, false, flops, 0, false,
           [=] { return o->attention_forward(ctx, out, lse, qkv, B, T, NH, NKV, HD, W, dt); }});
    s.add({"attention_backward", variant, 0, false, 2 * flops, 0, false,
           [=] { return o->attention_backward(ctx, dqkv, dout, qkv, out, lse, B, T, NH, NKV, HD, W, dt); }});
  }
  if (s.wants_any({"relu_squared_forward", "relu_squared_backward"})) {
    const size_t n = size_t(N) * H;
    void *pre = buf.random(n, 52, 1.f), *out = buf.zeros(n), *dout = buf.random(n, 53, 1.f), *din = buf.zeros(n);
    s.add({"relu_squared_forward", "", 0, false, 0, e * 2 * nh, false,
           [=] { return o->relu_squared_forward(ctx, out, pre, n, dt); }});
    s.add({"relu_squared_backward", "", 0, false, 0, e * 3 * nh, false,
           [=] { return o->relu_squared_backward(ctx, din, pre, dout, n, dt); }});
  }
  if (s.wants_any({"swiglu_forward", "swiglu_backward"})) {
    void *gate_up = buf.random(size_t(N) * 2 * H, 54, 1.f), *out = buf.zeros(size_t(N) * H);
    void *dout = buf.random(size_t(N) * H, 55, 1.f), *din = buf.zeros(size_t(N) * 2 * H);
    s.add({"swiglu_forward", "", 0, false, 0, e * 3 * nh, false,
           [=] { return o->swiglu_forward(ctx, out, gate_up, N, H, dt); }});
    s.add({"swiglu_backward", "", 0, false, 0, e * 5 * nh, false,
           [=] { return o->swiglu_backward(ctx, din, gate_up, dout, N, H, dt); }});
  }
  if (s.wants_any({"softcap_forward", "softcap_backward"})) {
    const size_t n = size_t(g.B) * g.Vp;
    void *pre = buf.random(n, 56, 10.f), *out = buf.zeros(n), *dout = buf.random(n, 57, 1.f), *din = buf.zeros(n);
    s.add({"softcap_forward", "(sampling rows)", 0, false, 0, e * 2 * double(n), false,
           [=] { return o->softcap_forward(ctx, out, pre, n, 15.f, dt); }});
    s.add({"softcap_backward", "(sampling rows)", 0, false, 0, e * 3 * double(n), false,
           [=] { return o->softcap_backward(ctx, din, pre, dout, n, 15.f, dt); }});
  }
}

// nanochat's learned mixing at the shape's geometry: scaled_sum over the (B*T, C) residual
// stream (r x + l x0, its scalars on the device); gated_add as its value embeddings (every head
// a kv head, a 12-channel gate, scale 3) into the v part of the fused qkv, and as its smear (one
// head of C, a 24-channel gate, shift 1; the backward's dgin and dadd one buffer).
void add_mixing_cases(const CaseSink& s, const Shape& g) {
  const nfn_op_table* o = s.ops;
  nfn_ctx* ctx = s.ctx;
  const nfn_dtype dt = s.dtype();
  const int N = g.B * g.T, C = g.C, NH = g.NH;
  const size_t NC = size_t(N) * C;
  const double e = s.e(), nc = double(NC);
  DeviceBuffers& buf = *s.buf;
  if (s.wants_any({"scaled_sum_forward", "scaled_sum_backward"})) {
    void *x = buf.random(NC, 61, 1.f), *x0 = buf.random(NC, 62, 1.f), *out = buf.zeros(NC);
    void *r = buf.random(1, 63, 1.f), *l = buf.random(1, 64, 1.f), *dr = buf.zeros(1), *dl = buf.zeros(1);
    void *dout = buf.random(NC, 65, 1.f), *dx = buf.zeros(NC), *dx0 = buf.zeros(NC);
    s.add({"scaled_sum_forward", "(r x + l x0)", 0, false, 0, e * 3 * nc, false,
           [=] { return o->scaled_sum_forward(ctx, out, x, x0, r, l, 1.f, 1.f, NC, dt); }});
    // dout, x and x0 read, dx written, dx0 read and written
    s.add({"scaled_sum_backward", "(r x + l x0)", 0, false, 0, e * 6 * nc, false,
           [=] { return o->scaled_sum_backward(ctx, dx, dx0, dr, dl, dout, x, x0, r, l, 1.f, 1.f, NC, dt); }});
  }
  if (s.wants_any({"gated_add_forward", "gated_add_backward"})) {
    void *xn = buf.random(NC, 66, 1.f), *ve = buf.random(NC, 67, 1.f), *qkv = buf.random(3 * NC, 68, 1.f);
    void *dqkv = buf.random(3 * NC, 69, 1.f), *dxn = buf.zeros(NC), *dve = buf.zeros(NC);
    void *ve_w = buf.random(size_t(NH) * 12, 70, 0.3f), *dve_w = buf.zeros(size_t(NH) * 12);
    void *smear_w = buf.random(24, 71, 0.3f), *dsmear_w = buf.zeros(24), *lam = buf.random(1, 72, 1.f);
    void *dlam = buf.zeros(1), *x = buf.zeros(NC);
    const size_t v_part = 2 * size_t(C) * buf.element_bytes();  // qkv's v columns start at 2C
    void* v = static_cast<char*>(qkv) + v_part;
    void* dv = static_cast<char*>(dqkv) + v_part;
    const int D = C / NH;
    // out read and written, add read, the gate's 12 (24) channels a row
    s.add({"gated_add_forward", "(value embeddings)", 0, false, 0, e * (3 * nc + 12.0 * N), false,
           [=] {
             return o->gated_add_forward(ctx, v, xn, ve_w, nullptr, ve, N, g.T, NH, D, 12, 0, 3 * C, C, C, 3.f, dt);
           }});
    s.add({"gated_add_forward", "(smear)", 0, false, 0, e * (3 * nc + 24.0 * N), false,
           [=] { return o->gated_add_forward(ctx, x, xn, smear_w, lam, xn, N, g.T, 1, C, 24, 1, C, C, C, 1.f, dt); }});
    // dout and add read, dadd read and written, gin's channels read and dgin's read and written
    s.add({"gated_add_backward", "(value embeddings)", 0, false, 0, e * (4 * nc + 36.0 * N), false, [=] {
             return o->gated_add_backward(ctx, dxn, dve_w, nullptr, dve, dv, xn, ve_w, nullptr, ve, N, g.T, NH, D, 12,
                                          0, 3 * C, C, C, 3.f, dt);
           }});
    s.add({"gated_add_backward", "(smear)", 0, false, 0, e * (4 * nc + 72.0 * N), false, [=] {
             return o->gated_add_backward(ctx, dxn, dsmear_w, dlam, dxn, dqkv, xn, smear_w, lam, xn, N, g.T, 1, C, 24,
                                          1, C, C, C, 1.f, dt);
           }});
  }
}

void add_generation_cases(const CaseSink& s, const Shape& g) {
  const nfn_op_table* o = s.ops;
  nfn_ctx* ctx = s.ctx;
  const nfn_dtype dt = s.dtype();
  const int B = g.B, T = g.T, C = g.C, NH = g.NH, vocab = g.vocab, Vp = g.Vp;
  const double e = s.e();
  DeviceBuffers& buf = *s.buf;
  if (s.want("softmax_forward")) {
    void* logits = buf.random(size_t(B) * Vp, 31, 3.f);
    auto* probs = static_cast<float*>(buf.zeros(size_t(B) * vocab, true));
    s.add({"softmax_forward", "(sampling rows)", 0, false, 0, (e + 4) * B * double(vocab), false,
           [=] { return o->softmax_forward(ctx, probs, logits, B, vocab, Vp, dt); }});
  }
  if (s.want("attention_kv_cached")) {
    const size_t cache = size_t(B) * T * C;
    void *k = buf.random(cache, 32, 1.f), *v = buf.random(cache, 33, 1.f);
    void *qkv = buf.random(size_t(B) * 3 * C, 34, 1.f), *out = buf.zeros(size_t(B) * C);
    // The new row's q, k, v read, k and v written to the cache, the whole cache read, out written.
    const double bytes = e * (3.0 * B * C + 2.0 * B * C + 2.0 * cache + 1.0 * B * C);
    s.add({"attention_kv_cached", "(decode at the last position)", 0, false, 0, bytes, false,
           [=] { return o->attention_kv_cached(ctx, out, k, v, qkv, B, 1, T - 1, T, NH, NH, C / NH, 0, dt); }});
  }
}

void add_memory_cases(const CaseSink& s, const Shape& g) {
  const nfn_op_table* o = s.ops;
  nfn_ctx* ctx = s.ctx;
  const nfn_dtype dt = s.dtype();
  const size_t N = size_t(g.B) * g.T, NC = N * g.C;
  const double e = s.e(), nc = static_cast<double>(NC), bytes = e * nc;
  DeviceBuffers& buf = *s.buf;
  if (s.want("fill")) {
    void* dst = buf.zeros(NC);
    s.add({"fill", "", 0, false, 0, bytes, false, [=] { return o->fill(ctx, dst, dt, 0.5f, NC); }});
  }
  if (s.want("convert")) {
    void *src = buf.random(NC, 41, 1.f, true), *dst = buf.zeros(NC);
    s.add({"convert", "f32->bf16", 0, false, 0, 6 * nc, false,
           [=] { return o->convert(ctx, dst, NFN_BF16, src, NFN_F32, NC); }});
  }
  if (s.want("dequantize")) {  // the MLP's up matrix (4C x C) from Q4_1: what a quantized base reads
    const size_t n = 4 * size_t(g.C) * g.C, blocks = n / 32;
    std::vector<uint8_t> q(blocks * 20);
    for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>(i * 40503u >> 7);
    for (size_t b = 0; b < blocks; ++b) q[b * 20 + 1] = q[b * 20 + 3] = 0x30;  // modest scales
    const void* src = buf.put(q.data(), q.size());
    void* dst = buf.zeros(n);
    s.add({"dequantize", "q4_1 (4C x C)", 0, false, 0, 20.0 * blocks + e * n, false,
           [=] { return o->dequantize(ctx, dst, src, NFN_Q4_1, n, dt); }});
  }
  if (s.want("copy")) {
    void *a = buf.random(NC, 42, 1.f), *b = buf.zeros(NC), *h = buf.host(NC * buf.element_bytes());
    const size_t n = NC * buf.element_bytes();
    s.add({"copy", "device to device", 0, false, 0, 2 * bytes, false,
           [=] { return o->copy(ctx, b, a, n, NFN_DEVICE_TO_DEVICE); }});
    s.add({"copy", "host to device", 0, false, 0, bytes, true,
           [=] { return o->copy(ctx, b, h, n, NFN_HOST_TO_DEVICE); }});
    s.add({"copy", "device to host", 0, false, 0, bytes, true,
           [=] { return o->copy(ctx, h, a, n, NFN_DEVICE_TO_HOST); }});
  }
  if (s.want("widen_tokens")) {
    std::vector<uint16_t> ids(N);
    for (size_t i = 0; i < N; ++i) ids[i] = static_cast<uint16_t>(i * 40503u);
    auto* src = static_cast<const uint16_t*>(buf.put(ids.data(), N * 2));
    auto* dst = static_cast<int32_t*>(buf.zeros(N, true));
    s.add({"widen_tokens", "", 0, false, 0, 6.0 * N, false, [=] { return o->widen_tokens(ctx, dst, src, N); }});
  }
}

}  // namespace

void add_other_cases(const CaseSink& s, const Shape& g) {
  add_norm_and_elementwise_cases(s, g);
  add_decoder_cases(s, g);
  add_mixing_cases(s, g);
  add_generation_cases(s, g);
  add_memory_cases(s, g);
}

}  // namespace nfn::bench

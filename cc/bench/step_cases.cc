#include "cc/bench/step_cases.h"

#include <algorithm>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace nfn::bench {
namespace {

double gemm_flops(double m, double n, double k) { return 2.0 * m * n * k; }

// Rows of token ids, uploaded, and how many distinct ids they hold (the gradient rows an
// embedding backward touches).
struct Ids {
  const int32_t* device;
  double distinct;
};

Ids upload_ids(const CaseSink& s, const std::vector<int32_t>& ids) {
  const double distinct = static_cast<double>(std::set<int32_t>(ids.begin(), ids.end()).size());
  return {static_cast<const int32_t*>(s.buf->put(ids.data(), ids.size() * 4)), distinct};
}

// Ids spread over the vocabulary, and text-like ids: rank r drawn with probability
// proportional to 1 / (r + 1) (Zipf), so the commonest id is about 9% of a micro-batch at
// vocab 50,257 (" the" is about 4% of web text): what the embedding backward meets in real
// training.
std::vector<int32_t> spread_ids(int n, int vocab) {
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 2654435761u) % vocab);
  return ids;
}

std::vector<int32_t> text_like_ids(int n, int vocab) {
  std::vector<double> cdf(vocab);
  for (int r = 0; r < vocab; ++r) cdf[r] = (r ? cdf[r - 1] : 0) + 1.0 / (r + 1);
  std::mt19937 rng(20240520);
  std::vector<int32_t> ids(n);
  for (int i = 0; i < n; ++i) {
    const double u = std::uniform_real_distribution<double>(0, cdf.back())(rng);
    ids[i] = static_cast<int32_t>(std::lower_bound(cdf.begin(), cdf.end(), u) - cdf.begin());
  }
  return ids;
}

// The activations and one layer's weights every step op reads or writes (x, y, pre, dy hold
// the widest activation, N x 4C).
struct Activations {
  void *x, *y, *pre, *dy, *w, *dw, *b, *db, *dcol;
  float* stats;  // mean then rstd, N each
};

Activations make_activations(const CaseSink& s, const Shape& g) {
  const size_t N = size_t(g.B) * g.T, C = g.C, NC4 = N * 4 * C;
  DeviceBuffers& buf = *s.buf;
  Activations a;
  a.x = buf.random(NC4, 1, 1.f);
  a.y = buf.random(NC4, 2, 1.f);
  a.pre = buf.random(NC4, 3, 1.f);
  a.dy = buf.random(NC4, 4, 1.f);
  a.w = buf.random(4 * C * C, 5, 0.02f);
  a.dw = buf.zeros(4 * C * C);
  a.b = buf.random(4 * C, 6, 0.02f);
  a.db = buf.zeros(4 * C);
  a.dcol = buf.zeros(4 * C);
  a.stats = static_cast<float*>(buf.zeros(2 * N, true));
  return a;
}

void add_embedding_cases(const CaseSink& s, const Shape& g, const Activations& a, const void* wte, void* dwte) {
  const nfn_op_table* o = s.ops;
  nfn_ctx* ctx = s.ctx;
  const nfn_dtype dt = s.dtype();
  const int B = g.B, T = g.T, C = g.C, N = B * T;
  const double e = s.e();
  const Ids spread = upload_ids(s, spread_ids(N, g.vocab)), text = upload_ids(s, text_like_ids(N, g.vocab));
  // wpe is w's first T rows of C: it holds 4C x C elements, at least T x C at every shape.
  void *y = a.y, *w = a.w, *dw = a.dw, *dy = a.dy;
  s.add({"embedding_forward", "", 1, false, 0, e * (N * C + spread.distinct * C + T * C) + 4.0 * N, false,
         [=] { return o->embedding_forward(ctx, y, spread.device, wte, w, B, T, C, dt); }});
  for (const Ids& ids : {spread, text}) {
    const bool text_like = ids.device == text.device;
    s.add({"embedding_backward", text_like ? "(text-like ids)" : "", text_like ? 0 : 1, false, 0,
           e * (N * C + 2 * ids.distinct * C + 2.0 * T * C) + 4.0 * N, false,
           [=] { return o->embedding_backward(ctx, dwte, dw, dy, ids.device, B, T, C, dt); }});
  }
}

void add_layernorm_cases(const CaseSink& s, const Shape& g, const Activations& a) {
  const nfn_op_table* o = s.ops;
  nfn_ctx* ctx = s.ctx;
  const nfn_dtype dt = s.dtype();
  const int N = g.B * g.T, C = g.C;
  const double e = s.e(), NC = double(N) * C;
  const Activations v = a;
  s.add({"layernorm_forward", "", 2 * g.L + 1, false, 0, e * (2 * NC + 2.0 * C) + 8.0 * N, false,
         [=] { return o->layernorm_forward(ctx, v.y, v.stats, v.stats + N, v.x, v.w, v.b, N, C, dt); }});
  // The first layer's ln1 has no projection below it; every other norm backward sums the
  // projection's bias gradient (dinp_colsum).
  for (const bool colsum : {false, true})
    s.add({"layernorm_backward", colsum ? "+dinp_colsum" : "", colsum ? 2 * g.L : 1, false, 0,
           e * (4 * NC + (colsum ? 7.0 : 5.0) * C) + 8.0 * N, false, [=] {
             return o->layernorm_backward(ctx, v.y, v.dw, v.db, colsum ? v.dcol : nullptr, v.dy, v.x, v.w, v.stats,
                                          v.stats + N, N, C, dt);
           }});
}

void add_linear_cases(const CaseSink& s, const Shape& g, const Activations& a) {
  const nfn_op_table* o = s.ops;
  nfn_ctx* ctx = s.ctx;
  const nfn_dtype dt = s.dtype();
  const int N = g.B * g.T, C = g.C, L = g.L;
  const Activations v = a;
  const std::string c1 = std::to_string(C), c3 = std::to_string(3 * C), c4 = std::to_string(4 * C);
  // gelu: fc's GELU epilogue; residual: the projections', which add onto the residual stream.
  auto forward = [&](const std::string& variant, int IC, int OC, bool gelu, bool residual) {
    s.add({"linear_forward", variant, L, false, gemm_flops(N, OC, IC), 0, false, [=] {
             return o->linear_forward(ctx, v.y, gelu ? v.pre : nullptr, v.x, v.w, v.b, residual ? v.dy : nullptr, N, IC,
                                      OC, gelu ? NFN_EPILOGUE_GELU : NFN_EPILOGUE_NONE, dt);
           }});
  };
  forward("qkv " + c1 + "->" + c3, C, 3 * C, false, false);
  forward("proj+residual " + c1 + "->" + c1, C, C, false, true);
  forward("fc+gelu " + c1 + "->" + c4, C, 4 * C, true, false);
  forward("fcproj+residual " + c4 + "->" + c1, 4 * C, C, false, true);
  // As the model calls each: qkv sums its own bias gradient; the projections' come from the
  // norm backwards (dinp_colsum), fc's from fcproj's backward through the GELU.
  const std::vector<std::tuple<std::string, int, int, bool>> layers = {
      {"qkv", C, 3 * C, false}, {"proj", C, C, false}, {"fc", C, 4 * C, false}, {"fcproj+gelu", 4 * C, C, true}};
  for (const auto& [name, IC, OC, gelu] : layers) {
    const bool own_bias = name == "qkv";
    s.add({"linear_backward", name, L, false, 2 * gemm_flops(N, OC, IC), 0, false, [=, IC = IC, OC = OC, gelu = gelu] {
             return o->linear_backward(ctx, v.y, v.dw, own_bias ? v.db : nullptr, gelu ? v.dcol : nullptr, v.dy, v.x,
                                       v.w, gelu ? v.pre : nullptr, N, IC, OC, 0, dt);
           }});
  }
  // Each backward's products alone: the input gradient, the weight gradient, and the weight
  // gradient with the bias gradient (the column sums of dout).
  for (const auto& [name, IC, OC, gelu] : layers) {
    const double f = gemm_flops(N, OC, IC);
    s.add({"linear_backward", name + ": dinp", 0, true, f, 0, false, [=, IC = IC, OC = OC, gelu = gelu] {
             return o->linear_backward(ctx, v.y, nullptr, nullptr, nullptr, v.dy, v.x, v.w, gelu ? v.pre : nullptr, N,
                                       IC, OC, 0, dt);
           }});
    for (const bool bias : {false, true})
      s.add({"linear_backward", name + (bias ? ": dweight+dbias" : ": dweight"), 0, true, f, 0, false,
             [=, IC = IC, OC = OC] {
               return o->linear_backward(ctx, nullptr, v.dw, bias ? v.db : nullptr, nullptr, v.dy, v.x, v.w, nullptr, N,
                                         IC, OC, 0, dt);
             }});
  }
}

void add_attention_and_loss_cases(const CaseSink& s, const Shape& g, const Activations& a, const void* wte,
                                  void* dwte) {
  const nfn_op_table* o = s.ops;
  nfn_ctx* ctx = s.ctx;
  const nfn_dtype dt = s.dtype();
  const int B = g.B, T = g.T, C = g.C, NH = g.NH, N = B * T, vocab = g.vocab, Vp = g.Vp;
  const Activations v = a;
  if (s.wants_any({"attention_forward", "attention_backward"})) {
    void *qkv = s.buf->random(size_t(N) * 3 * C, 8, 1.f), *dqkv = s.buf->zeros(size_t(N) * 3 * C);
    auto* lse = static_cast<float*>(s.buf->zeros(size_t(B) * NH * T, true));
    // Causal attention: about half of the T x T score matrix is computed.
    const double flops = 2.0 * B * NH * (2.0 * T * T / 2 * (C / NH));
    s.add({"attention_forward", "", g.L, false, flops, 0, false,
           [=] { return o->attention_forward(ctx, v.y, lse, qkv, B, T, NH, NH, C / NH, 0, dt); }});
    s.add({"attention_backward", "", g.L, false, 2 * flops, 0, false,
           [=] { return o->attention_backward(ctx, dqkv, v.dy, qkv, v.y, lse, B, T, NH, NH, C / NH, 0, dt); }});
  }
  if (s.want("lm_head_cross_entropy")) {
    auto* losses = static_cast<float*>(s.buf->zeros(N, true));
    const float one = 1.f;
    auto* sum = static_cast<float*>(s.buf->put(&one, 4));
    const auto* targets = upload_ids(s, spread_ids(N, vocab)).device;
    s.add({"lm_head_cross_entropy", "(+backward)", 1, false, 3 * gemm_flops(N, Vp, C), 0, false, [=] {
             return o->lm_head_cross_entropy(ctx, losses, sum, v.x, dwte, v.y, wte, targets, nullptr, N, C, vocab, Vp,
                                             1.f / N, 0.f, dt);
           }});
    // With per-row weights (nfn rl's advantages), outside the step.
    auto* weights = static_cast<float*>(s.buf->random(N, 13, 1.f, true));
    s.add({"lm_head_cross_entropy", "weighted (+backward)", 0, false, 3 * gemm_flops(N, Vp, C), 0, false, [=] {
             return o->lm_head_cross_entropy(ctx, losses, sum, v.x, dwte, v.y, wte, targets, weights, N, C, vocab, Vp,
                                             1.f / N, 0.f, dt);
           }});
  }
}

// Muon on one fc weight (4C, C): five Polar Express steps of three GEMMs on the C x C Gram
// matrix; master and momentum read and written (f32), the gradient read, the copy written.
void add_muon_case(const CaseSink& s, const Shape& g) {
  if (!s.want("muon_step_many")) return;
  const nfn_op_table* o = s.ops;
  nfn_ctx* ctx = s.ctx;
  const nfn_dtype dt = s.dtype();
  const int rows = 4 * g.C, cols = g.C;
  const size_t n = size_t(rows) * cols;
  DeviceBuffers& buf = *s.buf;
  const nfn_muon_group group = {static_cast<float*>(buf.random(n, 11, 0.02f, true)),
                                dt == NFN_F32 ? nullptr : buf.zeros(n), buf.random(n, 12, 1e-3f),
                                static_cast<float*>(buf.zeros(n, true)), rows, cols};
  const double r = rows, c = cols, e = s.e();
  s.add({"muon_step_many", "fc " + std::to_string(rows) + "x" + std::to_string(cols), 0, false,
         5 * (4 * r * c * c + 2 * c * c * c), static_cast<double>(n) * (16 + e + (dt == NFN_F32 ? 0 : e)), false,
         [=] { return o->muon_step_many(ctx, &group, 1, 0.02f, 0.95f, 1, 5, 0.f, dt); }});
}

void add_optimizer_cases(const CaseSink& s, const Shape& g) {
  const nfn_op_table* o = s.ops;
  nfn_ctx* ctx = s.ctx;
  const nfn_dtype dt = s.dtype();
  const size_t C = g.C;
  const size_t params = size_t(g.Vp) * C + size_t(g.T) * C + size_t(g.L) * (12 * C * C + 13 * C) + 2 * C;
  const double e = s.e(), n = static_cast<double>(params);
  DeviceBuffers& buf = *s.buf;
  auto* master = static_cast<float*>(buf.random(params, 9, 0.02f, true));
  void* weights = dt == NFN_F32 ? nullptr : buf.zeros(params);  // bf16 storage: the AdamW copy
  void* grad = buf.random(params, 10, 1e-3f);
  auto* m = static_cast<float*>(buf.zeros(params, true));
  auto* v = static_cast<float*>(buf.zeros(params, true));
  const float one = 1.f;
  auto* sumsq = static_cast<float*>(buf.put(&one, 4));
  s.add({"sum_squares_many", "", 1, false, 0, e * n + 4, false, [=] {
           const void* bufs[1] = {grad};
           size_t counts[1] = {params};
           return o->sum_squares_many(ctx, bufs, counts, 1, dt, sumsq);
         }});
  // master, m and v read and written (f32), the gradient read, the bf16 copy written.
  const nfn_adamw_group group = {master, weights, grad, m, v, params, 0.1f};
  auto step = std::make_shared<int>(0);
  s.add({"adamw_step_many", "", 1, false, 0, n * (24 + e + (weights ? e : 0)) + 4, false, [=] {
           return o->adamw_step_many(ctx, &group, 1, ++*step, 1e-4f, 0.9f, 0.95f, 1e-8f, sumsq, 1.f, dt);
         }});
  add_muon_case(s, g);
}

}  // namespace

void add_step_cases(const CaseSink& s, const Shape& g) {
  const bool embedding = s.wants_any({"embedding_forward", "embedding_backward"});
  const bool lm_head = s.want("lm_head_cross_entropy");
  const bool any_activation = embedding || lm_head ||
                              s.wants_any({"layernorm_forward", "layernorm_backward", "linear_forward",
                                           "linear_backward", "attention_forward", "attention_backward"});
  if (any_activation) {
    const Activations a = make_activations(s, g);
    void *wte = nullptr, *dwte = nullptr;
    if (embedding || lm_head) {
      wte = s.buf->random(size_t(g.Vp) * g.C, 7, 0.02f);
      dwte = s.buf->zeros(size_t(g.Vp) * g.C);
    }
    if (embedding) add_embedding_cases(s, g, a, wte, dwte);
    add_layernorm_cases(s, g, a);
    add_linear_cases(s, g, a);
    add_attention_and_loss_cases(s, g, a, wte, dwte);
  }
  if (s.wants_any({"sum_squares_many", "adamw_step_many", "muon_step_many"})) add_optimizer_cases(s, g);
}

}  // namespace nfn::bench

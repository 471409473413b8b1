// Category: attention
// Shows: attention_forward with grouped-query heads (2 query heads sharing 1 key/value head)
// and a sliding window of 2 (row t sees rows t-2..t), with each row's log-sum-exp, and
// attention_kv_cached fed one position at a time, as generation calls it, giving the same rows
#include "cc/examples/example.h"

int main(int argc, char** argv) {
  example::Library s = example::open(argc, argv);
  const nfn_op_table& o = s.ops();
  const int B = 1, T = 4, NH = 2, NKV = 1, HD = 2, W = 2, row = (NH + 2 * NKV) * HD, C = NH * HD;
  const std::vector<float> qkv = example::values(B * T * row, 1);  // per row: q heads, then k, then v
  float *d_qkv = example::upload(s, qkv), *out = example::upload(s, std::vector<float>(B * T * C));
  float* lse = example::upload(s, std::vector<float>(B * NH * T));
  example::check(s, o.attention_forward(s.ctx, out, lse, d_qkv, B, T, NH, NKV, HD, W, NFN_F32), "attention_forward");
  // The same rows from a KV cache of T positions (its rows hold the NKV * HD key channels),
  // one new position a call.
  float *k_cache = example::upload(s, std::vector<float>(B * T * NKV * HD));
  float *v_cache = example::upload(s, std::vector<float>(B * T * NKV * HD));
  float* one = example::upload(s, std::vector<float>(C));
  std::vector<float> cached;
  for (int pos = 0; pos < T; ++pos) {
    example::check(s, o.attention_kv_cached(s.ctx, one, k_cache, v_cache, d_qkv + pos * row, B, 1, pos, T, NH, NKV, HD,
                                            W, NFN_F32),
                   "attention_kv_cached");
    for (float v : example::download(s, one, C)) cached.push_back(v);
  }
  std::printf("# per query head h (2 channels), kv head 0: out[t] = softmax(q_h[t] . k[j] / sqrt(2)) @ v[j]\n");
  std::printf("# over j = max(0, t - 2)..t; lse[h, t] = log of the softmax's denominator\n");
  example::print("qkv", qkv);
  example::print("out", example::download(s, out, B * T * C));
  example::print("lse", example::download(s, lse, B * NH * T));
  example::print("out_kv_cached", cached);
  example::free_all(s, {d_qkv, out, lse, k_cache, v_cache, one});
  example::close(&s);
  return 0;
}

// Category: attention
// Shows: attention_forward (causal, 2 heads, with each row's log-sum-exp), and
// attention_kv_cached fed one position at a time, as generation calls it, giving the same rows
#include "cc/examples/example.h"

int main(int argc, char** argv) {
  example::Library s = example::open(argc, argv);
  const nfn_op_table& o = s.ops();
  const int B = 1, T = 3, C = 4, NH = 2;
  const std::vector<float> qkv = example::values(B * T * 3 * C, 1);  // per row: q, then k, then v
  float *d_qkv = example::upload(s, qkv), *out = example::upload(s, std::vector<float>(B * T * C));
  float* lse = example::upload(s, std::vector<float>(B * NH * T));
  example::check(s, o.attention_forward(s.ctx, out, lse, d_qkv, B, T, C, NH, NFN_F32), "attention_forward");
  // The same rows from a KV cache of T positions, one new position a call.
  float *k_cache = example::upload(s, std::vector<float>(B * T * C)), *v_cache = example::upload(s, std::vector<float>(B * T * C));
  float* row = example::upload(s, std::vector<float>(C));
  std::vector<float> cached;
  for (int pos = 0; pos < T; ++pos) {
    example::check(s, o.attention_kv_cached(s.ctx, row, k_cache, v_cache, d_qkv + pos * 3 * C, B, 1, pos, T, C, NH, NFN_F32),
                   "attention_kv_cached");
    for (float v : example::download(s, row, C)) cached.push_back(v);
  }
  std::printf("# per head h (2 channels): out[t] = softmax(q[t] . k[0..t] / sqrt(2)) @ v[0..t];\n");
  std::printf("# lse[h, t] = log of the softmax's denominator\n");
  example::print("qkv", qkv);
  example::print("out", example::download(s, out, B * T * C));
  example::print("lse", example::download(s, lse, B * NH * T));
  example::print("out_kv_cached", cached);
  example::free_all(s, {d_qkv, out, lse, k_cache, v_cache, row});
  example::close(&s);
  return 0;
}

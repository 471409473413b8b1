// The KV-cached decoder against the training model's full recompute (nfn::GPT, which runs
// the whole sequence through attention_forward for every row it is asked about): logits at
// every position agree within fp32 tolerance whether the sequence is prefilled whole, fed
// one token at a time, or split; per-token losses agree with the training loss; bad input
// is refused with one line; generation with a fixed seed repeats itself.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cc/infer/engine.h"
#include "cc/infer/gpt_decoder.h"
#include "cc/model/gpt.h"
#include "cc/ops/linked_op_table.h"
#include "tests/cc/expect.h"


static double worst(const float* a, const float* b, size_t n, double atol, double rtol) {
  double w = 0;
  for (size_t i = 0; i < n; ++i) {
    double r = std::fabs(a[i] - b[i]) / (atol + rtol * std::fabs(b[i]));
    if (!(r <= w)) w = std::isnan(r) ? INFINITY : r;
  }
  return w;
}

int main() {
  nfn_op_table ops = nfn::linked_op_table();
  nfn_ctx* ctx = nullptr;
  if (ops.ctx_create(0, &ctx) != NFN_OK) return 1;
  {  // the models free their memory before the context goes
  nfn::GPTConfig c;
  c.max_seq_len = 24, c.vocab_size = 50, c.padded_vocab_size = 64, c.num_layers = 2, c.num_heads = 2,
  c.channels = 16;
  std::vector<float> params = nfn::GPT::random_parameters(c, 7);
  // Larger weights than the GPT-2 init, so attention is far from uniform and mistakes show.
  for (float& p : params) p *= 4.f;
  const int T = 20;
  std::vector<int32_t> tokens(T), targets(T);
  for (int t = 0; t < T; ++t) tokens[t] = (t * 17 + 3) % c.vocab_size, targets[t] = (t * 5 + 1) % c.vocab_size;

  std::string error;
  nfn::GPT full;
  EXPECT(full.init(&ops, ctx, c, NFN_F32, &error) && full.set_parameters(params, &error), "%s", error.c_str());
  EXPECT(full.upload_tokens(tokens.data(), targets.data(), 1, T, &error), "%s", error.c_str());
  std::vector<float> want;  // (T, V) from full recompute
  for (int t = 0; t < T; ++t) {
    std::vector<float> row;
    EXPECT(full.logits_for_row(t, &row, &error), "%s", error.c_str());
    want.insert(want.end(), row.begin(), row.end());
  }
  const size_t V = c.vocab_size;

  nfn::GPTDecoder dec;
  EXPECT(dec.init(&ops, ctx, c, params, &error), "%s", error.c_str());
  for (int split : {T, 1, 7}) {  // prefill all; token by token; 7 then one at a time
    dec.reset();
    std::vector<float> got, rows;
    for (int pos = 0; pos < T;) {
      const int n = pos == 0 ? split : 1;
      EXPECT(dec.forward(tokens.data() + pos, n, &error) && dec.logits(true, &rows, &error), "%s", error.c_str());
      got.insert(got.end(), rows.begin(), rows.end());
      pos += n;
    }
    EXPECT(got.size() == want.size(), "split %d: %zu logits", split, got.size());
    double w = worst(got.data(), want.data(), want.size(), 1e-4, 1e-4);
    EXPECT(w <= 1.0, "split %d: KV-cached logits differ from full recompute (%.3g x tolerance)", split, w);
    // logits(false) is the last row of logits(true).
    std::vector<float> last;
    EXPECT(dec.logits(false, &last, &error) && last.size() == V, "%s", error.c_str());
    EXPECT(worst(last.data(), got.data() + (T - 1) * V, V, 1e-5, 1e-5) <= 1.0, "split %d: last row", split);
  }

  // Per-token losses against the training loss (sum over the same rows).
  dec.reset();
  std::vector<float> losses;
  EXPECT(dec.forward(tokens.data(), T, &error) && dec.losses(targets.data(), &losses, &error), "%s", error.c_str());
  float loss_sum = 0, sumsq = 0;
  EXPECT(full.zero_loss(&error) && full.step_forward_backward(false, 1.f, &error) &&
             full.read_scalars(&loss_sum, &sumsq, &error), "%s", error.c_str());
  double dec_sum = 0;
  for (float l : losses) dec_sum += l;
  EXPECT(std::fabs(dec_sum - loss_sum) <= 1e-4 * std::fabs(loss_sum), "loss %g vs training %g", dec_sum, loss_sum);

  // Bad input: one line each, and the cache position is left alone.
  dec.reset();
  int32_t bad = c.vocab_size;
  EXPECT(!dec.forward(&bad, 1, &error) && error.find("outside the vocabulary") != std::string::npos &&
             dec.position() == 0, "token out of range: %s", error.c_str());
  std::vector<int32_t> too_long(c.max_seq_len + 1, 1);
  EXPECT(!dec.forward(too_long.data(), c.max_seq_len + 1, &error) && error.find("context") != std::string::npos,
         "too long: %s", error.c_str());
  nfn::GenerationResult r;
  EXPECT(!nfn::generate(&dec, too_long, 4, {}, -1, nullptr, &r, &error) &&
             error.find("longer than the context") != std::string::npos, "prompt too long: %s", error.c_str());

  // Generation: greedy equals the argmax chain of full recompute; a seed repeats itself;
  // the context bounds the output.
  std::vector<int32_t> prompt(tokens.begin(), tokens.begin() + 5);
  nfn::SamplingConfig greedy;
  greedy.temperature = 0;
  EXPECT(nfn::generate(&dec, prompt, 6, greedy, -1, nullptr, &r, &error), "%s", error.c_str());
  std::vector<int32_t> seq = prompt;
  for (int i = 0; i < 6; ++i) {
    std::vector<float> row;
    EXPECT(full.upload_tokens(seq.data(), nullptr, 1, static_cast<int>(seq.size()), &error) &&
               full.logits_for_row(static_cast<int>(seq.size()) - 1, &row, &error), "%s", error.c_str());
    int best = 0;
    for (size_t v = 1; v < V; ++v) if (row[v] > row[best]) best = static_cast<int>(v);
    seq.push_back(best);
  }
  EXPECT(r.tokens == std::vector<int32_t>(seq.begin() + 5, seq.end()), "greedy generation differs from recompute");
  nfn::SamplingConfig s;
  s.temperature = 1.f, s.top_k = 20, s.top_p = 0.9f, s.seed = 42;
  nfn::GenerationResult a, b;
  EXPECT(nfn::generate(&dec, prompt, 10, s, -1, nullptr, &a, &error) &&
             nfn::generate(&dec, prompt, 10, s, -1, nullptr, &b, &error), "%s", error.c_str());
  EXPECT(a.tokens == b.tokens && a.tokens.size() == 10, "same seed, different tokens");
  EXPECT(nfn::generate(&dec, prompt, 100, s, -1, nullptr, &a, &error), "%s", error.c_str());
  EXPECT(a.tokens.size() == static_cast<size_t>(c.max_seq_len - 5 + 1) && a.stop_reason == "context",
         "context stop: %zu tokens, %s", a.tokens.size(), a.stop_reason.c_str());
  const size_t first = std::find(r.tokens.begin(), r.tokens.end(), r.tokens[2]) - r.tokens.begin();
  EXPECT(nfn::generate(&dec, prompt, 10, greedy, r.tokens[2], nullptr, &a, &error) &&
             a.tokens.size() == first + 1 && a.stop_reason == "stop_token", "stop token: %zu tokens", a.tokens.size());

  }
  ops.ctx_destroy(ctx);
  return nfn_test::finish("gpt_decoder_test");
}

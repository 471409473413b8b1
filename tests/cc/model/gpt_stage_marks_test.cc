// The stages the GPT model marks for --stage-timing hold the ops they name. The CPU op library
// runs behind a table that logs each op's name; a timer attached to the model takes, at each
// mark, the ops issued since the one before. Those lists are checked against the stages
// written out here from the model's definition (docs/training.md): a block's attention half
// is ln1, the QKV linear, attention and its projection, its MLP ln2, fc and fcproj, each
// backward the same ops' backwards in reverse, a recomputed half's forward ops counted in its
// own backward stage (none on the last layer, whose activations are still there). And a timer
// changes nothing: the same ops are issued, the loss and gradients are the same bits.
#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "cc/model/gpt.h"
#include "cc/ops/linked_op_table.h"
#include "tests/cc/expect.h"

namespace {

using Ops = std::vector<std::string>;

nfn_op_table real_ops;
Ops issued;  // every op issued through the logged table, in order

#define NFN_OP(name, category, dtypes, params)   \
  template <typename... A>                       \
  nfn_status logged_##name(A... args) {          \
    issued.push_back(#name);                     \
    return real_ops.name(args...);               \
  }
#include "cc/ops/nfn_ops.def"
#undef NFN_OP

nfn_op_table logged_table() {
  real_ops = nfn::linked_op_table();
  nfn_op_table t = real_ops;
#define NFN_OP(name, category, dtypes, params) t.name = logged_##name;
#include "cc/ops/nfn_ops.def"
#undef NFN_OP
  return t;
}

// Each mark with the ops issued since the previous one.
struct Marked {
  nfn::Stage stage;
  int layer;
  Ops ops;
};

class RecordingTimer : public nfn::StageTimer {
 public:
  void mark(nfn::Stage stage, int layer) override {
    marks.push_back({stage, layer, Ops(issued.begin() + static_cast<long>(from), issued.end())});
    from = issued.size();
  }
  void start() { from = issued.size(); }
  std::vector<Marked> marks;
  size_t from = 0;
};

Ops concat(Ops a, const Ops& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// One micro-step's forward and backward, then the optimizer step, as the model defines them.
std::vector<Marked> expected(int L, nfn::GPTRecompute recompute) {
  using nfn::Stage;
  const Ops attention_half{"layernorm_forward", "linear_forward", "attention_forward", "linear_forward"};
  const Ops mlp_hidden{"layernorm_forward", "linear_forward"};
  std::vector<Marked> want{{Stage::kEmbedding, -1, {"embedding_forward"}}};
  for (int l = 0; l < L; ++l) {
    want.push_back({Stage::kAttentionForward, l, attention_half});
    want.push_back({Stage::kMlpForward, l, concat(mlp_hidden, {"linear_forward"})});
  }
  want.push_back({Stage::kLmHead, -1, {"layernorm_forward", "lm_head_cross_entropy"}});
  want.push_back({Stage::kLmHead, -1, {"fill", "layernorm_backward"}});
  for (int l = L - 1; l >= 0; --l) {
    const bool rerun = l < L - 1;
    if (rerun && recompute.attention) want.push_back({Stage::kAttentionBackward, l, attention_half});
    const Ops mlp_backward{"linear_backward", "linear_backward", "layernorm_backward"};
    want.push_back({Stage::kMlpBackward, l, rerun && recompute.mlp ? concat(mlp_hidden, mlp_backward) : mlp_backward});
    want.push_back({Stage::kAttentionBackward, l,
                    {"linear_backward", "attention_backward", "linear_backward", "layernorm_backward"}});
  }
  want.push_back({Stage::kEmbedding, -1, {"embedding_backward"}});
  want.push_back({Stage::kOptimizer, -1, {"sum_squares_many", "adamw_step_many"}});
  return want;
}

std::string describe(const Marked& m) {
  std::string s = std::string(nfn::stage_name(m.stage)) + " " + std::to_string(m.layer) + ":";
  for (const std::string& op : m.ops) s += " " + op;
  return s;
}

struct StepResult {
  Ops ops;  // issued from the upload's end to the optimizer step's
  float loss = 0, sumsq = 0;
  std::vector<float> params;
};

// One step of a 3-layer model, with `timer` attached (or none).
StepResult step(const nfn_op_table& ops, nfn_ctx* ctx, nfn::GPTRecompute recompute, RecordingTimer* timer) {
  nfn::GPTConfig c;
  c.max_seq_len = 16, c.vocab_size = 50, c.padded_vocab_size = 64, c.num_layers = 3, c.num_heads = 2, c.channels = 32;
  const int B = 2, T = 16;
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int i = 0; i < B * T; ++i) in[i] = (i * 7) % c.vocab_size, tg[i] = (i * 11 + 3) % c.vocab_size;
  nfn::GPT m;
  std::string error;
  StepResult r;
  bool ok = m.init(&ops, ctx, c, NFN_F32, &error, B, T, recompute) &&
            m.set_parameters(nfn::GPT::random_parameters(c, 3), &error) && m.zero_grads(&error) &&
            m.zero_loss(&error) && m.upload_tokens(in.data(), tg.data(), B, T, &error);
  m.set_stage_timer(timer);
  const size_t from = issued.size();
  if (timer != nullptr) timer->start();
  ok = ok && m.step_forward_backward(true, 1.0f / (B * T), &error) &&
       m.optimizer_step(nfn::OptimizerStep{1, 1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f}, &error);
  r.ops.assign(issued.begin() + static_cast<long>(from), issued.end());
  m.set_stage_timer(nullptr);
  ok = ok && m.read_scalars(&r.loss, &r.sumsq, &error) && m.get_parameters(&r.params, &error);
  EXPECT(ok, "a step: %s", error.c_str());
  return r;
}

void check_mode(const nfn_op_table& ops, nfn_ctx* ctx, const char* mode) {
  nfn::GPTRecompute recompute;
  EXPECT(nfn::parse_recompute(mode, &recompute), "mode %s", mode);
  RecordingTimer timer;
  const StepResult timed = step(ops, ctx, recompute, &timer), untimed = step(ops, ctx, recompute, nullptr);
  const std::vector<Marked> want = expected(3, recompute);
  EXPECT(timer.marks.size() == want.size(), "%s: %zu marks, want %zu", mode, timer.marks.size(), want.size());
  for (size_t i = 0; i < want.size() && i < timer.marks.size(); ++i)
    EXPECT(describe(timer.marks[i]) == describe(want[i]), "%s: mark %zu is '%s', want '%s'", mode, i,
           describe(timer.marks[i]).c_str(), describe(want[i]).c_str());
  EXPECT(timed.ops == untimed.ops, "%s: a timer changes the ops issued", mode);
  EXPECT(timed.loss == untimed.loss && timed.sumsq == untimed.sumsq && timed.params.size() == untimed.params.size() &&
             std::memcmp(timed.params.data(), untimed.params.data(), timed.params.size() * 4) == 0,
         "%s: a timer changes the step's results", mode);
}

}  // namespace

int main() {
  const nfn_op_table ops = logged_table();
  nfn_ctx* ctx = nullptr;
  EXPECT(ops.ctx_create(0, &ctx) == NFN_OK, "ctx_create");
  if (ctx == nullptr) return nfn_test::finish("gpt_stage_marks_test");
  for (const char* mode : {"none", "attention", "mlp", "all"}) check_mode(ops, ctx, mode);
  ops.ctx_destroy(ctx);
  return nfn_test::finish("gpt_stage_marks_test");
}

// A micro-batch shape whose activations the op library refuses (out of memory) leaves the GPT
// model running the shape it had: the CPU op library behind an allocator with a byte budget,
// as a device's memory is, refusing as the library refuses (NFN_ERR_OUT_OF_MEMORY, its own
// message). Losses are checked against a model that never ran short; the budget's books say
// which blocks the model holds after each refusal.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "cc/model/gpt.h"
#include "cc/ops/linked_op_table.h"
#include "tests/cc/expect.h"

namespace {

size_t budget = SIZE_MAX;  // bytes the live blocks may hold together
long allowed = -1;         // allocations still granted (-1: any number)
size_t live = 0;
std::map<void*, size_t> blocks;

nfn_status budget_alloc(nfn_ctx* ctx, size_t bytes, void** out) {
  if (bytes > budget - live || allowed == 0) return nfn_alloc(ctx, SIZE_MAX, out);  // the library's own refusal
  const nfn_status s = nfn_alloc(ctx, bytes, out);
  if (s == NFN_OK) {
    live += bytes;
    blocks[*out] = bytes;
    if (allowed > 0) --allowed;
  }
  return s;
}

nfn_status budget_free(nfn_ctx* ctx, void* p) {
  if (p != nullptr) {
    live -= blocks.at(p);
    blocks.erase(p);
  }
  return nfn_free(ctx, p);
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

struct Batch {
  int B, T;
  std::vector<int32_t> inputs, targets;
};

Batch batch(int B, int T, int vocab, int salt) {
  Batch b{B, T, {}, {}};
  for (int i = 0; i < B * T; ++i) {
    b.inputs.push_back((i * 7 + salt) % vocab);
    b.targets.push_back((i * 3 + 2 * salt + 1) % vocab);
  }
  return b;
}

// Summed loss of one forward over `b` (uploaded first), or NaN with *error.
float loss_of(nfn::GPT& model, const Batch& b, std::string* error) {
  float loss = 0, unused = 0;
  if (!model.upload_tokens(b.inputs.data(), b.targets.data(), b.B, b.T, error) || !model.zero_loss(error) ||
      !model.step_forward_backward(false, 0.f, error) || !model.read_scalars(&loss, &unused, error))
    return NAN;
  return loss;
}

}  // namespace

int main() {
  nfn_op_table real = nfn::linked_op_table();
  nfn_op_table ops = real;
  ops.alloc = &budget_alloc;
  ops.free = &budget_free;
  nfn_ctx* ctx = nullptr;
  if (real.ctx_create(0, &ctx) != NFN_OK) return 1;
  nfn::GPTConfig c;
  c.max_seq_len = 32, c.vocab_size = 60, c.padded_vocab_size = 64, c.num_layers = 2, c.num_heads = 2, c.channels = 32;
  const std::vector<float> params = nfn::GPT::random_parameters(c, 5);
  const Batch small = batch(1, 8, c.vocab_size, 1), big = batch(4, 16, c.vocab_size, 2);
  // Bytes of the model's state, and of each shape's own activation block.
  const size_t S = nfn::GPT::memory_bytes(c, NFN_F32, 0, 0);
  const size_t A_small = nfn::GPT::memory_bytes(c, NFN_F32, small.B, small.T) - S;
  const size_t A_big = nfn::GPT::memory_bytes(c, NFN_F32, big.B, big.T) - S;
  const std::string refused = "allocating the activations of micro-batch 4 x 16 (";
  std::string error;

  float want_small = NAN, want_big = NAN;
  {  // the expected losses: a model that is never short of memory
    nfn::GPT ref;
    EXPECT(ref.init(&ops, ctx, c, NFN_F32, &error) && ref.set_parameters(params, &error), "%s", error.c_str());
    want_small = loss_of(ref, small, &error);
    want_big = loss_of(ref, big, &error);
    EXPECT(std::isfinite(want_small) && std::isfinite(want_big), "reference losses: %s", error.c_str());
  }
  EXPECT(live == 0, "the reference freed everything: %zu bytes live", live);

  {  // The shape init reserved, then one that does not fit beside it: refused, and the model
     // is exactly as it was: the same blocks, the same activations (no new version), its loss.
    nfn::GPT m;
    budget = S + A_small + A_big - 1;
    EXPECT(m.init(&ops, ctx, c, NFN_F32, &error, small.B, small.T) && m.set_parameters(params, &error), "%s",
           error.c_str());
    EXPECT(loss_of(m, small, &error) == want_small, "reserved shape: %s", error.c_str());
    const uint64_t version = m.activations_version();
    const size_t held = live;
    error.clear();
    EXPECT(std::isnan(loss_of(m, big, &error)), "the larger shape is refused");
    EXPECT(contains(error, refused) && contains(error, " GiB): alloc: "),
           "one line naming the shape: %s", error.c_str());
    EXPECT(live == held && m.activations_version() == version, "as it was: %zu of %zu bytes, version %llu of %llu",
           live, held, static_cast<unsigned long long>(m.activations_version()),
           static_cast<unsigned long long>(version));
    error.clear();
    const float again = loss_of(m, small, &error);
    EXPECT(again == want_small, "the reserved shape runs on: %g, want %g (%s)", again, want_small, error.c_str());
  }
  EXPECT(live == 0, "freed: %zu bytes live", live);

  {  // A shape in a block of its own; a larger one fits only in its place: had there.
    nfn::GPT m;
    budget = S + A_small + A_big - 1;
    EXPECT(m.init(&ops, ctx, c, NFN_F32, &error) && m.set_parameters(params, &error), "%s", error.c_str());
    EXPECT(loss_of(m, small, &error) == want_small, "own block: %s", error.c_str());
    const float got = loss_of(m, big, &error);
    EXPECT(got == want_big, "the larger shape in the smaller's place: %g, want %g (%s)", got, want_big, error.c_str());
    EXPECT(live == S + A_big, "its block alone: %zu bytes, want %zu", live, S + A_big);
    EXPECT(loss_of(m, small, &error) == want_small, "back to the smaller: %s", error.c_str());
  }
  EXPECT(live == 0, "freed: %zu bytes live", live);

  {  // A shape in a block of its own; a larger one fits nowhere: refused, the smaller shape's
     // block given up for the try, so no activations and no tokens; the next upload of the
     // smaller shape allocates them again, and where even that is refused it says so.
    nfn::GPT m;
    budget = S + A_small;
    EXPECT(m.init(&ops, ctx, c, NFN_F32, &error) && m.set_parameters(params, &error), "%s", error.c_str());
    EXPECT(loss_of(m, small, &error) == want_small, "own block: %s", error.c_str());
    const uint64_t version = m.activations_version();
    error.clear();
    EXPECT(std::isnan(loss_of(m, big, &error)) && contains(error, refused), "refused: %s", error.c_str());
    EXPECT(live == S && m.activations_version() != version, "the state alone: %zu bytes, want %zu", live, S);
    error.clear();
    EXPECT(!m.step_forward_backward(false, 0.f, &error) && error == "forward: no tokens with targets uploaded",
           "no forward over tokens that are gone: %s", error.c_str());
    std::vector<float> logits;
    EXPECT(!m.logits_for_row(0, &logits, &error) && error == "logits: no tokens uploaded", "logits: %s",
           error.c_str());
    allowed = 0;
    error.clear();
    EXPECT(std::isnan(loss_of(m, small, &error)) && contains(error, "allocating the activations of micro-batch 1 x 8"),
           "refused while nothing is granted: %s", error.c_str());
    allowed = -1;
    error.clear();
    const float again = loss_of(m, small, &error);
    EXPECT(again == want_small, "the smaller shape runs again: %g, want %g (%s)", again, want_small, error.c_str());
    EXPECT(live == S + A_small, "its block again: %zu bytes", live);
  }
  EXPECT(live == 0 && blocks.empty(), "freed: %zu bytes live", live);
  real.ctx_destroy(ctx);
  return nfn_test::finish("gpt_reshape_test");
}

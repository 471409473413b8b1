// nfn_nanochat_native_train: nanochat's model (cc/model/decoder.h) with Muon.
#include "cc/bin/trainer_main.h"

int main(int argc, char** argv) {
  return nfn::trainer_main("nfn_nanochat_native_train",
                           "Train nanochat's model (rotary, QK-norm, ReLU^2, value embeddings, sliding windows,\n"
                           "a soft-capped head) with Muon and AdamW on token shards with a native op library,\n"
                           "writing safetensors checkpoints, a manifest and a JSON report. --depth N sizes it as\n"
                           "nanochat's base_train does; with no size it trains the small CPU demo model.",
                           {"nanochat"}, argc, argv);
}

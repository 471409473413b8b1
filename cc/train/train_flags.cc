#include "cc/train/train_flags.h"

namespace nfn {

namespace {

FlagSpec text(const char* name, const char* group, const char* help, const char* def = "", const char* aliases = "") {
  FlagSpec s{name, group, FlagType::kText, help, def};
  s.aliases = aliases;
  return s;
}

FlagSpec integer(const char* name, const char* group, const char* help, double min, const char* def = "") {
  FlagSpec s{name, group, FlagType::kInt, help, def};
  s.min = min;
  s.max = kIntFlagMax;
  return s;
}

FlagSpec number(const char* name, const char* group, const char* help, double max = 1e300, const char* def = "") {
  FlagSpec s{name, group, FlagType::kFloat, help, def};
  s.min = 0;
  s.max = max;
  return s;
}

FlagSpec choice(const char* name, const char* group, const char* help, const char* choices, const char* def = "") {
  FlagSpec s{name, group, FlagType::kChoice, help, def};
  s.choices = choices;
  return s;
}

FlagSpec toggle(const char* name, const char* group, const char* help, const char* aliases = "") {
  FlagSpec s{name, group, FlagType::kToggle, help};
  s.aliases = aliases;
  return s;
}

std::vector<FlagSpec> model_flags() {
  return {
      text("model-family", "model",
           "model family: gpt, gpt2 or gpt3 (the dense GPT trainer), nanochat or llama (the modern decoder; "
           "nfn_native_train lists the families); with --graph-file, its manifest's, which another value "
           "contradicts",
           "gpt", "base-model"),
      text("template-name", "model",
           "named geometry and its recipe: gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, gpt3-125m, gpt3-350m, "
           "gpt3-760m, gpt3-1.3b, gpt3-2.7b (docs/training.md), tiny",
           "", "template preset"),
      text("graph-file", "model", "model manifest JSON whose geometry is the architecture's source of truth", "",
           "graph"),
      text("weights", "model", "model_%08d.bin to start from (its geometry must match)"),
      text("init-from", "model",
           "a checkpoint to start from (a warm start, as fine-tuning begins): a trainer's output directory (the "
           "checkpoint --resume auto takes there) or a model_%08d.bin; the model's family and geometry are the "
           "checkpoint's (a geometry flag given must agree), its weights the start; the step, schedule and data "
           "start anew (a run resumed from its own checkpoint takes that one's weights)"),
      toggle("init-optimizer", "model",
             "with --init-from: the optimizer's moments from the checkpoint's state file too, AdamW's bias "
             "correction counting its steps (as a restored PyTorch optimizer's); the learning rates stay this run's"),
      integer("num-layers", "model", "transformer blocks", 1),
      integer("num-heads", "model", "attention heads", 1),
      integer("model-dim", "model", "channels", 1),
      integer("num-kv-heads", "model",
              "key/value heads of grouped-query attention, dividing --num-heads (nanochat, llama; default: "
              "--num-heads)",
              1),
      integer("depth", "model",
              "nanochat's one size knob: 64 x depth channels rounded up to heads of 128, 4x MLP, 2048 context, "
              "and a recipe scaled to it (tokens 20x the parameters, 524,288 a step, batch 32)",
              1),
      integer("mlp-hidden", "model", "the MLP's width (nanochat: 4 x --model-dim; llama: 8/3 of it, to 64)", 1),
      text("window-pattern", "model",
           "sliding-window attention per layer, tiled: S short (a quarter of the context), L long; the last "
           "layer is always long (nanochat: SSSL; llama: L)"),
      number("rope-theta", "model", "rotary base (nanochat: 100000; llama: 10000)"),
      toggle("tie-embeddings", "model", "llama: the LM head is the token embedding"),
      integer("lora-rank", "model",
              "train rank-R LoRA adapters on each layer's qkv, output, up and down matrices over the frozen "
              "--init-from model (nanochat, llama): the checkpoints hold the adapters alone (without it the "
              "whole model trains)",
              1),
      number("lora-alpha", "model", "the adapters' update is scaled by alpha / rank (default: the rank, a scale of 1)"),
      choice("lora-targets", "model", "which matrices get adapters: all, attn (qkv and output) or mlp (up and down)",
             "all attn mlp"),
      choice("quantize-base", "model",
             "QLoRA: keep the frozen base's block matrices quantized (dequantized for each GEMM)", "q8_0 q4_1 nf4"),
  };
}

std::vector<FlagSpec> schedule_flags() {
  return {
      integer("train-seq-len", "schedule", "tokens per row, T", 1),
      integer("batch-size", "schedule",
              "micro-batch rows, B (GPT-2/3 templates: 64, halved until the model and every activation fit 64 GiB "
              "in bf16; the demo: 16, or 8 with a vocabulary over 8192)",
              1),
      integer("train-batch-tokens", "schedule",
              "tokens per optimizer step (a multiple of B*T; the rest is gradient accumulation)", 1),
      integer("max-steps", "schedule", "optimizer steps", 1),
      number("learning-rate", "schedule", "peak learning rate (nanochat: Muon's, of the block matrices; 0.02)"),
      number("weight-decay", "schedule", "AdamW weight decay of matrices and embeddings"),
      integer("warmup-steps", "schedule", "linear warmup steps before the cosine decay", 0),
      number("final-lr-fraction", "schedule",
             "where the cosine decay ends at --max-steps, a fraction of the peak learning rate (GPT-3 templates "
             "and gpt2-1558m: 0.1; else 0)",
             1),
      number("warmdown-ratio", "schedule",
             "the last fraction of the steps the learning rate falls linearly to --final-lr-fraction, constant "
             "before it (nanochat's schedule; its default 0.4); 0: the cosine decay",
             1),
      number("embedding-lr", "schedule", "nanochat: AdamW's of the token and value embeddings (0.3, by sqrt(768/C))"),
      number("unembedding-lr", "schedule", "nanochat: AdamW's of the LM head (0.004, by sqrt(768/C))"),
      number("scalar-lr", "schedule", "nanochat: AdamW's of the per-layer lambdas (0.5)"),
      integer("eval-every-steps", "schedule", "validate every N steps (and at the end)", 0),
      integer("eval-batches", "schedule", "validation micro-batches per validation", 0),
      integer("eval-batch-size", "schedule", "rows of each validation micro-batch (default: --batch-size)", 1),
      integer("checkpoint-every", "schedule", "also write a checkpoint every N steps (0: only at the end)", 0, "0"),
      toggle("no-checkpoint", "schedule",
             "write no checkpoint at all (benchmarks; the report and the sample come from the weights in memory)"),
      choice("checkpoint-dtype", "schedule", "model file precision: f32 (llm.c version 3) or bf16 (version 5)",
             "f32 bf16", "f32"),
      number("max-grad-norm", "schedule", "clip the global gradient norm to this (0: no clipping; default 1, nanochat 0)"),
      FlagSpec{"seed", "schedule", FlagType::kInt, "seed of the initialisation, data order and samples", "1337"},
      choice("packing", "schedule",
             "how rows are cut from the token stream, in training and validation: contiguous (llm.c's B*T+1 "
             "consecutive tokens, rows run across documents; the default) or bestfit (nanochat's BOS-aligned best "
             "fit: each row starts at a document's BOS and holds whole documents, the last one cropped to fill it; "
             "the BOS id is --eot-token). A resumed run keeps its checkpoint's unless this names another",
             "contiguous bestfit", "contiguous"),
      integer("packing-buffer", "schedule",
              "documents --packing bestfit chooses each row's documents from (nanochat's 1000; a resumed run keeps "
              "its checkpoint's unless this names another)",
              1, "1000"),
      integer("sample-tokens", "schedule",
              "tokens to sample after training, at most the context less one (the report holds their ids; nfn "
              "train decodes them into sample.txt)",
              0, "128"),
  };
}

std::vector<FlagSpec> run_flags() {
  FlagSpec backend = choice("backend", "run", "op library: cpu, cuda or auto (CUDA where it loads, else CPU)",
                            "cpu cuda auto", "auto");
  backend.aliases = "kernel-backend";
  backend.value_aliases = "tile-cuda=cuda";
  return {
      backend,
      text("tile-ops-lib", "run", "path of the op library to load (overrides --backend)"),
      choice("dtype", "run", "storage of parameters and activations (default: f32 on the CPU, bf16 on CUDA)",
             "f32 bf16"),
      choice("matmul", "run",
             "CPU GEMM compute, bf16 with f32 accumulation (default: bf16 where the CPU has bf16 units, "
             "AVX512-BF16 or AMX, else f32)",
             "f32 bf16"),
      text("threads", "run", "CPU threads (default: all cores; the op library says what it takes)"),
      choice("attention", "run",
             "CUDA attention kernels: cudnn (cuDNN SDPA; the default where cuDNN loads; bf16, head size in 8s up "
             "to 128), flash_mma (tensor cores; the default otherwise; bf16, head size in 16s up to 128), flash "
             "(CUDA cores, any head size up to 128) or thunderkittens (H100/H200 where built with ThunderKittens; "
             "bf16, head size 64 or 128, T a multiple of 64); every other call runs flash",
             "cudnn flash_mma flash thunderkittens"),
      text("lm-head-row-chunk-size", "run",
           "rows of logits the LM head makes at a time (CUDA: a multiple of 8; default: the op library's, "
           "about 2M logits on the CPU, by vocabulary size on CUDA)"),
      choice("gemm-tune", "run",
             "CUDA: on times cuBLASLt's first 8 kernels for each GEMM shape on its first call and keeps the "
             "fastest, in ~/.cache/nfn/gemm_tune/ (or $NFN_GEMM_TUNE_CACHE) for later runs on the same GPU; off: "
             "cuBLASLt's first pick (default)",
             "on off"),
      choice("deterministic", "run",
             "on: every kernel repeats bit for bit (default); off: CUDA's cuDNN attention backward may add dQ "
             "with atomics, its faster form",
             "on off"),
      choice("overlap", "run",
             "CUDA: on runs each linear backward's weight and bias gradients on a second stream beside its input "
             "gradient (the same results); off: one stream (default)",
             "on off"),
      choice("pdl", "run",
             "CUDA: on launches each kernel as a programmatic dependent launch, so its blocks may start while the "
             "kernel before it finishes (the same results); off (default): each starts after",
             "on off"),
      choice("recompute", "run",
             "activations the backward recomputes instead of keeping a copy for every layer, for less memory and "
             "more compute: attention (ln1, qkv, the attention's output, residual2), mlp (ln2, fc's output before "
             "and after GELU), all (both: a layer keeps only its output) or none (default); each reruns about a "
             "third of the forward's work, and the gradients are the same",
             "none attention mlp all", "none"),
      choice("graphs", "run",
             "on: record the forward/backward micro-step once as a CUDA graph and replay it (after one step run op "
             "by op); off: launch every op; auto: on where the op library records graphs (CUDA), op by op if the "
             "first recording fails",
             "on off auto", "auto"),
      toggle("stage-timing", "run",
             "time each stage of a step (data, embedding, each block's attention and MLP forward and backward, "
             "LM head, optimizer) with the op library's events: CUDA's clock, or the host's on the CPU; the "
             "report's stage_timing and a table at the end give the median over the steps (the first left "
             "out); the step runs op by op (graphs off)"),
      text("output-dir", "run",
           "where checkpoints, the manifest and the report go (default: $NFN_ARTIFACTS_DIR/FAMILY, else "
           "~/NeuralFn/artifacts/FAMILY)"),
      text("resume", "run",
           "auto (the last checkpoint written in --output-dir, the one its manifest.json names; none: start "
           "fresh), a checkpoint directory (the same there) or a model_%08d.bin file"),
      toggle("dry-run", "run",
             "print the plan as JSON and exit without reading data (the op library is not opened: a GPU run's "
             "plan can be made anywhere)",
             "print-plan"),
      toggle("json", "run", "print the final report as JSON on stdout"),
  };
}

// What nfn train fills in from the dataset it prepared; a user running the trainer directly
// names them.
std::vector<FlagSpec> data_flags() {
  const char* g = kInternalGroup;
  return {
      text("train-data", g, "training shards: a directory or a *_train_*.bin file"),
      text("val-data", g, "validation shards (default: the train shards' *_val_* siblings)"),
      text("dataset-name", g, "dataset name recorded in the manifest"),
      text("tokenizer", g, "tokenizer name recorded in the manifest", "gpt2"),
      integer("vocab-size", g, "vocabulary size of the tokenizer", 2, "50257"),
      integer("eot-token", g,
              "document separator id, the start token of samples (default: 50256 for GPT-2's vocabulary, else 0)", 0),
      toggle("check", g,
             "check the flags against what a run needs before it reads data (the op library and the options given "
             "to it, attention at the model's geometry, the checkpoint to resume, the output directory), print "
             "nothing and exit"),
      toggle("describe-flags", g, "print this table of flags as JSON and exit"),
      toggle("help", g, "show this help"),
  };
}

}  // namespace

std::vector<FlagSpec> train_flag_specs() {
  std::vector<FlagSpec> all;
  for (auto part : {model_flags(), schedule_flags(), run_flags(), data_flags()})
    all.insert(all.end(), part.begin(), part.end());
  return all;
}

Flags train_flags(const std::string& program, const std::string& summary) {
  return Flags(program, summary, train_flag_specs());
}

}  // namespace nfn

"""Train a model with the compiled native trainer (no Python in the training process).

Prepares the dataset when it is not cached, then runs nfn_<family>_native_train. With no
arguments it trains a small GPT on the default corpus (Shakespeare, fetched once, with the sp1024
tokenizer) in about three minutes on the CPU.
"""
from nfn.cli.common import add_command


def run(args):
    from nfn.train import launch

    return launch.run(args)


def register(sub):
    p = add_command(sub, "train", __doc__)
    model = p.add_argument_group("model")
    model.add_argument("--base-model",
                       help="model family to train: gpt, gpt2 or gpt3 (default: --model-family's, else the "
                            "--graph-file manifest's, else gpt)")
    model.add_argument("--model-family", choices=["gpt", "gpt2", "gpt3"],
                       help="dense GPT family; gpt, gpt2 and gpt3 share one trainer")
    model.add_argument("--template-name", "--preset", dest="template_name",
                       help="named geometry and its recipe: gpt2-124m, gpt2-350m, gpt2-774m, gpt2-1558m, "
                            "gpt3-125m, gpt3-350m, gpt3-760m, gpt3-1.3b, gpt3-2.7b (docs/training.md), tiny")
    model.add_argument("--graph-file", help="model manifest JSON: the architecture source of truth")
    model.add_argument("--weights", help="model_%%08d.bin to start from (its geometry must match)")
    model.add_argument("--num-layers", type=int, help="transformer blocks")
    model.add_argument("--num-heads", type=int, help="attention heads")
    model.add_argument("--model-dim", type=int, help="channels")
    data = p.add_argument_group("data")
    source = data.add_mutually_exclusive_group()
    source.add_argument("--dataset", help="dataset alias or shard directory (default: shakespeare)")
    source.add_argument("--pretraining-file", help="UTF-8 text file or directory of .txt files")
    source.add_argument("--tinystories", action="store_true", help="the TinyStories dataset")
    data.add_argument("--tokenizer", help="gpt2, sp1024..sp8192 or a trained name (default: the resumed "
                                           "run's, else gpt2; sp1024 for the demo, when no dataset, template "
                                           "or graph file is named)")
    sched = p.add_argument_group("schedule")
    sched.add_argument("--train-seq-len", type=int, help="tokens per row")
    sched.add_argument("--batch-size", type=int,
                       help="micro-batch rows (GPT-2/3 templates: 64, halved until the model and "
                            "activations fit 64 GiB in bf16; the demo: 16, or 8 with a vocabulary over 8192)")
    sched.add_argument("--train-batch-tokens", type=int, help="tokens per optimizer step")
    sched.add_argument("--max-steps", type=int, help="optimizer steps")
    sched.add_argument("--learning-rate", type=float, help="peak learning rate")
    sched.add_argument("--weight-decay", type=float, help="AdamW weight decay")
    sched.add_argument("--warmup-steps", type=int, help="linear warmup steps before cosine decay")
    sched.add_argument("--final-lr-fraction", type=float,
                       help="where the cosine decay ends, a fraction of the peak learning rate (GPT-3 "
                            "templates and gpt2-1558m: 0.1; else 0)")
    sched.add_argument("--eval-every-steps", type=int, help="validate every N steps")
    sched.add_argument("--eval-batches", type=int, help="validation micro-batches")
    sched.add_argument("--seed", type=int, help="random seed")
    sched.add_argument("--checkpoint-every", type=int, help="also checkpoint every N steps")
    sched.add_argument("--checkpoint-dtype", choices=["f32", "bf16"],
                       help="model file precision: f32 (llm.c version 3) or bf16 (version 5) (default: f32)")
    sched.add_argument("--max-grad-norm", type=float,
                       help="clip the global gradient norm to this (0: no clipping; default: 1.0)")
    sched.add_argument("--sample-tokens", type=int, default=128,
                       help="tokens to sample after training (at most the context less one), saved as "
                            "sample.txt (default: 128)")
    opts = p.add_argument_group("run")
    opts.add_argument("--backend", choices=["cpu", "cuda", "auto"], default="auto",
                     help="op library to load (default: auto)")
    opts.add_argument("--tile-ops-lib", help="path to an op library .so (overrides --backend)")
    opts.add_argument("--dtype", choices=["f32", "bf16"],
                     help="parameter and activation storage (default: f32 on CPU, bf16 on CUDA)")
    opts.add_argument("--threads", type=int, help="CPU threads (default: all cores)")
    opts.add_argument("--matmul", choices=["f32", "bf16"],
                     help="CPU GEMM compute (bf16: f32 accumulation; the default where the CPU has "
                          "bf16 units, AVX512-BF16 or AMX, else f32)")
    opts.add_argument("--attention", choices=["flash", "flash_mma", "cudnn", "thunderkittens"],
                     help="CUDA attention kernels: cudnn (cuDNN SDPA; the default where cuDNN "
                          "loads; bf16 with a head size in 8s up to 128), flash_mma (nfn's "
                          "tensor-core kernel; the default otherwise), flash (CUDA cores, any head "
                          "size up to 128) or thunderkittens (wgmma kernels on ThunderKittens, "
                          "H100/H200, where the library was built with a ThunderKittens tree; T a "
                          "multiple of 64); flash_mma takes bf16 with a head size in 16s up to 128, "
                          "thunderkittens bf16 with head size 64 or 128; every other call runs flash")
    opts.add_argument("--gemm-tune", choices=["on", "off"],
                     help="CUDA: time cuBLASLt's first 8 kernels for each GEMM shape on its first "
                          "call and keep the fastest, in ~/.cache/nfn/gemm_tune/ (or "
                          "$NFN_GEMM_TUNE_CACHE), where later runs on the same GPU take them from "
                          "(default: off, cuBLASLt's first pick)")
    opts.add_argument("--deterministic", choices=["on", "off"],
                     help="on: every kernel repeats bit for bit (default); off: CUDA's cuDNN "
                          "attention backward may add dQ with atomics, its faster form")
    opts.add_argument("--overlap", choices=["on", "off"],
                     help="CUDA: run each linear backward's weight and bias gradients on a second "
                          "stream beside its input gradient (the same results; default: off)")
    opts.add_argument("--pdl", choices=["on", "off"],
                     help="CUDA: launch each of the op library's kernels as a programmatic "
                          "dependent launch, so its blocks may start while the kernel before it "
                          "finishes (the same results; default: off)")
    opts.add_argument("--graphs", choices=["on", "off", "auto"],
                     help="CUDA: record the forward/backward micro-step once as a CUDA graph and "
                          "replay it after the first step (default: auto, on where the op library "
                          "records graphs, CUDA's; op by op if the first recording fails)")
    opts.add_argument("--output-dir", help="checkpoint directory (default: under the artifacts dir)")
    opts.add_argument("--resume", help="auto, or a checkpoint path")
    opts.add_argument("--dry-run", action="store_true", help="print the plan JSON without training")
    opts.add_argument("--print-plan", action="store_true", help="same as --dry-run")
    opts.add_argument("--print-command", action="store_true",
                     help="print the trainer argv and exit without starting it")
    opts.add_argument("--json", action="store_true", help="print the final report JSON on stdout")
    p.set_defaults(run=run)

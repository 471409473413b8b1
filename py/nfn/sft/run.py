"""`nfn sft`: render the mixture into masked-row shards (cached), then run the family's native
trainer on them, warm-started from the checkpoint --init-from names.

The trainer decides the run as for `nfn train`: its flags pass on as given. nfn sft adds the
data, the checkpoint's tokenizer, and chat_sft.py's schedule where a flag leaves it open: no
warmup, constant then linear to 0 over the last half of the steps (--warmdown-ratio 0.5), no
weight decay, each learning rate 0.8 of the trainer's default for the family (nanochat's
init_lr_frac), and --max-steps one pass over the training rows.
"""
import json
import math
import subprocess
import sys

from nfn import cuda_runtime
from nfn.errors import UserError
from nfn.native_bin import trainer_binary
from nfn.train import flags

PACKING_BUFFER = 100  # conversations best fit chooses from (nanochat's SFT loader)
VAL_FRACTION = 0.05
LR_FRACTION = 0.8     # nanochat chat_sft.py's init_lr_frac
# chat_sft.py's schedule shape, for every family.
SCHEDULE = {"warmup_steps": 0, "warmdown_ratio": 0.5, "final_lr_fraction": 0.0, "weight_decay": 0.0}
# The learning rates (the plan's keys) scaled by LR_FRACTION, by flag.
LEARNING_RATES = {"learning_rate": "matrix_muon", "embedding_lr": "embedding", "unembedding_lr": "unembedding",
                  "scalar_lr": "scalar"}


def resolve_init(args):
    """The checkpoint --init-from names (nfn.infer.checkpoint.Checkpoint) and its manifest."""
    from nfn import fileio
    from nfn.infer import checkpoint
    if not args.init_from:
        raise UserError("--init-from is required: the checkpoint to fine-tune (a trainer's output directory or "
                        "its model_%08d.bin)")
    ckpt = checkpoint.resolve(args.init_from, for_resume=args.init_optimizer)
    if ckpt.kind == "hf":
        raise UserError(f"--init-from {args.init_from}: a Hugging Face directory; nfn sft starts from the checkpoints "
                        "of nfn's trainers")
    manifest = fileio.read_json(ckpt.manifest) if ckpt.manifest else {}
    return ckpt, manifest if isinstance(manifest, dict) else {}


def base_argv(args, ckpt, family, tokenizer_name, vocab_size):
    """The trainer's argv without the data: the flags given, the checkpoint and its family."""
    args.init_from = ckpt.path
    args.model_family = args.model_family or family
    return [trainer_binary()] + flags.trainer_argv(args, args.trainer_flags) + [
        "--tokenizer", tokenizer_name, "--vocab-size", str(vocab_size)]


def trainer_plan(argv):
    proc = subprocess.run(argv + ["--dry-run"], stdout=subprocess.PIPE, env=cuda_runtime.child_env())
    if proc.returncode != 0:
        raise SystemExit(proc.returncode)  # the trainer said why on stderr
    return json.loads(proc.stdout)


def apply_defaults(args, plan):
    """chat_sft.py's schedule where the flags leave it to the trainer's defaults."""
    for name, value in SCHEDULE.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    schedule = plan["schedule"]
    rates = schedule.get("learning_rates") or {"matrix_muon": schedule["learning_rate"]}
    for name, key in LEARNING_RATES.items():
        if getattr(args, name) is None and key in rates:
            setattr(args, name, rates[key] * LR_FRACTION)


def data_argv(entry, bos):
    argv = ["--train-data", entry["train_file"], "--dataset-name", entry["dir"], "--eot-token", str(bos)]
    if entry["val_file"]:
        argv += ["--val-data", entry["val_file"]]
    return argv


def one_pass_steps(plan, train_rows):
    """Steps for one pass over the training rows (chat_sft.py's default: one epoch)."""
    batch = plan["batch"]
    rows_a_step = batch["train_batch_tokens"] // batch["seq_len"]
    return max(1, math.ceil(train_rows / rows_a_step))


def print_summary(report, entry):
    splits = entry["meta"]["splits"]
    train, val = splits["train"], splits["val"]
    print(f"masked loss: train {report['final_train_loss']}   validation {report['final_validation_loss']}")
    print(f"trained targets: {report['train_targets']:,} (of {report['train_tokens']:,} row tokens)   "
          f"train tokens/s: {report['train_tokens_per_second']:.0f}")
    print(f"rows: {train['rows']:,} train ({train['conversations']:,} conversations, {train['targets']:,} targets), "
          f"{val['rows']:,} validation ({val['conversations']:,} conversations)   data: {entry['dir']}")
    print(f"checkpoint: {report['model_file'] or 'none (--no-checkpoint)'}\nreport: {report['report_file']}\n"
          f"log: {report['log_file']}")


def run(args):
    if isinstance(args.trainer_flags, UserError):
        raise args.trainer_flags
    flags.resolve_aliases(args, args.trainer_flags)
    if "" in (args.init_from, args.output_dir, args.resume, args.mixture, args.tokenizer):
        raise UserError("an empty path or name was given (--init-from, --mixture, --output-dir, --resume or "
                        "--tokenizer ''); an unset shell variable?")
    if args.sft_packing_buffer < 1:
        raise UserError(f"--packing-buffer {args.sft_packing_buffer}: at least 1 conversation")
    from nfn import tokenizers
    from nfn.sft import mixture as mixtures, rows

    entries = mixtures.ordered(mixtures.parse(args.mixture))  # a bad spec fails before anything is read
    ckpt, manifest = resolve_init(args)
    family = ckpt.family or manifest.get("model_family") or "gpt"
    name = args.tokenizer or manifest.get("tokenizer")
    if not isinstance(name, str) or not name:
        raise UserError(f"{ckpt.path}: no manifest names its tokenizer; give --tokenizer")
    tok = tokenizers.load(name, quiet=args.json)
    fmt = rows.chat_format(tok, name)
    argv = base_argv(args, ckpt, family, name, tok.vocab_size)
    plan = trainer_plan(argv)
    apply_defaults(args, plan)
    row_tokens = plan["batch"]["seq_len"] + 1
    key, doc = rows.key_of(entries, tok.identity(), row_tokens, args.val_fraction, args.sft_packing_buffer, fmt.name)
    entry = rows.find_cached(key, doc)
    planning = args.print_command or args.dry_run
    bos = fmt.bos
    if entry is None and planning:
        entry = rows.planned(key)
    elif entry is None:
        entry = rows.build(key, doc, mixtures.Mixture(args.mixture, args.val_fraction), tok, fmt, row_tokens,
                           args.sft_packing_buffer, quiet=args.json)
    if args.max_steps is None and entry["meta"] is not None:
        args.max_steps = one_pass_steps(plan, entry["meta"]["splits"]["train"]["rows"])
    argv = base_argv(args, ckpt, family, name, tok.vocab_size) + data_argv(entry, bos)
    if args.print_command:
        import shlex
        note = "" if entry["meta"] else "  # rows not built yet: `nfn sft` builds them first"
        print(shlex.join(argv) + note)
        return 0
    if args.dry_run:
        return subprocess.run(argv + ["--dry-run"], env=cuda_runtime.child_env()).returncode
    proc = subprocess.run(argv + ["--json"], stdout=subprocess.PIPE, env=cuda_runtime.child_env())
    if proc.returncode != 0:
        return proc.returncode
    report = json.loads(proc.stdout)
    from nfn.train.launch import write_sample
    write_sample(report, name, quiet=args.json)
    report["sft"] = {"mixture": args.mixture, "data_dir": entry["dir"], "tasks": entry["meta"]["tasks"],
                     "splits": entry["meta"]["splits"], "init_from": ckpt.path}
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print_summary(report, entry)
    return 0

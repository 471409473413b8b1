"""`nfn train`: resolve the dataset (preparing it only when it is not cached, after the trainer
has checked its flags with --check), build the native trainer's argv, run it, then decode its
sample with the dataset's tokenizer.

Standard library only until a dataset must be prepared or a sample decoded, so the dispatch
path for a cached dataset never imports numpy or the native module.
"""
import contextlib
import json
import os
import shlex
import subprocess
import sys

from nfn import cuda_runtime, fileio, paths
from nfn.errors import UserError

BINARY_ENV = "NFN_NATIVE_BIN_DIR"
DISPATCHER = "nfn_native_train"

# nfn train flag -> trainer flag, passed through when given.
PASSTHROUGH = [
    ("model_family", "--model-family"), ("template_name", "--template-name"),
    ("graph_file", "--graph-file"), ("weights", "--weights"),
    ("num_layers", "--num-layers"), ("num_heads", "--num-heads"), ("model_dim", "--model-dim"),
    ("train_seq_len", "--train-seq-len"), ("batch_size", "--batch-size"),
    ("train_batch_tokens", "--train-batch-tokens"), ("max_steps", "--max-steps"),
    ("learning_rate", "--learning-rate"), ("weight_decay", "--weight-decay"),
    ("warmup_steps", "--warmup-steps"), ("final_lr_fraction", "--final-lr-fraction"),
    ("eval_every_steps", "--eval-every-steps"),
    ("eval_batches", "--eval-batches"), ("seed", "--seed"), ("backend", "--backend"),
    ("tile_ops_lib", "--tile-ops-lib"), ("resume", "--resume"), ("sample_tokens", "--sample-tokens"),
    ("checkpoint_every", "--checkpoint-every"), ("checkpoint_dtype", "--checkpoint-dtype"),
    ("max_grad_norm", "--max-grad-norm"), ("dtype", "--dtype"), ("threads", "--threads"),
    ("matmul", "--matmul"), ("attention", "--attention"), ("graphs", "--graphs"),
    ("gemm_tune", "--gemm-tune"), ("deterministic", "--deterministic"), ("overlap", "--overlap"),
    ("pdl", "--pdl"),
]


def trainer_binary():
    """The dispatcher binary: $NFN_NATIVE_BIN_DIR, else Bazel's runfiles beside this package."""
    candidates = []
    if os.environ.get(BINARY_ENV):
        candidates.append(os.path.join(os.environ[BINARY_ENV], DISPATCHER))
    # <runfiles>/nfn/py/nfn/train/launch.py -> <runfiles>/nfn/cc/bin/
    workspace = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    candidates.append(os.path.join(workspace, "cc", "bin", DISPATCHER))
    for path in candidates:
        if os.access(path, os.X_OK):
            return path
    raise UserError(f"the native trainer {DISPATCHER} is not built; run through `bazel run //py:nfn` "
                    f"or point ${BINARY_ENV} at a directory holding it")


# The demo's tokenizer: with a 50,257-piece vocabulary the 128-channel demo model would be
# 6.4M parameters of embedding around 0.8M of blocks, and ten times slower a token.
DEMO_TOKENIZER = "sp1024"


def resumed_manifest(args):
    """The manifest of the checkpoint that --resume continues, when it has one (else None):
    the one its DONE marker holds, or the directory's manifest.json for older checkpoints."""
    if not args.resume:
        return None
    from nfn.infer import checkpoint  # standard library only
    where = output_dir(args) if args.resume == "auto" else os.path.abspath(args.resume)
    try:
        path = checkpoint.resolve(where, for_resume=True).manifest
    except UserError:  # no checkpoint there (the trainer says so): the manifest of that directory
        if os.path.isdir(where):
            path = os.path.join(where, checkpoint.MANIFEST)
        elif checkpoint.MODEL_FILE.match(os.path.basename(where)):
            path = os.path.join(os.path.dirname(where), checkpoint.MANIFEST)
        else:  # a directory not made yet (a fresh --resume auto) is no other directory's run
            return None
    try:
        manifest = fileio.read_json(path) if path else None
    except UserError:
        return None  # the trainer reports a missing or bad checkpoint itself
    return manifest if isinstance(manifest, dict) else None


def resume_data(args, manifest):
    """With --resume and no data named, the resumed run's own data (from its manifest), so a
    resumed run never drifts onto the demo corpus. Its name is a dataset alias, a shards
    path, or the path of pretraining text. True when it named the data."""
    if not manifest or args.dataset or args.pretraining_file or args.tinystories:
        return False
    from nfn.infer.checkpoint import recorded_data  # standard library only
    data = recorded_data(manifest)
    if data is None:
        return False  # a run the trainer made directly: nothing recorded to follow
    kind, name = data
    setattr(args, kind, name)
    return True


def tokenizer_of(args, manifest, graph):
    """--tokenizer, else the resumed run's, else the --graph-file manifest's, else gpt2, except
    for the demo: no dataset, template or graph file named, so the embedded corpus with sp1024
    (trained on it once, in seconds)."""
    if args.tokenizer:
        return args.tokenizer
    resumed = (manifest or {}).get("tokenizer")  # the resumed run's
    if isinstance(resumed, str) and resumed:
        return resumed
    named = graph.get("tokenizer")  # the --graph-file model's: its vocabulary's tokenizer
    if isinstance(named, str) and named:
        return named
    named = (args.dataset, args.pretraining_file, args.tinystories, args.template_name, args.graph_file)
    return "gpt2" if any(named) else DEMO_TOKENIZER


def resolve_dataset(args, prepare):
    """The dataset summary (prepared when needed and `prepare`), and whether it exists yet."""
    from nfn.data import cache
    dataset = "tinystories" if args.tinystories else args.dataset
    if not dataset and not args.pretraining_file:
        from nfn.data import DEFAULT_DATASET
        dataset = DEFAULT_DATASET
    info = cache.find_cached(dataset=dataset, pretraining_file=args.pretraining_file, tokenizer=args.tokenizer)
    if info is not None:
        return info, True
    if not prepare:
        from nfn import tokenizers
        from nfn.data.resolve import resolve
        src = resolve(dataset, args.pretraining_file, args.tokenizer)
        return {"dataset": src.dataset, "tokenizer": args.tokenizer, "dir": cache.entry_dir(src.key),
                "train_shards": [], "val_shards": [], "vocab_size": tokenizers.vocab_size_of(args.tokenizer),
                "meta": None}, False
    from nfn.data.prepare import prepare_dataset
    return prepare_dataset(dataset=dataset, pretraining_file=args.pretraining_file,
                           tokenizer=args.tokenizer, quiet=args.json), True


def eot_of(info):
    """The document separator id recorded in the dataset's meta.json (a shard directory's
    too, where nfn wrote one) for the tokenizer the shards are taken as, else that tokenizer's."""
    from nfn import tokenizers  # light: names and manifests only
    from nfn.data import cache
    meta = cache.read_meta(info["dir"]) if info.get("dir") else None
    made_by = (meta or {}).get("tokenizer")
    eot = (meta or {}).get("eot_id")
    if isinstance(made_by, dict) and made_by.get("name") == info["tokenizer"] and isinstance(eot, int) \
            and not isinstance(eot, bool):
        return eot
    return tokenizers.eot_id_of(info["tokenizer"])


def data_path(shards, directory):
    """One file as itself; several as their directory (the trainer globs the split)."""
    if len(shards) == 1:
        return shards[0]
    return directory


def output_dir(args):
    return os.path.abspath(args.output_dir or os.path.join(paths.artifacts_dir(), args.base_model))


def build_argv(args, info):
    argv = [trainer_binary(), "--base-model", args.base_model,
            "--train-data", data_path(info["train_shards"], info["dir"]),
            "--dataset-name", info["dataset"], "--tokenizer", info["tokenizer"],
            "--output-dir", output_dir(args)]
    if info["val_shards"]:
        argv += ["--val-data", data_path(info["val_shards"], info["dir"])]
    if info.get("vocab_size") and not args.graph_file:
        argv += ["--vocab-size", str(info["vocab_size"])]
    eot = eot_of(info)
    if eot is not None:
        argv += ["--eot-token", str(eot)]
    for attr, flag in PASSTHROUGH:
        value = getattr(args, attr, None)
        if value is not None:
            argv += [flag, str(value)]
    if args.dry_run or args.print_plan:
        argv.append("--dry-run")
    return argv


def write_sample(report, tokenizer_name, quiet=False):
    """Decodes the trainer's sample ids into sample.txt beside the report; returns the text."""
    ids = report.get("sample_tokens") or []
    path = os.path.join(report["checkpoint_dir"], "sample.txt")
    if not ids:  # an earlier run's sample is not this one's
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        return None
    from nfn import tokenizers
    text = tokenizers.load(tokenizer_name, quiet).decode(ids)
    with fileio.atomic_open(path, "w", encoding="utf-8") as f:
        f.write(text)
    report["sample_text"] = text
    report["sample_file"] = path
    return text


def graph_manifest(args):
    """The --graph-file manifest as a dict ({} without one, or where it is not an object)."""
    graph = fileio.read_json(args.graph_file) if args.graph_file else {}
    return graph if isinstance(graph, dict) else {}


def run(args):
    if args.base_model and args.model_family and args.model_family != args.base_model:
        raise UserError(f"--model-family {args.model_family} contradicts --base-model {args.base_model}; give one")
    # The family: the flags', else the --graph-file model's; the two must agree.
    graph = graph_manifest(args)
    named, family = args.base_model or args.model_family, graph.get("model_family")
    family = family if isinstance(family, str) and family else None
    if named and family and named != family:
        flag = "--base-model" if args.base_model else "--model-family"
        raise UserError(f"{flag} {named} contradicts {args.graph_file}, whose model_family is {family}; give one")
    args.base_model = named or family or "gpt"
    if args.base_model not in ("gpt", "gpt2", "gpt3"):
        where = f"--base-model {args.base_model}" if named else f"{args.graph_file}: model_family {args.base_model}"
        raise UserError(f"{where}: no native trainer for this family yet (gpt, gpt2 and gpt3 are ready)")
    if "" in (args.dataset, args.pretraining_file, args.output_dir, args.graph_file, args.resume):
        raise UserError("an empty path or name was given (--dataset, --pretraining-file, --output-dir, --graph-file "
                        "or --resume ''); an unset shell variable?")
    manifest = resumed_manifest(args)
    from_manifest = resume_data(args, manifest)
    training = (manifest or {}).get("training")
    resumed_seed = training.get("seed") if isinstance(training, dict) else None
    # The resumed run's data order (another --seed starts the data over); a seed outside int64
    # is an older trainer's rounding of a negative one, which the trainer no longer reads either.
    if (args.seed is None and isinstance(resumed_seed, int) and not isinstance(resumed_seed, bool) and
            -2**63 <= resumed_seed < 2**63):
        args.seed = resumed_seed
    named_tokenizer = args.tokenizer
    args.tokenizer = tokenizer_of(args, manifest, graph)
    planning = args.print_command or args.dry_run or args.print_plan
    try:
        info, exists = resolve_dataset(args, prepare=False)
        if not exists and not planning:
            # The trainer checks its flags (--check reads no data) before minutes of download,
            # tokenizer training or encoding, not after them.
            checked = subprocess.run(build_argv(args, info) + ["--check"], stdout=subprocess.DEVNULL,
                                     env=cuda_runtime.child_env())
            if checked.returncode != 0:
                return checked.returncode
            info, exists = resolve_dataset(args, prepare=True)
    except UserError as e:
        if not from_manifest:
            raise
        raise UserError(f"{e} (the data of the run --resume continues, from its manifest; name other "
                        "data with --dataset or --pretraining-file)") from None
    if named_tokenizer and info["tokenizer"] != named_tokenizer:  # shards carry their own
        raise UserError(f"--tokenizer {named_tokenizer}: the shards in {info['dir']} are tokenized with "
                        f"{info['tokenizer']}")
    argv = build_argv(args, info)
    if args.print_command:
        note = "" if exists else "  # dataset not prepared yet: `nfn train` would prepare it first"
        print(shlex.join(argv) + note)
        return 0
    proc = subprocess.run(argv, env=cuda_runtime.child_env())
    if proc.returncode != 0 or args.dry_run or args.print_plan:
        return proc.returncode
    report_path = os.path.join(output_dir(args), "report.json")
    report = fileio.read_json(report_path)
    text = write_sample(report, info["tokenizer"], quiet=args.json)
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print(f"final validation loss: {report['final_validation_loss']}   "
              f"train tokens/s: {report['train_tokens_per_second']:.0f}")
        print(f"checkpoint: {report['model_file']}\nreport: {report_path}\nlog: {report['log_file']}")
        if text is not None:
            print(f"sample ({report['sample_file']}):\n{text}")
    return 0

"""`nfn train`: resolve the dataset (preparing it only when it is not cached, after the trainer's
own check of the flags, asked in process), run the native trainer with the flags given and the
dataset's, then decode its sample with the dataset's tokenizer.

The trainer decides everything about the run: nfn train passes its flags on as given
(py/nfn/train/flags.py) and asks the trainer's plan only to continue a resumed run's data.
Standard library only until a dataset must be prepared or a sample decoded, so the dispatch
path for a cached dataset never imports numpy or the native module.
"""
import contextlib
import json
import os
import shlex
import subprocess
import sys

from nfn import cuda_runtime, fileio
from nfn.errors import UserError
from nfn.native_bin import trainer_binary
from nfn.train import flags


# The demo's tokenizer: with a 50,257-piece vocabulary the 128-channel demo model would be
# 6.4M parameters of embedding around 0.8M of blocks, and ten times slower a token.
DEMO_TOKENIZER = "sp1024"


def trainer_plan(args):
    """The trainer's plan for these flags (--dry-run: no data read, no op library opened)."""
    proc = subprocess.run([trainer_binary()] + flags.trainer_argv(args, args.trainer_flags) + ["--dry-run"],
                          stdout=subprocess.PIPE, env=cuda_runtime.child_env())
    if proc.returncode != 0:
        raise SystemExit(proc.returncode)  # the trainer said why on stderr
    return json.loads(proc.stdout)


def resumed_manifest(args):
    """The manifest of the run that --resume continues, as the trainer picks its checkpoint
    (else None): the checkpoint's own, or its directory's for a run that wrote none yet."""
    if not args.resume:
        return None
    choice = trainer_plan(args).get("resume_checkpoint")
    manifest = choice.get("manifest") if isinstance(choice, dict) else None
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


def init_manifest(args):
    """The manifest of the checkpoint --init-from names ({} without one, or where it names none:
    the trainer says why when it runs)."""
    if not args.init_from:
        return {}
    from nfn.infer import checkpoint
    try:
        found = checkpoint.resolve(args.init_from, for_resume=args.init_optimizer)
        manifest = fileio.read_json(found.manifest) if found.manifest else {}
    except UserError:
        return {}
    return manifest if isinstance(manifest, dict) else {}


def tokenizer_of(args, manifest, graph):
    """--tokenizer, else the resumed run's, else the --graph-file manifest's or the --init-from
    checkpoint's, else gpt2, except for the demo: no dataset, template or graph file named, so
    the embedded corpus with sp1024 (trained on it once, in seconds)."""
    if args.tokenizer:
        return args.tokenizer
    resumed = (manifest or {}).get("tokenizer")  # the resumed run's
    if isinstance(resumed, str) and resumed:
        return resumed
    named = graph.get("tokenizer") or init_manifest(args).get("tokenizer")  # the model's vocabulary's
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


def build_argv(args, info):
    argv = [trainer_binary()] + flags.trainer_argv(args, args.trainer_flags)
    argv += ["--train-data", data_path(info["train_shards"], info["dir"]), "--dataset-name", info["dataset"],
             "--tokenizer", info["tokenizer"]]
    if info["val_shards"]:
        argv += ["--val-data", data_path(info["val_shards"], info["dir"])]
    if info.get("vocab_size") and not args.graph_file:
        argv += ["--vocab-size", str(info["vocab_size"])]
    eot = eot_of(info)
    if eot is not None:
        argv += ["--eot-token", str(eot)]
    return argv


def check_flags(argv):
    """The trainer's check of a run's flags (the op library and its options, attention at
    the model's geometry, the checkpoint to resume, the output directory), in process: 0, or
    the exit code the trainer would stop with, after its message."""
    from nfn import _native
    code, message = _native.check_train(argv[0], argv[1:])
    if code:
        print(f"{trainer_name(argv)}: error: {message}", file=sys.stderr)
    return code


def trainer_name(argv):
    """The family trainer nfn_native_train runs for this argv (gpt's when no family is named)."""
    family = "gpt"
    for i, a in enumerate(argv):
        for spelling in ("--model-family", "--base-model"):
            if a == spelling and i + 1 < len(argv):
                family = argv[i + 1]
            elif a.startswith(spelling + "="):
                family = a.split("=", 1)[1]
    return f"nfn_{'gpt' if family in ('gpt2', 'gpt3') else family}_native_train"


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


def find_data(args, from_manifest, planning):
    """The dataset summary (prepared where needed, after the trainer checked the flags) and
    whether it exists yet; None where the check failed (the trainer said why)."""
    try:
        info, exists = resolve_dataset(args, prepare=False)
        if not exists and not planning:
            # The trainer checks its flags before minutes of download, tokenizer training or
            # encoding, not after them.
            code = check_flags(build_argv(args, info))
            if code:
                raise SystemExit(code)
            info, exists = resolve_dataset(args, prepare=True)
    except UserError as e:
        if not from_manifest:
            raise
        raise UserError(f"{e} (the data of the run --resume continues, from its manifest; name other "
                        "data with --dataset or --pretraining-file)") from None
    return info, exists


def print_report(report, text):
    print(f"final validation loss: {report['final_validation_loss']}   "
          f"train tokens/s: {report['train_tokens_per_second']:.0f}")
    print(f"checkpoint: {report['model_file'] or 'none (--no-checkpoint)'}\nreport: {report['report_file']}\n"
          f"log: {report['log_file']}")
    if text is not None:
        print(f"sample ({report['sample_file']}):\n{text}")


def run(args):
    if isinstance(args.trainer_flags, UserError):
        raise args.trainer_flags
    flags.resolve_aliases(args, args.trainer_flags)
    if "" in (args.dataset, args.pretraining_file, args.output_dir, args.graph_file, args.resume):
        raise UserError("an empty path or name was given (--dataset, --pretraining-file, --output-dir, --graph-file "
                        "or --resume ''); an unset shell variable?")
    manifest = resumed_manifest(args)
    from_manifest = resume_data(args, manifest)
    named_tokenizer = args.tokenizer
    args.tokenizer = tokenizer_of(args, manifest, graph_manifest(args))
    planning = args.print_command or args.dry_run
    info, exists = find_data(args, from_manifest, planning)
    if named_tokenizer and info["tokenizer"] != named_tokenizer:  # shards carry their own
        raise UserError(f"--tokenizer {named_tokenizer}: the shards in {info['dir']} are tokenized with "
                        f"{info['tokenizer']}")
    argv = build_argv(args, info)
    if args.print_command:
        note = "" if exists else "  # dataset not prepared yet: `nfn train` would prepare it first"
        print(shlex.join(argv) + note)
        return 0
    if args.dry_run:
        return subprocess.run(argv, env=cuda_runtime.child_env()).returncode
    # The report comes on stdout (--json); the trainer's progress on stderr, as it runs.
    proc = subprocess.run(argv + ["--json"], stdout=subprocess.PIPE, env=cuda_runtime.child_env())
    if proc.returncode != 0:
        return proc.returncode
    report = json.loads(proc.stdout)
    text = write_sample(report, info["tokenizer"], quiet=args.json)
    if args.json:
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
    else:
        print_report(report, text)
    return 0

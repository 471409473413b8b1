"""`nfn report`: a checkpoint directory's report card, report.md, as nanochat's report.

Read from the directory, never recomputed: the model (manifest.json), the training run
(report.json; its losses from log.jsonl, drawn as loss.png with matplotlib), bits per byte and
task scores (evals.jsonl, which `nfn eval` appends to: the latest score of each dataset split and
each task). A file that is absent leaves its section saying so.
"""
import datetime
import json
import os

from nfn import __version__, fileio, paths
from nfn.errors import UserError
from nfn.evals import records

PNG = "loss.png"


def resolve(spec):
    """The checkpoint directory a path or an artifact name means."""
    for candidate in (spec, os.path.join(paths.artifacts_dir(), spec)):
        if os.path.isdir(candidate):
            if not any(os.path.isfile(os.path.join(candidate, f)) for f in ("manifest.json", "report.json")):
                raise UserError(f"{candidate}: not a checkpoint directory (no manifest.json or report.json)")
            return os.path.abspath(candidate)
    raise UserError(f"{spec}: no such directory, nor an artifact of that name in {paths.artifacts_dir()}")


def read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: not readable JSON ({e})") from None
    return value if isinstance(value, dict) else None


def read_log(path):
    """(train [(step, loss)], validation [(step, loss)]) of a log.jsonl; a torn line is skipped."""
    rows = records.read_jsonl(path)
    return series(rows, "train_loss"), series(rows, "val_loss")


def series(rows, key):
    """[(step, value)] of the log rows that have an integer step and a number under key."""
    return [(row["step"], float(row[key])) for row in rows
            if isinstance(row.get("step"), int) and isinstance(row.get(key), (int, float))]


LOSS_LABELS = ("train loss", "validation loss", "loss (nats/token)")


def plot(train, val, path, title, labels=LOSS_LABELS):
    """The curve of two series of (step, value) as a PNG (a run's losses unless `labels`, the two
    series' names and the y axis's, say otherwise); False where matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    if train:
        ax.plot([s for s, _ in train], [v for _, v in train], lw=1, label=labels[0])
    if val:
        ax.plot([s for s, _ in val], [v for _, v in val], "o-", ms=3, label=labels[1])
    ax.set_xlabel("step")
    ax.set_ylabel(labels[2])
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    with fileio.atomic_open(path) as f:
        fig.savefig(f, format="png")
    plt.close(fig)
    return True


def number(value, digits=4):
    if value is None:
        return "n/a"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.{digits}f}" if digits == 0 else f"{value:.{digits}f}"


def latest_scores(entries):
    """({task: (entry, result)}, {suite: (entry, value)}, {(dataset, split): entry}), the latest of each."""
    tasks, suites, losses = {}, {}, {}
    for e in entries:
        if e.get("kind") == "tasks" and isinstance(e.get("tasks"), dict):
            for name, r in e["tasks"].items():
                if isinstance(r, dict):
                    tasks[name] = (e, r)
            for suite in ("core", "chatcore"):
                if e.get(suite) is not None:
                    suites[suite] = (e, e[suite])
        elif e.get("kind") == "loss":
            losses[(e.get("dataset"), e.get("split"))] = e
    return tasks, suites, losses


def model_section(directory, manifest):
    lines = ["## Model", ""]
    if manifest is None:
        return lines + ["No manifest.json.", ""]
    g = manifest.get("geometry") or {}
    family = manifest.get("model_family") or manifest.get("family")
    lines.append(f"- family: {family}, template {manifest.get('template')}")
    shape = [f"{g[k]} {label}" for k, label in (("num_layers", "layers"), ("channels", "channels"),
                                                ("num_heads", "heads"), ("num_kv_heads", "kv heads"))
             if k in g]
    lines.append(f"- geometry: {', '.join(shape)}; context {g.get('max_seq_len')}, vocabulary "
                 f"{g.get('vocab_size')} (padded {g.get('padded_vocab_size')})")
    lines.append(f"- parameters: {number(manifest.get('parameters'))}")
    lines.append(f"- tokenizer: {manifest.get('tokenizer')}")
    lines.append(f"- weights: {manifest.get('weights')} (step {manifest.get('step')}, run {manifest.get('run_id')})")
    data = manifest.get("dataset")
    if isinstance(data, dict):
        lines.append(f"- training data: {data.get('name')}")
    source = manifest.get("source")
    if isinstance(source, dict):
        lines.append(f"- imported from: {source.get('file')} ({source.get('format')}, sha256 {source.get('sha256')})")
    return lines + [""]


def training_section(directory, report, train, val, png):
    lines = ["## Training", ""]
    if report is None and not train:
        return lines + ["No training run here (no report.json or log.jsonl).", ""]
    if report is not None:
        cfg = report.get("config") or {}
        sched = cfg.get("schedule") or {}
        lines += ["| run | steps | train tokens | tokens/s | MFU | final train loss | final validation loss |",
                  "|---|---|---|---|---|---|---|",
                  f"| {report.get('run_id')} | {number(report.get('steps'))} | {number(report.get('train_tokens'))} | "
                  f"{number(report.get('train_tokens_per_second'), 0)} | {number(report.get('mfu'), 3)} | "
                  f"{number(report.get('final_train_loss'))} | {number(report.get('final_validation_loss'))} |", ""]
        if sched:
            lines.append(f"- schedule: learning rate {sched.get('learning_rate')}, warmup {sched.get('warmup_steps')}, "
                         f"{sched.get('decay')}, weight decay {sched.get('weight_decay')}")
        if report.get("resumed_from"):
            lines.append(f"- resumed from: {report.get('resumed_from')}")
        backend = (report.get("op_library") or {}).get("backend")
        if backend:
            lines.append(f"- op library: {backend} ({(report.get('op_library') or {}).get('device')})")
    if train:
        losses = [v for _, v in train]
        lines.append(f"- log.jsonl: {len(train)} steps, train loss {number(losses[0])} at step {train[0][0]} to "
                     f"{number(losses[-1])} at step {train[-1][0]} (lowest {number(min(losses))})")
    if val:
        best = min(val, key=lambda sv: sv[1])
        lines.append(f"- validation loss: {len(val)} evaluations, last {number(val[-1][1])} at step {val[-1][0]}, "
                     f"lowest {number(best[1])} at step {best[0]}")
    if png is True:
        lines += ["", f"![loss curve]({PNG})"]
    elif png is False:
        lines += ["", "(no loss curve: matplotlib is not installed)"]
    return lines + [""]


def bpb_section(losses):
    lines = ["## Bits per byte", ""]
    if not losses:
        return lines + ["Not measured (`nfn eval --checkpoint DIR` records it).", ""]
    lines += ["| dataset | split | loss | bits per byte | tokens | measured |", "|---|---|---|---|---|---|"]
    for (dataset, split), e in sorted(losses.items(), key=lambda kv: str(kv[0])):
        lines.append(f"| {dataset} | {split} | {number(e.get('loss'))} | {number(e.get('bits_per_byte'))} | "
                     f"{number(e.get('tokens'))} | {e.get('time')} |")
    return lines + [""]


def scores_section(tasks, suites):
    from nfn.evals import suite as suite_lib
    lines = ["## Scores", ""]
    if not tasks:
        return lines + ["No task scores (`nfn eval --checkpoint DIR --tasks core|chatcore` records them).", ""]
    lines += ["| task | suite | shots | items | accuracy | centered | measured |", "|---|---|---|---|---|---|---|"]
    for name, (e, r) in tasks.items():
        which = next((s for s, names in suite_lib.SUITES.items() if name in names), "")
        lines.append(f"| {name} | {which} | {r.get('shots', '-')} | {number(r.get('items'))} | "
                     f"{number(r.get('accuracy'))} | {number(r.get('centered'))} | {e.get('time')} |")
    lines.append("")
    for suite, (e, value) in suites.items():
        limit = e.get("max_per_task")
        lines.append(f"- {'CORE' if suite == 'core' else 'ChatCORE'}: {number(value)} ({e.get('time')}"
                     f"{f', at most {limit} items a task' if limit else ', every item'})")
    return lines + [""]


def write(directory, output=None):
    """Writes report.md (and loss.png where there is a log); returns the report's path."""
    manifest = read_json(os.path.join(directory, "manifest.json"))
    report = read_json(os.path.join(directory, "report.json"))
    train, val = read_log(os.path.join(directory, "log.jsonl"))
    output = output or os.path.join(directory, "report.md")
    png = None
    if train or val:
        png = plot(train, val, os.path.join(os.path.dirname(os.path.abspath(output)), PNG),
                   os.path.basename(directory.rstrip("/")))
    tasks, suites, losses = latest_scores(records.read(directory))
    when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    lines = [f"# Report: {os.path.basename(directory.rstrip('/'))}", "",
             f"{directory}, written {when} by nfn {__version__}.", ""]
    lines += model_section(directory, manifest)
    lines += training_section(directory, report, train, val, png)
    lines += bpb_section(losses)
    lines += scores_section(tasks, suites)
    with fileio.atomic_open(output, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return output


def run(args):
    directory = resolve(args.checkpoint_dir)
    path = write(directory, args.output)
    print(path)
    return 0

"""A pipeline's summary (one row a stage, read from what the stages left) and its report.md.

Nothing is recomputed: the tokenizer's vocabulary, the runs' report.json, the scores `nfn eval`
appended to evals.jsonl, the stage records in pipeline/. OUTPUT_DIR/report.md is the summary
table followed by the report cards `nfn report` wrote for base/, sft/ and rl/ (their headings one
level down, their loss curves linked from their directories).
"""
import datetime
import json
import os
import platform

from nfn import __version__, fileio
from nfn.evals import records
from nfn.pipeline import plan as plan_lib


def _json(path):
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _latest(entries, kind, key=None):
    for e in reversed(entries):
        if e.get("kind") == kind and (key is None or e.get(key) is not None):
            return e
    return None


def _fmt(value, digits=4):
    return "-" if value is None else (f"{value:.{digits}f}" if isinstance(value, float) else str(value))


def stage_results(plan):
    """{stage: {"status", "seconds", "output", and the stage's headline numbers}}."""
    out = {}
    base_evals = records.read(plan.path("base"))
    rl_evals = records.read(plan.path("rl"))
    for name in plan_lib.STAGES:
        done = _json(plan.path("pipeline", f"{name}.json"))
        row = {"status": "done" if done else "not run", "seconds": done.get("seconds") if done else None,
               "output": plan.path(*plan_lib.OUTPUTS[name])}
        if name == "tokenizer":
            row["vocab_size"] = plan.size.vocab_size
        elif name in ("base", "sft", "rl"):
            report = _json(plan.path(name, "report.json")) or {}
            row.update({k: report.get(k) for k in ("steps", "final_train_loss", "final_validation_loss",
                                                    "train_tokens_per_second")})
            if name == "rl":
                row.update({k: report[k] for k in ("first_mean_reward", "final_mean_reward", "final_pass_at_1")
                            if k in report})
        elif name == "base-eval":
            loss = _latest(base_evals, "loss")
            core = _latest(base_evals, "tasks", "core")
            row["bits_per_byte"] = loss.get("bits_per_byte") if loss else None
            row["core"] = core.get("core") if core else None
        elif name == "chat-eval":
            chat = _latest(rl_evals, "tasks", "chatcore")
            row["chatcore"] = chat.get("chatcore") if chat else None
            if chat:
                row["accuracy"] = {t: r.get("accuracy") for t, r in chat.get("tasks", {}).items()}
        out[name] = row
    return out


HEADLINES = {
    "tokenizer": lambda r: f"vocabulary {r['vocab_size']:,}",
    "base": lambda r: f"{_fmt(r.get('steps'))} steps, validation loss {_fmt(r.get('final_validation_loss'))}, "
                      f"{_fmt(r.get('train_tokens_per_second'), 0)} tok/s",
    "base-eval": lambda r: f"bits per byte {_fmt(r.get('bits_per_byte'))}, CORE {_fmt(r.get('core'))}",
    "sft": lambda r: f"{_fmt(r.get('steps'))} steps, masked validation loss {_fmt(r.get('final_validation_loss'))}",
    "rl": lambda r: f"{_fmt(r.get('steps'))} steps, mean reward {_fmt(r.get('first_mean_reward'), 3)} -> "
                    f"{_fmt(r.get('final_mean_reward'), 3)}",
    "chat-eval": lambda r: f"ChatCORE {_fmt(r.get('chatcore'))}",
    "report": lambda r: r["output"],
}


def table(results):
    lines = ["| stage | status | seconds | result |", "|---|---|---|---|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['status']} | {_fmt(r['seconds'], 1)} | {HEADLINES[name](r)} |")
    return lines


def _section(title, lines, stage=None):
    """A report.py section under another heading, its loss curve linked from OUTPUT_DIR."""
    body = lines[1:]
    if stage:
        body = [line.replace("](loss.png)", f"]({stage}/loss.png)") for line in body]
    return [f"## {title}"] + body


def _directory(plan, name):
    """(manifest, report.json, (train, val) losses, the loss curve drawn or None, evals.jsonl)."""
    from nfn.evals import report
    directory = plan.path(name)
    losses = report.read_log(os.path.join(directory, "log.jsonl"))
    png = os.path.isfile(os.path.join(directory, report.PNG)) or None
    return (report.read_json(os.path.join(directory, "manifest.json")),
            report.read_json(os.path.join(directory, "report.json")), losses, png, records.read(directory))


def write_report(plan):
    """OUTPUT_DIR/report.md: the summary, the model, each run's training, bits per byte, CORE,
    RL's rewards and ChatCORE, read from what the stages left."""
    from nfn.evals import report
    results = stage_results(plan)
    results["report"]["status"] = "done"  # this file
    when = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    lines = ["# nfn pipeline report", "",
             f"{plan.out}: size {plan.size.name}, corpus {plan.dataset}; written {when} by nfn {__version__} on "
             f"{platform.node()} ({platform.machine()}, {os.cpu_count()} CPUs).", "", "## Summary", ""]
    lines += table(results) + [""]
    manifest, base_report, (train, val), png, base_evals = _directory(plan, "base")
    lines += _section("Model", report.model_section(plan.path("base"), manifest))
    lines += _section("Pretraining", report.training_section(plan.path("base"), base_report, train, val, png), "base")
    tasks, suites, losses = report.latest_scores(base_evals)
    lines += _section("Bits per byte", report.bpb_section(losses))
    lines += _section("CORE", report.scores_section(tasks, suites))
    for name, title in (("sft", "SFT"), ("rl", "RL")):
        _, run_report, (train, val), png, _ = _directory(plan, name)
        lines += _section(title, report.training_section(plan.path(name), run_report, train, val, png), name)
        if name == "rl":
            lines += rl_lines(results["rl"]) + [""]
    tasks, suites, _ = report.latest_scores(records.read(plan.path("rl")))
    lines += _section("ChatCORE", report.scores_section(tasks, suites))
    with fileio.atomic_open(plan.path("report.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return plan.path("report.md")


def rl_lines(row):
    out = []
    if row.get("first_mean_reward") is not None:
        out.append(f"- mean reward: {_fmt(row['first_mean_reward'], 3)} at the first step, "
                   f"{_fmt(row.get('final_mean_reward'), 3)} at the last")
    if row.get("final_pass_at_1") is not None:
        out.append(f"- held-out pass@1: {_fmt(row['final_pass_at_1'], 3)}")
    return out

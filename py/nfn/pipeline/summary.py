"""A pipeline's summary (one row a stage, read from what the stages left) and its report.md.

Nothing is recomputed: the tokenizer's vocabulary, the runs' report.json and log.jsonl, the
scores `nfn eval` appended to evals.jsonl, the stage records in pipeline/. OUTPUT_DIR/report.md is
the summary table, then `nfn report`'s sections (nfn/evals/report.py) for the base model, its
pretraining, bits per byte and CORE, SFT, RL's rewards (drawn into rl/reward.png) and ChatCORE.
"""
import datetime
import os
import platform

from nfn import __version__, fileio
from nfn.evals import records, report
from nfn.pipeline import plan as plan_lib


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
        done = report.read_json(plan.path("pipeline", f"{name}.json"))
        row = {"status": "done" if done else "not run", "seconds": done.get("seconds") if done else None,
               "output": plan.output(name)}
        if name == "tokenizer":
            row.update(vocab_size=plan.size.vocab_size, name=plan.tokenizer)
        elif name in ("base", "sft", "rl"):
            run = report.read_json(plan.path(name, "report.json")) or {}
            row.update({k: run.get(k) for k in ("steps", "final_train_loss", "final_validation_loss",
                                                 "train_tokens_per_second")})
            if name == "rl":
                row.update(rl_numbers(plan))
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
    "tokenizer": lambda r: f"{r['name']}, vocabulary {r['vocab_size']:,}",
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
    directory = plan.path(name)
    losses = report.read_log(os.path.join(directory, "log.jsonl"))
    png = os.path.isfile(os.path.join(directory, report.PNG)) or None
    return (report.read_json(os.path.join(directory, "manifest.json")),
            report.read_json(os.path.join(directory, "report.json")), losses, png, records.read(directory))


def write_report(plan):
    """OUTPUT_DIR/report.md: the summary, the model, each run's training, bits per byte, CORE,
    RL's rewards and ChatCORE, read from what the stages left."""
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
    _, sft_report, (train, val), png, _ = _directory(plan, "sft")
    lines += _section("SFT", report.training_section(plan.path("sft"), sft_report, train, val, png), "sft")
    lines += rl_section(plan, results["rl"])
    tasks, suites, _ = report.latest_scores(records.read(plan.path("rl")))
    lines += _section("ChatCORE", report.scores_section(tasks, suites))
    with fileio.atomic_open(plan.path("report.md"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return plan.path("report.md")


REWARD_LABELS = ("mean reward", "held-out pass@1", "reward")
REWARD_PNG = "reward.png"
EDGE = 5  # steps averaged at each end of the reward's history


def rl_history(plan):
    """(mean reward [(step, value)], held-out pass@1 [(step, value)]) from rl/log.jsonl, every
    step of the run, resumed parts included (a resume drops the lines past its step)."""
    rows = records.read_jsonl(plan.path("rl", "log.jsonl"))
    return report.series(rows, "mean_reward"), report.series(rows, "pass_at_1")


def rl_numbers(plan):
    rewards, passes = rl_history(plan)
    if not rewards:
        return {}
    values = [v for _, v in rewards]
    edge = min(EDGE, len(values))
    return {"steps": rewards[-1][0], "first_mean_reward": sum(values[:edge]) / edge,
            "final_mean_reward": sum(values[-edge:]) / edge, "final_pass_at_1": passes[-1][1] if passes else None}


def rl_section(plan, row):
    """RL's rewards: the numbers and their curve (drawn into rl/reward.png)."""
    lines = ["## RL", ""]
    rewards, passes = rl_history(plan)
    if not rewards:
        return lines + ["No RL steps logged (rl/log.jsonl).", ""]
    lines.append(f"- {row['steps']} steps of `nfn rl --task {plan.size.rl_task}`; mean reward "
                 f"{_fmt(row['first_mean_reward'], 3)} over the first {min(EDGE, len(rewards))} steps, "
                 f"{_fmt(row['final_mean_reward'], 3)} over the last")
    if passes:
        lines.append("- held-out pass@1 (greedy): " + ", ".join(f"{v:.3f} at step {s}" for s, v in passes))
    drawn = report.plot(rewards, passes, plan.path("rl", REWARD_PNG), "rl", REWARD_LABELS)
    lines += ["", f"![reward curve](rl/{REWARD_PNG})" if drawn else "(no reward curve: matplotlib is not installed)"]
    return lines + [""]

"""`nfn eval --tasks`: run CORE and ChatCORE tasks on a checkpoint with the native engine.

Each task's items are taken in one fixed order (random.Random(1337) shuffles the indices, as
nanochat does), so --max-per-task N scores the first N of that order and a larger N scores a
superset; few-shot examples come from all of the task's items either way. Every task's data is
read before the engine starts, so a missing package fails in one line, before any work.
"""
import json
import random
import sys
import time

from nfn.errors import UserError
from nfn.evals import chat, core, records, scoring

TASKS = {t.name: t for t in core.CORE_TASKS + chat.CHAT_TASKS}
SUITES = {"core": [t.name for t in core.CORE_TASKS], "chatcore": [t.name for t in chat.CHAT_TASKS]}


def parse_tasks(text):
    """Task ids in the order given, suites expanded, each once; unknown ids refused with the list."""
    names = []
    for word in (w.strip() for w in (text or "").split(",")):
        if not word:
            continue
        found = SUITES.get(word, [word] if word in TASKS else None)
        if found is None:
            raise UserError(f"unknown task {word!r}; known: core, chatcore, {', '.join(TASKS)}")
        names += [n for n in found if n not in names]
    if not names:
        raise UserError("--tasks: no task named (core, chatcore, or task ids separated by commas)")
    return names


def order(n, limit):
    """The indices scored: all n in nanochat's shuffled order, the first `limit` of them."""
    indices = list(range(n))
    random.Random(1337).shuffle(indices)
    return indices if limit is None else indices[:limit]


def aggregate(results):
    """{"core": mean centered of the CORE tasks, "chatcore": ...}, each only when every task of
    the suite was scored (as nanochat reports them), else None."""
    out = {}
    for suite, names in SUITES.items():
        if any(n in results for n in names):
            done = [results[n]["centered"] for n in names if n in results]
            out[suite] = sum(done) / len(done) if len(done) == len(names) else None
    return out


class Progress:
    """One line on stderr, redrawn at most 5 times a second, on a terminal only."""

    def __init__(self, label, total):
        self.label, self.total, self.enabled = label, total, sys.stderr.isatty()
        self.start = self.last = time.time()

    def update(self, done, correct):
        now = time.time()
        if self.enabled and (now - self.last >= 0.2 or done == self.total):
            self.last = now
            rate = done / max(now - self.start, 1e-9)
            print(f"\r{self.label}: {done}/{self.total}  accuracy {correct / max(done, 1):.4f}  {rate:.2f} items/s ",
                  end="", file=sys.stderr, flush=True)

    def close(self):
        if self.enabled:
            print(file=sys.stderr)


class Runner:
    """The engine, its prefix cache and, for generative tasks, a greedy ChatSession."""

    def __init__(self, engine, tok, fmt, max_new_tokens=512):
        self.engine, self.tok, self.fmt, self.max_new_tokens = engine, tok, fmt, max_new_tokens
        self.cache = scoring.PrefixCache(engine)
        self.start = core.document_start(tok)
        self.letter_ids = chat.LetterIds(tok)
        self._session = None

    def session(self):
        if self._session is None:
            from nfn.chat.session import ChatSession
            self._session = ChatSession(self.engine, self.tok, self.fmt, self.engine.max_seq_len, temperature=0.0,
                                        top_k=0, max_new_tokens=self.max_new_tokens, seed=0, tool="calculator")
        return self._session

    def item(self, task, data, index):
        if isinstance(task, core.CoreTask):
            return core.evaluate_item(self.cache, self.tok, task, data, index, self.start)
        if task.kind == "categorical":
            return chat.categorical_item(self.cache, self.fmt, self.letter_ids, data[index])
        return chat.generative_item(self.session(), data, data[index])

    def run(self, task, data, limit, progress=True):
        """{"accuracy", "centered", "baseline", "items", "correct", ...} of one task."""
        self.cache.clear()  # a ChatSession may have moved the engine
        indices = order(len(data), limit)
        bar = Progress(task.name, len(indices)) if progress else None
        started, correct, too_long = time.time(), 0, 0
        for done, index in enumerate(indices, 1):
            try:
                ok, detail = self.item(task, data, index)
            except ValueError as e:  # an item that cannot fit the context, a bad token id
                raise UserError(f"{task.name}: item {index}: {e}") from None
            correct += int(ok)
            too_long += int(bool(detail.get("too_long")))
            if bar:
                bar.update(done, correct)
        if bar:
            bar.close()
        n = len(indices)
        accuracy = correct / n if n else 0.0
        out = {"accuracy": accuracy, "centered": core.centered(accuracy, task.baseline), "baseline": task.baseline,
               "items": n, "correct": correct, "kind": task.kind, "seconds": round(time.time() - started, 3)}
        if isinstance(task, core.CoreTask):
            out["shots"] = task.shots
        if task.kind == "generative":
            out["too_long"] = too_long  # prompts that left no room for an answer: scored wrong
        return out


def load_data(names):
    """Each task's items (CORE: a list of dicts; ChatCORE: an nfn.tasks Task)."""
    return {name: TASKS[name].load() for name in names}


def run(args):
    if args.max_per_task is not None and args.max_per_task < 1:
        raise UserError(f"--max-per-task must be >= 1 (got {args.max_per_task})")
    max_new_tokens = 512 if args.max_new_tokens is None else args.max_new_tokens
    if max_new_tokens < 1:
        raise UserError(f"--max-new-tokens must be >= 1 (got {max_new_tokens})")
    for flag, value in (("--dataset", args.dataset), ("--max-tokens", args.max_tokens)):
        if value is not None:
            raise UserError(f"{flag} belongs to the loss mode; --tasks scores tasks")
    names = parse_tasks(args.tasks)
    from nfn import tokenizers
    from nfn.infer import model as model_lib
    m = model_lib.load(args, need_tokenizer=True)
    tok = tokenizers.load(m.tokenizer, quiet=True)
    fmt = None
    if any(isinstance(TASKS[n], chat.ChatTask) for n in names):
        from nfn.chat.formats import chat_format
        fmt = chat_format(tok, m.tokenizer)
    data = load_data(names)
    engine, note = model_lib.start_engine(m, args.backend, threads=args.threads, quantize=args.quantize,
                                          context=args.context)
    runner = Runner(engine, tok, fmt, max_new_tokens)
    started = time.time()
    results = {}
    for name in names:
        results[name] = runner.run(TASKS[name], data[name], args.max_per_task)
    result = {"checkpoint": m.source, "backend": engine.backend, "backend_note": note,
              "max_per_task": args.max_per_task, "tasks": results, **aggregate(results),
              "seconds": round(time.time() - started, 3)}
    if not args.no_record:
        records.append(m.source, "tasks", result)
    if args.json:
        json.dump(records.finite(result), sys.stdout, indent=1, allow_nan=False)
        sys.stdout.write("\n")
    else:
        print_table(result)
    return 0


def print_table(result):
    print(f"{'task':<20} {'shots':>5} {'items':>6} {'accuracy':>9} {'centered':>9}")
    for name, r in result["tasks"].items():
        shots = r.get("shots", "-")
        print(f"{name:<20} {shots:>5} {r['items']:>6} {r['accuracy']:>9.4f} {r['centered']:>9.4f}")
    for name, r in result["tasks"].items():
        if r.get("too_long"):
            print(f"{name}: {r['too_long']} of {r['items']} prompts leave no room for an answer in the context "
                  "(scored wrong)")
    for suite, label in (("core", f"CORE ({len(core.CORE_TASKS)} of DCLM's 22 tasks)"), ("chatcore", "ChatCORE")):
        if suite in result:
            value = result[suite]
            print(f"{label}: {'n/a (not every task of the suite was scored)' if value is None else f'{value:.4f}'}")

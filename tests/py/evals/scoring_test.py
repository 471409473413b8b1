"""The scorers against hand-computed cases, on a bigram stand-in whose log-probabilities are
powers of two (stubs.py): mean continuation losses, greedy matches, the best letter; the prefix
cache (what it runs with and without truncate, the same scores either way); cropping; the
centered accuracy and the suites' aggregates; each CORE task kind end to end."""
import unittest

from stubs import LN2, BigramEngine, CharTokenizer

from nfn.evals import chat, core, scoring, suite


class ScorerTest(unittest.TestCase):
    def test_mean_losses(self):
        # [0,1,2,3], tokens 2..3 scored: -log P(2|1) = 3 ln2, -log P(3|2) = 2 ln2.
        cache = scoring.PrefixCache(BigramEngine())
        got = scoring.mean_losses(cache, [[0, 1, 2, 3], [0, 1, 1]], [2, 1], [4, 3])
        self.assertAlmostEqual(got[0], 2.5 * LN2, places=12)
        # [0,1,1], tokens 1..2: -log P(1|0) = 2 ln2, -log P(1|1) = ln2.
        self.assertAlmostEqual(got[1], 1.5 * LN2, places=12)

    def test_greedy_match(self):
        # argmax after 0 is 0, after 1 is 1, after 2 is 2 (tied with 3: the first), after 3 is 5.
        cache = scoring.PrefixCache(BigramEngine())
        self.assertTrue(scoring.greedy_match(cache, [0, 1, 1, 1], 2, 4))
        self.assertFalse(scoring.greedy_match(cache, [0, 1, 1, 2], 2, 4))
        self.assertTrue(scoring.greedy_match(cache, [4, 2, 2, 3, 5], 2, 3))  # only position 2 scored
        self.assertTrue(scoring.greedy_match(cache, [0, 3, 5], 2, 3))
        self.assertFalse(scoring.greedy_match(cache, [0, 3, 4], 2, 3))

    def test_best_choice(self):
        # After 3: P(0) = 1/32, P(5) = 1/2, P(4) = 1/4.
        cache = scoring.PrefixCache(BigramEngine())
        self.assertEqual(scoring.best_choice(cache, [1, 3], [0, 5, 4]), 1)
        self.assertEqual(scoring.best_choice(cache, [2], [3, 2]), 0)  # a tie: the first

    def test_prefix_cache_shares_the_context(self):
        sequences, starts, ends = [[5, 4, 0, 1], [5, 4, 0, 0, 0]], [3, 3], [4, 5]
        want = [2 * LN2, LN2]
        runs = {}
        for truncate in (True, False):
            engine = BigramEngine(truncate=truncate)
            cache = scoring.PrefixCache(engine)
            got = scoring.mean_losses(cache, sequences, starts, ends)
            for g, w in zip(got, want):
                self.assertAlmostEqual(g, w, places=12)
            runs[truncate] = engine.forwarded
            self.assertEqual(cache.tokens, [5, 4, 0, 0])
            self.assertEqual(engine.position, 4)
        # With truncate: [5,4,0] once, then the second choice's [0,0] from position 2.
        self.assertEqual(runs[True], 3 + 2)
        # Without: the second choice starts over from position 0.
        self.assertEqual(runs[False], 3 + 4)

    def test_prefix_cache_extends_without_truncate(self):
        engine = BigramEngine(truncate=False)
        cache = scoring.PrefixCache(engine)
        cache.logits([1, 2, 3], 1)
        cache.logits([1, 2, 3, 4, 0], 2)  # extends what the cache holds: nothing is run again
        self.assertEqual(engine.forwarded, 5)
        self.assertEqual(engine.calls[-1], ((4, 0), True))

    def test_crop(self):
        self.assertEqual(scoring.crop([5, 4, 0, 0, 0], 3, 5, 4), ([4, 0, 0, 0], 2, 4))
        self.assertEqual(scoring.crop([1, 2, 3], 1, 3, 8), ([1, 2, 3], 1, 3))
        # A continuation longer than the context keeps its last tokens after one of context.
        self.assertEqual(scoring.crop(list(range(10)), 2, 10, 4), ([6, 7, 8, 9], 1, 4))
        cache = scoring.PrefixCache(BigramEngine(max_seq_len=4))
        self.assertAlmostEqual(scoring.mean_losses(cache, [[5, 4, 0, 0, 0]], [3], [5])[0], LN2, places=12)


class CenteredTest(unittest.TestCase):
    def test_formula(self):
        for accuracy, baseline, want in [(0.25, 0.25, 0.0), (1.0, 0.25, 1.0), (0.5, 0.25, 1 / 3),
                                         (0.62, 0.62, 0.0), (0.43, 0.62, -0.5), (0.0, 0.0, 0.0), (0.3, 0.0, 0.3)]:
            self.assertAlmostEqual(core.centered(accuracy, baseline), want, places=12)

    def test_aggregates(self):
        results = {n: {"centered": 0.1} for n in suite.SUITES["core"]}
        results["boolq"] = {"centered": 0.1 + 1.4}
        self.assertAlmostEqual(suite.aggregate(results)["core"], 0.2, places=12)
        del results["boolq"]
        self.assertEqual(suite.aggregate(results), {"core": None})
        chat_results = {n: {"centered": c} for n, c in zip(suite.SUITES["chatcore"], [0.5, 0.0, -0.1, 0.1, 0.0])}
        self.assertAlmostEqual(suite.aggregate(chat_results)["chatcore"], 0.1, places=12)


class TaskKindTest(unittest.TestCase):
    """Each CORE task kind end to end on the stand-ins (delimiter "": one token a character)."""

    def run_item(self, kind, item, start=5):
        task = core.CoreTask("t", "t", kind, 0, 0.5, list, delimiter="")
        cache = scoring.PrefixCache(BigramEngine())
        return core.evaluate_item(cache, CharTokenizer(), task, [item], 0, start)

    def test_multiple_choice(self):
        # "eab" and "eaaa" after the document start 5: the common prefix [5,4,0] is context;
        # "b": -log P(b|a) = 2 ln2; "aa": -log P(a|a) twice = ln2 each, mean ln2: the second wins.
        ok, detail = self.run_item("multiple_choice", {"query": "ea", "choices": ["b", "aa"], "gold": 1})
        self.assertTrue(ok)
        self.assertEqual(detail["pred"], 1)
        self.assertAlmostEqual(detail["losses"][0], 2 * LN2, places=12)
        self.assertAlmostEqual(detail["losses"][1], LN2, places=12)

    def test_schema(self):
        # "abd" and "dbd": the common suffix "bd" is scored: -log P(b|a) = 2 ln2 or -log P(b|d) = 5 ln2,
        # then -log P(d|b) = 4 ln2.
        ok, detail = self.run_item("schema", {"context_options": ["ab", "db"], "continuation": "d", "gold": 0})
        self.assertTrue(ok)
        self.assertAlmostEqual(detail["losses"][0], 3 * LN2, places=12)
        self.assertAlmostEqual(detail["losses"][1], 4.5 * LN2, places=12)

    def test_language_modeling(self):
        self.assertTrue(self.run_item("language_modeling", {"context": "ab ", "continuation": "bb"})[0])
        self.assertFalse(self.run_item("language_modeling", {"context": "ab", "continuation": "bc"})[0])

    def test_sequences(self):
        tok = CharTokenizer()
        tokens, starts, ends = core.sequences("multiple_choice", tok, ["abc", "abd", "abdd"], 5)
        self.assertEqual((starts, ends), ([3, 3, 3], [4, 4, 5]))
        # A choice that is the other's prefix keeps one scored token.
        tokens, starts, ends = core.sequences("multiple_choice", tok, ["ab", "abc"], None)
        self.assertEqual((starts, ends), ([1, 1], [2, 3]))
        tokens, starts, ends = core.sequences("schema", tok, ["fab", "cab"], None)
        self.assertEqual((starts, ends), ([1, 1], [3, 3]))
        tokens, starts, ends = core.sequences("language_modeling", tok, ["ab", "abcd"], 5)
        self.assertEqual((tokens, starts, ends), ([[5, 0, 1, 2, 3]], [3], [5]))


class LetterTokenizer(CharTokenizer):
    def encode(self, text):
        return [ord(c) - ord("A") if c.isupper() else ord(c) - ord("a") for c in text]


class ChatFormat:
    has_tools = True

    def turn(self, text, first, system=None):
        return LetterTokenizer().encode(text)


class ChatScorerTest(unittest.TestCase):
    def test_categorical(self):
        # The prompt ends in 'd' (3): P(A) = 1/32, P(B) = 1/32, P(C) = 1/16 among the letters.
        row = {"messages": [{"role": "user", "content": "abd"}], "letters": ["A", "B", "C"], "answer": "C"}
        cache = scoring.PrefixCache(BigramEngine())
        ok, detail = chat.categorical_item(cache, ChatFormat(), chat.LetterIds(LetterTokenizer()), row)
        self.assertEqual((ok, detail["pred"]), (True, "C"))
        row["answer"] = "A"
        self.assertFalse(chat.categorical_item(cache, ChatFormat(), chat.LetterIds(LetterTokenizer()), row)[0])

    def test_generative_gsm8k(self):
        from nfn.chat.session import ChatSession

        class Session(ChatSession):  # a real session's bookkeeping, a scripted reply
            def __init__(self, parts, context=4096):
                self.parts, self.cleared = parts, 0
                super().__init__(BigramEngine(max_seq_len=context), None, ChatFormat(), context)

            def clear(self):
                super().clear()
                self.cleared += 1

            def ask(self, text):
                return {"message": {"role": "assistant", "content": self.parts}, "stop_reason": "stop_token",
                        "tool_calls": [{"tool": "calculator"}]}

        from nfn.tasks.gsm8k import GSM8K
        task = GSM8K(stop=1)
        row = task[0]
        right = [{"type": "text", "text": "She has "}, {"type": "python", "text": "16-3-4"},
                 {"type": "python_output", "text": "9"}, {"type": "text", "text": f" left.\n#### {row['answer']}"}]
        session = Session(right)
        ok, detail = chat.generative_item(session, task, row)
        self.assertTrue(ok)
        self.assertEqual(session.cleared, 2)  # at its start, and for the item
        self.assertEqual(detail["reply"], f"She has 16-3-49 left.\n#### {row['answer']}")
        self.assertFalse(chat.generative_item(Session([{"type": "text", "text": "#### 0.5"}]), task, row)[0])
        # A question that leaves no room for an answer in the context is wrong, and never asked.
        question = len(ChatFormat().turn(row["messages"][0]["content"], True))
        self.assertEqual(chat.generative_item(Session(right, context=question), task, row), (False, {"too_long": True}))
        self.assertTrue(chat.generative_item(Session(right, context=question + 1), task, row)[0])


if __name__ == "__main__":
    unittest.main()

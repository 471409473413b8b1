"""Conversation rendering, checked against token layouts written out by hand."""
import shutil
import tempfile
import unittest

from nfn.chat.render import render_conversation, render_for_completion, shift_for_training
from nfn.errors import UserError
from nfn.tokenizers import bpe

TEXT = "\n".join(["hello there, how are you today? I am fine, thanks for asking."] * 200
                 + ["print(6*7) gives 42 and the answer is 42."] * 200)


class RenderTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.root = tempfile.mkdtemp()
        cls.tok = bpe.load_trained(bpe.train(TEXT.splitlines(), 320, "chat", cls.root))
        cls.sp = cls.tok.special_id

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.root)

    def expected(self, segments):
        """segments: (special token name or text, mask) in order -> (ids, mask)."""
        ids, mask = [], []
        for piece, m in segments:
            toks = [self.sp(piece)] if piece.startswith("<|") else self.tok.encode(piece)
            ids += toks
            mask += [m] * len(toks)
        return ids, mask

    def test_plain_conversation(self):
        conv = {"messages": [
            {"role": "user", "content": "hello there"},
            {"role": "assistant", "content": "I am fine"},
            {"role": "user", "content": "how are you?"},
            {"role": "assistant", "content": "thanks"}]}
        got = render_conversation(self.tok, conv)
        self.assertEqual(got, self.expected([
            ("<|bos|>", 0), ("<|user_start|>", 0), ("hello there", 0), ("<|user_end|>", 0),
            ("<|assistant_start|>", 0), ("I am fine", 1), ("<|assistant_end|>", 1),
            ("<|user_start|>", 0), ("how are you?", 0), ("<|user_end|>", 0),
            ("<|assistant_start|>", 0), ("thanks", 1), ("<|assistant_end|>", 1)]))

    def test_tool_call_and_system_prompt(self):
        conv = {"messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "6*7?"},
            {"role": "assistant", "content": [
                {"type": "text", "text": "Let me see. "},
                {"type": "python", "text": "6*7"},
                {"type": "python_output", "text": "42"},
                {"type": "text", "text": "It is 42."}]}]}
        got = render_conversation(self.tok, conv)
        self.assertEqual(got, self.expected([
            ("<|bos|>", 0), ("<|user_start|>", 0), ("Be brief.\n\n6*7?", 0), ("<|user_end|>", 0),
            ("<|assistant_start|>", 0), ("Let me see. ", 1),
            ("<|python_start|>", 1), ("6*7", 1), ("<|python_end|>", 1),
            ("<|output_start|>", 0), ("42", 0), ("<|output_end|>", 0),
            ("It is 42.", 1), ("<|assistant_end|>", 1)]))

    def test_crop(self):
        conv = {"messages": [{"role": "user", "content": "hello " * 50},
                             {"role": "assistant", "content": "fine"}]}
        full_ids, full_mask = render_conversation(self.tok, conv)
        ids, mask = render_conversation(self.tok, conv, max_tokens=10)
        self.assertEqual((ids, mask), (full_ids[:10], full_mask[:10]))

    def test_shift_by_hand(self):
        ids = [10, 11, 12, 13, 14]
        mask = [0, 0, 1, 1, 0]
        self.assertEqual(shift_for_training(ids, mask), ([10, 11, 12, 13], [-1, 12, 13, -1]))
        with self.assertRaises(ValueError):
            shift_for_training([1, 2], [1])

    def test_shift_counts_exactly_the_learned_tokens(self):
        conv = {"messages": [{"role": "user", "content": "hi"},
                             {"role": "assistant", "content": "hello there"}]}
        ids, mask = render_conversation(self.tok, conv)
        inputs, targets = shift_for_training(ids, mask)
        learned = [t for t in targets if t != -1]
        self.assertEqual(learned, self.tok.encode("hello there") + [self.sp("<|assistant_end|>")])
        self.assertEqual(inputs[-1], ids[-2])

    def test_render_for_completion(self):
        conv = {"messages": [{"role": "user", "content": "hello"},
                             {"role": "assistant", "content": "the answer"}]}
        want, _ = self.expected([("<|bos|>", 0), ("<|user_start|>", 0), ("hello", 0),
                                 ("<|user_end|>", 0), ("<|assistant_start|>", 0)])
        self.assertEqual(render_for_completion(self.tok, conv), want)
        conv["messages"].pop()  # ending on the user turn works too
        self.assertEqual(render_for_completion(self.tok, conv), want)
        self.assertEqual(len(conv["messages"]), 1)  # the caller's conversation is untouched
        for bad, needle in [({}, "'messages' list"), (None, "'messages' list"),
                            ({"messages": ["x"]}, "messages[0]: expected an object"),
                            ({"messages": [{"role": "user", "content": 3}]}, "field 'content'")]:
            with self.assertRaises(UserError) as ctx:
                render_for_completion(self.tok, bad)
            self.assertIn(needle, str(ctx.exception))

    def test_bad_conversations_name_the_message(self):
        cases = [
            ({"messages": []}, "'messages' is empty"),
            ({"messages": [{"role": "assistant", "content": "x"}]}, "messages[0]: field 'role'"),
            ({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]},
             "messages[1]: field 'role' is 'user', expected 'assistant'"),
            ({"messages": [{"role": "user", "content": 3}]}, "messages[0]: field 'content'"),
            ({"messages": [{"role": "user", "content": "a"},
                           {"role": "assistant", "content": [{"type": "shell", "text": "ls"}]}]},
             "messages[1].content[0]"),
            ({"messages": [{"role": "system", "content": "s"}]}, "no user message"),
            ([], "expected an object"),
        ]
        for conv, needle in cases:
            with self.subTest(needle=needle):
                with self.assertRaises(UserError) as ctx:
                    render_conversation(self.tok, conv)
                self.assertIn(needle, str(ctx.exception))


if __name__ == "__main__":
    unittest.main()

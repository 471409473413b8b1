"""A mixture's masked-row shards in the dataset cache: every row read back by the documented
layout (written out here) starts with BOS and holds whole rendered conversations then BOS
padding; every mask value follows the rendering rules, walked token by token here (1 on what the
assistant writes: its text, tool calls with their delimiters, <|assistant_end|>; 0 on BOS, user
turns, <|assistant_start|>, tool output and padding); the entry is reused while its inputs stay,
rebuilt when an identity file changes; a tokenizer without the chat tokens is one line."""
import json
import os
import shutil
import struct
import tempfile
import unittest

from nfn.errors import UserError
from nfn.sft import mixture, rows
from nfn.tokenizers import bpe

TEXT = "\n".join(["hello there, how are you today? I am fine, thanks for asking."] * 200
                 + ["print(6*7) gives 42 and the answer is 42. My name is Nimbus."] * 200)
ROW = 48


def read_rows(path):
    """(bos, [(ids, mask)]) of a masked-row shard by its documented layout (uint16 here)."""
    with open(path, "rb") as f:
        raw = f.read()
    magic, version, row_tokens, width, bos = struct.unpack("<5i", raw[:20])
    (count,) = struct.unpack("<q", raw[24:32])
    assert (magic, version, width) == (20261215, 1, 2) and len(raw) == 1024 + count * row_tokens * 3
    out = []
    for r in range(count):
        at = 1024 + r * row_tokens * 3
        ids = list(struct.unpack(f"<{row_tokens}H", raw[at: at + 2 * row_tokens]))
        out.append((ids, list(raw[at + 2 * row_tokens: at + 3 * row_tokens])))
    return bos, row_tokens, out


def rule_mask(ids, sp):
    """The mask the rules give each token, by walking the tokens: inside an assistant turn
    (after <|assistant_start|>, through <|assistant_end|>) 1, except tool output with its
    delimiters; everywhere else 0."""
    mask, in_assistant, in_output = [], False, False
    for t in ids:
        if t == sp("<|assistant_start|>"):
            mask.append(0)
            in_assistant = True
        elif t == sp("<|assistant_end|>"):
            mask.append(1)
            in_assistant = False
        elif t == sp("<|output_start|>"):
            mask.append(0)
            in_output = True
        elif t == sp("<|output_end|>"):
            mask.append(0)
            in_output = False
        else:
            mask.append(1 if in_assistant and not in_output else 0)
    return mask


class RowsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        os.environ["NFN_DATASETS_DIR"] = os.path.join(cls.tmp, "datasets")
        cls.tok = bpe.load_trained(bpe.train(TEXT.splitlines(), 320, "chat", os.path.join(cls.tmp, "tok")))
        cls.sp = cls.tok.special_id
        cls.file = os.path.join(cls.tmp, "talk.jsonl")
        convs = [
            [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": "My name is Nimbus."}],
            {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "6*7?"},
                          {"role": "assistant", "content": [
                              {"type": "text", "text": "Let me see. "}, {"type": "python", "text": "6*7"},
                              {"type": "python_output", "text": "42"}, {"type": "text", "text": "It is 42."}]},
                          {"role": "user", "content": "thanks"}, {"role": "assistant", "content": "fine"}]},
            [{"role": "user", "content": "how are you today? " * 6}, {"role": "assistant", "content": "fine " * 8}],
        ] + [[{"role": "user", "content": f"hi {i}"}, {"role": "assistant", "content": "hello"}] for i in range(9)]
        with open(cls.file, "w") as f:
            for c in convs:
                f.write(json.dumps(c) + "\n")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def build(self, spec, val_fraction=0.0):
        entries = mixture.ordered(mixture.parse(spec))
        key, doc = rows.key_of(entries, self.tok.identity(), ROW, val_fraction, 4)
        fmt = rows.chat_format(self.tok, "chat")
        return key, doc, rows.build(key, doc, mixture.Mixture(spec, val_fraction), self.tok, fmt, ROW, 4, quiet=True)

    def test_rows_hold_whole_conversations_with_the_rules_masks(self):
        spec = f"identity:{self.file}"
        _, _, entry = self.build(spec)
        bos, row_tokens, got = read_rows(entry["train_file"])
        self.assertEqual((bos, row_tokens, entry["val_file"]), (self.sp("<|bos|>"), ROW, None))
        pieces = []
        for ids, mask in got:
            self.assertEqual(ids[0], bos)
            self.assertEqual(mask, rule_mask(ids, self.sp), ids)
            # A conversation starts at each BOS; padding is lone BOS tokens after the last one.
            bounds = [i for i, t in enumerate(ids) if t == bos] + [len(ids)]
            pieces += [ids[a:b] for a, b in zip(bounds, bounds[1:]) if b - a > 1]
        m = mixture.Mixture(spec, 0)
        from nfn.chat.render import render_conversation
        want = [render_conversation(self.tok, m.conversation(ref), ROW)[0] for ref in m.train]  # cropped to a row
        self.assertEqual(sorted(pieces), sorted(want))
        # The tool call and its output are there, with their masks.
        tool = next(ids for ids, _ in got if self.sp("<|python_start|>") in ids)
        self.assertIn(self.sp("<|output_start|>"), tool)
        splits = entry["meta"]["splits"]["train"]
        self.assertEqual(splits["targets"], sum(sum(mk[1:]) for _, mk in got))
        self.assertEqual((splits["rows"], splits["conversations"]), (len(got), 12))

    def test_a_conversation_longer_than_a_row_is_cropped(self):
        path = os.path.join(self.tmp, "long.jsonl")
        with open(path, "w") as f:
            f.write(json.dumps([{"role": "user", "content": "hello there " * 40},
                                {"role": "assistant", "content": "fine"}]) + "\n")
        _, _, entry = self.build(f"identity:{path}")
        _, _, got = read_rows(entry["train_file"])
        self.assertEqual(len(got), 1)
        self.assertEqual(got[0][0][-1], self.tok.encode("hello there " * 40)[ROW - 3])  # its first ROW tokens
        self.assertEqual(sum(got[0][1]), 0)  # the answer cropped away: nothing to learn
        self.assertEqual(entry["meta"]["splits"]["train"]["cropped_conversations"], 1)

    def test_the_entry_is_reused_and_rebuilt_when_its_inputs_change(self):
        path = os.path.join(self.tmp, "again.jsonl")
        shutil.copy(self.file, path)
        spec = f"identity:{path}"
        key, doc, entry = self.build(spec, val_fraction=0.2)
        self.assertEqual(os.path.basename(entry["dir"]), key)
        self.assertEqual(rows.find_cached(key, doc)["train_file"], entry["train_file"])
        self.assertEqual(read_rows(entry["val_file"])[1], ROW)
        self.assertEqual(entry["meta"]["splits"]["val"]["conversations"], 2)
        with open(path, "a") as f:
            f.write(json.dumps([{"role": "user", "content": "one more"}, {"role": "assistant", "content": "ok"}]))
        key2, doc2 = rows.key_of(mixture.ordered(mixture.parse(spec)), self.tok.identity(), ROW, 0.2, 4)
        self.assertNotEqual(key2, key)
        self.assertIsNone(rows.find_cached(key2, doc2))
        # A damaged file is not trusted.
        with open(entry["train_file"], "ab") as f:
            f.write(b"x")
        self.assertIsNone(rows.find_cached(key, doc))
        # No work directory is left behind.
        self.assertEqual([n for n in os.listdir(os.path.dirname(entry["dir"])) if n.startswith(".nfn-")], [])

    def test_a_tokenizer_without_chat_tokens_is_one_line(self):
        class Plain:
            special_tokens = {"<|bos|>": 1, "<|assistant_start|>": 2}

            def special_id(self, token):
                return self.special_tokens[token]

        with self.assertRaises(UserError) as e:
            rows.chat_format(Plain(), "plain")
        self.assertTrue(str(e.exception).startswith("tokenizer plain has no <|user_start|> token: nanochat's chat "
                                                    "format needs all of <|bos|>"), str(e.exception))
        with self.assertRaisesRegex(UserError, "tokenizer gpt2 has no chat format"):
            rows.chat_format(object(), "gpt2")
        self.assertEqual(rows.chat_format(self.tok, "chat").name, "nanochat")


if __name__ == "__main__":
    unittest.main()

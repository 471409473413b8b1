"""nfn_native_train: family listing, dispatch to the dense GPT trainer, and the plan a
family or template resolves to (checked against llm.c's GPT-2 124M numbers)."""
import json
import os
import subprocess
import unittest

DISPATCHER = os.path.abspath(os.environ["NFN_DISPATCHER"])


def run(args):
    return subprocess.run([DISPATCHER] + args, capture_output=True, text=True, timeout=60)


def plan(args):
    proc = run(args + ["--dry-run"])
    if proc.returncode != 0:
        raise AssertionError(proc.stderr)
    return json.loads(proc.stdout)


class DispatcherTest(unittest.TestCase):
    def test_list_models(self):
        proc = run(["--list-models", "--json"])
        self.assertEqual(proc.returncode, 0, proc.stderr)
        models = {m["name"]: m for m in json.loads(proc.stdout)["models"]}
        for name in ("gpt", "gpt2", "gpt3"):
            self.assertEqual(models[name]["status"], "ready")
            self.assertEqual(models[name]["binary"], "nfn_gpt_native_train")
        for name in ("nanochat", "llama"):
            self.assertEqual(models[name]["status"], "ready")
            self.assertEqual(models[name]["binary"], f"nfn_{name}_native_train")
        self.assertEqual((models["nanogpt"]["status"], models["nanogpt"]["binary"], models["nanogpt"]["note"]),
                         ("ready", "nfn_gpt_native_train",
                          "nanoGPT checkpoints import into the dense GPT (nfn import --nanogpt)"))
        self.assertEqual(models["embedding"]["status"], "missing")
        self.assertIn("no trainer yet", models["embedding"]["reason"])

    def test_unknown_and_unbuilt_families(self):
        proc = run(["--base-model", "nope"])
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--model-family nope: unknown", proc.stderr)
        proc = run(["--base-model", "embedding", "--dry-run"])
        self.assertEqual(proc.returncode, 2)
        self.assertIn("--model-family embedding: no trainer yet", proc.stderr)

    def test_default_output_dir_is_the_familys(self):
        # $NFN_ARTIFACTS_DIR/<family>; its older name NEURALFN_ARTIFACTS_DIR where it is unset.
        base = {k: v for k, v in os.environ.items() if k not in ("NFN_ARTIFACTS_DIR", "NEURALFN_ARTIFACTS_DIR")}
        new, old = {"NFN_ARTIFACTS_DIR": "/somewhere/artifacts"}, {"NEURALFN_ARTIFACTS_DIR": "/older/artifacts"}
        for names, want in ((new, "/somewhere/artifacts"), (old, "/older/artifacts"),
                            (dict(new, **old), "/somewhere/artifacts")):
            for family in ("gpt", "gpt2", "gpt3", "nanogpt"):  # nanogpt: the dense GPT, as imported
                proc = subprocess.run([DISPATCHER, "--base-model", family, "--dry-run"], capture_output=True,
                                      text=True, timeout=60, env=dict(base, **names))
                self.assertEqual(proc.returncode, 0, proc.stderr)
                self.assertEqual(json.loads(proc.stdout)["output_dir"], f"{want}/{family}", names)

    def test_graph_file_family_is_the_models(self):
        graph = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "graph_gpt2.json")
        with open(graph, "w") as f:
            json.dump({"format": "nfn.manifest", "version": 1, "model_family": "gpt2",
                       "geometry": {"max_seq_len": 64, "vocab_size": 100, "padded_vocab_size": 128, "num_layers": 1,
                                    "num_heads": 2, "channels": 32}}, f)
        env = dict(os.environ, NFN_ARTIFACTS_DIR="/somewhere/artifacts")
        for base, code in (("gpt2", 0), ("gpt3", 2), (None, 0)):
            family = ["--base-model", base] if base else []  # none named: the manifest's
            proc = subprocess.run([DISPATCHER, *family, "--graph-file", graph, "--dry-run"],
                                  capture_output=True, text=True, timeout=60, env=env)
            self.assertEqual(proc.returncode, code, proc.stderr)
            if code == 0:
                p = json.loads(proc.stdout)
                self.assertEqual((p["model_family"], p["output_dir"]), ("gpt2", "/somewhere/artifacts/gpt2"))
            else:
                self.assertEqual(proc.stderr.strip(), f"nfn_gpt_native_train: error: --model-family gpt3 contradicts "
                                                      f"{graph}, whose model_family is gpt2; give one")

    def test_gpt2_124m_follows_llmc(self):
        p = plan(["--base-model", "gpt2", "--template-name", "gpt2-124m"])
        self.assertEqual(p["model_family"], "gpt2")
        self.assertEqual(p["parameters"], 124475904)  # llm.c's count with the vocabulary padded to 50304
        self.assertEqual(p["geometry"]["padded_vocab_size"], 50304)
        self.assertEqual(p["batch"], {"seq_len": 1024, "batch_size": 64, "train_batch_tokens": 524288,
                                      "grad_accum_steps": 8})
        s = p["schedule"]
        self.assertEqual((s["max_steps"], s["learning_rate"], s["warmup_steps"], s["weight_decay"],
                          s["eval_every_steps"]), (20000, 6e-4, 60, 0.1, 250))

    def test_template_recipes_follow_their_sources(self):
        # GPT-2's sizes as llm.c's scripts/run_gpt2_{350M,774M,1558M}.sh train them (-l, -d, -u,
        # -q); GPT-3's from the paper's Table 2.1 (layers, width, head size, learning rate,
        # tokens a step), a 2048 context, warmup over 375M tokens, cosine decay to 10%.
        M = 524288
        table = {  # template: (layers, channels, head size, context, lr, tokens a step, warmup, final, size)
            "gpt2-124m": (12, 768, 64, 1024, 6e-4, M, 60, 0.0, 124e6),
            "gpt2-350m": (24, 1024, 64, 1024, 3e-4, M, 700, 0.0, 350e6),
            "gpt2-774m": (36, 1280, 64, 1024, 2.5e-4, M, 700, 0.0, 774e6),
            "gpt2-1558m": (48, 1600, 64, 1024, 6e-4, 2 * M, 700, 0.1, 1558e6),
            "gpt3-125m": (12, 768, 64, 2048, 6e-4, M, 715, 0.1, 125e6),
            "gpt3-350m": (24, 1024, 64, 2048, 3e-4, M, 715, 0.1, 350e6),
            "gpt3-760m": (24, 1536, 96, 2048, 2.5e-4, M, 715, 0.1, 760e6),
            "gpt3-1.3b": (24, 2048, 128, 2048, 2e-4, 2 * M, 358, 0.1, 1.3e9),
            "gpt3-2.7b": (32, 2560, 80, 2048, 1.6e-4, 2 * M, 358, 0.1, 2.7e9),
        }
        proc = run(["--base-model", "gpt", "--template-name", "nope", "--dry-run"])  # the list the trainer knows
        known = proc.stderr.strip().split("(known: ")[1].rstrip(")").split(", ")
        self.assertEqual(sorted(known), sorted(list(table) + ["tiny"]))
        for template, (layers, channels, head, context, lr, tokens, warmup, final, size) in table.items():
            p = plan(["--base-model", template[:4], "--template-name", template])
            g, s = p["geometry"], p["schedule"]
            self.assertEqual((g["num_layers"], g["channels"], g["channels"] // g["num_heads"], g["max_seq_len"]),
                             (layers, channels, head, context), template)
            self.assertEqual((s["learning_rate"], p["batch"]["train_batch_tokens"], s["warmup_steps"],
                              s["final_lr_fraction"]), (lr, tokens, warmup, final), template)
            self.assertEqual((s["max_steps"], s["weight_decay"]), (20000, 0.1), template)
            self.assertLess(abs(p["parameters"] / size - 1), 0.03, template)  # the size its name says
            if template.startswith("gpt3-"):  # warmed up over 375M tokens
                self.assertEqual(warmup, round(375e6 / tokens), template)
        # a flag still wins over the recipe
        s = plan(["--base-model", "gpt3", "--template-name", "gpt3-760m", "--learning-rate", "1e-4",
                  "--final-lr-fraction", "0"])["schedule"]
        self.assertEqual((s["learning_rate"], s["final_lr_fraction"], s["decay"]), (1e-4, 0, "cosine to zero"))
        # a manifest's template brings its recipe
        graph = os.path.join(os.environ.get("TEST_TMPDIR", "/tmp"), "graph_gpt3_760m.json")
        with open(graph, "w") as f:
            json.dump({"format": "nfn.manifest", "version": 1, "model_family": "gpt3", "template": "gpt3-760m",
                       "geometry": {"max_seq_len": 2048, "vocab_size": 50257, "padded_vocab_size": 50304,
                                    "num_layers": 24, "num_heads": 16, "channels": 1536}}, f)
        p = plan(["--base-model", "gpt3", "--graph-file", graph])
        self.assertEqual((p["template"], p["schedule"]["learning_rate"], p["schedule"]["warmup_steps"]),
                         ("gpt3-760m", 2.5e-4, 715))

    def test_recipe_micro_batch_fits_an_80gb_gpu(self):
        # llm.c's 64 rows, halved until the model's state and the activations take 64 GiB in
        # bf16; the optimizer step stays the recipe's (the rest is accumulation). GPT-2 124M's
        # block at micro-batch 64:
        # 124,475,904 parameters x 16 bytes of state (bf16 parameters and gradients, f32 master
        # and moments) is 1.85 GiB; 16 values a token a layer are kept for the backward (ln1,
        # qkv 3, atty, residual2, ln2, fch 4, fch_gelu 4, residual3), 12 x 65,536 x 768 x 16 x 2
        # bytes = 18.0 GiB; 8 values a token more, not per layer (the embedding, the final norm,
        # the backward's scratch), the norms' statistics and the softmax sums make 20.65 GiB.
        for template, batch, accum in (("gpt2-124m", 64, 8), ("gpt2-350m", 64, 8), ("gpt2-774m", 32, 16),
                                       ("gpt2-1558m", 16, 64), ("gpt3-125m", 64, 4), ("gpt3-350m", 32, 8),
                                       ("gpt3-760m", 16, 16), ("gpt3-1.3b", 8, 64), ("gpt3-2.7b", 4, 128)):
            p = plan(["--base-model", "gpt2", "--template-name", template])
            self.assertEqual((p["batch"]["batch_size"], p["batch"]["grad_accum_steps"]), (batch, accum), template)
            self.assertLessEqual(p["memory_gib"]["bf16"], 64, template)
            if batch < 64:  # twice the rows would not have fitted
                self.assertGreater(p["memory_gib"]["bf16"] * 2 - p["parameters"] * 16 / 2**30, 64, template)
        self.assertEqual(plan(["--base-model", "gpt2", "--template-name", "gpt2-124m"])["memory_gib"],
                         {"bf16": 20.65, "f32": 39.4})
        # the flag still wins, and the size follows it
        p = plan(["--base-model", "gpt2", "--template-name", "gpt2-1558m", "--batch-size", "32"])
        self.assertEqual((p["batch"]["batch_size"], p["batch"]["grad_accum_steps"]), (32, 32))
        self.assertGreater(p["memory_gib"]["bf16"], 64)

    def test_recompute_shrinks_the_block_by_what_it_recomputes(self):
        # GPT-2 124M at micro-batch 64 in bf16. --recompute attention keeps one layer's copy,
        # not 12, of ln1, qkv (3), atty and residual2 (6 values a token at 2 bytes), ln1's mean
        # and rstd and the attention's log-sum-exp of each head (f32); mlp of ln2, fch (4) and
        # fch_gelu (4) (9 values) and ln2's mean and rstd; all of both.
        L, C, NH, N = 12, 768, 12, 64 * 1024
        attention = (L - 1) * N * (6 * C * 2 + 2 * 4 + NH * 4)
        mlp = (L - 1) * N * (9 * C * 2 + 2 * 4)
        args = ["--base-model", "gpt2", "--template-name", "gpt2-124m"]
        none = plan(args)
        self.assertEqual((none["recompute"], none["memory_gib"]["bf16"], none["activation_gib"]["bf16"]),
                         ("none", 20.65, 18.8))
        for mode, saved in (("attention", attention), ("mlp", mlp), ("all", attention + mlp)):
            p = plan(args + ["--recompute", mode])
            self.assertEqual((p["recompute"], p["batch"]["batch_size"]), (mode, 64))
            for key in ("memory_gib", "activation_gib"):  # each rounded to 0.01
                self.assertAlmostEqual(none[key]["bf16"] - p[key]["bf16"], saved / 2**30, delta=0.0101, msg=mode)
        self.assertEqual(plan(args + ["--recompute", "all"])["memory_gib"]["bf16"], 5.14)
        # The recipe's micro-batch is the one that keeps every activation; with --recompute all,
        # 774M and 1558M would fit llm.c's 64 rows in the same 64 GiB (docs/training.md).
        for template, batch in (("gpt2-774m", 32), ("gpt2-1558m", 16)):
            args = ["--base-model", "gpt2", "--template-name", template, "--recompute", "all"]
            self.assertEqual(plan(args)["batch"]["batch_size"], batch)
            self.assertLessEqual(plan(args + ["--batch-size", "64"])["memory_gib"]["bf16"], 64, template)

    def test_demo_schedule_follows_the_vocabulary(self):
        def schedule(args):
            p = plan(["--base-model", "gpt"] + args)
            s = p["schedule"]
            return p["template"], p["batch"]["batch_size"], s["max_steps"], s["learning_rate"], s["warmup_steps"]
        # sp1024 (what `nfn train` gives the demo) and up to 8192: the longer schedule
        self.assertEqual(schedule(["--vocab-size", "1024"]), ("tiny", 16, 1000, 2e-3, 50))
        self.assertEqual(schedule(["--vocab-size", "8192"]), ("tiny", 16, 1000, 2e-3, 50))
        # GPT-2's vocabulary: the LM head dominates, so fewer and smaller steps
        self.assertEqual(schedule([]), ("tiny", 8, 300, 1e-3, 20))
        self.assertEqual(schedule(["--vocab-size", "8193"]), ("tiny", 8, 300, 1e-3, 20))
        # flags still win over either
        self.assertEqual(schedule(["--vocab-size", "1024", "--max-steps", "7", "--batch-size", "4"]),
                         ("tiny", 4, 7, 2e-3, 50))

    def test_gpt3_context(self):
        self.assertEqual(plan(["--base-model", "gpt3"])["geometry"]["max_seq_len"], 2048)
        self.assertEqual(plan(["--base-model", "gpt3", "--train-seq-len", "512"])["batch"]["seq_len"], 512)
        self.assertEqual(plan(["--base-model", "gpt3", "--template-name", "gpt2-124m"])["geometry"]["max_seq_len"],
                         1024)
        self.assertEqual(plan(["--base-model", "gpt"])["geometry"]["max_seq_len"], 128)


if __name__ == "__main__":
    unittest.main()

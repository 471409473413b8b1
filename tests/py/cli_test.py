"""The `nfn` command line: help paths stay import-light, errors follow argparse, the Bazel
launcher runs the built package, and `nfn kernels list` reports the op registry."""
import json
import os
import subprocess
import sys
import unittest

from nfn_probe import run_nfn

HELP_PATHS = [
    ["--help"],
    ["train", "--help"],
    ["sft", "--help"],
    ["rl", "--help"],
    ["infer", "--help"],
    ["eval", "--help"],
    ["report", "--help"],
    ["import", "--help"],
    ["export", "--help"],
    ["chat", "--help"],
    ["serve", "--help"],
    ["bench", "--help"],
    ["bench", "infer", "--help"],
    ["kernels", "--help"],
    ["kernels", "bench", "--help"],
    ["kernels", "examples", "--help"],
    ["data", "--help"],
    ["data", "prepare", "--help"],
    ["tokenizer", "--help"],
    ["tool", "--help"],
]

# What a help path may import from nfn: the package, its errors and the parsers.
# nfn.train.flags reads the trainer's flag table, standard library only.
ALLOWED_NFN = ("nfn", "nfn.errors", "nfn.cli", "nfn.train", "nfn.train.flags")


def interpreter_baseline():
    """Modules a bare interpreter imports at start-up (site hooks, .pth files): not nfn's doing."""
    proc = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps(sorted(sys.modules)))"],
                          capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(proc.stdout))


BASELINE = interpreter_baseline()


def heavy_modules(modules):
    """Every module nfn imported outside the standard library and nfn's parser layer."""
    bad = []
    for name in modules:
        if name in BASELINE:
            continue
        top = name.split(".")[0]
        if top == "nfn":
            if not (name in ALLOWED_NFN or name.startswith("nfn.cli.")):
                bad.append(name)
        elif top not in sys.stdlib_module_names and top not in ("__main__", "_distutils_hack"):
            bad.append(name)
    return bad


class HelpPathsTest(unittest.TestCase):
    def test_help_imports_only_the_standard_library(self):
        for args in HELP_PATHS:
            with self.subTest(args=args):
                code, out, err, modules = run_nfn(args)
                self.assertEqual(code, 0, err)
                self.assertIn("usage: nfn", out)
                self.assertEqual(heavy_modules(modules), [])
                self.assertNotIn("numpy", modules)
                self.assertNotIn("nfn._native", modules)

    def test_probe_catches_a_heavy_import(self):
        # The guard itself must fail when something heavy sneaks in.
        self.assertEqual(heavy_modules(["json", "numpy", "numpy.core"]), ["numpy", "numpy.core"])
        self.assertEqual(heavy_modules(["nfn", "nfn.cli.main", "nfn.kernels.registry"]),
                         ["nfn.kernels.registry"])
        self.assertEqual(heavy_modules(["nfn._native"]), ["nfn._native"])

    def test_train_help_lists_the_trainer_flags(self):
        _, out, _, _ = run_nfn(["train", "--help"])
        for flag in ["--base-model", "--dataset", "--tokenizer", "--train-batch-tokens",
                     "--backend", "--resume", "--print-command", "--json"]:
            self.assertIn(flag, out)


class ErrorsTest(unittest.TestCase):
    def test_unknown_command_is_a_usage_error(self):
        code, _, err, _ = run_nfn(["frobnicate"])
        self.assertEqual(code, 2)
        self.assertIn("invalid choice: 'frobnicate'", err)

    def test_unknown_flag_is_a_usage_error(self):
        code, _, err, _ = run_nfn(["train", "--no-such-flag"])
        self.assertEqual(code, 2)
        self.assertIn("unrecognized arguments: --no-such-flag", err)

    def test_missing_command_is_a_usage_error(self):
        code, _, err, _ = run_nfn([])
        self.assertEqual(code, 2)
        self.assertIn("the following arguments are required: COMMAND", err)

    def test_user_error_is_one_line_and_exit_1(self):
        code, out, err, _ = run_nfn(["infer", "--checkpoint", "/nonexistent/x", "--prompt", "hi"],
                                    env={"NFN_ARTIFACTS_DIR": "/nonexistent"})
        self.assertEqual(code, 1)
        self.assertEqual(err.strip(), "nfn infer: error: checkpoint /nonexistent/x: not a file, a directory, "
                                      "or an artifact name under /nonexistent")
        self.assertEqual(out.strip(), "")


class LauncherTest(unittest.TestCase):
    def test_bazel_launcher_uses_the_built_package(self):
        # The real `bazel run //py:nfn` entry point must find generated files (the registry),
        # which exist only in the built tree, not in the source tree.
        proc = subprocess.run([os.environ["NFN_CLI"], "kernels", "list"], capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.returncode, 0, proc.stderr)
        self.assertTrue(proc.stdout.startswith("op "), proc.stdout)


class KernelsListTest(unittest.TestCase):
    def test_json_schema(self):
        code, out, err, modules = run_nfn(["kernels", "list", "--json"])
        self.assertEqual(code, 0, err)
        self.assertNotIn("numpy", modules)
        self.assertNotIn("nfn._native", modules)
        reg = json.loads(out)
        self.assertEqual(reg["backends"], ["cpu", "cuda"])
        names = [op["name"] for op in reg["ops"]]
        self.assertIn("sum_squares_many", names)
        for op in reg["ops"]:
            self.assertEqual(set(op), {"name", "category", "dtypes", "backends", "support"})
            for backend in reg["backends"]:
                self.assertEqual(set(op["support"][backend]), set(op["dtypes"]))
                for cell in op["support"][backend].values():
                    self.assertIs(type(cell["supported"]), bool)
                    self.assertEqual(cell["reason"] is None, cell["supported"])

    def test_table(self):
        code, out, err, _ = run_nfn(["kernels", "list"])
        self.assertEqual(code, 0, err)
        header, *rows = out.splitlines()
        self.assertEqual(header.split(), ["op", "category", "cpu", "cuda"])
        fill = next(r for r in rows if r.startswith("fill "))
        self.assertEqual(fill.split(), ["fill", "memory", "f32", "bf16", "f32", "bf16"])


if __name__ == "__main__":
    unittest.main()

"""The op examples (cc/examples): each one, built by Bazel, runs against the real CPU library
and the CUDA library's kernels under the emulator, and what it prints is checked against
float64 numpy computed here from the inputs it prints. `nfn kernels examples` lists one
example a category of nfn_ops.def, and what --write writes builds with its Makefile into
programs that print the same."""
import os
import re
import shutil
import subprocess
import tempfile
import unittest

import numpy as np

from nfn.kernels import examples, registry
from nfn_probe import run_nfn

LIBRARIES = {"cpu": os.path.abspath(os.environ["NFN_CPU_OPS_LIB"]),
             "cuda": os.path.abspath(os.environ["NFN_EMULATED_CUDA_OPS_LIB"])}
BINARIES = {os.path.basename(path): os.path.abspath(path) for path in os.environ["NFN_EXAMPLES"].split()}
LINE = re.compile(r"^([a-z_0-9]+):((?: \S+)*)$")


def run_example(name, library):
    proc = subprocess.run([BINARIES[name], library], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        raise AssertionError(f"{name} exited {proc.returncode}: {proc.stderr}")
    return proc.stdout


def parse(text):
    """name -> float64 array of every `name: v v v` line (comment lines start with #)."""
    out = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = LINE.match(line)
        if not m:
            raise AssertionError(f"not a `name: values` line: {line!r}")
        out[m.group(1)] = np.array([float(v) for v in m.group(2).split()], dtype=np.float64)
    return out


def gelu(x):
    return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))


def gelu_grad(x):
    s = np.sqrt(2 / np.pi)
    t = np.tanh(s * (x + 0.044715 * x**3))
    return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * s * (1 + 3 * 0.044715 * x * x)


def bf16_round(x):
    """f32 to bf16 and back, rounding to nearest even, on the bits."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16
    return u.astype(np.uint32).view(np.float32).astype(np.float64)


def softmax(z):
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def expect_memory(v):
    return {"bf16_roundtrip": bf16_round(v["src"]), "filled": np.full(len(v["src"]), 0.25), "widened": v["ids"]}


def expect_embedding(v):
    T, C = 3, 4
    tokens, wte, wpe, dout = v["tokens"].astype(int), v["wte"].reshape(-1, C), v["wpe"].reshape(T, C), \
        v["dout"].reshape(T, C)
    dwte = np.zeros_like(wte)
    np.add.at(dwte, tokens, dout)
    return {"out": wte[tokens] + wpe, "dwte": dwte, "dwpe": dout}


def expect_norm(v):
    x, w, b = v["x"].reshape(2, 5), v["weight"], v["bias"]
    mean, var = x.mean(axis=1), x.var(axis=1)
    rstd = 1 / np.sqrt(var + 1e-5)
    rms_rstd = 1 / np.sqrt((x * x).mean(axis=1) + 1e-5)
    return {"layernorm": (x - mean[:, None]) * rstd[:, None] * w + b, "mean": mean, "rstd": rstd,
            "rmsnorm": x * rms_rstd[:, None] * w, "rms_rstd": rms_rstd}


def expect_linear(v):
    inp, w, dout = v["inp"].reshape(2, 3), v["weight"].reshape(4, 3), v["dout"].reshape(2, 4)
    pre = inp @ w.T + v["bias"]
    return {"pre": pre, "out": gelu(pre), "dinp": dout @ w, "dweight": dout.T @ inp, "dbias": dout.sum(axis=0)}


def expect_activation(v):
    return {"gelu": gelu(v["x"]), "dinp": v["dout"] * gelu_grad(v["x"])}


def expect_elementwise(v):
    return {"out": v["residual"].reshape(2, 3) + v["inp"].reshape(2, 3) + v["bias"]}


def expect_attention(v):
    T, NH, NKV, HD, W = 4, 2, 1, 2, 2
    qkv = v["qkv"].reshape(T, NH + 2 * NKV, HD)  # q heads, then k heads, then v heads
    t = np.arange(T)
    hidden = (t[None, :] > t[:, None]) | (t[None, :] < t[:, None] - W)  # key j of row t: causal, window W
    out, lse = np.zeros((T, NH * HD)), np.zeros((NH, T))
    for h in range(NH):
        kv = h // (NH // NKV)
        q, k, val = qkv[:, h], qkv[:, NH + kv], qkv[:, NH + NKV + kv]
        scores = np.where(hidden, -np.inf, q @ k.T / np.sqrt(HD))
        top = scores.max(axis=1, keepdims=True)
        lse[h] = (top + np.log(np.exp(scores - top).sum(axis=1, keepdims=True)))[:, 0]
        out[:, h * HD:(h + 1) * HD] = softmax(scores) @ val
    return {"out": out, "lse": lse, "out_kv_cached": out}


def expect_softmax(v):
    return {"probs": softmax(v["logits"].reshape(2, 4)[:, :3])}


def expect_loss(v):
    V, C, scale = 5, 4, 0.5
    targets, x, wte = v["targets"].astype(int), v["x"].reshape(-1, C), v["wte"].reshape(-1, C)
    p = softmax(x @ wte[:V].T)
    live = targets >= 0
    losses = np.where(live, -np.log(p[np.arange(len(targets)), np.maximum(targets, 0)]), 0)
    dlogits = p.copy()
    dlogits[np.arange(len(targets)), np.maximum(targets, 0)] -= 1
    dlogits = dlogits * scale * live[:, None]
    dwte = np.zeros_like(wte)
    dwte[:V] = dlogits.T @ x
    return {"losses": losses, "loss_sum": losses.sum(), "dx": dlogits @ wte[:V], "dwte": dwte}


def expect_reduction(v):
    return {"sum_squares": (v["a"] ** 2).sum() + (v["b"] ** 2).sum()}


def expect_optimizer(v):
    p, g = v["param"].copy(), v["grad"]
    g = g * min(1.0, 1.0 / np.sqrt((g * g).sum()))
    m, s, out = np.zeros_like(p), np.zeros_like(p), {}
    for t in (1, 2):
        m = 0.9 * m + 0.1 * g
        s = 0.95 * s + 0.05 * g * g
        p = p - 0.01 * (m / (1 - 0.9**t) / (np.sqrt(s / (1 - 0.95**t)) + 1e-8) + 0.1 * p)
        out[f"param_step{t}"] = p
    return dict(out, m=m, v=s)


def expect_graph(v, backend):
    return {"x": 4 * v["inp"], "recorded": [1 if backend == "cuda" else 0]}  # the CPU library has no graphs


def expect_event(v):
    return {"done": [1], "host": np.full(4, 2.5), "timed": [1]}


EXPECT = {"memory": expect_memory, "embedding": expect_embedding, "norm": expect_norm, "linear": expect_linear,
          "activation": expect_activation, "elementwise": expect_elementwise, "attention": expect_attention,
          "softmax": expect_softmax, "loss": expect_loss, "reduction": expect_reduction,
          "optimizer": expect_optimizer, "graph": expect_graph, "event": expect_event}


class ExamplesRunTest(unittest.TestCase):
    def check(self, name, backend, text):
        got = parse(text)
        reference = EXPECT[name](got, backend) if name == "graph" else EXPECT[name](got)
        for key, want in reference.items():
            np.testing.assert_allclose(got[key], np.ravel(want), rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name} {key} on {backend}")

    def test_every_example_against_numpy(self):
        for backend, library in LIBRARIES.items():
            for name in EXPECT:
                with self.subTest(example=name, backend=backend):
                    text = run_example(name, library)
                    self.assertTrue(text.startswith(f"# {backend} library, device "), text)
                    self.check(name, backend, text)

    def test_a_missing_library_is_one_line(self):
        proc = subprocess.run([BINARIES["linear"], "/nonexistent/ops.so"], capture_output=True,
                              text=True, timeout=60)
        self.assertEqual(proc.returncode, 1)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
        self.assertIn("/nonexistent/ops.so: cannot load op library", proc.stderr)


class ExamplesCommandTest(unittest.TestCase):
    def test_one_example_a_category(self):
        bundle = examples.load()
        categories = {op["category"] for op in registry.load()["ops"]}
        self.assertEqual(sorted(e["category"] for e in bundle["examples"]), sorted(categories))
        self.assertEqual({e["name"] for e in bundle["examples"]}, set(EXPECT))
        self.assertEqual(set(BINARIES), set(EXPECT))  # Bazel builds each one
        code, out, err, modules = run_nfn(["kernels", "examples"])
        self.assertEqual(code, 0, err)
        self.assertNotIn("numpy", modules)
        header, *rows = out.splitlines()
        self.assertEqual(header.split(), ["name", "category", "shows"])
        listed = [row.split()[:2] for row in rows if not row.startswith(" ")]
        self.assertEqual(listed, [[e["name"], e["category"]] for e in bundle["examples"]])

    def test_written_examples_build_and_print_the_same(self):
        with tempfile.TemporaryDirectory() as tmp:
            out_dir = os.path.join(tmp, "examples")
            code, out, err, _ = run_nfn(["kernels", "examples", "--write", "--output-dir", out_dir])
            self.assertEqual(code, 0, err)
            self.assertIn(f"make -C {out_dir}", out)
            for rel in ("Makefile", "cc/examples/example.h", "cc/ops/op_library.cc", "cc/ops/nfn_tile_ops.h",
                        "cc/ops/nfn_ops.def"):
                self.assertTrue(os.path.isfile(os.path.join(out_dir, rel)), rel)
            make = shutil.which("make")
            self.assertIsNotNone(make, "make is needed to build the written examples (tools/bootstrap.sh)")
            run_all = [make, "-s", "--no-print-directory", "-C", out_dir, "-j2", "run", f"LIB={LIBRARIES['cpu']}"]
            proc = subprocess.run(run_all, capture_output=True, text=True, timeout=600)
            self.assertEqual(proc.returncode, 0, proc.stdout + proc.stderr)
            runs = re.split(r"^== (\w+)\n", proc.stdout, flags=re.M)[1:]
            self.assertEqual(sorted(runs[0::2]), sorted(EXPECT))
            for name, text in zip(runs[0::2], runs[1::2]):
                self.assertEqual(text, run_example(name, LIBRARIES["cpu"]), name)
            # A second write over the first refuses, naming a file it would overwrite.
            code, _, err, _ = run_nfn(["kernels", "examples", "--write", "--output-dir", out_dir])
            self.assertEqual(code, 1)
            self.assertEqual(len(err.strip().splitlines()), 1, err)
            self.assertIn(f"{out_dir}{os.sep}", err)
            self.assertIn("exists; write the examples to a new or empty directory", err)

    def test_write_needs_a_directory(self):
        for args in (["--write"], ["--output-dir", "/tmp/x"]):
            code, out, err, _ = run_nfn(["kernels", "examples", *args])
            self.assertEqual(code, 1, args)
            self.assertEqual(err.strip(), "nfn kernels: error: --write and --output-dir DIR go together "
                                          "(without them: the list)")


if __name__ == "__main__":
    unittest.main()

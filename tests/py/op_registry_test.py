"""The op registry generator: rows from the ABI table, unsupported cells with reasons, and a
clear error naming file and line for a malformed table. Also: every op the registry lists
for the CPU is a symbol the built CPU library exports (the listing cannot drift)."""
import ctypes
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
import gen_op_registry  # noqa: E402

from nfn.kernels import registry  # noqa: E402

OPS = '''/* a comment with NFN_OP(fake, x, "f32", ()) inside is ignored */
NFN_OP(fill, memory, "f32 bf16",
       (nfn_ctx* ctx, void* dst))
NFN_OP(attn, attention, "bf16", (nfn_ctx* ctx))
'''


def write(tmp, name, text):
    path = os.path.join(tmp, name)
    with open(path, "w") as f:
        f.write(text)
    return path


class GeneratorTest(unittest.TestCase):
    def generate(self, ops_text, support_text, abi_text="#define NFN_ABI_VERSION 42\n"):
        with tempfile.TemporaryDirectory() as tmp:
            ops = write(tmp, "ops.def", ops_text)
            sup = write(tmp, "cuda.def", support_text)
            cpu = write(tmp, "cpu.def", "")
            abi = write(tmp, "abi.h", abi_text)
            out = os.path.join(tmp, "out.json")
            gen_op_registry.main(["--ops", ops, "--abi", abi, "--backend", f"cpu={cpu}",
                                  "--backend", f"cuda={sup}", "--out", out])
            with open(out) as f:
                return json.load(f)

    def test_rows_and_reasons(self):
        reg = self.generate(OPS, 'NFN_UNSUPPORTED(fill, bf16, "no bf16 fill yet")\n'
                                 'NFN_UNSUPPORTED(attn, *, "needs sm_90")\n')
        self.assertEqual(reg["abi_version"], 42)
        fill, attn = reg["ops"]
        self.assertEqual((fill["name"], fill["category"], fill["dtypes"]), ("fill", "memory", ["f32", "bf16"]))
        self.assertEqual(fill["support"]["cuda"]["bf16"], {"supported": False, "reason": "no bf16 fill yet"})
        self.assertEqual(fill["support"]["cuda"]["f32"], {"supported": True, "reason": None})
        self.assertEqual(fill["backends"], ["cpu", "cuda"])
        self.assertEqual(attn["backends"], ["cpu"])
        self.assertEqual(attn["support"]["cuda"]["bf16"]["reason"], "needs sm_90")
        self.assertIn("attn on cuda (bf16): needs sm_90", registry.format_table(reg))
        # Counts per dtype: fill (f32, bf16) and attn (bf16) on each backend.
        self.assertEqual(reg["by_dtype"], {
            "cpu": {"f32": {"supported": 1, "unsupported": 0}, "bf16": {"supported": 2, "unsupported": 0}},
            "cuda": {"f32": {"supported": 1, "unsupported": 0}, "bf16": {"supported": 0, "unsupported": 2}}})
        self.assertIn("cuda: f32 1/1, bf16 0/2", registry.format_table(reg))

    def test_unknown_op_in_support_file_names_file_and_line(self):
        with self.assertRaises(SystemExit) as cm:
            self.generate(OPS, '\n\nNFN_UNSUPPORTED(nope, f32, "x")\n')
        self.assertRegex(str(cm.exception), r"cuda\.def:3: unknown op 'nope'")

    def test_unknown_dtype_is_rejected(self):
        with self.assertRaises(SystemExit) as cm:
            self.generate(OPS, 'NFN_UNSUPPORTED(attn, f32, "x")\n')
        self.assertIn("op attn has no dtype 'f32'", str(cm.exception))

    def test_the_abi_version_must_be_defined_once(self):
        for text in ("", "#define NFN_ABI_VERSION 1\n#define NFN_ABI_VERSION 2\n"):
            with self.assertRaises(SystemExit) as cm:
                self.generate(OPS, "", text)
            self.assertIn("expected one '#define NFN_ABI_VERSION N' line", str(cm.exception))

    def test_malformed_op_line_is_rejected(self):
        with self.assertRaises(SystemExit) as cm:
            self.generate("NFN_OP(fill, memory, (nfn_ctx* ctx))\n", "")
        self.assertIn("does not match", str(cm.exception))


class BuiltRegistryTest(unittest.TestCase):
    def test_cpu_library_exports_every_listed_op(self):
        lib_path = os.environ["NFN_CPU_OPS_LIB"]
        lib = ctypes.CDLL(os.path.abspath(lib_path))
        reg = registry.load()
        lib.nfn_abi_version.restype = ctypes.c_int
        self.assertEqual(reg["abi_version"], lib.nfn_abi_version())  # the header's, as the library says
        self.assertGreater(len(reg["ops"]), 0)
        # Every dtype an op lists but a backend lacks has its reason.
        gaps = [(op["name"], b, d, cell["reason"]) for op in reg["ops"] for b, cells in op["support"].items()
                for d, cell in cells.items() if not cell["supported"]]
        self.assertTrue(gaps and all(isinstance(r, str) and r.strip() for *_, r in gaps), gaps)
        for op in reg["ops"]:
            if "cpu" in op["backends"]:
                self.assertTrue(hasattr(lib, "nfn_" + op["name"]), op["name"])


if __name__ == "__main__":
    unittest.main()

"""ptxas's resource usage for every kernel of the CUDA op library (nvcc --resource-usage,
kept by tools/cuda.bzl beside each object): no kernel of the tensor-core attention (flash_mma)
spills or uses a stack frame on sm_90a or sm_120, the ThunderKittens attention kernels (when
the library was built with a ThunderKittens tree; sm_90a only) do not spill, none needs more
than 255 registers, none declares more than 48 KiB of static shared memory, and the norm kernels
that hold a row's packs in registers do not spill. Spills there are silent slowdowns a
GPU-less machine can still catch. The decoder's kernels (rotary embeddings, ReLU², SwiGLU,
soft-capping, scaled sums, gated adds, QK-norm, the LM head's cross-entropy with and without
its soft-cap) do not spill or use a stack frame either. The table of every kernel is printed."""
import re
import shutil
import subprocess
import sys
import unittest

LOGS = sys.argv[1:]
ENTRY = re.compile(r"Compiling entry function '(\S+)' for '(\w+)'")
PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
USED = re.compile(r"Used (\d+) registers(?:.*?(\d+) bytes smem)?")


def demangle(names):
    if not shutil.which("c++filt"):
        return names
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.splitlines()
    # keep the function's name and template arguments, drop namespaces and the parameter list
    short = []
    for full in out:
        head = full.replace("(anonymous namespace)::", "").removeprefix("void ").split("(")[0]
        short.append(head.split("::")[-1] or full)
    return short


def kernels():
    """{(mangled name, arch): {"stack", "spill_stores", "spill_loads", "registers", "smem"}}."""
    found = {}
    for path in LOGS:
        current = None
        with open(path) as f:
            for line in f:
                if m := ENTRY.search(line):
                    current = (m.group(1), m.group(2))
                    found[current] = {"file": path.rsplit("/", 1)[-1].split(".")[0]}
                elif current and (m := PROPS.search(line)):
                    found[current].update(stack=int(m.group(1)), spill_stores=int(m.group(2)),
                                          spill_loads=int(m.group(3)))
                elif current and (m := USED.search(line)):
                    found[current].update(registers=int(m.group(1)), smem=int(m.group(2) or 0))
                    current = None
    return found


class ResourceUsageTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.found = kernels()
        keys = sorted(cls.found)
        cls.names = dict(zip(keys, demangle([k[0] for k in keys])))
        print(f"{'kernel':58} {'arch':7} {'regs':>4} {'spill':>6} {'smem':>6}")
        for key in sorted(keys, key=lambda k: (cls.found[k]["file"], cls.names[k], k[1])):
            r = cls.found[key]
            print(f"{(r['file'] + ': ' + cls.names[key])[:58]:58} {key[1]:7} {r['registers']:4} "
                  f"{r['spill_stores'] + r['spill_loads']:6} {r['smem']:6}")

    def assert_no_stack_or_spills(self, keys):
        for key in keys:
            r = self.found[key]
            self.assertEqual((r["stack"], r["spill_stores"], r["spill_loads"]), (0, 0, 0),
                             f"{self.names[key]} on {key[1]}")

    def test_every_kernel_was_read(self):
        archs = {arch for _, arch in self.found}
        self.assertEqual(archs, {"sm_90a", "sm_120"})
        for key, r in self.found.items():
            self.assertIn("registers", r, key)
            self.assertIn("spill_stores", r, key)
        mma = [k for k in self.found if "mma_path" in k[0]]
        # forward, dkdv and dq at head sizes 16, 32, ..., 128, dq at 128 also single-buffered, two archs
        self.assertEqual(len(mma), 2 * (8 * 3 + 1))

    def test_tensor_core_attention_does_not_spill(self):
        for key, r in self.found.items():
            if "mma_path" in key[0]:
                self.assertEqual((r["stack"], r["spill_stores"], r["spill_loads"]), (0, 0, 0),
                                 f"{self.names[key]} on {key[1]}")

    def test_thunderkittens_attention_does_not_spill(self):
        tk = [k for k in self.found if self.found[k]["file"] == "attention_tk"]
        if not tk:
            self.skipTest("the library was built without a ThunderKittens tree")
        # forward, dkdv and dq at head sizes 64 and 128, sm_90a only
        self.assertEqual(sorted(arch for _, arch in tk), ["sm_90a"] * 6)
        for key in tk:
            r = self.found[key]
            self.assertEqual((r["spill_stores"], r["spill_loads"]), (0, 0), self.names[key])

    def test_norm_rows_held_in_registers_do_not_spill(self):
        # norm_forward_kernel<kCentered, V, P> and norm_backward_kernel<kCentered, kColsum, V, P, T>
        # with P > 0 hold P packs a lane: a spill would put the row back in memory
        held = [k for k in self.found if re.match(r"norm_\w+_kernel<\w+, (\w+, )?\d+, [1-9]", self.names[k])]
        # two archs; forward: LayerNorm and RMSNorm, P 1-4; backward: LayerNorm with and without
        # dinp_colsum and RMSNorm, P 1-3
        self.assertEqual(len(held), 2 * (2 * 4 + 3 * 3))
        self.assert_no_stack_or_spills(held)

    def test_decoder_kernels_do_not_spill(self):
        # rope_kernel<T, P> (its cos and sin from cc/ops/rope.h: no slow path in local memory),
        # the ReLU², SwiGLU, soft-cap and QK-norm kernels, f32 and bf16, packed and not, and the
        # LM head's cross-entropy kernels with and without the logit soft-cap (32 registers a
        # thread where they stream)
        decoder = [k for k in self.found if re.match(
            r"(rope_kernel|swiglu_\w+_kernel|(map|grad)_kernel|head_norm_\w+_kernel|cross_entropy_\w*kernel)<",
            self.names[k])]
        # two archs, two dtypes, two pack sizes: rope 1, SwiGLU 2, map and grad 2 each, QK-norm 2,
        # streaming cross-entropy 2 (capped or not); the staged cross-entropy: two archs, two
        # dtypes, capped or not
        self.assertEqual(len(decoder), 2 * 2 * 2 * (1 + 2 + 2 + 2 + 2 + 2) + 2 * 2 * 2)
        self.assert_no_stack_or_spills(decoder)

    def test_mixing_kernels_do_not_spill(self):
        # scaled_sum's forward and backward and gated_add's forward, terms and dadd kernels, each
        # f32 and bf16, packed and not; gated_add's dgin and parameter partials, f32 and bf16
        mixing = [k for k in self.found
                  if re.match(r"(scaled_sum_\w+_kernel|gated_add_\w+_kernel)<", self.names[k])]
        self.assertEqual(len(mixing), 2 * (2 * 2 * (2 + 3) + 2 * 2))
        self.assert_no_stack_or_spills(mixing)

    def test_limits(self):
        for key, r in self.found.items():
            self.assertLessEqual(r["registers"], 255, f"{self.names[key]} on {key[1]}")
            self.assertLessEqual(r["smem"], 48 * 1024, f"{self.names[key]} on {key[1]}")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])

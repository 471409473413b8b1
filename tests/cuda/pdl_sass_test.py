"""The CUDA op library's machine code keeps the promise programmatic dependent launch (pdl=on)
rests on: every kernel of nfn's own, in the sm_90a and the sm_120 code, waits for the kernel
before it (griddepcontrol.wait, ACQBULK in SASS) before it touches global memory. The sources
put pdl_begin() first (rewrite_cu.py checks that) and its asm clobbers memory, but only the
final SASS shows whether ptxas kept every load and store behind the wait; the emulator runs
launches one after another and cannot. Reads the library with cuobjdump and nvdisasm
(tools/bootstrap.sh installs them wherever nvcc is); no GPU needed.

Kernels launched without PDL are left out: CUB's (it launches its own) and ThunderKittens'
(launched with <<<>>>)."""
import importlib.util
import os
import re
import subprocess
import sys
import unittest

LIBRARY = sys.argv[1] if len(sys.argv) > 1 else ""
NOT_PDL = re.compile(r"^_ZN3cub|attention_tk_cu")
# Global or generic memory: loads, stores, atomics, reductions, async copies to shared memory
# and TMA. Shared (LDS/STS) and local (LDL/STL) memory are the block's own.
MEMORY = re.compile(r"^(?:@!?U?P\w+\s+)?(LDG|STG|LDGSTS|ATOMG|ATOM|RED|LD|ST|UTMALDG|UTMASTG|UBLKCP)(?:\.|\s|$)")
INSTRUCTION = re.compile(r"/\*[0-9a-f]{4,}\*/\s+(.*?)\s*;")


def tools_dir():
    spec = importlib.util.find_spec("nvidia")
    for path in spec.submodule_search_locations if spec else []:
        d = os.path.join(path, "cu13", "bin")
        if all(os.path.exists(os.path.join(d, t)) for t in ("cuobjdump", "nvdisasm")):
            return d
    return None


def kernels(sass):
    """{(arch, kernel): [instruction, ...]} from cuobjdump -sass output."""
    out, arch, name = {}, None, None
    for line in sass.splitlines():
        if m := re.search(r"code for (sm_\w+)", line):
            arch, name = m.group(1), None
        elif m := re.search(r"Function : (\S+)", line):
            name = m.group(1)
            out[(arch, name)] = []
        elif name is not None and (m := INSTRUCTION.search(line)):
            out[(arch, name)].append(m.group(1))
    return out


def before_wait(instructions):
    """(whether the kernel waits, the global memory instructions ahead of its first wait)."""
    early = []
    for ins in instructions:
        if ins.startswith("ACQBULK"):
            return True, early
        if MEMORY.match(ins):
            early.append(ins)
    return False, early


class PdlSassTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        d = tools_dir()
        if d is None:
            raise AssertionError("no cuobjdump and nvdisasm under nvidia/cu13/bin: run tools/bootstrap.sh")
        env = dict(os.environ, PATH=d + os.pathsep + os.environ.get("PATH", ""))
        sass = subprocess.run([os.path.join(d, "cuobjdump"), "-sass", LIBRARY], env=env, capture_output=True,
                              text=True, check=True).stdout
        cls.kernels = kernels(sass)

    def test_the_checker_sees_a_load_ahead_of_the_wait(self):
        # A listing in cuobjdump's form whose load comes first must be caught, one whose load
        # comes after the wait must not.
        early = "\tcode for sm_90a\n\t\tFunction : k\n" \
                "        /*0000*/                   LDG.E R2, desc[UR4][R2.64] ;  /* 0x0 */\n" \
                "        /*0010*/                   ACQBULK ;  /* 0x0 */\n"
        (key, ins), = kernels(early).items()
        self.assertEqual(key, ("sm_90a", "k"))
        self.assertEqual(before_wait(ins), (True, ["LDG.E R2, desc[UR4][R2.64]"]))
        self.assertEqual(before_wait(list(reversed(ins))), (True, []))
        self.assertEqual(before_wait(["@P0 STG.E.128 desc[UR4][R2.64], R4", "EXIT"]),
                         (False, ["@P0 STG.E.128 desc[UR4][R2.64], R4"]))

    def test_every_nfn_kernel_waits_before_global_memory(self):
        ours = {k: v for k, v in self.kernels.items() if not NOT_PDL.search(k[1])}
        for arch in ("sm_90a", "sm_120"):
            # the library has well over a hundred kernels in each architecture's code
            self.assertGreater(sum(1 for a, _ in ours if a == arch), 100, f"too few {arch} kernels read")
        problems = []
        for (arch, name), ins in sorted(ours.items()):
            waits, early = before_wait(ins)
            if not waits:
                problems.append(f"{arch} {name}: no griddepcontrol.wait (ACQBULK)")
            elif early:
                problems.append(f"{arch} {name}: {len(early)} global memory instructions before the wait: {early[:3]}")
        self.assertEqual(problems, [], "\n".join(problems))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])

"""The check both installed copies pass (the wheel in a venv, the release under a prefix): each
native file of nfn resolves every library either to the bundled native folder or to the
system's C and C++ runtime, and nothing is "not found"."""
import os
import subprocess

SYSTEM_LIBRARIES = ("libc.so", "libm.so", "libdl.so", "libpthread.so", "librt.so", "libstdc++.so",
                    "libgcc_s.so", "ld-linux", "linux-vdso")


def native_files(package, native_bin):
    """nfn's _native.so and the trainers and op libraries in native_bin."""
    return [os.path.join(package, "_native.so")] + [
        os.path.join(native_bin, f) for f in sorted(os.listdir(native_bin)) if f.startswith(("nfn_", "libnfn_"))]


def check(test, path, native_bin, cwd):
    """ldd of path: every library found, each outside the system's in native_bin."""
    proc = subprocess.run(["ldd", path], env={"PATH": "/usr/bin:/bin"}, cwd=cwd, capture_output=True, text=True)
    test.assertEqual(proc.returncode, 0, proc.stderr)
    test.assertNotIn("not found", proc.stdout, path)
    for line in proc.stdout.splitlines():
        lib = os.path.basename(line.split()[0])
        resolved = line.split("=> ")[1].split()[0] if "=> " in line else lib
        if not lib.startswith(SYSTEM_LIBRARIES):
            test.assertEqual(os.path.dirname(resolved), native_bin, f"{path}: {line}")

"""Sandboxed Python against hostile snippets: each is contained, reported as the snippet's
failure, bounded in time, and leaves this process and the machine as they were."""
import os
import subprocess
import tempfile
import time
import unittest

from nfn.sandbox import python_exec
from nfn.sandbox.python_exec import isolation_report, run_python

FAST = 3.0  # timeout for snippets that never end

# A uid of our own, so that leftover-process checks (and RLIMIT_NPROC, which counts per uid)
# see only this test's sandboxes, not those of tests running beside it.
python_exec.SANDBOX_UID = 61000 + os.getpid() % 4000


def sandbox_user_processes():
    """Live processes owned by the sandbox user (only meaningful when we run as root)."""
    out = subprocess.run(["ps", "-u", str(python_exec.SANDBOX_UID), "-o", "pid="],
                         capture_output=True, text=True).stdout
    return out.split()


class SandboxTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.iso = isolation_report()
        cls.full = cls.iso["mode"] == "bwrap"

    def tearDown(self):
        if self.iso["as_root"]:
            self.assertEqual(sandbox_user_processes(), [], "a sandboxed process outlived its run")

    def assert_failed(self, r, timed_out=False):
        self.assertFalse(r.ok, r.output[:200])
        self.assertTrue(r.error)
        self.assertEqual(r.timed_out, timed_out, r.error)

    def test_isolation_is_reported(self):
        self.assertIn(self.iso["mode"], ("bwrap", "rlimits"))
        if self.iso["mode"] == "rlimits":
            self.assertTrue(self.iso["missing"])
        if self.iso["as_root"] and self.full:
            self.assertEqual(self.iso["missing"], [])

    def test_ordinary_code_runs(self):
        r = run_python("import math, json\nprint(json.dumps([math.factorial(5), 'é😀']))")
        self.assertTrue(r.ok, r.error)
        self.assertEqual(r.output, '[120, "\\u00e9\\ud83d\\ude00"]\n')
        r = run_python("raise SystemExit(3)")
        self.assertFalse(r.ok)
        self.assertEqual(r.details["returncode"], 3)
        r = run_python("1/0")
        self.assertIn("ZeroDivisionError", r.error)

    def test_exit_status_above_128_that_is_no_signal(self):
        for code, want in (("raise SystemExit(200)", "exited with status 200"),
                           ("import os; os._exit(250)", "exited with status 250")):
            r = run_python(code)
            self.assertEqual((r.ok, r.error), (False, want))
        self.assertEqual(python_exec._explain(-40, ""), "signal 40")  # negative: a signal, named or not
        self.assertEqual(python_exec._explain(128 + 24, ""), "CPU time limit")  # SIGXCPU, as bwrap passes it on

    def test_tmp_is_as_bounded_as_the_workdir(self):
        if not self.full:
            self.skipTest("no bubblewrap: /tmp is the host's")
        # Files of 3 MB (under the 16 MB a file) until one fails: each tmpfs holds 8 MB.
        code = ("import sys\nfor d in ('/tmp', '/work'):\n    n = 0\n    try:\n        while n < 64:\n"
                "            open(f'{d}/f{n}', 'wb').write(b'x' * (3 << 20)); n += 1\n"
                "    except OSError as e:\n        print(d, n, e.errno)\n")
        r = run_python(code, workdir_mb=8)
        self.assertTrue(r.ok, r.error)
        self.assertEqual(r.output, "/tmp 2 28\n/work 2 28\n")  # the third does not fit: ENOSPC

    def test_working_directory_is_fresh_and_writable(self):
        code = ("import os\nprint(sorted(os.listdir('.')))\nopen('out.txt','w').write('x')\n"
                "print(open('out.txt').read())")
        first = run_python(code, files={"data.txt": "hello"})
        self.assertTrue(first.ok, first.error)
        self.assertEqual(first.output, "['data.txt', 'main.py']\nx\n")
        second = run_python(code)
        self.assertEqual(second.output, "['main.py']\nx\n")  # nothing carried over

    def test_infinite_loop_and_sleep(self):
        for code in ("while True: pass", "import time\ntime.sleep(60)"):
            start = time.monotonic()
            r = run_python(code, timeout=FAST)
            self.assert_failed(r, timed_out=True)
            self.assertLess(time.monotonic() - start, FAST + 3)

    @unittest.skipIf(any("process limit" in m for m in isolation_report()["missing"]),
                     "no process limit here; a fork bomb would reach the host")
    def test_fork_bomb(self):
        code = ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n"
                "        pass\n")
        start = time.monotonic()
        r = run_python(code, timeout=FAST)
        self.assert_failed(r, timed_out=True)
        self.assertLess(time.monotonic() - start, FAST + 5)
        # The process limit stopped the bomb inside; this process can still fork.
        self.assertEqual(subprocess.run(["true"]).returncode, 0)

    @unittest.skipIf(any("process limit" in m for m in isolation_report()["missing"]),
                     "no process limit here")
    def test_process_limit(self):
        code = ("import os\nn = 0\ntry:\n    for _ in range(1000):\n        if os.fork() == 0:\n"
                "            import time; time.sleep(30)\n        n += 1\nexcept OSError:\n"
                "    print('limited at', n)\n    os.killpg(0, 9)\n")
        r = run_python(code, timeout=FAST, max_processes=8)
        self.assertIn("limited at", r.output)
        self.assertLessEqual(int(r.output.split()[2]), 8)

    def test_huge_allocation(self):
        r = run_python("x = bytearray(8 << 30)\nprint(len(x))", memory_mb=256)
        self.assert_failed(r)
        self.assertIn("MemoryError", r.error)
        r = run_python("x = []\nwhile True: x.append(' ' * (1 << 20))", memory_mb=256, timeout=10)
        self.assert_failed(r)
        self.assertIn("MemoryError", r.error)

    def test_output_flood(self):
        start = time.monotonic()
        r = run_python("while True: print('x' * 10000)", timeout=FAST, max_output_bytes=50000)
        self.assert_failed(r)
        self.assertIn("output exceeded 50000 bytes", r.error)
        self.assertLessEqual(len(r.output), 50000)
        self.assertLess(time.monotonic() - start, FAST)
        r = run_python("import sys\nwhile True: sys.stderr.write('e' * 10000)", timeout=FAST,
                       max_output_bytes=50000)
        self.assertIn("output exceeded", r.error)

    def test_disk_filling(self):
        r = run_python("open('big', 'wb').write(b'x' * (64 << 20))", max_file_mb=4)
        self.assert_failed(r)
        self.assertIn("File too large", r.error)

    def test_environment_secrets_do_not_leak(self):
        os.environ["NFN_TEST_SECRET"] = "hunter2"
        try:
            r = run_python("import os\nprint(sorted(os.environ.items()))\n"
                           "print(open('/proc/self/environ','rb').read())")
        finally:
            del os.environ["NFN_TEST_SECRET"]
        self.assertTrue(r.ok, r.error)
        self.assertNotIn("hunter2", r.output)

    @unittest.skipUnless(isolation_report()["mode"] == "bwrap", "needs bubblewrap")
    def test_host_files_are_invisible(self):
        with tempfile.NamedTemporaryFile("w", suffix=".secret", delete=False) as f:
            f.write("top secret")
        try:
            for path in (f.name, "/etc/passwd", os.path.expanduser("~/.bashrc"), os.path.abspath(__file__)):
                r = run_python(f"print(open({path!r}).read())")
                self.assert_failed(r)
                self.assertIn("FileNotFoundError", r.error)
            r = run_python("import os\nprint(sorted(os.listdir('/')))")
            self.assertNotIn("etc", r.output)
            self.assertNotIn("home", r.output)
            # Third-party packages (numpy, nfn itself) are not importable.
            r = run_python("import numpy")
            self.assertIn("ModuleNotFoundError", r.error)
        finally:
            os.unlink(f.name)

    @unittest.skipUnless(isolation_report()["mode"] == "bwrap", "needs bubblewrap")
    def test_no_network(self):
        r = run_python("import socket\ns = socket.socket()\ns.settimeout(2)\n"
                       "s.connect(('1.1.1.1', 80))")
        self.assert_failed(r)
        self.assertIn("Network is unreachable", r.error)
        r = run_python("import socket\nprint(socket.if_nameindex())")
        self.assertEqual(r.output.strip(), "[(1, 'lo')]")

    @unittest.skipUnless(isolation_report()["mode"] == "bwrap", "needs bubblewrap")
    def test_cannot_touch_host_processes(self):
        r = run_python("import os, signal\nos.kill(1, signal.SIGKILL)\nprint('pid 1 killed')")
        self.assertNotIn("pid 1 killed", r.output)
        r = run_python(f"import os\nos.kill({os.getpid()}, 9)")
        self.assert_failed(r)
        self.assertIn("ProcessLookupError", r.error)  # our pid does not exist in there

    @unittest.skipUnless(isolation_report()["as_root"], "the user switch needs real root")
    def test_runs_as_nobody(self):
        r = run_python("import os\nprint(os.getuid(), os.getgid(), os.getgroups())")
        uid = python_exec.SANDBOX_UID
        self.assertEqual(r.output, f"{uid} {uid} []\n")
        r = run_python("import os\nos.setuid(0)")
        self.assertIn("PermissionError", r.error)

    def test_without_bubblewrap_limits_still_hold(self):
        # The fallback a machine without namespaces gets: it says what it lacks, and the
        # rlimits and timeout still work.
        iso = dict(isolation_report(), mode="rlimits", missing=list(python_exec.NO_BWRAP_MISSING))
        with tempfile.TemporaryDirectory() as d:
            os.chmod(d, 0o755)
            with open(os.path.join(d, "main.py"), "w") as f:
                f.write("x = bytearray(8 << 30)")
            limits = dict(python_exec.DEFAULTS, timeout=FAST, memory_mb=256)
            r = python_exec._supervise(python_exec._command(iso, d, limits), limits, iso, cwd=d)
            self.assertIn("MemoryError", r.error)
            with open(os.path.join(d, "main.py"), "w") as f:
                f.write("while True: pass")
            r = python_exec._supervise(python_exec._command(iso, d, limits), limits, iso, cwd=d)
            self.assertTrue(r.timed_out)
            self.assertTrue(r.details["isolation"]["missing"])


if __name__ == "__main__":
    unittest.main()

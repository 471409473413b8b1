"""Sandboxed Python against hostile snippets: each is contained, reported as the snippet's
failure, bounded in time, and leaves this process and the machine as they were."""
import os
import subprocess
import tempfile
import time
import unittest

from nfn.sandbox import cgroup, python_exec
from nfn.sandbox.python_exec import isolation_report, run_python

FAST = 3.0  # timeout for snippets that never end

# A uid of our own, so that leftover-process checks (and RLIMIT_NPROC, which counts per uid)
# see only this test's sandboxes, not those of tests running beside it.
python_exec.SANDBOX_UID = 61000 + os.getpid() % 4000
ISO = isolation_report()
MOUNTS = ISO["mode"] == "bwrap" and ISO["mounts"]  # the launcher's bounded tmpfs and limits


# Prints CapInh CapPrm CapEff CapBnd CapAmb NoNewPrivs Seccomp of the snippet's process.
PRIVILEGES = ("fields = ('CapInh', 'CapPrm', 'CapEff', 'CapBnd', 'CapAmb', 'NoNewPrivs', 'Seccomp')\n"
              "print(*[l.split()[1] for l in open('/proc/self/status').read().splitlines()\n"
              "        if l.split(':')[0] in fields])\n")
NONE = " ".join(["0" * 16] * 5 + ["1", "2"])  # no capability, no_new_privs, a seccomp filter


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
        for resource in ("memory", "pids"):
            if resource not in self.iso["cgroups"]:  # a host without writable cgroups says so
                self.assertTrue(any(f"({cgroup.places()[1][resource]})" in m
                                    for m in self.iso["missing"]), self.iso["missing"])
        if self.iso["as_root"] and self.full and len(self.iso["cgroups"]) == 2:
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
        # pid 1 in there is the namespace's own first process: the signal is refused (as
        # nobody) or ignored (an init ignores SIGKILL from its own namespace), and the run goes on.
        r = run_python("import os, signal\ntry:\n    os.kill(1, signal.SIGKILL)\n"
                       "except PermissionError:\n    pass\n"
                       "print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))")
        self.assertEqual((r.ok, r.output), (True, "[1, 2]\n"), r.error)  # no host process
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
            with open(os.path.join(d, "main.py"), "w") as f:
                f.write(PRIVILEGES)
            r = python_exec._supervise(python_exec._command(iso, d, limits), limits, iso, cwd=d)
            want = NONE.split()
            if os.geteuid() != 0:  # emptying the bounding set needs CAP_SETPCAP; none to use
                with open("/proc/self/status") as f:
                    want[3] = next(l.split()[1] for l in f if l.startswith("CapBnd:"))
            self.assertEqual((r.ok, r.output.split()), (True, want), r.error)

    @unittest.skipUnless(isolation_report()["mode"] == "bwrap", "needs bubblewrap")
    def test_bubblewrap_without_mount_privileges(self):
        # Where bubblewrap cannot give the launcher CAP_SYS_ADMIN: bwrap's own tmpfs (bytes
        # bounded, not files), said in missing, and still no privilege left.
        iso = isolation_report()
        iso = dict(iso, mounts=False, missing=iso["missing"] + [python_exec.NO_MOUNT_MISSING])
        with tempfile.TemporaryDirectory() as d:
            os.chmod(d, 0o755)
            with open(os.path.join(d, "main.py"), "w") as f:
                f.write(PRIVILEGES + "import os\nprint(sorted(os.listdir('.')))\n"
                        "open('/tmp/x', 'w').write('x')\n")
            limits = dict(python_exec.DEFAULTS)
            r = python_exec._supervise(python_exec._command(iso, d, limits), limits, iso, cwd=d)
        self.assertEqual((r.ok, r.output), (True, NONE + "\n['main.py']\n"), r.error)


    # Each resource a hostile snippet can reach for, tried as it would: it stops at its limit
    # with a clear error, quickly, and the run ends cleanly.

    @unittest.skipUnless(MOUNTS, "no inode limits here (see isolation missing)")
    def test_file_creation_stops_at_the_inode_limit(self):
        # Empty files cost no bytes, only inodes and dentries (host kernel memory).
        code = ("import errno, os, time\n"
                "for d in ('/work', '/tmp', '/dev/shm'):\n"
                "    n, t = 0, time.monotonic()\n"
                "    try:\n"
                "        while True:\n"
                "            open(f'{d}/f{n}', 'w').close(); n += 1\n"
                "    except OSError as e:\n"
                "        print(d, n, errno.errorcode[e.errno], round(time.monotonic() - t, 2))\n"
                "for make in (lambda: os.mkdir('/work/d'), lambda: os.symlink('x', '/tmp/s'),\n"
                "             lambda: os.link('/work/f1', '/work/l')):\n"
                "    try:\n"
                "        make()\n"
                "    except OSError as e:\n"
                "        print(errno.errorcode[e.errno])\n")
        start = time.monotonic()
        r = run_python(code)
        self.assertTrue(r.ok, r.error)
        lines = [line.split() for line in r.output.splitlines()]
        files = python_exec.DEFAULTS["workdir_files"]
        # The root directory is an inode too; /work also holds main.py.
        self.assertEqual([line[:3] for line in lines[:3]],
                         [["/work", str(files - 2), "ENOSPC"], ["/tmp", str(files - 1), "ENOSPC"],
                          ["/dev/shm", str(files - 1), "ENOSPC"]])
        self.assertEqual(lines[3:], [["ENOSPC"]] * 3)  # directories, symlinks, hard links count
        self.assertLess(time.monotonic() - start, 3)
        r = run_python("import os\nfor n in range(100): open(f'f{n}', 'w').close()",
                       workdir_files=50)
        self.assertIn("No space left on device", r.error)

    @unittest.skipUnless(MOUNTS, "no bounded /dev/shm here")
    def test_dev_shm_is_a_bounded_tmpfs(self):
        code = ("import multiprocessing, os\nlock = multiprocessing.Lock()  # a POSIX semaphore there\n"
                "with lock:\n    pass\nn = 0\ntry:\n    while True:\n"
                "        with open(f'/dev/shm/f{n}', 'wb') as f:\n"
                "            f.write(b'x' * (1 << 20))\n        n += 1\n"
                "except OSError as e:\n    print(n, e.strerror)\n")
        r = run_python(code, workdir_mb=8)
        self.assertTrue(r.ok, r.error)
        count, error = r.output.split(" ", 1)
        self.assertLessEqual(int(count), 8)
        self.assertEqual(error.strip(), "No space left on device")

    @unittest.skipUnless(MOUNTS, "the launcher cannot mount here: no privileges to drop")
    def test_snippet_has_no_privileges(self):
        code = (PRIVILEGES + "import ctypes, os, subprocess, sys\n"
                "if os.fork() == 0:\n    exec(open(sys.argv[0]).read().split('import ctypes')[0])\n"
                "    sys.stdout.flush()\n    os._exit(0)\nos.wait()\n"
                "libc = ctypes.CDLL(None, use_errno=True)\n"
                "def errno_of(ret):\n    return os.strerror(ctypes.get_errno()) if ret < 0 else 'succeeded'\n"
                "print('mount', errno_of(libc.mount(b'none', b'/tmp', b'tmpfs', 0, None)))\n"
                "print('umount', errno_of(libc.umount2(b'/work', 2)))\n"
                "print('userns', errno_of(libc.unshare(0x10000000)))\n"
                "print('keyring', errno_of(libc.syscall(248 if os.uname().machine == 'x86_64' else 217,\n"
                "      b'user', b'k', b'v', 1, -4)))\n"
                "print('unshare -U', subprocess.run(['unshare', '-U', 'true']).returncode)\n"
                "for path in ('/proc/sys/kernel/shmmni', '/new', '/dev/new'):\n"
                "    try:\n        open(path, 'w').write('1')\n"
                "    except OSError as e:\n        print(path, e.strerror)\n")
        r = run_python(code)
        self.assertTrue(r.ok, r.error)
        self.assertEqual(r.output.splitlines(), [
            NONE, NONE,  # the snippet and a child it forks
            "mount Operation not permitted", "umount Operation not permitted",
            "userns Operation not permitted", "keyring Operation not permitted", "unshare -U 1",
            "/proc/sys/kernel/shmmni Read-only file system", "/new Read-only file system",
            "/dev/new Read-only file system"])
        # Threads and subprocesses still work: clone3 falls back to clone, which is allowed.
        r = run_python("import subprocess, threading\nt = threading.Thread(target=print, args=('t',))\n"
                       "t.start(); t.join()\nprint(subprocess.run(['echo', 's'], capture_output=True,"
                       " text=True).stdout, end='')")
        self.assertEqual((r.ok, r.output), (True, "t\ns\n"), r.error)

    @unittest.skipUnless(MOUNTS, "no IPC namespace limits here")
    def test_sysv_ipc_and_terminals_are_bounded(self):
        code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
                "def count(make):\n    n = 0\n    while make() >= 0:\n        n += 1\n"
                "    return n, os.strerror(ctypes.get_errno())\n"
                "print('1 GB segment', libc.shmget(0, 1 << 30, 0o1600), os.strerror(ctypes.get_errno()))\n"
                "print('8 MB segments', *count(lambda: libc.shmget(0, 8 << 20, 0o1600)))\n"
                "print('message queues', *count(lambda: libc.msgget(0, 0o1600)))\n"
                "print('semaphore sets', *count(lambda: libc.semget(0, 250, 0o1600)))\n"
                "print('message queue', libc.mq_open(b'/q', 0o102, 0o600, None),"
                " os.strerror(ctypes.get_errno()))\n"
                "n = 0\ntry:\n    while True:\n        os.openpty(); n += 1\n"
                "except OSError as e:\n    print('terminals', n, e.strerror)\n")
        r = run_python(code, workdir_mb=32)
        self.assertTrue(r.ok, r.error)
        self.assertEqual(r.output.splitlines(), [
            "1 GB segment -1 Invalid argument",                  # above shmmax (workdir_mb)
            "8 MB segments 4 No space left on device",           # shmall: 32 MB in all
            f"message queues {python_exec.MSG_QUEUES} No space left on device",
            f"semaphore sets {python_exec.SEM_SETS} No space left on device",
            "message queue -1 Too many open files",              # RLIMIT_MSGQUEUE 0
            f"terminals {python_exec.PTYS} No space left on device"])

    @unittest.skipIf(any("process limit" in m for m in isolation_report()["missing"]),
                     "no process limit here")
    def test_thread_and_open_file_limits(self):
        code = ("import os, threading, time\nn = 0\ntry:\n    while True:\n"
                "        threading.Thread(target=time.sleep, args=(3,), daemon=True).start(); n += 1\n"
                "except RuntimeError as e:\n    print('threads', n, e)\nfds = []\ntry:\n"
                "    while True:\n        fds.append(os.open('/dev/null', os.O_RDONLY))\n"
                "except OSError as e:\n    print('files', len(fds), e.strerror)\nos._exit(0)\n")
        r = run_python(code, max_processes=16, timeout=FAST)
        self.assertTrue(r.ok, r.error)
        threads, files = r.output.splitlines()
        self.assertRegex(threads, "^threads ([0-9]|1[0-5]) can't start new thread$")  # the main one counts
        self.assertEqual(files, f"files {python_exec.OPEN_FILES - 3} Too many open files")

    @unittest.skipUnless("memory" in isolation_report()["cgroups"], "no memory cgroup here")
    def test_memory_of_the_whole_run_is_bounded(self):
        # memfd files live outside every address space; only the cgroup counts them.
        start = time.monotonic()
        r = run_python("import os\nwhile True:\n    os.write(os.memfd_create('x'), b'x' * (8 << 20))",
                       memory_mb=96)
        self.assert_failed(r)
        self.assertEqual(r.error, "killed: the run's memory limit (96 MB)")
        self.assertLessEqual(r.details["memory_peak_mb"], 96)
        self.assertLess(time.monotonic() - start, 3)
        # Four processes of 40 MB each: each is within its 96 MB of address space, not together.
        code = ("import os, time\nfor _ in range(4):\n    if os.fork() == 0:\n"
                "        b = bytearray(40 << 20)\n        for i in range(0, len(b), 4096):\n"
                "            b[i] = 1\n        time.sleep(1)\n        os._exit(0)\n"
                "print(sorted(os.waitstatus_to_exitcode(os.wait()[1]) for _ in range(4)))\n")
        r = run_python(code, memory_mb=96)
        self.assertTrue(r.ok, r.error)
        self.assertIn("-9", r.output)  # the memory cgroup killed at least one
        self.assertLessEqual(r.details["memory_peak_mb"], 96)

    def test_pipes_sockets_and_inotify_are_bounded(self):
        code = ("import ctypes, fcntl, os, socket\nfds, sent = [], 0\ntry:\n    while True:\n"
                "        a, b = socket.socketpair(); fds += [a, b]; a.setblocking(False)\n"
                "        try:\n            while True:\n                sent += a.send(b'x' * 65536)\n"
                "        except BlockingIOError:\n            pass\n"
                "except OSError as e:\n    print('sockets', sent >> 20, e.strerror)\n"
                "for s in fds:\n    s.close()\nfds, piped = [], 0\ntry:\n    while True:\n"
                "        r, w = os.pipe(); fds += [r, w]; os.set_blocking(w, False)\n"
                "        try:\n            fcntl.fcntl(w, 1031, 1 << 20)  # F_SETPIPE_SZ\n"
                "        except OSError:\n            pass\n"
                "        try:\n            while True:\n                piped += os.write(w, b'x' * 65536)\n"
                "        except BlockingIOError:\n            pass\n"
                "except OSError as e:\n    print('pipes', piped >> 20, e.strerror)\n"
                "libc = ctypes.CDLL(None, use_errno=True)\nn = 0\n"
                "while libc.inotify_init() >= 0:\n    n += 1\n"
                "print('inotify', n, os.strerror(ctypes.get_errno()))\n")
        r = run_python(code, memory_mb=256)
        self.assertTrue(r.ok, r.error)
        (_, sockets, e1), (_, pipes, e2), (_, inotify, e3) = (
            line.split(" ", 2) for line in r.output.splitlines())
        self.assertEqual((e1, e2, e3), ("Too many open files",) * 3)
        self.assertLessEqual(int(sockets) + int(pipes), 256)
        self.assertLessEqual(int(inotify), python_exec.OPEN_FILES)
        if "memory" in self.iso["cgroups"]:
            self.assertLessEqual(r.details["memory_peak_mb"], 256)

    @unittest.skipUnless(isolation_report()["as_root"] and "pids" in isolation_report()["cgroups"],
                         "needs root and a pids cgroup")
    def test_cgroups_hold_a_run_that_stays_root(self):
        # Without bubblewrap, and as root (which ignores RLIMIT_NPROC): the run's pids cgroup
        # still stops a fork bomb, and a process that left the process group dies with the run.
        iso = dict(isolation_report(), mode="rlimits", as_root=False,
                   missing=list(python_exec.NO_BWRAP_MISSING))
        with tempfile.TemporaryDirectory() as d:
            os.chmod(d, 0o755)
            limits = dict(python_exec.DEFAULTS, timeout=FAST, max_processes=8)
            with open(os.path.join(d, "main.py"), "w") as f:
                f.write("import os, signal, time\nkids = []\ntry:\n    while True:\n"
                        "        kids.append(os.fork())\n        if kids[-1] == 0:\n"
                        "            time.sleep(30)\n"
                        "except OSError as e:\n    print(os.getuid(), len(kids), e.strerror)\n"
                        "for kid in kids:\n    os.kill(kid, signal.SIGKILL)\n    os.waitpid(kid, 0)\n"
                        "if os.fork() == 0:\n    os.setsid()\n"
                        "    print(os.getpid(), flush=True)\n    os.close(1); os.close(2)\n"
                        "    time.sleep(60)\n")
            r = python_exec._supervise(python_exec._command(iso, d, limits), limits, iso, cwd=d)
        self.assertTrue(r.ok, r.error)
        first, escaped = r.output.splitlines()
        self.assertEqual(first, "0 7 Resource temporarily unavailable")  # 8 with the first
        try:
            with open(f"/proc/{escaped}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            state = "gone"
        self.assertIn(state, ("gone", "Z"))  # killed (a zombie until its new parent reaps it)


if __name__ == "__main__":
    unittest.main()

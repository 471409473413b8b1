"""Run untrusted Python (a model's tool call, a HumanEval completion) in a sandbox.

Layers, each reported in the result's details["isolation"]:
  - bubblewrap namespaces: no network, its own process tree (everything dies with it), a
    root filesystem holding only /usr, the interpreter's standard library (site-packages
    hidden) and a fresh size-limited /work; no host home, /etc or /tmp;
  - the snippet runs as an unprivileged user (root ignores RLIMIT_NPROC) under rlimits on
    processes, address space, CPU time, file size and open files;
  - an empty environment, a wall-clock timeout that kills the whole process tree, and an
    output cap.
Without bubblewrap the rlimits, user switch, environment and timeout still apply and
details["isolation"]["missing"] names what is not protected.
"""
import functools
import os
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time

from nfn.sandbox.result import ToolResult

LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher.py")
SANDBOX_UID = 65534  # nobody: used only when nfn runs as root
DEFAULTS = dict(timeout=5.0, memory_mb=512, max_processes=32, max_output_bytes=64 * 1024,
                max_file_mb=16, workdir_mb=64)
NO_BWRAP_MISSING = [
    "network isolation (no network namespace)",
    "filesystem isolation (the host's files are readable)",
    "process-tree isolation (a process that leaves its group survives the timeout)",
]


def run_python(code, timeout=None, memory_mb=None, max_processes=None, max_output_bytes=None,
               max_file_mb=None, workdir_mb=None, files=None):
    """Run code as a script; ToolResult(ok, output=stdout, error, timed_out, details).

    files: {relative name: text} placed in the working directory next to the script.
    """
    limits = dict(DEFAULTS)
    for key, value in (("timeout", timeout), ("memory_mb", memory_mb),
                       ("max_processes", max_processes), ("max_output_bytes", max_output_bytes),
                       ("max_file_mb", max_file_mb), ("workdir_mb", workdir_mb)):
        if value is not None:
            limits[key] = value
    isolation = isolation_report()
    host_dir = tempfile.mkdtemp(prefix="nfn-sandbox-")
    try:
        os.chmod(host_dir, 0o755)  # the sandbox user must read the script
        script = os.path.join(host_dir, "main.py")
        with open(script, "w", encoding="utf-8") as f:
            f.write(code)
        for name, text in (files or {}).items():
            if os.path.isabs(name) or ".." in name.split("/"):
                raise ValueError(f"sandbox file name must be relative: {name!r}")
            with open(os.path.join(host_dir, name), "w", encoding="utf-8") as f:
                f.write(text)
        argv = _command(isolation, host_dir, limits)
        return _supervise(argv, limits, isolation, cwd=host_dir)
    finally:
        shutil.rmtree(host_dir, ignore_errors=True)


@functools.lru_cache(maxsize=1)
def isolation_report():
    """Which protections this machine gives: {"mode", "user", "missing": [...]}."""
    as_root = os.geteuid() == 0
    user = "nobody (uid 65534)" if as_root else f"uid {os.geteuid()} (yours)"
    bwrap = shutil.which("bwrap")
    if bwrap and as_root and _bwrap_works(bwrap, True):
        return {"mode": "bwrap", "bwrap": bwrap, "as_root": True, "user": user, "missing": []}
    if bwrap and _bwrap_works(bwrap, False):
        # Not root, or root inside another sandbox's user namespace (no real user switch).
        missing = [f"a separate user (the snippet runs as uid {os.geteuid()} in a user namespace)"]
        if as_root:
            missing.append("the process limit (uid 0 outside the sandbox ignores RLIMIT_NPROC)")
        return {"mode": "bwrap", "bwrap": bwrap, "as_root": False, "user": f"uid {os.geteuid()}",
                "missing": missing}
    missing = list(NO_BWRAP_MISSING)
    if not bwrap:
        missing.insert(0, "bubblewrap (bwrap) is not installed")
    else:
        missing.insert(0, "bubblewrap is installed but cannot create namespaces here")
    if not as_root:
        missing.append("a separate user (the snippet runs as your uid)")
    elif not _reachable_by_others(os.path.realpath(sys.executable)):
        missing.append("a separate user and the process limit (the interpreter is not "
                       "reachable by nobody, so the snippet runs as root, which ignores RLIMIT_NPROC)")
    return {"mode": "rlimits", "bwrap": None, "as_root": as_root, "user": user, "missing": missing}


def _bwrap_works(bwrap, as_root):
    """Namespaces can be made here, and (as root) the switch to the sandbox user works."""
    probe = ["--", "/bin/true"]
    if as_root:
        probe = ["--", "/bin/sh", "-c", f"exec /usr/bin/setpriv --reuid={SANDBOX_UID} "
                 f"--regid={SANDBOX_UID} --clear-groups /bin/true"]
    try:
        proc = subprocess.run(_bwrap_prefix(bwrap, as_root) + probe,
                              capture_output=True, timeout=10, env={})
        return proc.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def _bwrap_prefix(bwrap, as_root):
    argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-net", "--unshare-pid",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if as_root:
        # No user namespace: the launcher keeps only the capabilities to switch to nobody.
        argv += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        argv += ["--unshare-user"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    return argv + ["--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev"]


def _command(isolation, host_dir, limits):
    mem = int(limits["memory_mb"]) << 20
    cpu = max(1, int(limits["timeout"] + 0.999))
    fsize = int(limits["max_file_mb"]) << 20
    nproc = int(limits["max_processes"])
    as_root = isolation["as_root"]  # False when root cannot switch users (nested sandbox)
    uid = SANDBOX_UID if as_root else -1
    if isolation["mode"] != "bwrap":
        if as_root and not _reachable_by_others(os.path.realpath(sys.executable)):
            uid = -1  # nobody could not even start the interpreter; isolation_report says so
        return [sys.executable, "-I", "-S", LAUNCHER, str(uid), str(uid), str(nproc), str(mem),
                str(cpu), str(fsize), os.path.join(host_dir, "main.py")]
    python = os.path.realpath(sys.executable)
    argv = _bwrap_prefix(isolation["bwrap"], as_root)
    for root in sorted({sys.base_prefix, os.path.dirname(os.path.dirname(python))}):
        if not root.startswith("/usr"):
            argv += _open_parents(root) + ["--ro-bind", root, root]
    purelib = sysconfig.get_paths()["purelib"]
    if os.path.isdir(purelib) and not purelib.startswith("/usr"):
        argv += ["--tmpfs", purelib]  # third-party packages stay invisible
    size = str(int(limits["workdir_mb"]) << 20)  # bwrap's --size is for the next --tmpfs only
    argv += ["--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", "/work"]
    if as_root:
        argv += ["--chmod", "1777", "/work", "--chmod", "1777", "/tmp"]
    for name in sorted(os.listdir(host_dir)):
        argv += ["--ro-bind", os.path.join(host_dir, name), f"/work/{name}"]
    argv += ["--perms", "0755", "--dir", "/sandbox", "--ro-bind", LAUNCHER, "/sandbox/launcher.py", "--chdir", "/work", "--clearenv",
             "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/work",
             "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONIOENCODING", "utf-8",
             "--", python, "-I", "-S", "/sandbox/launcher.py", str(uid), str(uid), str(nproc),
             str(mem), str(cpu), str(fsize), "/work/main.py"]
    return argv


def _reachable_by_others(path):
    """True when every directory above path, and path itself, is executable by others."""
    import stat

    while True:
        try:
            if not os.stat(path).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
        parent = os.path.dirname(path)
        if parent == path:
            return True
        path = parent


def _open_parents(path):
    """bwrap makes missing parent directories 0700; the sandbox user must traverse them."""
    parts, argv = path.strip("/").split("/")[:-1], []
    for i in range(len(parts)):
        argv += ["--perms", "0755", "--dir", "/" + "/".join(parts[:i + 1])]
    return argv


def _supervise(argv, limits, isolation, cwd):
    """Start argv in its own process group, collect capped output, kill on timeout."""
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8"}
    cap = int(limits["max_output_bytes"])
    info_r = info_w = None
    if isolation["mode"] == "bwrap":
        # bwrap reports the host pid of the namespace's first process on this pipe.
        info_r, info_w = os.pipe()
        argv = [argv[0], "--info-fd", str(info_w)] + argv[1:]
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, cwd=cwd, env=env, start_new_session=True,
                                close_fds=True, pass_fds=(info_w,) if info_w else ())
    finally:
        if info_w is not None:
            os.close(info_w)
    ns_init = _read_child_pid(info_r) if info_r is not None else None
    buffers = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    sel = selectors.DefaultSelector()
    for stream in buffers:
        sel.register(stream, selectors.EVENT_READ)
    deadline = start + float(limits["timeout"])
    timed_out = flooded = False
    while sel.get_map():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            timed_out = True
            break
        for key, _ in sel.select(timeout=min(remaining, 0.5)):
            chunk = os.read(key.fileobj.fileno(), 65536)
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            buf = buffers[key.fileobj]
            buf.extend(chunk[:max(0, cap + 1 - len(buf))])
            if sum(len(b) for b in buffers.values()) > cap:
                flooded = True
        if flooded:
            break
    if timed_out or flooded:
        _kill_tree(proc, ns_init)
    try:
        returncode = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_tree(proc, ns_init)
        returncode = _wait_or_force(proc)
    sel.close()
    for stream in buffers:
        stream.close()
    wall = time.monotonic() - start
    stdout = bytes(buffers[proc.stdout][:cap]).decode("utf-8", errors="replace")
    stderr = bytes(buffers[proc.stderr][:cap]).decode("utf-8", errors="replace")
    details = {"returncode": returncode, "wall_s": round(wall, 3), "isolation": isolation,
               "limits": dict(limits)}
    if timed_out:
        return ToolResult(False, stdout, f"timed out after {limits['timeout']} s", True, details)
    if flooded:
        return ToolResult(False, stdout, f"output exceeded {cap} bytes", False, details)
    if returncode == 0:
        return ToolResult(True, stdout, None, False, details)
    return ToolResult(False, stdout, _explain(returncode, stderr), False, details)


def _explain(returncode, stderr):
    tail = stderr.strip()[-2000:]
    # bwrap passes a signal's death on as 128 + its number, which a script's own exit status
    # may also be: a status above 128 that is no signal's is an exit status.
    sig = -returncode if returncode < 0 else returncode - 128
    known = sig in signal.Signals._value2member_map_
    if returncode < 0 or known:  # a negative status is always a signal's
        name = signal.Signals(sig).name if known else f"signal {sig}"
        reason = {"SIGXCPU": "CPU time limit", "SIGKILL": "killed (CPU or memory limit)"}.get(name, name)
        return f"{reason}" + (f"\n{tail}" if tail else "")
    return tail or f"exited with status {returncode}"


def _read_child_pid(fd):
    """The "child-pid" bwrap writes to --info-fd (None if it failed before writing)."""
    import json

    data = b""
    with os.fdopen(fd, "rb") as f:
        data = f.read()
    try:
        return int(json.loads(data)["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None


def _kill_tree(proc, ns_init):
    """Kill everything the snippet started.

    With bwrap: SIGKILL the namespace's first process; the kernel then kills every process
    in the namespace, and bwrap exits only after they are gone (so waiting on bwrap waits
    for the whole tree). Without bwrap: the process group.
    """
    if ns_init is not None:
        try:
            os.kill(ns_init, signal.SIGKILL)
            proc.wait(timeout=5)
            return
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def _wait_or_force(proc):
    try:
        return proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()

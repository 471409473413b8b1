"""Run untrusted Python (a model's tool call, a HumanEval completion) in a sandbox.

Layers, each reported in the result's details["isolation"]:
  - bubblewrap namespaces: no network, its own process tree (everything dies with it), its
    own SysV IPC, a read-only root filesystem holding only /usr and the interpreter's standard
    library (site-packages hidden); no host home, /etc or /tmp;
  - the launcher, first inside, mounts /work (the script), /tmp and /dev/shm as tmpfs bounded
    in bytes and in files, gives the run a devpts of its own with few terminals and small SysV
    IPC limits, then drops every capability (no_new_privs, empty bounding set), becomes an
    unprivileged user (root ignores RLIMIT_NPROC), sets rlimits on processes, address space,
    CPU time, file size, open files, locked memory and message queues, and installs a seccomp
    filter against new namespaces and kernel keyrings;
  - a control group per run, where one is writable: a memory limit over everything the run
    holds, kernel memory included, and a task count of its own (nfn.sandbox.cgroup);
  - an empty environment, a wall-clock timeout that kills the whole process tree, and an
    output cap.
Without bubblewrap the cgroups, rlimits, user switch, seccomp filter, environment and timeout
still apply, and details["isolation"]["missing"] names what is not protected.
"""
import functools
import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time

from nfn.sandbox import cgroup
from nfn.sandbox.launcher import SYSCALLS
from nfn.sandbox.result import ToolResult

LAUNCHER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launcher.py")
SANDBOX_UID = 65534  # nobody: used only when nfn runs as root
DEFAULTS = dict(timeout=5.0, memory_mb=512, max_processes=32, max_output_bytes=64 * 1024,
                max_file_mb=16, workdir_mb=64, workdir_files=4096)
OPEN_FILES = 256      # per process
PTYS = 16             # pseudo-terminals per run
SIGNALS_QUEUED = 256  # per user
SHM_SEGMENTS, MSG_QUEUES, SEM_SETS = 64, 16, 32
NO_BWRAP_MISSING = [
    "network isolation (no network namespace)",
    "filesystem isolation (the host's files are readable)",
    "process-tree isolation (a process that leaves its group survives the timeout)",
]
NO_MOUNT_MISSING = ("inode limits on /work and /tmp, a bounded /dev/shm, SysV IPC limits and a "
                    "terminal limit (bubblewrap cannot give the launcher CAP_SYS_ADMIN here)")
JOIN_CGROUPS = 'n=$1; shift; while [ "$n" -gt 0 ]; do echo $$ > "$1" || exit 125; n=$((n - 1)); ' \
               'shift; done; exec "$@"'


def run_python(code, timeout=None, memory_mb=None, max_processes=None, max_output_bytes=None,
               max_file_mb=None, workdir_mb=None, workdir_files=None, files=None):
    """Run code as a script; ToolResult(ok, output=stdout, error, timed_out, details).

    memory_mb bounds each process's address space and, with a memory cgroup, all the run's
    memory together; workdir_mb and workdir_files bound each of /work, /tmp and /dev/shm.
    files: {relative name: text} placed in the working directory next to the script.
    """
    limits = dict(DEFAULTS)
    for key, value in (("timeout", timeout), ("memory_mb", memory_mb),
                       ("max_processes", max_processes), ("max_output_bytes", max_output_bytes),
                       ("max_file_mb", max_file_mb), ("workdir_mb", workdir_mb),
                       ("workdir_files", workdir_files)):
        if value is not None:
            limits[key] = value
    files = {"main.py": code, **(files or {})}
    for name in files:
        if os.path.isabs(name) or "/" in name or name in ("", ".", ".."):
            raise ValueError(f"sandbox file name must be a plain name: {name!r}")
    size = sum(len(text.encode("utf-8")) for text in files.values())
    if size > int(limits["workdir_mb"]) << 20 or len(files) >= int(limits["workdir_files"]):
        raise ValueError(f"the sandbox files ({len(files)}, {size} bytes) do not fit in "
                         f"{limits['workdir_mb']} MB and {limits['workdir_files']} files")
    isolation = isolation_report()
    host_dir = tempfile.mkdtemp(prefix="nfn-sandbox-")
    try:
        os.chmod(host_dir, 0o755)  # the sandbox user must read the script
        for name, text in files.items():
            with open(os.path.join(host_dir, name), "w", encoding="utf-8") as f:
                f.write(text)
        argv = _command(isolation, host_dir, limits)
        return _supervise(argv, limits, isolation, cwd=host_dir)
    finally:
        shutil.rmtree(host_dir, ignore_errors=True)


@functools.lru_cache(maxsize=1)
def isolation_report():
    """Which protections this machine gives: {"mode", "user", "cgroups", "missing": [...]}."""
    as_root = os.geteuid() == 0
    bwrap = shutil.which("bwrap")
    tries = []
    if bwrap:
        if as_root:
            tries.append(dict(mode="bwrap", bwrap=bwrap, as_root=True, mounts=True))
        # Not root, or root inside another sandbox's user namespace (no real user switch).
        tries += [dict(mode="bwrap", bwrap=bwrap, as_root=False, mounts=True),
                  dict(mode="bwrap", bwrap=bwrap, as_root=False, mounts=False)]
    iso = next((t for t in tries if _probe(t)), None)
    nproc_gap = None  # why RLIMIT_NPROC cannot hold the run's processes, where it cannot
    if iso is not None and iso["as_root"]:
        iso.update(user=f"nobody (uid {SANDBOX_UID})", missing=[])
    elif iso is not None:
        inside = "uid 0 of a user namespace" if iso["mounts"] else "your uid in a user namespace"
        iso.update(user=f"uid {os.geteuid()}",
                   missing=[f"a separate user (the snippet runs as {inside}, uid {os.geteuid()} "
                            "outside)"])
        if as_root:
            nproc_gap = "uid 0 outside the sandbox ignores RLIMIT_NPROC"
        if not iso["mounts"]:
            iso["missing"].append(NO_MOUNT_MISSING)
    else:
        iso = dict(mode="rlimits", bwrap=None, as_root=as_root, mounts=False,
                   user=f"nobody (uid {SANDBOX_UID})" if as_root else f"uid {os.geteuid()} (yours)",
                   missing=list(NO_BWRAP_MISSING))
        iso["missing"].insert(0, "bubblewrap (bwrap) is not installed" if not bwrap else
                              "bubblewrap is installed but cannot create namespaces here")
        if not as_root:
            iso["missing"].append("a separate user (the snippet runs as your uid)")
        elif not _reachable_by_others(os.path.realpath(sys.executable)):
            iso["user"] = "root, without capabilities"
            iso["missing"].append("a separate user (the interpreter is not reachable by nobody, "
                                  "so the snippet runs as root, without capabilities)")
            nproc_gap = "root ignores RLIMIT_NPROC"
    found, why = cgroup.places()
    iso["cgroups"] = {resource: base for resource, (_, base) in found.items()}
    if "memory" in why:
        iso["missing"].append(f"a memory limit for the whole run ({why['memory']}): memory is "
                              "bounded per process and per file, not in total")
    if "pids" in why and nproc_gap:
        iso["missing"].append(f"the process limit ({nproc_gap}, and {why['pids']})")
    elif "pids" in why:
        iso["missing"].append(f"a task limit per run ({why['pids']}): RLIMIT_NPROC counts all "
                              "the sandbox user's processes, so runs at once share it")
    if iso["mode"] == "rlimits" and iso["cgroups"]:
        # The run's cgroup holds every process it starts: all are killed when it ends.
        iso["missing"].remove(NO_BWRAP_MISSING[2])
    if os.uname().machine not in SYSCALLS:
        iso["missing"].append(f"a seccomp filter ({os.uname().machine} is not known to it): the "
                              "snippet can make a user namespace and mount file systems of its own")
    return iso


def _probe(iso):
    """The launcher sets up everything this isolation promises, then stops before the snippet."""
    host_dir = tempfile.mkdtemp(prefix="nfn-sandbox-")
    try:
        os.chmod(host_dir, 0o755)
        with open(os.path.join(host_dir, "main.py"), "w"):
            pass
        argv = _command(iso, host_dir, DEFAULTS, probe=True)
        proc = subprocess.run(argv, capture_output=True, timeout=10, env={})
        return proc.returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False
    finally:
        shutil.rmtree(host_dir, ignore_errors=True)


def _bwrap_prefix(iso):
    argv = [iso["bwrap"], "--die-with-parent", "--new-session", "--unshare-net", "--unshare-pid",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    # The launcher's only, to mount and to empty the bounding set; the snippet has none.
    caps = ["CAP_SYS_ADMIN", "CAP_SETPCAP"] if iso["mounts"] else []
    if iso["as_root"]:
        # No user namespace: the launcher also switches to nobody.
        caps = sorted(set(caps) | {"CAP_SETPCAP", "CAP_SETUID", "CAP_SETGID"})
        argv += ["--cap-drop", "ALL"]
    else:
        argv += ["--unshare-user"] + (["--uid", "0", "--gid", "0"] if caps else [])
    for cap in caps:
        argv += ["--cap-add", cap]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    return argv + ["--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev"]


def _command(isolation, host_dir, limits, probe=False):
    mem = int(limits["memory_mb"]) << 20
    nproc = int(limits["max_processes"])
    as_root = isolation["as_root"]  # False when root cannot switch users (nested sandbox)
    uid = SANDBOX_UID if as_root else -1
    config = {"uid": uid, "gid": uid, "probe": probe, "rlimits": {
        "RLIMIT_NPROC": nproc,                  # a fork bomb stops here
        "RLIMIT_AS": mem,                       # address space: huge allocations fail
        "RLIMIT_CPU": max(1, int(limits["timeout"] + 0.999)),  # SIGXCPU, then SIGKILL
        "RLIMIT_FSIZE": int(limits["max_file_mb"]) << 20,      # no file larger than this
        "RLIMIT_CORE": 0,
        "RLIMIT_NOFILE": OPEN_FILES,
        "RLIMIT_MEMLOCK": 0,
        "RLIMIT_MSGQUEUE": 0,                   # no POSIX message queues
        "RLIMIT_SIGPENDING": SIGNALS_QUEUED,
    }}
    if isolation["mode"] != "bwrap":
        if as_root and not _reachable_by_others(os.path.realpath(sys.executable)):
            config["uid"] = config["gid"] = -1  # nobody cannot start the interpreter
        return [sys.executable, "-I", "-S", LAUNCHER, json.dumps(config),
                os.path.join(host_dir, "main.py")]
    size = int(limits["workdir_mb"]) << 20
    python = os.path.realpath(sys.executable)
    argv = _bwrap_prefix(isolation)
    for root in sorted({sys.base_prefix, os.path.dirname(os.path.dirname(python))}):
        if not root.startswith("/usr"):
            argv += _open_parents(root) + ["--ro-bind", root, root]
    purelib = sysconfig.get_paths()["purelib"]
    if os.path.isdir(purelib) and not purelib.startswith("/usr"):
        argv += ["--tmpfs", purelib, "--remount-ro", purelib]  # third-party packages hidden
    if isolation["mounts"]:
        # The launcher mounts the bounded tmpfs over these and copies the files bound at /work.
        argv += ["--dir", "/tmp", "--ro-bind", host_dir, "/work"]
        config.update(mounts=[[d, size, int(limits["workdir_files"])]
                              for d in ("/work", "/tmp", "/dev/shm")], ptys=PTYS)
        config["ipc"] = {"kernel.shmmax": size, "kernel.shmall": size >> 12,
                         "kernel.shmmni": SHM_SEGMENTS, "kernel.msgmni": MSG_QUEUES,
                         "kernel.sem": f"250 {250 * SEM_SETS} 32 {SEM_SETS}"}
    else:
        argv += ["--size", str(size), "--tmpfs", "/tmp", "--size", str(size), "--tmpfs", "/work"]
        if as_root:
            argv += ["--chmod", "1777", "/work", "--chmod", "1777", "/tmp"]
        for name in sorted(os.listdir(host_dir)):
            argv += ["--ro-bind", os.path.join(host_dir, name), f"/work/{name}"]
    argv += ["--perms", "0755", "--dir", "/sandbox",
             "--ro-bind", LAUNCHER, "/sandbox/launcher.py",
             # Nothing bubblewrap made stays writable: a tmpfs there has no inode limit.
             "--remount-ro", "/dev", "--remount-ro", "/", "--chdir", "/work", "--clearenv",
             "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "HOME", "/work",
             "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONIOENCODING", "utf-8",
             "--", python, "-I", "-S", "/sandbox/launcher.py", json.dumps(config),
             "/work/main.py"]
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
    """Start argv in its own process group (and cgroups of its own where isolation has them),
    collect capped output, kill on timeout."""
    run_cg = None
    if isolation.get("cgroups"):
        # bwrap and the namespace's first process count as tasks too.
        tasks = int(limits["max_processes"]) + (2 if isolation["mode"] == "bwrap" else 0)
        run_cg = cgroup.RunCgroup(int(limits["memory_mb"]) << 20, tasks)
        if run_cg.missing:
            isolation = dict(isolation, missing=isolation["missing"] + run_cg.missing)
    try:
        return _run(argv, limits, isolation, cwd, run_cg)
    finally:
        if run_cg is not None:
            run_cg.close()


def _run(argv, limits, isolation, cwd, run_cg):
    env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONIOENCODING": "utf-8"}
    cap = int(limits["max_output_bytes"])
    info_r = info_w = None
    if isolation["mode"] == "bwrap":
        # bwrap reports the host pid of the namespace's first process on this pipe.
        info_r, info_w = os.pipe()
        argv = [argv[0], "--info-fd", str(info_w)] + argv[1:]
    if run_cg is not None and run_cg.procs:
        # Joined before bwrap or the launcher starts: everything the run does is counted.
        argv = ["/bin/sh", "-c", JOIN_CGROUPS, "sh", str(len(run_cg.procs))] + run_cg.procs + argv
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
    oom_killed = False
    if run_cg is not None:
        peak = run_cg.memory_peak()
        if peak is not None:
            details["memory_peak_mb"] = round(peak / (1 << 20), 1)
        oom_killed = run_cg.oom_kills() > 0
    if timed_out:
        return ToolResult(False, stdout, f"timed out after {limits['timeout']} s", True, details)
    if flooded:
        return ToolResult(False, stdout, f"output exceeded {cap} bytes", False, details)
    if returncode == 0:
        return ToolResult(True, stdout, None, False, details)
    if oom_killed:
        tail = stderr.strip()[-2000:]
        error = f"killed: the run's memory limit ({limits['memory_mb']} MB)"
        return ToolResult(False, stdout, error + (f"\n{tail}" if tail else ""), False, details)
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

"""A control group per sandboxed run: one memory limit over everything the run holds (its
processes' memory, its tmpfs files, and kernel memory: inodes, dentries, pipe buffers, page
tables) and one count of its tasks (processes and threads), whatever user they run as.

Where: the cgroup nfn runs in, or the directories NFN_SANDBOX_CGROUP names (":"-separated),
in cgroup v2 where its cgroup.subtree_control lists the memory and pids controllers, else in
cgroup v1's memory and pids hierarchies. A run's cgroup is a child nfn-sandbox-PID-N made
before the run and removed after it; whatever it still holds is killed first.
"""
import errno
import functools
import itertools
import os
import signal
import time

ENV = "NFN_SANDBOX_CGROUP"
RESOURCES = ("memory", "pids")
LIMIT_FILES = {("v2", "memory"): "memory.max", ("v1", "memory"): "memory.limit_in_bytes",
               ("v2", "pids"): "pids.max", ("v1", "pids"): "pids.max"}
_runs = itertools.count()


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _mountinfo(text):
    """[(mount root, mount point, fstype, super options)] of the cgroup file systems in text
    (/proc/self/mountinfo)."""
    mounts = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        fields, (fstype, _source, options) = left.split(), right.split()[:3]
        if fstype in ("cgroup", "cgroup2"):
            root, point = (p.replace("\\040", " ") for p in fields[3:5])
            mounts.append((root, point, fstype, options.split(",")))
    return mounts


def _own_dirs(mounts, text):
    """The directories of the cgroups text (/proc/self/cgroup) names, v2 first."""
    own = {}
    for line in text.splitlines():
        _, controllers, path = line.split(":", 2)
        for name in controllers.split(",") if controllers else ["(v2)"]:
            own[name] = path
    dirs = []
    for root, point, fstype, options in sorted(mounts, key=lambda m: m[2] != "cgroup2"):
        key = "(v2)" if fstype == "cgroup2" else next((o for o in options if o in RESOURCES), None)
        if key in own:
            rel = os.path.relpath(own[key], root)
            if not rel.startswith(".."):
                dirs.append(os.path.normpath(os.path.join(point, rel)))
    return dirs


def _controllers(path, mounts):
    """("v2" or "v1", the resources whose limits children of path can have)."""
    owner = max((m for m in mounts if (path + "/").startswith(m[1].rstrip("/") + "/")),
                key=lambda m: len(m[1]), default=None)
    if owner is None:
        return None, ()
    if owner[2] == "cgroup2":
        try:
            with open(os.path.join(path, "cgroup.subtree_control")) as f:
                delegated = f.read().split()
        except OSError:
            return "v2", ()
        return "v2", tuple(r for r in RESOURCES if r in delegated)
    return "v1", tuple(r for r in RESOURCES if r in owner[3])


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True


def _remove_stale(base):
    """Run cgroups left by an nfn that died: empty ones go (rmdir refuses the others)."""
    try:
        names = os.listdir(base)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if name.startswith("nfn-sandbox-") and len(parts) == 4 and parts[2].isdigit():
            if not _alive(int(parts[2])):
                try:
                    os.rmdir(os.path.join(base, name))
                except OSError:
                    pass


@functools.lru_cache(maxsize=1)
def places():
    """({resource: (version, base directory)}, {resource: why it is missing})."""
    found, why = {}, {}
    override = os.environ.get(ENV)
    try:
        mounts = _mountinfo(_read("/proc/self/mountinfo"))
        dirs = ([d for d in override.split(":") if d] if override else
                _own_dirs(mounts, _read("/proc/self/cgroup")))
    except ValueError as e:
        return {}, {r: f"cgroups unreadable: {e}" for r in RESOURCES}
    for base in dirs:
        version, offered = _controllers(base, mounts)
        for resource in offered:
            if resource in found:
                continue
            probe = os.path.join(base, f"nfn-sandbox-{os.getpid()}-probe")
            limit = LIMIT_FILES[version, resource]
            try:
                os.mkdir(probe)
                try:
                    _write(probe, limit, "-1" if limit == "memory.limit_in_bytes" else "max")
                finally:
                    os.rmdir(probe)
            except OSError as e:
                why.setdefault(resource, f"{base} is not writable here: {e.strerror}")
                continue
            found[resource] = (version, base)
            why.pop(resource, None)
            _remove_stale(base)
    for resource in RESOURCES:
        if resource not in found and resource not in why:
            why[resource] = (f"no {resource} controller delegated to " +
                             (override if override else "nfn's cgroup"))
    return found, why


def _write(directory, name, value):
    with open(os.path.join(directory, name), "w") as f:
        f.write(str(value))


class RunCgroup:
    """The run's cgroups; procs lists the files a process joins them through."""

    def __init__(self, memory_bytes, tasks):
        found, _ = places()
        self.dirs, self.missing = {}, []
        name = f"nfn-sandbox-{os.getpid()}-{next(_runs)}"
        for resource, (version, base) in found.items():
            path = os.path.join(base, name)
            try:
                if path not in self.dirs.values():
                    os.mkdir(path)
                if resource == "memory":
                    _write(path, LIMIT_FILES[version, resource], memory_bytes)
                    swap = "memory.swap.max" if version == "v2" else "memory.memsw.limit_in_bytes"
                    if os.path.exists(os.path.join(path, swap)):  # no swap beyond the limit
                        _write(path, swap, 0 if version == "v2" else memory_bytes)
                else:
                    _write(path, LIMIT_FILES[version, resource], tasks)
            except OSError as e:
                self.missing.append(f"a {resource} cgroup for this run ({path}: {e.strerror})")
                continue
            self.dirs[resource] = path
        self.versions = {r: found[r][0] for r in self.dirs}

    @property
    def procs(self):
        return sorted({os.path.join(d, "cgroup.procs") for d in self.dirs.values()})

    def oom_kills(self):
        if "memory" not in self.dirs:
            return 0
        name = "memory.events" if self.versions["memory"] == "v2" else "memory.oom_control"
        for line in _read(os.path.join(self.dirs["memory"], name)).splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                return int(value)
        return 0

    def memory_peak(self):
        """Bytes, or None where the kernel does not say."""
        if "memory" not in self.dirs:
            return None
        name = "memory.peak" if self.versions["memory"] == "v2" else "memory.max_usage_in_bytes"
        text = _read(os.path.join(self.dirs["memory"], name)).strip()
        return int(text) if text.isdigit() else None

    def close(self):
        """Kill whatever is left (a process that escaped the process group), then remove."""
        for path in self.procs:
            if os.path.exists(os.path.join(os.path.dirname(path), "cgroup.kill")):
                try:
                    _write(os.path.dirname(path), "cgroup.kill", 1)
                except OSError:
                    pass
        deadline = time.monotonic() + 5
        for path in sorted(set(self.dirs.values())):
            while True:
                pids = [int(p) for p in _read(os.path.join(path, "cgroup.procs")).split()]
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                try:
                    os.rmdir(path)
                    break
                except OSError as e:  # EBUSY while the killed tasks exit
                    if e.errno != errno.EBUSY or time.monotonic() > deadline:
                        break
                    time.sleep(0.01)
        self.dirs = {}

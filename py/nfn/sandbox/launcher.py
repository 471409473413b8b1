"""Runs inside the sandbox, before the snippet: mount the run's bounded file systems, drop
every privilege, set the limits, then replace itself with an isolated interpreter running the
snippet.

argv: CONFIG SCRIPT, CONFIG a JSON object:
  uid, gid   the user to become when running as root (-1: keep the current one);
  mounts     [[dir, bytes, inodes], ...]: a tmpfs on each (bubblewrap only: /work, /tmp,
             /dev/shm); the regular files bubblewrap bound at /work are copied into the new one;
  ptys       the most pseudo-terminals (bubblewrap only: a new devpts instance);
  ipc        {sysctl name: value} for the run's own IPC namespace (bubblewrap only);
  rlimits    {RLIMIT_* name: value};
  probe      true: stop before running anything (isolation_report's check).
Any failure before the snippet starts exits with status 125 and one line on stderr.
Standard library only; it runs with `python -I -S`.
"""
import ctypes
import json
import os
import resource
import struct
import sys

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT, MS_BIND, MS_REC = 1, 2, 4, 8, 32, 4096, 16384
PR_SET_NO_NEW_PRIVS, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 38, 24, 47, 4
PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
SETUP_FAILED = 125

libc = ctypes.CDLL(None, use_errno=True)


class SetupError(Exception):
    pass


def check(ret, what):
    if ret != 0:
        raise SetupError(f"{what}: {os.strerror(ctypes.get_errno())}")


def mount(source, target, fstype, flags, data=None):
    enc = lambda s: s.encode() if s is not None else None  # noqa: E731
    check(libc.mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags), enc(data)),
          f"mount {target}")


def bounded_file_systems(mounts, ptys):
    """Fresh tmpfs with both a byte and an inode limit (bwrap's --size bounds bytes only)."""
    given = {}
    for name in sorted(os.listdir("/work")):
        path = os.path.join("/work", name)
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as f:
                given[name] = f.read()
    for target, size, inodes in mounts:
        mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV,
              f"size={int(size)},nr_inodes={int(inodes)},mode=1777")
    os.chdir("/work")  # the old /work lies under the new mount
    for name, data in given.items():
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
        except OSError as e:
            raise SetupError(f"the files given do not fit in /work: {e.strerror}") from None
        finally:
            os.close(fd)
    # A devpts instance of the run's own, with a pseudo-terminal limit.
    mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC,
          f"newinstance,ptmxmode=0666,mode=0620,max={int(ptys)}")


def ipc_limits(values):
    """SysV IPC limits of the run's own IPC namespace, then /proc/sys read-only: its owner (the
    snippet, in a user namespace) could otherwise raise them again."""
    for name, value in values.items():
        with open("/proc/sys/" + name.replace(".", "/"), "w") as f:
            f.write(str(value))
    mount("/proc/sys", "/proc/sys", None, MS_BIND | MS_REC)
    mount(None, "/proc/sys", None,
          MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)


def drop_privileges(uid, gid):
    """No capability in any set, no way to gain one (no_new_privs), and the sandbox user."""
    with open("/proc/sys/kernel/cap_last_cap") as f:
        last_cap = int(f.read())
    if os.getuid() == 0 or os.geteuid() == 0:
        for cap in range(last_cap + 1):  # needs CAP_SETPCAP, which root has here
            libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    if uid >= 0 and os.getuid() == 0:
        # Root is exempt from RLIMIT_NPROC, so the snippet must not run as root.
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    libc.prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = struct.pack("II", 0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    check(libc.capset(header, bytes(24)), "capset")  # empty effective, permitted, inheritable
    check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")


# seccomp: no new namespaces (a user namespace would let the snippet mount a tmpfs of its own,
# outside every limit), no kernel keyrings (keys outlive the run). Numbers per architecture:
# (AUDIT_ARCH, unshare, clone, clone3, setns, add_key, request_key, keyctl).
SYSCALLS = {
    "x86_64": (0xC000003E, 272, 56, 435, 308, 248, 249, 250),
    "aarch64": (0xC00000B7, 97, 220, 435, 268, 217, 218, 219),
}
CLONE_NEW_ANY = 0x7E020000  # CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET


def seccomp_filter(machine):
    """A classic BPF program for the filter above, or None on an architecture not listed."""
    if machine not in SYSCALLS:
        return None
    arch, unshare, clone, clone3, setns, add_key, request_key, keyctl = SYSCALLS[machine]
    ld, jeq, jge, jset, ret = 0x20, 0x15, 0x35, 0x45, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | 1, 0x00050000 | 38
    prog = [
        (ld, 0, 0, 4),                 # 0  seccomp_data.arch
        (jeq, 1, 0, arch),             # 1
        (ret, 0, 0, eperm),            # 2  another ABI (i386 on x86_64, arm32 on aarch64)
        (ld, 0, 0, 0),                 # 3  seccomp_data.nr
        (jge, 8, 0, 0x40000000),       # 4  x32 system calls: -> 13
        (jeq, 7, 0, unshare),          # 5  -> 13
        (jeq, 6, 0, setns),            # 6  -> 13
        (jeq, 5, 0, add_key),          # 7  -> 13
        (jeq, 4, 0, request_key),      # 8  -> 13
        (jeq, 3, 0, keyctl),           # 9  -> 13
        (jeq, 3, 0, clone3),           # 10 -> 14: its flags lie in memory seccomp cannot read
        (jeq, 3, 0, clone),            # 11 -> 15
        (ret, 0, 0, allow),            # 12
        (ret, 0, 0, eperm),            # 13
        (ret, 0, 0, enosys),           # 14 libc then falls back to clone
        (ld, 0, 0, 16),                # 15 clone's flags (args[0], low half)
        (jset, 0, 1, CLONE_NEW_ANY),   # 16
        (ret, 0, 0, eperm),            # 17
        (ret, 0, 0, allow),            # 18
    ]
    return b"".join(struct.pack("HBBI", *insn) for insn in prog)


def install_seccomp(program):
    filters = ctypes.create_string_buffer(program, len(program))
    fprog = struct.pack("HxxxxxxQ", len(program) // 8, ctypes.addressof(filters))
    check(libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.c_char_p(fprog), 0, 0), "seccomp")


def main():
    config, script = json.loads(sys.argv[1]), sys.argv[2]
    try:
        if config.get("mounts"):
            bounded_file_systems(config["mounts"], config["ptys"])
        if config.get("ipc"):
            ipc_limits(config["ipc"])
        with open("/proc/self/oom_score_adj", "w") as f:
            f.write("1000")  # under memory pressure the snippet goes first, never the host's
        drop_privileges(config["uid"], config["gid"])
        for name, value in config["rlimits"].items():
            which = getattr(resource, name)
            hard = value + 1 if which == resource.RLIMIT_CPU else value  # SIGXCPU, then SIGKILL
            ceiling = resource.getrlimit(which)[1]  # a user below it cannot raise it
            if ceiling != resource.RLIM_INFINITY:
                value, hard = min(value, ceiling), min(hard, ceiling)
            resource.setrlimit(which, (value, hard))
        program = seccomp_filter(os.uname().machine)
        if program is not None:
            install_seccomp(program)
    except (OSError, SetupError) as e:
        print(f"sandbox setup failed: {e}", file=sys.stderr)
        sys.exit(SETUP_FAILED)
    if config.get("probe"):
        sys.exit(0)
    os.execv(sys.executable, [sys.executable, "-I", "-S", "-B", "-u", script])


if __name__ == "__main__":
    main()

"""Runs inside the sandbox, before the snippet: drop to the sandbox user, set the limits,
then replace itself with an isolated interpreter running the snippet.

argv: UID GID NPROC MEMORY_BYTES CPU_SECONDS FILE_BYTES SCRIPT   (UID -1: keep the current user)
Standard library only; it runs with `python -I -S`.
"""
import os
import resource
import sys


def main():
    uid, gid, nproc, memory, cpu, fsize = (int(a) for a in sys.argv[1:7])
    script = sys.argv[7]
    if uid >= 0 and os.getuid() == 0:
        # Root is exempt from RLIMIT_NPROC, so the snippet must not run as root.
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    limits = [
        (resource.RLIMIT_NPROC, nproc),      # a fork bomb stops here
        (resource.RLIMIT_AS, memory),        # address space: huge allocations fail
        (resource.RLIMIT_CPU, cpu),          # SIGXCPU, then SIGKILL at the hard limit
        (resource.RLIMIT_FSIZE, fsize),      # no file larger than this
        (resource.RLIMIT_CORE, 0),
        (resource.RLIMIT_NOFILE, 256),
    ]
    for which, value in limits:
        hard = value + 1 if which == resource.RLIMIT_CPU else value
        resource.setrlimit(which, (value, hard))
    os.execv(sys.executable, [sys.executable, "-I", "-S", "-B", "-u", script])


if __name__ == "__main__":
    main()

"""Per-run cgroups: where they go on v1 and v2 hosts, the limits a run's cgroup holds, and
that nothing is left when it closes."""
import os
import subprocess
import tempfile
import time
import unittest

from nfn.sandbox import cgroup


class CgroupTest(unittest.TestCase):
    def test_cgroup_places_from_a_v2_host(self):
        # What a systemd host with cgroup v2 only shows, read by the same code as v1 here.
        mountinfo = ("24 1 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
                     "25 1 0:23 / /proc rw - proc proc rw\n")
        mounts = cgroup._mountinfo(mountinfo)
        self.assertEqual(mounts, [("/", "/sys/fs/cgroup", "cgroup2", ["rw", "nsdelegate"])])
        self.assertEqual(cgroup._own_dirs(mounts, "0::/system.slice/nfn.service\n"),
                         ["/sys/fs/cgroup/system.slice/nfn.service"])
        v1 = cgroup._mountinfo("35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
                               "39 31 0:36 /ns /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids\n")
        self.assertEqual(cgroup._own_dirs(v1, "4:memory:/a/b\n8:pids:/ns/c\n1:cpu:/\n"),
                         ["/sys/fs/cgroup/memory/a/b", "/sys/fs/cgroup/pids/c"])
        self.assertEqual(cgroup._controllers("/sys/fs/cgroup/memory/a/b", v1), ("v1", ("memory",)))
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "cgroup.subtree_control"), "w") as f:
                f.write("cpu memory pids\n")
            fake = [("/", d, "cgroup2", ["rw"])]
            self.assertEqual(cgroup._controllers(d, fake), ("v2", ("memory", "pids")))
            with open(os.path.join(d, "cgroup.subtree_control"), "w") as f:
                f.write("cpu\n")  # not delegated: the run gets no cgroup, and says so
            self.assertEqual(cgroup._controllers(d, fake), ("v2", ()))

    @unittest.skipUnless(cgroup.places()[0], "no writable cgroup here")
    def test_a_run_cgroup_holds_its_limits_and_goes(self):
        run = cgroup.RunCgroup(64 << 20, 5)
        self.assertEqual(run.missing, [])
        for resource, path in run.dirs.items():
            name = cgroup.LIMIT_FILES[run.versions[resource], resource]
            with open(os.path.join(path, name)) as f:
                self.assertEqual(f.read().strip(), str(64 << 20 if resource == "memory" else 5))
        # A process that joined and outlives the run is killed when the run closes.
        joined = subprocess.Popen(["/bin/sh", "-c", "echo $$ > \"$1\"; exec sleep 60", "sh",
                                   run.procs[0]])
        for _ in range(100):
            with open(run.procs[0]) as f:
                if str(joined.pid) in f.read().split():
                    break
            time.sleep(0.01)
        dirs = list(run.dirs.values())
        run.close()
        self.assertEqual(joined.wait(timeout=5), -9)
        self.assertFalse(any(os.path.exists(d) for d in dirs))


if __name__ == "__main__":
    unittest.main()

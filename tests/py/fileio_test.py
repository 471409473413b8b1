"""nfn.fileio's atomic writes: a file appears whole or not at all, and what a killed writer
left (its temporary file) is removed by the next writer in that directory, never a live
writer's or a just-made one's."""
import contextlib
import errno
import io
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import nfn
from nfn import fileio

PY_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(nfn.__file__)))
HOUR_AGO = time.time() - 3600

# Writes part of `path` through atomic_open, says so, then waits to be killed (or dies at once).
WRITER = """
import os, signal, sys, time
from nfn import fileio
with fileio.atomic_open(sys.argv[1], "wb") as f:
    f.write(b"half a file")
    f.flush()
    if sys.argv[2] == "die":
        os.kill(os.getpid(), signal.SIGKILL)
    print("writing", flush=True)
    time.sleep(600)
"""


def writer(path, how):
    return subprocess.Popen([sys.executable, "-c", WRITER, path, how], env=dict(os.environ, PYTHONPATH=PY_ROOT),
                            stdout=subprocess.PIPE, text=True)


class AtomicOpenTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))

    def names(self):
        return sorted(os.listdir(self.dir))

    def test_a_killed_writers_file_is_removed_by_the_next_writer(self):
        killed = writer(os.path.join(self.dir, "a.bin"), "die")
        killed.wait(timeout=60)
        self.assertEqual(killed.returncode, -signal.SIGKILL)
        left = self.names()
        self.assertEqual(len(left), 1, left)  # its temporary file, and no a.bin
        self.assertTrue(left[0].startswith(".nfn-tmp-a.bin-"), left)
        orphan = os.path.join(self.dir, left[0])
        live = writer(os.path.join(self.dir, "b.bin"), "wait")  # a writer still at work
        try:
            self.assertEqual(live.stdout.readline(), "writing\n")
            live_tmp = [n for n in self.names() if n.startswith(".nfn-tmp-b.bin-")]
            self.assertEqual(len(live_tmp), 1)
            # Just made (its writer may not hold it yet): kept, and said nothing.
            said = io.StringIO()
            with contextlib.redirect_stderr(said), fileio.atomic_open(os.path.join(self.dir, "c.txt"), "w") as f:
                f.write("c")
            self.assertTrue(os.path.exists(orphan))
            self.assertEqual(said.getvalue(), "")
            for name in (left[0], live_tmp[0]):  # as old as a killed run's
                os.utime(os.path.join(self.dir, name), (HOUR_AGO, HOUR_AGO))
            with contextlib.redirect_stderr(said), fileio.atomic_open(os.path.join(self.dir, "c.txt"), "w") as f:
                f.write("c2")
            self.assertEqual(said.getvalue(), "")  # silently: not a line on every export
            self.assertEqual(self.names(), sorted(["c.txt"] + live_tmp))  # the live writer's stays
        finally:
            live.kill()
            live.wait()
            live.stdout.close()
        with open(os.path.join(self.dir, "c.txt")) as f:
            self.assertEqual(f.read(), "c2")
        # The live writer, killed now, is the next one's to remove.
        os.utime(os.path.join(self.dir, live_tmp[0]), (HOUR_AGO, HOUR_AGO))
        with fileio.atomic_open(os.path.join(self.dir, "d.bin")) as f:
            f.write(b"d")
        self.assertEqual(self.names(), ["c.txt", "d.bin"])

    def test_a_failed_write_leaves_nothing_and_the_old_file_stands(self):
        path = os.path.join(self.dir, "keep.txt")
        fileio.write_json(path, {"v": 1})
        with self.assertRaises(ZeroDivisionError), fileio.atomic_open(path, "w") as f:
            f.write("partial")
            1 / 0
        self.assertEqual(self.names(), ["keep.txt"])
        self.assertEqual(fileio.read_json(path), {"v": 1})

    def test_permissions_are_a_plain_opens(self):
        old = os.umask(0o022)
        try:
            with fileio.atomic_open(os.path.join(self.dir, "m.bin")) as f:
                f.write(b"m")
        finally:
            os.umask(old)
        self.assertEqual(os.stat(os.path.join(self.dir, "m.bin")).st_mode & 0o777, 0o644)


# Says ready, then reads DIR/entry/meta until DIR/stop exists; prints how many reads found no
# entry, and how many found one.
READER = """
import os, sys
entry, stop = os.path.join(sys.argv[1], "entry", "meta"), os.path.join(sys.argv[1], "stop")
missed = found = 0
print("ready", flush=True)
while not os.path.exists(stop):
    try:
        with open(entry) as f:
            f.read()
        found += 1
    except FileNotFoundError:
        missed += 1
print(missed, found)
"""


class InstallDirTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.final = os.path.join(self.dir, "entry")

    def install(self, text):
        with fileio.WorkDir(self.dir, "tmp", "entry") as work:
            with open(os.path.join(work.path, "meta"), "w") as f:
                f.write(text)
            fileio.install_dir(work.path, self.final)

    def read(self):
        with open(os.path.join(self.final, "meta")) as f:
            return f.read()

    def test_a_reader_always_finds_an_entry_while_it_is_replaced(self):
        self.install("0")
        reader = subprocess.Popen([sys.executable, "-c", READER, self.dir], stdout=subprocess.PIPE, text=True)
        try:
            self.assertEqual(reader.stdout.readline(), "ready\n")
            for i in range(1, 400):
                self.install(str(i))
        finally:
            open(os.path.join(self.dir, "stop"), "w").close()
            missed, found = map(int, reader.communicate(timeout=60)[0].split())
        self.assertGreater(found, 0)
        self.assertEqual(missed, 0, f"{missed} of {missed + found} reads found no entry")
        self.assertEqual(self.read(), "399")
        self.assertEqual(sorted(os.listdir(self.dir)), ["entry", "stop"])  # the replaced ones are gone

    def test_an_entry_that_is_a_link_is_replaced(self):
        # An entry kept elsewhere and linked into place (a cache on another disk) is replaced by
        # the new directory, with and without the exchange; the link goes, its target stays.
        from unittest import mock
        elsewhere = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        with open(os.path.join(elsewhere, "meta"), "w") as f:
            f.write("linked")
        for exchange in (fileio._exchange, lambda a, b: False):
            os.symlink(elsewhere, self.final)
            with mock.patch.object(fileio, "_exchange", exchange):
                self.install("new")
            self.assertFalse(os.path.islink(self.final))
            self.assertEqual((self.read(), os.listdir(self.dir)), ("new", ["entry"]))
            self.assertEqual(os.listdir(elsewhere), ["meta"])
            shutil.rmtree(self.final)
        # A writer killed between the exchange and its cleanup leaves the link under a work
        # name: the next writer there removes the link, never what it points to.
        os.symlink(elsewhere, os.path.join(self.dir, ".nfn-tmp-entry-deadbeef"))
        self.assertEqual(fileio.remove_orphaned_dirs(self.dir, quiet=True), 1)
        self.assertEqual((os.listdir(self.dir), os.listdir(elsewhere)), ([], ["meta"]))

    def test_where_names_cannot_be_swapped_the_old_entry_is_moved_aside(self):
        from unittest import mock
        self.install("old")
        real_rename = os.rename
        with mock.patch.object(fileio, "_exchange", lambda a, b: False):
            self.install("new")
            self.assertEqual((self.read(), os.listdir(self.dir)), ("new", ["entry"]))

            def failing(src, dst):  # the new entry cannot follow the old one aside
                if dst == self.final and ".nfn-tmp-" in src and not os.path.exists(self.final):
                    raise OSError(errno.EIO, "I/O error")
                return real_rename(src, dst)
            with mock.patch.object(os, "rename", failing), self.assertRaises(OSError):
                self.install("lost")
            self.assertEqual((self.read(), os.listdir(self.dir)), ("new", ["entry"]))  # the old one is back

            def racing(src, dst):  # another writer's entry goes in while the old one is aside
                real_rename(src, dst)
                if src == self.final:
                    os.mkdir(self.final)
                    with open(os.path.join(self.final, "meta"), "w") as f:
                        f.write("other")
            with mock.patch.object(os, "rename", racing):
                self.install("mine")
            self.assertEqual((self.read(), os.listdir(self.dir)), ("other", ["entry"]))  # one whole entry


if __name__ == "__main__":
    unittest.main()

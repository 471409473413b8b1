"""`nfn tool calc` and `nfn tool python` from the command line."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

import nfn

PY_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(nfn.__file__)))


def nfn_cli(args, stdin=None):
    code = "import sys; from nfn.cli.main import main; sys.exit(main(sys.argv[1:]))"
    return subprocess.run([sys.executable, "-c", code] + args, capture_output=True, text=True,
                          input=stdin, env=dict(os.environ, PYTHONPATH=PY_ROOT), timeout=60)


class ToolCliTest(unittest.TestCase):
    def test_calc(self):
        r = nfn_cli(["tool", "calc", "3*(4+5)"])
        self.assertEqual((r.returncode, r.stdout), (0, "27\n"))
        r = nfn_cli(["tool", "calc", "__import__('os')", "--json"])
        self.assertEqual(r.returncode, 1)
        out = json.loads(r.stdout)
        self.assertEqual((out["ok"], out["output"], out["timed_out"]), (False, "", False))
        self.assertIn("not allowed", out["error"])
        r = nfn_cli(["tool", "calc", "1/0"])
        self.assertEqual((r.returncode, r.stderr), (1, "error: division by zero\n"))

    def test_python(self):
        r = nfn_cli(["tool", "python", "-", "--json"], stdin="print(sum(range(10)))")
        self.assertEqual(r.returncode, 0, r.stderr)
        out = json.loads(r.stdout)
        self.assertEqual((out["ok"], out["output"], out["error"]), (True, "45\n", None))
        self.assertIn("missing", out["isolation"])
        with tempfile.NamedTemporaryFile("w", suffix=".py") as f:
            f.write("while True: pass\n")
            f.flush()
            r = nfn_cli(["tool", "python", f.name, "--timeout", "1"])
        self.assertEqual(r.returncode, 1)
        self.assertIn("timed_out: true", r.stderr)

    def test_python_bad_input(self):
        r = nfn_cli(["tool", "python", "/nonexistent.py"])
        self.assertEqual(r.returncode, 1)
        self.assertEqual(r.stderr.strip(), "nfn tool: error: /nonexistent.py: No such file or directory")
        for timeout in ("0", "nan", "inf", "601"):
            r = nfn_cli(["tool", "python", "-", "--timeout", timeout], stdin="")
            self.assertEqual((r.returncode, r.stderr.strip()), (1, "nfn tool: error: --timeout must be in (0, 600] "
                                                                   f"seconds, got {float(timeout)}"))
        code = "import sys; from nfn.cli.main import main; sys.exit(main(sys.argv[1:]))"
        r = subprocess.run([sys.executable, "-c", code, "tool", "python", "-"], input=b'print("caf\xe9")\n',
                           capture_output=True, env=dict(os.environ, PYTHONPATH=PY_ROOT), timeout=60)
        self.assertEqual((r.returncode, r.stderr.decode().strip()),
                         (1, "nfn tool: error: standard input: not UTF-8 text (byte 10)"))

    def test_calc_output_is_text(self):
        r = nfn_cli(["tool", "calc", "'\\ud800'+'a'"])
        self.assertEqual((r.returncode, r.stderr), (1, "error: not allowed: a string that is not Unicode text\n"))
        r = nfn_cli(["tool", "calc", "--", "-7%3"])  # a leading minus after --, as the help says
        self.assertEqual((r.returncode, r.stdout), (0, "2\n"))


if __name__ == "__main__":
    unittest.main()

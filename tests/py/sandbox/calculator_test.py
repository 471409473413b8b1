"""The calculator: right answers for arithmetic and str.count, and refusals for everything
that could reach Python itself."""
import time
import unittest

from nfn.sandbox.calculator import calculate


class CalculatorTest(unittest.TestCase):
    def test_answers(self):
        cases = {"1+2*3": "7", "(1+2)*3": "9", "2**10": "1024", "10/4": "2.5", "7//2": "3",
                 "-7//2": "-4", "-3%5": "2", "12.5*4": "50", "2**-1": "0.5", "-(3-5)": "2",
                 "0.1+0.2": "0.30000000000000004", "'strawberry'.count('r')": "3",
                 "('ab'+'ab').count('b')": "2", "1_000*3": "3000", "2**4095 > 0 if 0 else 1": None}
        for expr, want in cases.items():
            with self.subTest(expr=expr):
                r = calculate(expr)
                if want is None:
                    self.assertFalse(r.ok)  # conditional expressions are not arithmetic
                else:
                    self.assertTrue(r.ok, r.error)
                    self.assertEqual(r.output, want)

    def test_hostile_expressions_are_refused(self):
        hostile = [
            "__import__('os').system('echo pwned')", "open('/etc/passwd').read()",
            "(1).__class__", "().__class__.__bases__[0].__subclasses__()",
            "'x'.__class__", "'abc'.upper()", "'a'.count.__self__", "globals()", "lambda: 1",
            "[x for x in range(10)]", "x", "'a'*10**9", "9**9**9", "10**100000", "2**4097",
            "(2**4000)*(2**4000)", "1/0", "0**-1", "(-8)**0.5", "1e308*10", "'a'.count('a', 0)",
            "'a'.count(x='a')", "eval('1')", "a=1", "1; 2", "{1: 2}", "(1, 2)", "True+1",
            "b'x'", "'%s' % 1", "f'{1}'", "1 if 1 else 2", "1 < 2", "~1", "not 1",
            "(" * 500 + "1" + ")" * 500, "1+" * 400 + "1", "'x' " * 2000,
        ]
        for expr in hostile:
            with self.subTest(expr=expr[:40]):
                start = time.monotonic()
                r = calculate(expr)
                self.assertFalse(r.ok, r.output)
                self.assertTrue(r.error)
                self.assertLess(time.monotonic() - start, 1.0)

    def test_limits_are_the_results_not_estimates(self):
        # Results within MAX_INT_BITS (4,096) are answered whatever the operands, and float
        # powers whatever their exponent; only a result past the limits is refused.
        for expr, want in [("2**3000", str(2**3000)), ("10**1100", str(10**1100)), ("2**4095", str(2**4095)),
                           ("(-3)**2583", str((-3)**2583)), ("1.0000001**2e6", repr(1.0000001**2e6)),
                           ("2**-1e7", "0"), ("0.5**1e9", "0")]:
            with self.subTest(expr=expr):
                r = calculate(expr)
                self.assertTrue(r.ok, r.error)
                self.assertEqual(r.output, want)
        for expr in ("2**4096", "3**2585", "10**1e7", "1.5**1e16"):
            with self.subTest(expr=expr):
                self.assertEqual(calculate(expr).error, "result too large")

    def test_strings_must_be_text(self):
        for expr in ("'\\ud800'+'a'", "'x\\ud83d'", "'\\udcff'.count('a')"):
            with self.subTest(expr=expr):
                r = calculate(expr)
                self.assertEqual((r.ok, r.error), (False, "not allowed: a string that is not Unicode text"))

    def test_timeout(self):
        r = calculate("1+1", timeout=-1)  # a deadline already past
        self.assertEqual((r.ok, r.timed_out), (False, True))

    def test_non_string(self):
        self.assertFalse(calculate(None).ok)


if __name__ == "__main__":
    unittest.main()

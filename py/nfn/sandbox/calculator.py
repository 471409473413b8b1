"""A calculator for the chat model's tool calls: arithmetic and str.count, nothing else.

The expression is parsed with `ast` and walked by an interpreter that knows only numbers,
strings, + - * / // % **, unary +/-, and `"text".count("t")`. Names, attributes other than
count, subscripts, comprehensions and every other node are refused, so nothing reaches
Python's builtins. Sizes are checked before each operation (no 9**9**9), and a deadline
bounds the walk.
"""
import ast
import math
import operator
import time

from nfn.sandbox.result import ToolResult

MAX_EXPR_CHARS = 1000
MAX_INT_BITS = 4096   # about 1,200 decimal digits
MAX_STR_CHARS = 10_000
DEFAULT_TIMEOUT_S = 1.0

BINARY = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


class CalcError(Exception):
    """A refused or failed expression; the message is what the model sees."""


class CalcTimeout(CalcError):
    pass


def calculate(expr, timeout=DEFAULT_TIMEOUT_S):
    """Evaluate expr; ToolResult(ok, output=the value as text, error, timed_out)."""
    if not isinstance(expr, str):
        return ToolResult(False, error="expression must be a string")
    if len(expr) > MAX_EXPR_CHARS:
        return ToolResult(False, error=f"expression longer than {MAX_EXPR_CHARS} characters")
    try:
        tree = ast.parse(expr.strip(), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return ToolResult(False, error=f"not an expression: {type(e).__name__}")
    try:
        value = _Evaluator(time.monotonic() + timeout).visit(tree.body)
    except CalcTimeout as e:
        return ToolResult(False, error=str(e), timed_out=True)
    except CalcError as e:
        return ToolResult(False, error=str(e))
    except ZeroDivisionError:
        return ToolResult(False, error="division by zero")
    except (OverflowError, RecursionError):
        return ToolResult(False, error="result too large")
    return ToolResult(True, output=_format(value))


def _format(value):
    if isinstance(value, float):
        if value.is_integer() and abs(value) < 1e16:
            return str(int(value))
        return repr(value)
    return str(value)


class _Evaluator:
    def __init__(self, deadline):
        self.deadline = deadline
        self.depth = 0

    def visit(self, node):
        if time.monotonic() > self.deadline:
            raise CalcTimeout("calculator timed out")
        self.depth += 1
        try:
            if self.depth > 100:
                raise CalcError("expression nested too deeply")
            method = getattr(self, "visit_" + type(node).__name__, None)
            if method is None:
                raise CalcError(f"not allowed: {type(node).__name__}")
            return method(node)
        finally:
            self.depth -= 1

    def visit_Constant(self, node):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise CalcError(f"not allowed: constant {type(value).__name__}")
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:  # a lone surrogate such as '\ud800' is no text
                raise CalcError("not allowed: a string that is not Unicode text") from None
        return _check(value)

    def visit_UnaryOp(self, node):
        op = UNARY.get(type(node.op))
        operand = self.visit(node.operand)
        if op is None or isinstance(operand, str):
            raise CalcError(f"not allowed: unary {type(node.op).__name__}")
        return op(operand)

    def visit_BinOp(self, node):
        op = BINARY.get(type(node.op))
        if op is None:
            raise CalcError(f"not allowed: operator {type(node.op).__name__}")
        left, right = self.visit(node.left), self.visit(node.right)
        if isinstance(left, str) or isinstance(right, str):
            return _string_op(node.op, left, right)
        _check_cost(node.op, left, right)
        return _check(op(left, right))

    def visit_Call(self, node):
        # Exactly one shape: <string expression>.count(<string expression>)
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr == "count") or node.keywords \
                or len(node.args) != 1:
            raise CalcError("not allowed: the only call is \"text\".count(\"t\")")
        target, needle = self.visit(func.value), self.visit(node.args[0])
        if not isinstance(target, str) or not isinstance(needle, str):
            raise CalcError("count works on strings only")
        return target.count(needle)


def _string_op(op, left, right):
    if isinstance(op, ast.Add) and isinstance(left, str) and isinstance(right, str):
        return _check(left + right)
    raise CalcError("strings support only + and .count()")


def _check_cost(op, left, right):
    """Refuse an operation whose result would be too large before computing it."""
    if isinstance(op, ast.Pow) and isinstance(left, int) and isinstance(right, int):
        # |left| >= 2^(bits - 1), so the result has at least (bits - 1) * right + 1 bits; one
        # that passes this holds at most twice MAX_INT_BITS, cheap to make and then _check it.
        if right > 0 and abs(left) > 1 and (left.bit_length() - 1) * right + 1 > MAX_INT_BITS:
            raise CalcError("result too large")
        if right < 0 and left == 0:
            raise ZeroDivisionError
    if isinstance(op, ast.Mult) and isinstance(left, int) and isinstance(right, int):
        if left.bit_length() + right.bit_length() > MAX_INT_BITS + 1:
            raise CalcError("result too large")


def _check(value):
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise CalcError("result too large")
    if isinstance(value, float) and not math.isfinite(value):
        raise CalcError("result is not a finite number")
    if isinstance(value, str) and len(value) > MAX_STR_CHARS:
        raise CalcError("string too long")
    if isinstance(value, complex):
        raise CalcError("result is complex")
    return value

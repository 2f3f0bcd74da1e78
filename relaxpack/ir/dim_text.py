"""Symbolic dims as text: Python syntax, printed and parsed back.

``format_dim`` prints a dim so that ``parse_dim`` (and Python) read it back
to the same canonical form; ``from_ast`` reads a dim from a Python
expression, with bounded work: dim text comes from files.

    >>> n = sym("n")
    >>> format_dim((4 * n + 2) // 2), format_dim(dim_min(n, 16) * sym("m"))
    ('2 * n + 1', 'm * min(n, 16)')
    >>> parse_dim(format_dim(n // 3 - 1)) == n // 3 - 1
    True
"""

from __future__ import annotations

import ast
import keyword
import operator
import re
from functools import reduce
from typing import Callable

from ..errors import DimError
from .dim_algebra import (
    Atom, Dim, DimExpr, FloorDiv, Max, Min, Mod, Sym, check_divisor, dim_max, dim_min, normalize, single_atom, sym,
)

__all__ = ["MAX_TEXT_BITS", "MAX_TEXT_POWER", "MAX_TEXT_TERMS", "dim_identifier", "format_dim", "from_ast",
           "parse_dim"]


def format_dim(x) -> str:
    """``x`` in Python syntax, readable by :func:`parse_dim`.

    >>> format_dim((sym("n") + 1) // 2 - sym("n") * sym("n"))
    '-n ** 2 + (n + 1) // 2'
    """
    x = normalize(x)
    return str(x) if isinstance(x, int) else _format_poly(x)


def _format_poly(e: DimExpr) -> str:
    out = ""
    for i, (mono, k) in enumerate(e.terms):
        # a lone `a // c` factor needs no parentheses except after unary minus
        body = _format_monomial(mono, bare=abs(k) == 1 and (i > 0 or k > 0))
        term = body if abs(k) == 1 else f"{abs(k)} * {body}"
        if i == 0:
            out = term if k > 0 else f"-{term}"
        else:
            out += f" + {term}" if k > 0 else f" - {term}"
    if e.const:
        out += f" + {e.const}" if e.const > 0 else f" - {-e.const}"
    return out


def _format_monomial(mono: tuple, bare: bool) -> str:
    alone = bare and len(mono) == 1 and mono[0][1] == 1
    factors = []
    for atom, p in mono:
        s = _format_atom(atom)
        if isinstance(atom, (FloorDiv, Mod)) and not alone:
            s = f"({s})"
        factors.append(s if p == 1 else f"{s} ** {p}")
    return " * ".join(factors)


def _format_atom(atom: Atom) -> str:
    if isinstance(atom, Sym):
        return atom.name
    if isinstance(atom, (Min, Max)):
        name = "min" if isinstance(atom, Min) else "max"
        return f"{name}({format_dim(atom.a)}, {format_dim(atom.b)})"
    text = _format_poly(atom.num)
    if not isinstance(single_atom(atom.num), (Sym, Min, Max)):
        text = f"({text})"
    return f"{text} {'//' if isinstance(atom, FloorDiv) else '%'} {atom.c}"


def parse_dim(text: str) -> Dim:
    """Read a dim written in Python syntax (what :func:`format_dim` prints).

    >>> parse_dim("min(seq, 512) * 2 + (n + 1) // 2")
    DimExpr('(n + 1) // 2 + 2 * min(seq, 512)')
    """
    if not isinstance(text, str):
        raise DimError(f"parse_dim expects a string, got {text!r}")
    shown = text if len(text) <= 80 else text[:77] + "..."
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except (SyntaxError, ValueError) as e:
        raise DimError(f"cannot parse dim {shown!r}: {getattr(e, 'msg', e)}") from None
    except (RecursionError, MemoryError):
        raise DimError(f"cannot parse dim {shown!r}: nested too deeply") from None
    try:
        return from_ast(tree.body)
    except DimError as e:
        raise DimError(f"cannot parse dim {shown!r}: {e}") from None


_BINOPS: dict[type, Callable[[Dim, Dim], Dim]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: lambda a, b: a // check_divisor(b, "//"),
    ast.Mod: lambda a, b: a % check_divisor(b, "%"),
    ast.Pow: operator.pow,      # bounded by _bounded_binop before it gets here
}

# Dim text comes from files (archives, the IR text format): bounded work for
# bounded text. A power takes a small exponent, and no step may build a
# polynomial of more terms or an integer of more bits than any real shape has.
MAX_TEXT_POWER = 64
MAX_TEXT_TERMS = 256
MAX_TEXT_BITS = 256


def _bounded_binop(op: ast.operator, a: Dim, b: Dim) -> Dim:
    """``a op b`` for dim text, refused before it could blow up."""
    if isinstance(op, ast.Pow):
        if not isinstance(b, int) or not 0 <= b <= MAX_TEXT_POWER:
            raise DimError(f"the exponent of ** must be an integer in 0..{MAX_TEXT_POWER}, got {format_dim(b)}")
        if isinstance(a, int) and a.bit_length() * b > MAX_TEXT_BITS:
            raise DimError(f"{a} ** {b} has more than {MAX_TEXT_BITS} bits")
        out: Dim = 1
        for _ in range(b):       # term by term, each product checked
            out = _bounded_binop(ast.Mult(), out, a)
        return out
    if isinstance(op, ast.Mult) and not isinstance(a, int) and not isinstance(b, int) \
            and len(a.terms) * len(b.terms) > MAX_TEXT_TERMS * 4:
        raise DimError(f"a product of {len(a.terms)}- and {len(b.terms)}-term dims is too large")
    return _checked(_BINOPS[type(op)](a, b))


def _checked(d: Dim) -> Dim:
    numbers = [d] if isinstance(d, int) else [d.const, *(k for _, k in d.terms)]
    if not isinstance(d, int) and len(d.terms) > MAX_TEXT_TERMS:
        raise DimError(f"a dim of {len(d.terms)} terms (at most {MAX_TEXT_TERMS})")
    if any(abs(k).bit_length() > MAX_TEXT_BITS for k in numbers):
        raise DimError(f"a dim with a number of more than {MAX_TEXT_BITS} bits")
    return d


def from_ast(node: ast.expr, lookup: Callable[[str], Dim] | None = None) -> Dim:
    """The dim written by the Python expression ``node``; identifiers are
    resolved by ``lookup`` (default :func:`sym`). Powers, sizes of
    polynomials and of numbers are bounded (``MAX_TEXT_*``): text is data.

    >>> from_ast(ast.parse("n * 2", mode="eval").body, {"n": 5}.__getitem__)
    10
    """
    lookup = sym if lookup is None else lookup

    def walk(n: ast.expr) -> Dim:
        if isinstance(n, ast.Constant) and type(n.value) is int:
            return _checked(n.value)
        if isinstance(n, ast.Name):
            return normalize(lookup(n.id))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, (ast.USub, ast.UAdd)):
            v = walk(n.operand)
            return -v if isinstance(n.op, ast.USub) else v
        if isinstance(n, ast.BinOp):
            if isinstance(n.op, ast.Div):
                raise DimError(f"true division in {_short(n)!r}: dims use '//'")
            if type(n.op) in _BINOPS:
                return _bounded_binop(n.op, walk(n.left), walk(n.right))
        if isinstance(n, ast.Call) and _callee(n.func) in ("min", "max") and not n.keywords \
                and len(n.args) >= 2:
            is_min = _callee(n.func) == "min"
            pick = dim_min if is_min else dim_max
            return reduce(lambda a, b: _checked(pick(a, b)), [walk(a) for a in n.args])
        raise DimError(f"unsupported syntax in a dim: {_short(n)!r}")

    try:
        return walk(node)
    except RecursionError:
        raise DimError("a dim nested too deeply") from None


def _short(node: ast.expr) -> str:
    text = ast.unparse(node)
    return text if len(text) <= 80 else text[:77] + "..."


def _callee(func: ast.expr) -> str | None:
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) \
            and func.value.id == "T":
        return func.attr                # TVM's T.min / T.max spelling
    return None


def dim_identifier(name: str) -> str:
    """The dim variable a model's dim name becomes: every character that cannot be in an
    identifier an underscore (paddle2onnx's ``DynamicDimension.0`` is ``DynamicDimension_0``), a
    leading digit prefixed ``d_``, a keyword suffixed ``_``. ``--dim`` takes either spelling."""
    out = re.sub(r"\W", "_", name)
    if not out or out[0].isdigit():
        out = "d_" + out
    return out + "_" if keyword.iskeyword(out) else out

"""Symbolic dims to the runtime's shape programs (plain nested lists).

``2 * n + 1`` with ``n`` in heap slot 0 becomes ``["+", ["*", 2, ["h", 0]], 1]``;
the runtime compiles it once into a closure (runtime/shape_program.py).
"""

from __future__ import annotations

import ast
from typing import Callable

from ..errors import IRError
from ..ir.dims import Dim, format_dim

_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.FloorDiv: "//", ast.Mod: "%"}


def dim_program(dim: Dim, slot_of: Callable[[str], int]):
    """The program computing ``dim``; ``slot_of(name)`` gives a var's heap slot."""
    if isinstance(dim, int):
        return dim
    tree = ast.parse(format_dim(dim), mode="eval").body
    return _convert(tree, slot_of, format_dim(dim))


def _convert(node: ast.expr, slot_of, text: str):
    if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        return ["h", slot_of(node.id)]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return ["neg", _convert(node.operand, slot_of, text)]
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return [_BINOPS[type(node.op)], _convert(node.left, slot_of, text), _convert(node.right, slot_of, text)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant):
        base = _convert(node.left, slot_of, text)
        out = base
        for _ in range(node.right.value - 1):
            out = ["*", out, base]
        return out if node.right.value > 0 else 1
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
        args = [_convert(a, slot_of, text) for a in node.args]
        out = args[0]
        for a in args[1:]:
            out = [node.func.id, out, a]
        return out
    raise IRError(f"cannot compile dim expression {text!r} for the runtime")

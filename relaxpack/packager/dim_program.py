"""Symbolic dims to the runtime's shape programs (plain nested lists).

``2 * n + 1`` with ``n`` in heap slot 0 becomes ``["+", ["*", 2, ["h", 0]], 1]``;
the runtime compiles it once into a closure (runtime/shape_program.py).
Chains of an associative operator become balanced trees: the runtime
refuses programs nested deeper than ``MAX_DEPTH`` (archives are untrusted),
and a real model's sum can be long (SSD concatenates one top-k per class:
90 data-dependent lengths), so its depth is log2 of the length, not the length.
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
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Add, ast.Sub)):
        return _sum(node, slot_of, text)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mult):
        return _balanced("*", [_convert(n, slot_of, text) for _, n in _chain(node, (ast.Mult,))])
    if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
        return [_BINOPS[type(node.op)], _convert(node.left, slot_of, text), _convert(node.right, slot_of, text)]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow) and isinstance(node.right, ast.Constant):
        base = _convert(node.left, slot_of, text)
        return _balanced("*", [base] * node.right.value) if node.right.value > 0 else 1
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("min", "max"):
        return _balanced(node.func.id, [_convert(a, slot_of, text) for a in _arguments(node, node.func.id)])
    raise IRError(f"cannot compile dim expression {text!r} for the runtime")


def _sum(node: ast.BinOp, slot_of, text: str):
    """``a + b - c + d ...`` as (balanced sum of the added terms) - (balanced sum of the subtracted)."""
    chain = _chain(node, (ast.Add, ast.Sub))
    added = [_convert(n, slot_of, text) for op, n in chain if op is not ast.Sub]
    subtracted = [_convert(n, slot_of, text) for op, n in chain if op is ast.Sub]
    total = _balanced("+", added)
    return ["-", total, _balanced("+", subtracted)] if subtracted else total


def _chain(node: ast.expr, ops: tuple[type, ...]) -> list[tuple[type | None, ast.expr]]:
    """The operands of the left-leaning chain ``((x0 op1 x1) op2 x2) ...`` of operators in
    ``ops``, each with the operator before it (None for ``x0``); walked without recursion."""
    items = []
    while isinstance(node, ast.BinOp) and isinstance(node.op, ops):
        items.append((type(node.op), node.right))
        node = node.left
    items.append((None, node))
    return items[::-1]


def _arguments(node: ast.Call, name: str) -> list[ast.expr]:
    """The arguments of ``min(min(a, b), c)`` (nested calls of ``name``) as ``[a, b, c]``."""
    out, stack = [], list(reversed(node.args))
    while stack:
        arg = stack.pop()
        if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == name:
            stack.extend(reversed(arg.args))
        else:
            out.append(arg)
    return out


def _balanced(op: str, items: list):
    """``items`` combined by the associative ``op`` into a tree of depth log2(len(items))."""
    if len(items) == 1:
        return items[0]
    mid = len(items) // 2
    return [op, _balanced(op, items[:mid]), _balanced(op, items[mid:])]

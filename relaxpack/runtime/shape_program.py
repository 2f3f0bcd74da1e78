"""Dim arithmetic at run time: small expression programs over the shape heap.

The compiler writes each symbolic dim the runtime must compute as a nested
list (plain data), e.g. ``["+", ["*", ["h", 0], 2], 1]`` for ``2 * n + 1``
with ``n`` in heap slot 0. :func:`compile_program` turns one into a Python
closure once, when the VM is prepared; nothing is ``eval``-ed.
"""

from __future__ import annotations

import operator
import reprlib
from typing import Callable

from ..errors import ArchiveError

Program = int | tuple | list
DimFn = Callable[[list], int]


class ShapeProgramError(ArchiveError):
    """A shape program failed at run time; the VM adds the instruction that ran it."""


def _floordiv(a: int, b: int) -> int:
    if b == 0:
        raise ShapeProgramError(f"shape program divides {a} by zero")
    return a // b


def _mod(a: int, b: int) -> int:
    if b == 0:
        raise ShapeProgramError(f"shape program takes {a} modulo zero")
    return a % b


_BINARY = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": _floordiv, "%": _mod,
           "min": min, "max": max}
MAX_DEPTH = 64


def compile_program(prog: Program, heap_size: int, depth: int = 0) -> DimFn:
    """A closure ``heap -> int`` computing ``prog``; malformed programs raise ShapeProgramError (an ArchiveError)."""
    if depth > MAX_DEPTH:
        raise ShapeProgramError("shape program nested too deeply")
    if isinstance(prog, bool) or not isinstance(prog, (int, list, tuple)):
        raise ShapeProgramError(f"malformed shape program {reprlib.repr(prog)}")
    if isinstance(prog, int):
        return lambda heap, v=prog: v
    if len(prog) == 2 and prog[0] == "h":
        slot = prog[1]
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < heap_size:
            raise ShapeProgramError(f"shape program reads heap slot {slot!r} of {heap_size}")
        return lambda heap: heap[slot]
    if len(prog) == 2 and prog[0] == "neg":
        inner = compile_program(prog[1], heap_size, depth + 1)
        return lambda heap: -inner(heap)
    if len(prog) == 3 and prog[0] in _BINARY:
        fn = _BINARY[prog[0]]
        a = compile_program(prog[1], heap_size, depth + 1)
        b = compile_program(prog[2], heap_size, depth + 1)
        if isinstance(prog[2], int):  # the common case: a constant right operand
            c = prog[2]
            if c == 0 and prog[0] in ("//", "%"):
                raise ShapeProgramError(f"shape program {program_text(prog)} divides by the constant 0")
            return lambda heap: fn(a(heap), c)
        return lambda heap: fn(a(heap), b(heap))
    raise ShapeProgramError(f"malformed shape program {reprlib.repr(prog)}")


def program_text(prog: Program, names: dict[int, str] | None = None) -> str:
    """Readable form of a program, for bytecode listings."""
    if isinstance(prog, int):
        return str(prog)
    if prog[0] == "h":
        return (names or {}).get(prog[1], f"h{prog[1]}")
    if prog[0] == "neg":
        return f"-({program_text(prog[1], names)})"
    if prog[0] in ("min", "max"):
        return f"{prog[0]}({program_text(prog[1], names)}, {program_text(prog[2], names)})"
    return f"({program_text(prog[1], names)} {prog[0]} {program_text(prog[2], names)})"

"""Symbolic dims to shape programs (packager/dim_program.py): exact values, and a depth
that grows with the log of a chain's length, so long sums stay under the runtime's bound."""

from __future__ import annotations

import random

import pytest

from relaxpack.ir.dims import dim_max, dim_min, evaluate, sym
from relaxpack.packager.dim_program import dim_program
from relaxpack.runtime.shape_program import MAX_DEPTH, compile_program


def _depth(prog) -> int:
    if isinstance(prog, list) and prog[0] != "h":
        return 1 + max(_depth(p) for p in prog[1:])
    return 0


def _run(dim, names):
    slots = {n: i for i, n in enumerate(names)}
    prog = dim_program(dim, slots.__getitem__)
    values = [random.Random(i).randrange(0, 50) for i in range(len(names))]
    got = compile_program(prog, len(names))(values)
    assert got == evaluate(dim, dict(zip(names, values)))
    return prog


@pytest.mark.parametrize("count", [1, 2, 3, 7, 90, 256])
def test_a_long_sum_is_a_balanced_tree(count):
    """SSD concatenates one top-k per class: a sum of 90 data-dependent lengths, which was a
    program 89 deep and refused at load ("shape program nested too deeply")."""
    names = [f"k{i}" for i in range(count)]
    dim = sum((sym(n) for n in names[1:]), sym(names[0])) + 3
    prog = _run(dim, names)
    assert _depth(prog) <= count.bit_length() + 1


def test_sums_with_subtracted_terms_products_and_powers():
    names = [f"a{i}" for i in range(40)]
    terms = [sym(n) for n in names]
    dim = sum(terms[:20], 0) - sum(terms[20:], 0) + 2 * terms[0] * terms[1] * terms[2] - 7
    prog = _run(dim, names)
    assert _depth(prog) <= 10
    power = _run(terms[0] ** 40 + 1, names)
    assert _depth(power) <= 8 < MAX_DEPTH


def test_long_min_and_max_chains():
    names = [f"m{i}" for i in range(100)]
    lo = hi = sym(names[0])
    for n in names[1:]:
        lo, hi = dim_min(lo, sym(n)), dim_max(hi, sym(n))
    for dim in (lo, hi, lo + hi):
        assert _depth(_run(dim, names)) <= 9

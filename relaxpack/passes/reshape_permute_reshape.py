"""A transpose between two reshapes that only group axes is one transpose.

torch.onnx's dynamo exporter writes attention's ``k.transpose(-2, -1)`` on a
``(batch, heads, seq, d)`` key as ``reshape(k, (batch * heads, seq, d))``,
``permute_dims(.., (0, 2, 1))``, ``reshape(.., (batch, heads, d, seq))``; the
TorchScript exporter writes ``permute_dims(k, (0, 1, 3, 2))``, which
FoldPermuteMatmul reads as a strided view of the matmul's operand. The
sandwich cost a copy of the key per attention (whisper, BART, GPT-2, llama,
phi decoders).

The reshapes are row-major regroupings: the first splits and merges ``x``'s
axes into "atoms" (``_reshape_atoms``), the transpose permutes the atoms in
whole groups, the last reshape regroups them. When every axis of ``x`` stays
one contiguous run of its atoms, in order, the atoms' permutation is a
permutation ``q`` of ``x``'s axes; when the output's shape is then ``x``'s
shape permuted by ``q``, the three ops are ``permute_dims(x, q)``: the same
values at the same positions (no arithmetic, exact).
"""

from __future__ import annotations

from ..ops.registry import make_call
from .core.rules import Match


def axes_permutation(m: Match) -> tuple[int, ...] | str:
    """The permutation ``q`` of ``x``'s axes the chain amounts to, or why there is none."""
    from .simplify_algebra import _axes, _reshape_atoms   # one definition of each (that module imports this one)

    x_shape, mid, out = m.sinfo("x").shape, m.sinfo("first").shape, m.out_sinfo.shape
    if x_shape is None or mid is None or out is None:
        return "a shape is not known"
    atoms = _reshape_atoms(tuple(x_shape), tuple(mid))
    if atoms is None:
        return "the first reshape does not only split or merge axes"
    by_x, by_mid = atoms
    p = _axes(m["perm"].attrs["axes"], len(mid))
    position = {atom: i for i, atom in enumerate(a for d in p for a, _ in by_mid[d])}
    for k, group in enumerate(by_x):
        spots = [position[a] for a, _ in group]
        if spots != list(range(spots[0], spots[0] + len(spots))):
            return f"axis {k} of {m.name_of('x')} does not stay one run of its parts"
    q = tuple(sorted(range(len(x_shape)), key=lambda k: position[by_x[k][0][0]]))
    permuted = [x_shape[k] for k in q]
    if len(permuted) != len(out) or not all(a == b or m.analyzer.prove_equal(a, b) for a, b in zip(permuted, out)):
        return f"the result's shape is not {m.name_of('x')}'s shape permuted by {q}"
    return q


def check(m: Match) -> str | None:
    result = axes_permutation(m)
    return result if isinstance(result, str) else None


def rewrite(m: Match):
    """reshape(permute_dims(reshape(x, s1), p), s2) -> permute_dims(x, q)."""
    q = axes_permutation(m)
    return m["x"] if q == tuple(range(len(q))) else make_call("permute_dims", m["x"], axes=q)

"""FoldPermuteMatmul: transposes around a matmul become strided views of one kernel.

Attention splits its projections into heads and merges them back with
``permute_dims``: ``q @ k^T`` multiplies ``permute_dims(q, (0, 2, 1, 3))``
by ``permute_dims(k, (0, 2, 3, 1))``, and ``probs @ v`` is permuted back
before the merge. Each ``permute_dims`` is a copy (the one of ``k`` a real
transpose, about 0.08 ms at BERT's ``(1, 128, 8, 64)``). BLAS reads a
matrix with any leading dimension, transposed or not, so the permuted
operand need not exist: ``R.permute_matmul`` takes the permutations as
attributes and its kernel multiplies strided views (and writes the product
through a permuted view of its output).

Rules (table :data:`RULES`), each needing the folded value used only once:

- ``fold_lhs_permute`` / ``fold_rhs_permute``: ``matmul(permute_dims(x, p), y)``
  (or a ``permute_matmul`` without ``lhs_axes``) -> ``permute_matmul(x, y, lhs_axes=p)``;
  likewise on the right.
- ``fold_out_permute``: ``permute_dims(matmul(x, y), p)`` -> ``permute_matmul(x, y, out_axes=p)``.
- ``split_permuted_gemm``: ``nn.gemm(x, y, b)`` without activation (FuseBiasActivation ran first)
  whose ``x`` or ``y`` is a foldable ``permute_dims`` -> ``add(matmul(x, y), b)``, for the rules
  above to fold the permutes (attention's ``q @ k^T + mask``); FuseOps then makes the product and
  the add one fused kernel, as the gemm was, without the copies.

A permutation is folded only when the view it makes keeps the last dim of
the array viewed among its matrices' two dims (one unit stride, so numpy
hands it to BLAS); other permutations stay copies.
"""

from __future__ import annotations

from ..ir.expr import Call
from ..ir.struct_info import TensorStructInfo
from ..ops.registry import make_call
from .core.infra import function_pass
from .core.rules import Match, Rule, RewriteTable, all_of, is_op, used_once, wildcard

_PRODUCTS = ("matmul", "permute_matmul")


def _axes_of(perm: Call) -> tuple[int, ...] | None:
    """The normalized permutation of a ``permute_dims`` call, None if its rank is unknown."""
    ndim = perm.args[0].struct_info.ndim if isinstance(perm.args[0].struct_info, TensorStructInfo) else -1
    if ndim < 2:
        return None
    axes = perm.attrs["axes"]
    axes = tuple(reversed(range(ndim))) if axes is None else tuple(int(a) % ndim for a in axes)
    return axes


def _unit_stride_kept(axes: tuple[int, ...]) -> bool:
    """The view keeps the last dim among its matrices' two dims: BLAS reads it as it is."""
    return len(axes) - 1 in axes[-2:]


def _inverse(axes: tuple[int, ...]) -> tuple[int, ...]:
    inverse = [0] * len(axes)
    for i, a in enumerate(axes):
        inverse[a] = i
    return tuple(inverse)


def _attrs(mm: Call) -> dict:
    if mm.op.name == "matmul":
        return {"out_dtype": mm.attrs["out_dtype"]}
    return dict(mm.attrs)


def _operand_check(side: str):
    def check(m: Match) -> str | None:
        mm = m["mm"]
        if mm.op.name == "permute_matmul" and mm.attrs[f"{side}_axes"] is not None:
            return f"the R.permute_matmul already permutes its {side}"
        if mm.op.name == "permute_matmul" and mm.attrs["out_axes"] is not None:
            return "the R.permute_matmul already permutes its result"
        axes = _axes_of(m["perm"])
        if axes is None:
            return f"the rank of the permuted {side} is not known (or below 2)"
        if not _unit_stride_kept(axes):
            return f"permutation {axes} moves the last dim out of the matrices (no BLAS view)"
        return None
    check.__name__ = f"foldable_{side}"
    return check


def _out_check(m: Match) -> str | None:
    mm = m["mm"]
    if mm.op.name == "permute_matmul" and mm.attrs["out_axes"] is not None:
        return "the R.permute_matmul already permutes its result"
    axes = _axes_of(m["perm"])
    if axes is None:
        return "the rank of the product is not known"
    if not _unit_stride_kept(_inverse(axes)):
        return f"permutation {axes} of the product moves the output's last dim out of the matrices"
    return None


def fold_lhs_permute(m: Match):
    """matmul(permute_dims(x, p), y) -> permute_matmul(x, y, lhs_axes=p)."""
    return make_call("permute_matmul", m["x"], m["y"], **{**_attrs(m["mm"]), "lhs_axes": _axes_of(m["perm"])})


def fold_rhs_permute(m: Match):
    """matmul(x, permute_dims(y, p)) -> permute_matmul(x, y, rhs_axes=p)."""
    return make_call("permute_matmul", m["x"], m["y"], **{**_attrs(m["mm"]), "rhs_axes": _axes_of(m["perm"])})


def fold_out_permute(m: Match):
    """permute_dims(matmul(x, y), p) -> permute_matmul(x, y, out_axes=p)."""
    return make_call("permute_matmul", m["x"], m["y"], **{**_attrs(m["mm"]), "out_axes": _axes_of(m["perm"])})


def _permuted_operand(m: Match) -> str | None:
    if m["gemm"].attrs.get("activation") is not None:
        return "the gemm has an activation"
    reasons = []
    for side in ("x", "y"):
        value, uses = m.producer(m[side])
        if isinstance(value, Call) and getattr(value.op, "name", None) == "permute_dims":
            axes = _axes_of(value)
            if uses == 1 and axes is not None and _unit_stride_kept(axes):
                return None
            reasons.append(f"the permuted {side} is used {uses} times or moves the last dim")
    return "; ".join(reasons) or "no operand is a permute_dims"


def split_permuted_gemm(m: Match):
    """nn.gemm(permute_dims(x), y, b) -> add(matmul(permute_dims(x), y), b), for the fold rules."""
    return make_call("add", make_call("matmul", m["x"], m["y"], out_dtype=None), m["b"])


RULES = RewriteTable("FoldPermuteMatmul", [
    Rule("split_permuted_gemm",
         is_op("nn.gemm")(wildcard("x"), wildcard("y"), wildcard("b"), name="gemm"),
         _permuted_operand, split_permuted_gemm),
    Rule("fold_lhs_permute",
         is_op(*_PRODUCTS)(is_op("permute_dims")(wildcard("x"), name="perm", what="lhs"), wildcard("y"),
                           name="mm"),
         all_of(used_once("perm", "the permuted lhs"), _operand_check("lhs")),
         fold_lhs_permute),
    Rule("fold_rhs_permute",
         is_op(*_PRODUCTS)(wildcard("x"), is_op("permute_dims")(wildcard("y"), name="perm", what="rhs"),
                           name="mm"),
         all_of(used_once("perm", "the permuted rhs"), _operand_check("rhs")),
         fold_rhs_permute),
    Rule("fold_out_permute",
         is_op("permute_dims")(is_op(*_PRODUCTS)(wildcard("x"), wildcard("y"), name="mm", what="input"),
                               name="perm"),
         all_of(used_once("mm", "the product"), _out_check),
         fold_out_permute),
])


@function_pass(name="FoldPermuteMatmul", opt_level=2, requires=("import", "optimize"), produces="optimize")
def fold_permute_matmul(func, mod, ctx):
    """Fold permute_dims of a matmul's operands and result into R.permute_matmul
    (rules fold_lhs_permute, fold_rhs_permute, fold_out_permute; see the module docstring)."""
    return RULES.apply(func)

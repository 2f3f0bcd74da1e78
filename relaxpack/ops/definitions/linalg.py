"""Linear algebra: matmul with numpy semantics.

>>> make_call("matmul", x, w)              # (b, s, 64) @ (64, 128) -> (b, s, 128)   # doctest: +SKIP
"""

from __future__ import annotations

from ...errors import IRError
from ...ir.dims import DimAnalyzer, format_dim
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo, check_dtype
from ..registry import register_op
from .common import (
    NUMERIC, attr_error, broadcast_shapes, check_dtype_kind, fmt_shape, fmt_sinfo, int_tuple_attr,
    provably_different, result_vdevice, same_dtype, shape_error, tensor_arg, unproven_error, with_shape,
)


def _out_dtype(call: Call, dtype: str | None) -> str | None:
    out = call.attrs["out_dtype"]
    if out is None:
        return dtype
    try:
        return check_dtype(out)
    except IRError:
        raise attr_error(call, f"attribute out_dtype is not a dtype: {out!r}") from None


def _infer_matmul(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    return _matmul_sinfo(call, tensor_arg(call, 0, "lhs"), tensor_arg(call, 1, "rhs"), analyzer)


#: operand dtypes a product with an ``out_dtype`` may mix (the kernel widens both to float32, then
#: rounds to ``out_dtype``): a float16 attention's float32 ``probs`` by its float16 ``v``
_MIXABLE = frozenset({"float16", "bfloat16", "float32"})


def _operand_dtype(call: Call, a: TensorStructInfo, b: TensorStructInfo) -> str | None:
    """The operands' common dtype; float operands of different widths are allowed when the call
    names its ``out_dtype`` (then that is the result's)."""
    if call.attrs["out_dtype"] is not None and a.dtype != b.dtype and {a.dtype, b.dtype} <= _MIXABLE:
        return None
    return same_dtype(call, (a, b), ("lhs", "rhs"))


def _matmul_sinfo(call: Call, a: TensorStructInfo, b: TensorStructInfo, analyzer: DimAnalyzer) -> TensorStructInfo:
    dtype = _out_dtype(call, _operand_dtype(call, a, b))
    check_dtype_kind(call, a, NUMERIC, "lhs")
    check_dtype_kind(call, b, NUMERIC, "rhs")
    vdevice = result_vdevice(call, (a, b))
    for s, side in ((a, "lhs"), (b, "rhs")):
        if s.ndim == 0:
            raise shape_error(call, f"{side} must have rank >= 1, got a scalar")
    if a.ndim < 0 or b.ndim < 0:
        return TensorStructInfo(None, dtype, -1, vdevice)
    if a.shape is None or b.shape is None:
        ndim = max(a.ndim, b.ndim) - (a.ndim == 1) - (b.ndim == 1)
        if a.ndim == 1 and b.ndim == 1:
            ndim = 0
        return TensorStructInfo(None, dtype, ndim, vdevice)
    # numpy: a 1-D lhs is a row (1, k), a 1-D rhs a column (k, 1); the
    # added dim is dropped from the result.
    lhs = (1, *a.shape) if a.ndim == 1 else a.shape
    rhs = (*b.shape, 1) if b.ndim == 1 else b.shape
    k_lhs, k_rhs = lhs[-1], rhs[-2]
    if not (k_lhs == k_rhs or analyzer.prove_equal(k_lhs, k_rhs)):
        shapes = f"{fmt_shape(a.shape)} and {fmt_shape(b.shape)}"
        if (isinstance(k_lhs, int) and isinstance(k_rhs, int)) or provably_different(analyzer, k_lhs, k_rhs):
            raise shape_error(call, f"inner dims of shapes {shapes} do not match: "
                                    f"{format_dim(k_lhs)} != {format_dim(k_rhs)}")
        raise unproven_error(call, f"inner dims of shapes {shapes} do not match: {format_dim(k_lhs)} and "
                                   f"{format_dim(k_rhs)} are not provably equal (use R.match_cast)", k_lhs, k_rhs)
    batch = broadcast_shapes(call, (lhs[:-2], rhs[:-2]), analyzer, shown=(a.shape, b.shape))
    out = [*batch]
    if a.ndim != 1:
        out.append(lhs[-2])
    if b.ndim != 1:
        out.append(rhs[-1])
    return TensorStructInfo(tuple(out), dtype, vdevice=vdevice)


register_op("matmul", infer=_infer_matmul, attrs={"out_dtype": None}, num_args=2,
            doc="Matrix product with numpy semantics (1-D operands, broadcast batch dims).")


def _permuted(call: Call, sinfo: TensorStructInfo, name: str) -> TensorStructInfo:
    """``sinfo`` with its dims permuted by the attribute ``name`` (None: unchanged)."""
    axes = int_tuple_attr(call, name, allow_none=True)
    if axes is None or sinfo.ndim < 0:
        return sinfo
    if len(axes) != sinfo.ndim or sorted(axes) != list(range(sinfo.ndim)):
        raise attr_error(call, f"{name}={axes} is not a permutation of the {sinfo.ndim} dims of {fmt_sinfo(sinfo)}")
    return sinfo if sinfo.shape is None else with_shape(sinfo, tuple(sinfo.shape[i] for i in axes))


def _infer_permute_matmul(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    a = _permuted(call, tensor_arg(call, 0, "lhs"), "lhs_axes")
    b = _permuted(call, tensor_arg(call, 1, "rhs"), "rhs_axes")
    return _permuted(call, _matmul_sinfo(call, a, b, analyzer), "out_axes")


register_op("permute_matmul", infer=_infer_permute_matmul,
            attrs={"lhs_axes": None, "rhs_axes": None, "out_axes": None, "out_dtype": None}, num_args=2,
            doc="permute_dims(matmul(permute_dims(lhs, lhs_axes), permute_dims(rhs, rhs_axes)), out_axes); "
                "None leaves an operand or the result as it is. The kernel multiplies strided views "
                "(attention's head split and merge without copies).")


def _infer_det(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    check_dtype_kind(call, data, frozenset({"float"}))
    if 0 <= data.ndim < 2:
        raise shape_error(call, f"needs square matrices (rank >= 2), got {fmt_shape(data.shape)}")
    if data.shape is None:
        return TensorStructInfo(None, data.dtype, max(data.ndim - 2, -1), data.vdevice)
    rows, cols = data.shape[-2:]
    if rows != cols and not analyzer.prove_equal(rows, cols):
        message = f"needs square matrices, got {fmt_shape(data.shape)}"
        if isinstance(rows, int) and isinstance(cols, int) or provably_different(analyzer, rows, cols):
            raise shape_error(call, message)
        raise unproven_error(call, f"{message}: rows {format_dim(rows)} and columns {format_dim(cols)} are "
                                   f"not provably equal (use R.match_cast)", rows, cols)
    return TensorStructInfo(data.shape[:-2], data.dtype, vdevice=data.vdevice)


register_op("det", infer=_infer_det, num_args=1,
            doc="Determinants of the square matrices in the last two dims: (*, M, M) -> (*).")

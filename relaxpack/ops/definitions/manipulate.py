"""Shape manipulation: reshape, permute_dims, concat, split, astype,
broadcast_to, expand_dims, squeeze, flatten.

>>> make_call("reshape", x, ShapeExpr((batch, seq, 12, -1)))   # doctest: +SKIP
>>> make_call("concat", Tuple((a, b)), axis=1)                 # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import Dim, DimAnalyzer, format_dim
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo, TupleStructInfo
from ..registry import REQUIRED, register_op
from .common import (
    FLOAT, attr_error, check_broadcastable_to, check_dims_equal, check_dtype_kind, dtype_attr, exact_div, fmt_shape, fmt_sinfo, int_attr,
    int_tuple_attr, is_int_value, normalize_axes, normalize_axis, prod, provably_different,
    result_vdevice, same_dtype, shape_arg, shape_error, tensor_arg, tuple_arg, with_shape,
)

# ---------------------------------------------------------------- reshape


def _infer_reshape(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, target = tensor_arg(call, 0), shape_arg(call, 1)
    if target.values is None:
        return with_shape(data, None, ndim=target.ndim)
    values = target.values
    holes = [i for i, v in enumerate(values) if v == -1]
    if len(holes) > 1 or any(isinstance(v, int) and v < -1 for v in values):
        raise shape_error(call, f"target shape {fmt_shape(values)} may hold at most one -1 and no "
                                f"other negative dim")
    if not holes:
        if data.shape is not None:
            have, want = prod(data.shape), prod(values)
            if (isinstance(have, int) and isinstance(want, int) and have != want) \
                    or provably_different(analyzer, have, want):
                raise shape_error(call, f"cannot reshape {fmt_shape(data.shape)} into {fmt_shape(values)}: "
                                        f"{format_dim(have)} != {format_dim(want)} elements")
        return with_shape(data, values)
    if data.shape is None:
        return with_shape(data, None, ndim=len(values))
    hole = holes[0]
    inferred = _infer_hole(call, data.shape, [v for i, v in enumerate(values) if i != hole], analyzer,
                           values)
    if inferred is None:
        return with_shape(data, None, ndim=len(values))
    return with_shape(data, values[:hole] + (inferred,) + values[hole + 1:])


def _infer_hole(call: Call, shape, known, analyzer: DimAnalyzer, values) -> Dim | None:
    """The dim that ``-1`` stands for: (product of ``shape``) / (product of ``known``)."""
    # Cancel dims that appear on both sides first, so (b, s, 768) -> (b, s, 12, -1)
    # needs only 768 / 12.
    if 0 in known:
        raise shape_error(call, f"cannot infer the -1 in {fmt_shape(values)} for {fmt_shape(shape)}: "
                                f"the other dims have zero elements")
    rest_in, rest_known = list(shape), []
    for d in known:
        if d in rest_in:
            rest_in.remove(d)
        else:
            rest_known.append(d)
    total, divisor = prod(rest_in), prod(rest_known)
    quotient = exact_div(total, divisor, analyzer)
    if quotient is not None:
        return quotient
    if isinstance(total, int) and isinstance(divisor, int):
        raise shape_error(call, f"cannot reshape {fmt_shape(shape)} into {fmt_shape(values)}: "
                                f"{prod(shape)} elements do not divide by {prod(known)}")
    if isinstance(divisor, int) and divisor > 0:
        return total // divisor     # divisibility is checked at run time
    return None


register_op("reshape", infer=_infer_reshape, num_args=2,
            doc="Reshape to a shape value; one dim may be -1 (inferred).")


# ---------------------------------------------------------------- permute_dims


def _infer_permute_dims(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    axes = int_tuple_attr(call, "axes", allow_none=True)
    if data.ndim < 0:
        return data
    if axes is None:
        axes = tuple(reversed(range(data.ndim)))
    if len(axes) != data.ndim:
        raise shape_error(call, f"axes {axes} do not permute the {data.ndim} dims of {fmt_sinfo(data)}")
    axes = normalize_axes(call, axes, data.ndim, fmt_sinfo(data))
    if data.shape is None:
        return data
    return with_shape(data, tuple(data.shape[a] for a in axes))


register_op("permute_dims", infer=_infer_permute_dims, attrs={"axes": None}, num_args=1,
            doc="Transpose: output dim i is input dim axes[i] (axes=None reverses the dims).")


# ---------------------------------------------------------------- concat and split


def _infer_concat(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    fields = tuple_arg(call, 0).fields
    if not fields:
        raise shape_error(call, "needs at least one tensor")
    tensors = []
    for i, f in enumerate(fields):
        if not isinstance(f, TensorStructInfo):
            raise shape_error(call, f"tuple field {i} must be a tensor, got {fmt_sinfo(f)}")
        tensors.append(f)
    dtype = same_dtype(call, tensors, [f"field {i}" for i in range(len(tensors))])
    vdevice = result_vdevice(call, tensors)
    shown = ", ".join(fmt_sinfo(t) for t in tensors)
    ranks = {t.ndim for t in tensors if t.ndim >= 0}
    if len(ranks) > 1:
        raise shape_error(call, f"cannot concatenate tensors of different ranks: {shown}")
    if not ranks:
        return TensorStructInfo(None, dtype, -1, vdevice)
    ndim = ranks.pop()
    if ndim == 0:
        raise shape_error(call, f"cannot concatenate scalars: {shown}")
    axis = normalize_axis(call, int_attr(call, "axis"), ndim, shown)
    if any(t.shape is None for t in tensors):
        return TensorStructInfo(None, dtype, ndim, vdevice)
    first = tensors[0].shape
    for t in tensors[1:]:
        for i, (a, b) in enumerate(zip(first, t.shape)):
            if i != axis:
                check_dims_equal(call, a, b, analyzer,
                                 f"cannot concatenate {shown} along axis {axis}: dim {i} differs")
    total = sum((t.shape[axis] for t in tensors), 0)
    return TensorStructInfo(first[:axis] + (total,) + first[axis + 1:], dtype, vdevice=vdevice)


register_op("concat", infer=_infer_concat, attrs={"axis": 0}, num_args=1,
            doc="Concatenate a tuple of tensors along axis.")


def _infer_rotate_half(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    check_dtype_kind(call, data, FLOAT)
    if data.ndim == 0:
        raise shape_error(call, f"data must have an axis to rotate, got {fmt_sinfo(data)}")
    if data.shape is not None and is_int_value(data.shape[-1]) and data.shape[-1] % 2:
        raise shape_error(call, f"the last axis of {fmt_sinfo(data)} has an odd length")
    return data


register_op("rotate_half", infer=_infer_rotate_half, num_args=1,
            doc="The halves of the last axis swapped, the new first half negated: concat(-x[..., h:], x[..., :h]) "
                "(rotary position embeddings; the chain FuseRotateHalf recognises).")


def _infer_split(call: Call, analyzer: DimAnalyzer) -> TupleStructInfo:
    data = tensor_arg(call, 0)
    spec = call.attrs["indices_or_sections"]
    if is_int_value(spec):
        if spec < 1:
            raise attr_error(call, f"indices_or_sections must be >= 1 sections, got {spec}")
        count = int(spec)
    else:
        spec = int_tuple_attr(call, "indices_or_sections")
        if any(b < a for a, b in zip(spec, spec[1:])) or any(i < 0 for i in spec):
            raise attr_error(call, f"split indices must be non-negative and ascending, got {spec}")
        count = len(spec) + 1
    if data.ndim < 0:
        return TupleStructInfo((data,) * count)
    axis = normalize_axis(call, int_attr(call, "axis"), data.ndim, fmt_sinfo(data))
    if data.shape is None:
        return TupleStructInfo((data,) * count)
    dim = data.shape[axis]
    lengths = _split_lengths(call, data, dim, spec, analyzer)
    return TupleStructInfo(tuple(
        with_shape(data, None, ndim=data.ndim) if n is None
        else with_shape(data, data.shape[:axis] + (n,) + data.shape[axis + 1:])
        for n in lengths))


def _split_lengths(call: Call, data: TensorStructInfo, dim: Dim, spec, analyzer: DimAnalyzer):
    if is_int_value(spec):
        # Equal sections; like ONNX (num_outputs) and TVM the last one may be smaller.
        chunk = exact_div(dim, spec, analyzer)
        if chunk is not None:
            return [chunk] * spec
        chunk = (dim + spec - 1) // spec
        last = dim - chunk * (spec - 1)
        if isinstance(last, int) and last <= 0:
            raise shape_error(call, f"cannot split {fmt_sinfo(data)} into {spec} sections along a dim "
                                    f"of {dim}")
        return [chunk] * (spec - 1) + [last]
    # numpy split points; a static dim clamps them like numpy does.
    if isinstance(dim, int):
        points = [0] + [min(i, dim) for i in spec] + [dim]
        return [b - a for a, b in zip(points, points[1:])]
    if not spec or analyzer.prove_ge(dim, spec[-1]):
        points = [0, *spec]
        return [b - a for a, b in zip(points, points[1:])] + [dim - points[-1]]
    # Where dim might fall short of a split point, those pieces are unknown.
    points = [0, *spec]
    return [b - a if analyzer.prove_ge(dim, b) else None for a, b in zip(points, points[1:])] + [None]


register_op("split", infer=_infer_split, attrs={"indices_or_sections": REQUIRED, "axis": 0},
            num_args=1,
            doc="Split along axis into n sections (int) or at ascending indices (tuple); returns a tuple.")


# ---------------------------------------------------------------- dtype and rank changes


def _infer_astype(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    dtype = dtype_attr(call)
    return with_shape(data, data.shape, dtype, data.ndim)


register_op("astype", infer=_infer_astype, attrs={"dtype": REQUIRED}, num_args=1,
            doc="Cast to another dtype.")


def _infer_to_float8e8m0(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    if call.attrs["round_mode"] not in ("up", "down", "nearest"):
        raise attr_error(call, f"round_mode must be up, down or nearest, got {call.attrs['round_mode']!r}")
    return with_shape(data, data.shape, "float8_e8m0fnu", data.ndim)


register_op("to_float8e8m0", infer=_infer_to_float8e8m0, attrs={"round_mode": "up", "saturate": True},
            num_args=1, doc="Cast to float8_e8m0fnu (a power of two) rounding the exponent up, down or to nearest.")


def _infer_broadcast_to(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, target = tensor_arg(call, 0), shape_arg(call, 1)
    if data.ndim >= 0 and target.ndim >= 0 and data.ndim > target.ndim:
        raise shape_error(call, f"cannot broadcast {fmt_sinfo(data)} to rank {target.ndim}")
    if target.values is None:
        return with_shape(data, None, ndim=target.ndim)
    if data.shape is not None:
        check_broadcastable_to(call, data.shape, target.values, analyzer)
    return with_shape(data, target.values)


register_op("broadcast_to", infer=_infer_broadcast_to, num_args=2,
            doc="Broadcast to a shape value (unidirectional, like numpy.broadcast_to).")


def _infer_expand_dims(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    axes = int_tuple_attr(call, "axis", allow_int=True)
    if data.ndim < 0:
        return data
    ndim = data.ndim + len(axes)
    axes = normalize_axes(call, axes, ndim, f"{fmt_sinfo(data)} expanded to rank {ndim}")
    if data.shape is None:
        return with_shape(data, None, ndim=ndim)
    rest = iter(data.shape)
    return with_shape(data, tuple(1 if i in axes else next(rest) for i in range(ndim)))


register_op("expand_dims", infer=_infer_expand_dims, attrs={"axis": REQUIRED}, num_args=1,
            doc="Insert 1-dims at the given axes of the output.")


def _infer_squeeze(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    axes = int_tuple_attr(call, "axis", allow_none=True, allow_int=True)
    if data.ndim < 0:
        return data
    if axes is None:
        if data.shape is None:
            return with_shape(data, None, ndim=-1)
        keep = []
        for d in data.shape:
            if d == 1 or analyzer.prove_equal(d, 1):
                continue
            if not isinstance(d, int) and not provably_different(analyzer, d, 1):
                return with_shape(data, None, ndim=-1)   # may or may not be squeezed
            keep.append(d)
        return with_shape(data, tuple(keep))
    axes = normalize_axes(call, axes, data.ndim, fmt_sinfo(data))
    if data.shape is None:
        return with_shape(data, None, ndim=data.ndim - len(axes))
    for a in axes:
        d = data.shape[a]
        if (isinstance(d, int) and d != 1) or (not isinstance(d, int) and provably_different(analyzer, d, 1)):
            raise shape_error(call, f"cannot squeeze axis {a} of shape {fmt_shape(data.shape)}: "
                                    f"dim {format_dim(d)} is not 1")
    return with_shape(data, tuple(d for i, d in enumerate(data.shape) if i not in axes))


register_op("squeeze", infer=_infer_squeeze, attrs={"axis": None}, num_args=1,
            doc="Remove 1-dims at axis (None: every dim that is 1).")


def _infer_flatten(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    axis = int_attr(call, "axis")
    if data.ndim < 0:
        return with_shape(data, None, ndim=2)
    if not -data.ndim <= axis <= data.ndim:
        raise shape_error(call, f"axis {axis} is out of range [{-data.ndim}, {data.ndim}] for "
                                f"{fmt_sinfo(data)}")
    axis = axis + data.ndim if axis < 0 else axis
    if data.shape is None:
        return with_shape(data, None, ndim=2)
    return with_shape(data, (prod(data.shape[:axis]), prod(data.shape[axis:])))


register_op("flatten", infer=_infer_flatten, attrs={"axis": 1}, num_args=1,
            doc="ONNX Flatten: 2-D (prod(shape[:axis]), prod(shape[axis:])).")

"""Algorithms: einsum, topk, cumsum, one_hot, trilu, range, tile, nonzero.

>>> make_call("einsum", Tuple((q, k)), equation="bhqd,bhkd->bhqk")         # doctest: +SKIP
>>> make_call("topk", x, k=5, axis=-1)                                    # doctest: +SKIP
>>> make_call("range", PrimValue(0), PrimValue(seq), PrimValue(1), dtype="int64")  # doctest: +SKIP

``cumsum``'s axis and ``trilu``'s k may instead be a second argument, a
0-d int tensor known only at run time (the output shape does not depend
on it), with the attribute set to None::

    make_call("trilu", x, k, upper=True, k=None)                         # doctest: +SKIP

``nonzero`` has a data-dependent result: the importer calls its packed
kernel with ``call_packed`` and binds the result with ``match_cast`` to a
shape ``(ndim, nnz)`` whose ``nnz`` is a fresh symbolic dim.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

from ...ir.dims import Dim, DimAnalyzer, dim_max, format_dim
from ...ir.expr import Call, PrimValue
from ...ir.struct_info import DTYPES, PrimStructInfo, TensorStructInfo, TupleStructInfo
from ..registry import REQUIRED, register_op
from .common import (
    INT, NUMERIC, attr_error, bool_attr, broadcast_shapes, check_dims_equal, check_dtype_kind,
    dtype_kind, fmt_sinfo, int_attr, int_tuple_attr, normalize_axis, provably_different, result_vdevice,
    same_dtype, shape_error, tensor_arg, tuple_arg, unproven_error, with_shape,
)

# ---------------------------------------------------------------- einsum


@dataclass(frozen=True)
class EinsumEquation:
    """A parsed einsum equation: one term per operand and the output term.

    A term is a tuple of labels (single letters) where ``"..."`` stands for
    the broadcast dims. In implicit mode (no ``->``) the output is ``...``
    (when an operand has one) and then the labels that occur once, sorted
    (upper case first), as numpy and ONNX do.

    >>> parse_einsum("ij,jk")                                   # doctest: +SKIP
    EinsumEquation(inputs=(('i', 'j'), ('j', 'k')), output=('i', 'k'))
    """

    inputs: tuple[tuple[str, ...], ...]
    output: tuple[str, ...]


ELLIPSIS = "..."


def parse_einsum(equation: str) -> EinsumEquation:
    """Parse ``equation`` (spaces are ignored); a ValueError says what is wrong."""
    text = "".join(equation.split())
    if text.count("->") > 1:
        raise ValueError("more than one '->'")
    lhs, arrow, rhs = text.partition("->")
    inputs = tuple(_einsum_term(t) for t in lhs.split(","))
    if arrow:
        output = _einsum_term(rhs)
        letters = [lab for lab in output if lab != ELLIPSIS]
        if len(set(letters)) != len(letters):
            raise ValueError(f"output term {rhs!r} repeats a label")
        seen = {lab for term in inputs for lab in term}
        missing = [lab for lab in letters if lab not in seen]
        if missing:
            raise ValueError(f"output label(s) {''.join(missing)} occur in no input term")
    else:
        counts: dict[str, int] = {}
        for term in inputs:
            for lab in term:
                counts[lab] = counts.get(lab, 0) + 1
        ellipsis = (ELLIPSIS,) if ELLIPSIS in counts else ()
        output = ellipsis + tuple(sorted(lab for lab, n in counts.items() if n == 1 and lab != ELLIPSIS))
    return EinsumEquation(inputs, output)


def _einsum_term(term: str) -> tuple[str, ...]:
    labels: list[str] = []
    i = 0
    while i < len(term):
        if term.startswith(ELLIPSIS, i):
            if ELLIPSIS in labels:
                raise ValueError(f"term {term!r} has more than one '...'")
            labels.append(ELLIPSIS)
            i += 3
            continue
        c = term[i]
        if not ("a" <= c <= "z" or "A" <= c <= "Z"):
            raise ValueError(f"invalid character {c!r} in term {term!r} (labels are letters)")
        labels.append(c)
        i += 1
    return tuple(labels)


def _infer_einsum(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    fields = tuple_arg(call, 0, "operands").fields
    equation = call.attrs["equation"]
    if not isinstance(equation, str):
        raise attr_error(call, f"attribute equation must be a string, got {equation!r}")
    try:
        eq = parse_einsum(equation)
    except ValueError as err:
        raise shape_error(call, f"invalid equation {equation!r}: {err}") from None
    tensors = []
    for i, f in enumerate(fields):
        if not isinstance(f, TensorStructInfo):
            raise shape_error(call, f"operand {i} must be a tensor, got {fmt_sinfo(f)}")
        check_dtype_kind(call, f, NUMERIC, f"operand {i}")
        tensors.append(f)
    shown = ", ".join(fmt_sinfo(t) for t in tensors)
    if len(eq.inputs) != len(tensors):
        raise shape_error(call, f"equation {equation!r} has {len(eq.inputs)} input term(s) but "
                                f"{len(tensors)} operand(s) are given: {shown}")
    dtype = same_dtype(call, tensors, [f"operand {i}" for i in range(len(tensors))])
    vdevice = result_vdevice(call, tensors)

    context = f"equation {equation!r} with operands {shown}"

    def fail(message: str):
        return shape_error(call, f"{context}: {message}")

    ell_ranks = []
    for i, (term, t) in enumerate(zip(eq.inputs, tensors)):
        n_labels = len(term) - (ELLIPSIS in term)
        if t.ndim < 0:
            ell_ranks.append(None if ELLIPSIS in term else 0)
            continue
        if ELLIPSIS in term and t.ndim < n_labels or ELLIPSIS not in term and t.ndim != n_labels:
            raise fail(f"term {''.join(term)!r} does not fit operand {i} of rank {t.ndim}")
        ell_ranks.append(t.ndim - n_labels)
    out_letters = len(eq.output) - (ELLIPSIS in eq.output)
    if ELLIPSIS not in eq.output and any(r for r in ell_ranks if r is not None):
        raise fail("the operands have broadcast dims ('...') but the output term has no '...'")
    if any(r is None for r in ell_ranks):
        return TensorStructInfo(None, dtype, out_letters if ELLIPSIS not in eq.output else -1, vdevice)
    if any(t.shape is None for t in tensors):
        ell_rank = max(ell_ranks, default=0) if ELLIPSIS in eq.output else 0
        return TensorStructInfo(None, dtype, out_letters + ell_rank, vdevice)

    label_dims: dict[str, Dim] = {}
    ell_shapes = []
    for i, (term, t) in enumerate(zip(eq.inputs, tensors)):
        dims = list(t.shape)
        if ELLIPSIS in term:
            at, n = term.index(ELLIPSIS), ell_ranks[i]
            ell_shapes.append(tuple(dims[at:at + n]))
            dims[at:at + n] = [None]
        own: dict[str, Dim] = {}
        for lab, d in zip(term, dims):
            if lab == ELLIPSIS:
                continue
            if lab in own:      # a repeated label takes a diagonal: the dims must be equal
                check_dims_equal(call, own[lab], d, analyzer,
                                 f"label {lab!r} of operand {i} {fmt_sinfo(t)} takes a diagonal of unequal dims")
                continue
            own[lab] = d
            label_dims[lab] = d if lab not in label_dims else _join_label(call, lab, label_dims[lab], d,
                                                                           analyzer, context)
    ell_out = broadcast_shapes(call, ell_shapes, analyzer) if ell_shapes else ()
    shape: list[Dim] = []
    for lab in eq.output:
        shape.extend(ell_out if lab == ELLIPSIS else (label_dims[lab],))
    return TensorStructInfo(tuple(shape), dtype, vdevice=vdevice)


def _join_label(call, label: str, a: Dim, b: Dim, analyzer: DimAnalyzer, context: str) -> Dim:
    """The dim of a label seen with dims ``a`` and ``b`` (a 1 broadcasts).
    Dims neither provably equal nor provably different are an unproven
    relation, which the importer assumes and checks at run time."""
    if a == b or analyzer.prove_equal(a, b):
        return a if isinstance(a, int) or not isinstance(b, int) else b
    if a == 1:
        return b
    if b == 1:
        return a
    if isinstance(a, int) and isinstance(b, int):
        raise shape_error(call, f"{context}: label {label!r} has dims {a} and {b}, which differ and neither is 1")
    message = (f"{context}: label {label!r} has dims {format_dim(a)} and {format_dim(b)}, which are not "
               f"provably equal (use R.match_cast)")
    if provably_different(analyzer, a, b):
        raise shape_error(call, message)
    raise unproven_error(call, message, a, b)


register_op("einsum", infer=_infer_einsum, attrs={"equation": REQUIRED}, num_args=1,
            doc="Einstein summation of a tuple of tensors (numpy/ONNX equation, '...' and size-1 broadcasting).")


# ---------------------------------------------------------------- topk


def _infer_topk(call: Call, analyzer: DimAnalyzer) -> TupleStructInfo:
    data = tensor_arg(call, 0)
    check_dtype_kind(call, data, NUMERIC)
    k, axis = int_attr(call, "k"), int_attr(call, "axis")
    bool_attr(call, "largest")
    bool_attr(call, "sorted")
    if k < 0:
        raise attr_error(call, f"k must be non-negative, got {k}")
    if data.ndim < 0:
        return TupleStructInfo((data, _indices_of(data)))
    if data.ndim == 0:
        raise shape_error(call, "cannot take the top k of a scalar")
    ax = normalize_axis(call, axis, data.ndim, fmt_sinfo(data))
    if data.shape is None:
        values = data
    else:
        dim = data.shape[ax]
        if isinstance(dim, int) and k > dim or not isinstance(dim, int) and analyzer.prove_lt(dim, k):
            raise shape_error(call, f"k={k} is larger than dim {ax} of the data {fmt_sinfo(data)}")
        values = with_shape(data, data.shape[:ax] + (k,) + data.shape[ax + 1:])
    return TupleStructInfo((values, _indices_of(values)))


def _indices_of(values: TensorStructInfo) -> TensorStructInfo:
    return with_shape(values, values.shape, "int64", values.ndim)


register_op("topk", infer=_infer_topk, attrs={"k": REQUIRED, "axis": -1, "largest": True, "sorted": True},
            num_args=1,
            doc="The k largest (or smallest) values along axis and their int64 indices; ties: lower index first.")


# ---------------------------------------------------------------- cumsum


def _run_time_int(call: Call, attr: str) -> bool:
    """Whether the op takes its int attribute ``attr`` as a second argument
    instead (a 0-d or one-element int tensor known only at run time); the
    attribute must then be None."""
    if len(call.args) == 1:
        return False
    value = tensor_arg(call, 1, attr)
    check_dtype_kind(call, value, INT, attr)
    if value.ndim > 1 or (value.shape is not None and value.ndim == 1 and isinstance(value.shape[0], int)
                            and value.shape[0] != 1):
        raise shape_error(call, f"the {attr} argument must hold one int, got {fmt_sinfo(value)}")
    if call.attrs[attr] is not None:
        raise attr_error(call, f"attribute {attr} must be None when argument 1 gives it, got {call.attrs[attr]!r}")
    return True


def _infer_cumsum(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    check_dtype_kind(call, data, NUMERIC)
    at_run_time = _run_time_int(call, "axis")
    axis = None if at_run_time else int_attr(call, "axis")
    bool_attr(call, "exclusive")
    bool_attr(call, "reverse")
    if data.ndim == 0:
        raise shape_error(call, "needs a tensor of rank >= 1, got a scalar")
    if data.ndim > 0 and axis is not None:
        normalize_axis(call, axis, data.ndim, fmt_sinfo(data))
    return data


register_op("cumsum", infer=_infer_cumsum, attrs={"axis": REQUIRED, "exclusive": False, "reverse": False},
            num_args=(1, 2),
            doc="Cumulative sum along axis (exclusive: without the element itself; reverse: from the end); "
                "a 0-d int tensor argument gives the axis at run time (then axis=None).")


# ---------------------------------------------------------------- one_hot


def _infer_one_hot(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    indices, values = tensor_arg(call, 0, "indices"), tensor_arg(call, 1, "values")
    check_dtype_kind(call, indices, NUMERIC, "indices")
    depth, axis = int_attr(call, "depth"), int_attr(call, "axis")
    if depth < 0:
        raise attr_error(call, f"depth must be non-negative, got {depth}")
    bad_rank = values.ndim >= 0 and values.ndim != 1
    bad_size = values.shape is not None and isinstance(values.shape[0], int) and values.shape[0] != 2
    if bad_rank or bad_size:
        raise shape_error(call, f"values must be a 1-D tensor [off_value, on_value], got {fmt_sinfo(values)}")
    vdevice = result_vdevice(call, (indices, values))
    if indices.ndim < 0:
        return TensorStructInfo(None, values.dtype, -1, vdevice)
    ax = normalize_axis(call, axis, indices.ndim + 1, fmt_sinfo(indices))
    if indices.shape is None:
        return TensorStructInfo(None, values.dtype, indices.ndim + 1, vdevice)
    shape = indices.shape[:ax] + (depth,) + indices.shape[ax:]
    return TensorStructInfo(shape, values.dtype, vdevice=vdevice)


register_op("one_hot", infer=_infer_one_hot, attrs={"depth": REQUIRED, "axis": -1}, num_args=2,
            doc="ONNX OneHot: a depth-long axis at axis, on_value where it equals the index (negative wraps).")


# ---------------------------------------------------------------- trilu


def _infer_trilu(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    bool_attr(call, "upper")
    if not _run_time_int(call, "k"):
        int_attr(call, "k")
    if 0 <= data.ndim < 2:
        raise shape_error(call, f"needs a tensor of rank >= 2 (a batch of matrices), got {fmt_sinfo(data)}")
    return data


register_op("trilu", infer=_infer_trilu, attrs={"upper": True, "k": 0}, num_args=(1, 2),
            doc="Keep the upper (or lower) triangle of the last two dims from diagonal k on; zero the rest; "
                "a 0-d int tensor argument gives k at run time (then k=None).")


# ---------------------------------------------------------------- range


def _range_bound(call: Call, index: int, what: str) -> Dim | float | None:
    """Argument ``index`` as a number: an int or symbolic dim, a float, or
    None when it is only known at run time."""
    arg = call.args[index]
    if isinstance(arg, PrimValue):
        return arg.value
    sinfo = arg.struct_info
    if not isinstance(sinfo, PrimStructInfo):
        raise shape_error(call, f"argument {index} ({what}) must be a prim value, got {fmt_sinfo(sinfo)}")
    return sinfo.value


#: the most values a static Range may have (as archives bound a dim)
MAX_RANGE = 1 << 48


def _infer_range(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    dtype = call.attrs["dtype"]
    if dtype not in DTYPES or dtype_kind(dtype) not in NUMERIC:
        raise attr_error(call, f"dtype must be an int or float dtype, got {dtype!r}")
    start, limit, delta = (_range_bound(call, i, w) for i, w in enumerate(("start", "limit", "delta")))
    if any(v is None or isinstance(v, bool) for v in (start, limit, delta)):
        return TensorStructInfo(None, dtype, ndim=1)
    if delta == 0:
        raise shape_error(call, f"delta must not be 0 (start {format_dim(start)}, limit {format_dim(limit)})")
    if all(isinstance(v, numbers.Real) for v in (start, limit, delta)):
        if not all(isinstance(v, int) for v in (start, limit, delta)):
            span = (limit - start) / delta
            if not math.isfinite(span):
                raise shape_error(call, f"start {_fmt(start)}, limit {_fmt(limit)}, delta {_fmt(delta)} "
                                        f"give no finite number of values")
            length = max(math.ceil(span), 0)
        else:
            length = max(-((start - limit) // delta), 0)
        if length > MAX_RANGE:
            raise shape_error(call, f"start {_fmt(start)}, limit {_fmt(limit)}, delta {_fmt(delta)} give "
                                    f"{length:.3g} values, more than any tensor can hold (2**48)")
        return TensorStructInfo((length,), dtype)
    if any(isinstance(v, float) for v in (start, limit, delta)):
        raise shape_error(call, "cannot mix float and symbolic bounds: start "
                                f"{_fmt(start)}, limit {_fmt(limit)}, delta {_fmt(delta)}")
    if not isinstance(delta, int):
        # ceil division by a symbolic delta is outside the dim algebra
        return TensorStructInfo(None, dtype, ndim=1)
    span = limit - start if delta > 0 else start - limit
    step = abs(delta)
    length = analyzer.simplify(dim_max((span + step - 1) // step, 0))
    return TensorStructInfo((length,), dtype)


def _fmt(v) -> str:
    return repr(v) if isinstance(v, float) else format_dim(v)


register_op("range", infer=_infer_range, attrs={"dtype": REQUIRED}, num_args=3,
            doc="start, start + delta, ... up to limit (exclusive) from prim values; "
                "length max(ceil((limit - start) / delta), 0).")


# ---------------------------------------------------------------- tile


def _infer_tile(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    repeats = int_tuple_attr(call, "repeats")
    if any(r < 0 for r in repeats):
        raise attr_error(call, f"repeats must be non-negative, got {repeats}")
    if data.ndim >= 0 and len(repeats) != data.ndim:
        raise shape_error(call, f"{len(repeats)} repeats {repeats} for a tensor of rank {data.ndim} "
                                f"{fmt_sinfo(data)}")
    if data.shape is None:
        return with_shape(data, None, ndim=len(repeats))
    return with_shape(data, tuple(d * r for d, r in zip(data.shape, repeats)))


register_op("tile", infer=_infer_tile, attrs={"repeats": REQUIRED}, num_args=1,
            doc="numpy tile / ONNX Tile: repeat the tensor repeats[i] times along each axis i.")


# ---------------------------------------------------------------- nonzero


def _infer_nonzero(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    return with_shape(data, None, "int64", ndim=2)


register_op("nonzero", data_dependent=True, infer=_infer_nonzero, num_args=1,
            doc="Indices of the nonzero elements, (ndim, nnz) int64; nnz depends on the data (call the "
                "packed kernel through call_packed and match_cast the result).")

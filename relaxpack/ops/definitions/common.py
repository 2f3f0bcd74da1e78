"""Helpers shared by the op definitions: argument access, dtype rules, axes,
broadcasting of symbolic shapes and error messages.

Every error raised here names the op as it is spelled in the text form
(``R.add``) and the shapes involved, e.g.::

    R.add: cannot broadcast shapes (n, 4) and (m, 4): dims n and m are not
    provably equal or broadcastable (use R.match_cast)
"""

from __future__ import annotations

import numbers
from functools import reduce
from typing import Any, Iterable, Sequence

from ...errors import IRError, ShapeError, UnprovenDimsError
from ...ir.dims import Dim, DimAnalyzer, DimExpr, dim_min, format_dim, normalize
from ...ir.expr import Call, Op
from ...ir.struct_info import (
    GLOBAL_SCOPE, ShapeStructInfo, StructInfo, TensorStructInfo, TupleStructInfo, check_dtype,
)

# ---------------------------------------------------------------- naming and messages


def op_label(call: Call) -> str:
    """How the op is spelled in the text form and in messages: ``R.add``."""
    op = call.op
    return f"R.{op.name}" if isinstance(op, Op) else repr(op)


def fmt_shape(dims: Sequence[Dim]) -> str:
    """``(n, 4)``; a 1-D shape prints as ``(n,)`` like a Python tuple."""
    parts = [format_dim(d) for d in dims]
    return f"({parts[0]},)" if len(parts) == 1 else f"({', '.join(parts)})"


def fmt_sinfo(sinfo: StructInfo | None) -> str:
    """A short description of a struct info for messages."""
    if isinstance(sinfo, TensorStructInfo):
        if sinfo.shape is not None:
            return fmt_shape(sinfo.shape)
        return "R.Tensor(ndim=?)" if sinfo.ndim < 0 else f"R.Tensor(ndim={sinfo.ndim})"
    if isinstance(sinfo, ShapeStructInfo):
        return "R.Shape" + ("" if sinfo.values is None else fmt_shape(sinfo.values))
    if isinstance(sinfo, TupleStructInfo):
        return "(" + ", ".join(fmt_sinfo(f) for f in sinfo.fields) + ")"
    return type(sinfo).__name__ if sinfo is not None else "a value without struct info"


def shape_error(call: Call, message: str) -> ShapeError:
    """A :class:`ShapeError` whose message starts with the op's name."""
    return ShapeError(f"{op_label(call)}: {message}")


def unproven_error(call: Call, message: str, a: Dim, b: Dim) -> UnprovenDimsError:
    """``a`` and ``b`` must be equal and are neither provably equal nor
    provably different: a strict build refuses (the message), the importer
    assumes them equal and checks at run time (ir/gradual.py)."""
    return UnprovenDimsError(f"{op_label(call)}: {message}", a, b)


def attr_error(call: Call, message: str) -> IRError:
    """An :class:`IRError` for a malformed attribute value, naming the op."""
    return IRError(f"{op_label(call)}: {message}")


# ---------------------------------------------------------------- arguments


def tensor_arg(call: Call, index: int, what: str = "data") -> TensorStructInfo:
    """The struct info of argument ``index``, which must be a tensor."""
    sinfo = call.args[index].struct_info
    if not isinstance(sinfo, TensorStructInfo):
        raise shape_error(call, f"argument {index} ({what}) must be a tensor, got {fmt_sinfo(sinfo)}")
    return sinfo


def shape_arg(call: Call, index: int, what: str = "shape") -> ShapeStructInfo:
    """The struct info of argument ``index``, which must be a shape value
    (an ``R.shape([...])`` or a var of ``R.Shape`` struct info)."""
    sinfo = call.args[index].struct_info
    if not isinstance(sinfo, ShapeStructInfo):
        raise shape_error(call, f"argument {index} ({what}) must be a shape, got {fmt_sinfo(sinfo)}")
    return sinfo


def tuple_arg(call: Call, index: int, what: str = "tensors") -> TupleStructInfo:
    sinfo = call.args[index].struct_info
    if not isinstance(sinfo, TupleStructInfo):
        raise shape_error(call, f"argument {index} ({what}) must be a tuple, got {fmt_sinfo(sinfo)}")
    return sinfo


_SAME: Any = object()


def with_shape(like: TensorStructInfo, shape: Sequence[Dim] | None, dtype: str | None = _SAME,
               ndim: int = -1) -> TensorStructInfo:
    """A tensor struct info on ``like``'s vdevice with a new shape (or only
    ``ndim`` when ``shape`` is None) and ``like``'s dtype unless given."""
    dtype = like.dtype if dtype is _SAME else dtype
    return TensorStructInfo(None if shape is None else tuple(shape), dtype,
                            ndim if shape is None else -1, like.vdevice)


# ---------------------------------------------------------------- dtypes

FLOAT = frozenset({"float"})
INT = frozenset({"int", "uint"})
NUMERIC = frozenset({"int", "uint", "float"})
BOOL = frozenset({"bool"})
ANY = frozenset({"bool", "int", "uint", "float", "complex", "string"})


def dtype_attr(call: Call, name: str = "dtype") -> str:
    """The call's dtype-valued attribute ``name``, checked to name an IR dtype."""
    dtype = call.attrs[name]
    try:
        if not isinstance(dtype, str):
            raise IRError("not a string")
        check_dtype(dtype)
    except IRError:
        raise attr_error(call, f"attribute {name} is not a dtype: {dtype!r}") from None
    return dtype


def dtype_kind(dtype: str | None) -> str | None:
    """``"bool"``, ``"int"``, ``"uint"``, ``"float"``, ``"complex"`` or ``"string"``."""
    if dtype is None:
        return None
    for prefix, kind in (("bool", "bool"), ("uint", "uint"), ("int", "int"), ("float", "float"),
                         ("bfloat", "float"), ("complex", "complex"), ("string", "string")):
        if dtype.startswith(prefix):
            return kind
    return None


def is_float(dtype: str | None) -> bool:
    return dtype_kind(dtype) == "float"


def is_int(dtype: str | None) -> bool:
    """True for signed and unsigned integer dtypes (not bool)."""
    return dtype_kind(dtype) in INT


_KIND_WORDS = {FLOAT: "a float", INT: "an integer", NUMERIC: "a numeric (int or float)",
               BOOL: "a bool", ANY: "any"}


def check_dtype_kind(call: Call, sinfo: TensorStructInfo, kinds: frozenset[str], what: str = "data") -> None:
    """Reject a known dtype outside ``kinds`` (e.g. :data:`FLOAT`); unknown dtypes pass."""
    if sinfo.dtype is not None and dtype_kind(sinfo.dtype) not in kinds:
        want = _KIND_WORDS.get(kinds, "/".join(sorted(kinds)))
        raise shape_error(call, f"{what} must have {want} dtype, got {sinfo.dtype} "
                                f"(shape {fmt_sinfo(sinfo)})")


def same_dtype(call: Call, sinfos: Sequence[TensorStructInfo], names: Sequence[str] | None = None) -> str | None:
    """The common dtype of ``sinfos``; ``None`` when any is unknown.

    Raises a ShapeError naming both dtypes when two known dtypes differ.
    """
    known = [(i, s.dtype) for i, s in enumerate(sinfos) if s.dtype is not None]
    for i, dtype in known[1:]:
        j, first = known[0]
        if dtype != first:
            a = names[j] if names else f"argument {j}"
            b = names[i] if names else f"argument {i}"
            raise shape_error(call, f"operands must have the same dtype, got {first} ({a}, shape "
                                    f"{fmt_sinfo(sinfos[j])}) and {dtype} ({b}, shape {fmt_sinfo(sinfos[i])})")
    if len(known) < len(sinfos):
        return None
    return known[0][1] if known else None


def result_vdevice(call: Call, sinfos: Iterable[TensorStructInfo]) -> str:
    """The virtual device of a result computed from ``sinfos``: the one
    non-global device among them (constants live in ``"global"``)."""
    devices = {s.vdevice for s in sinfos} - {GLOBAL_SCOPE}
    if len(devices) > 1:
        raise shape_error(call, f"operands live on different virtual devices {sorted(devices)}")
    return devices.pop() if devices else GLOBAL_SCOPE


# ---------------------------------------------------------------- attributes


def is_int_value(v: Any) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def is_real_value(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, bool)


def int_attr(call: Call, name: str, *, allow_none: bool = False) -> int | None:
    value = call.attrs[name]
    if value is None and allow_none:
        return None
    if not is_int_value(value):
        raise attr_error(call, f"attribute {name} must be an int, got {value!r}")
    return int(value)


def float_attrs(call: Call, *names: str, allow_none: bool = False) -> None:
    """Check that the named attributes are real numbers (or None when allowed)."""
    for name in names:
        value = call.attrs[name]
        if not (is_real_value(value) or (allow_none and value is None)):
            raise attr_error(call, f"attribute {name} must be a number, got {value!r}")


def bool_attr(call: Call, name: str) -> bool:
    value = call.attrs[name]
    if not isinstance(value, bool):
        raise attr_error(call, f"attribute {name} must be a bool, got {value!r}")
    return value


def int_tuple_attr(call: Call, name: str, *, allow_none: bool = False,
                   allow_int: bool = False) -> tuple[int, ...] | None:
    """Attribute ``name`` as a tuple of ints (an int becomes a 1-tuple when allowed)."""
    value = call.attrs[name]
    if value is None and allow_none:
        return None
    if allow_int and is_int_value(value):
        return (int(value),)
    if not isinstance(value, tuple) or not all(is_int_value(v) for v in value):
        raise attr_error(call, f"attribute {name} must be a tuple of ints, got {value!r}")
    return tuple(int(v) for v in value)


def per_spatial(call: Call, name: str, n: int, *, minimum: int | None = None) -> tuple[int, ...]:
    """An int-or-tuple attribute expanded to ``n`` values (one per spatial dim)."""
    value = call.attrs[name]
    values = (int(value),) * n if is_int_value(value) else int_tuple_attr(call, name)
    if len(values) != n:
        raise attr_error(call, f"attribute {name} needs {n} values (one per spatial dim), got {value!r}")
    if minimum is not None and any(v < minimum for v in values):
        raise attr_error(call, f"attribute {name} values must be >= {minimum}, got {value!r}")
    return values


def pads_attr(call: Call, name: str, n: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Padding as (begins, ends): an int, ``n`` symmetric values, or ONNX's
    ``2n`` values (all begins, then all ends)."""
    value = call.attrs[name]
    values = (int(value),) * n if is_int_value(value) else int_tuple_attr(call, name)
    if len(values) == n:
        values = values + values
    if len(values) != 2 * n:
        raise attr_error(call, f"attribute {name} needs {n} or {2 * n} values, got {value!r}")
    if any(v < 0 for v in values):
        raise attr_error(call, f"attribute {name} must be non-negative, got {value!r}")
    return values[:n], values[n:]


# ---------------------------------------------------------------- axes


def normalize_axis(call: Call, axis: int, ndim: int, shape_desc: str | None = None) -> int:
    """``axis`` in ``[0, ndim)``; negative axes count from the end."""
    if not -ndim <= axis < ndim:
        where = f" of shape {shape_desc}" if shape_desc else ""
        raise shape_error(call, f"axis {axis} is out of range for a tensor of rank {ndim}{where}")
    return axis + ndim if axis < 0 else axis


def normalize_axes(call: Call, axes: Iterable[int], ndim: int, shape_desc: str | None = None) -> tuple[int, ...]:
    """Normalized axes in the given order; repeated axes are an error."""
    out = tuple(normalize_axis(call, a, ndim, shape_desc) for a in axes)
    if len(set(out)) != len(out):
        raise shape_error(call, f"repeated axis in {tuple(axes)} for rank {ndim}")
    return out


# ---------------------------------------------------------------- dims


def prod(dims: Iterable[Dim]) -> Dim:
    """The product of ``dims`` (1 for none), normalized."""
    return reduce(lambda a, b: a * b, dims, 1)


def provably_different(analyzer: DimAnalyzer, a: Dim, b: Dim) -> bool:
    """Whether ``a != b`` for every allowed value of the dims."""
    return analyzer.prove_not_equal(a, b)


def exact_div(x: Dim, d: Dim, analyzer: DimAnalyzer) -> Dim | None:
    """``x / d`` when ``d`` provably divides ``x``, else ``None``.

    ``d`` may be a constant or a monomial such as ``12 * batch * seq``:
    ``exact_div(768 * batch * seq, 12 * batch * seq) == 64``. A zero divisor
    gives ``None``.

    >>> exact_div(sym("n") * 64, 8, DimAnalyzer())             # doctest: +SKIP
    DimExpr('8 * n')
    """
    x, d = normalize(x), normalize(d)
    if isinstance(d, int):
        if d == 0:
            return None
        sign, d = (1, d) if d > 0 else (-1, -d)
        if analyzer.simplify(x % d) != 0:
            return None
        return sign * (x // d)
    return _divide_by_monomial(x, d)


def _divide_by_monomial(x: Dim, d: DimExpr) -> Dim | None:
    # Polynomial division by a single term, on the canonical form the dims
    # module documents (``terms``: sorted (atom, power) monomials with their
    # coefficients). A single-term DimExpr built from a sorted monomial with
    # a nonzero coefficient is already canonical.
    if isinstance(x, int) or d.const != 0 or len(d.terms) != 1:
        return None
    if x.const != 0:
        return None
    (dmono, dk), = d.terms
    dpow = dict(dmono)
    quotient: Dim = 0
    for mono, k in x.terms:
        powers = dict(mono)
        if k % dk or any(powers.get(atom, 0) < p for atom, p in dpow.items()):
            return None
        rest = tuple((atom, p - dpow.get(atom, 0)) for atom, p in mono if p - dpow.get(atom, 0) > 0)
        term = k // dk if not rest else DimExpr(((rest, k // dk),), 0)
        quotient = quotient + term
    return quotient


# ---------------------------------------------------------------- broadcasting


def _joined(shapes: Sequence[Sequence[Dim]]) -> str:
    parts = [fmt_shape(s) for s in shapes]
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def broadcast_shapes(call: Call, shapes: Sequence[Sequence[Dim]], analyzer: DimAnalyzer,
                     shown: Sequence[Sequence[Dim]] | None = None) -> tuple[Dim, ...]:
    """numpy/ONNX multidirectional broadcasting of (possibly symbolic) shapes.

    Shapes are aligned from the right; per position, equal dims give that dim,
    ``1`` and ``d`` give ``d`` (also for symbolic ``d``) and provably equal
    symbolic dims give that dim. Anything else is a ShapeError naming the op
    and the shapes (``shown``, when given, are the shapes to print).
    """
    rank = max((len(s) for s in shapes), default=0)
    out: list[Dim] = []
    for pos in range(-1, -rank - 1, -1):       # from the right, as the shapes align
        dims = [s[pos] for s in shapes if len(s) >= -pos]
        result = dims[0]
        for d in dims[1:]:
            result = _broadcast_dim(call, result, d, analyzer, shown or shapes)
        out.append(result)
    return tuple(reversed(out))


def one_unless_empty(a: Dim, b: Dim, analyzer: DimAnalyzer) -> bool:
    """Whether ``a`` is ``min(b, 1)``: 1 whenever ``b`` is not 0, and 0 with
    it (``x[-1:]`` of an axis of ``b`` cells), so ``a`` broadcasts against ``b``
    to ``b`` for every value of ``b``."""
    if isinstance(a, int) or isinstance(b, int):
        return False
    one = dim_min(b, 1)
    return a == one or analyzer.prove_equal(a, one)


def _broadcast_dim(call: Call, a: Dim, b: Dim, analyzer: DimAnalyzer, shapes) -> Dim:
    if a == b:
        return a
    if one_unless_empty(a, b, analyzer):
        return b
    if one_unless_empty(b, a, analyzer):
        return a
    if isinstance(a, int) and isinstance(b, int):
        if a == 1 or b == 1:
            return b if a == 1 else a
        raise shape_error(call, f"cannot broadcast shapes {_joined(shapes)}: dims {a} and {b} "
                                f"differ and neither is 1")
    if a == 1 or analyzer.prove_equal(a, 1):
        return b
    if b == 1 or analyzer.prove_equal(b, 1):
        return a
    if analyzer.prove_equal(a, b):
        # keep the simpler (static) spelling of two provably equal dims
        return a if isinstance(a, int) or not isinstance(b, int) else b
    message = (f"cannot broadcast shapes {_joined(shapes)}: dims {format_dim(a)} and {format_dim(b)} are "
               f"not provably equal or broadcastable (use R.match_cast)")
    if provably_different(analyzer, a, b):
        raise shape_error(call, message)
    raise unproven_error(call, message, a, b)


def broadcast_sinfo(call: Call, sinfos: Sequence[TensorStructInfo], analyzer: DimAnalyzer,
                    dtype: str | None) -> TensorStructInfo:
    """The result of broadcasting ``sinfos``: unknown rank if any rank is
    unknown, only the rank if any shape is unknown, else the broadcast shape."""
    vdevice = result_vdevice(call, sinfos)
    if any(s.ndim < 0 for s in sinfos):
        return TensorStructInfo(None, dtype, -1, vdevice)
    if any(s.shape is None for s in sinfos):
        return TensorStructInfo(None, dtype, max(s.ndim for s in sinfos), vdevice)
    return TensorStructInfo(broadcast_shapes(call, [s.shape for s in sinfos], analyzer), dtype,
                            vdevice=vdevice)


def check_broadcastable_to(call: Call, src: Sequence[Dim], target: Sequence[Dim],
                           analyzer: DimAnalyzer, what: str = "data") -> None:
    """Unidirectional broadcasting: ``src`` must broadcast to exactly ``target``
    (each src dim is 1 or provably equal to the target dim)."""
    if len(src) > len(target):
        raise shape_error(call, f"cannot broadcast {what} of shape {fmt_shape(src)} to {fmt_shape(target)}: "
                                f"rank {len(src)} > {len(target)}")
    for s, t in zip(src, target[len(target) - len(src):]):
        if s == 1 or s == t or analyzer.prove_equal(s, t):
            continue
        if isinstance(s, int) and isinstance(t, int):
            reason = f"dims {s} and {t} differ and {s} is not 1"
        else:
            reason = (f"dims {format_dim(s)} and {format_dim(t)} are not provably equal "
                      f"(use R.match_cast)")
        message = f"cannot broadcast {what} of shape {fmt_shape(src)} to {fmt_shape(target)}: {reason}"
        if isinstance(s, int) and isinstance(t, int) or provably_different(analyzer, s, t):
            raise shape_error(call, message)
        raise unproven_error(call, message, s, t)


def check_dims_equal(call: Call, a: Dim, b: Dim, analyzer: DimAnalyzer, message: str) -> None:
    """ShapeError ``message`` (plus the reason) unless ``a == b`` is provable."""
    if a == b or analyzer.prove_equal(a, b):
        return
    if isinstance(a, int) and isinstance(b, int) or provably_different(analyzer, a, b):
        raise shape_error(call, f"{message}: {format_dim(a)} != {format_dim(b)}")
    raise unproven_error(call, f"{message}: {format_dim(a)} and {format_dim(b)} are not provably equal "
                               f"(use R.match_cast)", a, b)

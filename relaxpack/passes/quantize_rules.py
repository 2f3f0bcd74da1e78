"""SimplifyAlgebra's rules for quantized chains: a quantized value widened again.

A quantizer ends ``clip(round(x) + zp, lo, hi)`` cast to its integer type
(``converters/quantize.py``: ``_saturate``), and the next integer product or
dequantizer casts that back and takes the zero point off::

    astype(astype(clip(round(x) + zp, 0, 255), uint8), int32) - zp

Two rewrites make that ``astype(clip(round(x), -zp, 255 - zp), int32)``:

- ``drop_integer_round_trip``: ``astype(astype(c, I), T) -> astype(c, T)`` for a
  clip ``c`` of an integer-valued float (``round(x)``, or that plus an integral
  constant) to bounds inside the integer type ``I``, saturating NaN; ``T``
  holds every integer of the bounds exactly. ``c`` is then an integer of
  ``I``'s range, which ``I`` holds, so the inner cast changes nothing.
- ``shift_clip_by_zero_point``: ``astype(clip(r + z, lo, hi), T) - z ->
  astype(clip(r, lo - z, hi - z), T)`` for an integer-valued ``r = round(x)``,
  one integral constant ``z`` on both sides and an integer ``T``. Below 2**24
  (float32; 2**53 float64) ``r + z`` is exact and so is the shift of the
  clip; beyond, ``r + z`` (however it rounds) and ``r`` are both past the
  bounds on the same side. NaN saturates to ``lo - z`` both ways.

Signed zeros keep these integer-only where a float result could see them:
``round(-0.3)`` is -0.0, which the integer round trip (and ``-0.0 + z - z``)
makes +0.0. A dequantizer's float ``(q - z)`` therefore keeps its add and
subtract and loses only the two casts.

An exact conv (QLinearConv's, ``nn.conv(..., exact=True)``) reads a clip of a
rounded value without the round trip at all (``exact_conv_reads_the_clip``):
the only difference, -0.0 for +0.0, vanishes in its integer sums.

A table look-up (QLinearSigmoid and the other com.microsoft ops that map the
256 values of the type through a table) is cast to float at once
(``cast_the_table``): ``astype(take(C, i), T) -> take(astype(C, T), i)``,
exact for any cast (it applies to each value the take copies), and the cast of
the constant folds; tables up to :data:`TABLE_LIMIT` elements.

A quantized value laid out (reshaped, permuted: attention's heads) before an
integer product widens it keeps the casts apart, which the rules above need
side by side (``widen_before_layout``): an operand ``astype(astype(L(q), I) -
k, F)`` or ``astype(L(q), F) - k`` of a ``matmul`` / ``nn.gemm``, for a chain
``L`` of reshapes and permutations of a narrowing cast ``q`` and one value
``k``, becomes ``L(astype(astype(q, I) - k, F))`` / ``L(astype(q, F) - k)``:
elementwise steps commute with reshapes and permutations, so the values are
the same; the casts then meet, and FoldPermuteMatmul (later) folds a
permutation the product reads into its strided views. Only at a product: a
widening read by other float steps (QLinearMul's requantization) may be
dropped whole by DropZeroSignRoundTrips where it stays (its value analyses do
not look through the layout).

The quantized value itself stays where something else reads it (a graph
output, a pool); DeadCodeElimination drops it where nothing does.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.expr import Call, Constant, DataflowVar
from ..ops.registry import make_call
from .core.rules import Match, Rule, const, is_op, wildcard

#: float types and the largest integer magnitude up to which they hold every integer
_FLOAT_EXACT = {"float16": 2 ** 11, "bfloat16": 2 ** 8, "float32": 2 ** 24, "float64": 2 ** 53}
_INT_TYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")


def _holds(dtype: str, lo: float, hi: float) -> bool:
    """Whether ``dtype`` holds every integer of ``[lo, hi]`` exactly."""
    if dtype in _INT_TYPES:
        info = np.iinfo(dtype)
        return info.min <= lo and hi <= info.max
    limit = _FLOAT_EXACT.get(dtype)
    return limit is not None and max(abs(lo), abs(hi)) <= limit


def _integral(value) -> bool:
    return value is not None and math.isfinite(value) and float(value).is_integer()


def _bounds(m: Match) -> tuple[float, float] | str:
    """The clip's finite integral bounds, or why not."""
    attrs = m["clip"].attrs
    lo, hi = attrs["min"], attrs["max"]
    if not (_integral(lo) and _integral(hi)) or lo > hi:
        return f"the clip's bounds {lo}, {hi} are not finite integers in order"
    return float(lo), float(hi)


def _cast_clip_bounds(m: Match) -> tuple[float, float] | str:
    """The bounds of a clip whose result is cast to an integer (so NaN must saturate), or why not."""
    if not m["clip"].attrs["saturate_nan"]:
        return "the clip keeps NaN (its cast to an integer is undefined)"
    return _bounds(m)


def _integral_constant(m: Match, name: str) -> float | str:
    """The one-element integral constant ``name`` as a float, or why not."""
    data = m.data(name)
    if data.size != 1 or data.dtype.kind not in "fiu":
        return f"{m.name_of(name)} is not a one-element number"
    value = float(data.reshape(-1)[0])
    return value if _integral(value) else f"{m.name_of(name)} {value!r} is not an integer"


# ---------------------------------------------------------------- drop_integer_round_trip


def _round_trip_check(m: Match) -> str | None:
    bounds = _cast_clip_bounds(m)
    if isinstance(bounds, str):
        return bounds
    narrow, wide = m["narrow"].attrs["dtype"], m["outer"].attrs["dtype"]
    if "zp" in m:
        data = m.data("zp")
        if data.dtype.kind not in "fiu" or not all(_integral(float(v)) for v in data.reshape(-1)):
            return "the added constant is not all integers"
        if data.dtype.kind == "f" and np.signbit(data).any() and not (data != 0).all():
            return "the added constant holds -0.0 (a -0.0 sum would survive into the float result)"
    elif wide not in _INT_TYPES:
        return "round(x) may be -0.0, which the integer round trip makes +0.0 (a float result would keep it)"
    if narrow not in _INT_TYPES or not _holds(narrow, *bounds):
        return f"the inner cast to {narrow} is not to an integer type holding the clip's bounds"
    if not _holds(wide, *bounds):
        return f"{wide} does not hold every integer of the clip's bounds"
    return None


def drop_integer_round_trip(m: Match):
    """astype(astype(clip(round(x) [+ c], lo, hi), I), T) -> astype(clip(...), T): the clip's
    integer values are I's already."""
    return make_call("astype", m.var("clip"), dtype=m["outer"].attrs["dtype"])


_ROUNDED = is_op("round")(wildcard(), name="r", what="operand")
_CLIPPED_INTEGER = is_op("clip")(
    is_op("add")(_ROUNDED, const("zp", "the zero point"), name="v", what="operand", commutative=True),
    name="clip", what="operand")
_CLIPPED_ROUNDED = is_op("clip")(_ROUNDED, name="clip", what="operand")


def _round_trip(clipped):
    return is_op("astype")(is_op("astype")(clipped, name="narrow", what="operand"), name="outer")


# ---------------------------------------------------------------- shift_clip_by_zero_point


def _shift_check(m: Match) -> str | None:
    bounds = _bounds(m)
    if isinstance(bounds, str):
        return bounds
    z1, z2 = _integral_constant(m, "zp"), _integral_constant(m, "zp2")
    for z in (z1, z2):
        if isinstance(z, str):
            return z
    if z1 != z2:
        return f"the zero points {z1:g} and {z2:g} differ"
    lo, hi = bounds
    dtype = m["clip"].struct_info.dtype
    if not (_holds(dtype, lo, hi) and _holds(dtype, lo - z1, hi - z1)):
        return f"{dtype} does not hold the bounds and the shifted bounds exactly"
    if m["cast"].attrs["dtype"] not in _INT_TYPES or \
            not _holds(m["cast"].attrs["dtype"], min(lo, lo - z1), max(hi, hi - z1)):
        return (f"the cast's {m['cast'].attrs['dtype']} is not an integer type holding the bounds and the "
                f"shifted bounds (a float difference of zero is +0.0, the shifted clip's may be -0.0)")
    clip_ndim, out_ndim = getattr(m["clip"].struct_info, "ndim", -1), getattr(m.out_sinfo, "ndim", -2)
    if clip_ndim < 0 or clip_ndim != out_ndim:
        return "the zero point broadcasts the result to another rank"
    return None


def shift_clip_by_zero_point(m: Match):
    """astype(clip(round(x) + z, lo, hi), T) - z -> astype(clip(round(x), lo - z, hi - z), T)
    for one integral constant z and an integer T."""
    z = _integral_constant(m, "zp")
    lo, hi = _bounds(m)
    clipped = make_call("clip", m.var("r"), min=lo - z, max=hi - z,
                        saturate_nan=m["clip"].attrs["saturate_nan"])
    return make_call("astype", clipped, dtype=m["cast"].attrs["dtype"])


# ---------------------------------------------------------------- exact_conv_reads_the_clip


def _exact_conv_check(m: Match) -> str | None:
    if not m["conv"].attrs.get("exact"):
        return "the R.nn.conv is not exact"
    bounds = _cast_clip_bounds(m)
    if isinstance(bounds, str):
        return bounds
    narrow, wide = m["narrow"].attrs["dtype"], m["outer"].attrs["dtype"]
    if narrow not in _INT_TYPES or not _holds(narrow, *bounds) or not _holds(wide, *bounds):
        return f"the casts to {narrow} and {wide} do not both hold the clip's bounds"
    return None


def exact_conv_reads_the_clip(m: Match):
    """nn.conv(astype(astype(clip(round(x), lo, hi), I), T), W, exact=True) -> nn.conv(astype(clip(...), T), W):
    the round trip only turns a -0.0 into +0.0, which an exact conv's integer sums (requantized
    next) do not see."""
    data = make_call("astype", m.var("clip"), dtype=m["outer"].attrs["dtype"])
    return make_call("nn.conv", data, m["w"], **m["conv"].attrs)


# ---------------------------------------------------------------- skip_a_widening_cast


def _holds_type(wide: str, narrow: str) -> bool:
    """Whether ``wide`` holds every value of the integer (or bool) type ``narrow`` exactly."""
    low, high = (0, 1) if narrow == "bool" else (np.iinfo(narrow).min, np.iinfo(narrow).max)
    if wide in _INT_TYPES:
        return _holds(wide, low, high)
    return wide in _FLOAT_EXACT and max(-low, high) <= _FLOAT_EXACT[wide]


def _widening_check(m: Match) -> str | None:
    source = getattr(m["x"].struct_info, "dtype", None)
    if source not in _INT_TYPES + ("bool",):
        return f"the source's {source} is not an integer type"
    narrow = m["narrow"].attrs["dtype"]
    if not _holds_type(narrow, source):
        return f"{narrow} does not hold every {source}"
    return None


def skip_a_widening_cast(m: Match):
    """astype(astype(x, I), T) -> astype(x, T) for an integer x whose every value I holds: the
    inner cast changes no value (a max-pooled uint8 read as int32 by a QLinearAdd, as float32 by
    the exact conv next to it: one cast, shared)."""
    return make_call("astype", m["x"], dtype=m["outer"].attrs["dtype"])


# ---------------------------------------------------------------- cast_the_table

#: tables at most this many elements are cast before a take (the archive holds the cast copy)
TABLE_LIMIT = 1 << 16


def _small_table(m: Match) -> str | None:
    n = m.data("table").size
    return None if n <= TABLE_LIMIT else f"the table has {n} elements (more than {TABLE_LIMIT})"


def cast_the_table(m: Match):
    """astype(take(C, i), T) -> take(astype(C, T), i): a cast commutes with a gather, and the cast
    of the constant folds."""
    table = make_call("astype", m["table"], dtype=m["cast"].attrs["dtype"])
    return make_call("take", table, m["i"], **m["take"].attrs)


# ---------------------------------------------------------------- widen_before_layout

#: the ops a quantized value may be laid out by between its narrowing cast and its widening
_LAYOUT = ("reshape", "permute_dims")


def _call_of(m: Match, expr, op: str, uses_at_most: int = 1) -> Call | None:
    """The ``op`` call ``expr`` is bound to when it is used at most ``uses_at_most`` times."""
    value, uses = m.producer(expr)
    if isinstance(value, Call) and getattr(value.op, "name", None) == op and uses <= uses_at_most:
        return value
    return None


def _layout_of(m: Match, expr, near) -> tuple[list, object] | None:
    """The layout calls (innermost first) between ``expr`` and a quantized value, and that value:
    each step used once (its widened copy replaces it), at least one, the value an integer-typed
    ``astype`` readable where ``near`` (a var of the matched product's block) is."""
    steps = []
    while True:
        value, uses = m.producer(expr)
        if not (isinstance(value, Call) and getattr(value.op, "name", None) in _LAYOUT) or uses != 1:
            break
        steps.append(value)
        expr = value.args[0]
    quantized = m.producer(expr)[0]
    if not steps or not (isinstance(quantized, Call) and getattr(quantized.op, "name", None) == "astype"
                         and quantized.attrs["dtype"] in _INT_TYPES):
        return None
    if isinstance(expr, DataflowVar) and m.block_of(expr) != m.block_of(near):
        return None
    return steps[::-1], expr


def _widened_operand(m: Match, operand):
    """How ``operand`` of the product widens a laid-out quantized value ``L(q)``, as ``(L's steps,
    q, widen(q))`` where ``widen`` makes the same elementwise steps on ``q`` itself, or None.
    Two forms: ``astype(astype(L(q), I) - k, F)`` (an integer shift) and ``astype(L(q), F) - k``
    (a float one), every step used once, ``k`` one value (so its broadcast is the same before
    the layout) of at most ``q``'s rank."""
    outer = _call_of(m, operand, "astype")
    shift = _call_of(m, outer.args[0] if outer is not None else operand, "subtract")
    if shift is None or not isinstance(shift.args[1], Constant):
        return None
    cast = _call_of(m, shift.args[0], "astype")
    if cast is None:
        return None
    integer_shift = outer is not None and cast.attrs["dtype"] in _INT_TYPES and outer.attrs["dtype"] in _FLOAT_EXACT
    if not (integer_shift or (outer is None and cast.attrs["dtype"] in _FLOAT_EXACT)):
        return None
    layout = _layout_of(m, cast.args[0], operand)
    k = shift.args[1].data
    if layout is None or k.size != 1 or k.ndim > getattr(layout[1].struct_info, "ndim", -1):
        return None
    steps, q = layout

    def widen(q):
        value = make_call("subtract", make_call("astype", q, dtype=cast.attrs["dtype"]), shift.args[1])
        return make_call("astype", value, dtype=outer.attrs["dtype"]) if integer_shift else value
    return steps, q, widen


def _widen_check(m: Match) -> str | None:
    if all(_widened_operand(m, m[name]) is None for name in ("a", "b")):
        return ("no operand widens a reshaped or permuted quantized value (astype(astype(L(q), I) - k, F) "
                "or astype(L(q), F) - k, each step used once, k one value)")
    return None


def widen_before_layout(m: Match):
    """matmul(W(L(q)), y) -> matmul(L(W(q)), y) for the widening steps W (either operand; nn.gemm's
    data): the same values, the casts side by side for the rules above."""
    product = m["product"]
    args = list(product.args)
    for i, name in enumerate(("a", "b")):
        found = _widened_operand(m, m[name])
        if found is not None:
            steps, q, widen = found
            value = widen(q)
            for step in steps:
                value = make_call(step.op.name, value, *step.args[1:], **step.attrs)
            args[i] = value
    return make_call(product.op.name, *args, **product.attrs)


RULES = [
    Rule("drop_integer_round_trip", _round_trip(_CLIPPED_INTEGER), _round_trip_check, drop_integer_round_trip),
    Rule("drop_integer_round_trip_rounded", _round_trip(_CLIPPED_ROUNDED), _round_trip_check,
         drop_integer_round_trip, doc="astype(astype(clip(round(x), lo, hi), I), T) -> astype(clip(...), T)."),
    Rule("exact_conv_reads_the_clip",
         is_op("nn.conv")(is_op("astype")(is_op("astype")(_CLIPPED_ROUNDED, name="narrow", what="operand"),
                                          name="outer", what="data"),
                          wildcard("w"), name="conv"),
         _exact_conv_check, exact_conv_reads_the_clip),
    Rule("cast_the_table",
         is_op("astype")(is_op("take")(const("table", "the table"), wildcard("i"), name="take", what="operand"),
                         name="cast"),
         _small_table, cast_the_table,
         doc="astype(take(C, i), T) -> take(astype(C, T), i) for a table C of at most 65536 elements."),
    Rule("skip_a_widening_cast",
         is_op("astype")(is_op("astype")(wildcard("x"), name="narrow", what="operand"), name="outer"),
         _widening_check, skip_a_widening_cast),
    Rule("shift_clip_by_zero_point",
         is_op("subtract")(is_op("astype")(_CLIPPED_INTEGER, name="cast", what="operand"),
                           const("zp2", "the subtracted zero point")),
         _shift_check, shift_clip_by_zero_point),
    Rule("widen_before_layout",
         is_op("matmul", "nn.gemm")(wildcard("a"), wildcard("b"), ..., name="product"),
         _widen_check, widen_before_layout,
         doc="matmul(W(L(q)), y) -> matmul(L(W(q)), y): a quantized value's widening W moved before its layout L."),
]

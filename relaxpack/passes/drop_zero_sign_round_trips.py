"""DropZeroSignRoundTrips: steps of quantized chains that change no value (but maybe a zero's sign, which nothing reads) go.

A quantized model casts a quantized value to its integer type and back to float
(QuantizeLinear then DequantizeLinear, a QOperator op's requantized output read
by the next op's dequantization), and adds and takes off zero points::

    q = clip(round(x / s), lo, hi)          # float32, integer-valued, NaN saturated
    y = astype(astype(q, uint8), float32)   # two casts: y is q, but +0.0 for q's -0.0

``SimplifyAlgebra`` keeps such steps where a zero's sign could show
(``quantize_rules.py``). This pass, knowing what reads each value, drops:

- the round trip ``astype(astype(q, I), F) -> q`` for a NaN-saturating clip
  ``q`` of an integer-valued float to bounds ``I`` holds (a -0.0 stays), or an
  integer ``nn.gemm`` / ``matmul`` whose magnitude bound ``I`` and ``F`` hold
  (MatMulInteger's exact float32 product, cast to int32 and back to float); where the
  sign is read, either round trip becomes ``q + 0.0``, the same bits in one step;
- a zero point added and taken off, ``clip(r + z, lo, hi) - z ->
  clip(r, lo - z, hi - z)`` for an integer-valued ``r`` and one integral
  ``z``, the float type holding the bounds (``r = -0.0`` stays -0.0);
- a product by zeros added, ``add(multiply(x, Z), y) -> broadcast_to(y, shape)``
  for a constant ``Z`` of zeros and a finite ``x`` (a magnitude bound): ``x * Z``
  is a zero of either sign, and nothing reads ``x`` there any more; likewise
  ``add(x, y)`` read only as ``(x + y) / inf`` (a quantizer of scale inf);

where nothing reads the sign of their zeros; and wherever exact:

- ``astype(astype(i - k, F) + k, I) -> i`` for a bounded integer ``i`` of type
  ``I`` (a zero point taken off in integers and put back in float);
- ``round(x) -> x`` for an integer-valued ``x`` (the bits are the same), and
  ``round(divide(multiply(q, s), s)) -> q`` for a bounded integer ``q`` and a
  normal constant scale ``s`` (a QDQ pair quantized again by its own scale), and, where nothing
  reads a zero's sign, ``multiply(clip(round(divide(p, s)), lo, hi), s) -> p`` for ``p =
  max_pool(multiply(q, s))`` of such a ``q`` within the bounds and ``s > 0`` (a QDQ pair around a
  max pool);
- a NaN-saturating ``clip(x, lo, hi) -> x`` for an ``x`` known NaN-free
  within the bounds (:func:`~.analysis.float_values.value_range`; at a zero
  bound only where nothing reads the sign or ``x`` is never -0.0): a
  requantization's ``clip(clip(r, -z, 255 - z) + z, 0, 255)``.

Whether a value's zero sign matters is worked out backwards over the
function's bindings (:func:`sign_readers`): it matters for a function output,
and for a value read by an op that tells ``-0.0`` from ``+0.0`` (a divisor,
``power``, ``reciprocal``, anything not listed here). It stops at ops whose
result is the same for either sign (a cast to an integer or bool, a
comparison, an add of a constant with no ``-0.0`` or a subtract of a nonzero
constant: ``-0.0 + c == +0.0 + c`` then), and passes through ops that, given
operands equal up to the sign of zero, give results equal up to the sign of
zero (sums, products, quotients' numerators, rounding, clips, pools, convs,
reshapes, ...: IEEE ``a + b`` with a zero operand is the other operand unless
both are zeros, ``±0 * b`` is a zero or NaN for either sign). A value only
such ops lead from to such stops is free to carry the other zero.

A dropped step leaves the alias ``y = q``. Runs at -O2 after the
algebraic rewrites (whose round trips it finishes) and before the last core
round, which resolves the aliases and drops the unused casts.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.block_builder import BlockBuilder
from ..ir.expr import Call, Constant, Function, SeqExpr, ShapeExpr, Var
from ..ir.op import make_call
from .analysis.float_values import (FLOAT_EXACT, FLOAT_TYPES, INT_TYPES, Definitions, integer_valued, integral,
                                    never_negative_zero, one_value, rewrite_calls, sign_readers, value_range)
from .analysis.magnitude import magnitude_bound
from .core.infra import function_pass
from .dead_code_elimination import count_uses


def _round_trip(var: Var, call: Call, defs: Definitions):
    """``q`` for ``var = astype(astype(q, I), F)`` when the casts change no value of ``q`` but a
    zero's sign (see the module docstring), else None."""
    if call.op.name != "astype" or call.attrs["dtype"] not in FLOAT_TYPES:
        return None
    inner = defs.get(call.args[0])
    if inner is None or inner.op.name != "astype" or inner.attrs["dtype"] not in INT_TYPES:
        return None
    q = defs.resolve(inner.args[0])
    clip = defs.get(q)
    if clip is not None and clip.op.name in ("nn.gemm", "matmul"):
        return _exact_product(var, q, inner.attrs["dtype"], defs)
    if clip is None or clip.op.name != "clip" or not clip.attrs["saturate_nan"]:
        return None
    lo, hi = clip.attrs["min"], clip.attrs["max"]
    info = np.iinfo(inner.attrs["dtype"])
    if lo is None or hi is None or not (integral(lo) and integral(hi)) or not info.min <= lo <= hi <= info.max:
        return None
    if getattr(q.struct_info, "dtype", None) != call.attrs["dtype"] or \
            getattr(q.struct_info, "ndim", None) != getattr(var.struct_info, "ndim", -1):
        return None
    return q if integer_valued(clip.args[0], defs) and defs.visible(q, var) else None


def _exact_product(var: Var, q: Var, integer: str, defs: Definitions):
    """``q`` for ``var = astype(astype(q, I), F)`` of an integer product ``q`` (a MatMulInteger's
    exact float32 ``nn.gemm``) whose magnitude bound is within ``I`` and ``F``'s exact integers:
    the casts change no value then, but -0.0 into +0.0; else None."""
    dtype = getattr(q.struct_info, "dtype", None)
    if dtype != getattr(var.struct_info, "dtype", None) or \
            getattr(q.struct_info, "ndim", None) != getattr(var.struct_info, "ndim", -1):
        return None
    info, limit = np.iinfo(integer), FLOAT_EXACT.get(dtype)
    if limit is None or not (integer_valued(q, defs) and defs.visible(q, var)):
        return None
    bound = magnitude_bound(q, defs, {})
    return q if bound is not None and bound <= min(limit, info.max, -info.min) else None


def _positive_zero(var: Var, call: Call, defs: Definitions):
    """``q + 0.0`` for a round trip ``var = astype(astype(q, I), F)`` that changes no value of ``q``
    but a zero's sign (:func:`_round_trip`: a NaN-saturating integral clip, an exact integer
    product), where that sign is read: IEEE's ``-0.0 + 0.0`` is ``+0.0`` (rounding to nearest) and
    any other value plus ``+0.0`` is itself, so it is the round trip's value in one step, which
    also keeps a fused chain whole (an int32 value between the casts splits it in two). Else None."""
    q = _round_trip(var, call, defs)
    if q is None:
        return None
    zero = Constant(np.zeros((), np.dtype(call.attrs["dtype"])))
    return BlockBuilder().normalize(make_call("add", q, zero))


def _scaled_back(x, defs: Definitions):
    """``q`` for ``x = divide(multiply(q, s), s)`` (a QDQ pair's dequantization, quantized again
    with the same scale) of an integer-valued ``q`` within bounds ``B`` (``value_range``, so never
    NaN) and one float32/float64 constant ``s``: then ``round(x)`` is ``q``, zero signs included.
    The two roundings leave ``x`` within ``|q| * 2 * eps`` of ``q``, below 0.5 while ``B * 4 * eps <
    1``; ``|s|`` normal and ``B * |s|`` far from overflow keep ``q * s`` a normal float; ``s``'s sign
    cancels. Else None."""
    divide = defs.get(x)
    if divide is None or divide.op.name != "divide":
        return None
    multiply = defs.get(divide.args[0])
    s = one_value(divide.args[1])
    dtype = getattr(x.struct_info, "dtype", None)
    if multiply is None or multiply.op.name != "multiply" or s is None or dtype not in ("float32", "float64"):
        return None
    for q, scale in (multiply.args, multiply.args[::-1]):
        if one_value(scale) != s or getattr(scale.struct_info, "dtype", None) != dtype or \
                getattr(divide.args[1].struct_info, "dtype", None) != dtype or \
                getattr(q.struct_info, "dtype", None) != dtype:
            continue
        bounds = value_range(q, defs)
        info = np.finfo(dtype)
        if bounds is None or not integer_valued(q, defs) or abs(s) < info.tiny:
            continue
        b = max(abs(bounds[0]), abs(bounds[1]))
        if b * 4 * float(info.eps) < 1 and b * abs(s) < float(info.max) / 4:
            return defs.resolve(q)
    return None


def _rescales(call, s: float, dtype) -> list:
    """The operands ``q`` of ``call = multiply(q, s)`` (either order) for the constant ``s`` of ``dtype``."""
    if call is None or call.op.name != "multiply" or len(call.args) != 2:
        return []
    return [q for q, scale in (call.args, call.args[::-1])
            if one_value(scale) == s and getattr(scale.struct_info, "dtype", None) == dtype
            and getattr(q.struct_info, "dtype", None) == dtype]


def _pooled_back(call: Call, defs: Definitions):
    """``p`` for ``call = multiply(clip(round(divide(p, s)), lo, hi), s)`` where ``p =
    max_pool(multiply(q, s))`` of an integer-valued ``q`` within ``[lo, hi]`` (a QDQ pair around
    a max pool, quantized again by its own scale): with ``s > 0`` each ``q * s`` rounds monotonically,
    so the pool picks ``q_j * s`` for the largest ``q_j`` of its window; ``round((q_j * s) / s)`` is
    ``q_j`` (:func:`_scaled_back`'s bounds), inside the clip, and ``q_j * s`` again is ``p``'s value,
    but for a zero's sign (callers: where nothing reads it). Else None."""
    dtype = getattr(call.struct_info, "dtype", None)
    if call.op.name != "multiply" or len(call.args) != 2 or dtype not in ("float32", "float64"):
        return None
    info = np.finfo(dtype)
    for clipped, scale in (call.args, call.args[::-1]):
        s = one_value(scale)
        clip = defs.get(clipped)
        if s is None or not s >= float(info.tiny) or clip is None or clip.op.name != "clip" \
                or getattr(scale.struct_info, "dtype", None) != dtype:
            continue
        rounded = defs.get(clip.args[0])
        divide = None if rounded is None or rounded.op.name != "round" else defs.get(rounded.args[0])
        if divide is None or divide.op.name != "divide" or one_value(divide.args[1]) != s \
                or getattr(divide.args[1].struct_info, "dtype", None) != dtype:
            continue
        p = defs.resolve(divide.args[0])
        pool = defs.get(p)
        # (without ceil mode every window holds an input element: the op's padding is shorter than
        # its dilated window; a window of padding alone would make -inf)
        if pool is None or pool.op.name != "nn.max_pool" or pool.attrs.get("ceil_mode", True):
            continue
        lo, hi = clip.attrs["min"], clip.attrs["max"]
        for q in _rescales(defs.get(pool.args[0]), s, dtype):
            bounds = value_range(q, defs)
            if bounds is None or not integer_valued(q, defs) or (lo is not None and bounds[0] < lo) \
                    or (hi is not None and bounds[1] > hi):
                continue
            b = max(abs(bounds[0]), abs(bounds[1]))
            if b * 4 * float(info.eps) < 1 and b * s < float(info.max) / 4:
                return p
    return None


def _float_shift_back(var: Var, call: Call, defs: Definitions):
    """``i`` for ``var = astype(astype(i - k, F) + k, I)`` of an integer ``i`` of type ``I`` and one
    integral constant ``k`` (a QOperator op's zero point taken off in integers and put back in float),
    where ``i``'s bounds (``value_range``) keep ``i - k`` within ``I`` and every value within ``F``'s
    exact integers: each step is then exact and the casts give ``i`` back. Else None."""
    integer = call.attrs["dtype"]
    add = defs.get(call.args[0])
    if integer not in INT_TYPES or add is None or add.op.name != "add" or len(add.args) != 2:
        return None
    for widened, constant in (add.args, add.args[::-1]):
        k = one_value(constant)
        cast = defs.get(widened)
        if k is None or not float(k).is_integer() or cast is None or cast.op.name != "astype":
            continue
        limit = FLOAT_EXACT.get(cast.attrs["dtype"])
        difference = defs.get(cast.args[0])
        if limit is None or difference is None or difference.op.name != "subtract" or \
                one_value(difference.args[1]) != k:
            continue
        i = defs.resolve(difference.args[0])
        bounds = value_range(i, defs)
        if getattr(i.struct_info, "dtype", None) != integer or bounds is None or \
                getattr(difference.args[1].struct_info, "dtype", None) != integer:
            continue
        info = np.iinfo(integer)
        shifted = (bounds[0] - k, bounds[1] - k)
        if info.min <= shifted[0] and shifted[1] <= info.max and \
                max(abs(bounds[0]), abs(bounds[1]), abs(shifted[0]), abs(shifted[1])) <= limit and \
                getattr(i.struct_info, "ndim", None) == getattr(var.struct_info, "ndim", -1) and defs.visible(i, var):
            return i
    return None


def _one_integral(expr) -> float | None:
    """The value of a one-element float constant that is an integer, else None."""
    value = one_value(expr) if isinstance(expr, Constant) and expr.data.dtype.kind == "f" else None
    return value if value is not None and value.is_integer() else None


def _shifted_clip(var: Var, call: Call, defs: Definitions):
    """``clip(r, lo - z, hi - z)`` for ``var = clip(r + z, lo, hi) - z`` of an integer-valued ``r``
    and one integral float constant ``z``, where the float type holds the bounds and shifted
    bounds exactly, else None. Equal but for a zero's sign: ``r + z`` is exact below the float's
    integer limit and past both bounds on the same side beyond it; NaN gives ``lo - z`` (or NaN)
    both ways; ``r = -0.0`` at ``z`` inside the bounds gives +0.0 one way, -0.0 the other."""
    if call.op.name != "subtract" or (z := _one_integral(call.args[1])) is None:
        return None
    clip = defs.get(call.args[0])
    if clip is None or clip.op.name != "clip":
        return None
    add = defs.get(clip.args[0])
    if add is None or add.op.name != "add":
        return None
    r = next((defs.resolve(a) for a, b in (add.args, add.args[::-1]) if _one_integral(b) == z), None)
    lo, hi = clip.attrs["min"], clip.attrs["max"]
    dtype = getattr(var.struct_info, "dtype", None)
    limit = FLOAT_EXACT.get(dtype)
    if r is None or lo is None or hi is None or limit is None or not (integral(lo) and integral(hi)):
        return None
    if max(abs(lo), abs(hi), abs(lo - z), abs(hi - z)) > limit or lo > hi:
        return None
    if getattr(r.struct_info, "dtype", None) != dtype or \
            getattr(r.struct_info, "ndim", None) != getattr(var.struct_info, "ndim", -1):
        return None
    if not (integer_valued(r, defs) and defs.visible(r, var)):
        return None
    return BlockBuilder().normalize(make_call("clip", r, min=lo - z, max=hi - z,
                                              saturate_nan=clip.attrs["saturate_nan"]))


def _shift_of(call: Call, defs: Definitions):
    """``(r, k, constant)`` for ``clip(r + k, lo, hi)`` of an integer-valued ``r`` and a nonzero
    integral ``k`` whose bounds, shifted or not, are integers the float type holds, else None."""
    if call.op.name != "clip":
        return None
    add = defs.get(call.args[0])
    if add is None or add.op.name != "add":
        return None
    limit = FLOAT_EXACT.get(getattr(call.args[0].struct_info, "dtype", None))
    bounds = [b for b in (call.attrs["min"], call.attrs["max"]) if b is not None]
    for r, constant in (add.args, add.args[::-1]):
        k = _one_integral(constant)
        if k is None or k == 0 or not isinstance(r, Var) or limit is None:
            continue
        if all(integral(b) and abs(b) + abs(k) <= limit for b in bounds) and integer_valued(r, defs):
            return defs.resolve(r), k, constant
    return None


def _clip_key(r: Var, call: Call, k: float = 0.0) -> tuple:
    lo, hi = call.attrs["min"], call.attrs["max"]
    return r, None if lo is None else lo - k, None if hi is None else hi - k, call.attrs["saturate_nan"]


def _shared_clip(var: Var, call: Call, defs: Definitions, clips: dict, sign_free: bool):
    """A requantized value clipped twice (QLinearSigmoid's table index ``clip(r + k, lo, hi)``,
    QLinearMul's operand ``clip(r, lo - k, hi - k)``) as one clip and a shift: ``c + k`` where the
    plain clip ``c`` is bound already (exact, zero signs too: a zero is ``-k + k``, +0.0, either
    way; NaN gives ``lo`` either way), ``s - k`` where the shifted clip ``s`` is (a zero's sign
    may differ: ``sign_free`` only). ``clips`` holds the clips bound so far, by
    :func:`_clip_key`, with their shift."""
    shift = _shift_of(call, defs) if call.op.name == "clip" else None
    if shift is not None:
        r, k, constant = shift
        found = clips.get(_clip_key(r, call, k))
        if found is not None and found[1] is None and defs.visible(found[0], var):
            return BlockBuilder().normalize(make_call("add", found[0], constant))
    elif call.op.name == "clip" and sign_free and isinstance(call.args[0], Var):
        found = clips.get(_clip_key(defs.resolve(call.args[0]), call))
        if found is not None and found[1] is not None and defs.visible(found[0], var):
            return BlockBuilder().normalize(make_call("subtract", found[0], found[1]))
    return None


def _remember_clip(var: Var, call: Call, defs: Definitions, clips: dict) -> None:
    """Add ``var = call`` to ``clips`` when it is a clip: under its plain key (no shift) or, for
    ``clip(r + k, lo, hi)``, under ``clip(r, lo - k, hi - k)``'s key with the constant ``k``."""
    if call.op.name != "clip" or not isinstance(call.args[0], Var):
        return
    shift = _shift_of(call, defs)
    if shift is None:
        clips.setdefault(_clip_key(defs.resolve(call.args[0]), call), (var, None))
    else:
        r, k, constant = shift
        clips.setdefault(_clip_key(r, call, k), (var, constant))


def _same_value(var: Var, call: Call, defs: Definitions, sign_free: bool):
    """The operand ``var``'s call returns unchanged (``sign_free``: but for a zero's sign), else None:
    a round trip through an integer type (sign free only), a round of an integer-valued value,
    a NaN-saturating clip of a NaN-free value within its bounds (where a zero bound could turn
    -0.0 into +0.0: sign free, or a value that is never -0.0)."""
    name = call.op.name
    if name == "astype":
        same = _float_shift_back(var, call, defs)
        if same is not None:
            return same
        return _round_trip(var, call, defs) if sign_free else None
    if name == "round" and getattr(var.struct_info, "dtype", None) in FLOAT_TYPES:
        x = defs.resolve(call.args[0])
        if integer_valued(x, defs):
            return x if defs.visible(x, var) else None
        q = _scaled_back(x, defs)
        return q if q is not None and defs.visible(q, var) else None
    if name == "multiply" and sign_free:
        p = _pooled_back(call, defs)
        return p if p is not None and defs.visible(p, var) else None
    if name == "clip":
        x = defs.resolve(call.args[0])
        lo, hi = call.attrs["min"], call.attrs["max"]
        inner = value_range(x, defs)
        if inner is None or (lo is not None and inner[0] < lo) or (hi is not None and inner[1] > hi):
            return None
        zero_bound = any(b is not None and b == 0 for b in (lo, hi))
        if zero_bound and not (sign_free or never_negative_zero(x, defs)) or \
                any(b is not None and b == 0 and math.copysign(1, b) < 0 for b in (lo, hi)):
            return None
        if getattr(x.struct_info, "ndim", None) != getattr(var.struct_info, "ndim", -1):
            return None
        return x if defs.visible(x, var) else None
    return None


@function_pass(name="DropZeroSignRoundTrips", opt_level=2, requires=("import", "optimize"), produces="optimize")
def drop_zero_sign_round_trips(func, mod, ctx):
    """Read the clipped float itself where its round trip through an integer type only fixes a
    zero's sign that nothing reads, and clip once where a zero point is added and taken off
    (see the module docstring)."""
    if not isinstance(func.body, SeqExpr):
        return func
    reading, defs = sign_readers(func), Definitions(func)

    def same_value_or_shifted_clip(var, call):
        unread = var not in reading
        new = _same_value(var, call, defs, unread)
        if new is not None:
            defs.alias[var] = new
            return new
        new = _shifted_clip(var, call, defs) if unread else _positive_zero(var, call, defs)
        if new is None and unread:
            new = _zero_product_added(var, call, defs, memo)
        if new is None and call.op.name == "add" and _read_over_infinity(var, readers, uses, reading):
            new = _finite_addend_dropped(var, call, defs, memo)
        if new is not None:
            defs.calls[var] = new
        return new

    memo: dict = {}
    readers, uses = _readers(func), count_uses(func.body)
    return rewrite_calls(func, defs, same_value_or_shifted_clip)


def _readers(func: Function) -> dict[Var, list[tuple[Var, Call]]]:
    """The top-level calls reading each var, as ``(their var, the call)``."""
    found: dict[Var, list[tuple[Var, Call]]] = {}
    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b.value, Call):
                for arg in b.value.args:
                    if isinstance(arg, Var):
                        found.setdefault(arg, []).append((b.var, b.value))
    return found


def _read_over_infinity(var: Var, readers: dict, uses, reading: set) -> bool:
    """Whether ``var`` is read only as the numerator of quotients by constants of infinities
    (a quantizer whose scale is inf), none of which has its zero sign read."""
    found = readers.get(var, ())
    return bool(found) and len(found) == uses[var] and all(
        call.op.name == "divide" and call.args[0] is var and call.args[1] is not var
        and isinstance(call.args[1], Constant) and call.args[1].data.dtype.kind == "f"
        and call.args[1].data.size and bool(np.isinf(call.args[1].data).all()) and user not in reading
        for user, call in found)


def _finite_addend_dropped(var: Var, call: Call, defs: Definitions, memo: dict):
    """``broadcast_to(y, shape)`` for ``var = add(x, y)`` (either order) read only over infinities
    (:func:`_read_over_infinity`), ``x`` bounded by ``magnitude_bound``: ``(x + y) / inf`` is ``y /
    inf`` but for a zero's sign. A finite ``y`` gives zeros both ways (``|x| <= 1e30``, the bound's
    ``LIMIT``, is under half an ulp of float32's and float64's largest values, so ``x + y`` does
    not overflow: not float16's), an infinite one ``inf / inf`` (the same NaN), a NaN its own NaN.
    QDQ BERT quantizes its attention scores plus the -inf mask by a scale of inf (entry "NaN
    quantizes to the type's minimum")."""
    out = var.struct_info
    if len(call.args) != 2 or getattr(out, "shape", None) is None or out.dtype not in ("float32", "float64"):
        return None
    for x, y in (call.args, call.args[::-1]):
        if getattr(y.struct_info, "dtype", None) == out.dtype and defs.visible(y, var) \
                and magnitude_bound(x, defs, memo) is not None:
            return BlockBuilder().normalize(make_call("broadcast_to", y, ShapeExpr(tuple(out.shape))))
    return None


def _zero_product_added(var: Var, call: Call, defs: Definitions, memo: dict):
    """``broadcast_to(y, shape)`` for ``var = add(multiply(x, Z), y)`` (either order of each) with
    ``Z`` a constant of zeros and ``x`` finite (:func:`~.analysis.magnitude.magnitude_bound`): ``x *
    Z`` is a zero of either sign, so the sum is ``y`` but for a zero's sign, which the caller has
    found nothing reads; ``x`` is then read no more there. A QOperator add whose output scale
    dwarfs an operand's (BERT's attention scores beside its -inf mask, quantized to a scale of
    inf) requantizes that operand by a multiplier of exactly 0."""
    out = var.struct_info
    if call.op.name != "add" or len(call.args) != 2 or getattr(out, "shape", None) is None:
        return None
    for product, y in (call.args, call.args[::-1]):
        times = defs.get(product)
        if times is None or times.op.name != "multiply" or len(times.args) != 2 \
                or getattr(y.struct_info, "dtype", None) != out.dtype or not defs.visible(y, var):
            continue
        for x, zeros in (times.args, times.args[::-1]):
            if isinstance(zeros, Constant) and zeros.data.dtype.kind == "f" and zeros.data.size \
                    and not zeros.data.any() and magnitude_bound(x, defs, memo) is not None:
                return BlockBuilder().normalize(make_call("broadcast_to", y, ShapeExpr(tuple(out.shape))))
    return None


def share_clips(func: Function) -> Function:
    """``func`` with each value clipped twice, as ``clip(r + k, lo, hi)`` and ``clip(r, lo - k,
    hi - k)``, clipped once (:func:`_shared_clip`): TabulateIntegerFunctions tries it, since the
    shift costs as much as the clip it replaces, unless a look-up takes in both."""
    if not isinstance(func.body, SeqExpr):
        return func
    reading, defs = sign_readers(func), Definitions(func)
    clips: dict[tuple, tuple] = {}

    def shared_clip(var, call):
        new = _shared_clip(var, call, defs, clips, var not in reading)
        if new is not None:
            defs.calls[var] = new
        else:
            _remember_clip(var, call, defs, clips)
        return new

    return rewrite_calls(func, defs, shared_clip)


__all__ = ["drop_zero_sign_round_trips", "share_clips", "sign_readers"]

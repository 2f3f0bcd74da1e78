"""Elementwise kernels: unary math, broadcasting binary ops, clip, where.

Each writes straight into ``out`` with a ufunc's ``out=`` so no result
temporary is made. Integer division and remainder follow the op
definitions (``divide`` truncates like ONNX Div; ``mod`` takes the divisor's
sign unless ``fmod``). Activations live in :mod:`.activation`.
"""

from __future__ import annotations

import math

import numpy as np

from ..fpstate import quiet
from ._constants import ONE
from ._math import CLIP, commit, erf32, erf64, is_low_float, load, scalar_array, scratch, separate
from ._registry import as_float_ufunc, as_ufunc, register_kernel

# ---------------------------------------------------------------- unary math

_UFUNCS = {
    "abs": np.abs, "negative": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "tanh": np.tanh, "asin": np.arcsin,
    "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "floor": np.floor, "ceil": np.ceil,
    "round": np.rint,            # half to even, like ONNX Round
    "sign": np.sign, "square": np.square, "logical_not": np.logical_not,
    "bitwise_not": np.invert, "isnan": np.isnan, "isinf": np.isinf, "isfinite": np.isfinite,
}


def _unary_kernel(name: str, ufunc: np.ufunc):
    def kernel(x, *, out):
        if is_low_float(out.dtype) and out.dtype != np.float16:
            # bfloat16 and the small floats: compute in float32, round once
            buf = load(x, out)
            with quiet():
                ufunc(buf, out=buf)
            commit(buf, out)
            return
        with quiet():     # log(0), sqrt(-1): IEEE results, no warnings
            ufunc(x, out=out)
    kernel.__name__ = kernel.__qualname__ = name.replace(".", "_")
    kernel.__doc__ = f"``out = {ufunc.__name__}(x)``."
    return as_ufunc(kernel, ufunc, quiet=True, low_float=False)


for _name, _ufunc in _UFUNCS.items():
    register_kernel(_name)(_unary_kernel(_name, _ufunc))


@register_kernel("rsqrt")
def rsqrt(x, *, out):
    """``1 / sqrt(x)``."""
    buf = load(x, out)
    with quiet():
        np.sqrt(buf, out=buf)
        np.reciprocal(buf, out=buf)
    commit(buf, out)


@register_kernel("reciprocal")
def reciprocal(x, *, out):
    """``1 / x``."""
    with quiet():
        np.divide(1, x, out=out)


@register_kernel("sigmoid")
def sigmoid(x, *, out):
    """``1 / (1 + exp(-x))``; exp(-x) overflowing to inf gives the right 0."""
    buf = scratch(out)
    with quiet():
        if buf is out and x.dtype == out.dtype:
            np.negative(x, out=buf)
        else:
            np.copyto(buf, x, casting="unsafe")
            np.negative(buf, out=buf)
        _reciprocal_of_one_plus_exp(buf)
    commit(buf, out)


def _specialize_sigmoid(attrs: dict, constant: tuple):
    """Per instruction (a fused chain's step too): a float32/float64 ``x`` of ``out``'s shape and
    dtype runs the kernel's four calls with ``out`` positional (negate into ``out``, exp, add 1,
    divide 1 by it), without the scratch and commit; anything else the kernel."""
    negative, exp, add, divide = np.negative, np.exp, np.add, np.divide
    plain = (np.dtype(np.float32), np.dtype(np.float64))

    def call(x, *, out, workspace=None):
        dtype = out.dtype
        if x.dtype is dtype and dtype in plain and x.ndim and x.shape == out.shape:
            one = ONE[dtype]
            negative(x, out)
            with quiet():
                exp(out, out)
            add(out, one, out)
            divide(one, out, out)
        else:
            sigmoid(x, out=out)
    return call


sigmoid.specialize_attrs = _specialize_sigmoid


def sigmoid_in_place(buf: np.ndarray) -> None:
    """``buf = 1 / (1 + exp(-buf))`` for a float32/float64 ``buf``: the kernel's arithmetic,
    which a conv's runner calls as its activation without the kernel's layers around it."""
    np.negative(buf, out=buf)
    _reciprocal_of_one_plus_exp(buf)


def _reciprocal_of_one_plus_exp(buf: np.ndarray) -> None:
    with quiet():
        np.exp(buf, out=buf)
    one = ONE.get(buf.dtype, 1)        # (a 0-d one: see ._constants)
    np.add(buf, one, out=buf)
    np.divide(one, buf, out=buf)       # the same quotient as np.reciprocal, twice as fast


@register_kernel("erf")
def erf(x, *, out):
    """The Gauss error function: float32 within 1.5 ulp by float32
    polynomials; float16, bfloat16 and the small floats the same in float32,
    rounded once (the float16 contract, docs/design-notes.md: for float16 the
    correctly rounded value on all but 2 of the 65536 inputs); other dtypes by
    fdlibm's approximations in float64."""
    if out.dtype == np.float32 and x.dtype == np.float32 and out.shape == x.shape:
        erf32(x, out)
        return
    if is_low_float(out.dtype) and x.shape == out.shape:
        buf = load(x, out)
        erf32(buf, buf)
        commit(buf, out)
        return
    np.copyto(out, erf64(x), casting="unsafe")


# ---------------------------------------------------------------- binary

_BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply,
    "maximum": np.maximum, "minimum": np.minimum,
    "equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
    "greater": np.greater, "greater_equal": np.greater_equal,
    "logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
}


def _binary_kernel(name: str, ufunc: np.ufunc):
    def kernel(lhs, rhs, *, out):
        ufunc(lhs, rhs, out=out)
    kernel.__name__ = kernel.__qualname__ = name
    kernel.__doc__ = f"``out = {ufunc.__name__}(lhs, rhs)`` with broadcasting."
    return as_ufunc(kernel, ufunc)


for _name, _ufunc in _BINARY.items():
    register_kernel(_name)(_binary_kernel(_name, _ufunc))


def _shift_amounts(rhs, bits: int, fill: int):
    """``rhs`` with the out-of-range amounts (< 0 or >= ``bits``) replaced by
    ``fill``, and where they were; computed before ``out`` is written, since
    ``out`` may be ``rhs``'s buffer."""
    amounts = np.asarray(rhs)
    bad = amounts >= bits
    if amounts.dtype.kind == "i":
        bad |= amounts < 0
    return np.where(bad, amounts.dtype.type(fill), amounts), bad


@register_kernel("left_shift")
def left_shift(lhs, rhs, *, out):
    """``lhs << rhs`` wrapping in the dtype (ONNX BitShift LEFT); an amount
    below 0 or at least the bit width gives 0.

    >>> out = np.empty(3, np.int8)
    >>> left_shift(np.array([1, 3, 5], np.int8), np.array([7, 6, 8], np.int8), out=out); out
    array([-128,  -64,    0], dtype=int8)
    """
    amounts, bad = _shift_amounts(rhs, out.dtype.itemsize * 8, 0)
    np.left_shift(lhs, amounts, out=out)
    np.copyto(out, 0, where=bad)


@register_kernel("right_shift")
def right_shift(lhs, rhs, *, out):
    """``lhs >> rhs`` (ONNX BitShift RIGHT), sign-extending for signed ints;
    an amount below 0 or at least the bit width leaves only the fill: -1 for
    a negative ``lhs``, else 0 (a signed shift by ``bits - 1`` gives exactly that).

    >>> out = np.empty(3, np.int8)
    >>> right_shift(np.array([-128, 64, -3], np.int8), np.array([3, 8, -1], np.int8), out=out); out
    array([-16,   0,  -1], dtype=int8)
    """
    bits = out.dtype.itemsize * 8
    signed = out.dtype.kind == "i"
    amounts, bad = _shift_amounts(rhs, bits, bits - 1 if signed else 0)
    np.right_shift(lhs, amounts, out=out)
    if not signed:
        np.copyto(out, 0, where=bad)


@register_kernel("divide")
def divide(lhs, rhs, *, out):
    """``lhs / rhs``; integers truncate toward zero (ONNX Div), and an
    integer division by zero gives 0 (numpy's choice; ONNX leaves it undefined)."""
    with quiet():
        if out.dtype.kind not in "iu":
            np.divide(lhs, rhs, out=out)
        elif out.dtype.kind == "u":
            np.floor_divide(lhs, rhs, out=out)
        else:
            # trunc(a / b) = (a - fmod(a, b)) / b, exactly, in integer arithmetic
            (rhs,) = separate(out, rhs)
            rem = np.fmod(lhs, rhs)
            np.subtract(lhs, rem, out=out)
            np.floor_divide(out, rhs, out=out)


as_float_ufunc(divide, np.divide, quiet=True)     # a fused float step: np.divide itself


@register_kernel("floor_divide")
def floor_divide(lhs, rhs, *, out):
    """``floor(lhs / rhs)`` (numpy ``//``); integer division by zero gives 0."""
    with quiet():
        np.floor_divide(lhs, rhs, out=out)


@register_kernel("mod")
def mod(lhs, rhs, *, out, fmod):
    """Remainder: the dividend's sign with ``fmod`` (C fmod), else the divisor's
    (Python %); an integer remainder by zero gives 0."""
    with quiet():
        (np.fmod if fmod else np.remainder)(lhs, rhs, out=out)


def _scalar_exponent(rhs) -> float | None:
    """The exponent when ``rhs`` holds one value that has a fast path, else None."""
    if np.ndim(rhs) and np.size(rhs) != 1:
        return None
    value = float(np.reshape(rhs, -1)[0]) if isinstance(rhs, np.ndarray) else float(rhs)
    return value if value in _FAST_POWERS else None


def _square(x, out):
    np.multiply(x, x, out=out)


def _cube(x, out):
    # onnxruntime's Pow computes x * x * x for an exponent of 3 as well
    if np.may_share_memory(x, out):
        x = x.copy()
    np.multiply(x, x, out=out)
    np.multiply(out, x, out=out)


def _sqrt(x, out):
    # C's pow (and onnxruntime's) gives +0 for -0 and +inf for -inf, sqrt -0 and nan
    # (numpy's float32/float64 power follows sqrt here, its float16 power follows C)
    negative_inf = np.isneginf(x)
    negative_inf = negative_inf if negative_inf.any() else None
    np.sqrt(x, out=out)
    out += 0        # -0 + 0 is +0; every other value is unchanged
    if negative_inf is not None:
        np.copyto(out, np.inf, where=negative_inf)


#: exponent -> fn(x, out); each gives C pow's special values (nan, +-inf, +-0)
_FAST_POWERS = {
    1.0: lambda x, out: np.copyto(out, x),
    2.0: _square,
    3.0: _cube,
    0.5: _sqrt,
    -1.0: lambda x, out: np.divide(1, x, out=out),
}


@register_kernel("power")
def power(lhs, rhs, *, out):
    """``lhs ** rhs``. A negative integer exponent truncates the exact
    result toward zero (like ONNX/onnxruntime's cast of pow): 1 and -1 keep
    their powers, every other base gives 0 (0 ** -n too).

    A float base with one exponent of 1, 2, 3, 0.5 or -1 (GELU's ``x ** 3``)
    takes a copy, products, ``sqrt`` or a division instead of ``pow``, which
    is two orders of magnitude slower; the results are correctly rounded
    except ``x ** 3``, which rounds twice (within one ulp, like onnxruntime).
    """
    with quiet():
        if out.dtype.kind == "f" or is_low_float(out.dtype):
            exponent = _scalar_exponent(rhs) if np.dtype(lhs.dtype) == out.dtype else None
            if exponent is not None:
                if out.dtype.itemsize >= 4:
                    _FAST_POWERS[exponent](lhs, out)
                    return
                buf = load(lhs, out)        # float16 and smaller: float32, rounded once
                _FAST_POWERS[exponent](buf, buf)
                commit(buf, out)
                return
        if out.dtype.kind != "i":
            np.power(lhs, rhs, out=out)
            return
        negative = rhs < 0
        if not negative.any():
            np.power(lhs, rhs, out=out)
            return
        odd = (rhs & 1).astype(bool)
        small = np.where(lhs == 1, 1, np.where(lhs == -1, np.where(odd, -1, 1), 0))
        np.power(lhs, np.where(negative, 0, rhs), out=out)
        np.copyto(out, small, where=negative, casting="unsafe")


def _specialize_power(attrs: dict, constant: tuple):
    """Per instruction (or fused step) whose exponent is a constant: the fast power
    (:data:`_FAST_POWERS`) chosen once for that exponent array and the base's dtype, where
    :func:`power` looks the exponent up on every call (~1 us of a square's ~2 on a small tensor:
    silero's magnitude, GELU's cube); the same function, so the same bits. Anything else, and an
    exponent that is no constant (a register's array may hold new values), goes to :func:`power`."""
    if attrs or not (len(constant) > 1 and constant[1]):
        return lambda lhs, rhs, *, out, workspace=None: power(lhs, rhs, out=out, **attrs)
    kept = [None, None, None]       # the exponent array, the dtype, the fast power

    def call(lhs, rhs, *, out, workspace=None):
        if rhs is kept[0] and lhs.dtype == kept[1] and out.dtype == kept[1]:
            with quiet():
                kept[2](lhs, out)
            return
        dtype = out.dtype
        exponent = _scalar_exponent(rhs) if dtype.kind == "f" and dtype.itemsize >= 4 and lhs.dtype == dtype \
            else None
        if exponent is None:
            power(lhs, rhs, out=out)
            return
        kept[:] = rhs, dtype, _FAST_POWERS[exponent]
        with quiet():
            kept[2](lhs, out)
    return call


power.specialize_attrs = _specialize_power


# ---------------------------------------------------------------- clip, where

def _bound(value, dtype: np.dtype, lower: bool):
    """A float clip bound as a value of ``dtype``: integers round inward and
    saturate to the dtype's range, so the comparison stays exact."""
    if value is None or dtype.kind not in "iu":
        return value
    if math.isnan(value):
        return None
    info = np.iinfo(dtype)
    if math.isinf(value):
        return None if (value < 0) == lower else (info.max if lower else info.min)
    v = math.ceil(value) if lower else math.floor(value)
    return dtype.type(min(max(v, info.min), info.max))


_CLIP_FLOATS = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64))


@register_kernel("clip")
def clip(x, *, out, min, max, saturate_nan):  # noqa: A002 (the op's attribute names)
    """Clamp to ``[min, max]``; ``None`` leaves a side open; ``min > max``
    gives ``max`` everywhere (ONNX Clip). A NaN stays NaN unless
    ``saturate_nan``, which makes it ``min`` (``max`` when ``min`` is None),
    as fmax/fmin and onnxruntime's quantizers do."""
    lo, hi = _bound(min, out.dtype, True), _bound(max, out.dtype, False)
    if lo is None and hi is None:
        np.copyto(out, x)
        return
    if out.dtype in _CLIP_FLOATS and x.dtype == out.dtype:
        # one pass (np.maximum with a scalar takes numpy's slow path, ~3x a clip)
        kind = out.dtype.type
        CLIP(x, kind(-np.inf if lo is None else lo), kind(np.inf if hi is None else hi), out=out)
    else:
        if lo is not None:
            np.maximum(x, lo, out=out, casting="unsafe")
            x = out
        if hi is not None:
            np.minimum(x, hi, out=out, casting="unsafe")
    if saturate_nan and out.dtype.kind == "f":
        _saturate_nan(out, hi if lo is None else lo)


def _specialize_clip(attrs: dict, constant: tuple):
    """Per instruction: a float clip of an operand of ``out``'s dtype with its bounds made once
    per dtype (the kernel works them out from the attributes every call; a quantizer's chain
    has one per quantized tensor); anything else goes to :func:`clip`."""
    low, high, saturate_nan = attrs["min"], attrs["max"], attrs["saturate_nan"]
    if set(attrs) != {"min", "max", "saturate_nan"} or (low is None and high is None):
        return lambda x, *, out, workspace=None: clip(x, out=out, **attrs)
    bounds: dict = {}
    ndarray, floats, reduce_min, isnan = np.ndarray, _CLIP_FLOATS, np.minimum.reduce, math.isnan

    def call(x, *, out, workspace=None):
        dtype = out.dtype
        if x.__class__ is not ndarray or x.dtype != dtype or dtype not in floats:
            clip(x, out=out, **attrs)
            return
        b = bounds.get(dtype)
        if b is None:       # read-only 0-d arrays: a ufunc reads them at half a numpy scalar's cost
            b = bounds[dtype] = (scalar_array(-np.inf if low is None else low, dtype),
                                 scalar_array(np.inf if high is None else high, dtype), high if low is None else low)
        CLIP(x, b[0], b[1], out=out)
        if saturate_nan and out.size and isnan(reduce_min(out, None)):
            np.copyto(out, b[2], where=np.isnan(out), casting="unsafe")
    return call


clip.specialize_attrs = _specialize_clip


def _saturate_nan(out: np.ndarray, bound) -> None:
    """NaN -> ``bound`` in ``out``: one read-only reduction finds whether
    there is any (a clipped NaN-free array has a finite minimum); only then
    a second pass replaces them. About half a clip's time, where np.fmax
    and np.fmin (no SIMD loops with a scalar) cost 5-7 clips."""
    if out.size and math.isnan(np.minimum.reduce(out, None)):
        np.copyto(out, bound, where=np.isnan(out), casting="unsafe")


@register_kernel("where")
def where(condition, x, y, *, out):
    """``x`` where ``condition`` else ``y``, all three broadcast to ``out``."""
    if np.may_share_memory(out, x):      # out may reuse x's memory (in-place plan)
        np.copyto(out, x)
        np.copyto(out, y, where=np.logical_not(condition))
        return
    np.copyto(out, y)
    np.copyto(out, x, where=condition)

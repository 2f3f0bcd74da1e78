"""Activation kernels (the ``nn.*`` elementwise ops).

Each loads the input into ``out`` (or into a float32 buffer for float16 and
bfloat16, rounded once at the end) and transforms it in place, so a kernel
makes at most one extra temporary.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ...errors import UnsupportedOpError
from ..fpstate import quiet
from ._constants import ONE, ZERO, per_float_dtype
from ._gelu_quad32 import gelu_quad32_into
from ._gelu_table import GELU64_MAX_SIZE, gelu_table_into
from ._math import (CLIP, commit, erf64, is_low_float, load,
                    scalar_array, separate)
from ._registry import register_kernel
from ._workspace import Scratch

#: a temporary of at least this many bytes (an in-place activation's) comes from the thread's
#: workspace (:class:`._workspace.Scratch`): glibc maps a fresh block that large, or gives it back
#: from the top of its heap when a run frees a few, so its pages fault in again on every call (a
#: conv's HardSwish on 8 x 224 x 224 in torch.cond's branch: 0.13 ms alone, 0.7 ms in a run whose
#: output is a new array too). Smaller ones are allocated: the workspace's bookkeeping costs ~3 us
#: a call, 5-30% of a SiLU or HardSwish of 100-600 KB on a warm heap (measured, 1 thread)
SCRATCH_TEMPORARY_BYTES = 1 << 20


def _scalar_safe(fn):
    """Run a kernel on a 0-d tensor as on a 1-element one: numpy arithmetic on
    0-d arrays gives scalars, which cannot be written into in place."""
    @functools.wraps(fn)
    def kernel(x, *args, out, **attrs):
        if x.ndim == 0:
            return fn(x.reshape(1), *args, out=out.reshape(1), **attrs)
        return fn(x, *args, out=out, **attrs)
    return kernel


@register_kernel("nn.relu")
def relu(x, *, out):
    """``max(x, 0)``; NaN stays NaN. A 0-d tensor runs as a 1-element one (see _scalar_safe)."""
    if x.ndim == 0:
        x, out = x.reshape(1), out.reshape(1)
    bounds = _RELU_BOUNDS.get(out.dtype)
    if bounds is None:
        kind = out.dtype.type
        bounds = _RELU_BOUNDS[out.dtype] = (scalar_array(kind(0), out.dtype),
                                            scalar_array(kind(np.inf), out.dtype) if out.dtype.kind == "f" else None)
    if bounds[1] is not None and x.dtype == out.dtype:
        CLIP(x, bounds[0], bounds[1], out=out)   # ~3x np.maximum's speed
        return
    np.maximum(x, bounds[0], out=out)


#: per output dtype: (its zero, its inf or None) as read-only 0-d arrays (see ._constants), made once
_RELU_BOUNDS: dict = {}


@register_kernel("nn.leakyrelu")
@_scalar_safe
def leakyrelu(x, *, out, alpha):
    """``x if x >= 0 else alpha * x``."""
    buf = load(x, out)
    np.multiply(buf, alpha, out=buf, where=buf < 0)
    commit(buf, out)


@register_kernel("nn.prelu")
@_scalar_safe
def prelu(x, slope, *, out):
    """``x if x >= 0 else slope * x``; ``slope`` broadcasts to ``x``."""
    (x,) = separate(out, x)
    np.multiply(x, slope, out=out)
    np.copyto(out, x, where=x >= 0)


def _exp_minus_one_of_negative_part(buf: np.ndarray) -> np.ndarray:
    """``expm1(min(buf, 0))``, a new array (the positive side never overflows)."""
    neg = np.minimum(buf, 0)
    np.expm1(neg, out=neg)
    return neg


@register_kernel("nn.elu")
@_scalar_safe
def elu(x, *, out, alpha):
    """``x if x > 0 else alpha * (exp(x) - 1)``."""
    buf = load(x, out)
    neg = _exp_minus_one_of_negative_part(buf)
    neg *= alpha
    np.copyto(buf, neg, where=~(buf > 0))        # NaN takes the (NaN) negative branch
    commit(buf, out)


@register_kernel("nn.selu")
@_scalar_safe
def selu(x, *, out, alpha, gamma):
    """``gamma * (x if x > 0 else alpha * (exp(x) - 1))``."""
    buf = load(x, out)
    neg = _exp_minus_one_of_negative_part(buf)
    neg *= alpha
    np.copyto(buf, neg, where=~(buf > 0))
    buf *= gamma
    commit(buf, out)


def _softplus_into(buf: np.ndarray) -> None:
    """``buf = log(1 + exp(buf))`` in place, without overflow:
    ``max(x, 0) + log1p(exp(-|x|))``."""
    t = np.abs(buf)
    np.negative(t, out=t)
    np.exp(t, out=t)
    np.log1p(t, out=t)
    np.maximum(buf, 0, out=buf)
    buf += t


@register_kernel("nn.softplus")
@_scalar_safe
def softplus(x, *, out):
    """``log(1 + exp(x))``."""
    buf = load(x, out)
    _softplus_into(buf)
    commit(buf, out)


@register_kernel("nn.softsign")
@_scalar_safe
def softsign(x, *, out):
    """``x / (1 + |x|)``."""
    buf = load(x, out)
    denom = np.abs(buf)
    denom += 1
    buf /= denom
    commit(buf, out)


@register_kernel("nn.mish")
@_scalar_safe
def mish(x, *, out):
    """``x * tanh(softplus(x))``."""
    buf = load(x, out)
    t = buf.copy()
    _softplus_into(t)
    np.tanh(t, out=t)
    buf *= t
    commit(buf, out)


@register_kernel("nn.silu")
@_scalar_safe
def silu(x, *, out):
    """``x * sigmoid(x)``."""
    buf = load(x, out)
    silu_in_place(buf)
    commit(buf, out)


#: the dtypes the per-instruction activations compute in directly
_PLAIN_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))


def _specialize_silu(attrs: dict, constant: tuple):
    """Per instruction (a fused chain's step too): a float32/float64 ``x`` of ``out``'s shape and
    dtype runs the kernel's arithmetic from ``x`` into ``out`` (``s = exp(-x) + 1``, ``out = x / s``:
    the quotient the kernel computes after copying ``x`` into ``out``) without the wrapper, the copy
    and the keywords (~0.8 us of a SiLU of a few hundred values); anything else the kernel."""
    negative, exp, add, divide = np.negative, np.exp, np.add, np.divide

    def call(x, *, out, workspace=None):
        dtype = out.dtype
        if x.dtype is dtype and dtype in _PLAIN_FLOATS and x.ndim and x.shape == out.shape:
            s = negative(x)
            with quiet():
                exp(s, s)
            add(s, ONE[dtype], s)
            divide(x, s, out)
        else:
            silu(x, out=out)
    return call


silu.specialize_attrs = _specialize_silu


def silu_in_place(buf: np.ndarray) -> None:
    """``buf = buf / (1 + exp(-buf))`` for a float32/float64 ``buf``: the kernel's arithmetic,
    which a conv's runner calls as its activation without the kernel's layers around it."""
    if buf.nbytes < SCRATCH_TEMPORARY_BYTES:
        _silu_by(buf, np.negative(buf))
        return
    with Scratch([(buf.shape, buf.dtype)]) as (s,):
        _silu_by(buf, np.negative(buf, out=s))


def _silu_by(buf: np.ndarray, s: np.ndarray) -> None:
    """``buf /= 1 + exp(s)`` with ``s`` holding ``-buf`` (a temporary, overwritten)."""
    with quiet():
        np.exp(s, out=s)
    np.add(s, ONE.get(s.dtype, 1), out=s)      # (a 0-d one: see ._constants)
    buf /= s


@register_kernel("nn.hard_sigmoid")
@_scalar_safe
def hard_sigmoid(x, *, out, alpha, beta):
    """``max(0, min(1, alpha * x + beta))``."""
    if _same_float(x, out):     # in ``out``, three ufunc calls (np.clip's Python layer cost more)
        kind = out.dtype.type
        hard_sigmoid_into(x, out, kind(alpha), kind(beta))
        return
    buf = load(x, out)
    buf *= alpha
    buf += beta
    CLIP(buf, ZERO.get(buf.dtype, 0), ONE.get(buf.dtype, 1), out=buf)
    commit(buf, out)


@register_kernel("nn.hard_swish")
@_scalar_safe
def hard_swish(x, *, out):
    """``x * max(0, min(1, x / 6 + 1 / 2))`` (ONNX HardSwish)."""
    if _same_float(x, out):
        hard_swish_into(x, out)
        return
    buf = load(x, out)
    gate = buf * (1 / 6)
    gate += 0.5
    CLIP(gate, ZERO.get(gate.dtype, 0), ONE.get(gate.dtype, 1), out=gate)
    buf *= gate
    commit(buf, out)


def hard_sigmoid_into(x: np.ndarray, out: np.ndarray, alpha, beta) -> None:
    """HardSigmoid of float32/float64 ``x`` into ``out`` of its shape and dtype (may be ``x``),
    ``alpha`` and ``beta`` scalars or 0-d arrays of that dtype: the kernel's three ufunc calls,
    which a conv's runner also calls as its activation without the kernel's layers around them."""
    np.multiply(x, alpha, out=out)
    np.add(out, beta, out=out)
    CLIP(out, ZERO[out.dtype], ONE[out.dtype], out=out)


def hard_swish_into(x: np.ndarray, out: np.ndarray) -> None:
    """HardSwish of float32/float64 ``x`` into ``out`` of its shape and dtype, the gate in a
    temporary (``x`` may be ``out``: a fused conv's in-place call); as :func:`hard_sigmoid_into`,
    also a conv runner's activation."""
    dtype = out.dtype
    if out.nbytes < SCRATCH_TEMPORARY_BYTES:
        _hard_swish_by(x, out, np.multiply(x, _SIXTH[dtype]))
        return
    with Scratch([(out.shape, dtype)]) as (gate,):
        _hard_swish_by(x, out, np.multiply(x, _SIXTH[dtype], out=gate))


def _hard_swish_by(x: np.ndarray, out: np.ndarray, gate: np.ndarray) -> None:
    """``out = x * clip(gate + 1/2, 0, 1)`` with ``gate`` holding ``x / 6`` (overwritten)."""
    dtype = out.dtype
    np.add(gate, _HALF[dtype], out=gate)
    CLIP(gate, ZERO[dtype], ONE[dtype], out=gate)
    np.multiply(x, gate, out=out)


#: HardSwish's constants, as the kernel rounds them to the data's dtype (read-only 0-d arrays)
_SIXTH, _HALF = per_float_dtype(1 / 6), per_float_dtype(0.5)


def hard_swish_in_place_fn(dtype):
    """``f(buf)``: :func:`hard_swish_into` of a float32/float64 ``buf`` of ``dtype`` onto itself, its
    constants and ufuncs bound once (a conv runner's activation: a frame and four look-ups less a
    call), the same calls."""
    dtype = np.dtype(dtype)
    sixth, half, zero, one = _SIXTH[dtype], _HALF[dtype], ZERO[dtype], ONE[dtype]
    multiply, add = np.multiply, np.add

    def hard_swish_in_place(buf):
        if buf.nbytes >= SCRATCH_TEMPORARY_BYTES:
            hard_swish_into(buf, buf)
            return
        gate = multiply(buf, sixth)
        add(gate, half, gate)
        CLIP(gate, zero, one, gate)
        multiply(buf, gate, buf)
    return hard_swish_in_place


def hard_swish6_in_place(buf: np.ndarray) -> None:
    """Six times HardSwish of ``buf`` in place, ``buf * clip(buf + 3, 0, 6)``: the fused activation
    ``"hard_swish6"`` of a conv whose consumers took the 1/6 into their weights
    (``passes/fold_activation_scales.py``), three passes where HardSwish makes four. float16 and
    bfloat16 computed in float32, rounded once."""
    if buf.ndim == 0:
        buf = buf.reshape(1)
    work = buf if buf.dtype.type in (np.float32, np.float64) else load(buf, buf)
    _hard_swish6_of(work)
    commit(work, buf)


def _hard_swish6_of(work: np.ndarray) -> None:
    """``work *= clip(work + 3, 0, 6)`` (float32/float64), the gate a temporary."""
    dtype = work.dtype
    if work.nbytes < SCRATCH_TEMPORARY_BYTES:
        gate = np.add(work, _THREE[dtype])
        CLIP(gate, ZERO[dtype], _SIX[dtype], out=gate)
        np.multiply(work, gate, out=work)
        return
    with Scratch([(work.shape, dtype)]) as (gate,):
        np.add(work, _THREE[dtype], out=gate)
        CLIP(gate, ZERO[dtype], _SIX[dtype], out=gate)
        np.multiply(work, gate, out=work)


#: HardSwish6's constants per float dtype (read-only 0-d arrays)
_THREE, _SIX = per_float_dtype(3), per_float_dtype(6)


def hard_swish6_in_place_fn(dtype):
    """``f(buf)``: :func:`hard_swish6_in_place` of a float32/float64 ``buf`` of ``dtype``, its
    constants and ufuncs bound once (a conv runner's activation), the same calls."""
    dtype = np.dtype(dtype)
    three, zero, six = _THREE[dtype], ZERO[dtype], _SIX[dtype]
    multiply, add = np.multiply, np.add

    def hard_swish6(buf):
        if buf.nbytes >= SCRATCH_TEMPORARY_BYTES:
            _hard_swish6_of(buf)
            return
        gate = add(buf, three)
        CLIP(gate, zero, six, gate)
        multiply(buf, gate, buf)
    return hard_swish6


def hard_sigmoid_in_place_fn(dtype, alpha, beta):
    """``f(buf)``: :func:`hard_sigmoid_into` of a float32/float64 ``buf`` of ``dtype`` onto itself
    (``alpha``, ``beta`` rounded to it), bound once as :func:`hard_swish_in_place_fn`."""
    dtype = np.dtype(dtype)
    alpha, beta = scalar_array(alpha, dtype), scalar_array(beta, dtype)
    zero, one, multiply, add = ZERO[dtype], ONE[dtype], np.multiply, np.add

    def hard_sigmoid_in_place(buf):
        multiply(buf, alpha, buf)
        add(buf, beta, buf)
        CLIP(buf, zero, one, buf)
    return hard_sigmoid_in_place


def _same_float(x: np.ndarray, out: np.ndarray) -> bool:
    """Whether ``x`` is a float32/float64 array of ``out``'s shape and dtype (computed in place)."""
    return x.dtype == out.dtype and out.dtype.type in (np.float32, np.float64) and x.shape == out.shape


_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)


def gelu_in_place(buf: np.ndarray) -> None:
    """Exact GELU of ``buf`` in place: a float32 array goes straight to the path the kernel takes
    for it (:func:`gelu_quad32_into`), without the kernel's wrapper and checks (~0.6 us: a fused
    gemm's or conv's activation); anything else through the kernel. The kernel's results, bit for bit."""
    if buf.dtype == np.float32 and buf.ndim:
        gelu_quad32_into(buf, buf)
    else:
        gelu(buf, out=buf, approximate="none")



@register_kernel("nn.gelu")
@_scalar_safe
def gelu(x, *, out, approximate):
    """``x * Phi(x)``: ``0.5 * x * (1 + erf(x / sqrt(2)))``, or with
    ``approximate="tanh"`` ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))``."""
    if approximate == "none" and (out.dtype == np.float32 or is_low_float(out.dtype)):
        if x.dtype == out.dtype == np.float32 and x.shape == out.shape:
            gelu_quad32_into(x, out)    # every size (its contract: docs/design-notes.md); out may be x
            return
        if out.size <= GELU64_MAX_SIZE and x.shape == out.shape and x.dtype.kind == "f":
            gelu_table_into(x, out)   # float16/bfloat16: float64, rounded once (correctly)
            return
        buf = load(x, out)
        gelu_quad32_into(buf, buf)
        commit(buf, out)
        return
    if approximate == "none":
        # float64: erf is evaluated in float64; finishing there rounds once.
        x64 = np.asarray(x, dtype=np.float64)
        y = erf64(x64 * (1 / math.sqrt(2)))
        y += 1
        y *= x64
        y *= 0.5
        np.copyto(out, y, casting="unsafe")
        return
    if approximate != "tanh":
        raise UnsupportedOpError(f"nn.gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    buf = load(x, out)
    inner = np.square(buf)
    inner *= 0.044715 * _SQRT_2_OVER_PI
    inner += _SQRT_2_OVER_PI
    inner *= buf
    np.tanh(inner, out=inner)
    inner += 1
    buf *= 0.5
    buf *= inner
    commit(buf, out)


def _specialize_gelu(attrs: dict, constant: tuple):
    """``specialize_attrs`` of ``nn.gelu``: :func:`.gelu_per_output.specialize_gelu`."""
    from .gelu_per_output import specialize_gelu       # (it imports this module)
    return specialize_gelu(attrs, constant)


gelu.specialize_attrs = _specialize_gelu


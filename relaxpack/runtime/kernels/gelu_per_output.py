"""A fused kernel's exact GELU, bound per instruction to the output it runs on.

A conv's or gemm's GELU (``activation="gelu"``, :func:`.fused.activation_fn`) runs in place on the
kernel's ``out``, an arena view that is the same object run after run. Of a small float32 GELU's
~8 us at 960 values (Whisper's front end, a transformer's MLP at a few tokens) ~1.6 us were the
Python around its numpy calls: the activation wrapper, the dtype and size checks, the table and
buffer look-ups, the reshapes. :func:`gelu_act` keeps :func:`._gelu_quad32.gelu_quad32_bound` for
the last such ``out`` (float32, C-contiguous, one chunk: at most ``CHUNK`` values) and calls it
straight; any other array takes :func:`.activation.gelu_in_place`. The same calls: bit for bit.

:func:`specialize_gelu` is ``nn.gelu``'s ``specialize_attrs`` (an instruction's GELU, or a fused
chain's GELU step: a dynamically quantized MLP's ``gemm * scale -> gelu``): the exact form keeps the
bound GELU for the last ``x`` / ``out`` pair of arena views (~2 us of ~8 at 320 values), the tanh
form its calls with float 0-d constants and a kept buffer (no copy of ``x``, no fresh temporary).
"""

from __future__ import annotations

import math

import numpy as np

from ._gelu_quad32 import CHUNK, gelu_quad32_bound
from ._math import scalar_array
from .activation import gelu, gelu_in_place


def gelu_act():
    """``act(out)``: the exact GELU of ``out`` in place (nothing for an empty one), one per instruction."""
    seen = [None, None]     # the last out that is a view (an arena's), its bound GELU

    def act(out: np.ndarray) -> None:
        if out is seen[0]:
            seen[1]()
        elif out.size == 0:
            return
        elif (out.dtype == np.float32 and out.base is not None and out.flags.c_contiguous
              and out.size <= CHUNK):
            seen[:] = out, gelu_quad32_bound(out, out)   # (an array owning its memory is not held)
            seen[1]()
        else:
            gelu_in_place(out)
    return act


def specialize_gelu(attrs: dict, constant: tuple):
    """``call(x, *, out, workspace=None)``: ``nn.gelu`` with these attributes for one instruction
    (see the module docstring); anything but the arrays each form handles goes to the kernel."""
    approximate = attrs.get("approximate")
    if set(attrs) != {"approximate"} or approximate not in ("none", "tanh"):
        return lambda x, *, out, workspace=None: gelu(x, out=out, **attrs)
    return _exact_gelu_call() if approximate == "none" else _tanh_gelu_call()


def _exact_gelu_call():
    """The exact GELU: a float32 ``x`` and ``out`` (arena views, C-contiguous, one shape, one chunk)
    run :func:`gelu_quad32_bound` kept for the last such pair, the kernel's float32 calls."""
    seen = [None, None, None]       # the last x and out (views), their bound GELU

    def call(x, *, out, workspace=None):
        if x is seen[0] and out is seen[1]:
            seen[2]()
        elif (x.__class__ is np.ndarray and out.__class__ is np.ndarray and x.dtype == np.float32
              and out.dtype == np.float32 and x.shape == out.shape and 0 < out.size <= CHUNK
              and x.base is not None and out.base is not None
              and x.flags.c_contiguous and out.flags.c_contiguous):
            seen[:] = x, out, gelu_quad32_bound(x, out)     # (arrays owning their memory are not held)
            seen[2]()
        else:
            gelu(x, out=out, approximate="none")
    return call


#: the tanh form's constants per dtype as the kernel's Python floats convert to it (0-d arrays)
_TANH_CONSTANTS = {np.dtype(t): tuple(scalar_array(c, t) for c in (
    0.044715 * math.sqrt(2 / math.pi), math.sqrt(2 / math.pi), 1.0, 0.5)) for t in (np.float32, np.float64)}


def _tanh_gelu_call():
    """The tanh GELU (GPT-2's) of a float32/float64 ``x`` into ``out`` of its shape and dtype: the
    kernel's ufuncs on ``x`` itself (it copies ``x`` into ``out`` first) into a buffer kept per
    instruction and shape, constants as 0-d arrays (the values the kernel's Python floats convert
    to): 8 calls for the kernel's 9, bit for bit."""
    kept = [None]

    def call(x, *, out, workspace=None):
        constants = _TANH_CONSTANTS.get(out.dtype)
        if constants is None or x.dtype != out.dtype or x.shape != out.shape or not x.ndim \
                or x.__class__ is not np.ndarray or out.__class__ is not np.ndarray:
            gelu(x, out=out, approximate="tanh")
            return
        inner = kept[0]
        if inner is None or inner.shape != x.shape or inner.dtype != x.dtype:
            inner = kept[0] = np.empty(x.shape, x.dtype)
        cubic, linear, one, half = constants
        np.square(x, inner)
        np.multiply(inner, cubic, inner)
        np.add(inner, linear, inner)
        np.multiply(inner, x, inner)
        np.tanh(inner, inner)
        np.add(inner, one, inner)
        np.multiply(x, half, out)           # read after inner's last read of x: out may be x
        np.multiply(out, inner, out)
    return call

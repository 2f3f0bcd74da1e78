"""``nn.squeeze_excite``: an SE block (global average pool, two 1x1 convs, the scaling multiply).

MobileNetV3 and EfficientNet run one after most depthwise convs; unfused it is four
instructions of 2-5 us each on the zoo's small images, mostly Python around ten small numpy
calls. The kernel makes the same calls, in the same order, as the four kernels it replaces
(the pool's sum and division, each conv's GEMM of its one pixel per image, bias and in-place
activation as :mod:`.conv_small_nhwc`'s pointwise runner, the broadcasting multiply), so its
result is theirs bit for bit; per instruction it keeps its three small intermediates and its
views of an arena's input and output (the same objects run after run). With bound weights
(the fused op's: constants) its biases are tiled to the batch (a same-shape add: numpy's
broadcast of a bias row cost 0.4 us more a call), its products are ``np.dot`` (the same sgemm,
or for one image gemv, as matmul's, without its gufunc dispatch) and a SiLU or sigmoid conv
multiplies by the negated weights (:mod:`.negated_activation`: one call less), all bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

from ._registry import register_kernel
from .conv_small import _activation
from .negated_activation import negatable, negated, of_negated
from .nn import global_avg_pool
from .reduce import mean_runner


def _runner(data, w1, b1, w2, b2, out, act1, act2, data_layout: str, bound: bool = False):
    """``run(data, out)`` for operands of these shapes and dtypes (the weights bound as they are;
    ``bound``: constants, which it may copy: see the module docstring)."""
    channels_last = data_layout == "NHWC"
    batch, channels = data.shape[0], data.shape[-1 if channels_last else 1]
    dtype = out.dtype
    keep = (1,) * (data.ndim - 2)
    pooled = np.empty((batch, *keep, channels) if channels_last else (batch, channels, *keep), dtype)
    hidden = np.empty((batch, w1.shape[1]), dtype)
    gate = np.empty((batch, channels), dtype)
    gate_b = gate.reshape(pooled.shape)
    rows = pooled.reshape(batch, channels)
    spatial = tuple(range(1, data.ndim - 1)) if channels_last else tuple(range(2, data.ndim))
    f1, f2 = _activation(act1, dtype), _activation(act2, dtype)
    matmul, dot, add, multiply = np.matmul, np.dot, np.add, np.multiply
    by_dot = False      # bound weights: the products by np.dot (matmul's sgemm / gemv call)
    if bound and out.size:
        (w1, b1, f1), (w2, b2, f2) = (_bound_fc(w1, b1, act1, f1, batch, dtype),
                                      _bound_fc(w2, b2, act2, f2, batch, dtype))
        by_dot = min(w1.shape) > 1 and min(w2.shape) > 1
    seen = [None, None]         # the last data that is a view (an arena's), its pool's runner
    scale = _scaler(data, gate_b, channels_last)

    def run(x, out):
        if x is seen[0]:
            seen[1]()
        else:
            mean = mean_runner(x, pooled, spatial)
            if mean is None:
                global_avg_pool(x, out=pooled, data_layout=data_layout)
            else:
                if x.base is not None:      # (an array owning its memory is not held past the call)
                    seen[0], seen[1] = x, mean
                mean()
        if by_dot:
            dot(rows, w1, hidden)
        else:
            matmul(rows, w1, out=hidden)
        add(hidden, b1, out=hidden)
        if f1 is not None:
            f1(hidden)
        if by_dot:
            dot(hidden, w2, gate)
        else:
            matmul(hidden, w2, out=gate)
        add(gate, b2, out=gate)
        if f2 is not None:
            f2(gate)
        if scale is None:
            multiply(x, gate_b, out=out)
        else:
            scale(x, out)
    return run


def _bound_fc(w, b, act, f, batch: int, dtype) -> tuple:
    """``(w, b, f)`` of a bound 1-pixel conv: negated for a float32/float64 SiLU or sigmoid (``f``
    then reads its input negated), the bias tiled to ``batch`` rows."""
    if negatable(act, w, b) and w.dtype == b.dtype == dtype:
        w, b = negated(w, b)
        f = of_negated(act, dtype)
    return w, np.ascontiguousarray(np.broadcast_to(b, (batch, b.shape[-1]))), f


#: a channels-last SE block multiplies by its gate tiled along a row from this many pixels an
#: image on (1 thread: 31x48x16 7.3 -> 3.9 us, 16x24x16-72 0.76-0.85x the time; below ~100
#: pixels the tiling copy costs more than the broadcast's per-pixel loops save)
TILED_GATE_MIN_PIXELS = 128


def _scaler(data, gate_b, channels_last: bool):
    """``scale(x, out)``: ``out = x * gate`` for a channels-last ``data`` of at least
    :data:`TILED_GATE_MIN_PIXELS` pixels an image, by rows of ``width * C`` values against the
    gate copied along a row (numpy's broadcast runs a loop of C values per pixel): the same
    products. None: the broadcasting multiply does it."""
    if not channels_last or data.ndim < 3 or math.prod(data.shape[1:-1]) < TILED_GATE_MIN_PIXELS:
        return None
    batch, width, channels = data.shape[0], data.shape[-2], data.shape[-1]
    rows = (batch, math.prod(data.shape[1:-2]), width * channels)
    tiled = np.empty((batch, 1, width, channels), data.dtype)
    tiled_rows = tiled.reshape(batch, 1, width * channels)
    gate = gate_b.reshape(batch, 1, 1, channels)
    copy, multiply = np.copyto, np.multiply
    seen = [None, None, None, None]     # the last x and out that are views (an arena's), their rows

    def scale(x, out):
        if x is seen[0] and out is seen[1]:
            x_rows, out_rows = seen[2], seen[3]
        else:
            x_rows, out_rows = x.reshape(rows), out.reshape(rows)
            if x.base is not None and out.base is not None:
                seen[:] = x, out, x_rows, out_rows
        copy(tiled, gate)
        multiply(x_rows, tiled_rows, out=out_rows)
    return scale


@register_kernel("nn.squeeze_excite")
def squeeze_excite(data, w1, b1, w2, b2, *, out, act1, act2, data_layout):
    """``data * act2(act1(mean(data over spatial dims) @ w1 + b1) @ w2 + b2)``, the gate
    broadcast over the spatial dims (``data_layout`` NHWC or NCHW; float32/float64)."""
    _runner(data, w1, b1, w2, b2, out, act1, act2, data_layout)(data, out)


def _specialize(attrs: dict, constant: tuple):
    """Per instruction: the runner of the last call's shapes, dtype and weights."""
    state = [None, None]        # key, runner
    bound = len(constant) > 4 and all(constant[1:5])
    last = [None] * 7           # the last data, out (views: an arena's), weights and their runner

    def call(data, w1, b1, w2, b2, *, out, workspace=None):
        if data is last[0] and out is last[1] and w1 is last[2] and b1 is last[3] and w2 is last[4] \
                and b2 is last[5]:
            last[6](data, out)      # the same views and weights as the last call: its runner, unchecked
            return
        key = state[0]
        if not (key is not None and w1 is key[1] and b1 is key[2] and w2 is key[3] and b2 is key[4]
                and data.shape == key[0] and data.dtype == key[5] and out.dtype == key[5]):
            state[1] = _runner(data, w1, b1, w2, b2, out, attrs["act1"], attrs["act2"], attrs["data_layout"],
                               bound)
            state[0] = (data.shape, w1, b1, w2, b2, data.dtype)
        if data.base is not None and out.base is not None:     # (views never change shape)
            last[:] = data, out, w1, b1, w2, b2, state[1]
        state[1](data, out)
    return call


squeeze_excite.specialize_attrs = _specialize

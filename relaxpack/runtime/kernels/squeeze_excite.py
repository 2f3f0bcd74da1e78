"""``nn.squeeze_excite``: an SE block (global average pool, two 1x1 convs, the scaling multiply).

MobileNetV3 and EfficientNet run one after most depthwise convs; unfused it is four
instructions of 2-5 us each on the zoo's small images, mostly Python around ten small numpy
calls. The kernel makes the same calls, in the same order, as the four kernels it replaces
(the pool's sum and division, each conv's GEMM of its one pixel per image, bias and in-place
activation as :mod:`.conv_small_nhwc`'s pointwise runner, the broadcasting multiply), so its
result is theirs bit for bit; per instruction it keeps its three small intermediates and its
views of an arena's input and output (the same objects run after run).
"""

from __future__ import annotations

import numpy as np

from ._registry import register_kernel
from .conv_small import _activation
from .nn import global_avg_pool
from .reduce import mean_runner


def _runner(data, w1, b1, w2, b2, out, act1, act2, data_layout: str):
    """``run(data, out)`` for operands of these shapes and dtypes (the weights bound as they are)."""
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
    matmul, add, multiply = np.matmul, np.add, np.multiply
    seen = [None, None]         # the last data that is a view (an arena's), its pool's runner

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
        matmul(rows, w1, out=hidden)
        add(hidden, b1, out=hidden)
        if f1 is not None:
            f1(hidden)
        matmul(hidden, w2, out=gate)
        add(gate, b2, out=gate)
        if f2 is not None:
            f2(gate)
        multiply(x, gate_b, out=out)
    return run


@register_kernel("nn.squeeze_excite")
def squeeze_excite(data, w1, b1, w2, b2, *, out, act1, act2, data_layout):
    """``data * act2(act1(mean(data over spatial dims) @ w1 + b1) @ w2 + b2)``, the gate
    broadcast over the spatial dims (``data_layout`` NHWC or NCHW; float32/float64)."""
    _runner(data, w1, b1, w2, b2, out, act1, act2, data_layout)(data, out)


def _specialize(attrs: dict, constant: tuple):
    """Per instruction: the runner of the last call's shapes, dtype and weights."""
    state = [None, None]        # key, runner

    def call(data, w1, b1, w2, b2, *, out, workspace=None):
        key = state[0]
        if not (key is not None and w1 is key[1] and b1 is key[2] and w2 is key[3] and b2 is key[4]
                and data.shape == key[0] and data.dtype == key[5] and out.dtype == key[5]):
            state[1] = _runner(data, w1, b1, w2, b2, out, attrs["act1"], attrs["act2"], attrs["data_layout"])
            state[0] = (data.shape, w1, b1, w2, b2, data.dtype)
        state[1](data, out)
    return call


squeeze_excite.specialize_attrs = _specialize

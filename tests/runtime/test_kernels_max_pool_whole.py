"""A max pool whose every window holds the whole map (YOLO's SPPF, 5x5 stride 1 pad 2, on a 2x3
map) is one reduction broadcast (nn._whole_axis): the windowed max of a padded reference at each
dtype, channels first and last, with NaNs and -inf, at the sizes where it switches off (a map one
cell wider than the windows reach, stride 2, dilation 2) and through the per-instruction runner."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import get_kernel
from relaxpack.runtime.kernels.nn import _max_pool_calls, _whole_axis

MAX_POOL = get_kernel("nn.max_pool").fn


def reference(x, pool, strides, padding, dilation):
    """The max over each window of ``x`` padded with -inf (NaN wins, as numpy's max)."""
    (kh, kw), (sh, sw), (t, l, b, r), (dh, dw) = pool, strides, padding, dilation
    wide = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (t, b), (l, r)), constant_values=-np.inf)
    oh = (wide.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (wide.shape[3] - dw * (kw - 1) - 1) // sw + 1
    out = np.empty(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            win = wide[:, :, i * sh:i * sh + dh * (kh - 1) + 1:dh, j * sw:j * sw + dw * (kw - 1) + 1:dw]
            out[:, :, i, j] = np.max(win, axis=(2, 3))
    return out.astype(x.dtype)


def data(shape, dtype, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype(dtype)
    if x.size > 8:
        x.flat[5] = np.nan
        x.flat[2::9] = -np.inf
    return x


CASES = [  # (N, C, H, W), pool, strides, padding, dilation, whether every window holds the map
    ((1, 32, 2, 3), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), True),      # SPPF on YOLO's smallest map
    ((3, 4, 3, 3), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), True),       # the widest map it takes
    ((2, 3, 1, 1), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), True),
    ((1, 5, 3, 4), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), False),      # one column out of reach
    ((3, 4, 1, 5), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), False),      # whole along H only
    ((1, 4, 2, 3), (5, 5), (2, 2), (2, 2, 2, 2), (1, 1), True),       # strided: windows still whole
    ((1, 4, 2, 3), (3, 3), (1, 1), (2, 2, 2, 2), (2, 2), False),      # dilated: never taken
    ((1, 2, 4, 6), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), False),
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
@pytest.mark.parametrize("shape,pool,strides,padding,dilation,whole", CASES)
def test_the_whole_map_max_is_the_windowed_max(shape, pool, strides, padding, dilation, whole, dtype):
    x = data(shape, dtype) if np.dtype(dtype).kind == "f" else \
        np.random.default_rng(1).integers(-50, 50, shape).astype(dtype)
    want = reference(x, pool, strides, padding, dilation)
    out = np.empty(want.shape, dtype)
    attrs = dict(pool_size=pool, strides=strides, padding=padding, dilation=dilation, ceil_mode=False)
    MAX_POOL(x, out=out, data_layout="NCHW", **attrs)
    np.testing.assert_array_equal(out, want)
    lengths = want.shape[2:]
    taken = all(_whole_axis(n, k, s, d, b, m) for n, k, s, d, b, m
                in zip(shape[2:], pool, strides, dilation, padding[:2], lengths))
    assert taken == whole
    calls = _max_pool_calls(x, out, pool, strides, padding, dilation, False, "NCHW")
    assert any(fn == np.maximum.reduce for fn, _, _ in calls) == whole
    last = np.ascontiguousarray(x.transpose(0, 2, 3, 1))          # channels last
    out_last = np.empty(want.transpose(0, 2, 3, 1).shape, dtype)
    MAX_POOL(last, out=out_last, data_layout="NHWC", **attrs)
    np.testing.assert_array_equal(out_last, want.transpose(0, 2, 3, 1))


def test_the_runner_keeps_the_reduction_call_after_call():
    """Per instruction (arena views: the same arrays every run), new values each run."""
    attrs = dict(pool_size=(5, 5), strides=(1, 1), padding=(2, 2, 2, 2), dilation=(1, 1), ceil_mode=False,
                 data_layout="NCHW")
    run = MAX_POOL.specialize_attrs(attrs, ())
    arena = np.empty(2 * 32 * 2 * 3, np.float32)
    x, out = arena[:192].reshape(1, 32, 2, 3), arena[192:].reshape(1, 32, 2, 3)
    for seed in range(3):
        x[...] = data(x.shape, np.float32, seed)
        run(x, out=out)
        np.testing.assert_array_equal(out, reference(x, (5, 5), (1, 1), (2, 2, 2, 2), (1, 1)))

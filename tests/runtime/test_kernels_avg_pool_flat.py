"""The average pool of windows side by side by flat shifts (avg_pool_flat.py): bit for bit the tap
method of nn._avg_pool_calls (the same taps in the same order, the same divisor), NaNs, infinities
and signed zeros included; where it switches off (padding, overlapping or partial windows, dilation,
integers and float16, a strided view, past its byte bar)."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import avg_pool_flat, get_kernel

AVG_POOL = get_kernel("nn.avg_pool").fn

TAKEN = [   # (N, C, H, W), pool: windows side by side, no padding
    ((1, 16, 16, 24), (2, 2)),          # DenseNet's transition pool at 61x96
    ((1, 22, 4, 6), (2, 2)),
    ((3, 20, 9, 13), (2, 2)),           # odd sizes: the last row and column read by no window
    ((2, 3, 12, 10), (3, 2)),
    ((1, 2, 8, 9), (1, 3)),             # one row tap
    ((1, 4, 6, 4), (2, 1)),             # one column tap
    ((1, 1, 2, 2), (2, 2)),             # one window
]


def _pool(x, pool, padding=(0, 0, 0, 0), strides=None, dilation=(1, 1), ceil_mode=False, flat=True):
    strides = pool if strides is None else strides
    lengths, dims = [], len(pool)
    for i, (n, k, s, d) in enumerate(zip(x.shape[2:], pool, strides, dilation)):
        span = n + padding[i] + padding[i + dims] - d * (k - 1) - 1
        lengths.append(-(-span // s) + 1 if ceil_mode else span // s + 1)
    out = np.zeros((*x.shape[:2], *lengths), x.dtype)
    with pytest.MonkeyPatch.context() as patch:
        if not flat:
            patch.setattr(avg_pool_flat, "avg_pool_calls", lambda *args: None)
        AVG_POOL(x, out=out, pool_size=pool, strides=strides, padding=padding, dilation=dilation,
                 ceil_mode=ceil_mode, count_include_pad=False, data_layout="NCHW")
    return out


def _calls(x, pool, **geometry):
    seen = []
    inner = avg_pool_flat.avg_pool_calls
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(avg_pool_flat, "avg_pool_calls", lambda *args: seen.append(inner(*args)) or seen[-1])
        _pool(x, pool, **geometry)
    return seen[0]


def _data(shape, dtype, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    if x.size > 20:
        x.flat[::7] = np.nan
        x.flat[3::11] = -np.inf
        x.flat[5::13] = -0.0
    return x


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, pool", TAKEN, ids=str)
def test_flat_sums_are_the_tap_method_bit_for_bit(shape, pool, dtype):
    x = _data(shape, dtype)
    assert _calls(x, pool) is not None
    got, want = _pool(x, pool), _pool(x, pool, flat=False)
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_signed_zeros_come_out_as_the_tap_method_gives_them():
    x = np.random.default_rng(1).choice(np.array([0.0, -0.0], np.float32), size=(2, 3, 8, 8))
    got, want = _pool(x, (2, 2)), _pool(x, (2, 2), flat=False)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("case", ["padding", "overlapping", "ceil mode", "dilation", "float16", "int32",
                                  "strided view", "byte bar", "1-d"])
def test_other_pools_take_the_tap_method(case, monkeypatch):
    x, pool, geometry = _data((1, 4, 8, 12), "float32"), (2, 2), {}
    if case == "padding":
        geometry = dict(padding=(1, 1, 1, 1))
    elif case == "overlapping":
        pool, geometry = (3, 3), dict(strides=(2, 2))
    elif case == "ceil mode":
        x, geometry = _data((1, 4, 9, 12), "float32"), dict(ceil_mode=True)
    elif case == "dilation":
        geometry = dict(dilation=(2, 1), strides=(2, 2))
    elif case == "float16":
        x = x.astype(np.float16)
    elif case == "int32":
        x = np.arange(x.size, dtype=np.int32).reshape(x.shape)
    elif case == "strided view":
        x = _data((1, 4, 8, 24), "float32")[:, :, :, ::2]
    elif case == "byte bar":
        monkeypatch.setattr(avg_pool_flat, "MAX_BYTES", x.nbytes - 1)
    elif case == "1-d":
        x, pool, geometry = np.ascontiguousarray(x[:, :, 0]), (2,), dict(padding=(0, 0), dilation=(1,))
    assert _calls(x, pool, **geometry) is None
    np.testing.assert_array_equal(_pool(x, pool, **geometry), _pool(x, pool, flat=False, **geometry))


def test_at_the_byte_bar_it_is_taken(monkeypatch):
    x = _data((1, 4, 8, 12), "float32")
    monkeypatch.setattr(avg_pool_flat, "MAX_BYTES", x.nbytes)
    assert _calls(x, (2, 2)) is not None

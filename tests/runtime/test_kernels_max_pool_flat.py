"""The flat-pass max pool (max_pool_flat.py): bit for bit the row-tap method of nn._max_along for
2-d pools (strided ones channels first and channels last, stride-1 ones channels first), at each dtype it takes, with NaNs and signed
zeros, windows reaching only padding, and at the row length / channel bytes where it switches off;
and the calls it leaves to the row taps."""

from __future__ import annotations

import math

import numpy as np
import pytest

from relaxpack.runtime.kernels import get_kernel, max_pool_flat
from relaxpack.runtime.kernels.nn import _max_pool_calls

MAX_POOL = get_kernel("nn.max_pool").fn

GEOMETRIES = [   # (N, C, H, W), pool, strides, padding (top, left, bottom, right), dilation, ceil_mode
    ((1, 24, 31, 48), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),      # ShuffleNet's stem pool
    ((2, 3, 13, 12), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False),
    ((1, 2, 7, 8), (3, 3), (3, 3), (2, 1, 2, 2), (1, 1), True),          # windows past the data
    ((1, 2, 5, 9), (2, 3), (1, 2), (1, 2, 1, 2), (1, 2), False),         # stride 1 along H, dilation
    ((1, 3, 9, 8), (3, 2), (2, 2), (1, 0, 1, 1), (1, 1), True),
    ((2, 1, 6, 6), (2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False),
    ((1, 2, 10, 9), (1, 3), (2, 3), (0, 1, 0, 1), (1, 2), False),        # one row tap
    ((1, 2, 4, 3), (3, 3), (3, 3), (2, 2, 2, 2), (1, 1), True),          # a window of padding only
    ((2, 3, 11, 10), (3, 3), (3, 2), (0, 1, 2, 1), (2, 1), False),       # row phases 0, 2, 1: taps 0, 2, 4
    ((1, 2, 2, 7), (3, 3), (2, 2), (1, 1, 1, 1), (1, 1), True),          # fewer data rows than the stride
    ((3, 2, 16, 9), (2, 3), (4, 2), (1, 1, 0, 1), (3, 1), False),        # stride 4, dilated rows
    ((2, 3, 1, 8), (3, 3), (3, 2), (1, 1, 1, 1), (1, 1), False),         # row phases without data
    # stride 1 (YOLO's SPPF: 5x5, padding 2, on small maps), at any row length
    ((3, 4, 1, 5), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), False),         # one data row, no window whole
    ((2, 3, 2, 10), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), False),
    ((1, 5, 4, 6), (5, 5), (1, 1), (2, 2, 2, 2), (1, 1), False),
    ((1, 2, 5, 131), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False),       # rows past the strided bar
    ((2, 2, 6, 7), (2, 2), (1, 1), (0, 0, 0, 0), (1, 1), False),         # overlapping windows, no padding
    ((1, 3, 7, 9), (3, 2), (1, 1), (0, 1, 2, 0), (2, 1), True),          # uneven padding, dilated rows
    ((1, 2, 1, 1), (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False),         # one cell
]


def out_length(n, k, s, d, b, e, ceil_mode):
    span = n + b + e - d * (k - 1) - 1
    if not ceil_mode:
        return span // s + 1
    m = -(-span // s) + 1
    return m - 1 if (m - 1) * s >= n + b else m


def out_for(x, pool, strides, padding, dilation, ceil_mode):
    lengths = [out_length(n, k, s, d, padding[i], padding[i + 2], ceil_mode)
               for i, (n, k, s, d) in enumerate(zip(x.shape[2:], pool, strides, dilation))]
    return np.empty((*x.shape[:2], *lengths), x.dtype)


def pooled(x, geometry, max_row):
    """The NCHW kernel's pool of ``x`` with the flat passes' row bar at ``max_row``; at 0, the
    row taps alone (windows side by side take the flat passes whatever the row length)."""
    pool, strides, padding, dilation, ceil_mode = geometry
    out = out_for(x, *geometry)
    saved, max_pool_flat.MAX_ROW = (max_pool_flat.MAX_ROW, max_pool_flat.max_pool_calls), max_row
    if not max_row:
        max_pool_flat.max_pool_calls = lambda *args: None
    try:
        MAX_POOL(x, out=out, pool_size=pool, strides=strides, padding=padding, dilation=dilation,
                 ceil_mode=ceil_mode, data_layout="NCHW")
    finally:
        max_pool_flat.MAX_ROW, max_pool_flat.max_pool_calls = saved
    return out


def data(rng, shape, dtype):
    if np.dtype(dtype).kind == "f":
        x = rng.standard_normal(shape).astype(dtype)
        x.flat[::7] = np.nan if x.size > 20 else x.flat[::7]
        x.flat[3::11] = -np.inf
        return x
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, shape, dtype, endpoint=True)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "uint8", "int32", "int64"])
@pytest.mark.parametrize("case", GEOMETRIES, ids=str)
def test_flat_passes_are_the_row_taps_bit_for_bit(case, dtype):
    shape, *geometry = case
    x = data(np.random.default_rng(5), shape, dtype)
    pool, strides, padding, dilation, _ = geometry
    out = out_for(x, *geometry)
    assert max_pool_flat.max_pool_calls(x, out, pool, strides, dilation, padding[:2], out.shape[2:]) is not None
    np.testing.assert_array_equal(pooled(x, geometry, 1 << 20), pooled(x, geometry, 0))


def test_the_bar_on_row_length():
    geometry = ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False)     # (overlapping windows: the bar holds)
    for width, flat in ((2 * max_pool_flat.MAX_ROW - 2, True), (2 * max_pool_flat.MAX_ROW, False)):
        x = np.random.default_rng(1).standard_normal((1, 2, 5, width)).astype(np.float32)
        out = out_for(x, *geometry)
        calls = max_pool_flat.max_pool_calls(x, out, (3, 3), (2, 2), (1, 1), (1, 1), out.shape[2:])
        assert (calls is not None) == flat
        np.testing.assert_array_equal(pooled(x, geometry, max_pool_flat.MAX_ROW), pooled(x, geometry, 0))


def test_stride_1_takes_no_row_bar():
    geometry = ((3, 3), (1, 1), (1, 1, 1, 1), (1, 1), False)
    x = np.random.default_rng(1).standard_normal((1, 2, 3, 4 * max_pool_flat.MAX_ROW + 1)).astype(np.float32)
    out = out_for(x, *geometry)
    assert max_pool_flat.max_pool_calls(x, out, (3, 3), (1, 1), (1, 1), (1, 1), out.shape[2:]) is not None
    np.testing.assert_array_equal(pooled(x, geometry, max_pool_flat.MAX_ROW), pooled(x, geometry, 0))


def test_stride_1_kept_calls_run_after_run():
    """The specialized pool keeps the flat calls for its arrays: each run pools the data it is given."""
    attrs = dict(pool_size=(5, 5), strides=(1, 1), padding=(2, 2, 2, 2), dilation=(1, 1), ceil_mode=False,
                 data_layout="NCHW")
    call = MAX_POOL.specialize_attrs(attrs, ())
    rng = np.random.default_rng(4)
    x, out = np.empty((3, 8, 1, 5), np.float32), np.empty((3, 8, 1, 5), np.float32)
    for _ in range(3):
        x[...] = data(rng, x.shape, "float32")
        call(x, out=out)
        np.testing.assert_array_equal(out, pooled(x, tuple(attrs[k] for k in (
            "pool_size", "strides", "padding", "dilation", "ceil_mode")), 0))


@pytest.mark.parametrize("case", ["float16", "nhwc", "1-d", "a strided view"])
def test_calls_left_to_the_row_taps(case):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 3, 9, 10)).astype(np.float32)
    attrs = dict(pool_size=(3, 3), strides=(2, 2), padding=(1, 1, 1, 1), dilation=(1, 1), ceil_mode=False,
                 data_layout="NCHW")
    if case == "float16":
        x = x.astype(np.float16)
    elif case == "nhwc":
        x, attrs["data_layout"] = np.ascontiguousarray(x.transpose(0, 2, 3, 1)), "NHWC"
    elif case == "1-d":
        x, attrs = x[:, :, 0], dict(attrs, pool_size=(3,), strides=(2,), padding=(1, 1), dilation=(1,))
    else:
        x = x[:, :, :, ::2]
    seen = []
    saved = max_pool_flat.max_pool_calls
    max_pool_flat.max_pool_calls = lambda *a: seen.append(saved(*a)) or seen[-1]
    try:
        spatial = x.shape[2:] if attrs["data_layout"] == "NCHW" else x.shape[1:-1]
        lengths = [(n + 2 - 3) // attrs["strides"][0] + 1 for n in spatial]
        shape = (*x.shape[:2], *lengths) if attrs["data_layout"] == "NCHW" else (x.shape[0], *lengths, x.shape[-1])
        _max_pool_calls(x, np.empty(shape, x.dtype), **attrs)
    finally:
        max_pool_flat.max_pool_calls = saved
    assert seen == [None]


def test_padding_never_wins():
    x = np.full((1, 1, 3, 3), -5.0, np.float32)
    out = pooled(x, ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False), 1 << 20)
    np.testing.assert_array_equal(out, np.full((1, 1, 2, 2), -5.0, np.float32))
    assert math.isfinite(out.min())


# ---------------------------------------------------------------- channels last


def pooled_channels_last(x, geometry, max_bytes):
    """The NHWC kernel's pool of NHWC ``x`` with the channels-last passes' bar at ``max_bytes``."""
    pool, strides, padding, dilation, ceil_mode = geometry
    out = np.ascontiguousarray(out_for(x.transpose(0, 3, 1, 2), *geometry).transpose(0, 2, 3, 1))
    saved, max_pool_flat.MAX_CHANNEL_BYTES = max_pool_flat.MAX_CHANNEL_BYTES, max_bytes
    try:
        MAX_POOL(x, out=out, pool_size=pool, strides=strides, padding=padding, dilation=dilation,
                 ceil_mode=ceil_mode, data_layout="NHWC")
    finally:
        max_pool_flat.MAX_CHANNEL_BYTES = saved
    return out


def channels_last_calls(x, geometry):
    pool, strides, padding, dilation, _ = geometry
    out = pooled_channels_last(x, geometry, 0)
    return max_pool_flat.max_pool_calls_channels_last(x, out, pool, strides, dilation, padding[:2], out.shape[1:3])


def assert_same_bits(a, b):
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.signbit(a), np.signbit(b))     # +0 / -0 too


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "uint8", "int32", "int64"])
@pytest.mark.parametrize("case", GEOMETRIES, ids=str)
def test_channels_last_passes_are_the_row_taps_bit_for_bit(case, dtype):
    (n, c, h, w), *geometry = case
    c = min(c, max_pool_flat.MAX_CHANNEL_BYTES // np.dtype(dtype).itemsize)     # (ShuffleNet's 24: 16 float32)
    x = data(np.random.default_rng(6), (n, h, w, c), dtype)
    assert channels_last_calls(x, geometry) is not None
    assert_same_bits(pooled_channels_last(x, geometry, 1 << 20), pooled_channels_last(x, geometry, 0))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", GEOMETRIES, ids=str)
def test_signed_zeros_and_nans_come_out_as_the_row_taps_give_them(case, layout):
    """np.maximum returns its second operand between +0 and -0: the flat passes compare the taps
    in the row taps' order (those reading data for every output first), so a zero keeps the sign
    the row taps give it."""
    shape, *geometry = case
    rng = np.random.default_rng(7)
    values = np.array([0.0, -0.0, -1.0, np.nan, -np.nan], np.float32)
    x = rng.choice(values, size=shape if layout == "NCHW" else (shape[0], shape[2], shape[3], shape[1]))
    if layout == "NCHW":
        assert_same_bits(pooled(x, geometry, 1 << 20), pooled(x, geometry, 0))
    else:
        assert_same_bits(pooled_channels_last(x, geometry, 1 << 20), pooled_channels_last(x, geometry, 0))


def test_channels_last_padding_never_wins():
    x = np.full((2, 3, 3, 4), -5.0, np.float32)
    geometry = ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False)
    assert channels_last_calls(x, geometry) is not None
    np.testing.assert_array_equal(pooled_channels_last(x, geometry, 1 << 20), np.full((2, 2, 2, 4), -5.0, np.float32))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8"])
def test_the_bar_on_channel_bytes(dtype):
    geometry = ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False)
    item = np.dtype(dtype).itemsize
    most = max_pool_flat.MAX_CHANNEL_BYTES // item
    for channels, flat in ((most, True), (most + 1, False)):
        x = data(np.random.default_rng(3), (1, 7, 9, channels), dtype)
        assert (channels_last_calls(x, geometry) is not None) == flat
        assert_same_bits(pooled_channels_last(x, geometry, max_pool_flat.MAX_CHANNEL_BYTES),
                         pooled_channels_last(x, geometry, 0))


@pytest.mark.parametrize("case", ["float16", "a strided view", "empty batch"])
def test_channels_last_calls_left_to_the_row_taps(case):
    x = np.random.default_rng(4).standard_normal((1, 9, 10, 3)).astype(np.float32)
    geometry = ((3, 3), (2, 2), (1, 1, 1, 1), (1, 1), False)
    if case == "float16":
        x = x.astype(np.float16)
    elif case == "a strided view":
        x = x[:, :, ::2]
    else:
        x = x[:0]
    assert channels_last_calls(x, geometry) is None
    if x.dtype != np.float16:       # (the NHWC kernel pools float16 in float32 either way)
        assert_same_bits(pooled_channels_last(x, geometry, 1 << 20), pooled_channels_last(x, geometry, 0))


# ---------------------------------------------------------------- windows side by side


APART = [   # (N, C, H, W), pool (= strides), no padding, no dilation
    ((1, 4, 32, 157), (2, 2)),        # rows of 78 outputs (past the channels-first bar)
    ((1, 32, 8, 20), (2, 1)),
    ((2, 3, 7, 9), (2, 2)),           # odd planes: the last row and column in no window
    ((2, 3, 5, 7), (2, 2)),           # an odd plane size between planes: the plain pick
    ((1, 2, 4, 7), (1, 2)),           # kept rows an odd number of values apart: the plain pick
    ((1, 1, 6, 6), (2, 2)),           # the last window ends at the data's last value
    ((2, 4, 9, 11), (3, 3)),
    ((1, 2, 4, 6), (1, 3)),
    ((1, 1, 1, 2), (1, 2)),
]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "uint8", "int32", "int64"])
@pytest.mark.parametrize("case", APART, ids=str)
def test_windows_side_by_side_are_the_row_taps_bit_for_bit(case, dtype):
    shape, pool = case
    geometry = (pool, pool, (0, 0, 0, 0), (1, 1), False)
    x = data(np.random.default_rng(8), shape, dtype)
    out = out_for(x, *geometry)
    assert max_pool_flat.max_pool_calls(x, out, pool, pool, (1, 1), (0, 0), out.shape[2:]) is not None
    assert_same_bits(pooled(x, geometry, 1 << 20), pooled(x, geometry, 0))
    zeros = np.random.default_rng(9).choice(np.array([0.0, -0.0, -1.0, np.nan], np.float32), size=shape)
    assert_same_bits(pooled(zeros, geometry, 1 << 20), pooled(zeros, geometry, 0))


def test_the_pairs_pick_reads_within_the_data_it_made():
    """The 2-wide pick reads each pair as one uint64 (on the float32 kind of data, with every picked
    cell at an even index): its last pair's high half lies one value past the compared ones."""
    x = np.arange(24, dtype=np.float32).reshape(1, 1, 4, 6)
    geometry = ((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False)
    calls = max_pool_flat.max_pool_calls(x, out_for(x, *geometry), (2, 2), (2, 2), (1, 1), (0, 0), (2, 3))
    assert any(kwargs.get("casting") == "unsafe" for _, _, kwargs in calls)
    np.testing.assert_array_equal(pooled(x, geometry, 1 << 20), [[[[7, 9, 11], [19, 21, 23]]]])


@pytest.mark.parametrize("geometry", [
    ((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), True),        # ceil mode: a last window past the data
    ((2, 2), (2, 2), (0, 0, 1, 1), (1, 1), False),       # end padding
    ((2, 2), (2, 2), (0, 0, 0, 0), (2, 2), False),       # dilated
])
def test_windows_not_side_by_side_keep_the_other_paths(geometry):
    x = data(np.random.default_rng(10), (1, 2, 7, 9), "float32")
    out = out_for(x, *geometry)
    pool, strides, padding, dilation, _ = geometry
    saved = max_pool_flat._apart_calls
    seen = []
    max_pool_flat._apart_calls = lambda *args: seen.append(args) or saved(*args)
    try:
        max_pool_flat.max_pool_calls(x, out, pool, strides, dilation, padding[:2], out.shape[2:])
    finally:
        max_pool_flat._apart_calls = saved
    assert not seen
    assert_same_bits(pooled(x, geometry, 1 << 20), pooled(x, geometry, 0))


def test_the_bar_on_bytes_of_windows_side_by_side():
    geometry = ((2, 2), (2, 2), (0, 0, 0, 0), (1, 1), False)
    values = max_pool_flat.APART_MAX_BYTES // 4
    for width, apart in ((values // 64, True), (values // 64 + 2, False)):       # 2 x 32 rows of float32
        x = data(np.random.default_rng(11), (1, 2, 32, width), "float32")
        out = out_for(x, *geometry)
        calls = max_pool_flat.max_pool_calls(x, out, (2, 2), (2, 2), (1, 1), (0, 0), out.shape[2:])
        assert (calls is not None) == apart          # (past it rows of over 64 outputs: the row taps)
        assert_same_bits(pooled(x, geometry, 1 << 20), pooled(x, geometry, 0))

"""The exact GELU of float32 arrays of every size (``_gelu_quad32``; float16/bfloat16 past the float64
table's bound): its contract against ``x Phi(x)`` from math.erfc on a dense sweep, small sizes
included, and the chunk seams, layouts, dtypes and special values."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import _gelu_quad32
from relaxpack.runtime.kernels._gelu_quad32 import CHUNK, gelu_quad32_into
from relaxpack.runtime.kernels._gelu_table import GELU64_MAX_SIZE

from .kernel_calls import call_kernel
from .test_kernels_fastpaths import gelu64, gelu_sweep, run_in_threads, ulps
from .test_kernels_registry import run_kernel, run_onnx

#: (low, high, max ulp) of the float32 table path (its docstring; measured 1.36, 3.46, 14.1 on
#: every 61st float32 of [-14.6, 7])
QUAD32_ULPS = [(-10.0, 8.0, 1.4), (-13.0, -10.0, 3.5)]


def every_nth_float32(low: float, high: float, step: int) -> np.ndarray:
    """Every ``step``-th float32 bit pattern whose value lies in [low, high]."""
    x = np.arange(0, 1 << 32, step, dtype=np.uint64).astype(np.uint32).view(np.float32)
    return x[np.isfinite(x) & (x >= low) & (x <= high)]


def quad32(x: np.ndarray) -> np.ndarray:
    out = np.empty(x.shape, np.float32)
    gelu_quad32_into(x, out)
    return out


def test_quad32_gelu_is_within_its_ulp_bounds():
    x = every_nth_float32(-14.6, 8.0, 4099)
    got = quad32(x)
    want = gelu64(x)
    err = ulps(got, want, np.float32)
    for low, high, bound in QUAD32_ULPS:
        inside = (x >= low) & (x < high)
        assert err[inside].max() <= bound, (low, high, err[inside].max())
    tail = x < -13                                       # results below 1e-37, c0's part subnormal
    assert np.all(np.abs(got[tail] - want[tail]) <= 16 * 2.0 ** -149)


def test_small_float32_gelu_meets_the_contract_on_a_dense_sweep():
    """The kernel's float32 GELU on arrays of a few hundred values (a transformer's MLP at a few
    tokens, Whisper's front end): every 4099th float32 of [-inf, inf], both signs, in pieces of
    960, against the float64 reference: within 1.4 ulp for x >= -10, 3.5 on [-13, -10), 16
    subnormal spacings below -13 (docs/design-notes.md, "The float32 GELU's contract"); -inf NaN."""
    x = every_nth_float32(-np.inf, np.inf, 4099)
    got = np.concatenate([run_kernel("nn.gelu", x[i:i + 960]) for i in range(0, x.size, 960)])
    np.testing.assert_array_equal(got, quad32(x))           # elementwise: size does not matter
    want = gelu64(x)
    finite = np.isfinite(x)
    err = ulps(got[finite], want[finite], np.float32)
    for low, high, bound in QUAD32_ULPS + [(8.0, np.inf, 0.5)]:
        inside = (x[finite] >= low) & (x[finite] < high)
        assert err[inside].max() <= bound, (low, high, err[inside].max())
    tail = finite & (x < -13)
    assert np.all(np.abs(got[tail] - want[tail]) <= 16 * 2.0 ** -149)


def test_small_float32_gelu_special_values_and_subnormals():
    edge = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45, -1e-45, 1e-40, -1e-40, 1.1754942e-38,
                     -1.1754942e-38, 2.0 ** -126, -(2.0 ** -126)], np.float32)
    got = run_kernel("nn.gelu", edge)
    assert got[0] == np.inf and np.isnan(got[1]) and np.isnan(got[2])
    assert got[3] == 0 and not np.signbit(got[3]) and got[4] == 0 and np.signbit(got[4])
    want = gelu64(edge[5:])
    assert np.all(np.abs(got[5:] - want) <= 2.0 ** -149)    # x / 2 of a subnormal: within a spacing
    assert np.array_equal(np.signbit(got[5:]), np.signbit(edge[5:]))


def test_float32_gelu_is_no_less_accurate_than_onnxruntime_at_small_sizes():
    """Per range of x the kernel's worst error over the sweep in pieces of 100 values is within
    onnxruntime's Gelu worst there (measured on every 257th float32: 1.5-2.4 ulp from -1 up, 161
    on [-3, -1), 0 returned below ~-5.5)."""
    x = gelu_sweep()
    want = gelu64(x)
    theirs, = run_onnx("Gelu", [x], opset=20, backend="ort")
    ours = np.concatenate([run_kernel("nn.gelu", x[i:i + 100]) for i in range(0, x.size, 100)])
    for low, high in [(-8.0, -3.0), (-3.0, -1.0), (-1.0, -0.1), (-0.1, 0.1), (0.1, 1.0), (1.0, 8.0)]:
        inside = (x >= low) & (x < high)
        assert (ulps(ours[inside], want[inside], np.float32).max()
                <= ulps(theirs[inside], want[inside], np.float32).max()), (low, high)


@pytest.mark.parametrize("n", [1, 7, 960, GELU64_MAX_SIZE, GELU64_MAX_SIZE + 1, CHUNK - 1, CHUNK, CHUNK + 1, 3 * CHUNK + 5])
def test_quad32_gelu_at_chunk_seams_is_elementwise(n):
    """Each value's result is the same whatever chunk, size or offset it comes in (the same
    calls on each), and within the bounds of the exact GELU."""
    x = np.resize(gelu_sweep(), n)
    got = run_kernel("nn.gelu", x.reshape(1, -1)).reshape(-1)
    alone = np.concatenate([quad32(x[i:i + 4097]) for i in range(0, n, 4097)])
    np.testing.assert_array_equal(got, alone)
    inside = x >= -10
    assert ulps(got[inside], gelu64(x[inside]), np.float32).max() <= 1.4


def test_quad32_gelu_in_place_strided_and_special_values():
    edge = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 15.0, -15.0, 6.0005, 1e30, -1e30, 3e38, -3e38,
                     1e-45, -1e-45, -14.5, -14.501, 6.001], np.float32)
    payloads = np.array([0x7FC00001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001, 0xFFA5A5A5], np.uint32).view(np.float32)
    x = np.concatenate([np.resize(gelu_sweep(), CHUNK + 7), edge, payloads])
    got = quad32(x)
    e = got[CHUNK + 7:]
    assert e[0] == np.inf and np.isnan(e[1]) and np.isnan(e[2]) and e[3] == 0 and e[4] == 0
    assert not np.signbit(e[3]) and np.signbit(e[4])            # -0.0 * Phi(0) is -0.0
    assert e[5] == 15 and e[6] == 0 and e[7] == np.float32(6.0005) and e[8] == np.float32(1e30)
    assert e[9] == 0 and e[10] == np.float32(3e38) and e[11] == 0
    assert abs(e[12]) <= 1e-45 and abs(e[13]) <= 1e-45 and e[14] == 0 and e[15] == 0
    assert e[16] == np.float32(6.001)
    assert np.isnan(e[edge.size:]).all()
    same = x.copy()
    gelu_quad32_into(same, same)                                 # in place (a fused gemm's call)
    np.testing.assert_array_equal(same, got)
    wide = np.repeat(x, 2)
    strided_out = np.zeros(2 * x.size, np.float32)[::2]
    gelu_quad32_into(wide[::2], strided_out)                     # neither contiguous
    np.testing.assert_array_equal(strided_out, got)
    shaped = x[:CHUNK].reshape(64, -1).T                         # 2-D, transposed, in place
    want = quad32(np.ascontiguousarray(shaped))
    gelu_quad32_into(shaped, shaped)
    np.testing.assert_array_equal(shaped, want)
    empty = np.zeros((0, 9), np.float32)
    gelu_quad32_into(empty, empty)
    assert run_kernel("nn.gelu", np.zeros((GELU64_MAX_SIZE + 1, 0), np.float32)).shape == (GELU64_MAX_SIZE + 1, 0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_large_low_float_gelu_rounds_within_a_spacing(dtype):
    """float16 / bfloat16 arrays past the small path's bound go through the float32 table: within
    one spacing of the exact GELU of the low-float value (rounded twice)."""
    x = np.resize(gelu_sweep(), CHUNK + 3).astype(dtype)
    got = run_kernel("nn.gelu", x.reshape(1, -1)).reshape(-1)
    assert got.dtype == x.dtype
    want = gelu64(x.astype(np.float32))
    assert np.all(np.abs(got.astype(np.float64) - want)
                  <= np.spacing(np.abs(want).astype(dtype)).astype(np.float64))


@pytest.mark.parametrize("n", [1, 480, _gelu_quad32.LOW_WORDS_MAX, _gelu_quad32.LOW_WORDS_MAX + 1])
def test_the_row_in_the_index_low_halves_is_the_converted_rows_result(n):
    """Up to LOW_WORDS_MAX values the row is written as int32 into the low halves of the zeroed intp
    index: the same bytes as the converting subtract's index (the other path, forced), NaNs of both
    signs and any payload (whose row is another, their result the same NaN), infinities, zeros and
    subnormals included, call after call on the same buffers; past the bound there are no halves."""
    nans = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF, 0xFFFFFFFF, 0xFFA00123],
                    np.uint32).view(np.float32)
    special = np.array([np.inf, -np.inf, 0.0, -0.0, 1e-45, -1e-45, 1e30, -1e30, 6.0, -14.5, -15.0], np.float32)
    rng = np.random.default_rng(41)
    halves, converting = _gelu_quad32._Buffers(n), _gelu_quad32._Buffers(n)
    converting.low = None
    assert (halves.low is not None) == (n <= _gelu_quad32.LOW_WORDS_MAX and np.dtype(np.intp).itemsize == 8)
    table = _gelu_quad32._Table32.get()
    sweep = gelu_sweep()
    for _ in range(3):
        x = rng.choice(np.concatenate([sweep, nans, special]), n).astype(np.float32)
        got, want = np.empty(n, np.float32), np.empty(n, np.float32)
        _gelu_quad32._chunk(table, x, got, halves)
        _gelu_quad32._chunk(table, x, want, converting)
        assert got.tobytes() == want.tobytes()
        _gelu_quad32._bound_chunk(table, x, got, halves)()
        assert got.tobytes() == want.tobytes()


def test_quad32_gelu_keeps_buffers_per_size_and_thread():
    """Two threads cycling through more sizes than are kept (chunks and tails) get what a fresh
    evaluation gives; at most ``_SIZES_KEPT`` sizes and ``_KEPT_VALUES`` values stay kept."""
    x = np.resize(gelu_sweep(), 2 * CHUNK + 100)
    sizes = [CHUNK + 1, 7000, 2 * CHUNK + 100, 9001, CHUNK, 12345, 6145]
    want = {n: quad32(x[:n].copy()) for n in sizes}
    failures = []

    def cycle(offset):
        for _ in range(3):
            for n in sizes[offset:] + sizes[:offset]:
                if not np.array_equal(quad32(x[:n]), want[n], equal_nan=True):
                    failures.append((offset, n))

    run_in_threads(cycle, (0, 4))
    assert not failures
    kept = _gelu_quad32._KEPT.sizes
    assert len(kept) <= _gelu_quad32._SIZES_KEPT and sum(kept) <= _gelu_quad32._KEPT_VALUES


def test_fused_gelu_in_place_past_the_bound_is_the_kernel():
    from relaxpack.runtime.kernels.activation import gelu_in_place
    x = np.resize(gelu_sweep(), CHUNK + 9).reshape(1, -1)
    got = x.copy()
    gelu_in_place(got)
    np.testing.assert_array_equal(got, run_kernel("nn.gelu", x))
    out = np.empty_like(x)
    call_kernel("nn.gelu", x, out=out)
    np.testing.assert_array_equal(out, got)

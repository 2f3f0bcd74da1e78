"""The kernels' fast paths against their general paths and onnxruntime:
constant exponents of ``power``, float32 ``erf`` and GELU, the convolution
engine's methods (``conv_direct``), one-pass ``clip`` / ``relu``, float32
``image.resize``."""

from __future__ import annotations

import dataclasses
import math
import threading

import numpy as np
import pytest

from relaxpack.runtime.kernels import _workspace, conv_direct, get_kernel
from relaxpack.runtime.kernels._math import erf64

from .kernel_calls import call_kernel
from .test_kernels_registry import assert_close, rand, run_kernel, run_onnx


def run_in_threads(target, args) -> None:
    """Run ``target(a)`` for each of ``args`` in a thread of its own, all at once, and wait for them."""
    threads = [threading.Thread(target=target, args=(a,)) for a in args]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


FLOATS = ["float16", "float32", "float64"]


def ulps(got: np.ndarray, want: np.ndarray, dtype) -> np.ndarray:
    """|got - want| in units of the spacing of ``dtype`` at ``want`` (float64 math)."""
    want = np.asarray(want, np.float64)
    spacing = np.spacing(np.abs(want).astype(dtype)).astype(np.float64)
    return np.abs(got.astype(np.float64) - want) / spacing


# ---------------------------------------------------------------- power


SPECIALS = [0.0, -0.0, 1.0, -1.0, 0.5, -2.5, np.inf, -np.inf, np.nan, 1e-30, 3e4]


def c_pow(x: float, y: float) -> float:
    """C99's pow (onnxruntime's std::pow), special values included."""
    try:
        return math.pow(x, y)
    except ValueError:          # a negative base to a fraction, or 0 to a negative power
        if x == 0:
            odd = y == int(y) and int(y) % 2
            return math.copysign(math.inf, x) if odd else math.inf
        return math.nan
    except OverflowError:
        return math.copysign(math.inf, x) if y == int(y) and int(y) % 2 else math.inf


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("exponent", [1.0, 2.0, 3.0, 0.5, -1.0])
@pytest.mark.parametrize("rhs_shape", [(), (1,), (1, 1, 1)])
def test_power_constant_exponents_match_c_pow(dtype, exponent, rhs_shape):
    rng = np.random.default_rng(int(abs(exponent) * 10) + len(rhs_shape))
    x = np.concatenate([rand(rng, (7, 5), "float64").reshape(-1) * 3, SPECIALS]).astype(dtype).reshape(-1, 46)
    rhs = np.full(rhs_shape, exponent, dtype)
    got = run_kernel("power", x, rhs)
    with np.errstate(all="ignore"):           # 1 / 0 and float16 overflow are expected here
        want = np.broadcast_to(np.vectorize(c_pow, otypes=[np.float64])(x.astype(np.float64), exponent), got.shape)
        rounded = want.astype(dtype)
    finite = np.isfinite(rounded) & (want != 0)
    # special values (nan, +-inf, the sign of zero) exactly as C's pow gives them
    np.testing.assert_array_equal(got[~finite], rounded[~finite])
    signed = ~finite & ~np.isnan(rounded)
    np.testing.assert_array_equal(np.signbit(got[signed]), np.signbit(rounded[signed]))
    bound = 1 if exponent != 3.0 or dtype == "float16" else 2      # x * x * x rounds twice
    assert ulps(got[finite], want[finite], dtype).max() <= bound


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_power_fast_path_may_write_over_its_base(dtype):
    kernel = get_kernel("power").fn
    for exponent in (1.0, 2.0, 3.0, 0.5, -1.0):
        x = np.linspace(0.5, 4, 9).astype(dtype)
        want = np.power(x, exponent)
        kernel(x, np.array(exponent, dtype), out=x)       # the memory planner's in-place case
        np.testing.assert_allclose(x, want, rtol=4 * np.finfo(dtype).eps)


def test_power_other_exponents_and_shapes_keep_the_general_path():
    rng = np.random.default_rng(3)
    x = rand(rng, (4, 6), "float32", 0.1, 3)
    for rhs in (np.float32(2.5), np.array([2.0, 3.0], np.float32).reshape(2, 1, 1)[:1],
                np.full((4, 6), 2.0, np.float32), np.array(-2.0, np.float32)):
        want, = run_onnx("Pow", [x, rhs], backend="ort") if np.ndim(rhs) else run_onnx("Pow", [x, np.asarray(rhs)])
        assert_close(run_kernel("power", x, np.asarray(rhs)), want)
    assert run_kernel("power", np.zeros((0, 3), np.float32), np.float32(3)).shape == (0, 3)


def test_integer_power_semantics_are_unchanged():
    a = np.array([2, -2, 1, -1, 0, 3, 7], np.int32)
    for exponent, want in [(-1, [0, 0, 1, -1, 0, 0, 0]), (2, [4, 4, 1, 1, 0, 9, 49]),
                           (3, [8, -8, 1, -1, 0, 27, 343]), (1, [2, -2, 1, -1, 0, 3, 7])]:
        np.testing.assert_array_equal(run_kernel("power", a, np.array(exponent, np.int32)), want)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32"])
def test_power_per_instruction_is_the_kernel_bit_for_bit(dtype):
    """A constant exponent's fast power is chosen once per exponent array and dtype: the kernel's
    bits call after call (special values, in place, another dtype of base, an exponent without a
    fast path, another exponent array); an exponent that is no constant is looked up every call."""
    kernel = get_kernel("power").fn
    rng = np.random.default_rng(6)
    exponents = [1.0, 2.0, 3.0, 0.5, -1.0, 2.5] if dtype != "int32" else [1, 2, 3]
    for exponent in exponents:
        rhs = np.array(exponent, dtype)
        call = kernel.specialize_attrs({}, (False, True))
        for base_dtype in (dtype, dtype, "float64" if dtype != "float64" else "float32"):
            x = (np.concatenate([rand(rng, (40,), "float64") * 3, SPECIALS if dtype != "int32" else []])
                 .astype(base_dtype))
            out_dtype = np.result_type(x.dtype, rhs.dtype)
            got, want = np.empty(x.shape, out_dtype), np.empty(x.shape, out_dtype)
            with np.errstate(all="ignore"):
                call(x, rhs, out=got)
                kernel(x, rhs, out=want)
            np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))
        if dtype != "int32":
            x = np.linspace(0.5, 4, 9).astype(dtype)
            want = np.empty_like(x)
            kernel(x, rhs, out=want)
            call(x, rhs, out=x)                     # in place
            np.testing.assert_array_equal(x, want)
    moving = np.array(2.0, np.float32)
    call = kernel.specialize_attrs({}, (False, False))
    x = np.linspace(0.5, 4, 9).astype(np.float32)
    for value in (2.0, 3.0, 2.0):
        moving[...] = value                         # a register's array: new values, same object
        got = np.empty_like(x)
        call(x, moving, out=got)
        np.testing.assert_array_equal(got, run_kernel("power", x, np.array(value, np.float32)))


@pytest.mark.parametrize("exponent", [2.0, 3.0, 0.5, -1.0])
def test_power_matches_onnxruntime(exponent):
    x = rand(np.random.default_rng(4), (3, 65), "float32", 0.1, 4)
    want, = run_onnx("Pow", [x, np.array(exponent, np.float32)], backend="ort")
    assert_close(run_kernel("power", x, np.array(exponent, np.float32)), want)


# ---------------------------------------------------------------- erf, GELU in float32


def erf_sweep() -> np.ndarray:
    rng = np.random.default_rng(5)
    return np.concatenate([
        rng.uniform(-4.5, 4.5, 400_000), rng.uniform(-1e-3, 1e-3, 2000), np.linspace(0.9, 0.95, 20001),
        np.linspace(-4.0, -3.8, 20001), np.geomspace(1e-38, 1, 2000), -np.geomspace(1e-38, 1, 2000),
    ]).astype(np.float32)


def test_erf_float32_is_within_two_ulps_and_mostly_correctly_rounded():
    x = erf_sweep()
    got = run_kernel("erf", x)
    want = erf64(x.astype(np.float64))                  # within an ulp of erf in float64
    err = ulps(got, want, np.float32)
    assert err.max() <= 2, (err.max(), x[err.argmax()])
    assert np.mean(got == want.astype(np.float32)) > 0.9
    assert np.all(np.signbit(got) == np.signbit(x))
    edge = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.9, 3.0e38, -3.0e38], np.float32)
    got = run_kernel("erf", edge)
    np.testing.assert_array_equal(got, erf64(edge.astype(np.float64)).astype(np.float32))
    assert np.signbit(got[1]) and not np.signbit(got[0])


def test_erf_float32_in_place_and_empty():
    x = erf_sweep()[:1000].copy()
    want = run_kernel("erf", x)
    get_kernel("erf").fn(x, out=x)
    np.testing.assert_array_equal(x, want)
    assert run_kernel("erf", np.zeros((0, 5), np.float32)).shape == (0, 5)


def test_erf_float32_matches_onnxruntime():
    x = (rand(np.random.default_rng(6), (4, 257), "float32") * 2)
    want, = run_onnx("Erf", [x], backend="ort")
    assert_close(run_kernel("erf", x), want)


def gelu64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return np.array([v * 0.5 * math.erfc(-v / math.sqrt(2)) if np.isfinite(v) else np.nan for v in x])


def gelu_sweep() -> np.ndarray:
    """Every 2**13-th float32 of [-8, 8] (by bit pattern), plus normal draws."""
    steps = np.arange(0, np.float32(8).view(np.uint32), 1 << 13, dtype=np.uint32).view(np.float32)
    x = np.concatenate([-steps, steps, np.random.default_rng(7).standard_normal(20000) * 3])
    return x.astype(np.float32)


# (low, high, max ulp): the bounds the float32 GELU had before the table of quadratics
# (``_gelu_quad32``, within 1.4 ulp on all four: tests/runtime/test_gelu_quad32.py);
# onnxruntime's Gelu there: 1.7, 2.4, 165, 8e6 ulp.
GELU_ULPS = [(-0.1, 8.0, 2.0), (-1.0, -0.1, 3.0), (-3.0, -1.0, 8.0), (-5.5, -3.0, 16.0)]


def test_gelu_erf_in_float32_is_within_a_few_ulps_including_the_negative_tail():
    x = gelu_sweep()
    got = run_kernel("nn.gelu", x)
    want = gelu64(x)
    err = ulps(got, want, np.float32)
    for low, high, bound in GELU_ULPS:
        inside = (x >= low) & (x < high)
        assert err[inside].max() <= bound, (low, high, err[inside].max(), x[inside][err[inside].argmax()])
    far = x < -5.5                       # |result| < 1e-8: relative error, not ulps
    assert np.all(np.abs(got[far] - want[far]) <= 2e-5 * np.abs(want[far]))
    assert np.abs(got - want).max() <= 2.5e-7        # half an ulp at |x| in [4, 8)


def test_gelu_float32_is_no_less_accurate_than_onnxruntime():
    x = gelu_sweep()
    want = gelu64(x)
    theirs, = run_onnx("Gelu", [x], opset=20, backend="ort")
    ours = run_kernel("nn.gelu", x)
    assert np.abs(ours - want).max() <= np.abs(theirs - want).max()
    for low, high, _ in GELU_ULPS:
        inside = (x >= low) & (x < high)
        # within an ulp of onnxruntime's worst case near 0, far below it from -1 down
        assert ulps(ours[inside], want[inside], np.float32).max() <= (
            1.0 + ulps(theirs[inside], want[inside], np.float32).max())


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gelu_erf_low_floats_round_once(dtype):
    x = gelu_sweep().astype(dtype)
    got = run_kernel("nn.gelu", x)
    assert got.dtype == x.dtype
    got = got.astype(np.float64)
    want = gelu64(x.astype(np.float32))
    assert np.all(np.abs(got - want) <= np.spacing(np.abs(want).astype(dtype)).astype(np.float64))


def test_gelu_float32_special_values_in_place_strided_and_empty():
    edge = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 15.0, -15.0, 1e30, -1e30, 1e-45, -1e-45], np.float32)
    got = run_kernel("nn.gelu", edge)
    # -inf: NaN, as ONNX's formula (-inf * 0), onnxruntime's Gelu and the Erf form run op by op give
    assert got[0] == np.inf and np.isnan(got[1]) and np.isnan(got[2]) and got[3] == 0 and got[4] == 0
    assert got[5] == 15 and got[6] == 0 and got[7] == np.float32(1e30) and got[8] == 0
    assert got[9] == np.float32(1e-45) * 0.5 or abs(got[9]) <= 1e-45
    from relaxpack.runtime.kernels._gelu_table import GELU64_MAX_SIZE
    x = gelu_sweep()[:GELU64_MAX_SIZE + 3].reshape(1, -1)          # past the small path: the float32 one
    want = run_kernel("nn.gelu", x)
    same = x.copy()
    call_kernel("nn.gelu", same, out=same)                  # a fused gemm's call
    np.testing.assert_array_equal(same, want)
    strided = np.repeat(x, 2, axis=1)[:, ::2]
    np.testing.assert_array_equal(run_kernel("nn.gelu", strided), want)
    assert run_kernel("nn.gelu", np.zeros((0, 7), np.float32)).shape == (0, 7)


def table_gelu(x: np.ndarray) -> np.ndarray:
    """The float64 table's GELU of ``x`` in ``x``'s dtype: the kernel's small path for float16 and
    bfloat16; float32 takes the float32 table (``_gelu_quad32``) since, so its call is direct."""
    from relaxpack.runtime.kernels._gelu_table import gelu_table_into
    if x.dtype != np.float32:
        return run_kernel("nn.gelu", x)
    out = np.empty_like(x)
    gelu_table_into(x, out)
    return out


@pytest.mark.parametrize("dtype", ["float32", "float16"])
def test_gelu_of_small_arrays_is_correctly_rounded(dtype):
    """Up to GELU64_MAX_SIZE values the table evaluates in float64 (fewer numpy calls) and rounds
    once: within half an ulp (a near-tie may round either way) over the whole sweep, the far
    negative tail included; the special values and the in-place call as the float32 path."""
    from relaxpack.runtime.kernels._gelu_table import GELU64_MAX_SIZE
    x = gelu_sweep().astype(dtype)
    want = gelu64(x.astype(np.float64))
    chunks = [x[i:i + GELU64_MAX_SIZE] for i in range(0, x.size, GELU64_MAX_SIZE)]
    got = np.concatenate([table_gelu(c.reshape(4, -1) if c.size % 4 == 0 else c).reshape(-1)
                          for c in chunks])
    assert got.dtype == dtype
    assert ulps(got, want, np.dtype(dtype)).max() <= 0.5 + 1e-6
    edge = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 15.0, -15.0, -40.0, 1e-45], dtype)
    got = table_gelu(edge)
    assert got[0] == np.inf and np.isnan(got[1]) and np.isnan(got[2]) and got[3] == 0 and got[4] == 0
    assert not np.signbit(got[3]) and np.signbit(got[4])        # -0.0 * Phi(0) is -0.0, as onnxruntime's
    assert got[5] == 15 and got[6] == 0 and got[7] == 0
    small = x[:300].copy()
    call_kernel("nn.gelu", small, out=small)                  # a fused gemm's in-place call
    np.testing.assert_array_equal(small, run_kernel("nn.gelu", x[:300]))


def test_gelu_table_error_bounds_in_float64():
    """The table's cubics before rounding (a float64 ``out``) against ``x Phi(x)`` from math.erfc
    (itself within ~2e-14 at -13): the relative bounds its docstring states, per range of x."""
    from relaxpack.runtime.kernels._gelu_table import _K, gelu_table_into
    rng = np.random.default_rng(11)
    centers = np.arange(-13.2 * _K, 6 * _K) / _K
    x = np.concatenate([rng.uniform(-13.2, 6, 100_000), centers + 0.5 / _K, centers + 0.4999 / _K,
                        centers + 0.2 / _K])
    got = np.empty_like(x)
    for i in range(0, x.size, 4096):
        gelu_table_into(x[i:i + 4096], got[i:i + 4096])
    rel = np.abs(got - gelu64(x)) / np.abs(gelu64(x))
    for low, high, bound in [(-2, 6, 1e-14), (-5, -2, 3e-13), (-8, -5, 2e-12), (-13.2, -8, 1.2e-11)]:
        inside = (x >= low) & (x < high)
        assert rel[inside].max() <= bound, (low, high, rel[inside].max())


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_gelu_table_at_its_seams(dtype):
    """Where the small path switches rows: halfway between two centers (the rounding to the grid's
    ties) and either side, the range's ends and the guards past them, subnormals; NaNs with any
    payload (their bits pick an arbitrary row: clipped, so no hang or error) stay NaN."""
    from relaxpack.runtime.kernels._gelu_table import _HIGH, _K, _LOW
    halves = (np.arange(-14 * _K, 6 * _K, 37) + 0.5) / _K
    ends = [_LOW, _LOW - 0.5 / _K, _LOW - 1 / _K, _LOW - 1.5 / _K, _LOW - 2 / _K, _HIGH, _HIGH + 0.5 / _K,
            _HIGH + 1 / _K, _HIGH + 1.5 / _K, _HIGH + 2 / _K, -14.35, -13.2, 6.5, 100.0, -100.0, 3e38, -3e38]
    x32 = np.concatenate([halves, ends]).astype(np.float32)
    x32 = np.concatenate([x32, np.nextafter(x32, np.float32(np.inf)), np.nextafter(x32, np.float32(-np.inf)),
                          np.float32([1e-40, -1e-40, 1.5e-45, -1.5e-45])])
    with np.errstate(over="ignore"):
        x = x32.astype(dtype)
    x = x[np.isfinite(x.astype(np.float64))]                # (float16: 3e38 is inf)
    got = table_gelu(x)
    want = gelu64(x.astype(np.float64))
    assert ulps(got, want, np.dtype(dtype)).max() <= 0.5 + 1e-6
    payloads = np.array([0x7FC00000, 0x7FC00001, 0x7FFFFFFF, 0xFFFFFFFF, 0x7F800001, 0xFFA5A5A5], np.uint32)
    nans = np.concatenate([payloads.view(np.float32), x32[:10]])
    assert np.isnan(table_gelu(nans)[:payloads.size]).all()
    np.testing.assert_array_equal(table_gelu(nans)[payloads.size:], table_gelu(x32[:10]))


def test_gelu_of_small_arrays_keeps_buffers_per_size_and_thread():
    """The small path's float64 buffers are kept per thread and size (the oldest size dropped past
    ``_GELU_SIZES_KEPT`` sizes or ``_GELU_KEPT_VALUES`` values): cycling through more sizes than that, in two threads at once, with a
    non-contiguous ``out``, a 0-d and an empty array, gives what a fresh evaluation gives."""
    from relaxpack.runtime.kernels import _gelu_table
    x = gelu_sweep().astype(np.float32)
    bound = _gelu_table.GELU64_MAX_SIZE                    # three of these pass the values kept
    sizes = [1, 2, 3, 31, 320, 2048, bound, bound - 1, bound - 2] + list(range(40, 40 + _gelu_table._GELU_SIZES_KEPT + 2))
    want = {n: gelu64(x[:n].astype(np.float64)) for n in sizes}
    failures = []

    def cycle(offset):
        for round_ in range(3):
            for n in sizes[offset:] + sizes[:offset]:
                got = table_gelu(x[:n])
                if ulps(got, want[n], np.float32).max() > 0.5 + 1e-6:
                    failures.append((offset, round_, n))

    run_in_threads(cycle, (0, 5))
    assert not failures
    assert len(_gelu_table._GELU_KEPT.sizes) <= _gelu_table._GELU_SIZES_KEPT
    assert sum(_gelu_table._GELU_KEPT.sizes) <= _gelu_table._GELU_KEPT_VALUES
    strided = np.zeros((8, 16), np.float32)[:, ::2]                   # an out that is not contiguous
    _gelu_table.gelu_table_into(x[:64].reshape(8, 8), strided)
    np.testing.assert_array_equal(strided.reshape(-1), table_gelu(x[:64]))
    scalar = np.array(x[7])
    assert run_kernel("nn.gelu", scalar)[()] == run_kernel("nn.gelu", x[7:8])[0]
    assert run_kernel("nn.gelu", np.zeros((3, 0), np.float32)).shape == (3, 0)


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16"])
def test_gelu_activation_in_place_is_the_kernel(dtype):
    """A fused gemm's / conv's GELU (``gelu_in_place``) skips the kernel's wrapper for float32: its
    results are the kernel's bit for bit on either side of the small path's bound, 0-d included."""
    from relaxpack.runtime.kernels._gelu_table import GELU64_MAX_SIZE
    from relaxpack.runtime.kernels.activation import gelu_in_place
    sweep = gelu_sweep().astype(dtype)
    for n in (1, 7, GELU64_MAX_SIZE, GELU64_MAX_SIZE + 1, 3 * GELU64_MAX_SIZE):
        x = sweep[:n].reshape(1, -1)
        got = x.copy()
        gelu_in_place(got)
        np.testing.assert_array_equal(got, run_kernel("nn.gelu", x))
    scalar = np.array(sweep[3])
    gelu_in_place(scalar)
    assert scalar[()] == run_kernel("nn.gelu", sweep[3:4])[0]


def test_gelu_float32_matches_onnxruntime_and_the_float64_path():
    x = (rand(np.random.default_rng(8), (3, 129), "float32") * 3)
    want, = run_onnx("Gelu", [x], opset=20, backend="ort")
    assert_close(run_kernel("nn.gelu", x), want)
    np.testing.assert_allclose(run_kernel("nn.gelu", x), run_kernel("nn.gelu", x.astype(np.float64)),
                               rtol=3e-7, atol=1e-7)


# ---------------------------------------------------------------- convolution engine


def conv64(x, w, strides, padding, dilation, groups):
    """A plain direct convolution in float64: one strided slice per tap."""
    n = x.ndim - 2
    x, w = x.astype(np.float64), w.astype(np.float64)
    begins, ends = padding[:n], padding[n:]
    xp = np.pad(x, [(0, 0), (0, 0), *zip(begins, ends)])
    out_c, per_group, *kernel = w.shape
    lengths = [(xp.shape[2 + i] - dilation[i] * (kernel[i] - 1) - 1) // strides[i] + 1 for i in range(n)]
    out = np.zeros((x.shape[0], out_c, *lengths))
    og = out_c // groups
    for g in range(groups):
        xs = xp[:, g * per_group:(g + 1) * per_group]
        ws = w[g * og:(g + 1) * og]
        for tap in np.ndindex(*kernel):
            window = tuple(slice(t * d, t * d + (m - 1) * s + 1, s)
                           for t, d, m, s in zip(tap, dilation, lengths, strides))
            out[:, g * og:(g + 1) * og] += np.einsum("nc...,oc->no...", xs[(slice(None), slice(None)) + window],
                                                     ws[(slice(None), slice(None)) + tap])
    return out


# (data shape, weight shape, strides, padding (begins + ends), dilation, groups)
ENGINE_CASES = [
    ((2, 3, 13, 11), (5, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),
    ((1, 4, 12, 15), (6, 4, 3, 3), (2, 2), (1, 0, 2, 1), (1, 1), 1),           # odd sizes, uneven padding
    ((1, 2, 17, 16), (3, 2, 5, 3), (3, 2), (2, 1, 0, 2), (1, 2), 1),          # stride 3, dilation
    ((2, 6, 9, 10), (6, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 6),           # depthwise
    ((1, 5, 14, 13), (5, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 5),          # depthwise, stride 2
    ((1, 4, 11, 12), (4, 1, 5, 5), (1, 2), (2, 2, 2, 2), (2, 1), 4),          # depthwise, dilation
    ((1, 4, 10, 9), (8, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 4),           # channel multiplier 2
    ((2, 6, 8, 8), (9, 2, 3, 3), (2, 2), (0, 0, 1, 1), (1, 1), 3),            # groups
    ((1, 8, 7, 9), (4, 8, 1, 1), (1, 1), (0, 0, 0, 0), (1, 1), 1),            # 1x1: the GEMM reads the input
    ((1, 8, 7, 9), (4, 8, 1, 1), (2, 3), (1, 0, 0, 1), (1, 1), 1),            # 1x1 strided and padded
    ((1, 3, 12, 12), (4, 3, 3, 3), (1, 1), (0, 0, 0, 0), (1, 1), 1),          # no padding: no copy
    ((2, 3, 20), (4, 3, 5), (2,), (2, 1), (1,), 1),                           # 1-d
    ((1, 2, 6, 7, 5), (3, 2, 3, 2, 3), (1, 2, 1), (1, 0, 1, 1, 1, 0), (1, 1, 2), 1),   # 3-d
    ((1, 3, 4, 4), (2, 3, 3, 3), (1, 1), (2, 2, 2, 2), (1, 1), 1),            # more padding than data
    ((0, 3, 8, 8), (4, 3, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 1),            # empty batch
    ((2, 6, 10, 9), (9, 2, 3, 3), (1, 1), (1, 1, 1, 1), (2, 1), 3),           # groups, row dilation
    ((1, 3, 15, 12), (4, 3, 3, 3), (2, 1), (2, 1, 1, 2), (2, 1), 1),          # one phase despite stride 2
    ((2, 3, 20), (4, 3, 5), (1,), (2, 1), (2,), 1),                           # 1-d, one phase
    ((1, 2, 6, 7, 5), (3, 2, 3, 2, 3), (1, 1, 1), (1, 0, 1, 1, 1, 0), (1, 2, 1), 1),   # 3-d, one phase
    ((2, 24, 5, 7), (24, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 24),        # depthwise, channel-last
    ((1, 40, 9, 8), (40, 1, 3, 3), (2, 2), (1, 0, 0, 1), (1, 1), 40),        # channel-last, stride 2, uneven pads
    ((1, 30, 7, 6), (30, 1, 3, 2), (2, 1), (0, 2, 1, 0), (2, 2), 30),        # channel-last, dilation
    ((1, 16, 2, 3), (16, 1, 3, 3), (1, 1), (3, 3, 3, 3), (1, 1), 16),        # depthwise, more padding than data
    ((0, 12, 6, 6), (12, 1, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1), 12),        # depthwise, empty batch
    ((2, 9, 11), (9, 1, 3), (2,), (1, 1), (1,), 9),                          # depthwise 1-d
    ((2, 8, 33, 40), (8, 8, 3, 3), (2, 1), (0, 1, 2, 0), (1, 1), 1),         # wide rows from 2x1 phases
    ((1, 6, 60, 30), (4, 6, 2, 7), (3, 1), (0, 3, 1, 3), (1, 1), 1),        # 3x1 phases, one without taps
    ((1, 10, 4, 5, 3), (10, 1, 3, 3, 2), (1, 2, 1), (1, 1, 0, 1, 1, 1), (1, 1, 1), 10),   # depthwise 3-d
    ((1, 6, 5, 33), (6, 1, 3, 3), (2, 2), (1, 1, 1, 1), (1, 1), 6),          # channel-last phases
    ((1, 4, 6, 40), (4, 1, 3, 3), (1, 2), (1, 2, 1, 2), (1, 3), 4),          # phases, dilation
]


def plan_for(x, w, strides, padding, dilation, groups):
    n = x.ndim - 2
    begins, ends = tuple(padding[:n]), tuple(padding[n:])
    lengths = tuple((x.shape[2 + i] + begins[i] + ends[i] - dilation[i] * (w.shape[2 + i] - 1) - 1) // strides[i] + 1
                    for i in range(n))
    depthwise = w.shape[1] == 1 and groups == x.shape[1] == w.shape[0]
    return conv_direct.conv_plan(x.shape[2:], w.shape[2:], tuple(strides), tuple(dilation), begins, ends,
                                 lengths, depthwise, w.shape[1], x.shape[1]), lengths


def methods_for(plan) -> list[str]:
    if plan.method.startswith("depthwise"):
        return ["depthwise", "depthwise_cl"]
    return ["wide", "compact", "strided"] + (["rows"] if plan.rows is not None else [])


@pytest.mark.parametrize("case", ENGINE_CASES, ids=lambda c: f"{c[0]}-{c[1]}-s{c[2]}-g{c[5]}")
@pytest.mark.parametrize("dtype", FLOATS)
def test_every_conv_method_matches_a_direct_convolution(case, dtype):
    data, weight, strides, padding, dilation, groups = case
    rng = np.random.default_rng(9)
    x, w, b = rand(rng, data, dtype), rand(rng, weight, dtype), rand(rng, (weight[0],), dtype)
    plan, lengths = plan_for(x, w, strides, padding, dilation, groups)
    want = conv64(x, w, strides, padding, dilation, groups)
    tol = {"float16": dict(rtol=5e-3, atol=5e-3), "float32": dict(rtol=1e-5, atol=1e-5),
           "float64": dict(rtol=1e-12, atol=1e-12)}[dtype]
    work = np.float32 if dtype == "float16" else dtype
    for method in methods_for(plan):
        for bias in (None, b) if dtype != "float16" else (None,):
            out = np.full((data[0], weight[0], *lengths), np.nan, dtype)
            conv_direct.run_conv(dataclasses.replace(plan, method=method), x.astype(work), w.astype(work),
                                 groups, out, None if bias is None else bias.astype(work))
            expected = want + (0 if bias is None else bias.astype(np.float64).reshape((-1,) + (1,) * len(lengths)))
            np.testing.assert_allclose(out.astype(np.float64), expected, err_msg=method, **tol)


@pytest.mark.parametrize("case", ENGINE_CASES[:11], ids=lambda c: f"{c[0]}-{c[1]}-s{c[2]}-g{c[5]}")
def test_conv_kernel_matches_onnxruntime(case):
    data, weight, strides, padding, dilation, groups = case
    rng = np.random.default_rng(10)
    x, w = rand(rng, data, "float32"), rand(rng, weight, "float32")
    want, = run_onnx("Conv", [x, w], dict(strides=list(strides), pads=list(padding), dilations=list(dilation),
                                          group=groups, kernel_shape=list(weight[2:])), backend="ort")
    got = run_kernel("nn.conv", x, w, strides=strides, padding=padding, dilation=dilation, groups=groups)
    assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_conv_plans_pick_the_methods_they_document():
    def method(x, w, s=1, p=1, groups=1):
        plan, _ = plan_for(np.empty(x), np.empty(w), (s, s), (p,) * 4, (1, 1), groups)
        return plan
    assert method((1, 32, 112, 112), (32, 1, 3, 3), groups=32).method == "depthwise"
    assert method((1, 960, 7, 7), (960, 1, 3, 3), groups=960).method == "depthwise_cl"
    assert method((1, 192, 28, 28), (192, 1, 3, 3), groups=192).method == "depthwise_cl"
    assert method((1, 144, 56, 56), (144, 1, 3, 3), groups=144).method == "depthwise"
    assert method((1, 16, 31, 48), (16, 1, 3, 3), groups=16).method == "depthwise_cl"   # a small plane
    assert method((1, 16, 256, 256), (16, 16, 3, 3)).method == "rows"
    assert method((1, 3, 256, 256), (16, 3, 3, 3)).method == "wide"              # too shallow to split
    assert method((1, 16, 128, 128), (16, 16, 3, 3), s=2).method == "wide"       # phases: no row split
    assert method((1, 16, 56, 56), (16, 16, 3, 3), s=2).method == "strided"      # 2^17 values: one copy
    assert method((1, 128, 28, 28), (128, 128, 3, 3)).method == "wide"
    assert method((1, 2048, 7, 7), (8, 2048, 3, 3)).method == "compact"      # wide rows would add 24%
    assert method((1, 512, 7, 7), (512, 512, 3, 3)).method == "strided"      # 2^17.8 values: one copy
    assert method((1, 24, 8, 12), (24, 24, 3, 3)).method == "strided"        # small: one copy for all taps
    assert method((1, 3, 61, 96), (16, 3, 7, 7), s=2, p=3).method == "strided"    # 49 taps, 2^18 values
    assert method((1, 3, 122, 192), (16, 3, 7, 7), s=2, p=3).method == "wide"     # 2^19.7 values
    one = method((1, 64, 56, 56), (64, 64, 1, 1), p=0)
    assert one.method == "compact" and one.source_is_input and len(one.taps) == 1
    strided = method((1, 64, 56, 56), (128, 64, 1, 1), s=2, p=0)
    assert strided.phases == 1 and not strided.source_is_input and strided.method == "strided"   # one copy
    assert method((1, 8, 16, 16), (8, 8, 3, 3), s=2).phases == 4
    # the strided method on wide rows: stride 1, padded, the GEMM's columns (rounded up to 8, read from
    # zero rows added below the padded plane) at most 1.5x the output's pixels (rounded up to 8)
    wide = method((1, 16, 16, 24), (16, 16, 3, 3)).strided.wide
    assert (wide.q, wide.columns, wide.padded) == (15 * 26 + 24, 416, (19, 26))
    wide = method((1, 8, 4, 4), (8, 8, 3, 3)).strided.wide
    assert (wide.q, wide.columns, wide.padded) == (3 * 6 + 4, 24, (7, 6))
    wide = method((1, 16, 2, 3), (16, 16, 3, 3)).strided.wide                   # 8 columns for 6 pixels
    assert (wide.q, wide.columns, wide.padded) == (8, 8, (4, 5))
    assert method((1, 16, 8, 1), (16, 16, 3, 3)).strided.wide is None            # 24 columns for 8 pixels
    assert method((1, 16, 16, 24), (16, 16, 3, 3), p=0).strided.wide is None
    stem = method((1, 3, 61, 96), (16, 3, 7, 7), s=2, p=3).strided.wide     # 12.25 taps a phase: phases
    assert stem.phases == (2, 2) and stem.plane == (34, 51) and stem.padded == (68, 102)
    assert method((1, 3, 61, 96), (16, 3, 4, 4), s=2).strided.wide.phases == (2, 2)    # 4 taps a phase
    assert method((1, 16, 16, 24), (24, 16, 3, 3), s=2).strided.wide is None     # 2.25: one copy
    assert method((1, 3, 61, 96), (16, 3, 4, 4), s=4, p=0).strided.wide is None   # 1


def test_conv_bias_is_bit_identical_to_conv_then_add():
    rng = np.random.default_rng(11)
    for data, weight, groups in [((1, 8, 40, 40), (8, 1, 3, 3), 8), ((1, 16, 32, 32), (8, 16, 3, 3), 1),
                                 ((1, 8, 6, 6), (8, 8, 3, 3), 1), ((1, 8, 9, 9), (16, 8, 1, 1), 1)]:
        x, w, b = rand(rng, data, "float32"), rand(rng, weight, "float32"), rand(rng, (weight[0],), "float32")
        fused = run_kernel("nn.conv_bias_act", x, w, b, padding=int(weight[2] > 1), groups=groups)
        conv = run_kernel("nn.conv", x, w, padding=int(weight[2] > 1), groups=groups)
        np.testing.assert_array_equal(fused, conv + b.reshape(-1, 1, 1))


def test_conv_reads_non_contiguous_inputs_and_weights():
    rng = np.random.default_rng(12)
    x = rand(rng, (1, 4, 30, 14), "float32")[:, :, ::2]                 # (1, 4, 15, 14), strided
    w = rand(rng, (4, 3, 3, 3), "float32").transpose(1, 0, 2, 3)        # (3, 4, 3, 3) view
    for padding in (0, 1):
        got = run_kernel("nn.conv", x, w, padding=padding)
        np.testing.assert_allclose(got, conv64(x, w, (1, 1), (padding,) * 4, (1, 1), 1), rtol=1e-5, atol=1e-5)


def test_the_workspace_is_reused_and_never_leaks_values_between_calls():
    rng = np.random.default_rng(13)
    big = rand(rng, (1, 8, 64, 64), "float32") * 1e6
    small = rand(rng, (1, 3, 9, 7), "float32")
    w_big, w_small = rand(rng, (8, 8, 3, 3), "float32"), rand(rng, (2, 3, 3, 3), "float32")
    run_kernel("nn.conv", big, w_big, padding=1)                        # leaves large values behind
    buffer = _workspace._WORKSPACE.buffers[0]
    got = run_kernel("nn.conv", small, w_small, padding=(2, 1, 0, 3), strides=2)
    assert _workspace._WORKSPACE.buffers[0] is buffer                   # reused, not reallocated
    np.testing.assert_allclose(got, conv64(small, w_small, (2, 2), (2, 1, 0, 3), (1, 1), 1), rtol=1e-5, atol=1e-5)
    _workspace.release_workspace()
    assert _workspace.workspace_bytes() == 0


def test_threads_get_their_own_workspace():
    rng = np.random.default_rng(14)
    cases = [(rand(rng, (1, 4, 33 + i, 31), "float32"), rand(rng, (5, 4, 3, 3), "float32")) for i in range(4)]
    want = [conv64(x, w, (1, 1), (1,) * 4, (1, 1), 1) for x, w in cases]
    errors = []

    def work(i):
        x, w = cases[i]
        for _ in range(20):
            out = np.empty((1, 5, *x.shape[2:]), np.float32)
            call_kernel("nn.conv", x, w, out=out, padding=1)
            if not np.allclose(out, want[i], rtol=1e-5, atol=1e-5):
                errors.append(i)
    run_in_threads(work, range(4))
    assert not errors


def test_nested_kernels_get_their_own_scratch():
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
    with _workspace.Scratch([((4, 4), np.float32)]) as (held,):
        held[:] = 7
        got = run_kernel("nn.conv", x, w, padding=1)                    # the next level's buffer
        assert np.all(held == 7)
        assert _workspace._WORKSPACE.depth == 1
    assert _workspace._WORKSPACE.depth == 0
    assert got[0, 0, 2, 2] == 18 and got[0, 0, 0, 0] == 8
    held = []
    for _ in range(_workspace.MAX_DEPTH):                                # too deep: private memory
        scratch = _workspace.Scratch([((4, 4), np.float32)])
        held.append((scratch, scratch.__enter__()[0]))
        held[-1][1][:] = len(held)
    np.testing.assert_array_equal(run_kernel("nn.conv", x, w, padding=1), got)
    for i, (scratch, array) in enumerate(reversed(held)):
        assert np.all(array == len(held) - i)
        scratch.__exit__(None, None, None)
    assert _workspace._WORKSPACE.depth == 0


# ---------------------------------------------------------------- clip and relu in one pass


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("bounds", [(0.0, 6.0), (None, 0.25), (-1.0, None), (1.0, -1.0), (float("nan"), 1.0)])
def test_clip_one_pass_matches_maximum_then_minimum(dtype, bounds):
    lo, hi = bounds
    x = np.concatenate([rand(np.random.default_rng(15), (50,), "float64") * 5,
                        [np.nan, np.inf, -np.inf, -0.0, 0.0, 6.0]]).astype(dtype)
    want = x
    if lo is not None:
        want = np.maximum(want, np.asarray(lo, dtype))
    if hi is not None:
        want = np.minimum(want, np.asarray(hi, dtype))
    np.testing.assert_array_equal(run_kernel("clip", x, min=lo, max=hi), want)


@pytest.mark.parametrize("dtype", FLOATS + ["int32"])
def test_relu_one_pass(dtype):
    x = (rand(np.random.default_rng(16), (3, 40), "float64") * 5).astype(dtype)
    if dtype != "int32":
        x[0, :3] = [np.nan, -np.inf, np.inf]
    np.testing.assert_array_equal(run_kernel("nn.relu", x), np.maximum(x, 0))


# ---------------------------------------------------------------- image.resize in float32


@pytest.mark.parametrize("mode, coord", [("linear", "half_pixel"), ("linear", "pytorch_half_pixel"),
                                         ("linear", "align_corners"), ("cubic", "half_pixel"),
                                         ("cubic", "asymmetric")])
@pytest.mark.parametrize("scales", [(2.0, 2.0), (1.5, 0.75), (3.0, 1.0)])
def test_float32_resize_stays_within_ulps_of_the_float64_path(mode, coord, scales):
    x = rand(np.random.default_rng(17), (1, 3, 9, 11), "float32")
    size = tuple(int(d * s) for d, s in zip(x.shape[2:], scales))
    attrs = dict(axes=(2, 3), scales=scales, method=mode, coordinate_transformation_mode=coord)
    got = run_kernel("image.resize", x, _shape(size), **attrs)
    out64 = np.empty(got.shape, np.float64)
    call_kernel("image.resize", x.astype(np.float64), size, out=out64, **attrs)
    assert ulps(got, out64, np.float32).max() <= 8 or np.abs(got - out64).max() < 1e-6
    want, = run_onnx("Resize", [x, None, np.array([1, 1, *scales], np.float32)],
                     dict(mode=mode, coordinate_transformation_mode=coord), opset=19)
    assert_close(got, want)


def _shape(size):
    from .test_kernels_registry import Shape
    return Shape(size)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32"])
def test_resize_passes_in_workspace_buffers_with_identity_axes_between(dtype):
    # four axes, two of them unchanged: the passes alternate between buffers,
    # an identity pass in between must not make a pass write what it reads
    rng = np.random.default_rng(18)
    x = (rand(rng, (2, 3, 5, 4), "float64") * 50).astype(dtype)
    size, scales = (2, 6, 5, 8), (1.0, 2.0, 1.0, 2.0)
    attrs = dict(axes=(0, 1, 2, 3), scales=scales, method="linear", coordinate_transformation_mode="half_pixel")
    got = run_kernel("image.resize", x, _shape(size), **attrs)
    want, = run_onnx("Resize", [x, None, np.array(scales, np.float32)],
                     dict(mode="linear", coordinate_transformation_mode="half_pixel"), opset=19)
    assert_close(got, want, **({"rtol": 1e-5, "atol": 1e-5} if dtype == "float32" else {}))
    again = run_kernel("image.resize", x, _shape(size), **attrs)      # the workspace holds old values now
    np.testing.assert_array_equal(again, got)


@pytest.mark.parametrize("block_columns", [1, 20, 1 << 20])
@pytest.mark.parametrize("case", [c for c in ENGINE_CASES if plan_for(np.empty(c[0]), np.empty(c[1]), *c[2:])[0].rows],
                         ids=lambda c: f"{c[0]}-{c[1]}-s{c[2]}-g{c[5]}")
def test_the_row_split_gemm_in_blocks_of_rows_with_a_fused_activation(monkeypatch, case, block_columns):
    """Blocks of one row, of a few and the whole plane give the direct convolution
    (float16 output rounded once), and the epilogue sees every output value once."""
    monkeypatch.setattr(conv_direct, "ROWS_BLOCK_COLUMNS", block_columns)
    data, weight, strides, padding, dilation, groups = case
    rng = np.random.default_rng(12)
    x, w, b = rand(rng, data, "float32"), rand(rng, weight, "float32"), rand(rng, (weight[0],), "float32")
    plan, lengths = plan_for(x, w, strides, padding, dilation, groups)
    plan = dataclasses.replace(plan, method="rows")
    want = conv64(x, w, strides, padding, dilation, groups) + b.astype(np.float64).reshape((-1,) + (1,) * len(lengths))
    seen = []

    def relu_once(part):
        seen.append(part.size)
        np.maximum(part, 0, out=part)
    out = np.full((data[0], weight[0], *lengths), np.nan, np.float32)
    conv_direct.run_conv(plan, x, w, groups, out, b, epilogue=relu_once)
    np.testing.assert_allclose(out, np.maximum(want, 0), rtol=1e-5, atol=1e-5)
    assert sum(seen) == out.size
    half = np.full(out.shape, np.nan, np.float16)
    conv_direct.run_conv(plan, x, w, groups, half, None)
    np.testing.assert_allclose(half.astype(np.float64), want - b.reshape((-1,) + (1,) * len(lengths)),
                               rtol=5e-3, atol=5e-3)


@pytest.mark.parametrize("shape", [(2, 16, 64, 60), (1, 32, 64, 70)])
def test_conv_bias_act_in_blocks_matches_onnxruntime_and_the_unfused_ops(monkeypatch, shape):
    """UNet-like 3x3 convs on the row-split GEMM, several blocks of rows: Conv +
    Relu as onnxruntime computes it, and bit for bit conv, add, relu unfused."""
    monkeypatch.setattr(conv_direct, "ROWS_BLOCK_COLUMNS", 256)
    rng = np.random.default_rng(13)
    x, w = rand(rng, shape, "float32"), rand(rng, (24, shape[1], 3, 3), "float32")
    b = rand(rng, (24,), "float32")
    plan, _ = plan_for(x, w, (1, 1), (1, 1, 1, 1), (1, 1), 1)
    assert plan.method == "rows" and conv_direct.rows_per_block(plan) < shape[2]
    conv, = run_onnx("Conv", [x, w, b], dict(pads=[1, 1, 1, 1], kernel_shape=[3, 3]), backend="ort")
    got = run_kernel("nn.conv_bias_act", x, w, b, padding=1, activation="relu")
    assert_close(got, np.maximum(conv, 0), rtol=1e-4, atol=1e-4)     # sums of up to 288 float32 products
    unfused = run_kernel("nn.conv", x, w, padding=1) + b.reshape(-1, 1, 1)
    np.testing.assert_array_equal(got, np.maximum(unfused, 0))


@pytest.mark.parametrize("op", ["sigmoid", "nn.silu"])
@pytest.mark.parametrize("shape", [(1, 5, 128), (7,), (), (0, 3), (2, 1, 3)], ids=str)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_specialized_sigmoid_and_silu_are_the_kernels(op, shape, dtype):
    """Per instruction, sigmoid and SiLU of a float32/float64 x of out's shape make the kernel's
    calls from x into out: its bits (infinities, NaN, signed zeros, tails that overflow exp), in
    place, for 0-d and empty tensors, and an x that broadcasts or a float16 one (the kernel)."""
    from relaxpack.runtime.kernels import get_kernel
    rng = np.random.default_rng(12)
    kernel = get_kernel(op).fn
    call = kernel.specialize_attrs({}, (False,))
    x = np.asarray(rng.standard_normal(shape) * 30, dtype)
    if x.size >= 6:
        x.reshape(-1)[:6] = [np.inf, -np.inf, np.nan, 0.0, -0.0, -100.0]
    with np.errstate(all="ignore"):
        want = np.empty(shape, dtype)
        kernel(x, out=want)
        got = np.empty(shape, dtype)
        call(x, out=got)
        np.testing.assert_array_equal(got, want)
        assert np.array_equal(np.signbit(got), np.signbit(want))
        inplace = x.copy()
        call(inplace, out=inplace)
        np.testing.assert_array_equal(inplace, want)
        if len(shape) == 3:
            row = x[:1]                                     # broadcast into out: the kernel
            want = np.empty(shape, dtype)
            kernel(np.broadcast_to(row, shape).copy(), out=want)
            call(row, out=got)
            np.testing.assert_array_equal(got, want)

"""Kernels that read their constants as read-only 0-d arrays (``kernels/_constants.py``): the same
bits and the same result dtype as the plain scalars they replace (NEP 50: a Python number is weak,
the 0-d array is of the data's own dtype), at the sizes and values where that could differ."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels._constants import FLOATS, ONE, ZERO, per_float_dtype
from relaxpack.runtime.kernels._math import CLIP
from relaxpack.runtime.kernels.activation import _RELU_BOUNDS, hard_sigmoid_into, hard_swish_into, silu_in_place
from relaxpack.runtime.kernels.elementwise import clip, sigmoid_in_place
from relaxpack.runtime.kernels.fused import activation_fn, apply_activation
from relaxpack.runtime.kernels.reduce import mean_runner

from .test_kernels_registry import run_kernel

DTYPES = ["float16", "float32", "float64"]
SIZES = [0, 1, 7, 160, 5000]
SPECIALS = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 3.0, -3.0, 6.0, 88.0, -88.0, 100.0, -100.0, 1e30, -1e30,
            np.inf, -np.inf, np.nan]


def values(dtype: str, size: int) -> np.ndarray:
    """``size`` values of ``dtype``: the special ones first, then a spread over [-12, 12]."""
    rng = np.random.default_rng(size)
    spread = rng.uniform(-12, 12, max(size - len(SPECIALS), 0))
    with np.errstate(over="ignore"):
        return np.concatenate([SPECIALS, spread])[:size].astype(dtype)


def assert_same_bits(actual: np.ndarray, expected: np.ndarray) -> None:
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    bits = f"u{actual.dtype.itemsize}"
    np.testing.assert_array_equal(actual.view(bits), expected.view(bits))


def test_the_constants_are_read_only_0d_arrays_of_each_float_dtype():
    for table, value in ((ZERO, 0), (ONE, 1), (per_float_dtype(1 / 6), 1 / 6)):
        assert set(table) == set(FLOATS)
        for dtype, constant in table.items():
            assert constant.shape == () and constant.dtype == dtype and not constant.flags.writeable
            assert constant.tobytes() == dtype.type(value).tobytes()
    with pytest.raises(ValueError):
        ONE[np.dtype(np.float32)][...] = 2


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_0d_operand_of_the_data_dtype_keeps_the_result_dtype_a_wider_one_would_not(dtype):
    """Why the tables are per dtype: a float64 0-d array promotes float32 data (a Python float
    does not), the data's own dtype keeps it, with the same bits."""
    x = values(dtype, 160)
    with np.errstate(all="ignore"):
        assert_same_bits(np.add(x, ONE[x.dtype]), np.add(x, 1))
        assert_same_bits(np.multiply(x, per_float_dtype(1 / 6)[x.dtype]), np.multiply(x, x.dtype.type(1 / 6)))
    if dtype != "float64":
        assert np.add(x, ONE[np.dtype(np.float64)]).dtype == np.float64


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_in_place_activations_are_the_scalar_formulas_bit_for_bit(dtype, size):
    x = values(dtype, size)
    kind = x.dtype.type
    with np.errstate(all="ignore"):
        silu_expected = x / (np.exp(-x) + 1)
        sigmoid_expected = np.divide(1, np.exp(-x) + 1)
        gate = np.clip(x * kind(1 / 6) + kind(0.5), kind(0), kind(1))
        swish_expected = x * gate
        hard_sigmoid_expected = np.clip(x * kind(0.2) + kind(0.5), kind(0), kind(1))
    for fn, expected in ((silu_in_place, silu_expected), (sigmoid_in_place, sigmoid_expected),
                         (lambda b: hard_swish_into(b, b), swish_expected),
                         (lambda b: hard_sigmoid_into(b, b, kind(0.2), kind(0.5)), hard_sigmoid_expected)):
        buf = x.copy()
        with np.errstate(all="ignore"):
            fn(buf)
        assert_same_bits(buf, expected)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dtype", DTYPES + ["int8", "int32", "int64"])
def test_relu_is_the_scalar_clip_bit_for_bit(dtype, size):
    x = values("float64", size)
    x = x.astype(dtype) if dtype.startswith("float") else np.nan_to_num(x).clip(-100, 100).astype(dtype)
    out = run_kernel("nn.relu", x)
    kind = x.dtype.type
    expected = np.clip(x, kind(0), kind(np.inf)) if dtype.startswith("float") else np.maximum(x, kind(0))
    assert_same_bits(out, expected)         # (-0.0 stays -0.0, as the clip the kernel always was)
    for bounds in _RELU_BOUNDS.values():
        assert all(b is None or (b.shape == () and not b.flags.writeable) for b in bounds)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name, attrs", [("nn.silu", {}), ("sigmoid", {}), ("nn.hard_swish", {}),
                                         ("nn.hard_sigmoid", {"alpha": 0.2, "beta": 0.5})])
def test_activation_kernels_keep_dtype_and_bits_of_the_float32_computation(name, attrs, dtype, size):
    """The kernels (float16 computed in float32 and rounded once) against the scalar formulas."""
    x = values(dtype, size)
    work = np.float64 if dtype == "float64" else np.float32
    w, kind = x.astype(work), work
    with np.errstate(all="ignore"):
        expected = {"nn.silu": lambda: w / (np.exp(-w) + 1), "sigmoid": lambda: np.divide(1, np.exp(-w) + 1),
                    "nn.hard_swish": lambda: w * np.clip(w * kind(1 / 6) + kind(0.5), kind(0), kind(1)),
                    "nn.hard_sigmoid": lambda: np.clip(w * kind(0.2) + kind(0.5), kind(0), kind(1))}[name]()
        if dtype == "float16" and name == "nn.hard_swish":     # the kernel's own low-float path
            gate = np.clip(w * (1 / 6) + 0.5, kind(0), kind(1))
            expected = w * gate
        if dtype == "float16" and name == "nn.hard_sigmoid":
            expected = np.clip(w * 0.2 + 0.5, kind(0), kind(1))
        out = run_kernel(name, x, **attrs)
    assert_same_bits(out, expected.astype(dtype))


@pytest.mark.parametrize("bounds", [(-0.5, 0.75), (None, 6.0), (0.0, None), (0.0, 6.0), (-1.0, None)])
@pytest.mark.parametrize("dtype", DTYPES + ["int32", "uint8"])
def test_a_fused_clip_activation_is_the_clip_kernel(dtype, bounds):
    """Made once per instruction (the specialized clip, its 0-d bounds per dtype): the generic
    kernel's result for every dtype (integers go to the kernel), empty arrays, the list form."""
    lo, hi = bounds
    act = activation_fn(["clip", lo, hi])
    for size in SIZES:
        x = values("float64", size)
        x = x.astype(dtype) if dtype.startswith("float") else np.nan_to_num(x).clip(0, 100).astype(dtype)
        expected = np.empty_like(x)
        clip(x, out=expected, min=lo, max=hi, saturate_nan=False)
        for run in (act, lambda out: apply_activation(out, ("clip", lo, hi))):
            out = x.copy()
            run(out)
            assert_same_bits(out, expected)


def test_clip_ufunc_with_0d_bounds_is_np_clip_on_specials():
    for dtype in DTYPES:
        x = values(dtype, 200)
        assert_same_bits(CLIP(x, ZERO[x.dtype], ONE[x.dtype]), np.clip(x, x.dtype.type(0), x.dtype.type(1)))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, axes", [((2, 3, 37), (2,)), ((1, 7, 5, 16), (1, 2)), ((2, 16, 2, 3), (2, 3)),
                                         ((1, 40, 50, 8), (1, 2)), ((3, 1), (1,))])
def test_a_mean_runner_divides_by_its_count_as_the_python_int_did(shape, axes, dtype):
    """The runner's 0-d count: the generic kernel's bits (it divides by the Python int)."""
    x = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    out = np.empty(tuple(1 if a in axes else d for a, d in enumerate(shape)), dtype)
    run = mean_runner(x, out, axes)
    assert run is not None
    run()
    assert_same_bits(out, run_kernel("mean", x, axis=axes, keepdims=True))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_an_average_pool_with_one_window_count_divides_by_it_as_the_numpy_scalar_did(dtype):
    x = np.random.default_rng(2).standard_normal((2, 3, 6, 10)).astype(dtype)
    got = run_kernel("nn.avg_pool", x, pool_size=(2, 2), strides=(2, 2), padding=(0, 0, 0, 0), dilation=(1, 1),
                     ceil_mode=False, count_include_pad=False, data_layout="NCHW")
    expected = x[..., 0::2, 0::2] + x[..., 0::2, 1::2]     # the taps in the kernel's order
    expected += x[..., 1::2, 0::2]
    expected += x[..., 1::2, 1::2]
    assert_same_bits(got, np.divide(expected, x.dtype.type(4)))

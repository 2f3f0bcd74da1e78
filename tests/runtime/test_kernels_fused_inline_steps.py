"""Steps a specialized fused chain makes without their kernel's Python frame (fused_specialized.py):
a float clip without NaN saturation of an earlier step's result calls the clip ufunc, a cast of
one is ``v[...] = s``, a bounds-free look-up along axis 0 is ``t.take(i, 0, v, "wrap")``. Bit for bit
the kernels' results (a quantizer's requantization and look-up, NaN, infinities, signed zeros,
bounds on one side, wrapping casts, empty arrays) with no warning; lookalikes keep the kernel."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from relaxpack.runtime.kernels import fused_specialized as fs
from relaxpack.runtime.kernels.fused_elementwise import compile_recipe
from relaxpack.runtime.kernels.fused_specialized import specialize

from .test_kernels_fused_elementwise import P, S, step, unfused

SPECIALS = [0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 254.5, 255.5, -128.5, 300.0, -300.0, 1e30, -1e30,
            np.inf, -np.inf, np.nan, 3e9, -3e9, 1e-45]

TABLE = (np.arange(256, dtype=np.float32) * 0.37 - 40).astype(np.float32)


def _x(dtype, n_random: int = 200) -> np.ndarray:
    rng = np.random.default_rng(3)
    with np.errstate(over="ignore"):        # (float16: 1e30 is inf)
        return np.concatenate([np.array(SPECIALS), rng.uniform(-400, 400, n_random)]).astype(dtype)


def _kinds(recipe) -> list:
    """What each step of ``recipe`` becomes: "direct", "clip", "cast", "take" or "kernel"."""
    steps, _ = compile_recipe(recipe)
    return ["direct" if fs._direct_ufunc(s) else "clip" if fs._bare_clip(s, steps) else
            "cast" if fs._inline_cast(s, steps) else "take" if fs._inline_take(s) else "kernel" for s in steps]


def _assert_same_bits(recipe, args, runs: int = 3):
    """The specialized call gives the unfused kernels' bits, on fresh and repeated arrays, with
    warnings as errors (the chain's casts of NaN and infinities run quietly)."""
    want = unfused(recipe, args)
    call = specialize(recipe)
    base = np.empty(want.size + 16, want.dtype)
    for k in range(runs):
        out = np.empty(want.shape, want.dtype) if k == 0 else base[:want.size].reshape(want.shape)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            call(*args, out=out)
        np.testing.assert_array_equal(out.view(f"u{out.itemsize}"), want.view(f"u{want.itemsize}"))


def _requantize(dtype: str, lo, hi) -> tuple:
    """``clip(round(x * s), lo, hi)``: a requantization's end."""
    return (step("multiply", [P(0), P(1)], dtype, inplace=[True, False]), step("round", [S(0)], dtype),
            step("clip", [S(1)], dtype, min=lo, max=hi, saturate_nan=False))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("lo, hi", [(0.0, 255.0), (-128.0, 127.0), (None, 6.0), (-3.0, None), (5.0, 2.0)])
def test_a_clip_of_a_step_calls_the_clip_ufunc(dtype, lo, hi):
    recipe = _requantize(dtype, lo, hi)
    assert _kinds(recipe) == ["direct", "direct", "clip"]
    x = _x(dtype)
    _assert_same_bits(recipe, (x, np.array(0.75, dtype)))
    _assert_same_bits(recipe, (x[:0], np.array(0.75, dtype)))                      # empty


@pytest.mark.parametrize("case, recipe", [
    ("NaN saturated", (step("round", [P(0)]), step("clip", [S(0)], min=0.0, max=255.0, saturate_nan=True))),
    ("a parameter's clip", (step("clip", [P(0)], min=0.0, max=255.0, saturate_nan=False),)),
    ("float16", (step("round", [P(0)], "float16"), step("clip", [S(0)], "float16", min=0.0, max=255.0,
                                                          saturate_nan=False))),
    ("no bound", (step("round", [P(0)]), step("clip", [S(0)], min=None, max=None, saturate_nan=False))),
])
def test_lookalike_clips_keep_the_kernel(case, recipe):
    assert _kinds(recipe)[-1] == "kernel", case
    dtype = recipe[-1][3]
    _assert_same_bits(recipe, (_x(dtype),))


@pytest.mark.parametrize("source, target", [("float32", "int32"), ("float32", "int64"), ("float32", "uint8"),
                                            ("float64", "int32"), ("float32", "float64"), ("float64", "float32"),
                                            ("int32", "int64"), ("int32", "float32"), ("int64", "int8")])
def test_a_cast_of_a_step_is_an_assignment(source, target):
    """NaN, infinities and values past the target type cast as the kernel casts them (numpy's
    unsafe cast: the same values), quietly. (A cast is never in place: FuseOps marks it so.)"""
    recipe = (step("negative", [P(0)], source), step("astype", [S(0)], target, inplace=[False], dtype=target))
    assert _kinds(recipe) == ["direct", "cast"]
    x = _x(source) if source.startswith("float") else \
        np.array([0, 1, -1, 127, 128, -129, 2 ** 31 - 1, -2 ** 31, 255, 256], source)
    _assert_same_bits(recipe, (x,))
    _assert_same_bits(recipe, (x[:0],))


def test_a_parameters_cast_keeps_the_kernel():
    """A parameter's dtype is known only at run time (an object array parses as ONNX Cast says)."""
    recipe = (step("astype", [P(0)], "float32", inplace=[False], dtype="float32"), step("negative", [S(0)]))
    assert _kinds(recipe) == ["kernel", "direct"]
    _assert_same_bits(recipe, (np.arange(-5, 5, dtype=np.int32),))


def _look_up(dtype: str = "float32", full: bool = True, **attrs) -> tuple:
    """A quantized value's look-up: ``take(T, int64(int32(clip(round(x) + 128, 0, 255))))``
    (``full``: the steps before the look-up have its result's shape)."""
    return (step("round", [P(0)], full=full), step("add", [S(0), P(1)], full=full, inplace=[True, False]),
            step("clip", [S(1)], full=full, min=0.0, max=255.0, saturate_nan=True),
            step("astype", [S(2)], "int32", full=full, inplace=[False], dtype="int32"),
            step("astype", [S(3)], "int64", full=full, inplace=[False], dtype="int64"),
            step("take", [P(2), S(4)], dtype, inplace=[False, False], **attrs))


def test_a_bounds_free_look_up_is_a_take_method_call():
    recipe = _look_up(axis=0, in_bounds=True)
    assert _kinds(recipe) == ["direct", "direct", "kernel", "cast", "cast", "take"]
    args = (_x("float32"), np.array(128.0, np.float32), TABLE)
    _assert_same_bits(recipe, args)
    _assert_same_bits(recipe, (args[0][:0], *args[1:]))                                    # empty
    # an integer table, and rows of a 2-d one (each index picks a row)
    _assert_same_bits(_look_up("int32", axis=0, in_bounds=True), (*args[:2], np.arange(256, dtype=np.int32) - 30))
    rows = np.stack([TABLE, -TABLE], axis=1)
    _assert_same_bits(_look_up(full=False, axis=0, in_bounds=True), (args[0][:20], args[1], rows))


@pytest.mark.parametrize("attrs", [dict(axis=0, in_bounds=False), dict(axis=-1, in_bounds=True)])
def test_other_look_ups_keep_the_kernel(attrs):
    """A Gather's take checks its indices (and says which is out of range); another axis is
    normalized by the kernel."""
    recipe = _look_up(**attrs)
    assert _kinds(recipe)[-1] == "kernel"
    _assert_same_bits(recipe, (_x("float32"), np.array(128.0, np.float32), TABLE))

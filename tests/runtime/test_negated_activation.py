"""negated_activation: SiLU and sigmoid of a buffer holding -y are the kernels' values of y, bit for
bit, at the edges of float32 and float64 (zeros, infinities, NaN, subnormals, the tails); the conv
runners' bound HardSwish and HardSigmoid are the kernels' too."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.fpstate import restore, silence
from relaxpack.runtime.kernels.activation import hard_sigmoid_in_place_fn, hard_swish_in_place_fn

from relaxpack.runtime.kernels.negated_activation import (negatable, negated, of_negated, silu_of_negated,
                                                          sigmoid_of_negated)

from .test_kernels_registry import run_kernel


def _edges(dtype) -> np.ndarray:
    info = np.finfo(dtype)
    special = [0.0, -0.0, np.inf, -np.inf, np.nan, info.tiny, -info.tiny, info.smallest_subnormal,
               -info.smallest_subnormal, info.max, -info.max, 1e-30, -1e-30, 88.7, -88.7, 89.0, -104.0,
               -745.2, 709.8, 1.0, -1.0, 20.0, -20.0]
    rng = np.random.default_rng(0)
    spread = rng.standard_normal(4000) * np.array([0.01, 1, 10, 100]).repeat(1000)
    return np.concatenate([np.array(special), spread]).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name,fn", [("silu", silu_of_negated), ("sigmoid", sigmoid_of_negated)])
def test_the_activation_of_the_negation_is_the_kernels(dtype, name, fn):
    y = _edges(dtype)
    with np.errstate(all="ignore"):
        want = run_kernel(f"nn.{name}" if name == "silu" else "sigmoid", y)
    assert of_negated(name) is fn
    for f in (fn, of_negated(name, dtype)):     # the plain function, one bound to the dtype
        got = -y
        with np.errstate(all="ignore"):         # (inf / inf warns as in the kernel's divide)
            f(got)
        np.testing.assert_array_equal(got, want)
        got = -y
        token = silence()                       # inside one (errors ignored already)
        try:
            f(got)
        finally:
            restore(token)
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_bound_hard_swish_and_hard_sigmoid_are_the_kernels(dtype):
    y = _edges(dtype)
    got = y.copy()
    with np.errstate(all="ignore"):             # (inf * 0 warns as in the kernels)
        hard_swish_in_place_fn(dtype)(got)
        np.testing.assert_array_equal(got, run_kernel("nn.hard_swish", y))
        got = y.copy()
        hard_sigmoid_in_place_fn(dtype, 0.2, 0.5)(got)
        np.testing.assert_array_equal(got, run_kernel("nn.hard_sigmoid", y, alpha=0.2, beta=0.5))


def test_what_may_be_negated():
    f32, f16 = np.ones(3, np.float32), np.ones(3, np.float16)
    assert negatable("silu", f32, None) and negatable("sigmoid", f32.astype(np.float64), f32)
    assert not negatable("relu", f32, None)
    assert not negatable("silu", f16, None)
    assert not negatable(("hard_sigmoid", 0.2, 0.5), f32, None)
    w, b = negated(f32, None)
    assert b is None and np.array_equal(w, -f32) and w is not f32

"""topk of a few values of one row (kernels/algorithm.py: ``_few_of_one_row``): the partition
and the sort of the candidates give what the full stable sort gives (values and indices, ties
by the lower index), against that sort and onnx's reference evaluator, for each dtype class,
both directions, ties at the k-th value, -0.0 and 0.0, k at the switch, and NaN (full sort)."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import algorithm

from .test_kernels_registry import run_onnx


def _topk(x, k, largest, axis=-1):
    shape = list(x.shape)
    shape[axis] = k
    values, indices = np.empty(shape, x.dtype), np.empty(shape, np.int64)
    algorithm.topk(x, out=(values, indices), k=k, axis=axis, largest=largest, sorted=1)
    return values, indices


def _both(x, k, largest, axis=-1):
    fast = _topk(x, k, largest, axis)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(algorithm, "_FEW", 10 ** 9)
        full = _topk(x, k, largest, axis)
    for a, b in zip(fast, full):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype
    return fast


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.uint8])
@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("k", [1, 7, 25])
def test_the_full_sort_and_the_reference(dtype, largest, k):
    rng = np.random.default_rng(k)
    x = rng.integers(0, 30, (1, 200)).astype(dtype)        # many ties, at the k-th value too
    values, indices = _both(x, k, largest)
    want_v, want_i = run_onnx("TopK", [x, np.array([k], np.int64)], {"largest": largest},
                              out_dtypes=[dtype, np.int64], n_outputs=2)
    np.testing.assert_array_equal(values, want_v)
    np.testing.assert_array_equal(indices, want_i)


@pytest.mark.parametrize("n,k", [(8, 1), (16, 2), (17, 2), (2304, 60), (100, 12), (100, 13)])
def test_at_and_around_the_switch(n, k):
    x = np.random.default_rng(n).standard_normal((n,)).astype(np.float32)
    x[::5] = 0.5                                             # a run of ties
    for largest in (0, 1):
        _both(x, k, largest, axis=0)
        _both(x.reshape(1, n, 1), k, largest, axis=1)


def test_signed_zeros_tie_by_index():
    x = np.array([0.0, -0.0, 1.0, -0.0, 0.0, -1.0, 2.0, -2.0] * 4, np.float32)
    values, indices = _both(x, 4, 1, axis=0)
    np.testing.assert_array_equal(indices, [6, 14, 22, 30])
    values, indices = _both(x, 3, 0, axis=0)
    np.testing.assert_array_equal(indices, [7, 15, 23])


def test_nan_rows_take_the_full_sort():
    x = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    x[10] = np.nan
    values, indices = _topk(x, 3, 1, axis=0)
    assert indices[0] == 10 and np.isnan(values[0])          # NaN counts as the largest, as before

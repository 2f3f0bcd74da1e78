"""The tree kernels as an instruction runs them on small batches (threshold ranks or leaf
masks, the post transform in place) against the leaf masks' scores and the plain post
transform, bit for bit: batches 0, 1, 7 and 64, odd feature counts, NaN and infinite inputs,
both missing-value tracks, binary and multi-class models, base values."""

import numpy as np
import pytest

from relaxpack.runtime.kernels import get_kernel
from relaxpack.runtime.kernels.ml import transform_scores
from relaxpack.runtime.kernels.tree_ensemble import pack_trees
from relaxpack.runtime.kernels.tree_gemm import bits_scores, gemm_plan

from .test_kernel_tree_ensemble import _random_forest

VALUES = np.array([-np.inf, -1.5, -0.0, 0.0, 0.5, 1.0, np.inf, np.nan, np.nextafter(1.0, 2.0), 2.5])


def _model(seed: int, features: int, targets: int):
    rng = np.random.default_rng(seed)
    nodes, thresholds, roots = _random_forest(rng, 11, features, (0, 1, 2, 3), VALUES)
    nodes[thresholds != thresholds, 4] = 1 - nodes[thresholds != thresholds, 4]   # both missing tracks
    walk, slots, root_slots = pack_trees(nodes, thresholds, roots)
    leaves = rng.standard_normal((len(nodes), targets))
    return rng, (walk, slots, root_slots, leaves, np.empty((0, 2)))


def _reference_scores(arrays, x, base) -> np.ndarray:
    plan = gemm_plan(*arrays[:4], 12)
    return bits_scores(plan, x.astype(np.float64)) + base if len(base) else bits_scores(plan, x.astype(np.float64))


@pytest.mark.parametrize("post_transform", ["NONE", "SOFTMAX", "LOGISTIC"])
@pytest.mark.parametrize("features", [3, 5, 7])
@pytest.mark.parametrize("base", [(), (0.5, -1.0, 0.25)], ids=["no_base", "base"])
def test_classifier_scores_and_transforms_bit_for_bit(post_transform, features, base):
    rng, arrays = _model(features, features, 3)
    attrs = dict(aggregate="SUM", base_values=base, post_transform=post_transform, max_depth=12)
    call = get_kernel("tree_ensemble_classifier").fn.specialize_attrs(attrs, (False,) + (True,) * 5)
    for n in (0, 1, 7, 64, 1, 7):
        x = rng.choice(VALUES, size=(n, features)).astype(np.float32)
        got = (np.empty(n, np.int64), np.empty((n, 3), np.float32))
        call(x, *arrays, out=got)
        scores = _reference_scores(arrays, x, base)
        np.testing.assert_array_equal(got[0], scores.argmax(axis=1))
        want = transform_scores(scores, post_transform).astype(np.float32)
        np.testing.assert_array_equal(got[1].view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("post_transform", ["NONE", "LOGISTIC"])
@pytest.mark.parametrize("base", [(), (-0.75,), (0.5, -1.0e-9)], ids=["no_base", "base", "two_targets"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_regressor_scores_bit_for_bit(post_transform, base, dtype):
    # (with base values and no transform the float64 sum is added straight into the output)
    rng, arrays = _model(1, 5, max(len(base), 1))
    attrs = dict(aggregate="SUM", base_values=base, post_transform=post_transform, max_depth=12, dtype=dtype)
    call = get_kernel("tree_ensemble").fn.specialize_attrs(attrs, (False,) + (True,) * 5)
    for n in (0, 1, 7, 64):
        x = rng.choice(VALUES, size=(n, 5)).astype(np.float32)
        got = np.empty((n, max(len(base), 1)), dtype)
        call(x, *arrays, out=got)
        want = transform_scores(_reference_scores(arrays, x, base), post_transform).astype(dtype)
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


def test_binary_classifier_as_the_unspecialized_kernel():
    """Weights for one class (gradient boosting's log-odds): the instruction's kernel and the
    plain one agree exactly on labels and probabilities."""
    kernel = get_kernel("tree_ensemble_classifier").fn
    rng, arrays = _model(2, 5, 2)
    arrays[3][:, 0] = np.nan
    attrs = dict(aggregate="SUM", base_values=(0.125,), post_transform="LOGISTIC", max_depth=12)
    call = kernel.specialize_attrs(attrs, (False,) + (True,) * 5)
    for n in (0, 1, 7, 64):
        x = rng.choice(VALUES, size=(n, 5)).astype(np.float32)
        got = (np.empty(n, np.int64), np.empty((n, 2), np.float32))
        want = (np.empty(n, np.int64), np.empty((n, 2), np.float32))
        call(x, *arrays, out=got)
        kernel(x, *arrays, out=want, **attrs)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1].view(np.uint32), want[1].view(np.uint32))

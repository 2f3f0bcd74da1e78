"""The one-sample walk in Python (kernels/tree_walk.py) against the threshold ranks it stands in
for at batch 1 and the leaf masks, bit for bit: one and three targets, NaN leaf weights, signed
zero weights (numpy's sums of them are +0.0), NaN and infinite inputs, single-leaf trees, float64
samples; and where it does not apply (tests other than <=, walks past MAX_STEPS)."""

import numpy as np
import pytest

from relaxpack.runtime.kernels import get_kernel
from relaxpack.runtime.kernels.tree_ensemble import _Model, pack_trees
from relaxpack.runtime.kernels.tree_gemm import bits_scores, gemm_plan
from relaxpack.runtime.kernels.tree_walk import MAX_STEPS, one_sample_scorer

from .test_kernel_tree_ensemble import _random_forest

VALUES = np.array([-np.inf, -1.5, -0.0, 0.0, 0.5, 1.0, np.inf, np.nan, np.nextafter(1.0, 2.0), 2.5])


def _ensemble(seed: int, targets: int, trees: int = 7, features: int = 5, modes=(0, 1, 2, 3)):
    rng = np.random.default_rng(seed)
    nodes, thresholds, roots = _random_forest(rng, trees, features, modes, VALUES)
    walk, slots, root_slots = pack_trees(nodes, thresholds, roots)
    return rng, walk, slots, root_slots


def _bits(x):
    return np.asarray(x, np.float64).view(np.uint64)


def _assert_same_sums(walk, slots, roots, leaves, rng, features=5, samples=300):
    score = one_sample_scorer(walk, slots, roots, leaves)
    assert score is not None
    masks = gemm_plan(walk, slots, roots, leaves, 12)
    ranks = _Model(walk, slots, roots, leaves, 12).score
    for _ in range(samples):
        x = rng.choice(VALUES, size=(1, features)).astype(np.float32)
        got = score(x)
        np.testing.assert_array_equal(_bits(got), _bits(bits_scores(masks, x.astype(np.float64))[0]))
        if ranks is not None:
            np.testing.assert_array_equal(_bits(got), _bits(ranks(x)[0]))


@pytest.mark.parametrize("targets", [1, 3])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sums_are_the_ranks_and_the_masks(targets, seed):
    rng, walk, slots, roots = _ensemble(seed, targets)
    leaves = rng.standard_normal((walk.shape[1] // 2, targets))
    leaves[rng.random(leaves.shape) < 0.3] = np.nan             # leaves without a weight for a target
    _assert_same_sums(walk, slots, roots, leaves, rng)


@pytest.mark.parametrize("targets", [1, 3])
def test_signed_zero_weights_sum_as_numpy_adds_them(targets):
    """Weights of +-0.0 (and NaN: 0.0) only: numpy's reduction over the trees starts from +0.0, so
    every sum is +0.0 (never -0.0, though every weight reached may be -0.0), as the walk's."""
    rng, walk, slots, roots = _ensemble(5, targets)
    leaves = rng.choice(np.array([-0.0, -0.0, -0.0, 0.0]), size=(walk.shape[1] // 2, targets))
    leaves[rng.random(leaves.shape) < 0.05] = np.nan
    _assert_same_sums(walk, slots, roots, leaves, rng)
    score = one_sample_scorer(walk, slots, roots, np.full_like(leaves, -0.0))
    assert not np.signbit(score(np.zeros((1, 5)))).any()


def test_a_float64_sample_and_single_leaf_trees():
    rng, walk, slots, roots = _ensemble(3, 2, trees=9)       # every third tree is one leaf
    leaves = rng.standard_normal((walk.shape[1] // 2, 2))
    score, masks = one_sample_scorer(walk, slots, roots, leaves), gemm_plan(walk, slots, roots, leaves, 12)
    for _ in range(100):
        x = rng.choice(VALUES, size=(1, 5))
        np.testing.assert_array_equal(_bits(score(x)), _bits(bits_scores(masks, x)[0]))


def _chains(trees: int):
    """``trees`` trees of three tests in a chain (``x0 <= 0``, then ``<= 1``, ``<= 2``; each held
    branch a leaf): leaves at depths 1, 2, 3, 3, a mean of 2.25 tests a tree."""
    rows, thresholds, roots = [], [], []
    for _ in range(trees):
        base = len(rows)
        roots.append(base)
        for depth in range(3):
            test = base + 2 * depth
            failed = test + 2 if depth < 2 else test + 2
            rows += [[0, 0, test + 1, failed, 0], [0, -1, test + 1, test + 1, 0]]
            thresholds += [float(depth), 0.0]
        rows.append([0, -1, len(rows), len(rows), 0])
        thresholds.append(0.0)
    return pack_trees(np.array(rows, np.int64), np.array(thresholds), np.array(roots, np.int64))


def test_equality_tests_and_long_walks_keep_the_ranks():
    _, walk, slots, roots = _ensemble(0, 1, modes=(0, 4, 5))
    assert walk.shape[0] == 4 and one_sample_scorer(walk, slots, roots, np.ones((walk.shape[1] // 2, 1))) is None
    assert MAX_STEPS == 72          # 32 chains: 72 tests, 33: 74.25
    for trees, taken in ((32, True), (33, False)):
        walk, slots, roots = _chains(trees)
        leaves = np.arange(walk.shape[1] // 2, dtype=np.float64)[:, None]
        score = one_sample_scorer(walk, slots, roots, leaves)
        assert (score is not None) is taken
        if taken:
            masks = gemm_plan(walk, slots, roots, leaves, 4)
            for v in (-1.0, 0.5, 1.5, 7.0, np.nan):
                x = np.full((1, 1), v)
                np.testing.assert_array_equal(_bits(score(x)), _bits(bits_scores(masks, x)[0]))


def test_the_instruction_walks_one_sample_and_ranks_more():
    """Through the specialized classifier: batch 1 by the walk, 7 by the ranks; both the masks'."""
    rng, walk, slots, roots = _ensemble(4, 3)
    leaves = rng.standard_normal((walk.shape[1] // 2, 3))
    attrs = dict(aggregate="AVERAGE", base_values=(0.5, -1.0, 0.25), post_transform="NONE", max_depth=12)
    call = get_kernel("tree_ensemble_classifier").fn.specialize_attrs(attrs, (False,) + (True,) * 5)
    masks = gemm_plan(walk, slots, roots, leaves, 12)
    for n in (1, 7, 1, 0):
        x = rng.choice(VALUES, size=(n, 5)).astype(np.float32)
        got = (np.empty(n, np.int64), np.empty((n, 3), np.float32))
        call(x, walk, slots, roots, leaves, np.empty((0, 2)), out=got)
        scores = bits_scores(masks, x.astype(np.float64)) / len(roots) + np.array([0.5, -1.0, 0.25])
        np.testing.assert_array_equal(got[0], scores.argmax(axis=1))
        np.testing.assert_array_equal(got[1].view(np.uint32), scores.astype(np.float32).view(np.uint32))


def test_a_sample_with_too_few_features_is_the_kernels_error():
    rng, walk, slots, roots = _ensemble(6, 1)
    leaves = rng.standard_normal((walk.shape[1] // 2, 1))
    assert one_sample_scorer(walk, slots, roots, leaves).features == 5
    attrs = dict(aggregate="SUM", base_values=(), post_transform="NONE", max_depth=12, dtype="float32")
    call = get_kernel("tree_ensemble").fn.specialize_attrs(attrs, (False,) + (True,) * 5)
    with pytest.raises(Exception, match="feature"):
        call(np.zeros((1, 3), np.float32), walk, slots, roots, leaves, np.empty((0, 2)), out=np.empty((1, 1), np.float32))


@pytest.mark.parametrize("post_transform", ["NONE", "SOFTMAX"])
@pytest.mark.parametrize("base", [(), (0.25, 0.25, -0.5)], ids=["no_base", "base"])
@pytest.mark.parametrize("weights", [(0.0, 1.0, 2.0, -0.0), (np.inf, -np.inf) + (1.0,) * 6],
                         ids=["ties", "nan_sums"])
def test_one_row_finished_in_python_is_the_kernels(post_transform, base, weights):
    """Labels and scores of one row (Python floats: the first maximum, the scores assigned; a NaN
    sum, from +inf and -inf weights, or a transform, back to the arrays) as the plain kernel's,
    with tied maxima and NaN rows really met."""
    kernel = get_kernel("tree_ensemble_classifier").fn
    rng, walk, slots, roots = _ensemble(8, 3)
    leaves = rng.choice(np.array(weights), size=(walk.shape[1] // 2, 3))
    leaves[:, 2] = leaves[:, 1]         # (two classes with the same sums: ties with any base)
    if np.isinf(weights).any():         # NaN in the later classes only: np.argmax picks it there
        leaves[:, 0] = rng.choice(np.array([0.5, 3.0]), size=leaves.shape[0])
    attrs = dict(aggregate="SUM", base_values=base, post_transform=post_transform, max_depth=12)
    call = kernel.specialize_attrs(attrs, (False,) + (True,) * 5)
    met, score = set(), one_sample_scorer(walk, slots, roots, leaves)
    for _ in range(200):
        x = rng.choice(VALUES, size=(1, 5)).astype(np.float32)
        got = (np.empty(1, np.int64), np.empty((1, 3), np.float32))
        want = (np.empty(1, np.int64), np.empty((1, 3), np.float32))
        with np.errstate(all="ignore"):
            call(x, walk, slots, roots, leaves, np.empty((0, 2)), out=got)
            kernel(x, walk, slots, roots, leaves, np.empty((0, 2)), out=want, **attrs)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1].view(np.uint32), want[1].view(np.uint32))
        with np.errstate(all="ignore"):
            row = np.array(score(x)) + np.array(base or (0.0,))
        met.add("nan" if np.isnan(row).any() else "tie" if (row == row.max()).sum() > 1 else "plain")
    assert {"tie", "plain"} <= met if weights[0] == 0.0 else ("nan" in met and len(met) > 1), met


def test_one_row_of_overflowing_sums_finished_in_python_is_the_kernels(monkeypatch):
    """Class sums that overflow to +-inf from finite weights (no NaN: the finite-sum test fails,
    each value is tested, the row stays in Python floats) and rows whose values are finite but
    whose total overflows: the plain kernel's labels and scores, both kinds of row met."""
    from relaxpack.runtime.kernels import tree_ensemble
    arrays = []                         # rows the arrays finished (none here: no NaN)
    finish = tree_ensemble._FINISH[tree_ensemble._classify]
    monkeypatch.setitem(tree_ensemble._FINISH, tree_ensemble._classify, lambda *a: arrays.append(1) or finish(*a))
    kernel = get_kernel("tree_ensemble_classifier").fn
    rng, walk, slots, roots = _ensemble(10, 3)
    leaves = rng.choice(np.array([1e308, -1e308, 0.5, 1.7e308]), size=(walk.shape[1] // 2, 3))
    attrs = dict(aggregate="SUM", base_values=(), post_transform="NONE", max_depth=12)
    call = kernel.specialize_attrs(attrs, (False,) + (True,) * 5)
    score, met = one_sample_scorer(walk, slots, roots, leaves), set()
    for _ in range(300):
        x = rng.choice(VALUES, size=(1, 5)).astype(np.float32)
        got = (np.empty(1, np.int64), np.empty((1, 3), np.float32))
        want = (np.empty(1, np.int64), np.empty((1, 3), np.float32))
        with np.errstate(all="ignore"):
            call(x, walk, slots, roots, leaves, np.empty((0, 2)), out=got)
            kernel(x, walk, slots, roots, leaves, np.empty((0, 2)), out=want, **attrs)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1].view(np.uint32), want[1].view(np.uint32))
        row = score(x)
        met.add("inf" if not all(np.isfinite(row)) else "overflow" if not np.isfinite(sum(row)) else "plain")
    assert {"inf", "overflow"} <= met and not arrays, (met, len(arrays))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("base", [(), (-0.75,)], ids=["no_base", "base"])
def test_one_regression_row_is_the_kernels(dtype, base):
    kernel = get_kernel("tree_ensemble").fn
    rng, walk, slots, roots = _ensemble(9, 1)
    leaves = rng.standard_normal((walk.shape[1] // 2, 1)) * 1e3
    attrs = dict(aggregate="AVERAGE", base_values=base, post_transform="NONE", max_depth=12, dtype=dtype)
    call = kernel.specialize_attrs(attrs, (False,) + (True,) * 5)
    for _ in range(100):
        x = rng.choice(VALUES, size=(1, 5)).astype(np.float32)
        got, want = np.empty((1, 1), dtype), np.empty((1, 1), dtype)
        call(x, walk, slots, roots, leaves, np.empty((0, 2)), out=got)
        kernel(x, walk, slots, roots, leaves, np.empty((0, 2)), out=want, **attrs)
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))


@pytest.mark.parametrize("extra", [1, 4])
def test_a_sample_wider_than_the_features_read(extra):
    """Columns past the last feature a node reads (the negated operands of >= and > tests sit after
    the features read, not after the sample's columns)."""
    rng, walk, slots, roots = _ensemble(10, 3, features=4, modes=(2, 3))     # >= and >: all read -x
    leaves = rng.standard_normal((walk.shape[1] // 2, 3))
    score, masks = one_sample_scorer(walk, slots, roots, leaves), gemm_plan(walk, slots, roots, leaves, 12)
    assert score.features <= 4
    for _ in range(200):
        x = rng.choice(VALUES, size=(1, 4 + extra)).astype(np.float32)
        np.testing.assert_array_equal(_bits(score(x)), _bits(bits_scores(masks, x.astype(np.float64))[0]))


def test_the_instruction_on_a_wider_sample_is_the_kernels():
    kernel = get_kernel("tree_ensemble").fn
    rng, walk, slots, roots = _ensemble(11, 1, features=4, modes=(0, 2, 3))
    leaves = rng.standard_normal((walk.shape[1] // 2, 1))
    attrs = dict(aggregate="SUM", base_values=(0.5,), post_transform="NONE", max_depth=12, dtype="float32")
    call = kernel.specialize_attrs(attrs, (False,) + (True,) * 5)
    for _ in range(100):
        x = rng.choice(VALUES, size=(1, 7)).astype(np.float32)
        got, want = np.empty((1, 1), np.float32), np.empty((1, 1), np.float32)
        call(x, walk, slots, roots, leaves, np.empty((0, 2)), out=got)
        kernel(x, walk, slots, roots, leaves, np.empty((0, 2)), out=want, **attrs)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))

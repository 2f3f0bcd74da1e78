"""A classifier's base values added by the threshold ranks' reduction (kernels/tree_ranks.py:
``rank_scorer(..., base)``, the byte form's base lane; tree_ensemble's specialized call): the base
row is gathered as one more tree's and added last, which is ``rank_scores(...) + base`` bit for
bit (NaN, infinities, signed zeros in samples, weights and base, weights over 16 decades, tree
counts that fill their words and that leave a lane, the uint16 lanes' last tree count, batches
0-64); the instruction's labels and probabilities as the plain kernel's at every batch."""

import numpy as np
import pytest

from relaxpack.runtime.kernels import get_kernel
from relaxpack.runtime.kernels.tree_ensemble import _Model, pack_trees
from relaxpack.runtime.kernels.tree_gemm import gemm_plan
from relaxpack.runtime.kernels.tree_ranks import _byte_scorer, rank_scorer, rank_scores

from .test_kernel_tree_ensemble import _shallow_forest

VALUES = np.array([-np.inf, -1.5, -0.0, 0.0, 0.5, 1.0, np.inf, np.nan, 2.0])


def _plan(trees: int, targets: int, seed: int, chain_depth: int = 7):
    rng = np.random.default_rng(seed)
    walk, slots, roots = pack_trees(*_shallow_forest(rng, trees, 4, VALUES, chain_depth))
    nodes = walk.shape[1] // 2
    leaves = rng.standard_normal((nodes, targets)) * 10.0 ** rng.integers(-8, 8, (nodes, 1))
    leaves[rng.random(leaves.shape) < 0.1] = -0.0
    return rng, (walk, slots, roots, leaves), gemm_plan(walk, slots, roots, leaves, 12)


@pytest.mark.parametrize("trees", [3, 4, 8, 9, 30])
@pytest.mark.parametrize("targets", [3, 4, 5])
def test_scores_with_the_base_lane_are_rank_scores_plus_base(trees, targets):
    """``rank_scorer(..., base)`` is ``rank_scores + base`` bit for bit, 4 and 8 trees filling their
    uint16 words (a word more for the base lane), the others leaving a lane free."""
    rng, _, plan = _plan(trees, targets, trees * 10 + targets)
    ranks, bits = plan.ranks, plan.bits
    for base in (rng.standard_normal(targets) * 1e3, np.array([-0.0] * targets), np.full(targets, 1e308)):
        score = rank_scorer(ranks, bits.weights, bits.offsets, base)
        assert score is not None
        for dtype in (np.float32, np.float64):
            for n in (0, 1, 2, 7, 16, 64):
                x = rng.choice(VALUES, size=(n, 5)).astype(dtype)
                want = rank_scores(ranks, bits.weights, bits.offsets, x) + base
                got = score(x)
                assert got.shape == want.shape == (n, targets)
                np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))


def test_no_base_lane_for_fewer_than_3_targets_larger_trees_or_a_full_lane():
    """One or two targets (a lone row's single-target sum is pairwise; binary models add their base
    elsewhere), a base of another width, trees of 9 leaves (no byte form), 256 trees (256 x 256
    does not fit a uint16 lane) and 257 (uint32 lanes, but 257 x 256 rows of 4 weights pass the
    table bound) keep no base lane; 255 trees (uint16) do."""
    for targets in (1, 2):
        _, _, plan = _plan(5, targets, targets)
        assert rank_scorer(plan.ranks, plan.bits.weights, plan.bits.offsets, np.zeros(targets)) is None
    _, _, plan = _plan(5, 3, 7)
    assert rank_scorer(plan.ranks, plan.bits.weights, plan.bits.offsets, np.zeros(4)) is None
    _, _, plan = _plan(5, 3, 8, chain_depth=8)
    assert rank_scorer(plan.ranks, plan.bits.weights, plan.bits.offsets, np.zeros(3)) is None
    for trees, fits in ((255, True), (256, False), (257, False)):
        rng, _, plan = _plan(trees, 3, trees)
        ranks, bits = plan.ranks, plan.bits
        base = np.array([0.5, -0.25, 3.0])
        form = _byte_scorer(ranks.union.table, bits.weights, bits.offsets, base)
        assert (form is not None) == (trees != 256)         # (257: uint32 lanes, 3 weights a row fit)
        score = rank_scorer(ranks, bits.weights, bits.offsets, base)
        assert (score is not None) == fits
        if fits:
            x = rng.choice(VALUES, size=(17, 5)).astype(np.float32)
            want = rank_scores(ranks, bits.weights, bits.offsets, x) + base
            np.testing.assert_array_equal(score(x).view(np.uint64), want.view(np.uint64))


@pytest.mark.parametrize("post_transform", ["SOFTMAX", "NONE", "LOGISTIC"])
@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE"])
def test_the_instruction_with_the_base_lane_is_the_plain_kernel(monkeypatch, post_transform, aggregate):
    """The specialized classifier (the walk's bound set to 0, so every batch takes the ranks) takes
    the base lane at every batch under SUM (2-15 rows copied contiguous for the softmax's row path;
    AVERAGE adds the base to the scores as before): the plain kernel's labels and probabilities bit
    for bit at each."""
    from relaxpack.runtime.kernels import tree_walk
    monkeypatch.setattr(tree_walk, "MAX_STEPS", 0)
    rng, (walk, slots, roots, leaves), _ = _plan(30, 3, 11)
    base = (0.005, -0.01, 0.005)
    attrs = dict(aggregate=aggregate, base_values=base, post_transform=post_transform, max_depth=12)
    kernel = get_kernel("tree_ensemble_classifier").fn
    call = kernel.specialize_attrs(attrs, (False,) + (True,) * 5)
    taken = []
    based = _Model.__init__

    def model(self, *args):
        based(self, *args)
        if self.based is not None:
            scorer = self.based
            self.based = lambda x: taken.append(x.shape[0]) or scorer(x)
    monkeypatch.setattr(_Model, "__init__", model)
    for n in (1, 2, 7, 15, 16, 64, 1):
        x = rng.choice(VALUES, size=(n, 5)).astype(np.float32)
        got = (np.empty(n, np.int64), np.empty((n, 3), np.float32))
        want = (np.empty(n, np.int64), np.empty((n, 3), np.float32))
        with np.errstate(all="ignore"):
            call(x, walk, slots, roots, leaves, np.empty((0, 2)), out=got)
            kernel(x, walk, slots, roots, leaves, np.empty((0, 2)), out=want, **attrs)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1].view(np.uint32), want[1].view(np.uint32))
    assert taken == ([1, 2, 7, 15, 16, 64, 1] if aggregate == "SUM" else [])

"""The tree walk against a plain per-sample walk of the node list, on trees
the converted models rarely reach: every branch mode, missing-value tracks,
NaN and infinite inputs and thresholds, inputs equal to a threshold,
single-node trees and deep unbalanced trees."""

import dataclasses

import numpy as np
import pytest

from relaxpack.runtime.kernels.tree_ensemble import LEAF, MODES, find_leaves, pack_trees

_TESTS = {0: lambda v, t: v <= t, 1: lambda v, t: v < t, 2: lambda v, t: v >= t, 3: lambda v, t: v > t,
          4: lambda v, t: v == t, 5: lambda v, t: v != t}


def _walk_one(row, nodes, thresholds, root, members) -> int:
    """ONNX's rule, one node at a time: NaN goes true if the node tracks missing values true."""
    at = root
    while nodes[at, 1] != LEAF:
        feature, mode, true, false, missing = nodes[at]
        v = row[feature]
        if mode == MODES["BRANCH_MEMBER"]:
            held = any(nd == at and val == v for nd, val in members)
        else:
            held = bool(_TESTS[mode](v, thresholds[at]))
        at = true if held or (np.isnan(v) and missing) else false
    return at


def _random_forest(rng, n_trees: int, n_features: int, modes, values):
    """Random trees (some a single leaf, some a long chain) as a node list."""
    rows, thresholds, roots = [], [], []
    for t in range(n_trees):
        shape = t % 3                   # 0: one leaf, 1: a random tree, 2: a chain leaning one way
        roots.append(len(rows))
        _grow(rng, rows, thresholds, n_features, modes, values, depth=0, max_depth={0: 0, 1: 5, 2: 12}[shape],
              chain=shape == 2)
    return np.array(rows, np.int64), np.array(thresholds), np.array(roots, np.int64)


def _grow(rng, rows, thresholds, n_features, modes, values, depth, max_depth, chain) -> int:
    me = len(rows)
    rows.append(None)
    thresholds.append(0.0)
    if depth >= max_depth or (not chain and depth > 0 and rng.random() < 0.3):
        rows[me] = [0, LEAF, me, me, 0]
        return me
    mode = int(rng.choice(modes))
    thresholds[me] = float(rng.choice(values))
    left = _grow(rng, rows, thresholds, n_features, modes, values, depth + 1, max_depth, chain)
    right = _grow(rng, rows, thresholds, n_features, modes, values, depth + 1, 0 if chain else max_depth, chain)
    true, false = (left, right) if rng.random() < 0.5 else (right, left)
    rows[me] = [int(rng.integers(n_features)), mode, true, false, int(rng.random() < 0.5)]
    return me


@pytest.mark.parametrize("modes", [(0,), (1,), (2,), (3,), (0, 1, 2, 3), (4, 5), (0, 1, 2, 3, 4, 5)],
                         ids=["leq", "lt", "gte", "gt", "ordered", "eq_neq", "all"])
@pytest.mark.parametrize("seed", [0, 1])
def test_walk_matches_the_node_rule(modes, seed):
    rng = np.random.default_rng(seed)
    values = np.array([-np.inf, -1.5, -0.0, 0.0, 0.5, 1.0, np.inf, np.nan, np.nextafter(1.0, 2.0)])
    nodes, thresholds, roots = _random_forest(rng, 12, 3, modes, values[:-1] if 4 in modes else values)
    nodes[thresholds != thresholds, 4] = 1 - nodes[thresholds != thresholds, 4]   # NaN thresholds both ways
    x = rng.choice(values, size=(64, 3)).astype(np.float32)
    depth = 12
    got = find_leaves(x, *pack_trees(nodes, thresholds, roots), np.empty((0, 2)), depth)
    expected = [[_walk_one(row, nodes, thresholds, r, ()) for r in roots] for row in x.astype(np.float64)]
    np.testing.assert_array_equal(got, expected)


def test_walk_with_set_membership_and_nan():
    member = MODES["BRANCH_MEMBER"]
    # tree 0: x0 in {1, 3} ? leaf 1 : leaf 2, NaN goes true; tree 1: x0 in {2} ? leaf 4 : leaf 5
    nodes = np.array([[0, member, 1, 2, 1], [0, LEAF, 1, 1, 0], [0, LEAF, 2, 2, 0],
                      [0, member, 4, 5, 0], [0, LEAF, 4, 4, 0], [0, LEAF, 5, 5, 0]])
    members = np.array([[0, 1.0], [0, 3.0], [3, 2.0]])
    thresholds = np.zeros(6)
    x = np.array([[1.0], [2.0], [3.0], [np.nan]])
    got = find_leaves(x, *pack_trees(nodes, thresholds, np.array([0, 3])), members, 1)
    expected = [[_walk_one(row, nodes, thresholds, r, members.tolist()) for r in (0, 3)] for row in x]
    assert got.tolist() == expected == [[1, 5], [2, 4], [1, 5], [1, 5]]


def test_float64_inputs_keep_their_precision():
    # x just above the float32 threshold: float64 compares it as it is
    nodes = np.array([[0, MODES["BRANCH_LT"], 1, 2, 0], [0, LEAF, 1, 1, 0], [0, LEAF, 2, 2, 0]])
    x = np.array([[1.0], [np.nextafter(1.0, 2.0)], [np.nextafter(1.0, 0.0)]])
    got = find_leaves(x, *pack_trees(nodes, np.array([1.0, 0, 0]), np.array([0])), np.empty((0, 2)), 1)
    assert got.ravel().tolist() == [2, 2, 1]


# ---------------------------------------------------------------- products (tree_gemm.py)


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE"])
@pytest.mark.parametrize("modes", [(0,), (0, 1, 2, 3), (0, 1, 2, 3, 4, 5)], ids=["leq", "ordered", "all"])
@pytest.mark.parametrize("seed", [0, 1])
def test_products_score_as_the_walk(modes, seed, aggregate):
    """The instruction's specialized kernel (products on small batches, the walk otherwise or for ==
    tests) gives the walk's scores: NaN and infinite inputs and thresholds, missing-value tracks,
    chains and single-leaf trees, leaves without a weight for some classes, every batch size."""
    from relaxpack.runtime.kernels import get_kernel
    from relaxpack.runtime.kernels.tree_ensemble import aggregate_leaves, tree_ensemble_classifier
    from relaxpack.runtime.kernels.tree_gemm import gemm_plan
    rng = np.random.default_rng(seed)
    values = np.array([-np.inf, -1.5, -0.0, 0.0, 0.5, 1.0, np.inf, np.nan, np.nextafter(1.0, 2.0)])
    nodes, thresholds, roots = _random_forest(rng, 12, 3, modes, values[:-1] if 4 in modes else values)
    nodes[thresholds != thresholds, 4] = 1 - nodes[thresholds != thresholds, 4]
    walk, slots, root_slots = pack_trees(nodes, thresholds, roots)
    leaves = rng.standard_normal((len(nodes), 3))
    leaves[rng.random(leaves.shape) < 0.2] = np.nan
    members = np.empty((0, 2))
    assert (gemm_plan(walk, slots, root_slots, leaves, 12) is None) == (4 in modes)
    attrs = dict(aggregate=aggregate, base_values=(0.5, -1.0, 0.25), post_transform="NONE", max_depth=12)
    call = get_kernel("tree_ensemble_classifier").fn.specialize_attrs(attrs, (False,) + (True,) * 5)
    for n in (1, 7, 32, 0, 1000, 3):
        x = rng.choice(values, size=(n, 3)).astype(np.float32)
        got = (np.empty(n, np.int64), np.empty((n, 3), np.float32))
        want = (np.empty(n, np.int64), np.empty((n, 3), np.float32))
        call(x, walk, slots, root_slots, leaves, members, out=got)
        tree_ensemble_classifier(x, walk, slots, root_slots, leaves, members, out=want, **attrs)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_allclose(got[1], want[1], rtol=1e-6, atol=1e-6)
        exact = aggregate_leaves(find_leaves(x, walk, slots, root_slots, members, 12), leaves, aggregate)
        np.testing.assert_allclose(got[1], (exact + [0.5, -1.0, 0.25]).astype(np.float32), rtol=1e-6, atol=1e-6)


def test_products_leave_errors_to_the_walk():
    """A tree deeper than declared and a node reading a feature the input lacks: the walk's errors."""
    from relaxpack.errors import ExecutionError
    from relaxpack.runtime.kernels import get_kernel
    nodes = np.array([[0, 0, 1, 2, 0], [1, 0, 3, 4, 0], [0, LEAF, 2, 2, 0], [0, LEAF, 3, 3, 0], [0, LEAF, 4, 4, 0]])
    walk, slots, roots = pack_trees(nodes, np.zeros(5), np.array([0]))
    leaves = np.ones((5, 1))
    for depth, x, match in [(1, np.zeros((2, 2), np.float32), "deeper than its declared depth"),
                            (2, np.zeros((2, 1), np.float32), "reads feature 1 of 1")]:
        call = get_kernel("tree_ensemble").fn.specialize_attrs(
            dict(aggregate="SUM", base_values=(), post_transform="NONE", max_depth=depth, dtype="float32"),
            (False,) + (True,) * 5)
        with pytest.raises(ExecutionError, match=match):
            call(x, walk, slots, roots, leaves, np.empty((0, 2)), out=np.empty((2, 1), np.float32))


# ---------------------------------------------------------------- leaf masks (tree_gemm.bits_scores)


@pytest.mark.parametrize("modes", [(0,), (0, 1, 2, 3)], ids=["leq", "ordered"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_leaf_masks_score_as_the_products_bit_for_bit(modes, seed):
    """The masks reach the products' leaves and sum their weights in the same order: the same
    float64 scores, NaN and infinite inputs and thresholds, missing-value tracks, single-leaf trees,
    inputs with more columns than the trees read, every batch size (empty included)."""
    from relaxpack.runtime.kernels.tree_gemm import bits_scores, gemm_plan, gemm_scores
    rng = np.random.default_rng(seed)
    values = np.array([-np.inf, -1.5, -0.0, 0.0, 0.5, 1.0, np.inf, np.nan, np.nextafter(1.0, 2.0)])
    nodes, thresholds, roots = _random_forest(rng, 12, 3, modes, values)
    nodes[thresholds != thresholds, 4] = 1 - nodes[thresholds != thresholds, 4]
    walk, slots, root_slots = pack_trees(nodes, thresholds, roots)
    leaves = rng.standard_normal((len(nodes), 2))
    leaves[rng.random(leaves.shape) < 0.2] = np.nan
    plan = gemm_plan(walk, slots, root_slots, leaves, 12)
    assert plan.bits is not None
    for n in (0, 1, 7, 64):
        for columns in (3, 5):
            x = rng.choice(values, size=(n, columns)).astype(np.float32 if n % 2 else np.float64)
            got, want = bits_scores(plan, x), gemm_scores(plan, x)
            assert got.shape == want.shape == (n, 2)
            np.testing.assert_array_equal(got, want)
            leaves_reached = find_leaves(x, walk, slots, root_slots, np.empty((0, 2)), 12)
            np.testing.assert_allclose(got, np.nansum(leaves[leaves_reached], axis=1), rtol=1e-12)


def test_trees_of_more_than_64_leaves_keep_the_products():
    """A tree with 65 leaves has no masks (one uint64 per node); its plan keeps the products."""
    from relaxpack.runtime.kernels.tree_gemm import gemm_plan
    rows, thresholds = [], []
    _grow(np.random.default_rng(0), rows, thresholds, 2, (0,), np.array([0.5]), 0, 64, chain=True)
    nodes, t = np.array(rows, np.int64), np.array(thresholds)
    walk, slots, root_slots = pack_trees(nodes, t, np.array([0]))
    plan = gemm_plan(walk, slots, root_slots, np.ones((len(nodes), 1)), 64)
    assert plan is not None and plan.paths_t.shape[1] == 65 and plan.bits is None


# ---------------------------------------------------------------- threshold ranks (tree_ranks.py)


@pytest.mark.parametrize("modes", [(0,), (1,), (2,), (3,), (0, 1, 2, 3)], ids=["leq", "lt", "gte", "gt", "ordered"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_threshold_ranks_score_as_the_leaf_masks_bit_for_bit(modes, seed):
    """One count per feature reaches the masks' leaves: the same float64 scores for float32,
    float64 and integer inputs, NaN and infinite inputs and thresholds (both missing-value
    tracks), thresholds between two float32 values, inputs equal to a threshold or just beside
    it, single-leaf trees, more columns than the trees read, every batch size (empty included)."""
    from relaxpack.runtime.kernels.tree_gemm import bits_scores, gemm_plan
    from relaxpack.runtime.kernels.tree_ranks import rank_scores
    rng = np.random.default_rng(seed)
    between = float(np.float32(0.5)) + 2.0 ** -30        # no float32 equals it
    values = np.array([-np.inf, -1.5, -0.0, 0.0, 0.5, between, 1.0, np.inf, np.nan, np.nextafter(1.0, 2.0),
                       float(np.nextafter(np.float32(0.5), np.float32(1))), -between, 3.0])
    nodes, thresholds, roots = _random_forest(rng, 15, 4, modes, values)
    nodes[thresholds != thresholds, 4] = 1 - nodes[thresholds != thresholds, 4]
    walk, slots, root_slots = pack_trees(nodes, thresholds, roots)
    leaves = rng.standard_normal((len(nodes), 3))
    leaves[rng.random(leaves.shape) < 0.2] = np.nan
    plan = gemm_plan(walk, slots, root_slots, leaves, 12)
    assert plan.bits is not None and plan.ranks is not None and plan.ranks.union is not None
    by_counts = dataclasses.replace(plan.ranks, union=None)       # the comparisons' form
    for n in (0, 1, 2, 7, 64):
        for columns in (4, 6):
            for dtype in (np.float32, np.float64, np.int32):
                x = rng.choice(values[:-1] if dtype == np.int32 else values, size=(n, columns))
                x = np.nan_to_num(x, posinf=7, neginf=-7).astype(dtype) if dtype == np.int32 else x.astype(dtype)
                want = bits_scores(plan, x.astype(np.float64))
                for ranks in (plan.ranks, by_counts):
                    got = rank_scores(ranks, plan.bits.weights, plan.bits.offsets, x)
                    assert got.shape == want.shape == (n, 3)
                    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("features", [(1, 3), (0, 2), (0, 1)])
def test_threshold_ranks_of_some_features_only(features):
    """Trees reading only some columns (in the union form: the used ones gathered, or a leading
    run of them sliced) score as the masks, NaN and infinities included."""
    from relaxpack.runtime.kernels.tree_gemm import bits_scores, gemm_plan
    from relaxpack.runtime.kernels.tree_ranks import rank_scores
    rng = np.random.default_rng(sum(features))
    values = np.array([-np.inf, -1.5, -0.0, 0.0, 0.5, 1.0, np.inf, np.nan, 2.0])
    nodes, thresholds, roots = _random_forest(rng, 9, 2, (0, 1, 2, 3), values)
    nodes[:, 0] = np.array(features)[nodes[:, 0]]
    walk, slots, root_slots = pack_trees(nodes, thresholds, roots)
    leaves = rng.standard_normal((len(nodes), 2))
    plan = gemm_plan(walk, slots, root_slots, leaves, 12)
    union = plan.ranks.union
    assert (type(union.columns) is int) == (features == (0, 1))
    for n in (0, 1, 7, 64):
        x = rng.choice(values, size=(n, 5)).astype(np.float32)
        want = bits_scores(plan, x.astype(np.float64))
        for ranks in (plan.ranks, dataclasses.replace(plan.ranks, union=None)):
            np.testing.assert_array_equal(rank_scores(ranks, plan.bits.weights, plan.bits.offsets, x), want)


def test_threshold_ranks_keep_the_comparisons_when_the_union_table_is_too_large(monkeypatch):
    from relaxpack.runtime.kernels import tree_ranks
    nodes, thresholds, roots = _random_forest(np.random.default_rng(0), 6, 3, (0,), np.array([0.5, 1.0, 2.0]))
    walk, slots, root_slots = pack_trees(nodes, thresholds, roots)
    cuts = [np.array([0.5, np.inf]), np.array([1.0, 2.0, np.inf])]
    tables = [np.zeros((3, 6), np.uint64), np.zeros((4, 6), np.uint64)]
    assert tree_ranks.union_tables([0, 2], cuts, tables) is not None
    monkeypatch.setattr(tree_ranks, "MAX_TABLE_VALUES", 2 * 5 * 6 - 1)       # two features x 5 positions x 6
    assert tree_ranks.union_tables([0, 2], cuts, tables) is None


def test_threshold_ranks_give_way_to_the_masks_when_too_large(monkeypatch):
    from relaxpack.runtime.kernels import tree_ranks
    from relaxpack.runtime.kernels.tree_gemm import gemm_plan
    nodes, thresholds, roots = _random_forest(np.random.default_rng(0), 6, 3, (0,), np.array([0.5, 1.0, 2.0]))
    walk, slots, root_slots = pack_trees(nodes, thresholds, roots)
    assert gemm_plan(walk, slots, root_slots, np.ones((len(nodes), 1)), 12).ranks is not None
    monkeypatch.setattr(tree_ranks, "MAX_TABLE_VALUES", 8)
    plan = gemm_plan(walk, slots, root_slots, np.ones((len(nodes), 1)), 12)
    assert plan.bits is not None and plan.ranks is None


def test_batches_take_the_ranks_while_their_extra_work_is_small():
    from relaxpack.runtime.kernels.tree_gemm import gemm_plan
    from relaxpack.runtime.kernels.tree_ranks import RANKS_MAX_EXTRA, use_ranks
    nodes, thresholds, roots = _random_forest(np.random.default_rng(3), 9, 3, (0,), np.array([0.5, 1.0, 2.0]))
    walk, slots, root_slots = pack_trees(nodes, thresholds, roots)
    plan = gemm_plan(walk, slots, root_slots, np.ones((len(nodes), 1)), 12)
    ranks = plan.ranks
    assert ranks.extra == ranks.values.size + ranks.starts.size * ranks.table.shape[1] - plan.bits.column.size
    assert not use_ranks(None, 1) and use_ranks(ranks, 0)
    if ranks.extra > 0:
        most = RANKS_MAX_EXTRA // ranks.extra
        assert use_ranks(ranks, most) and not use_ranks(ranks, most + 1)
    else:
        assert use_ranks(ranks, 1 << 20)


@pytest.mark.parametrize("targets", [1, 2, 3, 4])
def test_a_bound_rank_scorer_scores_as_rank_scores(targets):
    """rank_scorer (what an instruction keeps; three targets gather from weights padded to four
    columns) gives rank_scores' bits at every batch size, empty included, and without the
    union tables (it then calls rank_scores)."""
    from relaxpack.runtime.kernels.tree_gemm import gemm_plan
    from relaxpack.runtime.kernels.tree_ranks import rank_scorer, rank_scores
    rng = np.random.default_rng(targets)
    values = np.array([-np.inf, -1.5, -0.0, 0.0, 0.5, 1.0, np.inf, np.nan, 2.0])
    nodes, thresholds, roots = _random_forest(rng, 9, 3, (0, 1, 2, 3), values)
    walk, slots, root_slots = pack_trees(nodes, thresholds, roots)
    leaves = rng.standard_normal((len(nodes), targets)) * 10.0 ** rng.integers(-8, 8, (len(nodes), 1))
    plan = gemm_plan(walk, slots, root_slots, leaves, 12)
    for ranks in (plan.ranks, dataclasses.replace(plan.ranks, union=None)):
        score = rank_scorer(ranks, plan.bits.weights, plan.bits.offsets)
        for n in (0, 1, 7, 64):
            x = rng.choice(values, size=(n, 4)).astype(np.float32)
            got, want = score(x), rank_scores(ranks, plan.bits.weights, plan.bits.offsets, x)
            assert got.shape == want.shape == (n, targets)
            np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))


def _assert_scores_as_rank_scores(score, ranks, bits, rng, values, batches, features):
    """``score`` gives rank_scores' bits and shape on random rows of ``values`` at each batch size."""
    from relaxpack.runtime.kernels.tree_ranks import rank_scores
    for n in batches:
        x = rng.choice(values, size=(n, features)).astype(np.float32)
        got, want = score(x), rank_scores(ranks, bits.weights, bits.offsets, x)
        assert got.shape == want.shape == (n, bits.weights.shape[1])
        np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))


def _shallow_forest(rng, n_trees: int, n_features: int, values, chain_depth: int = 7):
    """Trees of at most ``chain_depth + 1`` leaves: single leaves, random trees of depth 3, chains."""
    rows, thresholds, roots = [], [], []
    for t in range(n_trees):
        shape = t % 3
        roots.append(len(rows))
        _grow(rng, rows, thresholds, n_features, (0, 1, 2, 3), values, depth=0,
              max_depth={0: 0, 1: 3, 2: chain_depth}[shape], chain=shape == 2)
    rows = np.array(rows, np.int64)
    thresholds = np.array(thresholds)
    rows[thresholds != thresholds, 4] = 1 - rows[thresholds != thresholds, 4]     # both missing tracks
    return rows, thresholds, np.array(roots, np.int64)


@pytest.mark.parametrize("trees", [2, 8, 9, 20])
@pytest.mark.parametrize("targets", [1, 3, 4])
@pytest.mark.parametrize("chain_depth", [7, 8], ids=["8_leaves", "9_leaves"])
def test_trees_of_at_most_8_leaves_score_by_bytes_as_rank_scores(trees, targets, chain_depth):
    """Trees of at most 8 leaves pack 8 to a uint64 word and index their weights by the byte left;
    one more leaf keeps the bit counts. Both give rank_scores' bits (NaN, infinities, signed
    zeros, weights over 16 decades, tree counts below, at and past a multiple of 8, batches 0-64)."""
    from relaxpack.runtime.kernels.tree_gemm import gemm_plan
    from relaxpack.runtime.kernels.tree_ranks import _byte_scorer, rank_scorer
    rng = np.random.default_rng(trees * 10 + targets + chain_depth)
    values = np.array([-np.inf, -1.5, -0.0, 0.0, 0.5, 1.0, np.inf, np.nan, 2.0])
    walk, slots, root_slots = pack_trees(*_shallow_forest(rng, trees, 4, values, chain_depth))
    nodes = walk.shape[1] // 2
    leaves = rng.standard_normal((nodes, targets)) * 10.0 ** rng.integers(-8, 8, (nodes, 1))
    leaves[rng.random(leaves.shape) < 0.1] = -0.0
    plan = gemm_plan(walk, slots, root_slots, leaves, 12)
    ranks, bits = plan.ranks, plan.bits
    byte_form = _byte_scorer(ranks.union.table, bits.weights, bits.offsets)
    assert (byte_form is not None) == (chain_depth == 7 or trees < 3)
    score = rank_scorer(ranks, bits.weights, bits.offsets)
    _assert_scores_as_rank_scores(score, ranks, bits, rng, values, (0, 1, 2, 7, 64), 5)


@pytest.mark.parametrize("trees", [255, 256, 257])
def test_byte_lanes_hold_the_tree_number_up_to_256_trees_in_uint16_then_uint32(trees):
    """The byte form's lane holds ``256 t + mask``: uint16 lanes while the tree number fits their
    high byte (256 trees), uint32 from 257; both give rank_scores' bits."""
    from relaxpack.runtime.kernels.tree_gemm import gemm_plan
    from relaxpack.runtime.kernels.tree_ranks import _byte_scorer, rank_scorer
    rng = np.random.default_rng(trees)
    values = np.array([-np.inf, -1.5, -0.0, 0.0, 0.5, 1.0, np.inf, np.nan, 2.0])
    walk, slots, root_slots = pack_trees(*_shallow_forest(rng, trees, 4, values))
    leaves = rng.standard_normal((walk.shape[1] // 2, 1))
    plan = gemm_plan(walk, slots, root_slots, leaves, 12)
    ranks, bits = plan.ranks, plan.bits
    byte_form = _byte_scorer(ranks.union.table, bits.weights, bits.offsets)
    assert byte_form[2] == (np.uint16 if trees <= 256 else np.uint32)
    score = rank_scorer(ranks, bits.weights, bits.offsets)
    _assert_scores_as_rank_scores(score, ranks, bits, rng, values, (0, 1, 3, 17), 4)


@pytest.mark.parametrize("chain_depth", [8, 55, 56], ids=["9_leaves", "56_leaves", "57_leaves"])
@pytest.mark.parametrize("targets", [1, 3])
def test_trees_of_at_most_56_leaves_score_by_remainders_as_rank_scores(chain_depth, targets):
    """Trees of 9 to 56 leaves keep their number in each word's top byte and gather their weights
    by the word's remainder (one M per tree shape); 57 leaves keep the bit counts. Both give
    rank_scores' bits (NaN, infinities, signed zeros, weights over 16 decades, batches 0-64)."""
    from relaxpack.runtime.kernels.tree_gemm import gemm_plan
    from relaxpack.runtime.kernels.tree_ranks import _hashed_scorer, rank_scorer
    rng = np.random.default_rng(chain_depth * 10 + targets)
    values = np.array([-np.inf, -1.5, -0.0, 0.0, 0.5, 1.0, np.inf, np.nan, 2.0])
    walk, slots, root_slots = pack_trees(*_shallow_forest(rng, 6, 4, values, chain_depth))
    nodes = walk.shape[1] // 2
    leaves = rng.standard_normal((nodes, targets)) * 10.0 ** rng.integers(-8, 8, (nodes, 1))
    leaves[rng.random(leaves.shape) < 0.1] = -0.0
    plan = gemm_plan(walk, slots, root_slots, leaves, chain_depth + 1)
    ranks, bits = plan.ranks, plan.bits
    assert bits.weights.shape[0] // bits.offsets.shape[0] == chain_depth + 1
    hashed = _hashed_scorer(ranks.union.table, bits.weights, bits.offsets)
    assert (hashed is not None) == (chain_depth < 56)
    score = rank_scorer(ranks, bits.weights, bits.offsets)
    _assert_scores_as_rank_scores(score, ranks, bits, rng, values, (0, 1, 2, 7, 64), 5)


def test_the_remainders_form_is_the_least_modulus_within_its_limits():
    """The modulus is the least from T x L giving T x L distinct remainders (checked by brute
    force on small shapes); no form past HASH_TREES trees or HASH_MAX_WORDS words, or when no
    modulus is found up to the spread (the bit counts then serve)."""
    from relaxpack.runtime.kernels import tree_ranks
    for trees, leaves in ((1, 1), (1, 56), (3, 9), (7, 20)):
        words = tree_ranks._words(trees, leaves)[1].tolist()
        m = tree_ranks._modulus(trees, leaves, 16 * len(words))
        assert len({w % m for w in words}) == len(words)
        assert all(len({w % k for w in words}) < len(words) for k in range(len(words), m))
    weights, offsets = np.zeros((257 * 2, 1)), (np.arange(257) * 2)[:, None]
    assert tree_ranks._hashed_scorer(np.zeros((3, 257), np.uint64), weights, offsets) is None
    weights, offsets = np.zeros((35 * 30, 1)), (np.arange(35) * 30)[:, None]    # 1050 words
    assert tree_ranks._hashed_scorer(np.zeros((3, 35), np.uint64), weights, offsets) is None
    words = np.array([0, 6, 12], np.uint64)         # remainders 0 0 0 by 3, 0 2 0 by 4, 0 1 2 by 5
    assert tree_ranks._distinct_modulus(words, 4) is None and tree_ranks._distinct_modulus(words, 5) == 5


@pytest.mark.parametrize("targets", [1, 2, 3, 4])
@pytest.mark.parametrize("features", [(0, 1, 2, 3), (1, 3, 4, 0)], ids=["leading", "gathered"])
def test_the_byte_form_scores_one_row_as_rank_scores(targets, features):
    """A batch of one takes the byte form's 1-d path: rank_scores' bits for each of 64 rows one at
    a time, and the 64-row batch's bits (2+ targets; one target's lone row sums its T weights
    pairwise, as main's batch of one does) (NaN, infinities, signed zeros, -0.0 weights over 16 decades), the features read
    a leading run of the columns or gathered, float32 and float64 samples, a sample wider than the
    features read."""
    from relaxpack.runtime.kernels.tree_gemm import gemm_plan
    from relaxpack.runtime.kernels.tree_ranks import _byte_scorer, rank_scorer, rank_scores
    rng = np.random.default_rng(targets * 7 + features[0])
    values = np.array([-np.inf, -1.5, -0.0, 0.0, 0.5, 1.0, np.inf, np.nan, 2.0])
    nodes, thresholds, roots = _shallow_forest(rng, 12, 4, values)
    internal = nodes[:, 1] != LEAF
    nodes[internal, 0] = np.array(features)[nodes[internal, 0]]
    walk, slots, root_slots = pack_trees(nodes, thresholds, roots)
    count = walk.shape[1] // 2
    leaves = rng.standard_normal((count, targets)) * 10.0 ** rng.integers(-8, 8, (count, 1))
    leaves[rng.random(leaves.shape) < 0.1] = -0.0
    plan = gemm_plan(walk, slots, root_slots, leaves, 12)
    ranks, bits = plan.ranks, plan.bits
    assert _byte_scorer(ranks.union.table, bits.weights, bits.offsets) is not None
    assert (type(ranks.union.columns) is int) == (features == (0, 1, 2, 3))
    score = rank_scorer(ranks, bits.weights, bits.offsets)
    for dtype in (np.float32, np.float64):
        x = rng.choice(values, size=(64, 6)).astype(dtype)
        want = rank_scores(ranks, bits.weights, bits.offsets, x)
        for i in range(64):
            got = score(x[i:i + 1])
            assert got.shape == (1, targets)
            alone = rank_scores(ranks, bits.weights, bits.offsets, x[i:i + 1])
            np.testing.assert_array_equal(got.view(np.uint64), alone.view(np.uint64))
            if targets > 1:     # (one target: numpy sums a lone row's T weights pairwise, a batch's not)
                np.testing.assert_array_equal(got.view(np.uint64), want[i:i + 1].view(np.uint64))


@pytest.mark.parametrize("targets", [1, 3])
def test_a_float32_row_searches_the_values_rounded_down_as_float64(targets):
    """A float32 sample of one row searches the union's values rounded down to float32: the same
    positions as the float64 search, so rank_scores' bits, on thresholds float32 cannot hold (0.1,
    1/3, a float64 subnormal, past float32's largest either way) and samples at and around each
    threshold's float32 neighbours (and NaN, +-inf, -0.0)."""
    from relaxpack.runtime.kernels.tree_gemm import gemm_plan
    from relaxpack.runtime.kernels.tree_ranks import _byte_scorer, rank_scorer, rank_scores
    rng = np.random.default_rng(40 + targets)
    cuts = np.array([0.1, 1 / 3, -1 / 3, 1e-310, 3.5e38, -3.5e38, 2.0, -0.0])
    nodes, thresholds, roots = _shallow_forest(rng, 12, 4, cuts)
    walk, slots, root_slots = pack_trees(nodes, thresholds, roots)
    leaves = rng.standard_normal((walk.shape[1] // 2, targets))
    plan = gemm_plan(walk, slots, root_slots, leaves, 12)
    ranks, bits = plan.ranks, plan.bits
    assert _byte_scorer(ranks.union.table, bits.weights, bits.offsets) is not None
    with np.errstate(over="ignore"):        # (+-3.5e38 round to +-inf: their neighbours are float32's largest)
        near = list(cuts.astype(np.float32))
    near += [np.nextafter(v, np.float32(np.inf)) for v in near] + [np.nextafter(v, np.float32(-np.inf)) for v in near]
    samples = np.array(near + [np.nan, np.inf, -np.inf, 0.0, 1e-45], np.float32)
    score = rank_scorer(ranks, bits.weights, bits.offsets)
    for _ in range(300):
        x = rng.choice(samples, size=(1, 4)).astype(np.float32)
        got, want = score(x), rank_scores(ranks, bits.weights, bits.offsets, x.astype(np.float64))
        np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))

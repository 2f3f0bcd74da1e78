"""Tree ensembles as matrix products, for small models and batches (Hummingbird's GEMM strategy).

The walk (:func:`.tree_ensemble.find_leaves`) makes six numpy calls per
level of the deepest tree: on a batch of a few samples its cost is those
calls (a depth-6 forest, ~40 of them). Here every node's test is made at
once and the leaf each sample reaches is read off products, in seven calls
whatever the depth:

- ``held[n, t, i] = sign[t, i] * x[n, feature[t, i]] <= threshold[t, i]`` for
  every internal node ``i`` of every tree ``t`` (the walk form's ``[x, -x]``
  columns and float64 thresholds, so the same comparisons: a NaN holds no test);
- ``paths[t, i, l]`` is +1 when leaf ``l`` lies under node ``i``'s held branch,
  -1 under its failed one; ``sum_i held[n, t, i] * paths[t, i, l]`` equals
  ``held_ancestors[t, l]`` (the count of +1s) exactly when every ancestor of ``l``
  sent the sample its way: that is the leaf reached;
- the reached leaves' weights summed over the trees: one product and a sum.

Smaller still (:func:`bits_scores`, trees of at most 64 leaves): each node's outcome as a uint64
mask of the leaves it leaves possible, ANDed over the nodes; the one bit left is the leaf reached
(no per-tree GEMM: 1.5-2.5x faster on a forest at batch 1-64).

Trees are padded to the largest one's node and leaf counts. :func:`gemm_plan`
builds the matrices once per model (the kernels keep it per instruction) and
refuses (None) what the walk handles alone: ``==`` and set-membership tests,
trees deeper than the declared depth (the walk raises), large models.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .tree_ranks import TreeRanks, tree_ranks

#: the padded products may hold at most this many values (trees x nodes x leaves)
MAX_PATH_VALUES = 1 << 20


@dataclass(frozen=True, eq=False)
class TreeGemm:
    """The matrices of one ensemble; see the module docstring."""

    feature: np.ndarray     # int64 (T, I): the feature each internal node reads
    sign: np.ndarray        # float64 (T, I, 1): +1, or -1 where the node reads -x
    threshold: np.ndarray   # float64 (T, I, 1)
    paths_t: np.ndarray     # float64 (T, L, I): paths[t, i, l] transposed
    held_ancestors: np.ndarray  # float64 (T, L, 1); -1 for padding (never reached)
    weights_t: np.ndarray   # float64 (T, K, L): leaf weights, 0 where a leaf has none
    features: int           # the columns the nodes read: x needs more than the largest
    bits: "TreeBits | None" = None  # the same trees as leaf bit masks, when each has at most 64 leaves
    ranks: "TreeRanks | None" = None  # the masks as tables per feature (tree_ranks.py), when small enough


def gemm_plan(walk: np.ndarray, thresholds: np.ndarray, roots: np.ndarray, leaves: np.ndarray,
              max_depth: int) -> TreeGemm | None:
    """The matrices for this walk form, or None where the walk must run."""
    if walk.shape[0] != 2 or roots.size == 0:
        return None
    column, nxt = walk[0], walk[1]
    try:
        trees = [_tree(int(r) >> 1, column, nxt, max_depth) for r in roots.tolist()]
    except IndexError:      # a malformed walk: the walk's own checks report it
        return None
    if any(t is None for t in trees):
        return None
    width = max(max(len(internal) for internal, _ in trees), 1)
    height = max(len(reached) for _, reached in trees)
    if len(trees) * width * height > MAX_PATH_VALUES:
        return None
    count, k = len(trees), leaves.shape[1]
    feature, sign = np.zeros((count, width), np.int64), np.ones((count, width))
    threshold, paths = np.zeros((count, width)), np.zeros((count, width, height))
    held_ancestors, weights = np.full((count, 1, height), -1.0), np.zeros((count, height, k))
    known = np.where(np.isnan(leaves), 0.0, leaves)
    for t, (internal, reached) in enumerate(trees):
        row = {node: i for i, node in enumerate(internal)}
        for i, node in enumerate(internal):
            col = int(column[2 * node])
            feature[t, i], sign[t, i], threshold[t, i] = col >> 1, -1.0 if col & 1 else 1.0, thresholds[2 * node]
        for j, (leaf, path) in enumerate(reached):
            for node, held in path:
                paths[t, row[node], j] = 1.0 if held else -1.0
            held_ancestors[t, 0, j] = sum(held for _, held in path)
            weights[t, j] = known[leaf]
    features = int(column.max()) // 2 + 1 if column.size else 0
    bits = tree_bits(feature, sign, threshold, features, paths, held_ancestors[:, 0, :] >= 0, weights) \
        if height <= BITS else None
    ranks = tree_ranks(bits.column, bits.threshold, bits.held_mask, bits.failed_mask, features) \
        if bits is not None and features else None
    return TreeGemm(feature, sign[:, :, None], threshold[:, :, None], np.ascontiguousarray(paths.transpose(0, 2, 1)),
                    held_ancestors.transpose(0, 2, 1).copy(), np.ascontiguousarray(weights.transpose(0, 2, 1)),
                    features, bits, ranks)


def _tree(root: int, column, nxt, max_depth: int):
    """(internal nodes, [(leaf, [(ancestor, took its held branch)])]) of one tree, or None when it
    is deeper than ``max_depth`` (the walk reports that) or not a tree."""
    internal, reached = [], []
    stack = [(root, [])]
    while stack:
        node, path = stack.pop()
        if len(path) > max_depth or len(internal) + len(reached) > nxt.size:
            return None
        failed, held = int(nxt[2 * node]) >> 1, int(nxt[2 * node + 1]) >> 1
        if failed == held == node:
            reached.append((node, path))
            continue
        internal.append(node)
        stack.append((held, path + [(node, True)]))
        stack.append((failed, path + [(node, False)]))
    return internal, reached


def gemm_scores(plan: TreeGemm, x: np.ndarray) -> np.ndarray:
    """The summed leaf weights, float64 ``(N, K)``, of samples ``x`` ``(N, F)``. Every array is
    laid out samples last, so each product is one BLAS call per tree on contiguous matrices."""
    signed = np.multiply(np.take(x.T, plan.feature, axis=0), plan.sign)    # (T, I, N), float64
    held = np.less_equal(signed, plan.threshold, out=signed)              # 1.0 / 0.0
    counts = np.matmul(plan.paths_t, held)                                # (T, L, N)
    reached = np.equal(counts, plan.held_ancestors, out=counts)
    return np.matmul(plan.weights_t, reached).sum(axis=0).T               # (K, N) -> (N, K)


# ---------------------------------------------------------------- leaf bit masks

#: leaves per tree the masks hold (one uint64 per node)
BITS = 64
#: the masks serve batches while samples x trees x nodes stays under this many values (a few
#: calls over all of them; the walk's calls touch samples x trees values per level, and win beyond)
BITS_MAX_WORK = 1 << 16


@dataclass(frozen=True, eq=False)
class TreeBits:
    """Per internal node, the leaves its outcome leaves possible, as bits of a uint64
    (QuickScorer's idea): ``held_mask[i, t]`` clears the leaves under node ``i``'s failed branch,
    ``failed_mask`` those under its held one (both clear the padding leaves; a padding node keeps
    only the real ones). ANDed over a tree's nodes, one bit survives: the leaf reached (every
    other leaf sits under the branch some common ancestor did not take). Node-major arrays, so
    that the AND runs over the outer axis, a vectorized pass per node."""

    column: np.ndarray      # int64 (I, T): the row of ``[x.T, -x.T]`` node i of tree t compares
    threshold: np.ndarray   # float64 (I, T, 1)
    held_mask: np.ndarray   # uint64 (I, T, 1)
    failed_mask: np.ndarray  # uint64 (I, T, 1)
    offsets: np.ndarray     # int64 (T, 1): t * L, the first row of tree t in ``weights``
    weights: np.ndarray     # float64 (T * L, K): leaf weights, 0 where a leaf has none


def tree_bits(feature: np.ndarray, sign: np.ndarray, threshold: np.ndarray, features: int, paths: np.ndarray,
              real: np.ndarray, weights: np.ndarray) -> TreeBits:
    """The masks from the padded node arrays (T, I) and path matrix ``paths`` (T, I, L) (+1 under
    the held branch, -1 under the failed one), ``real`` (T, L) (the leaves that exist) and
    ``weights`` (T, L, K); ``features``: the columns of ``x``."""
    count, _, height = paths.shape
    bit = np.left_shift(np.uint64(1), np.arange(height, dtype=np.uint64))        # (L,)
    existing = np.bitwise_or.reduce(np.where(real, bit, np.uint64(0)), axis=1)[:, None]   # (T, 1)
    under_held = np.bitwise_or.reduce(np.where(paths > 0, bit, np.uint64(0)), axis=2)
    under_failed = np.bitwise_or.reduce(np.where(paths < 0, bit, np.uint64(0)), axis=2)
    column = feature + np.where(sign < 0, features, 0)
    node_major = lambda a: np.ascontiguousarray(a.T)[:, :, None]     # noqa: E731 - (T, I) -> (I, T, 1)
    return TreeBits(np.ascontiguousarray(column.T), node_major(threshold), node_major(existing & ~under_failed),
                    node_major(existing & ~under_held), (np.arange(count, dtype=np.int64) * height)[:, None],
                    weights.reshape(count * height, -1))


def bits_scores(plan: TreeGemm, x: np.ndarray) -> np.ndarray:
    """:func:`gemm_scores` by the leaf masks: the same comparisons (``-x`` is ``x * -1``), the
    reached leaf's weights summed over the trees in the same order (the same float64 sums), in
    ten small numpy calls and no per-tree GEMMs."""
    bits = plan.bits
    xt = x.T[:plan.features]                                                # the columns the nodes read
    both = np.concatenate((xt, np.negative(xt)))                            # (2F, N)
    held = np.less_equal(np.take(both, bits.column, axis=0), bits.threshold)   # (I, T, N)
    left = np.bitwise_and.reduce(np.where(held, bits.held_mask, bits.failed_mask), axis=0)   # (T, N)
    leaf = np.bitwise_count(left - np.uint64(1)).astype(np.int64)          # the surviving bit's position
    leaf += bits.offsets
    return np.take(bits.weights, leaf, axis=0).sum(axis=0)                 # (T, N, K) -> (N, K)

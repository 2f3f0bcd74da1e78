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

Trees are padded to the largest one's node and leaf counts. :func:`gemm_plan`
builds the matrices once per model (the kernels keep it per instruction) and
refuses (None) what the walk handles alone: ``==`` and set-membership tests,
trees deeper than the declared depth (the walk raises), large models.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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
    return TreeGemm(feature, sign[:, :, None], threshold[:, :, None], np.ascontiguousarray(paths.transpose(0, 2, 1)),
                    held_ancestors.transpose(0, 2, 1).copy(), np.ascontiguousarray(weights.transpose(0, 2, 1)),
                    int(column.max()) // 2 + 1 if column.size else 0)


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

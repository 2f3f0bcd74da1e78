"""One sample down a small tree ensemble in Python: its leaf per tree and the summed weights.

At batch 1 the threshold ranks (:mod:`.tree_ranks`) still make seven numpy calls, two of them
reductions (~5 us); a forest of a few deep trees is decided by a few dozen comparisons, which
Python makes in ~45 ns each. :func:`one_sample_scorer` keeps the walk form (``tree_ensemble``'s
``walk``, ``thresholds``, ``roots``) as Python lists per node, for ensembles whose test is only
``<=`` (two-row walks) and whose expected walk is short (:data:`MAX_STEPS`).

The same decisions: a node holds when ``xx[column] <= threshold`` for ``xx = [x, -x]`` in float64
(a float32 ``x`` is exact as a Python float; negation is exact; NaN holds no test, as in
:func:`.tree_ensemble.find_leaves`). The same sums: ``rank_scores`` (and the leaf masks) reduce the
trees' weight rows over the outer axis, which numpy makes as ``((0.0 + w_0) + w_1) + ...`` in tree
order (its identity first: a column of -0.0 sums to +0.0). From +0.0, no partial sum is ever -0.0
(``x + -x`` and ``+0.0 + -0.0`` are +0.0 when rounding to nearest), so a zero addend of either sign
changes none: the walk adds each leaf's nonzero weights only.

>>> walk = np.array([[0, 0, 0, 0, 0, 0], [4, 2, 2, 2, 4, 4]])   # node 0: x0 <= 0.5 ? node 1 : node 2
>>> score = one_sample_scorer(walk, np.array([0.5, 0.5, 0.0, 0.0, 0.0, 0.0]), np.array([0]),
...                           np.array([[np.nan], [1.0], [2.0]]))
>>> score([[0.25]]), score([[3.0]])
([1.0], [2.0])
"""

from __future__ import annotations

import numpy as np

#: the most node tests a sample is expected to make (the trees' mean leaf depths summed) for
#: the Python walk: ~45 ns a test, where the ranks' batch-1 calls cost ~5 us. Measured (whole
#: models at batch 1, with the one-row finish): 38.7 tests 0.84x, 60 0.76x, 64.9 0.94x, 89.7 1.11x
MAX_STEPS = 72


def one_sample_scorer(walk: np.ndarray, thresholds: np.ndarray, roots: np.ndarray, leaves: np.ndarray):
    """``score(x) -> list of K float64 sums`` for one sample ``x`` (a ``(1, F)`` float array, or
    rows of Python floats), or None when the ensemble tests more than ``<=`` or walks too long.
    ``x`` must hold every column the nodes read (:attr:`score.features`)."""
    if walk.shape[0] != 2 or not roots.size:
        return None
    column, nxt = walk[0].tolist(), walk[1].tolist()
    nodes = len(column) // 2
    leaf = [nxt[2 * i] == 2 * i and nxt[2 * i + 1] == 2 * i for i in range(nodes)]
    tree_roots = [r // 2 for r in roots.tolist()]
    if _expected_steps(tree_roots, nxt, leaf) > MAX_STEPS:
        return None
    features = max((column[2 * i] // 2 + 1 for i in range(nodes) if not leaf[i]), default=0)
    # per node: (the position of its operand in x + (-x), its threshold, the held node, the failed
    # node); a leaf: (-1, ...)
    limit = thresholds[::2].tolist()
    node = [(-1 if leaf[i] else column[2 * i] // 2 + (features if column[2 * i] % 2 else 0), limit[i],
             nxt[2 * i + 1] // 2, nxt[2 * i] // 2) for i in range(nodes)]
    weights = np.where(np.isnan(leaves), 0.0, leaves)
    if weights.shape[1] == 1:
        return _one_target(node, tree_roots, weights[:, 0].tolist(), features)
    return _targets(node, tree_roots, weights, features)


def _one_target(node: list, roots: list[int], weight: list[float], features: int):
    """The scorer of one target: the weights added in tree order from +0.0 (each tree's walk and
    its addition in one loop: no list of the leaves reached)."""
    def score(x):
        values = (x[0] if isinstance(x, list) else x.tolist()[0])[:features]
        xx = values + [-v for v in values]
        total = 0.0
        for i in roots:
            c, t, h, f = node[i]
            while c >= 0:
                c, t, h, f = node[h if xx[c] <= t else f]
            total += weight[h]          # (a leaf's held node is itself)
        return [total]
    score.features = features
    return score


def _targets(node: list, roots: list[int], weights: np.ndarray, features: int):
    """The scorer of several targets: each leaf's nonzero weights added in tree order from +0.0
    (each tree's walk and its additions in one loop: no list of the leaves reached)."""
    targets = weights.shape[1]
    addends = [[(k, w) for k, w in enumerate(row) if w != 0.0] for row in weights.tolist()]

    def score(x):
        values = (x[0] if isinstance(x, list) else x.tolist()[0])[:features]
        xx = values + [-v for v in values]
        sums = [0.0] * targets
        for i in roots:
            c, t, h, f = node[i]
            while c >= 0:
                c, t, h, f = node[h if xx[c] <= t else f]
            for k, w in addends[h]:     # (a leaf's held node is itself)
                sums[k] += w
        return sums
    score.features = features
    return score


def _expected_steps(roots: list[int], nxt: list[int], leaf: list[bool]) -> float:
    """The tests a sample makes summed over the trees, each tree's the mean depth of its leaves."""
    total = 0.0
    for root in roots:
        depths, frontier, level = [], [root], 0
        while frontier and level <= 64:
            following = []
            for i in frontier:
                if leaf[i]:
                    depths.append(level)
                else:
                    following += [nxt[2 * i] // 2, nxt[2 * i + 1] // 2]
            frontier, level = following, level + 1
        if frontier:                            # deeper than 64 (or a cycle): not for Python
            return float("inf")
        total += sum(depths) / len(depths)
    return total


__all__ = ["MAX_STEPS", "one_sample_scorer"]

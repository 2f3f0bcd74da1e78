"""Tree ensembles (ai.onnx.ml TreeEnsembleRegressor/Classifier and
TreeEnsemble): every sample walks down every tree together, one level per
numpy step, so the cost in Python is the depth of the deepest tree, not the
number of samples.

The importer hands over one canonical form whatever the ONNX spelling:

- ``nodes``: int64 ``(M, 5)``, per node ``feature, mode, true, false,
  missing_tracks_true``; ``mode`` is one of :data:`MODES` (``-1`` for a
  leaf, whose children point at itself); children are node indices.
- ``thresholds``: float64 ``(M,)``; ``roots``: int64 ``(T,)``.
- ``leaves``: float64 ``(M, K)``, the weight a leaf adds to each of the K
  targets (classes); NaN where the leaf has no weight for that target.
- ``members``: float64 ``(P, 2)``, ``(node, value)`` pairs of the
  set-membership (``BRANCH_MEMBER``) nodes.

>>> nodes = np.array([[0, 0, 1, 2, 0], [0, -1, 1, 1, 0], [0, -1, 2, 2, 0]])
>>> leaves = np.array([[np.nan], [1.0], [2.0]])
>>> out = np.empty((2, 1), np.float32)
>>> tree_ensemble(np.array([[0.0], [5.0]], np.float32), nodes, np.array([1.0, 0, 0]), np.array([0]),
...               leaves, np.empty((0, 2)), out=out, aggregate="SUM", base_values=(), post_transform="NONE",
...               max_depth=1)
>>> out.ravel().tolist()
[1.0, 2.0]
"""

from __future__ import annotations

import numpy as np

from ...errors import ExecutionError
from ._registry import register_kernel
from .ml import transform_scores

#: mode codes of the canonical form
MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5,
         "BRANCH_MEMBER": 6}
LEAF = -1
_COMPARE = {0: np.less_equal, 1: np.less, 2: np.greater_equal, 3: np.greater, 4: np.equal, 5: np.not_equal}


def find_leaves(x, nodes, thresholds, roots, members, max_depth: int) -> np.ndarray:
    """The leaf each sample reaches in each tree: int64 ``(N, T)``."""
    x = np.asarray(x, dtype=np.float64).reshape(x.shape[0] if x.ndim else 1, -1)
    n = x.shape[0]
    at = np.broadcast_to(roots, (n, roots.size)).copy()
    row = np.broadcast_to(np.arange(n)[:, None], at.shape)
    features, modes, true, false, missing = (nodes[:, k] for k in range(5))
    for _ in range(max_depth):
        active = modes[at] != LEAF
        if not active.any():
            break
        node, r = at[active], row[active]
        if features[node].max() >= x.shape[1]:
            raise ExecutionError(f"tree_ensemble: a node reads feature {features[node].max()} of "
                                 f"{x.shape[1]} features")
        value, mode = x[r, features[node]], modes[node]
        go_true = np.zeros(node.shape, dtype=bool)
        for code in np.unique(mode):
            sel = mode == code
            if code == MODES["BRANCH_MEMBER"]:
                go_true[sel] = _is_member(node[sel], value[sel], members)
            else:
                go_true[sel] = _COMPARE[int(code)](value[sel], thresholds[node[sel]])
        go_true |= np.isnan(value) & (missing[node] != 0)
        at[active] = np.where(go_true, true[node], false[node])
    if (modes[at] != LEAF).any():
        raise ExecutionError(f"tree_ensemble: a tree is deeper than its declared depth {max_depth}")
    return at


def _is_member(node: np.ndarray, value: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Whether each ``value`` is in its ``node``'s set (the ``members`` pairs)."""
    pairs = {(int(nd), float(v)) for nd, v in members.tolist()}
    return np.fromiter(((int(nd), float(v)) in pairs for nd, v in zip(node.tolist(), value.tolist())),
                       dtype=bool, count=node.size)


def aggregate_leaves(at: np.ndarray, leaves: np.ndarray, aggregate: str) -> np.ndarray:
    """The targets' scores, float64 ``(N, K)``, from the leaves reached."""
    weights = leaves[at]                                  # (N, T, K)
    given = ~np.isnan(weights)
    if aggregate in ("SUM", "AVERAGE"):
        scores = np.where(given, weights, 0.0).sum(axis=1)
        return scores / at.shape[1] if aggregate == "AVERAGE" and at.shape[1] else scores
    if aggregate not in ("MIN", "MAX"):
        raise ExecutionError(f"tree_ensemble: unknown aggregate function {aggregate!r}")
    fill = np.inf if aggregate == "MIN" else -np.inf
    pick = np.min if aggregate == "MIN" else np.max
    scores = pick(np.where(given, weights, fill), axis=1)
    return np.where(given.any(axis=1), scores, 0.0)     # a target no tree scores stays 0


@register_kernel("tree_ensemble")
def tree_ensemble(x, nodes, thresholds, roots, leaves, members, *, out, aggregate, base_values, post_transform,
                  max_depth, dtype="float32"):
    """Regression: aggregated leaf weights plus ``base_values``, then
    ``post_transform``, computed in float64 and written as ``dtype`` (out's)."""
    scores = aggregate_leaves(find_leaves(x, nodes, thresholds, roots, members, max_depth), leaves, aggregate)
    if base_values:
        scores = scores + np.asarray(base_values, dtype=np.float64)
    out[...] = transform_scores(scores, post_transform).reshape(out.shape)


@register_kernel("tree_ensemble_classifier")
def tree_ensemble_classifier(x, nodes, thresholds, roots, leaves, members, *, out, aggregate, base_values,
                             post_transform, max_depth):
    """Classification as onnxruntime does it: ``out`` is (label index int64
    ``(N,)``, scores ``(N, C)``). With more than two classes: scores plus
    base values, label the argmax. With two classes and weights for one
    class only (a binary model, e.g. gradient boosting's log-odds) the score
    ``s`` decides the label (``s > 0.5`` when every weight is non-negative,
    else ``s > 0``) and the scores are ``(1 - s, s)``, or ``(-s, s)`` —
    through the logistic function under LOGISTIC.

    Whether a class has a score is decided per model (does any leaf weigh
    it), where onnxruntime decides per sample; they agree unless some
    leaves weigh a class and others do not.
    """
    labels, probs = out
    at = find_leaves(x, nodes, thresholds, roots, members, max_depth)
    scores = aggregate_leaves(at, leaves, aggregate)
    scored = ~np.isnan(leaves).all(axis=0)
    base = np.asarray(base_values, dtype=np.float64)
    n_classes = scores.shape[1]
    if n_classes != 2:
        if base.size:
            scores = scores + base
        labels[...] = np.argmax(scores, axis=1)
        probs[...] = transform_scores(scores, post_transform)
        return
    _binary(scores, scored, base, leaves, post_transform, labels, probs)


def _binary(scores, scored, base, leaves, post_transform: str, labels, probs) -> None:
    s0, s1 = scores[:, 0], scores[:, 1]
    if base.size == 2:
        if scored[1]:
            s1 = base[1] + s0
            s0 = -s1
        else:
            s0, s1 = s0 + base[0], s1 + base[1]
    elif base.size == 1:
        s0 = s0 + base[0]
    two_columns = base.size == 2 or scored[1]
    positive = s1 if two_columns and scored[1] else s0
    if scored.sum() == 1:                                     # weights for one class only
        all_positive = bool((np.nan_to_num(leaves) >= 0).all())
        labels[...] = positive > (0.5 if all_positive else 0.0)
    else:
        labels[...] = positive > 0
    if two_columns:
        probs[...] = transform_scores(np.stack([s0, s1], axis=1), post_transform)
        return
    if post_transform == "PROBIT":
        raise ExecutionError("tree_ensemble_classifier: PROBIT with a single binary score is not supported")
    if scored.sum() == 1 and bool((np.nan_to_num(leaves) >= 0).all()):
        probs[...] = np.stack([1.0 - s0, s0], axis=1)
    elif post_transform == "LOGISTIC":
        probs[...] = np.stack([_logistic(-s0), _logistic(s0)], axis=1)
    else:
        probs[...] = np.stack([-s0, s0], axis=1)


def _logistic(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))

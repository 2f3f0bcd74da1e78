"""Tree ensembles: ai.onnx.ml TreeEnsembleRegressor, TreeEnsembleClassifier
(opsets 1 and 3) and TreeEnsemble (opset 5).

Both spellings become one node list (see ``runtime/kernels/tree_ensemble.py``):
node arrays indexed by a global node number, children as node numbers, leaf
weights as a dense (nodes, targets) matrix. The trees are checked here, once:
children exist, no tree has a cycle, and the depth of the deepest tree bounds
the kernel's walk. The node list is then packed into the kernel's walk form
(``pack_trees``), so no call pays for the layout. A leaf's weights for one target add up, but
for an ensemble of one target (or class) only its first weight counts, as in onnxruntime:
skl2onnx's ``decision_leaf`` writes a leaf's id once per class of a classifier's trees and
relies on that::

    TreeEnsembleRegressor(x)  ->  R.tree_ensemble(x, walk, thresholds, roots, leaves, members,
                                                  aggregate="SUM", base_values=(), post_transform="NONE",
                                                  max_depth=4)
"""

from __future__ import annotations

import numpy as np

from ....ir.expr import TupleGetItem
from ....ops.registry import make_call
from ....runtime.kernels.tree_ensemble import LEAF, MODES, pack_trees
from ..registry import register_converter
from ..value import Value
from ._shape_common import shape_error
from .ml import ML, class_labels, label_output, ml_unsupported, required

_POST = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")
_AGGREGATE = ("AVERAGE", "SUM", "MIN", "MAX")


class Trees:
    """The canonical arrays of one ensemble, built node by node."""

    def __init__(self, n_nodes: int, n_targets: int):
        self.nodes = np.zeros((n_nodes, 5), dtype=np.int64)
        self.nodes[:, 1] = LEAF
        self.nodes[:, 2] = self.nodes[:, 3] = np.arange(n_nodes)
        self.thresholds = np.zeros(n_nodes, dtype=np.float64)
        self.leaves = np.full((n_nodes, n_targets), np.nan)
        self.members = np.empty((0, 2), dtype=np.float64)
        self.roots = np.empty(0, dtype=np.int64)

    def add_weight(self, node: int, target: int, weight: float, aggregate: str = "SUM") -> None:
        """Another weight of a leaf for a target: added to the ones before it, or under MIN and
        MAX aggregation the least or greatest kept (each weight is a vote of its own there)."""
        row = self.leaves[node]
        before = row[target]
        if np.isnan(before):
            row[target] = weight
        elif aggregate == "MIN":
            row[target] = min(before, weight)
        elif aggregate == "MAX":
            row[target] = max(before, weight)
        else:
            row[target] = before + weight

    def depth(self, ctx) -> int:
        """The depth of the deepest tree; a missing child or a cycle is a ShapeError."""
        n = len(self.nodes)
        children = self.nodes[:, 2:4]
        if ((children < 0) | (children >= n)).any():
            raise shape_error(ctx, "a node's child does not exist")
        at, depth = self.roots.copy(), 0
        while at.size:
            branch = at[self.nodes[at, 1] != LEAF]
            if branch.size == 0:
                return depth
            depth += 1
            if depth > n:
                raise shape_error(ctx, "a tree has a cycle")
            at = np.unique(children[branch].reshape(-1))
        return depth

    def args(self, ctx, x: Value) -> list:
        arrays = (*pack_trees(self.nodes, self.thresholds, self.roots), self.leaves, self.members)
        return [ctx.expr(required(ctx, x)), *(ctx.expr(ctx.const(a)) for a in arrays)]


# ---------------------------------------------------------------- opsets 1 and 3


def _legacy_trees(ctx, a: dict, prefix: str, n_targets: int, aggregate: str = "SUM") -> Trees:
    """Trees from the ``nodes_*`` and ``target_*``/``class_*`` attributes of
    TreeEnsembleRegressor/Classifier; ``(tree id, node id)`` pairs name the nodes."""
    tree_ids = list(a["nodes_treeids"])
    n = len(tree_ids)
    thresholds = a["nodes_values_as_tensor"] if a.get("nodes_values_as_tensor") is not None else a["nodes_values"]
    columns = {k: list(a.get(k) or ()) for k in ("nodes_nodeids", "nodes_featureids", "nodes_modes",
                                                "nodes_truenodeids", "nodes_falsenodeids")}
    columns["nodes_values"] = list(np.asarray(thresholds, dtype=np.float64).reshape(-1)) if thresholds is not None \
        else []
    missing = list(a.get("nodes_missing_value_tracks_true") or ()) or [0] * n
    for k, v in {**columns, "nodes_missing_value_tracks_true": missing}.items():
        if len(v) != n:
            raise shape_error(ctx, f"{k} has {len(v)} entries for {n} nodes")
    index = {(t, nd): i for i, (t, nd) in enumerate(zip(tree_ids, columns["nodes_nodeids"]))}
    if len(index) != n:
        raise shape_error(ctx, "two nodes share a (tree id, node id)")
    trees = Trees(n, n_targets)
    roots: dict[int, int] = {}
    for i, t in enumerate(tree_ids):
        roots.setdefault(t, i)                      # a tree's first node is its root, as onnxruntime reads it
        mode = columns["nodes_modes"][i]
        if mode == "LEAF":
            continue
        if mode not in MODES or mode == "BRANCH_MEMBER":
            raise ml_unsupported(ctx, f"node mode {mode!r}")
        try:
            true, false = index[t, columns["nodes_truenodeids"][i]], index[t, columns["nodes_falsenodeids"][i]]
        except KeyError:
            raise shape_error(ctx, f"node {columns['nodes_nodeids'][i]} of tree {t} has a child that does not "
                                   f"exist") from None
        trees.nodes[i] = (columns["nodes_featureids"][i], MODES[mode], true, false, missing[i])
        trees.thresholds[i] = columns["nodes_values"][i]
    trees.roots = np.array(list(roots.values()), dtype=np.int64)
    weights = a.get(f"{prefix}_weights_as_tensor")
    weights = list(np.asarray(weights).reshape(-1)) if weights is not None else list(a.get(f"{prefix}_weights") or ())
    targets = zip(a.get(f"{prefix}_treeids") or (), a.get(f"{prefix}_nodeids") or (), a.get(f"{prefix}_ids") or (),
                  weights)
    for t, nd, target, w in targets:
        if (t, nd) not in index or not 0 <= target < n_targets:
            raise shape_error(ctx, f"a weight names node {nd} of tree {t} and target {target}, which do not exist")
        leaf = index[t, nd]
        if n_targets == 1 and not np.isnan(trees.leaves[leaf, 0]):
            continue            # one target: onnxruntime reads a leaf's first weight only (see the module doc)
        trees.add_weight(leaf, target, float(w), aggregate)
    return trees


def _base_values(a: dict) -> tuple:
    base = a.get("base_values_as_tensor")
    base = np.asarray(base).reshape(-1) if base is not None else a.get("base_values") or ()
    return tuple(float(b) for b in base)


def _check(ctx, post_transform: str, aggregate: str = "SUM") -> None:
    if post_transform not in _POST:
        raise shape_error(ctx, f"unknown post_transform {post_transform!r}")
    if aggregate not in _AGGREGATE:
        raise shape_error(ctx, f"unknown aggregate_function {aggregate!r}")


_LEGACY_NODES = dict(nodes_treeids=(), nodes_nodeids=(), nodes_featureids=(), nodes_modes=(), nodes_values=None,
                     nodes_values_as_tensor=None, nodes_truenodeids=(), nodes_falsenodeids=(),
                     nodes_missing_value_tracks_true=None, nodes_hitrates=None, nodes_hitrates_as_tensor=None,
                     base_values=None, base_values_as_tensor=None, post_transform="NONE")


def _legacy_attrs(ctx, given: dict, allowed: dict) -> dict:
    unknown = set(given) - set(allowed)
    if unknown:
        raise ml_unsupported(ctx, f"attribute(s) {sorted(unknown)}")
    return {**allowed, **given}


@register_converter(ML, "TreeEnsembleRegressor", since_opset=1)
def tree_ensemble_regressor(ctx, x, **attrs):
    a = _legacy_attrs(ctx, attrs, {**_LEGACY_NODES, "aggregate_function": "SUM", "n_targets": 1,
                                   "target_treeids": (), "target_nodeids": (), "target_ids": (),
                                   "target_weights": None, "target_weights_as_tensor": None})
    _check(ctx, a["post_transform"], a["aggregate_function"])
    trees = _legacy_trees(ctx, a, "target", int(a["n_targets"]), a["aggregate_function"])
    return make_call("tree_ensemble", *trees.args(ctx, x), aggregate=a["aggregate_function"],
                     base_values=_base_values(a), post_transform=a["post_transform"], max_depth=trees.depth(ctx))


@register_converter(ML, "TreeEnsembleClassifier", since_opset=1)
def tree_ensemble_classifier(ctx, x, **attrs):
    a = _legacy_attrs(ctx, attrs, {**_LEGACY_NODES, "class_treeids": (), "class_nodeids": (), "class_ids": (),
                                   "class_weights": None, "class_weights_as_tensor": None,
                                   "classlabels_int64s": None, "classlabels_strings": None})
    _check(ctx, a["post_transform"])
    labels = class_labels(ctx, a["classlabels_int64s"], a["classlabels_strings"])
    trees = _legacy_trees(ctx, a, "class", labels.size)
    found = ctx.bb.emit(make_call("tree_ensemble_classifier", *trees.args(ctx, x), aggregate="SUM",
                                  base_values=_base_values(a), post_transform=a["post_transform"],
                                  max_depth=trees.depth(ctx)), "trees")
    index = ctx.bb.emit(TupleGetItem(found, 0), "class_index")
    # the argmax over one score per label, or with two labels 0 or 1
    return label_output(ctx, index, labels, labels.size), TupleGetItem(found, 1)


# ---------------------------------------------------------------- TreeEnsemble (opset 5)


@register_converter(ML, "TreeEnsemble", since_opset=5)
def tree_ensemble_v5(ctx, x, *, tree_roots, nodes_featureids, nodes_splits, nodes_modes, nodes_truenodeids,
                     nodes_falsenodeids, nodes_trueleafs, nodes_falseleafs, leaf_targetids, leaf_weights,
                     n_targets=None, aggregate_function=1, post_transform=0, membership_values=None,
                     nodes_missing_value_tracks_true=None, nodes_hitrates=None):
    if n_targets is None:
        raise shape_error(ctx, "attribute n_targets is required")
    if not 0 <= aggregate_function < 4 or not 0 <= post_transform < 5:
        raise shape_error(ctx, f"aggregate_function {aggregate_function} or post_transform {post_transform} "
                               f"is out of range")
    x = required(ctx, x)
    modes = np.asarray(nodes_modes).reshape(-1).astype(np.int64)
    n, n_leaves = modes.size, len(leaf_targetids)
    trees = Trees(n + n_leaves, int(n_targets))
    missing = list(nodes_missing_value_tracks_true or ()) or [0] * n
    columns = (nodes_featureids, nodes_truenodeids, nodes_falsenodeids, nodes_trueleafs, nodes_falseleafs, missing)
    if any(len(c) != n for c in columns) or np.asarray(nodes_splits).size != n:
        raise shape_error(ctx, f"the nodes_* attributes must all have {n} entries")
    for i in range(n):
        true = nodes_truenodeids[i] + (n if nodes_trueleafs[i] else 0)
        false = nodes_falsenodeids[i] + (n if nodes_falseleafs[i] else 0)
        trees.nodes[i] = (nodes_featureids[i], modes[i], true, false, missing[i])
    if modes.min(initial=0) < 0 or modes.max(initial=0) > 6:
        raise shape_error(ctx, f"nodes_modes must be 0..6, got {sorted(set(modes.tolist()))}")
    trees.thresholds[:n] = np.asarray(nodes_splits, dtype=np.float64).reshape(-1)
    trees.members = _members(ctx, modes, membership_values)
    weights = np.asarray(leaf_weights, dtype=np.float64).reshape(-1)
    if weights.size != n_leaves:
        raise shape_error(ctx, f"{weights.size} leaf_weights for {n_leaves} leaf_targetids")
    for j, (target, w) in enumerate(zip(leaf_targetids, weights.tolist())):
        if not 0 <= target < n_targets:
            raise shape_error(ctx, f"leaf {j} names target {target} of {n_targets}")
        trees.add_weight(n + j, target, w)
    trees.roots = np.array(tree_roots, dtype=np.int64)
    dtype = x.dtype if x.dtype in ("float16", "float32", "float64") else "float32"
    return make_call("tree_ensemble", *trees.args(ctx, x), aggregate=_AGGREGATE[aggregate_function], base_values=(),
                     post_transform=_POST[post_transform], max_depth=trees.depth(ctx), dtype=dtype)


def _members(ctx, modes: np.ndarray, membership_values) -> np.ndarray:
    """``(node, value)`` pairs: the values between NaN separators, one run per BRANCH_MEMBER node."""
    member_nodes = np.flatnonzero(modes == MODES["BRANCH_MEMBER"])
    if member_nodes.size == 0:
        return np.empty((0, 2), dtype=np.float64)
    if membership_values is None:
        raise shape_error(ctx, "BRANCH_MEMBER nodes need membership_values")
    values = np.asarray(membership_values, dtype=np.float64).reshape(-1)
    runs = np.split(values, np.flatnonzero(np.isnan(values)))
    runs = [r[~np.isnan(r)] for r in runs]
    if runs and runs[-1].size == 0:
        runs.pop()
    if len(runs) < member_nodes.size:
        raise shape_error(ctx, f"membership_values has {len(runs)} sets for {member_nodes.size} BRANCH_MEMBER nodes")
    pairs = [(node, v) for node, run in zip(member_nodes.tolist(), runs) for v in run.tolist()]
    return np.array(pairs, dtype=np.float64).reshape(-1, 2)

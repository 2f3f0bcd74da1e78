"""Tree ensembles (ai.onnx.ml TreeEnsembleRegressor/Classifier and
TreeEnsemble): every sample walks down every tree together, one level per
numpy step over an ``(N, T)`` array of positions, so the cost in Python is
the depth of the deepest tree, not the number of samples or trees.

The importer builds a node list (:func:`pack_trees` documents it) and packs
it at convert time into the *walk form* the kernel reads:

- A node ``i`` has two slots, ``2i`` (its test failed) and ``2i + 1`` (it
  held); a walker's position is a slot. ``walk`` is int64 ``(2, S)`` or
  ``(4, S)`` with ``S = 2M``: per slot the column of ``[x, -x]`` (interleaved:
  column ``2f`` is feature ``f``, ``2f + 1`` its negation) the node tests,
  and the slot of the child that branch leads to (``2 * child``). A leaf's
  slots lead back to the leaf, so walkers that arrive early wait there.
- ``thresholds``: float64 ``(S,)``, the node's threshold repeated per slot.
  With a two-row ``walk`` every test is ``xx[col] <= threshold``: the other
  comparisons and the missing-value tracks are rewritten into that one at
  pack time (``v > t`` is ``-v < -t``; ``v < t`` is ``v <= t'`` with ``t'``
  the float64 just below ``t``; which branch is "held" is picked so that a
  NaN, which fails every ``<=``, takes the branch the model names for it).
- Rows 2 and 3, present when some node tests ``==`` (BRANCH_EQ, BRANCH_NEQ)
  or set membership (BRANCH_MEMBER): the slot's test (:data:`LEQ`, ``EQ``,
  ``MEMBER``, ``LEAF``) and 1 where a NaN takes the held branch.
- ``roots``: int64 ``(T,)``, root slots; ``leaves``: float64 ``(M, K)``, the
  weight a leaf adds to each of the K targets (classes), NaN where the leaf
  has no weight for that target; ``members``: float64 ``(P, 2)``,
  ``(node, value)`` pairs of the set-membership nodes.

>>> nodes = np.array([[0, 0, 1, 2, 0], [0, -1, 1, 1, 0], [0, -1, 2, 2, 0]])
>>> walk, thresholds, roots = pack_trees(nodes, np.array([1.0, 0, 0]), np.array([0]))
>>> leaves = np.array([[np.nan], [1.0], [2.0]])
>>> out = np.empty((2, 1), np.float32)
>>> tree_ensemble(np.array([[0.0], [5.0]], np.float32), walk, thresholds, roots, leaves, np.empty((0, 2)),
...               out=out, aggregate="SUM", base_values=(), post_transform="NONE", max_depth=1)
>>> out.ravel().tolist()
[1.0, 2.0]
"""

from __future__ import annotations

import math
from array import array

import numpy as np

from ...errors import ExecutionError
from ..fpstate import quiet
from ._registry import register_kernel
from .ml import COLUMNS_MIN_ROWS, label_argmax, softmax_into, transform_scores
from .tree_gemm import BITS_MAX_WORK, bits_scores, gemm_plan, gemm_scores
from .tree_ranks import RANKS_MAX_EXTRA, rank_scorer, rank_scores, use_ranks
from .tree_walk import one_sample_scorer

#: a float64 rounds to a float32 above 0.5 exactly when it is above this (the midpoint to the next
#: float32, 0.5 + 2^-24, which rounds to even: to 0.5)
ABOVE_HALF_IN_FLOAT32 = 0.5 + 2.0 ** -25

#: mode codes of the node list
MODES = {"BRANCH_LEQ": 0, "BRANCH_LT": 1, "BRANCH_GTE": 2, "BRANCH_GT": 3, "BRANCH_EQ": 4, "BRANCH_NEQ": 5,
         "BRANCH_MEMBER": 6}
LEAF = -1
#: the tests a walk form keeps (rows 2 of a four-row ``walk``)
LEQ, EQ, MEMBER = MODES["BRANCH_LEQ"], MODES["BRANCH_EQ"], MODES["BRANCH_MEMBER"]

# ---------------------------------------------------------------- packing (at convert time)


def pack_trees(nodes: np.ndarray, thresholds: np.ndarray, roots: np.ndarray):
    """``(walk, slot thresholds, root slots)`` from a node list.

    The node list: ``nodes`` int64 ``(M, 5)``, per node ``feature, mode,
    true, false, missing_tracks_true`` (``mode`` one of :data:`MODES` or
    :data:`LEAF`, children as node indices, a leaf's children itself);
    ``thresholds`` float64 ``(M,)``; ``roots`` int64 ``(T,)`` root nodes.
    """
    nodes = np.asarray(nodes, dtype=np.int64).reshape(-1, 5)
    feature, mode, true, false, missing = nodes.T
    t = np.asarray(thresholds, dtype=np.float64).reshape(-1)
    ordered = (mode >= 0) & (mode <= 3)
    # NaN fails every comparison, so it takes the false branch unless the
    # node says missing values go true: then the test is negated and the
    # branches swapped, so that NaN (failing the negation too) goes true
    negate = ordered & (missing != 0)
    # the basic predicate after negation: 0 <=, 1 <, 2 >=, 3 > (v <= t negated is v > t, ...)
    pred = np.where(negate, 3 - mode, mode)
    col = 2 * feature + ((pred == 2) | (pred == 3))            # >= and > read -x
    u = np.where((pred == 2) | (pred == 3), -t, t)
    strict = (pred == 1) | (pred == 3)
    with quiet():
        u = np.where(strict, np.where(u == -np.inf, np.nan, np.nextafter(u, -np.inf)), u)
    # a NaN threshold fails every comparison: the negated test always holds
    u = np.where(np.isnan(t) & negate, np.inf, u)
    held, failed = np.where(negate, false, true), np.where(negate, true, false)
    neq = mode == MODES["BRANCH_NEQ"]                          # v != t: v == t with the branches swapped
    held, failed = np.where(neq, false, held), np.where(neq, true, failed)
    test = np.select([mode == LEAF, ordered, neq], [LEAF, LEQ, EQ], mode)
    nan_true = (missing != 0) & ((mode == EQ) | (mode == MEMBER))
    leaf = mode == LEAF
    m = len(nodes)
    slot = np.arange(m)
    rows = [np.where(leaf, 0, col), np.stack([np.where(leaf, slot, failed), np.where(leaf, slot, held)], 1) * 2]
    rows = [np.repeat(rows[0], 2), rows[1].reshape(-1)]
    if ((test != LEAF) & (test != LEQ)).any():
        rows += [np.repeat(test, 2), np.repeat(nan_true.astype(np.int64), 2)]
    return np.stack(rows), np.repeat(np.where(leaf, 0.0, u), 2), 2 * np.asarray(roots, dtype=np.int64)


# ---------------------------------------------------------------- the walk


def find_leaves(x, walk, thresholds, roots, members, max_depth: int) -> np.ndarray:
    """The leaf node each sample reaches in each tree: int64 ``(N, T)``."""
    x = np.asarray(x)
    x = x.reshape(x.shape[0] if x.ndim else 1, math.prod(x.shape[1:]))     # (0, f) too: no -1 of 0 rows
    n, f = x.shape
    column, nxt = walk[0], walk[1]
    if column.size and int(column.max()) >= 2 * f:
        raise ExecutionError(f"tree_ensemble: a node reads feature {int(column.max()) // 2} of {f} features")
    xx = np.empty((n, f, 2))                       # [x, -x] interleaved: column 2f + 1 is -x[:, f]
    xx[:, :, 0] = x
    np.negative(x, out=xx[:, :, 1])
    xx = xx.reshape(-1)
    offset = np.arange(0, n * 2 * f, 2 * f)[:, None]
    at = np.empty((n, roots.size), dtype=np.int64)
    at[...] = roots
    col, value, limit, held = np.empty_like(at), np.empty(at.shape), np.empty(at.shape), np.empty(at.shape, bool)
    # indices are in range by construction (checked above and at pack time): mode="clip" skips the checks
    for _ in range(max_depth):
        column.take(at, out=col, mode="clip")
        col += offset
        xx.take(col, out=value, mode="clip")
        thresholds.take(at, out=limit, mode="clip")
        np.less_equal(value, limit, out=held)
        if walk.shape[0] > 2:
            _other_tests(walk, members, at, value, limit, held)
        at += held
        nxt.take(at, out=at, mode="clip")
    if (nxt.take(at, mode="clip") != at).any():
        raise ExecutionError(f"tree_ensemble: a tree is deeper than its declared depth {max_depth}")
    at >>= 1
    return at


def _other_tests(walk, members, at, value, limit, held) -> None:
    """Overwrite ``held`` where the node tests ``==`` or membership, and
    where a NaN takes the held branch of such a node."""
    test = np.take(walk[2], at)
    eq = test == EQ
    if eq.any():
        held[eq] = value[eq] == limit[eq]
    member = test == MEMBER
    if member.any():
        held[member] = _is_member(at[member] >> 1, value[member], members)
    held |= np.isnan(value) & (np.take(walk[3], at) != 0)


def _is_member(node: np.ndarray, value: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Whether each ``value`` is in its ``node``'s set (the ``members`` pairs)."""
    pairs = {(int(nd), float(v)) for nd, v in members.tolist()}
    return np.fromiter(((int(nd), float(v)) in pairs for nd, v in zip(node.tolist(), value.tolist())),
                       dtype=bool, count=node.size)


def aggregate_leaves(at: np.ndarray, leaves: np.ndarray, aggregate: str) -> np.ndarray:
    """The targets' scores, float64 ``(N, K)``, from the leaves reached."""
    given = ~np.isnan(leaves)
    if aggregate in ("SUM", "AVERAGE"):
        weights = np.where(given, leaves, 0.0)
        if weights.shape[1] == 1:                         # one target: a flat gather and a row sum
            scores = np.take(weights[:, 0], at).sum(axis=1)[:, None]
        else:
            scores = np.take(weights, at, axis=0).sum(axis=1)
        return scores / at.shape[1] if aggregate == "AVERAGE" and at.shape[1] else scores
    if aggregate not in ("MIN", "MAX"):
        raise ExecutionError(f"tree_ensemble: unknown aggregate function {aggregate!r}")
    weights, reached = leaves[at], given[at]              # (N, T, K)
    fill = np.inf if aggregate == "MIN" else -np.inf
    pick = np.min if aggregate == "MIN" else np.max
    scores = pick(np.where(reached, weights, fill), axis=1)
    return np.where(reached.any(axis=1), scores, 0.0)   # a target no tree scores stays 0


def _scores(x, walk, thresholds, roots, leaves, members, aggregate: str, max_depth: int, model) -> np.ndarray:
    """The aggregated scores, float64 ``(N, K)``: by leaf masks or products (:mod:`.tree_gemm`)
    where the instruction's :class:`_Model` has them and the batch is small, else by the walk."""
    if model is not None and x.ndim == 2 and x.shape[0] <= model.rank_rows and x.shape[1] >= model.features \
            and aggregate in ("SUM", "AVERAGE"):        # the usual small batch, in as few tests as can be
        scores = model.score(x)
        return scores / len(roots) if aggregate == "AVERAGE" else scores
    gemm = model.gemm if model is not None else None
    if gemm is not None and aggregate in ("SUM", "AVERAGE") and x.ndim == 2 and x.shape[1] >= gemm.features:
        if gemm.bits is not None and x.shape[0] * gemm.bits.held_mask.size <= BITS_MAX_WORK:
            scores = (model.score(x) if model.score is not None else
                      rank_scores(gemm.ranks, gemm.bits.weights, gemm.bits.offsets, x)) \
                if use_ranks(gemm.ranks, x.shape[0]) else bits_scores(gemm, x)
        elif x.shape[0] * gemm.paths_t.size <= GEMM_MAX_WORK:
            scores = gemm_scores(gemm, x)
        else:
            scores = None
        if scores is not None:
            return scores / len(roots) if aggregate == "AVERAGE" else scores
    return aggregate_leaves(find_leaves(x, walk, thresholds, roots, members, max_depth), leaves, aggregate)


#: the products run while the batch times the padded path matrix stays under this many values
GEMM_MAX_WORK = 1 << 20


class _Model:
    """What an instruction's calls share, worked out once per model (its constants): the
    product matrices and the facts the classifier reads."""

    def __init__(self, walk, thresholds, roots, leaves, max_depth: int | None, base: np.ndarray | None = None):
        self.key = (walk, thresholds, roots, leaves)
        self.gemm = None if max_depth is None else gemm_plan(walk, thresholds, roots, leaves, max_depth)
        self.scored = ~np.isnan(leaves).all(axis=0)
        self.all_positive = bool((np.nan_to_num(leaves) >= 0).all())
        # the batches that take the threshold ranks (_scores' tests, worked out once: -1 for none)
        gemm, self.rank_rows, self.score, self.features = self.gemm, -1, None, 0
        #: the ranks' scores with ``base`` (float64 ``(K,)``) added by their reduction, or None
        self.based = None
        # one sample by a walk in Python (small ensembles of <= tests; None otherwise)
        self.one = None if max_depth is None else one_sample_scorer(walk, thresholds, roots, leaves)
        if gemm is not None and gemm.bits is not None and gemm.ranks is not None:
            self.score = rank_scorer(gemm.ranks, gemm.bits.weights, gemm.bits.offsets)
            if base is not None:
                self.based = rank_scorer(gemm.ranks, gemm.bits.weights, gemm.bits.offsets, base)
            self.features = gemm.features
            extra = gemm.ranks.extra
            self.rank_rows = min(BITS_MAX_WORK // gemm.bits.held_mask.size,
                                 RANKS_MAX_EXTRA // extra if extra > 0 else BITS_MAX_WORK)

    def fits(self, walk, thresholds, roots, leaves) -> bool:
        key = self.key
        return walk is key[0] and thresholds is key[1] and roots is key[2] and leaves is key[3]


def _specialized(run):
    """``specialize_attrs`` of a tree kernel whose body is ``run(..., model=)``: keeps a
    :class:`_Model` per instruction when the model's arrays are constants, and the base values
    as the float64 array the body adds (not converted again per call)."""
    def specialize(attrs: dict, constant: tuple):
        attrs = {**attrs, "base_values": _base(attrs["base_values"])}
        if not (len(constant) > 4 and all(constant[1:5])) or set(attrs) - set(_SETTINGS):
            return lambda *args, out, workspace=None: run(*args, None, out=out, **attrs)
        model = [None]

        # the attributes by position, in the body's order (keywords cost ~0.3 us a call)
        settings = tuple(attrs[k] for k in _SETTINGS if k in attrs)
        finish, finishing = _FINISH[run], (attrs["base_values"], attrs["post_transform"])
        finish_row, base_row = _FINISH_ROW[run], attrs["base_values"].tolist()[0]
        summed, average = attrs["aggregate"] in ("SUM", "AVERAGE"), attrs["aggregate"] == "AVERAGE"
        # a classifier of 3+ classes summing its trees: the base values added by the ranks' reduction
        fold = run is _classify and attrs["aggregate"] == "SUM" and attrs["base_values"].size >= 3
        based_finishing = (_base(()), attrs["post_transform"])

        def call(x, walk, thresholds, roots, leaves, members, *, out, workspace=None):
            m = model[0]
            if m is None or not m.fits(walk, thresholds, roots, leaves):
                m = model[0] = _Model(walk, thresholds, roots, leaves, attrs["max_depth"],
                                      attrs["base_values"][0] if fold else None)
            if m.one is not None and x.__class__ is np.ndarray and x.shape[0] == 1 and x.ndim == 2 and summed \
                    and x.dtype in _PYTHON_FLOATS and x.shape[1] >= m.one.features:
                sums = m.one(x)                         # one sample: the walk in Python, the same sums
                if average:
                    count = len(roots)
                    sums = [v / count for v in sums]
                if not finish_row(sums, out, base_row, attrs["post_transform"]):
                    finish(np.array([sums]), m, out, *finishing)
                return
            if x.__class__ is np.ndarray and x.ndim == 2 and x.shape[0] <= m.rank_rows \
                    and x.shape[1] >= m.features and summed:
                # _scores' first case, straight (its calls and tests were ~0.6 us of a batch of one)
                if m.based is not None:                 # scores + base by the reduction
                    scores = m.based(x)
                    if 1 < x.shape[0] < COLUMNS_MIN_ROWS:
                        # contiguous: the softmax's row path on the strided [:, :3] view costs ~1 us
                        # more, the copy ~0.25
                        scores = scores.copy()
                    finish(scores, m, out, *based_finishing)
                    return
                scores = m.score(x)
                finish(scores / len(roots) if average else scores, m, out, *finishing)
                return
            run(x, walk, thresholds, roots, leaves, members, m, out, *settings)
        return call
    return specialize


#: the input types whose values Python floats hold exactly (the one-sample walk's)
_PYTHON_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
#: the bodies' attributes, in their parameters' order
_SETTINGS = ("aggregate", "base_values", "post_transform", "max_depth", "dtype")


def _base(base_values) -> np.ndarray:
    """The base values as float64 ``(1, K)`` (``(1, 0)`` when none): one row, which a batch of
    one adds without broadcasting (~0.4 us less a call on a few values)."""
    return np.asarray(base_values, dtype=np.float64).reshape(1, -1)


@register_kernel("tree_ensemble")
def tree_ensemble(x, walk, thresholds, roots, leaves, members, *, out, aggregate, base_values, post_transform,
                  max_depth, dtype):
    """Regression: aggregated leaf weights plus ``base_values``, then
    ``post_transform``, computed in float64 and written as ``dtype`` (out's)."""
    _regress(x, walk, thresholds, roots, leaves, members, None, out=out, aggregate=aggregate,
             base_values=_base(base_values), post_transform=post_transform, max_depth=max_depth, dtype=dtype)


def _regress(x, walk, thresholds, roots, leaves, members, model, out, aggregate, base_values, post_transform,
             max_depth, dtype):
    """The regressor's body; ``base_values`` float64 ``(1, K)`` or ``(1, 0)``."""
    _regressed(_scores(x, walk, thresholds, roots, leaves, members, aggregate, max_depth, model), model, out,
               base_values, post_transform)


def _regressed(scores, model, out, base_values, post_transform) -> None:
    """The regressor's output from the aggregated scores (float64 ``(N, K)``, the caller's own)."""
    if post_transform == "NONE" and base_values.size and scores.shape == out.shape and out.dtype.kind == "f":
        np.add(scores, base_values, out)        # the float64 sum, rounded into out as assigning it rounds
        return
    if base_values.size:
        scores = scores + base_values
    if post_transform != "NONE":
        scores = transform_scores(scores, post_transform)
    out[...] = scores if scores.shape == out.shape else scores.reshape(out.shape)


@register_kernel("tree_ensemble_classifier")
def tree_ensemble_classifier(x, walk, thresholds, roots, leaves, members, *, out, aggregate, base_values,
                             post_transform, max_depth):
    """Classification as onnxruntime does it: ``out`` is (label index int64
    ``(N,)``, scores ``(N, C)``). With more than two classes: scores plus
    base values, label the argmax. With two classes and weights for one
    class only (a binary model, e.g. gradient boosting's log-odds) the score
    ``s`` decides the label (``s > 0.5`` when every weight is non-negative,
    else ``s > 0``) and the scores are ``(1 - s, s)`` when every weight is
    non-negative, else ``(-s, s)``; under LOGISTIC, either way,
    ``(logistic(-s), logistic(s))``. Scores sum in float64; the label is
    decided on them rounded to float32, the scores onnxruntime sums and the
    output gives, so a tied vote stays a tie (the first class wins it).

    Whether a class has a score is decided per model (does any leaf weigh
    it), where onnxruntime decides per sample; they agree unless some
    leaves weigh a class and others do not.
    """
    _classify(x, walk, thresholds, roots, leaves, members, None, out=out, aggregate=aggregate,
              base_values=_base(base_values), post_transform=post_transform, max_depth=max_depth)


def _classify(x, walk, thresholds, roots, leaves, members, model, out, aggregate, base_values, post_transform,
              max_depth):
    """The classifier's body; ``base_values`` float64 ``(1, K)`` or ``(1, 0)``."""
    if model is None and leaves.shape[1] == 2:     # (_binary reads the model's facts)
        model = _Model(walk, thresholds, roots, leaves, None)
    _classified(_scores(x, walk, thresholds, roots, leaves, members, aggregate, max_depth, model), model, out,
                base_values, post_transform)


def _classified(scores, model, out, base_values, post_transform) -> None:
    """The labels and probabilities from the aggregated scores (float64 ``(N, K)``, the caller's own)."""
    labels, probs = out
    n_classes = scores.shape[1]
    if n_classes != 2:
        if base_values.size:
            scores = scores + base_values
        label_argmax(scores.astype(np.float32), labels)         # decided as the scores are given
        if post_transform == "SOFTMAX":
            softmax_into(scores, probs)
        else:
            probs[...] = transform_scores(scores, post_transform)
        return
    _binary(scores, model.scored, base_values, model.all_positive, post_transform, labels, probs)


def _regressed_row(sums: list, out, base: list, post_transform: str) -> bool:
    """:func:`_regressed` of one row of Python float sums without a transform, by assignment (the
    float64 sums with the base values, rounded into ``out`` as numpy rounds); False, writing
    nothing, for anything else."""
    if post_transform != "NONE" or out.shape != (1, len(sums)) or out.dtype.kind != "f" \
            or len(base) not in (0, len(sums)):
        return False
    out[0] = [v + b for v, b in zip(sums, base)] if base else sums
    return True


def _classified_row(sums: list, out, base: list, post_transform: str) -> bool:
    """:func:`_classified` of one row of Python float sums of more than two classes without a
    transform: the first maximum's index (np.argmax's: no NaN here) and the scores assigned; False,
    writing nothing, for anything else (binary models, transforms, NaN)."""
    labels, probs = out
    if post_transform != "NONE" or len(sums) <= 2 or probs.shape != (1, len(sums)) or labels.shape != (1,) \
            or len(base) not in (0, len(sums)):
        return False
    if base:
        sums = [v + b for v, b in zip(sums, base)]
    top = max(sums)
    # a finite sum holds no NaN (one sum, ~0.35 us less than testing each value); else each value
    if not math.isfinite(sum(sums)) and (top != top or any(v != v for v in sums)):
        return False
    given = array("f", sums).tolist()       # the float32 scores given: the label is their argmax
    labels[0] = given.index(max(given))
    probs[0] = sums
    return True


#: a body's last part, from the aggregated scores (what the specialized call runs after the ranks),
#: and from one row of them as Python floats (False: the caller runs the first)
_FINISH = {_regress: _regressed, _classify: _classified}
_FINISH_ROW = {_regress: _regressed_row, _classify: _classified_row}
tree_ensemble.specialize_attrs = _specialized(_regress)
tree_ensemble_classifier.specialize_attrs = _specialized(_classify)


def _binary(scores, scored, base, all_positive: bool, post_transform: str, labels, probs) -> None:
    s0, s1 = scores[:, 0], scores[:, 1]
    base = base[0]
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
        # the float32 score given decides: float64 sums of weights rounded to float32 (five
        # trees' 0.1 is 0.5000000075) would otherwise break a tie the scores show as 0.5
        labels[...] = positive > (ABOVE_HALF_IN_FLOAT32 if all_positive else 0.0)
    else:
        labels[...] = positive > 0
    if two_columns:
        probs[...] = transform_scores(np.stack([s0, s1], axis=1), post_transform)
        return
    if post_transform == "PROBIT":
        raise ExecutionError("tree_ensemble_classifier: PROBIT with a single binary score is not supported")
    if post_transform == "LOGISTIC":                       # whatever the weights' signs
        probs[...] = np.stack([_logistic(-s0), _logistic(s0)], axis=1)
    elif scored.sum() == 1 and all_positive:
        probs[...] = np.stack([1.0 - s0, s0], axis=1)
    else:
        probs[...] = np.stack([-s0, s0], axis=1)


def _logistic(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))

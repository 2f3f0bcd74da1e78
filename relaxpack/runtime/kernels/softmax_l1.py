"""A classifier's softmax and the L1 Normalizer after it, in one pass over its scores.

scikit-learn's LogisticRegression converts to LinearClassifier (``post_transform="SOFTMAX"``)
followed by Normalizer (``norm="L1"``); FuseClassifierNormalizer makes them one call
(``linear_classifier(..., norm="L1")``). The normalizer reads the softmax as float32, so its
result is ``round32(p / sum(p))`` with ``p = round32(e / sum(e))``, ``e = exp(s - max(s))``, the
sums in float64: these functions make exactly those values with fewer numpy calls than the two
kernels (``ml.softmax_into`` then ``ml._l1_normalize``), for rows of at most
:data:`~.ml.SEQUENTIAL_SUM_MAX` scores (numpy adds fewer than 8 values one after the other from
the first, so a sum over columns or in a Python loop is its row sum).

On a row whose max is finite every ``e`` is in ``[0, 1]`` (``+0.0`` or positive) and the max's is
1, so the softmax's sum lies in ``[1, K]``, its max quotient is at least ``1/K`` and the float32
values sum to at least that: no zero, inf or NaN reaches the normalizer, whose ``abs`` and
zero-norm guard then change nothing. A row with an inf
or NaN goes back to the two kernels' formulas (the callers' fallback), which decide what it gives.

>>> probs, labels = np.empty((1, 3), np.float32), np.empty(1, np.int64)
>>> softmax_l1_row([0.5, 2.0, -1.0], labels, probs)
True
>>> labels.tolist(), int(probs.argmax())
([1], 1)
"""

from __future__ import annotations

import math
from array import array

import numpy as np

#: the bare reductions (positional arguments: keywords cost more)
_SUM, _MAX = np.add.reduce, np.maximum.reduce


def softmax_l1_row(row: list, labels: np.ndarray, probs: np.ndarray) -> bool:
    """One row of float64 scores (a list of at most 7 Python floats): its argmax into ``labels[0]``
    and its softmax, L1-normalized, into ``probs[0]`` (float32), in Python floats but for the exp
    (numpy's, on the same differences). ``array("f")`` rounds each quotient to float32 as numpy's
    cast does (a C cast, round to nearest). Returns False, writing nothing, for a row holding an inf
    or NaN or whose sum overflows."""
    if not math.isfinite(sum(row)):
        return False
    top = max(row)
    labels[0] = row.index(top)          # the first maximum, as np.argmax takes it
    exps = np.exp([v - top for v in row]).tolist()
    total = 0.0
    for v in exps:
        total += v                      # (the max's term is 1: 1 <= total <= K)
    rounded = array("f", [v / total for v in exps]).tolist()
    total = 0.0
    for v in rounded:
        total += v                      # (the max's quotient is at least 1/K: no zero norm)
    probs[0] = [v / total for v in rounded]
    return True


def softmax_l1_columns(scores: np.ndarray, probs: np.ndarray) -> bool:
    """The softmax of float64 ``scores`` ``(N, K)``, K <= 7, L1-normalized into ``probs`` (float32),
    on a ``(K, N)`` copy: each reduction over a row's K values runs down K contiguous rows of N
    (a row reduction of a few values costs ~1 us a call and ~10 ns a value), and the float32 round
    trip between the two divisions is two casts. ``scores`` is left as it was. Returns False,
    writing nothing, when a row's max is not finite (one ``dot`` of the maxima tells; one so large
    that its square overflows goes back too, harmlessly)."""
    columns = np.ascontiguousarray(scores.T)
    top = _MAX(columns, 0)
    if not math.isfinite(top.dot(top)):
        return False
    np.subtract(columns, top, columns)
    np.exp(columns, columns)
    np.divide(columns, _SUM(columns, 0), columns)
    rounded = columns.astype(np.float32).astype(np.float64)
    np.divide(rounded, _SUM(rounded, 0), rounded)
    probs[...] = rounded.T              # (the assignment rounds, as the normalizer's does)
    return True


__all__ = ["softmax_l1_columns", "softmax_l1_row"]

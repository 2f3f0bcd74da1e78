"""Classic machine-learning kernels (ONNX's ai.onnx.ml domain):
label_encoder, ml_linear, linear_classifier, ml_normalizer, and the
post transforms the linear and tree models share.

Classifiers write the *index* of the chosen class; the importer maps it to
the class label (ints or strings) with a ``take`` on the label constant.

>>> out = np.empty(3, np.int64)
>>> label_encoder(np.array(["a", "c", "b"], object), np.array(["a", "b"], object), np.array([1, 2]),
...               np.array(-1), out=out)
>>> out.tolist()
[1, -1, 2]
"""

from __future__ import annotations

import math

import numpy as np

from ...errors import ExecutionError, ShapeError
from ._math import python_max
from ._registry import register_kernel, register_packed
from .softmax_l1 import softmax_l1_columns, softmax_l1_row

# ---------------------------------------------------------------- post transforms


def transform_scores(scores: np.ndarray, name: str) -> np.ndarray:
    """ONNX ML's score transforms over the last axis: NONE, LOGISTIC,
    SOFTMAX, SOFTMAX_ZERO (zeros stay zero), PROBIT (``sqrt(2) * erfinv(2p - 1)``)."""
    if name == "NONE":
        return scores
    if name == "LOGISTIC":
        return 1.0 / (1.0 + np.exp(-scores))
    if name in ("SOFTMAX", "SOFTMAX_ZERO"):
        e = np.exp(scores - scores.max(axis=-1, keepdims=True)) if scores.size else scores
        if name == "SOFTMAX_ZERO":
            e = np.where(np.abs(scores) > 1e-7, e, 0.0)
        e /= np.add.reduce(e, axis=-1, keepdims=True)
        return e
    if name == "PROBIT":
        return math.sqrt(2.0) * _erfinv(2.0 * scores - 1.0)
    raise ExecutionError(f"unknown post_transform {name!r} (NONE, LOGISTIC, SOFTMAX, SOFTMAX_ZERO, PROBIT)")


def softmax_into(scores: np.ndarray, probs: np.ndarray) -> None:
    """``transform_scores(scores, "SOFTMAX")`` written into ``probs``: ``scores`` float64
    ``(N, K)``, the caller's own (overwritten in place). The same float64 operations (NaN
    payloads included) in cheaper calls, as a classifier's batch of a few rows costs in calls:
    the reductions take their arguments by position, and the float64 quotient is rounded into
    ``probs`` by assignment (a ``divide`` with ``out=`` and ``casting=`` costs more)."""
    if scores.size:
        if scores.shape[1] <= SEQUENTIAL_SUM_MAX and (
                _softmax_one_row(scores, probs) if scores.shape[0] == 1 else
                scores.shape[0] >= COLUMNS_MIN_ROWS and _softmax_by_columns(scores, probs)):
            return
        np.subtract(scores, _row_max(scores), scores)
        np.exp(scores, scores)
        if not divide_row_by_sum(scores, probs):
            probs[...] = scores / _SUM(scores, 1, None, None, True)


#: batches from this many rows take the softmax by columns (measured on 3-5 classes: 0.95x the
#: rows' time at 16 rows, 0.8x at 32, 0.7x at 64, 0.5x at 128; 1.03x at 8)
COLUMNS_MIN_ROWS = 16


def _softmax_by_columns(scores: np.ndarray, probs: np.ndarray) -> bool:
    """:func:`softmax_into` of float64 ``scores`` ``(N, K)``, ``K <=`` :data:`SEQUENTIAL_SUM_MAX`,
    on a ``(K, N)`` copy: each reduction over a row's K values runs down K contiguous rows of N
    (a reduction along rows of 3 values costs ~10 ns a value: 2.6 us at 64 rows) and gives the
    same values: the max is the max (its sign when zero changes no difference), the sum adds the
    K values one after the other from the first as np.add.reduce does below 8 values (NaN
    payloads included). Returns False, writing nothing, when a max is NaN: the row reduction
    makes a NaN of its own there (not always the one it met), which the rows then give."""
    columns = np.ascontiguousarray(scores.T)
    top = _MAX(columns, 0)
    square = top.dot(top)                   # NaN exactly when a max is (inf * inf is inf)
    if square != square:
        return False
    np.subtract(columns, top, columns)
    np.exp(columns, columns)
    columns /= _SUM(columns, 0)
    probs[...] = columns.T
    return True


def _softmax_one_row(scores: np.ndarray, probs: np.ndarray) -> bool:
    """:func:`softmax_into` of one row of at most :data:`SEQUENTIAL_SUM_MAX` finite float64 scores
    in Python floats but for the exp: the max, the differences (IEEE float64 subtractions), numpy's
    exp of them (the same float64 loop on the same values), the sum one value after the other (as
    np.add.reduce adds fewer than 8) and the quotients, assigned (rounded as numpy rounds): the
    same bits in half the calls (2.3 -> 1.9 us). Returns False, writing nothing and leaving
    ``scores`` as they were, for a row holding an inf or NaN or whose sum overflows."""
    row = scores.tolist()[0]
    if not math.isfinite(sum(row)):
        return False
    top = max(row)
    exps = np.exp([v - top for v in row]).tolist()
    total = 0.0
    for v in exps:
        total += v              # (the max's term is 1: 1 <= total <= K)
    probs[0] = [v / total for v in exps]
    return True


def _row_max(scores: np.ndarray):
    """The max of each row of float64 ``scores`` ``(N, K)`` as ``(N, 1)``; one row of finite
    values takes :func:`~._math.python_max` (the same value in a fifth of the reduction's cost)."""
    if scores.shape[0] == 1:
        shift = python_max(scores)           # (None for inf or NaN in the row, or an overflow)
        if shift is not None:
            return shift
    return _MAX(scores, 1, None, None, True)


#: the bare reductions (np.sum / np.max add ~1 us of Python; keywords cost more than positions)
_SUM, _MAX = np.add.reduce, np.maximum.reduce

#: rows of at most this many values are summed one after the other by np.add.reduce (its
#: pairwise summation starts at 8), so a Python loop adds them in the same order
SEQUENTIAL_SUM_MAX = 7


def divide_row_by_sum(values: np.ndarray, out: np.ndarray, absolute: bool = False) -> bool:
    """``out[...] = values / np.add.reduce(values, -1, keepdims=True)`` (of ``abs(values)`` when
    ``absolute``) for one row of float32 or float64 ``values`` ``(1, K)``, K <= 7, by Python
    floats: the same float64 sum (in np.add.reduce's order, one value after the other from the
    first), the same float64 quotients, rounded into ``out`` as numpy rounds. On a few values the
    reduction, the broadcasting divide and the assignment cost ~2.5 us, this ~0.8. Returns False,
    writing nothing, for any other shape or dtype, or a sum that is 0, inf or NaN (the caller's
    arrays then decide what a zero row, an inf or a NaN gives)."""
    if values.ndim != 2 or values.shape[0] != 1 or values.shape[1] > SEQUENTIAL_SUM_MAX \
            or values.dtype.kind != "f" or values.dtype.itemsize not in (4, 8):
        return False
    row = values.tolist()[0]
    if not row:
        return False
    total = 0.0
    if absolute:
        for v in row:
            total += abs(v)
    else:
        for v in row:
            total += v
    if not 0.0 < total < math.inf:
        return False
    out[0] = [v / total for v in row]
    return True


class RowTiles:
    """A constant row ``(1, K)`` as ``(n, K)`` copies (a column ``(K, 1)`` as ``(K, n)`` with
    ``axis=1``), kept per ``n`` (read-only): adding one to an ``(n, K)`` array is a same-shape
    ufunc call, where adding the row broadcasts (numpy's iterator: ~0.5 us more a call on a few
    rows). The same values added, so the same sums. One row (or none) gives the row itself; a
    tile of more than :data:`TILE_MAX_VALUES` values, or more than :data:`TILE_KEEP` sizes
    kept, the row (broadcast)."""

    __slots__ = ("row", "tiles", "axis")

    def __init__(self, row: np.ndarray, axis: int = 0):
        self.row, self.axis = row, axis
        self.tiles = {0: row, 1: row}

    def __call__(self, n: int) -> np.ndarray:
        tile = self.tiles.get(n)
        if tile is not None:
            return tile
        if n * self.row.size > TILE_MAX_VALUES or len(self.tiles) >= TILE_KEEP:
            return self.row
        tile = np.repeat(self.row, n, axis=self.axis)
        tile.flags.writeable = False
        self.tiles[n] = tile
        return tile


#: the most values a kept tile has (64 KiB of float64: larger batches broadcast, their
#: arithmetic outweighs the call) and the most sizes kept per row
TILE_MAX_VALUES, TILE_KEEP = 1 << 13, 16


def _erfinv(y: np.ndarray) -> np.ndarray:
    """Inverse error function: Giles' approximation refined by two Newton steps."""
    y = np.asarray(y, dtype=np.float64)
    w = -np.log((1.0 - y) * (1.0 + y))
    small = w < 5.0
    ws, wl = w - 2.5, np.sqrt(np.maximum(w, 5.0)) - 3.0
    ps = np.polyval([2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                     -0.00125372503, -0.00417768164, 0.246640727, 1.50140941], ws)
    pl = np.polyval([-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                     -0.0076224613, 0.00943887047, 1.00167406, 2.83297682], wl)
    x = np.where(small, ps, pl) * y
    erf = np.vectorize(math.erf, otypes=[np.float64])
    for _ in range(2):
        finite = np.isfinite(x)
        step = (erf(np.where(finite, x, 0.0)) - y) / (2.0 / math.sqrt(math.pi) * np.exp(-np.where(finite, x, 0) ** 2))
        x = np.where(finite, x - step, x)
    return x


# ---------------------------------------------------------------- label_encoder


@register_kernel("label_encoder")
def label_encoder(x, keys, values, default, *, out):
    """Each element of ``x`` mapped through ``keys -> values``; ``default``
    where it is not a key. Float keys match by value and NaN matches NaN."""
    flat = x.reshape(-1)
    if keys.dtype == object or flat.dtype == object:
        table = dict(zip(keys.reshape(-1).tolist(), values.reshape(-1).tolist()))
        fallback = default.reshape(()).item()
        found = np.empty(flat.size, dtype=out.dtype)
        found[:] = [table.get(k, fallback) for k in flat.tolist()]
        out[...] = found.reshape(out.shape)
        return
    order = np.argsort(keys, kind="stable")
    sorted_keys, sorted_values = keys[order], values[order]
    pos = np.clip(np.searchsorted(sorted_keys, flat), 0, max(keys.size - 1, 0))
    hit = sorted_keys[pos] == flat if keys.size else np.zeros(flat.shape, bool)
    if keys.dtype.kind == "f":
        nan_keys = np.isnan(keys)
        if nan_keys.any():
            nan_value = values[np.argmax(nan_keys)]
            result = np.where(hit, sorted_values[pos], default)
            result = np.where(np.isnan(flat), nan_value, result)
            out[...] = result.reshape(out.shape)
            return
    out[...] = np.where(hit, sorted_values[pos] if keys.size else default, default).reshape(out.shape)


@register_packed("ml.one_hot_known")
def one_hot_known(x, hot, *, what):
    """OneHotEncoder with ``zeros=0``: ``hot`` (``x[..., None] == categories``) as float32,
    or, where an element of ``x`` is no category (a row of ``hot`` without a one), an
    ExecutionError naming the node (``what``) and the element, as onnxruntime fails there."""
    known = hot.any(axis=-1)
    if not known.all():
        value = np.asarray(x)[~known].flat[0]
        value = value.item() if isinstance(value, np.generic) else value
        raise ExecutionError(f"{what}: {value!r} is not one of its categories (zeros=0 makes that an error)")
    return hot.astype(np.float32)


# ---------------------------------------------------------------- linear models and normalizer


def _feature_rows(x, coefficients) -> np.ndarray:
    """``x``, ``(F,)`` or ``(N, F)``, as float64 rows of the coefficients' width; another width is
    a ShapeError (where the importer could not see it: the width was symbolic)."""
    x = np.asarray(x)
    width = coefficients.shape[1]
    if x.ndim == 0 or x.shape[-1] != width:
        raise ShapeError(f"x has {x.shape[-1] if x.ndim else 1} features but the coefficients are "
                         f"{coefficients.shape[0]} rows of {width}")
    return x.astype(np.float64, copy=False).reshape(-1, width)


def _scores(x, coefficients, intercepts) -> np.ndarray:
    x = _feature_rows(x, coefficients)
    scores = x @ coefficients.astype(np.float64).T
    return scores + intercepts.astype(np.float64) if intercepts.size else scores


@register_kernel("ml_linear")
def ml_linear(x, coefficients, intercepts, *, out, post_transform):
    """LinearRegressor: ``x @ coefficients.T + intercepts``, then ``post_transform``."""
    out[...] = transform_scores(_scores(x, coefficients, intercepts), post_transform)


@register_kernel("linear_classifier")
def linear_classifier(x, coefficients, intercepts, *, out, post_transform, norm):
    """LinearClassifier as onnxruntime computes it: ``out`` is (class index
    ``(N,)``, scores ``(N, C)``). One row of coefficients is a binary model:
    index ``s > 0`` and scores ``(-s, s)`` before the transform. ``norm`` other than
    ``"NONE"``: the Normalizer the model applies next (FuseClassifierNormalizer), on the
    float32 scores as ``ml_normalizer`` reads them."""
    _classify(_scores(x, coefficients, intercepts), coefficients, out, post_transform)
    if norm != "NONE":
        ml_normalizer(out[1], out=out[1], norm=norm)


def _specialize_linear_classifier(attrs: dict, constant: tuple):
    """Per instruction: the float64 coefficients, transposed, and intercepts (one row) of a
    constant model kept across calls; a softmax the L1 normalizer follows (scikit-learn's
    LogisticRegression) in one pass (``softmax_l1.py``) over rows of at most
    :data:`SEQUENTIAL_SUM_MAX` classes."""
    post_transform, norm = attrs["post_transform"], attrs["norm"]
    if not (len(constant) > 2 and constant[1] and constant[2]):
        return lambda x, c, i, *, out, workspace=None: linear_classifier(x, c, i, out=out, **attrs)
    kept = [None, None, None]
    softmax_l1 = post_transform == "SOFTMAX" and norm == "L1"

    def call(x, coefficients, intercepts, *, out, workspace=None):
        if kept[0] is not coefficients or kept[1] is not intercepts:
            kept[:] = coefficients, intercepts, _kept_model(coefficients, intercepts)
        weights, bias, bias_row = kept[2]
        if x.__class__ is np.ndarray and x.ndim == 2 and x.shape[1] == weights.shape[0]:
            x = x.astype(np.float64)            # (the usual input: asarray and reshape cost more)
        else:
            x = _feature_rows(x, coefficients)
        scores = np.dot(x, weights)             # (np.matmul's result, ~0.3 us sooner)
        n = scores.shape[0]
        fused = softmax_l1 and 1 < weights.shape[1] <= SEQUENTIAL_SUM_MAX
        if fused and n == 1 and (bias is None or bias_row is not None):   # intercepts added in Python floats
            row = scores.tolist()[0]
            if softmax_l1_row(row if bias_row is None else [s + b for s, b in zip(row, bias_row)], *out):
                return
        if bias is not None:                    # (n, K) rows: the add does not broadcast
            np.add(scores, bias(n), scores)
        if fused and n > 1:
            label_argmax(scores, out[0])
            if softmax_l1_columns(scores, out[1]):
                return
        _classify(scores, coefficients, out, post_transform)
        if norm != "NONE":
            ml_normalizer(out[1], out=out[1], norm=norm)
    return call


def _kept_model(coefficients: np.ndarray, intercepts: np.ndarray) -> tuple:
    """(float64 weights ``(F, K)``, the intercepts' :class:`RowTiles` or None, and their Python
    floats where there is one per class, else None: numpy's sums, one by one)."""
    weights = np.ascontiguousarray(coefficients.astype(np.float64).T)
    if not intercepts.size:
        return weights, None, None
    row = intercepts.astype(np.float64).reshape(1, -1)
    return weights, RowTiles(row), row.tolist()[0] if row.size == weights.shape[1] else None


def _classify(scores, coefficients, out, post_transform: str) -> None:
    """Labels and transformed scores into ``out``; ``scores`` (float64, the caller's own) may
    be overwritten."""
    labels, probs = out
    if coefficients.shape[0] == 1:
        s = scores[:, 0]
        labels[...] = s > 0
        scores = np.stack([-s, s], axis=1)
    else:
        label_argmax(scores, labels)
    if post_transform == "SOFTMAX":
        softmax_into(scores, probs)
        return
    probs[...] = transform_scores(scores, post_transform)


def label_argmax(scores: np.ndarray, labels: np.ndarray) -> None:
    """Each row's argmax written into ``labels`` (an int64 ``(N,)`` output): the method with
    ``out=`` where it can (np.argmax costs ~0.5 us of Python)."""
    if labels.dtype == np.intp and labels.flags.c_contiguous:
        scores.argmax(axis=1, out=labels)
    else:
        labels[...] = scores.argmax(axis=1)


@register_kernel("ml_normalizer")
def ml_normalizer(x, *, out, norm):
    """Normalizer: each row divided by its MAX, L1 or L2 norm (rows whose norm is 0 stay),
    in float64: six numpy calls, as a batch of a few rows costs in calls, not arithmetic."""
    x = np.asarray(x)
    if norm == "L1":
        _l1_normalize(x, out)
        return
    x = np.asarray(x, dtype=np.float64)
    if norm == "MAX":
        scale = x.max(axis=-1, keepdims=True) if x.shape[-1] else np.ones(x.shape[:-1] + (1,))
    elif norm == "L2":          # (x * x may underflow to a zero norm: that row stays too)
        scale = np.sqrt(np.add.reduce(x * x, axis=-1, keepdims=True))
    else:
        raise ExecutionError(f"ml_normalizer: unknown norm {norm!r} (MAX, L1 or L2)")
    np.copyto(scale, 1.0, where=scale == 0)          # x / 1 is x: a zero norm leaves the row
    np.divide(x, scale, out=out, casting="unsafe")


def _l1_normalize(x: np.ndarray, out: np.ndarray) -> None:
    """Each row of ``x`` divided by the float64 sum of its absolute values into ``out``."""
    # a sum of absolute values is 0 only for a row of +-0 and else at least the least
    # subnormal: raised to it, a zero row divides into itself in one call (NaN stays NaN)
    if divide_row_by_sum(x, out, absolute=True):
        return
    # x in float64 once: abs with dtype= and a float32 / float64 divide each cast inside the
    # ufunc (~0.3-0.5 us more a call than a cast and two float64 calls); the same values
    wide = x if x.dtype == np.float64 else x.astype(np.float64)
    scale = _SUM(np.abs(wide), -1, None, None, True)
    np.maximum(scale, _LEAST, out=scale)
    out[...] = wide / scale     # (the assignment rounds)


def _specialize_normalizer(attrs: dict, constant: tuple):
    """Per instruction: L1 (scikit-learn's LogisticRegression ends with it) calls its body
    directly on an array, without the keywords and the norm's branch; the rest the kernel."""
    if attrs.get("norm") != "L1":
        return lambda x, *, out, workspace=None: ml_normalizer(x, out=out, **attrs)

    def call(x, *, out, workspace=None):
        _l1_normalize(x if x.__class__ is np.ndarray else np.asarray(x), out)
    return call


#: the least positive float64 (a subnormal)
_LEAST = np.nextafter(0.0, 1.0)

ml_normalizer.specialize_attrs = _specialize_normalizer


linear_classifier.specialize_attrs = _specialize_linear_classifier

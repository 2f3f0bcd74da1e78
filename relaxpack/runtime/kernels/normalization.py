"""Softmax and normalization kernels, numerically stable.

softmax subtracts the max in place into ``out``, exponentiates and divides
in place; the normalizations compute their statistics in float32 at least
(float16 and bfloat16 inputs are widened, as ONNX's ``stash_type`` does).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ..fpstate import quiet
from ._math import axis_tuple, commit, is_low_float, load, normalize_axis, python_max, scratch, upcast
from ._registry import register_kernel
from .half_cast import WIDEN_MIN_SIZE, cast_into
from ._workspace import Scratch
from .layer_norm_rows import (_RowPlanes, _layer_norm_matrix, _layer_norm_rows, _outer_fits, _tiny,
                              _tiny_layer_norm, layer_norm_constants, ones_column, ones_vector, rows_into,
                              tiny_into)


#: a row whose exponentials, shifted by the tensor's max, sum below this is
#: redone with its own max (see :func:`_softmax_rows`)
_ROW_SUM_FLOOR = 1e-3
#: up to this many values a tensor with such a row is redone whole (cheaper than picking rows);
#: a larger one when at least a quarter of its rows are (DeBERTa masks whole query rows: picking
#: half of them out cost what the whole pass costs)
_WHOLE_REDO_SIZE = 2048


def _softmax_rows(x: np.ndarray, buf: np.ndarray) -> str | None:
    """Softmax over the last axis of ``x`` into ``buf`` (float32/float64,
    contiguous, may be ``x``); a few rows by :func:`_rowwise_softmax`, else shifted by the max
    of the whole tensor (of each block of rows, in a large one: :func:`_softmax_matrix`): one
    fast reduction instead of a max per row (numpy's per-row max of short
    rows costs more than the exp), and row sums by a BLAS matrix-vector
    product. Rows whose own max is far below the tensor's (their shifted sum
    is under ``_ROW_SUM_FLOOR``) are redone with it, so only outputs below
    ~1e-35 (float32) can differ from the per-row shift. False, with ``buf``
    untouched, when the max is not finite (inf / nan: the general path);
    otherwise what :func:`_shifted_softmax` returns. Six numpy calls when no row is redone, the reductions as bare ufunc
    reductions and ``out`` positional: on short rows each call's argument
    handling costs more than its arithmetic (``np.max`` is 1 µs of Python
    around ``np.maximum.reduce``)."""
    n = x.shape[-1]
    rows, dst = np.asarray(x).reshape(-1, n), buf.reshape(-1, n)     # (a subclass's reductions keep its type)
    return _softmax_matrix(rows, dst, np.may_share_memory(x, buf))


#: from this many bytes a softmax runs by blocks of rows (:func:`_softmax_matrix`): past the last
#: level cache its five passes over the tensor each went to memory
_BLOCKED_BYTES = 16 << 20
#: bytes of rows a block holds (at least one row), cache-sized
_BLOCK_BYTES = 1 << 20


def _softmax_matrix(rows: np.ndarray, dst: np.ndarray, shared: bool) -> str | None:
    """:func:`_softmax_rows` of the rows as a matrix, into ``dst`` (its rows); ``shared``: whether
    they may share memory (then the exponentials go to a temporary). A tensor of
    ``_BLOCKED_BYTES`` or more runs block by block of ``_BLOCK_BYTES`` of rows, each shifted by its
    block's max, so each block's passes stay in cache (1.2-1.3x at 16-64 MiB, 1.3-1.7x at 0.5 GB:
    an attention over 2624 tokens at batch 20): REDONE when a block was, None when one is (mixed
    dtypes: the general path then computes all of it)."""
    step = _block_rows(rows)
    if step is None:
        return _softmax_block(rows, dst, shared)
    done = DONE
    for start in range(0, rows.shape[0], step):
        block = _softmax_block(rows[start:start + step], dst[start:start + step], shared)
        if block is None:
            return None
        if block is REDONE:
            done = REDONE
    return done


def _block_rows(rows: np.ndarray) -> int | None:
    """Rows per block of :func:`_softmax_matrix` when ``rows`` is blocked (more than one block of
    ``_BLOCK_BYTES``, ``_BLOCKED_BYTES`` in all), else None."""
    if rows.nbytes < _BLOCKED_BYTES:
        return None
    step = max(1, _BLOCK_BYTES // max(1, rows[:1].nbytes))
    return step if step < rows.shape[0] else None


def _softmax_block(rows: np.ndarray, dst: np.ndarray, shared: bool) -> str | None:
    """:func:`_softmax_matrix` of rows taken whole."""
    if rows.shape[1] == 1:
        return _single_softmax(rows, dst)
    if rows.shape[0] <= _FEW and rows.size <= _ROWWISE_SIZE:
        done = _rowwise_softmax(rows, dst)
        if done is not None:
            return done
    shift = _tensor_max(rows)
    if not math.isfinite(shift):
        return _general_rows(rows, dst, _MAX(rows, 1, None, None, True))
    if not shared:
        return _shifted_softmax(rows, shift, dst, dst)
    # the exponentials go to a temporary when buf is x: a redone row reads x again
    with Scratch([(dst.shape, dst.dtype)]) as (exps,):
        return _shifted_softmax(rows, shift, exps, dst)


def _single_softmax(rows: np.ndarray, dst: np.ndarray) -> str:
    """Rows of one value (attention at sequence length 1): ``exp(x - x)``, 1 where ``x`` is finite
    and NaN where it is not (``inf - inf``), what the shifted formula gives for any shift (the row
    path's ~5 us for two numpy calls). ``REDONE``: NaN may be in the result."""
    with quiet():
        np.subtract(rows, rows, dst)
    np.exp(dst, dst)
    return REDONE


#: up to this many values (and _FEW rows) the row path shifts each row by its own max
#: (:func:`_rowwise_softmax`)
_ROWWISE_SIZE = 1024


def _rowwise_softmax(rows: np.ndarray, dst: np.ndarray) -> str | None:
    """Softmax of a few rows (at most ``_FEW``), each shifted by its own max (the textbook formula,
    and what a redone row computes): their maxes cost about what the tensor's max and the least row
    sum cost together, their finiteness is a Python check, and a masked row (DeBERTa's finfo.min
    query rows) needs no second pass. Reads each value once before writing it, so ``dst`` may be
    ``rows``. A row max that is not finite (inf, NaN, an all -inf row) goes to
    :func:`_nonfinite_rowwise`, which computes what the tensor path then gives (None, ``dst``
    untouched, for mixed dtypes: the tensor path decides). More rows keep the tensor path: numpy's
    row maxes of many short rows and a finiteness check by ufuncs cost 1.1-1.5x it (34-64 rows)."""
    maxes = _MAX(rows, 1, None, None, True)
    listed = maxes.ravel().tolist()
    if not all(map(math.isfinite, listed)):
        return _nonfinite_rowwise(rows, dst, maxes, listed)
    if rows.dtype == dst.dtype:
        np.subtract(rows, maxes, dst)
    else:
        np.subtract(rows, maxes, out=dst, dtype=dst.dtype)        # low floats: subtract in float32
    np.exp(dst, dst)
    total = np.dot(dst, ones_column(rows.shape[-1], dst.dtype))   # each row holds a 1: sums >= 1
    np.divide(dst, total, dst)
    return DONE


def _nonfinite_rowwise(rows: np.ndarray, dst: np.ndarray, maxes: np.ndarray, listed: list) -> str | None:
    """:func:`_rowwise_softmax` when some row max is not finite, from the row maxes already taken:
    the calls the tensor path would make after its checks, bit for bit (a quantized BERT's fully
    masked scores were ~20 us of checks twice over, a copy and keyword calls for five ufuncs).
    The tensor's max is then the largest row max: if it is not finite (NaN, +inf, every row
    -inf) :func:`_general_rows`; else (-inf rows beside
    finite ones) the tensor shift's row sum of an all -inf row is 0, so a tensor this small is
    redone whole by its row maxes with BLAS row sums: the finite path's formula. REDONE (NaN may
    be in the result); None for mixed dtypes (the tensor path decides)."""
    if any(m != m or m == math.inf for m in listed) or max(listed) == -math.inf:
        return _general_rows(rows, dst, maxes)
    if rows.dtype != dst.dtype:
        return None
    with quiet():           # -inf - -inf: NaN, as in ONNX's reference
        np.subtract(rows, maxes, dst)
        np.exp(dst, dst)
        np.divide(dst, np.dot(dst, ones_column(rows.shape[-1], dst.dtype)), dst)
    return REDONE


def _general_rows(rows: np.ndarray, dst: np.ndarray, maxes: np.ndarray) -> str | None:
    """The general path's formula (:func:`_softmax_into`'s last lines) on the rows as matrices,
    for a tensor whose max is not finite, from its row maxes ``maxes`` (``(rows, 1)``): ``x - max``
    per row, ``exp``, sums by ``np.add.reduce`` over the rows (the pairwise sum ``np.sum`` makes over
    the last axis), the division; bit for bit, without the general path's copy into ``out`` and
    its keyword calls, and without the checks run again by the specialized kernel (a fully masked
    (3, 2, 17, 17) was ~24 us). REDONE; None for mixed dtypes (the general path decides)."""
    if rows.dtype != dst.dtype:
        return None
    with quiet():           # inf - inf: NaN, as in ONNX's reference
        np.subtract(rows, maxes, dst)
        np.exp(dst, dst)
        np.divide(dst, _SUM(dst, 1, None, None, True), dst)
    return REDONE


def _shifted_softmax(rows: np.ndarray, shift, exps: np.ndarray, dst: np.ndarray) -> str:
    """The body of :func:`_softmax_rows`: ``exp(rows - shift)`` into ``exps``, divided by the
    row sums into ``dst`` (which may be ``exps``, not ``rows``); ``REDONE`` when some row was
    redone with its own max (only such a row, all -inf, can be NaN), else ``DONE``."""
    if rows.dtype == exps.dtype:
        np.subtract(rows, shift, exps)
    else:
        np.subtract(rows, shift, out=exps, dtype=exps.dtype)       # low floats: subtract in float32
    np.exp(exps, exps)
    total = np.dot(exps, ones_vector(rows.shape[-1], exps.dtype))
    if _least(total) < _ROW_SUM_FLOOR:
        return _redo_low_rows(rows, exps, dst, total)
    with quiet():
        np.divide(exps, total[:, None], dst)
    return DONE


def redoes_whole(rows: np.ndarray, total: np.ndarray) -> bool:
    """Whether :func:`_redo_low_rows` redoes every row of ``rows`` (their tensor-shifted sums
    ``total``, some under ``_ROW_SUM_FLOOR``): a small tensor, or a quarter of the rows low."""
    return rows.size <= _WHOLE_REDO_SIZE or 4 * np.count_nonzero(total < _ROW_SUM_FLOOR) >= rows.shape[0]


def _redo_low_rows(rows: np.ndarray, exps: np.ndarray, dst: np.ndarray, total: np.ndarray) -> str:
    """The end of :func:`_shifted_softmax` when some row's shifted sum (``total``, a vector) is
    under ``_ROW_SUM_FLOOR``: such rows are redone with their own max; every row
    (:func:`redoes_whole`: a small tensor, or many low rows) by :func:`redo_whole`. REDONE."""
    if redoes_whole(rows, total):
        return redo_whole(rows, _row_maxes(rows), exps, dst)
    low = np.flatnonzero(total < _ROW_SUM_FLOOR)
    again = rows[low].astype(exps.dtype)
    with quiet():          # an all -inf row is NaN, as in ONNX's reference
        again -= np.max(again, axis=1, keepdims=True)
    np.exp(again, out=again)
    exps[low] = again
    total[low] = np.sum(again, axis=1)
    with quiet():
        np.divide(exps, total[:, None], dst)
    return REDONE


def redo_whole(rows: np.ndarray, maxes: np.ndarray, exps: np.ndarray, dst: np.ndarray) -> str:
    """Every row shifted by its own max (``maxes``, ``(rows, 1)``): five calls, where picking the
    low rows out costs eight and fancy indexing. ``exps`` may be ``dst``. REDONE."""
    with quiet():          # an all -inf row is NaN, as in ONNX's reference
        np.subtract(rows, maxes, out=exps, dtype=exps.dtype)
        np.exp(exps, exps)
        total = np.dot(exps, ones_vector(rows.shape[-1], exps.dtype))
        np.divide(exps, total[:, None], dst)
    return REDONE


def surely_redone_whole(rows: np.ndarray, dst: np.ndarray) -> str | None:
    """:func:`redo_whole` into ``dst`` when the tensor-shift path would come to it for sure: some
    rows' maxes (a quarter of them in a tensor past ``_WHOLE_REDO_SIZE``) lie more than ``log(n /
    _ROW_SUM_FLOOR) + 1`` below the tensor's max, so their shifted sums (at most ``n`` times
    ``exp`` of that gap) are under the floor. Then one pass instead of two, the same calls on the
    same row maxes: the same bits. None (``dst`` untouched) otherwise, or for maxes not finite."""
    maxes = _row_maxes(rows)
    top = float(_MAX(maxes, None))
    if not math.isfinite(top):
        return None
    gap = math.log(rows.shape[-1] / _ROW_SUM_FLOOR) + 1.0
    low = int(np.count_nonzero(maxes < top - gap))
    if not low or (rows.size > _WHOLE_REDO_SIZE and 4 * low < rows.shape[0]):
        return None
    return redo_whole(rows, maxes, dst, dst)


def _row_maxes(rows: np.ndarray) -> np.ndarray:
    """``_MAX(rows, 1, None, None, True)`` (``(rows, 1)``), the same values where no row holds a NaN
    (a max is exact; the callers check the result's max, or come with a finite tensor max): many
    short rows (:data:`_SHORT_ROW`, :data:`_COLUMNS_MIN_SIZE`) copied to columns and reduced down
    them, as numpy reduces each short row in a loop of its own (448 rows of 56: 23 -> 15 us; 2048
    of 8: 85 -> 11; rows of 128 reduce faster as rows, and below ~4k values the scratch's ~2.5 us
    costs more than it saves: 102 rows of 17 4.8 against 5.2)."""
    count, n = rows.shape
    if n > _SHORT_ROW or count * n < _COLUMNS_MIN_SIZE:
        return _MAX(rows, 1, None, None, True)
    with Scratch([((n, count), rows.dtype)]) as (columns,):
        np.copyto(columns, rows.T)
        return _MAX(columns, 0).reshape(count, 1)


#: rows of at most this many values, of at least this many values in all, take :func:`_row_maxes`'
#: columns
_SHORT_ROW, _COLUMNS_MIN_SIZE = 64, 4096


#: up to this many values a tensor's max and a few row sums' min are Python's (a fifth of the
#: cost of np.maximum.reduce / np.minimum.reduce on a few values)
_FEW = 16


def _tensor_max(rows: np.ndarray):
    """``_MAX(rows, None)``: the same value; by :func:`~._math.python_max` on a few finite
    values, else (inf, NaN, an overflowing sum, many values) by the reduction."""
    if rows.size <= _FEW and rows.dtype in _ROW_DTYPES:
        shift = python_max(rows)
        if shift is not None:
            return shift
    return _MAX(rows, None)


def _least(total: np.ndarray):
    """``_MIN(total, None)`` of the row sums, which hold no NaN here (the shift was finite, so
    every exponential is finite or 0): by Python for a few rows."""
    return min(total.tolist()) if 0 < total.size <= _FEW else _MIN(total, None)


#: what the row path says of its result: no row redone (no NaN in it), or some redone
DONE, REDONE = "done", "redone"


#: the dtypes the row paths compute in directly
_ROW_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))
#: bare ufunc reductions (np.max / np.min add ~1 µs of Python argument handling)
_MAX, _MIN, _SUM = np.maximum.reduce, np.minimum.reduce, np.add.reduce


def _softmax_into(x, out, axis) -> str:
    """Softmax of ``x`` along ``axis`` into ``out``: ``DONE`` when the result is known to hold no
    NaN (the row path with no row redone), else ``REDONE``."""
    if x.size == 0:
        normalize_axis(axis, x.ndim)
        return DONE
    if x.ndim and (axis == -1 or axis == x.ndim - 1) and x.shape == out.shape and x.flags.c_contiguous \
            and out.flags.c_contiguous:
        if x.dtype == out.dtype and x.dtype in _ROW_DTYPES:
            done = _softmax_rows(x, out)
            if done is not None:
                return done
        elif is_low_float(x.dtype) and is_low_float(out.dtype):
            # widened by assignment first: the row path then runs float32 ufuncs, not loops that
            # convert float16 per element (its max, the mixed-dtype subtract), and rounds once
            wide, buf = np.empty(x.shape, np.float32), np.empty(x.shape, np.float32)
            big = x.size >= WIDEN_MIN_SIZE      # (below half_cast's bars: numpy's, without a call)
            if big:
                cast_into(wide, x)
            else:
                wide[...] = x
            done = _softmax_rows(wide, buf)
            if done is not None:
                if big:
                    cast_into(out, buf)
                else:
                    out[...] = buf
                return done
        else:
            buf = scratch(out)
            done = _softmax_rows(x, buf)
            if done is not None:
                commit(buf, out)
                return done
    ax = normalize_axis(axis, x.ndim)
    buf = load(x, out)
    with quiet():  # an all -inf row is NaN, as in ONNX's reference
        buf -= np.max(buf, axis=ax, keepdims=True)
        np.exp(buf, out=buf)
        buf /= np.sum(buf, axis=ax, keepdims=True)
    commit(buf, out)
    return REDONE


@register_kernel("nn.softmax")
def softmax(x, *, out, axis):
    """``exp(x - max) / sum(exp(x - max))`` along ``axis``."""
    _softmax_into(x, out, axis)


@register_kernel("nn.safe_softmax")
def safe_softmax(x, *, out, axis):
    """Softmax with NaN results as 0 (``where(isnan(s), 0, s)``, torch's ``_safe_softmax``: an
    all -inf row, fully masked attention, gives zeros). The row path says when no NaN can be in
    its result, so the usual call costs what a softmax costs."""
    if _softmax_into(x, out, axis) is REDONE:
        np.copyto(out, 0, where=np.isnan(out))


def _specialize_softmax(safe: bool):
    """``specialize_attrs`` of ``nn.softmax`` (``safe``: ``nn.safe_softmax``): the row path on kept
    row matrices (:mod:`.softmax_kept`, imported on first use)."""
    def specialize(attrs: dict, constant: tuple):
        from .softmax_kept import specialize_softmax
        return specialize_softmax(safe, attrs, constant)
    return specialize


softmax.specialize_attrs = _specialize_softmax(False)
safe_softmax.specialize_attrs = _specialize_softmax(True)


@register_kernel("nn.log_softmax")
def log_softmax(x, *, out, axis):
    """``x - max - log(sum(exp(x - max)))`` along ``axis``."""
    ax = normalize_axis(axis, x.ndim)
    if x.size == 0:
        return
    buf = load(x, out)
    buf -= np.max(buf, axis=ax, keepdims=True)
    log_sum = np.sum(np.exp(buf), axis=ax, keepdims=True)
    np.log(log_sum, out=log_sum)
    buf -= log_sum
    commit(buf, out)


def _normalize_into(buf: np.ndarray, axes: tuple[int, ...], epsilon: float) -> None:
    """``buf = (buf - mean) / sqrt(var + epsilon)`` over ``axes``, in place."""
    buf -= np.mean(buf, axis=axes, keepdims=True)
    var = np.mean(np.square(buf), axis=axes, keepdims=True)
    var += epsilon
    np.sqrt(var, out=var)
    buf /= var


def _param_like(param: np.ndarray, ndim: int, axes: tuple[int, ...], dtype) -> np.ndarray:
    """A layer-norm scale or bias (broadcastable to the normalized dims, in
    the order of ``axes``) laid out to broadcast against the data."""
    p = upcast(param)
    p = p.reshape((1,) * (len(axes) - p.ndim) + p.shape)
    order = sorted(range(len(axes)), key=lambda i: axes[i])
    p = p.transpose(order)
    shape = [1] * ndim
    for dim, a in zip(p.shape, sorted(axes)):
        shape[a] = dim
    return p.reshape(shape).astype(dtype, copy=False)


def _plain_rows(x: np.ndarray, gamma: np.ndarray, beta, out: np.ndarray, axes: tuple[int, ...],
                dtypes=(np.float32, np.float64)) -> bool:
    """Whether :func:`_layer_norm_rows` applies: normalized over the last axis
    only, one dtype of ``dtypes``, contiguous, parameters of the last dim."""
    dt = out.dtype
    return (axes == (x.ndim - 1,) and x.ndim >= 1 and dt in dtypes and x.dtype == dt
            and x.flags.c_contiguous and out.flags.c_contiguous
            and gamma.dtype == dt and gamma.shape[-1:] == x.shape[-1:] and gamma.size == x.shape[-1]
            and (beta is None or (beta.dtype == dt and beta.shape[-1:] == x.shape[-1:]
                                  and beta.size == x.shape[-1])))


@register_kernel("nn.layer_norm")
def layer_norm(x, gamma, beta=None, *, out, axes, epsilon):
    """Normalize over ``axes``, then scale by ``gamma`` and shift by ``beta``
    (both broadcast to the normalized dims)."""
    last = (x.ndim - 1,)
    axes = last if x.ndim and (axes == last or axes == (-1,)) else axis_tuple(axes, x.ndim)
    if x.size == 0:
        return
    if _plain_rows(x, gamma, beta, out, axes):
        _layer_norm_rows(x, gamma.reshape(-1), None if beta is None else beta.reshape(-1), out, epsilon)
        return
    if _plain_rows(x, gamma, beta, out, axes, (np.float16,)):
        _float16_rows(x, gamma.reshape(-1).astype(np.float32),
                      None if beta is None else beta.reshape(-1).astype(np.float32), out, epsilon)
        return
    buf = load(x, out)
    _normalize_into(buf, axes, epsilon)
    buf *= _param_like(gamma, x.ndim, axes, buf.dtype)
    if beta is not None:
        buf += _param_like(beta, x.ndim, axes, buf.dtype)
    commit(buf, out)


def _float16_rows(x: np.ndarray, gamma32: np.ndarray, beta32, out: np.ndarray, epsilon: float) -> None:
    """float16 rows: :func:`_layer_norm_rows` on a float32 copy (stash_type 1), rounded once into ``out``."""
    buf = x.astype(np.float32)
    _layer_norm_rows(buf, gamma32, beta32, buf, epsilon)
    np.copyto(out, buf, casting="unsafe")


def _specialize_layer_norm(attrs: dict, constant: tuple):
    """Per instruction: once a call took the row path (:func:`_plain_rows`), later calls with the
    same ``gamma`` and ``beta`` arrays and an ``x`` / ``out`` of the same dtype and rank,
    contiguous, of one shape, go straight to :func:`_layer_norm_rows` with the flattened
    parameters kept (views: a register's new values show through): the checks and reshapes cost
    ~1.5 us a call, a fifth of a layer norm of a few rows. A call on the same ``x`` and ``out`` as
    the last one (arena views, the same objects run after run) runs on their kept row matrices
    (:func:`_kept_rows`; ~0.6 us less)."""
    if set(attrs) != {"axes", "epsilon"}:
        return lambda *args, out, workspace=None: layer_norm(*args, out=out, **attrs)
    axes, epsilon = attrs["axes"], attrs["epsilon"]
    kept = [None]
    planes = [None]         # the _RowPlanes of the last shape
    constant_beta = len(constant) > 2 and constant[2]
    constant_gamma = len(constant) > 1 and constant[1]
    # x, out, their row matrices (or a float16 x's float32 rows), the planes, the run, the run into new rows
    same: list = [None] * 7

    def call(x, gamma, beta=None, *, out, workspace=None):
        k = kept[0]
        if x is same[0] and out is not same[1] and same[6] is not None and gamma is k[0] and beta is k[1] \
                and out.__class__ is np.ndarray and out.shape == x.shape and out.dtype is k[4] \
                and out.flags.c_contiguous:
            # the last call's arena view into a new array (the model's output): only out checked
            same[6](out.reshape(same[2].shape))
            return
        if x is same[0] and out is same[1] and k is not None and gamma is k[0] and beta is k[1]:
            # the last call's arena views: the row path on the kept matrices, unchecked
            if k[6]:
                wide = same[4].wide
                if x.size < WIDEN_MIN_SIZE:     # (below half_cast's bars: numpy's, without a call)
                    wide[...] = x
                    _layer_norm_matrix(same[2], k[2], k[3], same[2], k[7], same[4])
                    out[...] = wide
                    return
                cast_into(wide, x)
                _layer_norm_matrix(same[2], k[2], k[3], same[2], k[7], same[4])
                cast_into(out, wide)
            else:
                same[5]()
            return
        if k is not None and gamma is k[0] and beta is k[1] and x.dtype is k[4] and out.dtype is k[4] \
                and x.ndim == k[5] and x.shape == out.shape and x.shape[-1] == k[2].size and x.size \
                and x.flags.c_contiguous and out.flags.c_contiguous:
            p = planes[0]
            if p is None or p.shape != x.shape:
                p = planes[0] = _RowPlanes(x.shape, k[2], k[3], constant_beta, k[6], constant_gamma) \
                    if _outer_fits(x.size, x.shape[-1]) else None
            same[:] = _kept_rows(x, out, p, k)
            if k[6]:
                if p is None:
                    _float16_rows(x, k[2], k[3], out, epsilon)
                    return
                # widened by assignment into kept float32 rows, rounded once by assignment: the
                # same values as _float16_rows without its fresh copy and keyword copyto (~2 us)
                wide = p.wide
                big = x.size >= WIDEN_MIN_SIZE
                if big:
                    cast_into(wide, x)
                else:
                    wide[...] = x
                _layer_norm_rows(wide, k[2], k[3], wide, epsilon, k[7], p)
                if big:
                    cast_into(out, wide)
                else:
                    out[...] = wide
                return
            _layer_norm_rows(x, k[2], k[3], out, epsilon, k[7], p)
            return
        layer_norm(x, gamma, beta, out=out, axes=axes, epsilon=epsilon)
        last = (x.ndim - 1,)
        rows = x.ndim and (axes == last or axes == (-1,))
        if rows and x.size and x.shape == out.shape:
            # float16 keeps float32 copies of constant gamma and beta: computing them cost ~2 us a call
            low = (_plain_rows(x, gamma, beta, out, last, (np.float16,)) and len(constant) > 1 and constant[1]
                   and (beta is None or (len(constant) > 2 and constant[2])))
            if low or _plain_rows(x, gamma, beta, out, last):
                work = np.float32 if low else out.dtype
                planes[0] = None
                same[:] = (None,) * 7       # its planes were made for the parameters before
                kept[0] = (gamma, beta, gamma.reshape(-1).astype(work, copy=False),
                           None if beta is None else beta.reshape(-1).astype(work, copy=False), out.dtype, x.ndim,
                           low, layer_norm_constants(x.shape[-1], np.dtype(work), epsilon))
    return call


def _kept_rows(x, out, planes: "_RowPlanes | None", kept: tuple) -> tuple:
    """What the specialized layer norm keeps for a call on the same arrays: ``(x, out, x's rows,
    out's rows, planes, run, into)``, a low float's rows being its planes' float32 ones (``run``
    None; ``into`` None too unless ``out`` owns its memory: :func:`_low_into`), else ``run()`` the row path's calls on the kept rows and parameters (``kept``: the
    flattened gamma and beta, the low flag, the constants), its branch between the products and the
    row arithmetic taken once (~0.3 us of Python a call), and ``into(dst)`` the same calls into
    other rows of ``x``'s shape. Nones when ``x`` owns its memory (a model input: not held past the
    call) or, for a low float, there are no planes; ``out``, its rows and ``run`` None when ``out``
    owns its memory (a model output, a new array each run: ``into`` writes it)."""
    low = kept[6]
    if x.base is None or x.__class__ is not np.ndarray or out.__class__ is not np.ndarray \
            or (low and planes is None):
        return (None,) * 7
    d = x.shape[-1]
    if low:
        wide = planes.wide.reshape(-1, d)
        if out.base is None:
            return x, None, wide, None, planes, None, _low_into(x, wide, kept, planes)
        return x, out, wide, None, planes, None, None
    rows = x.reshape(-1, d)
    into = _row_into(rows, kept[2], kept[3], kept[7], planes)
    if out.base is None:
        return x, None, rows, None, planes, None, into
    dst = out.reshape(-1, d)
    return x, out, rows, dst, planes, functools.partial(into, dst), into


def _low_into(x, rows, kept: tuple, planes: "_RowPlanes"):
    """``into(dst)`` for a low float ``x`` (an arena view) into new rows ``dst`` of its shape (a
    float16 model's last layer norm writes its output, a new array each run): ``x`` widened into the
    planes' float32 copy (``rows`` its row matrix), the row arithmetic there, the result rounded
    into ``dst``: the calls of the kept path into an arena ``out`` (assignments below half_cast's
    bar, else its casts), so the same values."""
    gamma, beta, constants, wide = kept[2], kept[3], kept[7], planes.wide
    if x.size < WIDEN_MIN_SIZE:
        def into(dst):
            wide[...] = x
            _layer_norm_matrix(rows, gamma, beta, rows, constants, planes)
            dst[...] = rows
    else:
        def into(dst):
            cast_into(wide, x)
            _layer_norm_matrix(rows, gamma, beta, rows, constants, planes)
            cast_into(dst, rows)
    return into


def _row_into(rows, gamma, beta, constants: tuple, planes):
    """``into(dst)``: :func:`_layer_norm_matrix` of these arrays into ``dst``, as the function it would call."""
    matrix, eps = constants[3], constants[4]
    if matrix is not None and (planes.spare is not None if planes is not None else _tiny(rows.shape[0], rows.shape[1])):
        if planes is not None:
            return tiny_into(rows, gamma, beta, matrix, eps, planes)
        return lambda dst: _tiny_layer_norm(rows, gamma, beta, dst, matrix, eps, planes)
    if planes is not None:
        return rows_into(rows, beta, constants, planes)
    return lambda dst: _layer_norm_matrix(rows, gamma, beta, dst, constants, planes)


layer_norm.specialize_attrs = _specialize_layer_norm

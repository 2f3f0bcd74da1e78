"""Layer norm's row arithmetic (the kernel is ``nn.layer_norm`` in :mod:`.normalization`): the
constant vectors and matrices its products read, the row path over the last axis of contiguous
float32/float64 data (a few short rows by two ``(d, d)`` products, many short rows by products
with ones and an outer-product scaling, long rows by ``vecdot`` and broadcasts) and the buffers
the specialized kernel keeps per shape. Split from :mod:`.normalization` by size (the layer norm
entries of docs/design-notes.md).
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ._math import scalar_array


@functools.lru_cache(maxsize=64)
def ones_vector(n: int, dtype) -> np.ndarray:
    """A read-only vector of ``n`` ones (row sums as a matrix-vector product), made once per size."""
    ones = np.ones(n, dtype)
    ones.setflags(write=False)
    return ones


@functools.lru_cache(maxsize=64)
def ones_column(n: int, dtype) -> np.ndarray:
    """:func:`ones_vector` as an ``(n, 1)`` column: ``np.dot`` of rows by it is the same BLAS
    matrix-vector product (numpy hands a column to gemv), its sums already a ``(rows, 1)``
    column that broadcasts against the rows (no ``[:, None]`` view per call)."""
    return ones_vector(n, dtype).reshape(n, 1)


@functools.lru_cache(maxsize=64)
def mean_vector(n: int, dtype) -> np.ndarray:
    """A read-only vector of ``n`` values ``1 / n``: row means as one matrix-vector product."""
    weights = np.full(n, 1.0 / n, dtype)
    weights.setflags(write=False)
    return weights


@functools.lru_cache(maxsize=64)
def row_constants(d: int, dtype, epsilon: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """What :func:`_layer_norm_rows` multiplies and adds with, read-only: the column of ``1 / d``
    (the row means as a ``(rows, 1)`` product that broadcasts as it is, no ``[:, None]`` view),
    ``d * epsilon`` and ``sqrt(d)`` as 0-d arrays of ``dtype`` (a ufunc converts a Python float on
    every call, ~0.3 us; the value is the one it converted to)."""
    return mean_vector(d, dtype).reshape(d, 1), scalar_array(d * epsilon, dtype), scalar_array(math.sqrt(d), dtype)


#: up to this many multiply-adds (rows x d x d, d at most _TINY_D) layer norm takes its row means and
#: mean squares as products with a (d, d) matrix of 1 / d (:func:`_tiny_layer_norm`); one row up to
#: _TINY_ROW_D values (a matrix-vector product). Measured with the specialized kernel's planes
#: (docs/design-notes.md): 0.78-0.91x the row path's time up to 24576 (24 rows of 32, 96 of 16),
#: 0.94-0.97 just past it, slower from ~40 rows of 32; d past 32 stays out (a constant row of 33
#: values did not center to exactly 0 in float64, as the row path's does)
_TINY_PRODUCTS, _TINY_D, _TINY_ROW_D = 24576, 32, 128


@functools.lru_cache(maxsize=64)
def layer_norm_constants(d: int, dtype, epsilon: float) -> tuple:
    """:func:`row_constants`, then for ``d <= _TINY_ROW_D`` the read-only ``(d, d)`` matrix of
    ``1 / d`` (None past it), ``epsilon`` as a 0-d array of ``dtype`` and a column of ones (short
    rows' sums of squares): what :func:`_layer_norm_matrix` reads."""
    matrix = None
    if d <= _TINY_ROW_D:
        matrix = np.full((d, d), 1.0 / d, dtype)
        matrix.setflags(write=False)
    return row_constants(d, dtype, epsilon) + (matrix, scalar_array(epsilon, dtype), ones_column(d, dtype))


def _tiny(rows: int, d: int) -> bool:
    """Whether layer norm's rows take :func:`_tiny_layer_norm`: where its two ``(d, d)`` products
    cost less than the broadcasts they replace (measured: 0.6-0.9x the time at 1-24 rows of 32 and
    up to 96 rows of 16, 0.6-0.8x at one row of 64-128)."""
    return (d <= _TINY_D and rows * d * d <= _TINY_PRODUCTS) or (rows == 1 and d <= _TINY_ROW_D)


def _layer_norm_rows(x: np.ndarray, gamma: np.ndarray, beta, out: np.ndarray, epsilon: float,
                     constants: tuple | None = None, planes: "_RowPlanes | None" = None) -> None:
    """Layer norm over the last axis of a contiguous float32/float64 ``x``
    into ``out`` (which may be ``x``), in five passes and no full-size
    temporary past ``_OUTER_MAX_SIZE`` values: the row means are a matrix product with a column of ``1 / d``,
    the centered rows go straight into ``out``, the sum of squares ``s`` is
    a row-wise dot product (``vecdot``, kept as a column), the scale per row ``sqrt(d) /
    sqrt(s + d * eps)`` (= ``1 / sqrt(s / d + eps)``), then ``gamma`` and
    ``beta`` per column (a small tensor times ``scale x gamma`` at once: ``x * s * gamma``
    rounded as ``x * (s * gamma)``): nine numpy calls, ``out`` positional, which on short
    rows cost more than their arithmetic (``einsum`` for the squares cost
    two of them, a fresh ones vector another). A few short rows take :func:`_tiny_layer_norm`.
    ``constants`` is what :func:`layer_norm_constants` gives for ``x``'s last dim and dtype (a
    caller may keep it); ``planes`` what :class:`_RowPlanes` keeps for ``x``'s shape (the
    specialized kernel's)."""
    d = x.shape[-1]
    _layer_norm_matrix(x.reshape(-1, d), gamma, beta, out.reshape(-1, d),
                       constants or layer_norm_constants(d, x.dtype, epsilon), planes)


def _layer_norm_matrix(rows: np.ndarray, gamma: np.ndarray, beta, dst: np.ndarray, constants: tuple,
                       planes: "_RowPlanes | None") -> None:
    """The body of :func:`_layer_norm_rows` on the rows as matrices (``dst`` may be ``rows``)."""
    d = rows.shape[-1]
    column, eps_d, root_d, matrix, eps, ones = constants
    if matrix is not None and (planes.spare is not None if planes is not None else _tiny(rows.shape[0], d)):
        _tiny_layer_norm(rows, gamma, beta, dst, matrix, eps, planes)
        return
    mean = np.dot(rows, column)                     # by BLAS: ~3x np.mean's speed on rows of 512
    np.subtract(rows, mean, dst)
    # vecdot loops per row: 13 us at 1536 rows of 16, squares and a product 3.7 (_short_rows)
    squares = planes.squares if planes is not None else \
        (np.empty_like(dst) if _short_rows(rows.shape[0], d) else None)
    if squares is not None:
        np.multiply(dst, dst, squares)
        scale = np.dot(squares, ones)
    else:
        scale = np.vecdot(dst, dst, keepdims=True)
    np.add(scale, eps_d, scale)
    np.sqrt(scale, scale)
    np.divide(root_d, scale, scale)
    if planes is not None:
        np.dot(scale, planes.gamma_row, planes.outer)   # s x gamma as a rank-1 product: the same products
        np.multiply(dst, planes.outer, dst)
        if beta is not None:
            np.add(dst, planes.beta if planes.beta is not None else beta, dst)
        return
    if _outer_fits(dst.size, d):        # one same-shape pass, not two broadcasts; the outer product by
        # BLAS (k = 1: the same products, where numpy's broadcast loops over rows of d values)
        np.multiply(dst, np.dot(scale, gamma.reshape(1, d)), dst)
    else:
        np.multiply(dst, scale, dst)
        np.multiply(dst, gamma, dst)
    if beta is not None:
        np.add(dst, beta, dst)


def _tiny_layer_norm(rows: np.ndarray, gamma: np.ndarray, beta, dst: np.ndarray, matrix: np.ndarray,
                     eps: np.ndarray, planes: "_RowPlanes | None") -> None:
    """Layer norm of a few short rows (:func:`_tiny`) in nine numpy calls that
    all take operands of the rows' shape: the product with the ``(d, d)`` ``matrix`` of ``1 / d``
    gives each row's mean in every column (the mean by BLAS, as the row path's column product, in
    a summation order of its own), so the centering is a same-shape subtract; the squares' product
    gives the mean square likewise, then ``+ eps``, sqrt, a division, gamma and beta as tiles.
    numpy broadcasting a ``(rows, 1)`` column costs ~0.75 us a call against ~0.22 for same-shape
    operands, more than the two small products (1.3-1.8x faster at 1-8 rows of 32). Within
    float32's rounding of the float64 formula, as the row path (a variance as a mean of squares
    plus eps, the row path's ``sqrt(d) / sqrt(s + d eps)``)."""
    if planes is not None:
        means, squares, gamma_tile, beta_tile = planes.outer, planes.spare, planes.gamma_tile, planes.beta
    else:
        means, squares, gamma_tile, beta_tile = np.empty_like(dst), np.empty_like(dst), None, None
    np.dot(rows, matrix, means)                 # each row's mean in each of its columns
    np.subtract(rows, means, dst)
    np.multiply(dst, dst, squares)
    np.dot(squares, matrix, means)              # each row's mean square
    np.add(means, eps, means)
    np.sqrt(means, means)
    np.divide(dst, means, dst)
    np.multiply(dst, gamma if gamma_tile is None else gamma_tile, dst)
    if beta is not None:
        np.add(dst, beta if beta_tile is None else beta_tile, dst)


def tiny_into(rows: np.ndarray, gamma: np.ndarray, beta, matrix: np.ndarray, eps: np.ndarray, planes: "_RowPlanes"):
    """``into(dst)``: :func:`_tiny_layer_norm` of ``rows`` into ``dst`` with its planes, its nine calls
    with every operand and ufunc bound (the specialized layer norm's, run after run: 4.2 -> 3.7 us at
    15 rows of 32 without the look-ups and the branches). The same calls, bit for bit."""
    means, squares = planes.outer, planes.spare
    g = gamma if planes.gamma_tile is None else planes.gamma_tile
    b = beta if planes.beta is None else planes.beta
    dot, subtract, multiply, add, sqrt, divide = np.dot, np.subtract, np.multiply, np.add, np.sqrt, np.divide

    def into(dst: np.ndarray) -> None:
        dot(rows, matrix, means)
        subtract(rows, means, dst)
        multiply(dst, dst, squares)
        dot(squares, matrix, means)
        add(means, eps, means)
        sqrt(means, means)
        divide(dst, means, dst)
        multiply(dst, g, dst)
        if b is not None:
            add(dst, b, dst)
    return into


def rows_into(rows: np.ndarray, beta, constants: tuple, planes: "_RowPlanes"):
    """``into(dst)``: :func:`_layer_norm_matrix`'s row arithmetic with its planes (not the tiny
    products) on ``rows`` into ``dst``, every operand and ufunc bound and the row means and scales
    written into kept ``(rows, 1)`` columns (``np.dot`` and ``vecdot`` with ``out``: the same BLAS and
    loop calls as their fresh results), ~0.4-0.8 us less a call at 5-32 rows of 32-64. The same
    calls, bit for bit."""
    column, eps_d, root_d, _, _, ones = constants
    n = rows.shape[0]
    mean, scale = np.empty((n, 1), rows.dtype), np.empty((n, 1), rows.dtype)
    squares, outer, gamma_row = planes.squares, planes.outer, planes.gamma_row
    shift = None if beta is None else beta if planes.beta is None else planes.beta
    dot, subtract, multiply, add, sqrt, divide, vecdot = np.dot, np.subtract, np.multiply, np.add, np.sqrt, \
        np.divide, np.vecdot

    def into(dst: np.ndarray) -> None:
        dot(rows, column, mean)
        subtract(rows, mean, dst)
        if squares is not None:
            multiply(dst, dst, squares)
            dot(squares, ones, scale)
        else:
            vecdot(dst, dst, out=scale, keepdims=True)
        add(scale, eps_d, scale)
        sqrt(scale, scale)
        divide(root_d, scale, scale)
        dot(scale, gamma_row, outer)
        multiply(dst, outer, dst)
        if shift is not None:
            add(dst, shift, dst)
    return into


#: up to this many values layer norm's rows are scaled by the outer product of the row scales and
#: gamma (a temporary of their size; ~0.5 us less than two broadcast passes at a few rows of 32-64)
_OUTER_MAX_SIZE = 1 << 14
#: rows of at most this many values are short: numpy's broadcasts and ``vecdot`` loop per row, so
#: their sums of squares are a product with ones and they are scaled by the outer product up to
#: _SHORT_OUTER_MAX_SIZE values (Swin's 1536 rows of 16: 46 -> ~20 us)
_SHORT_ROW, _SHORT_OUTER_MAX_SIZE = 64, 1 << 18
#: short rows sum their squares by a product past this many rows (at a few dozen vecdot is ~3% faster)
_SHORT_ROWS_MIN = 64


def _short_rows(rows: int, d: int) -> bool:
    """Whether the squares of the rows are summed by a product with ones, not ``vecdot``."""
    return d <= _SHORT_ROW and rows > _SHORT_ROWS_MIN


def _outer_max_size(d: int) -> int:
    """Up to how many values rows of ``d`` values are scaled by the outer product (row planes)."""
    return _SHORT_OUTER_MAX_SIZE if d <= _SHORT_ROW else _OUTER_MAX_SIZE


def _outer_fits(size: int, d: int) -> bool:
    return size <= _outer_max_size(d)


class _RowPlanes:
    """What the specialized layer norm keeps for one shape of at most ``_OUTER_MAX_SIZE`` values: a
    buffer for the outer product ``s x gamma`` (made by ``np.dot`` of the ``(rows, 1)`` scales and
    gamma as a row, the same products as the broadcast multiply at half its cost: 1.0 -> 0.5 us at
    16 x 32) and, for a constant beta, beta repeated over the rows (a same-shape add: 0.86 -> 0.29
    us; a broadcast row costs numpy a loop per row). None for beta that is not a constant. For
    :func:`_tiny_layer_norm` (a shape it takes) a second buffer ``spare`` and, for a constant
    gamma, gamma repeated over the rows (else None: gamma's values may change in its array)."""

    __slots__ = ("shape", "gamma_row", "outer", "beta", "wide", "spare", "gamma_tile", "squares")

    def __init__(self, shape: tuple, gamma: np.ndarray, beta, constant_beta: bool, low: bool = False,
                 constant_gamma: bool = False):
        rows, d = math.prod(shape[:-1]), shape[-1]
        self.shape = shape
        self.gamma_row = gamma.reshape(1, d)
        self.outer = np.empty((rows, d), gamma.dtype)
        tiny = _tiny(rows, d)
        #: the buffer the squares go to when summed by a product (:func:`_short_rows`), else None
        self.squares = self.outer if _short_rows(rows, d) else None
        self.spare = np.empty((rows, d), gamma.dtype) if tiny else None
        self.gamma_tile = np.ascontiguousarray(np.broadcast_to(gamma, (rows, d))) if tiny and constant_gamma else None
        self.beta = None if beta is None or not constant_beta else \
            np.ascontiguousarray(np.broadcast_to(beta, (rows, d)))
        #: a low-float layer norm's float32 rows (its input widened into them, computed in place)
        self.wide = np.empty(shape, gamma.dtype) if low else None

"""A few rows by a large float32 matrix, as OpenBLAS's small-matrix products of column panels.

OpenBLAS (0.3.x) copies ("packs") the right operand of every sgemm before it multiplies; with a
few rows the copy and the kernel's short loops cost more than the products: 16 rows by BERT-base's
768 x 3072 take 1.75 ms at ~45 GFLOP/s, where onnxruntime, whose weights are packed once, runs
at ~90. The SkylakeX kernels (AVX-512; also Cooperlake's and Sapphire Rapids') have a small-matrix
product that reads its operands where they are, taken when ``m * n * k <= 100^3``. So the matrix
is cut into panels of ``n`` columns and the rows into blocks of ``r``, each product under that
bound, and numpy's batched matmul makes the calls: 0.82 ms for those 16 rows from panels laid
one after the other (a bound weight's copy, :func:`packed`), 0.3-0.9x the time at 2-512 rows
for BERT's and MiniLM's shapes (docs/design-notes.md, "Small-row products by panels").

Every row block has at least two rows: a one-row product is a GEMV, whose sums round otherwise.
The results then do not depend on ``n``, ``r`` or the panels' layout (the strided view of
:func:`view` or the packed copy): each output sums its ``k`` products in order in one register.
Columns past the last whole panel (GPT-2's 50,257 words) are one more panel, zero-padded to a
multiple of 16 (:func:`tail`): the kernel's masked narrower product sums in another order.
Elsewhere (another BLAS or kernel, more BLAS threads and many rows, where the threaded GEMM is
faster) :func:`plan` says None and the product is one GEMM as before.
"""

from __future__ import annotations

import math

import numpy as np

from ..blas import PANELS_ON, blas_core, get_blas_threads
from ..mapped_pages import release

#: OpenBLAS's bound on ``m * n * k`` for its small-matrix sgemm (``sgemm_small_kernel_permit``)
SMALL_PRODUCT_MAX = 100 ** 3
#: right operands from this size take panels at any rows; smaller ones where their one GEMM is not a
#: small product (many rows: a conv's pixels by its weight) and their columns are whole panels
MIN_RHS_BYTES = 256 << 10
#: panel widths tried, widest first (multiples of the kernel's 16 lanes)
WIDTHS = (64, 32, 16)
#: the widest panels are taken where their blocks hold this many rows (K = 3072: 5 rows by 64
#: columns, 10 by 32: 32 columns)
BLOCK_ROWS_MIN = 8
#: with more than one BLAS thread, panels up to this many rows (the threaded GEMM wins past it:
#: 768 x 3072 on 2 threads, 24 rows 1.13 against 1.18 ms)
THREADED_ROWS_MAX = 16
#: the kernel's lanes: a tail panel is padded to a multiple of these
LANES = 16
#: OpenBLAS cores with the small-matrix sgemm
SMALL_KERNEL_CORES = frozenset({"skylakex", "cooperlake", "sapphirerapids"})

_core: list = []            # [whether numpy's BLAS has the small-matrix sgemm], found once


def available() -> bool:
    """Whether numpy's BLAS is an OpenBLAS whose kernels have the small-matrix sgemm, and panels
    are on (:func:`..blas.set_weight_panels`)."""
    if not _core:
        _core.append(blas_core() in SMALL_KERNEL_CORES)
    return _core[0] and PANELS_ON[0]


def plan(rows: int, rhs: np.ndarray) -> tuple | None:
    """``(n, r)``: panel width and rows per block for ``rows`` rows by the 2-d float32 C-contiguous
    ``rhs``, or None where one GEMM is the product: a weight of at least :data:`MIN_RHS_BYTES` at
    any rows, a smaller one where the GEMM is not a small product already (:func:`considered`) and
    its columns are whole panels. The width is :func:`width_of` the weight's, whatever the rows;
    the columns past the last whole panel are :func:`tail`'s."""
    if rhs.dtype != np.float32 or not rhs.flags.c_contiguous:
        return None
    return _shape_plan(rows, *rhs.shape)


def _shape_plan(rows: int, inner: int, columns: int) -> tuple | None:
    """:func:`plan` of ``rows`` rows by a float32 C-contiguous ``(inner, columns)`` matrix."""
    if rows < 2 or not available():
        return None
    if rows > THREADED_ROWS_MAX and get_blas_threads() not in (1, None):
        return None
    large = inner * columns * 4 >= MIN_RHS_BYTES
    if not large and rows * inner * columns <= SMALL_PRODUCT_MAX:
        return None
    width = width_of(inner, columns, whole=not large)
    if width is None:
        return None
    block = _block(rows, SMALL_PRODUCT_MAX // (width * inner))
    return None if block is None else (width, block)


def considered(values: int, rhs: np.ndarray) -> bool:
    """The callers' cheap filter before :func:`matmul_into`: whether ``lhs @ rhs``, ``lhs`` of
    ``values`` values (rows times ``rhs``'s inner dim), may take panels at all (the same test as
    :func:`plan`'s, on the whole product)."""
    return considered_size(values, rhs.nbytes, rhs.shape[-1])


def considered_size(values: int, nbytes: int, columns: int) -> bool:
    """:func:`considered` for a float32 ``rhs`` of ``nbytes`` bytes and ``columns`` columns."""
    return nbytes >= MIN_RHS_BYTES or values * columns > SMALL_PRODUCT_MAX


def width_of(inner: int, columns: int, whole: bool = False) -> int | None:
    """The panel width of a ``(inner, columns)`` weight: the widest of :data:`WIDTHS` whose product
    takes :data:`BLOCK_ROWS_MIN` rows (64 to ``inner`` 1953), else the widest that takes two rows;
    with ``whole``, only widths that divide ``columns`` (a small weight: its padded tail panel
    costs more than the panels save); None if none does. It does not depend on the rows, so a bound
    weight's packed panels serve every row count: a width chosen per call repacked the whole weight
    whenever the rows moved across a bound (BERT-base alternating 16 and 3 tokens: 60 ms more a
    call)."""
    for width in WIDTHS:
        least = BLOCK_ROWS_MIN if width == WIDTHS[0] else 2
        if columns >= width and SMALL_PRODUCT_MAX // (width * inner) >= least \
                and not (whole and columns % width):
            return width
    return None


def _block(rows: int, most: int) -> int | None:
    """Rows per block, at most ``most``, leaving no block of one row; None if there is none."""
    block = min(rows, most)
    while block > 2 and rows % block == 1:
        block -= 1
    return block if block >= 2 and rows % block != 1 else None


def view(rhs: np.ndarray, width: int) -> np.ndarray:
    """``rhs``'s (K, N) whole panels ``(N // width, K, width)``, a strided view."""
    inner, columns = rhs.shape
    whole = columns - columns % width
    return rhs[:, :whole].reshape(inner, whole // width, width).transpose(1, 0, 2)


def packed(rhs: np.ndarray, width: int) -> np.ndarray:
    """:func:`view`'s panels one after the other (a bound weight's copy: each panel read as one run)."""
    return np.ascontiguousarray(view(rhs, width))


def tail(rhs: np.ndarray, width: int) -> np.ndarray | None:
    """The columns past ``rhs``'s whole panels as one panel ``(1, K, n)``, zero-padded to ``n`` a
    multiple of :data:`LANES`; None if there are none."""
    inner, columns = rhs.shape
    count = columns % width
    if not count:
        return None
    panel = np.zeros((1, inner, -(-count // LANES) * LANES), rhs.dtype)
    panel[0, :, :count] = rhs[:, columns - count:]
    return panel


def product(rows: np.ndarray, panels: np.ndarray, out: np.ndarray, block: int,
            last: np.ndarray | None = None) -> None:
    """``out = rows @ rhs`` for 2-d C-contiguous ``rows`` and ``out``, ``panels`` :func:`view`'s or
    :func:`packed`'s of ``rhs`` and ``last`` its :func:`tail`, in blocks of ``block`` rows
    (:func:`plan`'s)."""
    whole = panels.shape[0] * panels.shape[2]
    if last is None:
        _products(rows, panels, out, block)
        return
    _products(rows, panels, out[:, :whole], block)
    padded = np.empty((rows.shape[0], last.shape[2]), out.dtype)
    _products(rows, last, padded, block)
    out[:, whole:] = padded[:, :out.shape[1] - whole]


def _products(rows: np.ndarray, panels: np.ndarray, out: np.ndarray, block: int) -> None:
    """``out = rows @ panels``, the panels' products side by side in ``out`` (whose rows may be
    strided), one small product per block of ``block`` rows and panel."""
    count, inner = rows.shape
    number, _, width = panels.shape
    whole = count - count % block
    if whole:
        blocks = whole // block
        target = out[:whole].reshape(blocks, block, number, width).transpose(0, 2, 1, 3)
        np.matmul(rows[:whole].reshape(blocks, 1, block, inner), panels, out=target)
    if whole < count:
        tail_rows = count - whole
        np.matmul(rows[whole:], panels, out=out[whole:].reshape(tail_rows, number, width).transpose(1, 0, 2))


def _planned(lhs: np.ndarray, rhs: np.ndarray, out: np.ndarray) -> tuple | None:
    """:func:`plan` of ``lhs @ rhs`` into ``out`` (float32 all three, ``rhs`` C-contiguous), or None
    (:func:`_planned_shape`)."""
    if rhs.ndim < 2 or rhs.dtype != np.float32 or not rhs.flags.c_contiguous:
        return None
    return _planned_shape(lhs, rhs.shape, out)


def _planned_shape(lhs: np.ndarray, shape: tuple, out: np.ndarray) -> tuple | None:
    """:func:`plan` of ``lhs @ rhs`` into ``out`` for a float32 C-contiguous ``rhs`` of ``shape``
    (float32 ``lhs`` and ``out``), or None. ``rhs`` is one matrix, ``out`` C-contiguous of
    ``lhs``'s leading shape (no broadcast batch); or a stack of ``B`` matrices ``(B, 1, .., 1, K,
    N)`` (MergeProjections' q/k/v), ``out`` C-contiguous, ``B`` results of ``lhs``'s leading
    shape: ``out[b] = lhs @ rhs[b]``; or, all three 3-d, a batch of ``B`` products ``out[b] =
    lhs[b] @ rhs[b]`` (Winograd's 16), each ``lhs[b]`` and ``out[b]`` C-contiguous."""
    if len(shape) < 2 or lhs.ndim < 2 or not out.size or lhs.dtype != np.float32 or out.dtype != np.float32:
        return None
    if len(shape) == 2:
        if lhs.shape[:-1] != out.shape[:-1] or not out.flags.c_contiguous:
            return None
        return _shape_plan(out.size // out.shape[-1], *shape)
    count = shape[0]
    if lhs.ndim == len(shape) == out.ndim == 3:
        return _shape_plan(lhs.shape[1], *shape[1:]) if _batch_fits(lhs, out, *shape) else None
    if lhs.ndim >= len(shape) or shape[1:-2] != (1,) * (len(shape) - 3) or not out.flags.c_contiguous \
            or out.shape != (count,) + (1,) * (len(shape) - 1 - lhs.ndim) + lhs.shape[:-1] + shape[-1:]:
        return None
    return _shape_plan(out.size // (count * out.shape[-1]), *shape[-2:])


def applies(lhs: np.ndarray, rhs: np.ndarray, out: np.ndarray) -> bool:
    """Whether :func:`matmul_into` makes ``lhs @ rhs`` by panels."""
    return _planned(lhs, rhs, out) is not None


def matmul_into(lhs: np.ndarray, rhs: np.ndarray, out: np.ndarray, kept: list | None = None,
                key: object = None) -> bool:
    """``out = lhs @ rhs`` by panels where :func:`plan` says so (then True; else False, nothing
    done): each of ``rhs``'s matrices read through :func:`view`, or, given ``kept`` (a bound
    weight's instruction: ``[(owner, width, ((panels, tail), ...))]``, one tuple so that threads
    sharing it never mix two entries), through its :func:`packed` copy, made once for its owner
    (``rhs``, or ``key`` where the caller names it otherwise: then the caller need not keep ``rhs``,
    :func:`kept_into`); the pages of a mapped ``rhs`` are then given back
    (:func:`..mapped_pages.release`)."""
    chosen = _planned(lhs, rhs, out)
    if chosen is None:
        return False
    width, block = chosen
    inner, columns = rhs.shape[-2:]
    matrices = rhs.reshape(-1, inner, columns)
    if kept is None:
        parts = [(view(matrix, width), tail(matrix, width)) for matrix in matrices]
    else:
        entry, owner = kept[0], rhs if key is None else key
        if entry is None or entry[0] is not owner or entry[1] != width:
            entry = kept[0] = owner, width, tuple((packed(matrix, width), tail(matrix, width)) for matrix in matrices)
            release(rhs)                         # the panels replace a mapped weight's pages
        parts = entry[2]
    _run(lhs, rhs.ndim, parts, out, block)
    return True


def kept_into(lhs: np.ndarray, out: np.ndarray, kept: list, key: object, shape: tuple) -> bool:
    """``out = lhs @ rhs`` from the panels ``kept`` holds for ``key`` (:func:`matmul_into`'s), ``rhs``
    of ``shape``, where :func:`plan` takes these rows at the kept width (then True; else False,
    nothing done), without ``rhs`` itself: a weight's float32 copy (a float16 constant widened,
    Winograd's transformed weight), once packed, need not be kept beside its panels."""
    entry, shape = kept[0], tuple(shape)
    if entry is None or entry[0] is not key or len(shape) < 2 or lhs.shape[-1:] != shape[-2:-1] \
            or out.shape[-1:] != shape[-1:]:
        return False
    parts = entry[2]
    chosen = _planned_shape(lhs, shape, out)
    if chosen is None or chosen[0] != entry[1] or len(parts) != math.prod(shape[:-2]) \
            or parts[0][0].shape[1] != shape[-2]:
        return False
    _run(lhs, len(shape), parts, out, chosen[1])
    return True


def _run(lhs: np.ndarray, rhs_ndim: int, parts: tuple, out: np.ndarray, block: int) -> None:
    """:func:`matmul_into`'s products from each of ``rhs``'s matrices' ``(panels, tail)``."""
    if lhs.ndim == rhs_ndim == 3:               # a batch: each product its own rows
        _batch_products(lhs, parts, out, block)
        return
    inner, columns = parts[0][0].shape[1], out.shape[-1]
    rows = (lhs if lhs.flags.c_contiguous else np.ascontiguousarray(lhs)).reshape(-1, inner)
    for (panels, last), result in zip(parts, out.reshape(len(parts), -1, columns)):
        product(rows, panels, result, block, last)


def _batch_fits(lhs: np.ndarray, out: np.ndarray, count: int, inner: int, columns: int) -> bool:
    """Whether 3-d ``lhs`` and ``out`` are a batch of ``count`` products by ``(inner, columns)``
    matrices, each ``lhs[b]`` and ``out[b]`` C-contiguous (Winograd's 16)."""
    rows = lhs.shape[1]
    return lhs.shape == (count, rows, inner) and out.shape == (count, rows, columns) \
        and lhs.strides[1:] == (inner * 4, 4) and out.strides[1:] == (columns * 4, 4)


def _batch_products(lhs: np.ndarray, parts: tuple, out: np.ndarray, block: int) -> None:
    """``out[b] = lhs[b] @ rhs[b]`` from each matrix's ``(panels, tail)``."""
    for (panels, last), rows, result in zip(parts, lhs, out):
        product(rows, panels, result, block, last)

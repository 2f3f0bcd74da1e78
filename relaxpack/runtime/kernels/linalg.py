"""Linear algebra: matmul with numpy semantics."""

from __future__ import annotations

import numpy as np

from . import gemm_panels, integer_exact
from ._math import is_low_float
from ._registry import register_kernel
from .half_cast import WIDEN_MIN_SIZE, as_float32, cast_into
from .widened_weight import WidenedWeight


#: dtypes whose products numpy hands to BLAS as they are
BLAS_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


@register_kernel("matmul")
def matmul(lhs, rhs, *, out, out_dtype):
    """``lhs @ rhs`` (1-D operands and broadcast batch dims as in numpy).

    With ``out_dtype`` (e.g. int8 operands, int32 result) the operands are
    widened first, so products accumulate in the result's dtype. float16
    and bfloat16 go through float32 BLAS and round once, which is both
    faster and more accurate than numpy's float16 loops. An empty result
    returns at once and an empty inner dim gives zeros: numpy would loop
    over every batch entry of, say, a (2**31, 0, 32) operand for seconds.
    """
    dtype = out.dtype
    if lhs.dtype is dtype and rhs.dtype is dtype and dtype in BLAS_DTYPES and out.size and lhs.shape[-1]:
        if gemm_panels.considered(lhs.size, rhs) and gemm_panels.matmul_into(lhs, rhs, out):
            return                          # rows by a float32 matrix as small products
        if rhs.ndim == 2 and lhs.ndim > 2 and rhs.nbytes >= FOLD_MIN_RHS_BYTES and _folded(lhs, rhs, out):
            return
        np.matmul(lhs, rhs, out=out)        # the common case, first: a small product costs ~1 us
        return
    if out.size == 0:
        return
    if lhs.shape[-1] == 0 and rhs.shape[-2 if rhs.ndim > 1 else 0] == 0:   # sums of nothing
        out[...] = 0
        return
    if is_low_float(out.dtype) or is_low_float(lhs.dtype):
        result = product32(lhs.astype(np.float32, copy=False), rhs.astype(np.float32, copy=False))
        np.copyto(out, result, casting="unsafe")
        return
    if out.dtype.kind == "i" and out.size * lhs.shape[-1] >= integer_exact.MIN_PRODUCTS \
            and integer_exact.is_integer(lhs, rhs) and _exact_float_matmul(lhs, rhs, out):
        return
    if lhs.dtype != out.dtype or rhs.dtype != out.dtype:
        lhs, rhs = lhs.astype(out.dtype), rhs.astype(out.dtype)
    np.matmul(lhs, rhs, out=out)


#: a batch of products by one large matrix (``rhs`` 2-d, from this many bytes) runs as one GEMM of
#: all the batch's rows: numpy's matmul makes one GEMM per batch entry, each reading the whole
#: ``rhs`` again (ViT-B's 768 x 2304 projection of 7 x 17 rows: 6.5 -> 4.4 ms; 17 x 7 rows 11.2 ->
#: 4.8). Below it the per-entry GEMMs may take OpenBLAS's small-matrix kernels, faster than the
#: one larger GEMM (2 x 20 rows by 128 x 256: 24 -> 29 us folded), and the gain is small anyway.
FOLD_MIN_RHS_BYTES = 512 << 10


def batch_rows(lhs, rhs, out) -> tuple | None:
    """``(lhs rows, out rows)``: the 2-d views of a C-contiguous ``lhs`` of 3+ dims and of ``out``
    as rows, when ``lhs @ rhs`` (float32/float64, ``rhs`` 2-d of at least
    :data:`FOLD_MIN_RHS_BYTES`) is best made as that one GEMM; else None."""
    if not (rhs.ndim == 2 and lhs.ndim > 2 and rhs.nbytes >= FOLD_MIN_RHS_BYTES and lhs.flags.c_contiguous
            and out.flags.c_contiguous and lhs.shape[:-1] == out.shape[:-1]):
        return None
    return lhs.reshape(-1, lhs.shape[-1]), out.reshape(-1, out.shape[-1])


def _folded(lhs, rhs, out) -> bool:
    """``lhs @ rhs`` into a C-contiguous ``out`` as one GEMM of ``lhs``'s rows (a strided ``lhs``,
    a permuted view, copied compact first: a copy of its values against a read of ``rhs`` per
    batch entry); False, doing nothing, where ``out`` is not C-contiguous or the shapes are not
    one batch of rows (:func:`matmul` then calls ``np.matmul``)."""
    if not out.flags.c_contiguous or lhs.shape[:-1] != out.shape[:-1]:
        return False
    rows = batch_rows(lhs if lhs.flags.c_contiguous else np.ascontiguousarray(lhs), rhs, out)
    if rows is None:
        return False
    np.matmul(rows[0], rhs, out=rows[1])
    return True


def product32(a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None, kept: list | None = None) -> np.ndarray:
    """``np.matmul(a, b)`` (into ``out`` when given) of float32 operands, the widened products of
    float16 and bfloat16 (:func:`matmul`'s low-float branch and the specialized ones), made as
    :func:`matmul` makes a float32 one: a few rows by a large ``b`` by :mod:`.gemm_panels` (its
    panels in ``kept``, a bound weight's slot), a batch by a large 2-d ``b`` as one GEMM of its rows."""
    if gemm_panels.considered(a.size, b) and a.ndim >= 2 and b.ndim >= 2 and a.dtype == b.dtype:
        if out is None:
            out = np.empty(np.broadcast_shapes(a.shape[:-2], b.shape[:-2]) + (a.shape[-2], b.shape[-1]), a.dtype)
        if gemm_panels.matmul_into(a, b, out, kept):
            return out
    if b.ndim == 2 and a.ndim > 2 and b.nbytes >= FOLD_MIN_RHS_BYTES and a.dtype == b.dtype:
        target = np.empty(a.shape[:-1] + b.shape[-1:], a.dtype) if out is None else out
        if target.dtype == a.dtype and _folded(a, b, target):
            return target
    return np.matmul(a, b) if out is None else np.matmul(a, b, out)


def _exact_float_matmul(lhs, rhs, out) -> bool:
    """An integer ``lhs @ rhs`` by float BLAS when :mod:`.integer_exact` proves it
    exact (then True); False leaves it to the integer loops."""
    bound, facts = integer_exact.operand_bound(rhs, (-2 if rhs.ndim > 1 else 0,))
    dtype = integer_exact.exact_dtype(integer_exact.magnitude(lhs) * bound, out.dtype)
    if dtype is None:
        return False
    product = np.matmul(lhs.astype(dtype), integer_exact.as_float(rhs, dtype, facts))
    np.copyto(out, product, casting="unsafe")
    return True


def one_matrix_views(lhs, rhs, out) -> tuple | None:
    """``(lhs, rhs, out, lhs as a matrix, out as a matrix)`` when ``lhs @ rhs`` into ``out`` is one
    float32/float64 matrix product (``lhs`` a batch of one matrix, ``rhs`` 2-d; or a batch of
    matrices by a large ``rhs``, :func:`batch_rows`) that
    :func:`matmul` hands to BLAS as it is, all three contiguous, and ``lhs`` and ``out`` views (an
    arena's: the same objects run after run; an array owning its memory, a model input or output,
    is not held past the call); for other views the same with None and whether :func:`matmul` makes
    one ``np.matmul`` call of them (its first branch) in place of the matrices; else None. ``np.dot`` of the 2-d views makes the same one sgemm
    call as ``np.matmul`` (the same bits) at ~0.6x its cost on a few rows (no batched loop to set
    up): a specialized product keeps them and calls it while it is given the same arrays."""
    if lhs.base is None or out.base is None:
        return None
    dtype = out.dtype
    blas = bool(lhs.dtype is dtype and rhs.dtype is dtype and dtype in BLAS_DTYPES and out.size and lhs.shape[-1])
    if blas and gemm_panels.applies(lhs, rhs, out):
        return None             # matmul's panels (a bound weight's: the specialized call's packed copy)
    if blas and rhs.ndim == 2 and lhs.ndim > 2 and rhs.nbytes >= FOLD_MIN_RHS_BYTES:
        # a batch by a large matrix: matmul's one GEMM of its rows (batch_rows), or its fold of a
        # compact copy (not np.matmul's call)
        rows = batch_rows(lhs, rhs, out) if rhs.flags.c_contiguous else None
        return (lhs, rhs, out, None, False) if rows is None else (lhs, rhs, out, rows[0], rows[1])
    if not (blas and rhs.ndim == 2 and lhs.ndim == out.ndim >= 2 and out.size == out.shape[-2] * out.shape[-1]
            and lhs.flags.c_contiguous and rhs.flags.c_contiguous and out.flags.c_contiguous):
        # kept too: the same views are not one matrix next call; whether matmul's first branch
        # (one np.matmul call) takes them in place of the matrix views
        return lhs, rhs, out, None, blas
    return lhs, rhs, out, lhs.reshape(lhs.shape[-2:]), out.reshape(out.shape[-2:])


def fresh_out_views(lhs, rhs, out) -> tuple | None:
    """``(lhs, rhs, lhs as a matrix, out's shape, out's dtype)`` when ``out`` is an array owning its
    memory (a model output: a new array each call, never held) of 2 dims into which ``lhs @ rhs``
    is the one matrix product :func:`one_matrix_views` takes by ``np.dot`` for a view (``lhs`` a
    view, all three contiguous, BLAS dtypes): a specialized product keeps them and calls
    ``np.dot(lhs matrix, rhs, out)`` while it is given the same ``lhs`` and ``rhs`` and an ``out``
    of that shape and dtype (a classifier's head into the logits: the generic call's checks cost
    ~1 us of ~2.5); else None."""
    if out.base is not None or out.ndim != 2 or lhs.base is None:
        return None
    views = one_matrix_views(lhs, rhs, out.view())      # (the view: out itself is not held)
    if views is None or views[3] is None:
        return None
    return lhs, rhs, views[3], out.shape, out.dtype


def _specialize_matmul(attrs: dict, constant: tuple):
    """Per instruction: float16 and bfloat16 products by a constant keep its float32 copy instead
    of converting it per call, or only its panels (:mod:`.widened_weight`); an integer constant is
    declared one (:mod:`.integer_exact`); a float32/float64 product of one matrix by it keeps
    :func:`one_matrix_views`."""
    out_dtype = attrs["out_dtype"]
    if not (len(constant) > 1 and constant[1]):
        return _kept_product(None, None, None)
    kept, declared, views = [None, None], [None], [None, None, None, None, None]
    panels = [None]             # (the weight, the panels' width, each matrix's packed panels and tail): gemm_panels

    def call(lhs, rhs, *, out, workspace=None):
        if lhs is views[0] and out is views[2] and rhs is views[1]:
            if views[4] is True:                # not one matrix, matmul's first branch: its one call
                np.matmul(lhs, rhs, out)
            elif views[3] is None:              # not one matrix: as the last call
                matmul(lhs, rhs, out=out, out_dtype=out_dtype)
            else:
                np.dot(views[3], rhs, views[4])
            return
        if not (is_low_float(out.dtype) or is_low_float(lhs.dtype)) or out.size == 0 or lhs.shape[-1] == 0:
            if rhs is not declared[0] and rhs.dtype.kind in "iu":
                integer_exact.declare_constant(rhs)     # its bound and float copy kept
                declared[0] = rhs
            if lhs.dtype is rhs.dtype is out.dtype and gemm_panels.matmul_into(lhs, rhs, out, panels):
                views[:] = (None,) * 5
                return                  # matmul's panels, from the weight's packed copy
            matmul(lhs, rhs, out=out, out_dtype=out_dtype)
            views[:] = one_matrix_views(lhs, rhs, out) or (None,) * 5
            return
        if rhs is not kept[0]:
            kept[:] = rhs, WidenedWeight(rhs)
        weight = kept[1]
        if lhs.size < WIDEN_MIN_SIZE:       # (below half_cast's bars: numpy's conversions, no call)
            np.copyto(out, _widened_product(weight, lhs.astype(np.float32), None, panels), casting="unsafe")
        elif out.dtype == _F32 and out.flags.c_contiguous and lhs.shape[:-1] == out.shape[:-1]:
            _widened_product(weight, as_float32(lhs), out, panels)    # the same sgemm, straight into out
        else:
            cast_into(out, _widened_product(weight, as_float32(lhs), None, panels))  # (numpy's conversions' values)
    return call


def _widened_product(weight: WidenedWeight, a: np.ndarray, out: np.ndarray | None, panels: list) -> np.ndarray:
    """``a @ weight`` in float32 (into ``out`` when given): by the panels in ``panels`` where they
    take it (the float32 copy then not kept), else :func:`product32` of the kept copy."""
    result = weight.by_panels(a, out, panels) if weight.considered(a) else None
    return product32(a, weight.widened(), out) if result is None else result


matmul.specialize_attrs = _specialize_matmul


def _blas_view(x: np.ndarray, axes: tuple | None) -> np.ndarray:
    """``x`` permuted by ``axes`` (None: ``x``), a view when its matrices
    have a unit stride in one of their two dims (BLAS reads them with a
    leading dimension, transposed or not); otherwise a compact copy, since
    numpy multiplies other strides without BLAS."""
    if axes is None:
        return x
    view = x.transpose(axes)
    if view.ndim >= 2 and x.itemsize in (abs(view.strides[-1]), abs(view.strides[-2])):
        return view
    return np.ascontiguousarray(view)


def _axes(axes) -> tuple | None:
    return None if axes is None else tuple(int(a) for a in axes)


def _inverse(axes) -> tuple | None:
    """The permutation undoing ``axes`` (``np.argsort`` of it, without numpy's ~2 us a call)."""
    if axes is None:
        return None
    inverse = [0] * len(axes)
    for i, a in enumerate(axes):
        inverse[int(a)] = i
    return tuple(inverse)


@register_kernel("permute_matmul")
def permute_matmul(lhs, rhs, *, out, lhs_axes, rhs_axes, out_axes, out_dtype):
    """``permute_dims(matmul(permute_dims(lhs, lhs_axes), permute_dims(rhs,
    rhs_axes)), out_axes)`` without copying the permuted operands: the
    product is written through a permuted view of ``out``. Attention's
    ``q @ k^T`` then reads the head-split projections as they are, and
    ``probs @ v`` writes its heads straight into the merged layout.

    >>> q, k = np.ones((2, 3, 4), np.float32), np.ones((2, 5, 4), np.float32)
    >>> out = np.empty((2, 3, 5), np.float32)
    >>> permute_matmul(q, k, out=out, lhs_axes=None, rhs_axes=(0, 2, 1), out_axes=None, out_dtype=None)
    >>> float(out[0, 0, 0])
    4.0
    """
    _permuted_product(lhs, rhs, out, _axes(lhs_axes), _axes(rhs_axes), _inverse(out_axes))


def _permuted_product(lhs, rhs, out, lhs_axes: tuple | None, rhs_axes: tuple | None,
                      out_inverse: tuple | None) -> None:
    """The body of :func:`permute_matmul`, the permutations as tuples and the output's inverted."""
    lhs, rhs = _blas_view(lhs, lhs_axes), _blas_view(rhs, rhs_axes)
    if out_inverse is None:
        matmul(lhs, rhs, out=out, out_dtype=None)
        return
    product_into(lhs, rhs, out.transpose(out_inverse))


def product_into(lhs, rhs, target) -> None:
    """``lhs @ rhs`` into ``target``, a strided view (a permuted result): straight in when BLAS
    can write it (a unit stride in one of its matrices' dims), else through a compact product."""
    if target.itemsize in (abs(target.strides[-1]), abs(target.strides[-2])):
        matmul(lhs, rhs, out=target, out_dtype=None)
        return
    product = np.empty(target.shape, target.dtype)
    matmul(lhs, rhs, out=product, out_dtype=None)
    np.copyto(target, product)


def _specialize_permute_matmul(attrs: dict, constant: tuple):
    """Per instruction: the permutations as tuples, the output's inverted once (attention's
    ``probs @ v`` paid ~2 us a call for ``np.argsort`` of its output permutation), and the
    permuted views of the last call's arrays kept (:func:`_kept_product`). Without permutations
    it is a matmul, and by a bound weight (a fused recipe's product, ConvNeXt's fc2 with its
    layer scale) the specialized matmul's: its panels packed once, not read through views."""
    lhs_axes, rhs_axes, out_inverse = _axes(attrs["lhs_axes"]), _axes(attrs["rhs_axes"]), _inverse(attrs["out_axes"])
    if lhs_axes is None and rhs_axes is None and out_inverse is None and len(constant) > 1 and constant[1]:
        return _specialize_matmul({"out_dtype": None}, constant)
    return _kept_product(lhs_axes, rhs_axes, out_inverse)


def _kept_product(lhs_axes: tuple | None, rhs_axes: tuple | None, out_inverse: tuple | None):
    """``call(lhs, rhs, *, out)``: :func:`_permuted_product` (``matmul`` when no axes are given;
    ``matmul`` reads its result dtype from ``out``, whatever ``out_dtype`` says);
    a call on the same three array objects as the last one that took ``matmul``'s BLAS branch on
    views (no compact copy of an operand, no product copied out) makes that branch's one
    ``np.matmul`` call on the kept views: the same call, so the same bits, without ~1 us of view
    making and checks (attention's ``q @ k^T`` and ``probs @ v`` at a few rows: 2.0 -> 1.1 us).
    An operand that is a new array of the last one's shape, strides and dtype (a decoder's KV
    cache: a model input or a fresh concat, new every run) takes the same branch: its permuted
    view is made (a transpose) and the call is the same (3.5 -> 1.3 us at (1, 2, 1, 16) x (1, 2, 16, 5)).
    A float16 product on the same arena arrays runs its kept :class:`_Widened` instead.
    Arena views are the same objects run after run; an array that owns its memory (a model input
    or output, new every run) is never kept, so its memory is not held past the call: of such an
    operand only its form (shape, strides, dtype) is."""
    kept: list = [None] * 8         # lhs, rhs, out, the views np.matmul takes, the operands' forms
    wide: list = [None]             # the last call's _Widened (float16 arrays), or None

    def call(lhs, rhs, *, out, workspace=None):
        if lhs is kept[0] and rhs is kept[1] and out is kept[2]:
            np.matmul(kept[3], kept[4], kept[5])
            return
        if out is kept[2]:
            a = kept[3] if lhs is kept[0] else _same_form(lhs, kept[6], lhs_axes)
            b = kept[4] if rhs is kept[1] else _same_form(rhs, kept[7], rhs_axes)
            if a is not None and b is not None:
                np.matmul(a, b, kept[5])
                return
        w = wide[0]
        if w is not None and lhs is w.lhs and rhs is w.rhs and out is w.out:
            w.run()
            return
        _permuted_product(lhs, rhs, out, lhs_axes, rhs_axes, out_inverse)
        kept[:] = _blas_views(lhs, rhs, out, lhs_axes, rhs_axes, out_inverse)
        wide[0] = None if kept[2] is not None else _Widened.of(lhs, rhs, out, lhs_axes, rhs_axes, out_inverse)
    return call


def _same_form(x, form, axes):
    """``x`` permuted by ``axes`` (a view) when it is a plain array of ``form``, the (shape,
    strides, dtype) of an operand whose view took matmul's BLAS branch: the same branch and call
    for ``x``; else None."""
    if form is None or x.__class__ is not np.ndarray or x.shape != form[0] or x.strides != form[1] \
            or x.dtype is not form[2]:
        return None
    return x if axes is None else x.transpose(axes)


def _blas_views(lhs, rhs, out, lhs_axes, rhs_axes, out_inverse) -> tuple:
    """``(lhs, rhs, out, lhs view, rhs view, out view, lhs form, rhs form)`` when
    :func:`_permuted_product` of these arrays is one ``np.matmul`` of the three views (matmul's
    first branch, the permuted operands views, not copies, and the product written through
    ``out``'s view), ``out`` not owning its memory; an operand that owns its memory is None, its
    view too (neither is held past the call), and its form (shape, strides, dtype) is kept; else
    Nones. A batch by a large matrix that matmul makes as one GEMM of its rows (:func:`batch_rows`)
    is kept as those rows."""
    none = (None,) * 8
    if lhs.__class__ is not np.ndarray or rhs.__class__ is not np.ndarray or out.__class__ is not np.ndarray \
            or out.base is None:
        return none
    dtype = out.dtype
    if not (lhs.dtype is dtype and rhs.dtype is dtype and dtype in BLAS_DTYPES and out.size and lhs.shape[-1]):
        return none
    seen = [_blas_view(x, axes) for x, axes in ((lhs, lhs_axes), (rhs, rhs_axes))]
    if any(view is not x and view.base is None for view, x in zip(seen, (lhs, rhs))):
        return none             # a compact copy: made anew from the data each call
    target = out if out_inverse is None else out.transpose(out_inverse)
    if out_inverse is not None and out.itemsize not in (abs(target.strides[-1]), abs(target.strides[-2])):
        return none
    a, b = seen
    if gemm_panels.applies(a, b, target):
        return none             # matmul's panels, each call
    if b.ndim == 2 and a.ndim > 2 and b.nbytes >= FOLD_MIN_RHS_BYTES:
        # a batch by a large matrix: matmul's one GEMM of the rows of a compact lhs, kept as those
        # rows; where matmul copies lhs compact first (or the operand owns its memory: its form's
        # view would be the batch), its call each time
        rows = batch_rows(a, b, target) if out_inverse is None and lhs.base is not None else None
        if rows is None:
            return none
        seen[0], target = rows
    arrays, views, forms = [], [], []
    for x, view in zip((lhs, rhs), seen):
        owned = x.base is None
        arrays.append(None if owned else x)
        views.append(None if owned else view)
        forms.append((x.shape, x.strides, x.dtype))
    return arrays[0], arrays[1], out, views[0], views[1], target, forms[0], forms[1]


#: up to this many float32 values (widened operands and product) a float16 product keeps per instruction
WIDE_MAX_SIZE = 1 << 16
_F16, _F32 = np.dtype(np.float16), np.dtype(np.float32)


class _Widened:
    """What a specialized (permute_)matmul keeps for a float16 product on the same arena arrays
    (``matmul``'s low-float branch: ``out`` or ``lhs`` float16, the others float16 or float32):
    float32 buffers of the float16 operands' shapes, widened into by assignment each call, their
    permuted views, and a float32 product buffer unless the product goes straight into a float32
    ``out``. The plain kernel makes ``astype`` copies of the permuted float16 views (the same
    layout: ``astype`` keeps a view's memory order) and a fresh product, then rounds it into
    ``out``: the same BLAS call on the same layouts and one rounding, so the same bits, without
    the strided conversions and allocations (ViT float16's ``q @ k^T`` 7.8 -> 3.8 us)."""

    __slots__ = ("lhs", "rhs", "out", "widen", "product", "target", "big_target")

    @classmethod
    def of(cls, lhs, rhs, out, lhs_axes, rhs_axes, out_inverse) -> "_Widened | None":
        arrays = (lhs, rhs, out)
        if not all(x.__class__ is np.ndarray and x.base is not None and x.flags.c_contiguous for x in arrays):
            return None
        if not (all(x.dtype in (_F16, _F32) for x in arrays) and _F16 in (out.dtype, lhs.dtype)
                and out.size and lhs.shape[-1]):
            return None
        widen, views, size = [], [], 0
        for x, axes in ((lhs, lhs_axes), (rhs, rhs_axes)):
            if x.dtype == _F16:
                buffer = np.empty(x.shape, _F32)
                widen.append((buffer, x, x.size >= WIDEN_MIN_SIZE))
                size += x.size
                x = buffer
            view = _blas_view(x, axes)
            if view is not x and view.base is None:
                return None         # a compact copy: the plain kernel's path
            views.append(view)
        target = out if out_inverse is None else out.transpose(out_inverse)
        direct = out.dtype == _F32 and out_inverse is None
        if not direct:
            size += out.size
        if size > WIDE_MAX_SIZE:
            return None
        self = cls()
        self.lhs, self.rhs, self.out = arrays
        self.widen = tuple(widen)
        self.product = (views[0], views[1], out if direct else np.empty(target.shape, _F32))
        self.target = None if direct else target
        self.big_target = out.size >= WIDEN_MIN_SIZE
        return self

    def run(self) -> None:
        for buffer, x, big in self.widen:
            if big:
                cast_into(buffer, x)
            else:                               # (below half_cast's bars: numpy's, without a call)
                buffer[...] = x
        a, b, product = self.product
        product32(a, b, product)
        if self.target is not None:
            if self.big_target:
                cast_into(self.target, product)
            else:
                self.target[...] = product


permute_matmul.specialize_attrs = _specialize_permute_matmul


@register_kernel("det")
def det(x, *, out):
    """Determinants of the ``(..., M, M)`` matrices (LU factorization);
    float16 and bfloat16 factor in float32 and round once."""
    work = x.astype(np.float32) if is_low_float(x.dtype) else x
    np.copyto(out, np.linalg.det(work), casting="unsafe")

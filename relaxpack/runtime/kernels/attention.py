"""``nn.attention``: attention's two products and softmax in one kernel, by blocks of query rows.

Unfused, attention holds its scores twice (the product and its softmax), each
``batch * heads * queries * keys`` values: 275 MB apiece for a diffusion UNet's
8 heads at batch 20 over 656 tokens, 2 GB at 2624. Here scores of at most
:data:`BLOCK_BYTES` are computed whole, by the same kernel calls the unfused ops make (the same
bits); larger ones by blocks of query rows (and of heads, when whole rows are small) of about
that size: each block's scores, scale, mask and softmax stay in cache and go straight into its
rows of the result, and the two scratch blocks are all the memory the scores take. Once a
block of a call is redone by its row maxes, the call's later blocks take the row formula
(:mod:`.softmax_blocks`).

The blocks are products of the same operands by rows, so each value is the same sum of the
same products; BLAS may order a sum differently for another block shape (a few ulps, well
inside any comparison with onnxruntime).
"""

from __future__ import annotations

import math

import numpy as np

from ..fpstate import quiet
from ._math import scalar_array
from ._registry import register_kernel
from ._workspace import Scratch
from .attention_fast import fast_call, parse_steps
from .linalg import _axes, _blas_view, _inverse, _kept_product, _permuted_product, matmul, product_into
from .normalization import safe_softmax, softmax
from .softmax_blocks import blocks_softmax

#: scores of at most this many bytes are computed whole; larger ones by blocks of at most this
#: many bytes (a block is at least one row); the workspace holds two (scores and softmax)
BLOCK_BYTES = 1 << 20


def prepared_steps(steps: tuple, dtype) -> tuple:
    """Parsed steps (:func:`.attention_fast.parse_steps`) with each scale factor as a 0-d array of
    ``dtype`` (a ufunc converts a Python float on every call)."""
    return tuple((step[0], scalar_array(step[1], dtype)) if step[0] in ("multiply", "divide") else step
                 for step in steps)


def _apply_steps(scores: np.ndarray, steps: tuple, operands) -> None:
    """The prepared steps (:func:`prepared_steps`) on ``scores`` in place, ``operands`` (the
    call's arguments after q, k and v, or their blocks) broadcast into them: the unfused
    multiply, divide, add and where, the same values."""
    with quiet():       # -inf masks and large scores overflow as the unfused ops do
        for step in steps:
            kind = step[0]
            if kind == "multiply":
                np.multiply(scores, step[1], scores)
            elif kind == "divide":
                np.divide(scores, step[1], scores)
            elif kind == "add":
                np.add(scores, operands[step[1]], scores)
            else:                   # where(cond, scores, fill), or where(cond, fill, scores)
                cond = operands[step[1]]
                np.copyto(scores, operands[step[2]], where=np.logical_not(cond) if step[3] else cond)


class _Geometry:
    """The operands viewed as the computation reads them: each permuted (a view where BLAS can
    read it, else a compact copy, as ``permute_matmul`` does) and broadcast to the result's batch
    dims; ``result`` is ``out`` seen unpermuted, ``(*batch, queries, values)``."""

    __slots__ = ("q", "k", "v", "operands", "result", "batch", "queries", "keys", "whole")

    def __init__(self, q, k, v, operands, out, lhs_axes, rhs_axes, v_axes, out_inverse):
        qp, kp, vp = _blas_view(q, lhs_axes), _blas_view(k, rhs_axes), _blas_view(v, v_axes)
        result = out if out_inverse is None else out.transpose(out_inverse)
        batch, (n, dv) = result.shape[:-2], result.shape[-2:]
        m, d = vp.shape[-2], qp.shape[-1]
        self.q = np.broadcast_to(qp, (*batch, n, d))
        self.k = np.broadcast_to(kp, (*batch, d, m))
        self.v = np.broadcast_to(vp, (*batch, m, dv))
        self.operands = [np.broadcast_to(x, (*batch, n, m)) for x in operands]
        self.result, self.batch, self.queries, self.keys = result, batch, n, m
        # the unfused product's scores are already the whole (broadcast) scores: the whole path
        # may run the unfused calls on the operands as they are
        self.whole = np.broadcast_shapes(qp.shape[:-2], kp.shape[:-2]) + (qp.shape[-2], kp.shape[-1]) \
            == (*batch, n, m)

    def scores_bytes(self) -> int:
        return math.prod(self.batch) * self.queries * self.keys * self.result.itemsize


def _block_plan(batch: tuple, n: int, m: int, itemsize: int) -> tuple[int, int, int]:
    """``(axis, group, rows)`` of the blocks: ``rows`` query rows of each batch entry; when whole
    rows fit, every entry of the batch dims after ``axis`` and ``group`` entries of ``axis``
    (-1: the whole batch), as many as fit in :data:`BLOCK_BYTES` (Swin's windows: thousands of
    49 x 49 scores, a few blocks, not one block each); else part of one entry's rows, at least
    one row (``axis`` then the last batch dim, ``group`` 1)."""
    row = max(m * itemsize, 1)
    if n * row > BLOCK_BYTES or not batch:
        return len(batch) - 1, 1, max(1, min(n, BLOCK_BYTES // row))
    size, axis = n * row, len(batch) - 1
    while axis >= 0 and size * batch[axis] <= BLOCK_BYTES:
        size *= batch[axis]
        axis -= 1
    return axis, (max(1, BLOCK_BYTES // size) if axis >= 0 else 1), n


def _blocks(batch: tuple, n: int, axis: int, group: int, rows: int):
    """``(rows_at, keys_at)`` index tuples of the blocks of :func:`_block_plan`: ``rows_at``
    selects a block of the scores' rows (``(*batch, queries)``), ``keys_at`` the same batch
    entries of k and v."""
    rest = (slice(None),) * (len(batch) - axis - 1)
    for lead in np.ndindex(*batch[:max(axis, 0)]):
        for j in range(0, batch[axis], group) if axis >= 0 else (None,):
            entries = (*lead, slice(j, j + group), *rest) if axis >= 0 else rest
            for i in range(0, n, rows):
                yield (*entries, slice(i, i + rows)), entries


def _blocked(geo: _Geometry, steps: tuple, soft, workspace) -> None:
    """The scores by blocks of query rows (see the module doc)."""
    n, m, dtype = geo.queries, geo.keys, geo.result.dtype
    axis, group, rows = _block_plan(geo.batch, n, m, dtype.itemsize)
    size = rows * m * math.prod(geo.batch[axis + 1:]) * (min(group, geo.batch[axis]) if axis >= 0 else 1)
    block_soft = blocks_softmax(soft is safe_softmax)
    with Scratch([((size,), dtype), ((size,), dtype)], workspace) as (scores_buf, probs_buf):
        for rows_at, keys_at in _blocks(geo.batch, n, axis, group, rows):
            q = geo.q[rows_at]
            shape = (*q.shape[:-1], m)
            count = math.prod(shape)
            scores = scores_buf[:count].reshape(shape)
            probs = probs_buf[:count].reshape(shape)
            matmul(q, geo.k[keys_at], out=scores, out_dtype=None)
            _apply_steps(scores, steps, [x[rows_at] for x in geo.operands])
            block_soft(scores, probs)
            product_into(probs, geo.v[keys_at], geo.result[rows_at])


def _whole(q, k, v, operands, out, scores, probs, first, steps, soft, second) -> None:
    """The unfused calls on whole scores: ``first(q, k, out=scores)``, the steps,
    ``soft(scores, out=probs)``, ``second(probs, v, out=out)``."""
    first(q, k, out=scores)
    _apply_steps(scores, steps, operands)
    soft(scores, out=probs)
    second(probs, v, out=out)


@register_kernel("nn.attention")
def attention(q, k, v, *operands, out, lhs_axes, rhs_axes, v_axes, out_axes, steps, softmax, workspace=None):
    """``permute_matmul(softmax(steps(permute_matmul(q, k))), v)`` into ``out`` (see
    ops/definitions/attention.py), by blocks of query rows when the scores are large."""
    _run(q, k, v, operands, out, _axes(lhs_axes), _axes(rhs_axes), _axes(v_axes), _inverse(out_axes),
         prepared_steps(parse_steps(steps), out.dtype), _softmax_kernel(softmax), workspace)


def _softmax_kernel(kind: str):
    if kind not in ("softmax", "safe_softmax"):
        raise ValueError(f"nn.attention: softmax must be 'softmax' or 'safe_softmax', got {kind!r}")
    return safe_softmax if kind == "safe_softmax" else softmax


def _run(q, k, v, operands, out, lhs_axes, rhs_axes, v_axes, out_inverse, steps, soft, workspace,
         geo: _Geometry | None = None) -> None:
    """The generic call: the whole path's unfused calls on scratch scores, or the blocks."""
    if out.size == 0:
        return
    geo = geo or _Geometry(q, k, v, operands, out, lhs_axes, rhs_axes, v_axes, out_inverse)
    if not (geo.whole and geo.scores_bytes() <= BLOCK_BYTES):
        _blocked(geo, steps, soft, workspace)
        return
    shape, dtype = (*geo.batch, geo.queries, geo.keys), out.dtype
    with Scratch([(shape, dtype), (shape, dtype)], workspace) as (scores, probs):
        _whole(q, k, v, operands, out, scores, probs,
               lambda a, b, out: _permuted_product(a, b, out, lhs_axes, rhs_axes, None), steps,
               lambda x, out: soft(x, out=out, axis=-1),
               lambda a, b, out: _permuted_product(a, b, out, None, v_axes, out_inverse))


def _view_or_none(x):
    """``x`` where it is a view (an arena's: the same object run after run), else None: a model
    input owning its memory is never held past the call."""
    return x if x.__class__ is np.ndarray and x.base is not None else None


def _specialize_attention(attrs: dict, constant: tuple):
    """Per instruction: the permutations, the steps (per dtype) and the softmax kernel once; on
    whole scores the specialized products and softmax (``permute_matmul``'s and ``nn.softmax``'s,
    which keep their views of the same arrays run after run) on scores and probabilities carved
    once from the planned workspace (the same object every run), called by a function written
    for the instruction's steps (:mod:`.attention_fast`): a call on the same arena views as the
    last one, or on operands of their shapes, makes only those calls. Where the workspace and
    result are new arrays every run (a shape the plan cannot hold: Swin's windows, counted from
    padded dims) the scores and probabilities are the instruction's own (at most twice
    :data:`BLOCK_BYTES`), kept from run to run."""
    from .softmax_kept import specialize_softmax
    lhs_axes, rhs_axes, v_axes = _axes(attrs["lhs_axes"]), _axes(attrs["rhs_axes"]), _axes(attrs["v_axes"])
    out_inverse, soft = _inverse(attrs["out_axes"]), _softmax_kernel(attrs["softmax"])
    first, second = _kept_product(lhs_axes, rhs_axes, None), _kept_product(None, v_axes, out_inverse)
    kept_soft = specialize_softmax(attrs["softmax"] == "safe_softmax", {"axis": -1}, ())
    parsed = parse_steps(attrs["steps"])
    prepared: dict = {}         # dtype -> the steps with their factors in it
    bound: list = [None]        # the fast call's bind, once made
    private: list = [None]      # the instruction's own scores and probabilities, when it needs them

    def slow(q, k, v, operands, out, workspace) -> None:
        steps = prepared.get(out.dtype)
        if steps is None:
            steps = prepared[out.dtype] = prepared_steps(parsed, out.dtype)
        bind = bound[0]
        if out.size == 0:
            return
        geo = _Geometry(q, k, v, operands, out, lhs_axes, rhs_axes, v_axes, out_inverse)
        nbytes = geo.scores_bytes()
        planned = workspace is not None and workspace.base is not None and workspace.nbytes >= 2 * _aligned(nbytes)
        if bind is None or not geo.whole or nbytes > BLOCK_BYTES:
            if bind is not None:
                bind(None)
            _run(q, k, v, operands, out, lhs_axes, rhs_axes, v_axes, out_inverse, steps, soft, workspace, geo)
            return
        if planned:
            raw = workspace.reshape(-1).view(np.uint8)
        else:           # no arena view: the instruction's own, grown to the largest call
            if private[0] is None or private[0].nbytes < 2 * _aligned(nbytes):
                private[0] = np.empty(2 * _aligned(nbytes), np.uint8)
            raw = private[0]
        shape = (*geo.batch, geo.queries, geo.keys)
        scores = np.ndarray(shape, out.dtype, raw, 0)
        probs = np.ndarray(shape, out.dtype, raw, _aligned(nbytes))
        form = (q.shape, k.shape, v.shape, *[x.shape for x in operands], out.dtype)
        factors = tuple(step[1] for step in steps if step[0] in ("multiply", "divide"))
        bind((out, workspace if planned else None, tuple(map(_view_or_none, (q, k, v, *operands))), scores, probs,
              form, factors))
        _whole(q, k, v, operands, out, scores, probs, first, steps, kept_soft, second)

    made = fast_call(parsed, first, kept_soft, second, slow)
    if made is None:
        return lambda q, k, v, *operands, out, workspace=None: slow(q, k, v, operands, out, workspace)
    call, bound[0] = made
    return call


def _aligned(nbytes: int) -> int:
    return (nbytes + 63) // 64 * 64


attention.specialize_attrs = _specialize_attention

"""The softmax of attention's blocks of scores, one call's blocks after another.

A block of scores takes the tensor-shift path (:func:`.normalization._softmax_block`): shifted by
the block's max, with its rows redone by their own maxes when some row's sum falls under the
floor (every row of a large block when a quarter of them do: :func:`.normalization.redo_whole`),
two passes where one would do. The rows of one attention look alike from block to block (the
same heads, the same mask), so once a block of a call was redone the call's later blocks take the
row formula straight away (:func:`.normalization._rowwise_softmax`: each row shifted by its own
max, the textbook formula a redone row computes, one pass): 0.6x the redone block's time, 1.2x
an unredone one's (numbers in docs/design-notes.md, "Attention blocks after a redone one"). Blocks
the row path takes anyway (a few short rows) and other dtypes keep the plain kernel.
"""

from __future__ import annotations

import numpy as np

from .normalization import _BLOCKED_BYTES, _ROW_DTYPES, REDONE, _rowwise_softmax, _softmax_into


def blocks_softmax(safe: bool):
    """``soft(scores, probs)``: the softmax (``safe``: NaN results as 0, as ``nn.safe_softmax``)
    of each block of one call's scores along the last axis into ``probs``, in turn; after a block
    redone (some row shifted by its own max, or a row not finite) the rest by the row formula."""
    by_rows = [False]

    def soft(scores: np.ndarray, probs: np.ndarray) -> None:
        done = None
        if by_rows[0] and _rows_apply(scores, probs):
            n = scores.shape[-1]
            done = _rowwise_softmax(scores.reshape(-1, n), probs.reshape(-1, n))
        if done is None:
            done = _softmax_into(scores, probs, -1)
            by_rows[0] = by_rows[0] or done is REDONE
        if safe and done is REDONE:
            np.copyto(probs, 0, where=np.isnan(probs))
    return soft


def _rows_apply(scores: np.ndarray, probs: np.ndarray) -> bool:
    """Whether the row formula may take a block: float32/float64 scores and probabilities of one
    shape and dtype, contiguous and apart, more than one value a row, below the row blocks of a
    large tensor."""
    return scores.dtype == probs.dtype and scores.dtype in _ROW_DTYPES and scores.shape == probs.shape \
        and scores.ndim > 0 and scores.shape[-1] > 1 and scores.nbytes < _BLOCKED_BYTES \
        and scores.flags.c_contiguous and probs.flags.c_contiguous and not np.may_share_memory(scores, probs)

"""A fast LSTM's directions stepped together, gate-major (``nn.lstm`` at batch > 1 or bidirectional).

The per-direction loop (``recurrent._lstm_cell_tanh``) keeps one ``(batch, 5n)`` buffer per
direction: a gate is a block of columns, so at batch > 1 each of its ufuncs runs on a strided
2-d view (~0.85 us a call on a few hundred values, against ~0.22 for one contiguous run), and a
bidirectional layer pays its nine calls a step once per direction. Here the step's buffer is
gate-major, ``(5*dirs*n, batch)``:

    o (every direction) | i | f | c~ | C     each one contiguous run of dirs*n*batch values

and one product gives every direction's gates: ``H^T R_joint^T`` (batch 1: a row times a
matrix, the per-direction loop's own BLAS call) or ``R_joint H`` (batch > 1: the gates come out
gate-major), with ``R_joint`` (4*dirs*n, dirs*n) the directions' packed R (gates o, i, f, c~;
o, i, f halved, see ``recurrent_weights``) stacked gate by gate, each direction's block reading
only its own rows of ``H`` (zeros elsewhere). A step of every direction and batch row is then
nine calls: the product, the input projection added, one tanh, the sigmoid halves
``(1 + t) / 2`` on (o, i, f), ``(i, f) *= (c~, C)``, ``C = i c~ + f C``, ``H = tanh(C) * o``. A
reverse direction reads its projection backwards. H goes into a history ``(seq+1, dirs*n,
batch)`` that Y, Y_h and Y_c are copied from at the end.

These are the per-direction cell's operations in its order; only the product is another BLAS
call (with zero terms), so a result may differ from the per-direction loop's in the last bit
where BLAS groups a sum differently. The zero blocks double the product's work for two
directions: taken while ``R_joint`` is at most :data:`MAX_BYTES`.
"""

from __future__ import annotations

from itertools import repeat

import numpy as np

from .recurrent_weights import HUGE_PAGE_MIN_BYTES, gate_layout, pack_direction, projector

#: largest R_joint (bytes) the joint loop takes, where the per-direction loop starts reading R^T
#: in huge pages: two directions up to hidden 64, one up to 128 (measured by thread time at batch
#: 1 and 3, 20 steps: two directions of hidden 64 0.9x the per-direction loops' time, of 96 1.1x;
#: one direction at batch 3 of hidden 128 0.6x, of 180 0.7x)
MAX_BYTES = HUGE_PAGE_MIN_BYTES


def _interleaved(blocks: list[np.ndarray], n: int, axis: int) -> np.ndarray:
    """Each direction's gate-ordered ``(.., 4n)`` block (along ``axis``) interleaved gate by gate:
    (gate 0 of direction 0, gate 0 of direction 1, gate 1 of direction 0, ...), R_joint's rows."""
    shape = list(blocks[0].shape)
    split = shape[:axis] + [4, 1, n] + shape[axis + 1:]
    return np.ascontiguousarray(np.concatenate([blk.reshape(split) for blk in blocks], axis=axis + 1)
                                .reshape(shape[:axis] + [4 * len(blocks) * n] + shape[axis + 1:]))


def fits(dirs: int, n: int, itemsize: int) -> bool:
    """Whether ``R_joint`` of ``dirs`` directions of hidden size ``n`` is at most :data:`MAX_BYTES`."""
    return 4 * dirs * dirs * n * n * itemsize <= MAX_BYTES


def joint_r(rts: list[np.ndarray], n: int) -> np.ndarray:
    """``R_joint`` (4*dirs*n, dirs*n) from each direction's packed R^T (n, 4n): row block
    ``(gate g, direction d)`` is gate g of direction d's R, in direction d's columns.

    >>> joint_r([np.ones((1, 4)), 2 * np.ones((1, 4))], 1).ravel().tolist()
    [1.0, 0.0, 0.0, 2.0, 1.0, 0.0, 0.0, 2.0, 1.0, 0.0, 0.0, 2.0, 1.0, 0.0, 0.0, 2.0]
    """
    dirs = len(rts)
    out = np.zeros((4, dirs, n, dirs, n), rts[0].dtype)
    for d, rt in enumerate(rts):
        out[:, d, :, d, :] = rt.reshape(n, 4, n).transpose(1, 2, 0)
    return out.reshape(4 * dirs * n, dirs * n)


class JointLSTM:
    """The joint loop of one layer's fast LSTM directions: their packed W^T and projections,
    ``R_joint`` and working buffers kept per (seq, batch, dtype). An instruction keeps it while
    its weights are the same constants; a call's results leave its buffers before the next call
    (a VM runs one call at a time)."""

    def __init__(self, w, r, b, n: int, dtype, packed: bool):
        """``w``, ``r``, ``b`` (or None): the op's weights of every direction, packed (``packed``)
        or in ONNX's layout, packed here as the fast cell packs them."""
        self.n, self.dirs = n, w.shape[0]
        wts, rts, biases = [], [], []
        for d in range(self.dirs):
            bd = None if b is None else b[d]
            if packed:
                wt, rt = w[d].astype(dtype, copy=False), r[d].astype(dtype, copy=False)
                bd = None if bd is None else bd.astype(dtype, copy=False)
            else:
                wt, rt, bd = pack_direction(w[d], r[d], bd, n, *gate_layout("lstm", True), dtype)
            wts.append(wt)
            rts.append(rt)
            biases.append(None if bd is None else bd[:4 * n] + bd[4 * n:])
        # every direction's projection in one product: W^T's columns in R_joint's row order
        self.wt = _interleaved(wts, n, axis=1)
        self.project = projector(None if b is None else _interleaved(biases, n, axis=0))
        self.r = joint_r(rts, n)
        self.rt = np.ascontiguousarray(self.r.T)
        self._kept: dict = {}

    def run(self, xs, seq: int, batch: int, reverse: list[bool], h0, c0, y: np.ndarray, y_h: np.ndarray,
            y_c: np.ndarray | None) -> None:
        """Step every direction through time: ``xs`` (seq*batch, input) in the work dtype, read
        backwards by the directions ``reverse`` marks; ``h0``, ``c0`` (dirs, batch, n) the initial
        state (None: zeros); writes ``y`` (seq, dirs, batch, n, in time order), ``y_h`` and ``y_c``
        (when given, (dirs, batch, n))."""
        n, dirs, width = self.n, self.dirs, self.dirs * self.n
        xj, hist, buf, one, half = self._buffers(seq, batch, xs.dtype)
        self._project(xs, xj, reverse)
        c_rows = buf[4 * width:]
        hist[0].reshape(dirs, n, batch)[...] = 0 if h0 is None else h0.transpose(0, 2, 1)
        c_rows.reshape(dirs, n, batch)[...] = 0 if c0 is None else c0.transpose(0, 2, 1)
        self._loop(xj.reshape(seq, 4 * width, batch), hist, buf, one, half, width)
        for d, back in enumerate(reverse):
            rows = slice(d * n, (d + 1) * n)
            y[:, d] = (hist[:0:-1, rows] if back else hist[1:, rows]).transpose(0, 2, 1)
        y_h[...] = hist[seq].reshape(dirs, n, batch).transpose(0, 2, 1)
        if y_c is not None:
            y_c[...] = c_rows.reshape(dirs, n, batch).transpose(0, 2, 1)

    def _project(self, xs, xj, reverse: list[bool]) -> None:
        """The input projection of every direction into ``xj`` (seq, 4, dirs, n, batch), in step
        order. At batch 1 the product is written there and a reverse direction's rows turned
        around in place; at batch > 1 it is copied there per batch row (a transposing copy whose
        inner run is the batch costs ~1 ns a value: 18 us on CRNN's 39 x 3 x 192 against 6)."""
        seq, _, dirs, n, batch = xj.shape
        if batch == 1:
            flat = xj.reshape(seq, -1)
            self.project(xs, self.wt, flat)
            steps = flat.reshape(seq, 4, dirs, n)
            for d, back in enumerate(reverse):
                if back:        # (overlapping: numpy copies through a temporary)
                    steps[:, :, d] = steps[::-1, :, d]
            return
        proj = self.project(xs, self.wt).reshape(seq, batch, 4, dirs, n)
        for d, back in enumerate(reverse):
            src = proj[::-1, :, :, d] if back else proj[:, :, :, d]
            for b in range(batch):
                xj[:, :, d, :, b] = src[:, b]

    def _loop(self, xj, hist, buf, one, half, width):
        gates = buf[:4 * width]
        sig, o, i_f = buf[:3 * width], buf[:width], buf[width:3 * width]
        cells, cand, c_now = buf[3 * width:], buf[3 * width:4 * width], buf[4 * width:]
        if hist.shape[2] == 1:      # H^T R_joint^T: the gates' (1, 4*width) row is the column
            lefts, rights, prods = hist[:-1].reshape(-1, 1, width), repeat(self.rt), repeat(gates.reshape(1, -1))
        else:
            lefts, rights, prods = repeat(self.r), hist[:-1], repeat(gates)
        dot, add, mul, tanh = np.dot, np.add, np.multiply, np.tanh
        for xp, left, right, prod, h_new in zip(xj, lefts, rights, prods, hist[1:]):
            dot(left, right, prod)
            add(gates, xp, gates)
            tanh(gates, gates)
            add(sig, one, sig)
            mul(sig, half, sig)
            mul(cells, i_f, cells)
            add(cand, c_now, c_now)
            tanh(c_now, h_new)
            mul(h_new, o, h_new)

    def _buffers(self, seq: int, batch: int, dtype) -> tuple:
        """The projection in step order ``(seq, 4, dirs, n, batch)``, the history of H, the step's
        buffer ``(5*dirs*n, batch)`` and the read-only ones and halves ``(3*dirs*n, batch)``."""
        key = (seq, batch, np.dtype(dtype))
        kept = self._kept.get(key)
        if kept is None:
            if len(self._kept) >= 16:        # a shape per call must not grow it without bound
                self._kept.clear()
            width = self.dirs * self.n
            one, half = np.ones((3 * width, batch), dtype), np.full((3 * width, batch), 0.5, dtype)
            one.setflags(write=False)
            half.setflags(write=False)
            kept = self._kept[key] = (np.empty((seq, 4, self.dirs, self.n, batch), dtype),
                                      np.empty((seq + 1, width, batch), dtype),
                                      np.empty((5 * width, batch), dtype), one, half)
        return kept

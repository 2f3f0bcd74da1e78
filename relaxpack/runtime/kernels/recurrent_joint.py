"""A fast LSTM's directions stepped together, gate-major (``nn.lstm`` whose ``R_joint`` fits).

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

import numpy as np

from ..kept import keep
from .recurrent_weights import HUGE_PAGE_MIN_BYTES, gate_layout, pack_direction

#: largest R_joint (bytes) the joint loop takes, where the per-direction loop starts reading R^T
#: in huge pages: two directions up to hidden 64, one up to 128 (measured by thread time at batch
#: 1 and 3, 20 steps: two directions of hidden 64 0.9x the per-direction loops' time, of 96 1.1x;
#: one direction at batch 3 of hidden 128 0.6x, of 180 0.7x)
MAX_BYTES = HUGE_PAGE_MIN_BYTES

#: largest projection (bytes) whose plan keeps its bias repeated to the projection's shape
WHOLE_BIAS_MAX_BYTES = 256 << 10


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
    ``R_joint`` and a :class:`_Plan` kept per (seq, batch, dtype, reverse). An instruction keeps it
    while its weights are the same constants; a call's results leave the plan's buffers before the
    next call (a VM runs one call at a time)."""

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
        self.w = np.ascontiguousarray(self.wt.T)      # a single step's projection, gate-major
        self.bias = None if b is None else _interleaved(biases, n, axis=0)
        self.r = joint_r(rts, n)
        self.rt = np.ascontiguousarray(self.r.T)
        self._plans: dict = {}

    def run(self, xs, seq: int, batch: int, reverse: tuple, h0, c0, y: np.ndarray, y_h: np.ndarray,
            y_c: np.ndarray | None) -> None:
        """Step every direction through time: ``xs`` (seq*batch, input) in the work dtype, read
        backwards by the directions ``reverse`` (a tuple of bools) marks; ``h0``, ``c0`` (dirs,
        batch, n) the initial state (None: zeros); writes ``y`` (seq, dirs, batch, n, in time
        order), ``y_h`` and ``y_c`` (when given, (dirs, batch, n))."""
        key = (seq, batch, xs.dtype, reverse)
        plan = self._plans.get(key)
        if plan is None:        # (16: a shape per call must not grow it without bound)
            plan = keep(self._plans, key, _Plan(self, seq, batch, xs.dtype, reverse), 16)
        plan.project(xs)
        plan.h0[...] = 0 if h0 is None else h0.transpose(0, 2, 1)
        plan.c[...] = 0 if c0 is None else c0.transpose(0, 2, 1)
        lstm_steps(plan.steps, np.dot, *plan.buffers)
        for d, src in enumerate(plan.ys):
            y[:, d] = src
        y_h[...] = plan.h_last
        if y_c is not None:
            y_c[...] = plan.c_last


def lstm_steps(steps, dot, gates, sig, one, half, cells, i_f, cand, c_now, o) -> None:
    """A fast LSTM's time loop, nine calls a step (see the module's docstring): ``steps`` yields
    ``(xp, left, right, prod, h_new)``, the step's projection, the product's operands and output
    (``dot(left, right, prod)`` gives the gates) and where H goes; the rest are views of the
    step's buffer and the read-only ones and halves. The joint loop and the per-direction loop
    (``recurrent._lstm_cell_tanh``) both run it."""
    add, mul, tanh = np.add, np.multiply, np.tanh
    for xp, left, right, prod, h_new in steps:
        dot(left, right, prod)
        add(gates, xp, gates)
        tanh(gates, gates)
        add(sig, one, sig)
        mul(sig, half, sig)
        mul(cells, i_f, cells)
        add(cand, c_now, c_now)
        tanh(c_now, h_new)
        mul(h_new, o, h_new)


class _Plan:
    """One (seq, batch, dtype, reverse)'s buffers and every view a call reads or writes, made once:
    the projection in step order ``(seq, 4, dirs, n, batch)``, the history of H ``(seq+1, dirs*n,
    batch)``, the step's buffer ``(5*dirs*n, batch)``, the read-only ones and halves, the
    projection's bias (:func:`_whole_bias`), each step's operands as one tuple (a view made per
    step costs ~0.1 us, three a step) and the sources of Y, Y_h and Y_c. The projection is written by :meth:`_rows` at batch 1, by :meth:`_column` for a
    single step at batch > 1 and by :meth:`_copied` otherwise."""

    def __init__(self, lstm: JointLSTM, seq: int, batch: int, dtype, reverse: tuple):
        n, dirs = lstm.n, lstm.dirs
        width = dirs * n
        self.wt, self.w = lstm.wt, lstm.w
        xj = self.xj = np.empty((seq, 4, dirs, n, batch), dtype)
        hist = np.empty((seq + 1, width, batch), dtype)
        buf = np.empty((5 * width, batch), dtype)
        one = read_only(np.ones((3 * width, batch), dtype))
        half = read_only(np.full((3 * width, batch), 0.5, dtype))
        gates = buf[:4 * width]
        self.buffers = (gates, buf[:3 * width], one, half, buf[3 * width:], buf[width:3 * width],
                        buf[3 * width:4 * width], buf[4 * width:], buf[:width])
        self.h0, self.c = hist[0].reshape(dirs, n, batch), buf[4 * width:].reshape(dirs, n, batch)
        self.ys = [(hist[:0:-1] if back else hist[1:])[:, d * n:(d + 1) * n].transpose(0, 2, 1)
                   for d, back in enumerate(reverse)]
        self.h_last, self.c_last = hist[seq].reshape(dirs, n, batch).transpose(0, 2, 1), self.c.transpose(0, 2, 1)
        if batch == 1:      # H^T R_joint^T: the gates' (1, 4*width) row is the column
            lefts, rights, prods = list(hist[:-1].reshape(seq, 1, width)), [lstm.rt] * seq, [gates.reshape(1, -1)] * seq
        else:
            lefts, rights, prods = [lstm.r] * seq, list(hist[:-1]), [gates] * seq
        self.steps = list(zip(xj.reshape(seq, 4 * width, batch), lefts, rights, prods, hist[1:]))
        if batch == 1:
            self.project, self.bias = self._rows, _whole_bias(lstm.bias, seq * batch, 4 * width)
            self.flat, steps = xj.reshape(seq, -1), xj.reshape(seq, 4, dirs, n)
            self.turns = [(steps[:, :, d], steps[::-1, :, d]) for d, back in enumerate(reverse) if back and seq > 1]
        elif seq == 1:
            self.project = self._column
            self.column = xj.reshape(4 * width, batch)
            self.bias = None if lstm.bias is None else read_only(np.repeat(lstm.bias[:, None], batch, 1))
        else:
            self.project, self.bias = self._copied, _whole_bias(lstm.bias, seq * batch, 4 * width)
            proj = self.proj = np.empty((seq * batch, 4 * width), dtype)
            steps = proj.reshape(seq, batch, 4, dirs, n)
            self.copies = [(xj[:, :, d, :, b], (steps[::-1] if back else steps)[:, b, :, d])
                           for d, back in enumerate(reverse) for b in range(batch)]

    def _rows(self, xs) -> None:
        """Batch 1: the product written in place, a reverse direction's rows turned around in place
        (overlapping: numpy copies through a temporary)."""
        _project(xs, self.wt, self.bias, self.flat)
        for dst, src in self.turns:
            dst[...] = src

    def _column(self, xs) -> None:
        """One step at batch > 1: ``W_joint X^T`` comes out gate-major, in place."""
        np.dot(self.w, xs.T, self.column)
        if self.bias is not None:
            np.add(self.column, self.bias, self.column)

    def _copied(self, xs) -> None:
        """Batch > 1: the product copied per direction and batch row (a transposing copy whose
        inner run is the batch costs ~1 ns a value: 18 us on CRNN's 39 x 3 x 192 against 6)."""
        _project(xs, self.wt, self.bias, self.proj)
        for dst, src in self.copies:
            dst[...] = src


def _whole_bias(bias, rows: int, width: int):
    """The projection's bias (or None) repeated to its ``(rows, width)``, read-only: one contiguous
    add (a broadcast row's add runs row by row, ~2x its time: CRNN's 20 x 192 1.6 -> 0.75 us,
    117 x 192 4.4 -> 2.3); the same additions, the same bits. Beyond :data:`WHOLE_BIAS_MAX_BYTES`
    the bias stays one row (a plan kept per shape must not hold a third projection-sized array)."""
    if bias is None or rows * width * bias.itemsize > WHOLE_BIAS_MAX_BYTES:
        return None if bias is None else bias.reshape(1, width)
    return read_only(np.ascontiguousarray(np.broadcast_to(bias, (rows, width))))


def _project(xs, wt, bias, out) -> None:
    """``out = xs @ W^T + bias``: ``recurrent_weights.projector``'s operations (np.dot, then the
    bias added in place), with ``bias`` (or None) already of ``out``'s shape."""
    np.dot(xs, wt, out)
    if bias is not None:
        np.add(out, bias, out)


def read_only(a: np.ndarray) -> np.ndarray:
    """``a``, made read-only (the loops' constants, never written)."""
    a.setflags(write=False)
    return a

"""Recurrent layers: ``nn.rnn``, ``nn.gru``, ``nn.lstm`` (ONNX's RNN, GRU, LSTM).

Each direction projects the inputs of every time step at once (one matmul
``X W^T`` of shape ``(seq*batch, G*hidden)``, with the biases that do not
depend on the state folded in), then loops over time with one small matmul
``H R^T`` per step and the gate arithmetic. Float16 computes in float32 and
rounds once at the end. The weights are read packed (W^T, R^T, gates in
each cell's order): packed at build time (``packed=True``) or by the kernel
on every call (``recurrent_weights.py``).

Sequence lengths follow onnxruntime: a reverse direction reads each sequence
backwards from its own last step; ``Y`` is zero past a sequence's length;
``Y_h`` (``Y_c``) is the state after its last step, and zero for a length 0.
Clip bounds the gates' pre-activations; like onnxruntime, not the cell state
that LSTM's ``h`` reads.

``quantize_inputs`` (nn.lstm; com.microsoft DynamicQuantizeLSTM, whose int8
weights the importer dequantizes) passes the left operand of each product
through onnxruntime's dynamic uint8 quantization first: all of X at once per
direction, H once per step over every batch row (as onnxruntime with one
intra-op thread; with more it may quantize groups of rows apart).

>>> x = np.ones((2, 1, 3), np.float32)                    # (seq, batch, input)
>>> w, r = np.full((1, 2, 3), 0.1, np.float32), np.zeros((1, 2, 2), np.float32)
>>> y, y_h = np.empty((2, 1, 1, 2), np.float32), np.empty((1, 1, 2), np.float32)
>>> rnn(x, w, r, out=(y, y_h), hidden_size=2)
>>> y_h.round(4)
array([[[0.2913, 0.2913]]], dtype=float32)
"""

from __future__ import annotations

from itertools import chain, repeat
from typing import Callable, NamedTuple

import numpy as np

from ...errors import ShapeError
from ..kept import keep
from ._math import work_dtype
from ._registry import register_kernel
from .recurrent_activations import bind_activations, clipper
from .recurrent_joint import JointLSTM, fits, lstm_steps, read_only
from .recurrent_weights import gate_layout, in_huge_pages, is_fast_cell, pack_direction, projector

# ---------------------------------------------------------------- cells
# A cell factory takes one direction's packed R^T (hidden, G*hidden), its
# biases Wb, Rb (or None) and peepholes P (or None), and returns a
# :class:`Cell`. The time loop is call-bound at batch 1 (the (1, hidden) @
# (hidden, G*hidden) product is most of a step; each other numpy call costs
# about 0.2-0.5 us), so the fast cells' steps make as few calls as they can.


class Cell(NamedTuple):
    """One direction's cell: how it projects the inputs and steps through time."""

    #: ``project(xs, wt)``: the input projection of every step, (seq*batch, width),
    #: with the biases that do not depend on the state
    project: Callable
    #: ``step(xp, h, c) -> (h, c)`` advances every batch row by one time step
    #: (xp: that step's rows of the projection)
    step: Callable
    #: ``loop(proj, h, c, ys) -> (h, c)`` runs every step when all rows have the
    #: full length, writing each H into its row of ``ys`` (both in time order), or None
    loop: Callable | None = None


def _rnn_cell(rt, wb, rb, p, acts, clip, hidden, **_):
    """``H = f(xp + H R^T)`` (the biases live in xp)."""
    (f,), clipf = acts, clipper(clip)

    def step(xp, h, c):
        a = h @ rt
        a += xp
        return f(clipf(a)), None
    return Cell(projector(None if wb is None else wb + rb), step)


def _gru_cell(rt, wb, rb, p, acts, clip, hidden, *, linear_before_reset, **_):
    """Gates z, r, h: ``H = (1 - z) * h~ + z * H``; with ``linear_before_reset``
    the reset gate multiplies ``H Rh^T + Rbh`` instead of ``H`` (so Rbh stays
    out of the input projection)."""
    n = hidden
    (f, g), clipf = acts, clipper(clip)
    rt_zr, rt_h = np.ascontiguousarray(rt[:, :2 * n]), np.ascontiguousarray(rt[:, 2 * n:])
    bias, rbh = None, None
    if wb is not None:
        bias = wb + rb
        if linear_before_reset:
            bias[2 * n:], rbh = wb[2 * n:], rb[2 * n:]

    def step(xp, h, c):
        zr = h @ rt_zr
        zr += xp[:, :2 * n]
        zr = f(clipf(zr))
        z, reset = zr[:, :n], zr[:, n:]
        if linear_before_reset:
            a = h @ rt_h
            if rbh is not None:
                a += rbh
            a *= reset
        else:
            a = (reset * h) @ rt_h
        a += xp[:, 2 * n:]
        hh = g(clipf(a))
        new = h - hh            # (1 - z) * hh + z * h, with one product
        new *= z
        new += hh
        return new, None
    return Cell(projector(bias), step)


def _lstm_cell(rt, wb, rb, p, acts, clip, hidden, *, input_forget, quantize_inputs, **_):
    """Gates i, o, f, c: ``C = f * C + i * c~``, ``H = o * h(C)``; peepholes
    add ``P * C`` to i and f (the old C) and to o (the new C); with
    ``input_forget`` the forget gate is ``1 - i``; with ``quantize_inputs``
    H goes through :func:`quantize_dequantize_uint8` before its product."""
    n = hidden
    (f, g, h_act), clipf = acts, clipper(clip)
    pi, po, pf = (None, None, None) if p is None else (p[:n], p[n:2 * n], p[2 * n:])
    left = quantize_dequantize_uint8 if quantize_inputs else None

    def step(xp, h, c):
        a = (h if left is None else left(h)) @ rt
        a += xp
        if p is None:       # i, o, f are adjacent and independent of the new C: one call
            ifo = f(clipf(a[:, :3 * n]))
            i, o, fg = ifo[:, :n], ifo[:, n:2 * n], ifo[:, 2 * n:]
        else:
            a[:, :n] += pi * c
            i = f(clipf(a[:, :n]))
            if not input_forget:
                a[:, 2 * n:3 * n] += pf * c
                fg = f(clipf(a[:, 2 * n:3 * n]))
        if input_forget:
            fg = 1 - i
        cell = g(clipf(a[:, 3 * n:]))
        cell *= i
        c_new = fg * c
        c_new += cell
        if p is not None:
            a[:, n:2 * n] += po * c_new
            o = f(clipf(a[:, n:2 * n]))
        h_new = h_act(c_new.copy())   # h's input is the unclipped C (as onnxruntime)
        h_new *= o
        return h_new, c_new
    return Cell(projector(None if wb is None else wb + rb), step)


def quantize_dequantize_uint8(a: np.ndarray) -> np.ndarray:
    """``a`` as onnxruntime's quantized GEMM reads its float left operand: uint8
    with a scale and zero point from a's range widened to include 0 (scale 1
    for an all-zero ``a``), ``q = saturate(round_half_even(a / scale) + zp)``;
    returned dequantized, ``(q - zp) * scale``, in a's dtype.

    >>> quantize_dequantize_uint8(np.array([-1.0, 0.3, 2.0], np.float32)).round(4).tolist()
    [-1.0, 0.3059, 2.0]
    """
    if a.size == 0:
        return a
    f32 = np.float32
    lo, hi = min(f32(a.min()), f32(0)), max(f32(a.max()), f32(0))
    scale = f32(1) if hi == lo else (hi - lo) / f32(255)
    zero_point = np.round(np.clip(-lo / scale, f32(0), f32(255)))
    q = np.round(np.clip(a / scale, -zero_point, f32(255) - zero_point))
    return (q * scale).astype(a.dtype, copy=False)


def _matmul_into(out: np.ndarray):
    """The fastest product that writes ``out``: np.dot (about 0.5 us less per
    call than np.matmul) needs a C-contiguous ``out``; np.matmul takes rows
    of a wider buffer (batch > 1)."""
    return np.dot if out.flags.c_contiguous else np.matmul


def _lstm_cell_tanh(rt, wb, rb, hidden):
    """:func:`_lstm_cell` for Sigmoid/Tanh/Tanh, no clip, peepholes or
    input_forget; packed gates (o, i, f, c), the sigmoid ones halved."""
    n = hidden
    constants: dict = {}            # (batch, dtype) -> the loop's read-only ones and halves

    def step(xp, h, c):
        a = h @ rt
        a += xp
        np.tanh(a, out=a)
        oif = a[:, :3 * n]
        oif += 1
        oif *= 0.5
        cell = a[:, 3 * n:]
        cell *= a[:, n:2 * n]
        c_new = a[:, 2 * n:3 * n] * c
        c_new += cell
        h_new = np.tanh(c_new)
        h_new *= a[:, :n]
        return h_new, c_new

    def loop(proj, h, c, ys):
        # one buffer (o, i, f, c~, C): the product (i, f) * (c~, C) is one call,
        # and C = i*c~ + f*C another; the constants are full arrays, as a
        # scalar or broadcast operand costs a ufunc call 0.15-0.4 us more
        dtype, batch = proj.dtype, h.shape[0]
        gates, oif, o, i_f, cells, cand, c_now, one, half, dot = _lstm_buffers(constants, batch, n, dtype)
        c_now[...] = c                  # not the caller's initial_c
        # the joint loop's step (H of each step read back from its row of Y: the initial H first)
        lstm_steps(zip(proj, chain((h,), ys[:-1]), repeat(rt), repeat(gates), ys), dot, gates, oif, one, half,
                   cells, i_f, cand, c_now, o)
        return ys[-1], c_now    # (C: a view of this call's own buffer: the caller copies it into Y_c)
    return Cell(projector(None if wb is None else wb + rb), step, loop)


def _lstm_buffers(kept: dict, batch: int, n: int, dtype) -> tuple:
    """The LSTM loop's working buffer ``(o, i, f, c~, C)`` and its views, the constants and the
    product, per batch and dtype: made once for a cell an instruction keeps (the buffer and eight
    views cost ~2 us, silero's one step ~10). A call's results leave it before the next call
    (H is written into Y; C is copied into Y_c by the caller), and a VM runs one call at a time."""
    key = ("buffers", batch, np.dtype(dtype))
    views = kept.get(key)
    if views is None:
        if len(kept) >= 16:
            kept.clear()
        buf = np.empty((batch, 5 * n), dtype)
        gates = buf[:, :4 * n]
        views = kept[key] = (gates, buf[:, :3 * n], buf[:, :n], buf[:, n:3 * n], buf[:, 3 * n:],
                             buf[:, 3 * n:4 * n], buf[:, 4 * n:], *_constants(kept, batch, 3 * n, dtype),
                             _matmul_into(gates))
    return views


def _constants(kept: dict, batch: int, width: int, dtype) -> tuple:
    """The LSTM loop's ``(ones, halves)`` of shape ``(batch, width)``, made once per batch and
    dtype for a cell an instruction keeps (:func:`_specialize`); read-only, never written."""
    key = (batch, np.dtype(dtype))
    pair = kept.get(key)
    if pair is None:
        pair = keep(kept, key, (read_only(np.ones((batch, width), dtype)),     # (16: a batch size
                               read_only(np.full((batch, width), 0.5, dtype))), 16)  # per call: bounded)
    return pair


def _gru_cell_tanh(rt, wb, rb, hidden):
    """:func:`_gru_cell` with ``linear_before_reset`` for Sigmoid/Tanh, no
    clip; gates (z, r, h), z and r halved. The projection is (z, r, Rbh, h):
    a step adds its first three blocks to ``H R^T`` in one call, Rbh
    included (zero without B), and the last after the reset gate."""
    n = hidden
    bias = rbh = None
    if wb is not None:
        bias = wb + rb
        bias[2 * n:], rbh = wb[2 * n:], rb[2 * n:]

    def project(xs, wt):
        proj = np.empty((xs.shape[0], 4 * n), wt.dtype)
        np.matmul(xs, wt[:, :2 * n], out=proj[:, :2 * n])
        np.matmul(xs, wt[:, 2 * n:], out=proj[:, 3 * n:])
        proj[:, 2 * n:3 * n] = 0 if rbh is None else rbh
        if bias is not None:
            proj[:, :2 * n] += bias[:2 * n]
            proj[:, 3 * n:] += bias[2 * n:]
        return proj

    def step(xp, h, c):
        g = h @ rt
        g += xp[:, :3 * n]
        zr = g[:, :2 * n]
        np.tanh(zr, out=zr)
        zr += 1
        zr *= 0.5
        a = g[:, 2 * n:]
        a *= g[:, n:2 * n]
        a += xp[:, 3 * n:]
        np.tanh(a, out=a)
        new = h - a             # (1 - z) * hh + z * h, with one product
        new *= g[:, :n]
        new += a
        return new, None

    def loop(proj, h, c, ys):
        dtype, batch = proj.dtype, h.shape[0]
        g = np.empty((batch, 3 * n), dtype)
        zr, z, reset, a = g[:, :2 * n], g[:, :n], g[:, n:2 * n], g[:, 2 * n:]
        one, half = np.ones((batch, 2 * n), dtype), np.full((batch, 2 * n), 0.5, dtype)
        dot, add, sub, mul, tanh = np.dot, np.add, np.subtract, np.multiply, np.tanh
        for xzr, xh, new in zip(proj[:, :, :3 * n], proj[:, :, 3 * n:], ys):
            dot(h, rt, g)
            add(g, xzr, g)
            tanh(zr, zr)
            add(zr, one, zr)
            mul(zr, half, zr)
            mul(a, reset, a)
            add(a, xh, a)
            tanh(a, a)
            sub(h, a, new)      # (1 - z) * hh + z * h, with one product
            mul(new, z, new)
            add(new, a, new)
            h = new
        return h, None
    return Cell(project, step, loop)


def _make_cell(kind, fast: bool, rt, wb, rb, p, acts, clip, hidden, **attrs) -> Cell:
    if fast:
        return (_lstm_cell_tanh if kind == "lstm" else _gru_cell_tanh)(rt, wb, rb, hidden)
    return _CELLS[kind](rt, wb, rb, p, acts, clip, hidden, **attrs)


_CELLS = {"rnn": _rnn_cell, "gru": _gru_cell, "lstm": _lstm_cell}

# ---------------------------------------------------------------- the time loop


def _scan(cell: Cell, proj, h, c, lens, reverse: bool, ys):
    """Run ``cell`` over the time steps of ``proj`` (seq, batch, width),
    writing Y into ``ys`` (seq, batch, hidden), indexed by the original time
    step; returns the final H and C.

    With ``lens`` each row runs its own length (reverse: from its own last
    step back) and keeps its state after it; Y is zero past it. Without, the
    cell's loop (if it has one) runs the steps.
    """
    seq, batch = proj.shape[:2]
    if lens is None:
        if seq == 0:    # no step: the final state is zero, as for a length-0 sequence
            return np.zeros_like(h), (None if c is None else np.zeros_like(c))
        if reverse:
            proj, ys = proj[::-1], ys[::-1]
        if cell.loop is not None:
            return cell.loop(proj, h, c, ys)
        for xp, y in zip(proj, ys):
            h, c = cell.step(xp, h, c)
            y[...] = h
        return h, c
    steps = np.arange(seq)[:, None]
    valid = steps < lens                                  # (seq, batch)
    rows = np.arange(batch)
    # pos[t, b]: the original time step that row b reads at its t-th step
    pos = np.where(valid, lens - 1 - steps, steps) if reverse else np.broadcast_to(steps, (seq, batch))
    proj = proj[pos, rows]
    out = np.zeros((seq, batch, ys.shape[2]), ys.dtype)
    shortest = int(lens.min())
    for t in range(int(lens.max())):
        h_new, c_new = cell.step(proj[t], h, c)
        if t < shortest:
            h, c = h_new, c_new
        else:
            keep = valid[t][:, None]
            h = np.where(keep, h_new, h)
            c = None if c is None else np.where(keep, c_new, c)
            h_new = h_new * keep
        out[t] = h_new
    ys[pos, rows] = out
    empty = (lens == 0)[:, None]
    h = np.where(empty, 0, h)
    c = None if c is None else np.where(empty, 0, c)
    return h, c


def _lengths(kind: str, lens, seq: int, batch: int) -> np.ndarray | None:
    """The per-row lengths as int64, or None when every row runs all ``seq`` steps."""
    if lens is None:
        return None
    lens = np.asarray(lens).astype(np.int64)
    if lens.shape != (batch,):
        raise ShapeError(f"nn.{kind}: sequence_lens must have shape ({batch},), got {lens.shape}")
    if lens.size and (lens.min() < 0 or lens.max() > seq):
        raise ShapeError(f"nn.{kind}: sequence_lens must be in [0, {seq}] (the sequence length), "
                         f"got {lens.tolist()}")
    return None if bool(np.all(lens == seq)) else lens


#: the attributes :func:`_layer` reads itself; the others (input_forget, linear_before_reset,
#: quantize_inputs) are the cell's
_LAYER_ATTRS = frozenset({"hidden_size", "direction", "layout", "optional_inputs", "activations",
                          "activation_alpha", "activation_beta", "clip", "packed"})


def _layer(kind, x, w, r, extras, out, attrs: dict, memo: dict | None = None):
    """The shared driver: per direction, pack (unless ``packed``), project, scan, write Y, Y_h (and Y_c).
    ``attrs`` the op's attributes, as a dict (spread as keywords they cost ~1 us a call);
    ``memo`` (an instruction's own, when W, R, B and P are constants): each direction's packed
    W^T and cell, kept while they are the same arrays (see :func:`_specialize`)."""
    hidden_size, direction, layout = attrs["hidden_size"], attrs["direction"], attrs["layout"]
    activations, clip, packed = attrs["activations"], attrs["clip"], attrs["packed"]
    opt = dict(zip(attrs["optional_inputs"], extras))
    y, y_h, *rest = out
    y_c = rest[0] if rest else None
    if layout == 1:     # work in layout 0 through transposed views
        x, y = x.transpose(1, 0, 2), y.transpose(1, 2, 0, 3)
        y_h = y_h.transpose(1, 0, 2)
        y_c = None if y_c is None else y_c.transpose(1, 0, 2)
        opt.update({k: opt[k].transpose(1, 0, 2) for k in ("initial_h", "initial_c") if k in opt})
    dtype = work_dtype(y.dtype)
    seq, batch, _ = x.shape
    lens = _lengths(kind, opt.get("sequence_lens"), seq, batch)
    dirs = 2 if direction == "bidirectional" else 1
    xs = x.reshape(seq * batch, x.shape[2]).astype(dtype, copy=False)
    if attrs.get("quantize_inputs"):
        xs = quantize_dequantize_uint8(xs)
    n = hidden_size
    if kind == "lstm" and lens is None and seq and batch:
        joint = _joint(w, r, opt, dtype, n, dirs, activations, clip, packed, attrs, memo)
        if joint is not None:
            joint.run(xs, seq, batch, tuple(direction == "reverse" or d == 1 for d in range(dirs)),
                      opt.get("initial_h"), opt.get("initial_c"), y, y_h, y_c)
            return
    acts = None
    for d in range(dirs):
        state = [opt[k][d].astype(dtype, copy=False) if k in opt else np.zeros((batch, n), dtype)
                 for k in ("initial_h", "initial_c")]
        weights = (w, r, opt.get("B"), opt.get("P"), dtype)
        kept = memo.get(d) if memo is not None else None
        if kept is not None and _same_weights(kept[0], weights):
            wt, cell = kept[1]
        else:
            acts = acts or bind_activations(kind, dirs, activations, attrs["activation_alpha"],
                                            attrs["activation_beta"])
            wt, cell, own = _direction(kind, d, dirs, w, r, opt, dtype, n, acts[d], activations, clip, packed,
                                       _cell_attrs(attrs))
            if memo is not None and own:
                memo[d] = (weights, (wt, cell))
        proj = cell.project(xs, wt)
        proj = proj.reshape(seq, batch, proj.shape[1])     # not -1: seq or batch may be 0
        # H goes straight into Y when Y has the dtype the cell computes in
        direct = y.dtype == dtype
        ys = y[:, d] if direct else np.empty((seq, batch, n), dtype)
        reverse = direction == "reverse" or d == 1
        h, c = _scan(cell, proj, state[0], state[1] if kind == "lstm" else None, lens, reverse, ys)
        # (assignments cast as copyto's casting="unsafe" does, ~0.4 us a call sooner)
        if not direct:
            y[:, d] = ys
        y_h[d] = h
        if y_c is not None:
            y_c[d] = c


def _cell_attrs(attrs: dict) -> dict:
    return {k: v for k, v in attrs.items() if k not in _LAYER_ATTRS}


def _joint(w, r, opt: dict, dtype, n: int, dirs: int, activations, clip, packed: bool, attrs: dict,
           memo: dict | None) -> JointLSTM | None:
    """The layer's :class:`JointLSTM` (every direction a fast cell, R_joint small enough), or None;
    kept in ``memo`` (with the None) while the weights are the same arrays."""
    weights = (w, r, opt.get("B"), opt.get("P"), dtype)
    kept = memo.get("joint") if memo is not None else None
    if kept is not None and _same_weights(kept[0], weights):
        return kept[1]
    joint = None
    if fits(dirs, n, np.dtype(dtype).itemsize) and all(
            is_fast_cell("lstm", d, dirs, activations=activations, clip=clip, peepholes="P" in opt,
                         **_cell_attrs(attrs))
            for d in range(dirs)):
        joint = JointLSTM(w, r, opt.get("B"), n, dtype, packed)
    if memo is not None:
        memo["joint"] = (weights, joint)
    return joint


def _same_weights(kept: tuple, weights: tuple) -> bool:
    """Whether ``weights`` (W, R, B, P, dtype) are the arrays (and the dtype) a memo was made from."""
    return (kept[0] is weights[0] and kept[1] is weights[1] and kept[2] is weights[2] and kept[3] is weights[3]
            and kept[4] == weights[4])


def _direction(kind, d: int, dirs: int, w, r, opt: dict, dtype, n: int, acts, activations, clip, packed: bool,
               cell_attrs: dict):
    """``(W^T, cell, own)`` of direction ``d``: its weights packed (unless ``packed``) and its cell;
    ``own`` is False when R^T sits in the thread's huge-page buffer, which the next call reuses."""
    b = opt["B"][d] if "B" in opt else None
    p = opt["P"][d].astype(dtype, copy=False) if "P" in opt else None
    fast = is_fast_cell(kind, d, dirs, activations=activations, clip=clip, peepholes=p is not None, **cell_attrs)
    if packed:
        wt, rt = w[d].astype(dtype, copy=False), np.ascontiguousarray(r[d], dtype)
        b = None if b is None else b.astype(dtype, copy=False)
    else:
        wt, rt, b = pack_direction(w[d], r[d], b, n, *gate_layout(kind, fast), dtype)
    half = None if b is None else b.shape[0] // 2
    huge = in_huge_pages(rt)     # one direction at a time: the next one's copy replaces it
    cell = _make_cell(kind, fast, huge, None if b is None else b[:half], None if b is None else b[half:],
                      p, acts, clip, n, **cell_attrs)
    return wt, cell, huge is rt


def _specialize(kind: str):
    """``specialize_attrs`` of a recurrent kernel: an instruction whose W, R, B and P are
    constants keeps each direction's packed weights and cell across calls (on a short
    sequence, silero's one step, packing and making the cell cost more than the step)."""
    def specialize(attrs: dict, constant: tuple):
        names = list(attrs.get("optional_inputs") or ())
        static = [1, 2] + [3 + names.index(k) for k in ("B", "P") if k in names]
        memo = {} if all(i < len(constant) and constant[i] for i in static) else None
        if memo is None or kind != "lstm" or "sequence_lens" in names or attrs.get("quantize_inputs"):
            def call(x, w, r, *extras, out, workspace=None):
                _layer(kind, x, w, r, extras, out, attrs, memo)
            return call
        joint_call = _joint_call(attrs, names, memo)

        def call_lstm(x, w, r, *extras, out, workspace=None):
            if not joint_call(x, w, r, extras, out):
                _layer(kind, x, w, r, extras, out, attrs, memo)
        return call_lstm
    return specialize


def _joint_call(attrs: dict, names: list, memo: dict):
    """``call(x, w, r, extras, out) -> bool``: an LSTM instruction's call straight to its kept
    :class:`JointLSTM` (past :func:`_layer`'s parsing, ~2 us of silero's one step), True when
    it ran; False (nothing done) before :func:`_layer` kept one for these weights and work dtype,
    or for an empty sequence or batch. The instruction has no sequence_lens and no quantize_inputs."""
    at = {k: 3 + names.index(k) for k in ("B", "P", "initial_h", "initial_c") if k in names}
    b_at, p_at, h_at, c_at = (at.get(k) for k in ("B", "P", "initial_h", "initial_c"))
    direction, layout = attrs["direction"], attrs["layout"]
    reverse = tuple(direction == "reverse" or d == 1 for d in range(2 if direction == "bidirectional" else 1))

    def call(x, w, r, extras, out) -> bool:
        kept = memo.get("joint")
        if kept is None or kept[1] is None:
            return False
        (kw, kr, kb, kp, dtype), joint = kept
        args = (x, w, r, *extras)
        y, y_h, *rest = out
        if (kw is not w or kr is not r or (b_at is not None and args[b_at] is not kb)
                or (p_at is not None and args[p_at] is not kp) or work_dtype(y.dtype) != dtype):
            return False
        h0 = None if h_at is None else args[h_at]
        c0 = None if c_at is None else args[c_at]
        y_c = rest[0] if rest else None
        if layout == 1:     # work in layout 0 through transposed views
            x, y, y_h = x.transpose(1, 0, 2), y.transpose(1, 2, 0, 3), y_h.transpose(1, 0, 2)
            y_c = None if y_c is None else y_c.transpose(1, 0, 2)
            h0 = None if h0 is None else h0.transpose(1, 0, 2)
            c0 = None if c0 is None else c0.transpose(1, 0, 2)
        seq, batch, width = x.shape
        if not (seq and batch):
            return False
        joint.run(x.reshape(seq * batch, width).astype(dtype, copy=False), seq, batch, reverse, h0, c0, y, y_h, y_c)
        return True
    return call


@register_kernel("nn.rnn")
def rnn(x, w, r, *extras, out, **attrs):
    """ONNX RNN: ``out`` is (Y, Y_h); ``extras`` are the inputs ``optional_inputs`` names."""
    _layer("rnn", x, w, r, extras, out, attrs)


@register_kernel("nn.gru")
def gru(x, w, r, *extras, out, **attrs):
    """ONNX GRU: ``out`` is (Y, Y_h)."""
    _layer("gru", x, w, r, extras, out, attrs)


@register_kernel("nn.lstm")
def lstm(x, w, r, *extras, out, **attrs):
    """ONNX LSTM: ``out`` is (Y, Y_h, Y_c)."""
    _layer("lstm", x, w, r, extras, out, attrs)


rnn.specialize_attrs, gru.specialize_attrs, lstm.specialize_attrs = (_specialize(k) for k in ("rnn", "gru", "lstm"))

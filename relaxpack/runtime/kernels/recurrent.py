"""Recurrent layers: ``nn.rnn``, ``nn.gru``, ``nn.lstm`` (ONNX's RNN, GRU, LSTM).

Each direction projects the inputs of every time step at once (one matmul
``X W^T`` of shape ``(seq*batch, G*hidden)``, with the biases that do not
depend on the state folded in), then loops over time with one small matmul
``H R^T`` per step and the gate arithmetic. Float16 computes in float32 and
rounds once at the end.

Sequence lengths follow onnxruntime: a reverse direction reads each sequence
backwards from its own last step; ``Y`` is zero past a sequence's length;
``Y_h`` (``Y_c``) is the state after its last step, and zero for a length 0.
Clip bounds the gates' pre-activations; like onnxruntime, not the cell state
that LSTM's ``h`` reads.

>>> x = np.ones((2, 1, 3), np.float32)                    # (seq, batch, input)
>>> w, r = np.full((1, 2, 3), 0.1, np.float32), np.zeros((1, 2, 2), np.float32)
>>> y, y_h = np.empty((2, 1, 1, 2), np.float32), np.empty((1, 1, 2), np.float32)
>>> rnn(x, w, r, out=(y, y_h), hidden_size=2)
>>> y_h.round(4)
array([[[0.2913, 0.2913]]], dtype=float32)
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np

from ...errors import ShapeError
from ._math import work_dtype
from ._registry import register_kernel

Activation = Callable[[np.ndarray], np.ndarray]

# ---------------------------------------------------------------- activations
# Each takes the pre-activation (a scratch array it may overwrite) and returns the result.


def _sigmoid(a, alpha, beta):
    # 0.5 * (1 + tanh(x / 2)): the logistic function without exp overflow
    a *= 0.5
    np.tanh(a, out=a)
    a += 1
    a *= 0.5
    return a


def _tanh(a, alpha, beta):
    return np.tanh(a, out=a)


def _relu(a, alpha, beta):
    return np.maximum(a, 0, out=a)


def _affine(a, alpha, beta):
    a *= alpha
    a += beta
    return a


def _leaky_relu(a, alpha, beta):
    return np.where(a >= 0, a, a * a.dtype.type(alpha))


def _thresholded_relu(a, alpha, beta):
    a[a <= alpha] = 0
    return a


def _scaled_tanh(a, alpha, beta):
    a *= beta
    np.tanh(a, out=a)
    a *= alpha
    return a


def _hard_sigmoid(a, alpha, beta):
    a *= alpha
    a += beta
    return np.clip(a, 0, 1, out=a)


def _elu(a, alpha, beta):
    with np.errstate(over="ignore"):
        return np.where(a >= 0, a, np.expm1(np.minimum(a, 0)) * a.dtype.type(alpha))


def _softsign(a, alpha, beta):
    return np.divide(a, np.abs(a) + 1, out=a)


def _softplus(a, alpha, beta):
    # max(x, 0) + log1p(exp(-|x|)): no overflow for large x
    t = np.log1p(np.exp(-np.abs(a)))
    np.maximum(a, 0, out=a)
    a += t
    return a


#: activation name -> (function, default alpha, default beta, how many of alpha/beta it takes);
#: the defaults are those of the ONNX operator of the same name, as the spec says
#: (onnxruntime uses 0 where Affine, ScaledTanh and ThresholdedRelu get no value)
ACTIVATIONS = {
    "Relu": (_relu, 0.0, 0.0, 0), "Tanh": (_tanh, 0.0, 0.0, 0), "Sigmoid": (_sigmoid, 0.0, 0.0, 0),
    "Affine": (_affine, 1.0, 0.0, 2), "LeakyRelu": (_leaky_relu, 0.01, 0.0, 1),
    "ThresholdedRelu": (_thresholded_relu, 1.0, 0.0, 1), "ScaledTanh": (_scaled_tanh, 1.0, 1.0, 2),
    "HardSigmoid": (_hard_sigmoid, 0.2, 0.5, 2), "Elu": (_elu, 1.0, 0.0, 1),
    "Softsign": (_softsign, 0.0, 0.0, 0), "Softplus": (_softplus, 0.0, 0.0, 0),
}

#: cell kind -> default activations of one direction
DEFAULT_ACTIVATIONS = {"rnn": ("Tanh",), "gru": ("Sigmoid", "Tanh"), "lstm": ("Sigmoid", "Tanh", "Tanh")}


def _bind_activations(kind: str, dirs: int, names, alphas, betas) -> list[list[Activation]]:
    """One list of activation callables (alpha and beta bound) per direction."""
    names = names or DEFAULT_ACTIVATIONS[kind] * dirs
    fns = []
    for i, name in enumerate(names):
        fn, alpha, beta, _ = ACTIVATIONS[name]
        alpha = alpha if alphas is None else alphas[i]
        beta = beta if betas is None else betas[i]
        fns.append(lambda a, fn=fn, alpha=alpha, beta=beta: fn(a, alpha, beta))
    per = len(names) // dirs
    return [fns[d * per:(d + 1) * per] for d in range(dirs)]


def _clipper(clip) -> Callable[[np.ndarray], np.ndarray]:
    if clip is None:
        return lambda a: a
    return lambda a: np.clip(a, -clip, clip, out=a)


# ---------------------------------------------------------------- cells
# A cell factory takes one direction's transposed recurrence weight R^T (hidden, G*hidden),
# its biases Wb, Rb (or None) and peepholes P (or None), and returns the bias
# to fold into the input projection and ``step(xp, h, c) -> (h, c)``, which
# advances every batch row by one time step (xp: that step's projection).
#
# With the default activations and no clip, the *_tanh cells run fewer numpy
# calls per step (the loop is call-bound at batch 1): sigmoid(x) is
# 0.5 * (1 + tanh(x / 2)), and the x / 2 is folded into the sigmoid gates'
# columns of R^T and of the projection (``SCALES``: halving is exact, so the
# pre-activations are bit for bit those of the general cells), so one tanh
# call covers every gate.


def _rnn_cell(rt, wb, rb, p, acts, clip, hidden, **_):
    """``H = f(xp + H R^T)`` (the biases live in xp)."""
    (f,), clipf = acts, _clipper(clip)

    def step(xp, h, c):
        a = h @ rt
        a += xp
        return f(clipf(a)), None
    return (None if wb is None else wb + rb), step


def _gru_cell(rt, wb, rb, p, acts, clip, hidden, linear_before_reset=False, **_):
    """Gates z, r, h: ``H = (1 - z) * h~ + z * H``; with ``linear_before_reset``
    the reset gate multiplies ``H Rh^T + Rbh`` instead of ``H`` (so Rbh stays
    out of the input projection)."""
    n = hidden
    (f, g), clipf = acts, _clipper(clip)
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
    return bias, step


def _lstm_cell(rt, wb, rb, p, acts, clip, hidden, input_forget=False, **_):
    """Gates i, o, f, c: ``C = f * C + i * c~``, ``H = o * h(C)``; peepholes
    add ``P * C`` to i and f (the old C) and to o (the new C); with
    ``input_forget`` the forget gate is ``1 - i``."""
    n = hidden
    (f, g, h_act), clipf = acts, _clipper(clip)
    pi, po, pf = (None, None, None) if p is None else (p[:n], p[n:2 * n], p[2 * n:])

    def step(xp, h, c):
        a = h @ rt
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
    return (None if wb is None else wb + rb), step


def _half_columns(rt, count: int):
    """R^T with its first ``count`` columns halved (in place: ``rt`` is the
    kernel's own copy), and the per-column factor to apply to the input
    projection."""
    scale = np.ones(rt.shape[1], rt.dtype)
    scale[:count] = 0.5
    rt[:, :count] *= 0.5
    return rt, scale


#: rows of R copied per block by :func:`_transposed`
_BLOCK = 64


def _transposed(r: np.ndarray, dtype) -> np.ndarray:
    """``R^T`` as a new C-contiguous array, copied in blocks of rows: a
    block's source and destination both stay in cache, where one strided
    copy of a (1024, 256) matrix takes about 3x as long."""
    rt = np.empty((r.shape[1], r.shape[0]), dtype)
    for i in range(0, r.shape[0], _BLOCK):
        np.copyto(rt[:, i:i + _BLOCK], r[i:i + _BLOCK].T, casting="unsafe")
    return rt


def _lstm_cell_tanh(rt, wb, rb, hidden):
    """:func:`_lstm_cell` for Sigmoid/Tanh/Tanh, no clip, peepholes or input_forget."""
    n = hidden
    rt, scale = _half_columns(rt, 3 * n)

    def step(xp, h, c):
        a = h @ rt
        a += xp
        np.tanh(a, out=a)
        ifo = a[:, :3 * n]
        ifo += 1
        ifo *= 0.5
        cell = a[:, 3 * n:]
        cell *= a[:, :n]
        c_new = a[:, 2 * n:3 * n] * c
        c_new += cell
        h_new = np.tanh(c_new)
        h_new *= a[:, n:2 * n]
        return h_new, c_new
    return (None if wb is None else wb + rb), step, scale, functools.partial(_lstm_loop_tanh, rt, n)


def _lstm_loop_tanh(rt, n, proj, h, c, ys, order):
    """Every step of :func:`_lstm_cell_tanh` (rows of equal length) with no
    allocation: the gates, C and each H live in buffers made once (H straight
    in its row of ``ys``), and every numpy call writes through ``out=``: at
    batch 1 the step is bound by numpy's per-call cost, an allocation adds to it."""
    a = np.empty((h.shape[0], 4 * n), proj.dtype)
    c = c.copy()                    # updated in place: not the caller's initial_c
    ifo, i, o, f, cell = a[:, :3 * n], a[:, :n], a[:, n:2 * n], a[:, 2 * n:3 * n], a[:, 3 * n:]
    for t in order:
        np.dot(h, rt, out=a)
        a += proj[t]
        np.tanh(a, out=a)
        ifo += 1
        ifo *= 0.5
        cell *= i
        c *= f
        c += cell
        h = ys[t]
        np.tanh(c, out=h)
        h *= o
    return h, c


def _gru_cell_tanh(rt, wb, rb, hidden):
    """:func:`_gru_cell` with ``linear_before_reset`` for Sigmoid/Tanh, no clip:
    one matmul for all three gates."""
    n = hidden
    rt, scale = _half_columns(rt, 2 * n)
    bias = rbh = None
    if wb is not None:
        bias = wb + rb
        bias[2 * n:], rbh = wb[2 * n:], rb[2 * n:]

    def step(xp, h, c):
        g = h @ rt
        zr = g[:, :2 * n]
        zr += xp[:, :2 * n]
        np.tanh(zr, out=zr)
        zr += 1
        zr *= 0.5
        a = g[:, 2 * n:]
        if rbh is not None:
            a += rbh
        a *= g[:, n:2 * n]
        a += xp[:, 2 * n:]
        np.tanh(a, out=a)
        new = h - a             # (1 - z) * hh + z * h, with one product
        new *= g[:, :n]
        new += a
        return new, None
    return bias, step, scale, functools.partial(_gru_loop_tanh, rt, rbh, n)


def _gru_loop_tanh(rt, rbh, n, proj, h, c, ys, order):
    """Every step of :func:`_gru_cell_tanh` (rows of equal length) in buffers
    made once, as :func:`_lstm_loop_tanh`."""
    g = np.empty((h.shape[0], 3 * n), proj.dtype)
    zr, z, reset, a = g[:, :2 * n], g[:, :n], g[:, n:2 * n], g[:, 2 * n:]
    for t in order:
        xp = proj[t]
        np.dot(h, rt, out=g)
        zr += xp[:, :2 * n]
        np.tanh(zr, out=zr)
        zr += 1
        zr *= 0.5
        if rbh is not None:
            a += rbh
        a *= reset
        a += xp[:, 2 * n:]
        np.tanh(a, out=a)
        new = ys[t]
        np.subtract(h, a, out=new)  # (1 - z) * hh + z * h, with one product
        new *= z
        new += a
        h = new
    return h, None


def _make_cell(kind, rt, wb, rb, p, acts, clip, hidden, default_acts: bool, **attrs):
    """``(bias, step, projection scale or None, loop or None)`` for one direction;
    ``loop(proj, h, c, ys, order)`` runs every step when all rows have the full
    length, writing each H into ``ys``, and returns the final H and C."""
    if default_acts and clip is None:
        if kind == "lstm" and p is None and not attrs.get("input_forget"):
            return _lstm_cell_tanh(rt, wb, rb, hidden)
        if kind == "gru" and attrs.get("linear_before_reset"):
            return _gru_cell_tanh(rt, wb, rb, hidden)
    return (*_CELLS[kind](rt, wb, rb, p, acts, clip, hidden, **attrs), None, None)


def _default_activations(kind: str, names, d: int, dirs: int) -> bool:
    if names is None:
        return True
    per = len(names) // dirs
    return tuple(names[d * per:(d + 1) * per]) == DEFAULT_ACTIVATIONS[kind]


_CELLS = {"rnn": _rnn_cell, "gru": _gru_cell, "lstm": _lstm_cell}

# ---------------------------------------------------------------- the time loop


def _scan(step, loop, proj, h, c, lens, reverse: bool, hidden: int):
    """Run ``step`` over the time steps of ``proj`` (seq, batch, G*hidden).

    Returns Y (seq, batch, hidden) indexed by the original time step, and the
    final H and C. With ``lens`` each row runs its own length (reverse: from
    its own last step back) and keeps its state after it. Without, the cell's
    ``loop`` (if it has one) runs the steps instead of ``step``.
    """
    seq, batch = proj.shape[:2]
    ys = np.zeros((seq, batch, hidden), proj.dtype)
    if lens is None:
        order = range(seq - 1, -1, -1) if reverse else range(seq)
        if loop is not None:
            h, c = loop(proj, h, c, ys, order)
        else:
            for t in order:
                h, c = step(proj[t], h, c)
                ys[t] = h
        if seq == 0:    # no step: the final state is zero, as for a length-0 sequence
            h, c = np.zeros_like(h), (None if c is None else np.zeros_like(c))
        return ys, h, c
    steps = np.arange(seq)[:, None]
    valid = steps < lens                                  # (seq, batch)
    rows = np.arange(batch)
    # pos[t, b]: the original time step that row b reads at its t-th step
    pos = np.where(valid, lens - 1 - steps, steps) if reverse else np.broadcast_to(steps, (seq, batch))
    proj = proj[pos, rows]
    shortest = int(lens.min())
    for t in range(int(lens.max())):
        h_new, c_new = step(proj[t], h, c)
        if t < shortest:
            h, c = h_new, c_new
        else:
            keep = valid[t][:, None]
            h = np.where(keep, h_new, h)
            c = None if c is None else np.where(keep, c_new, c)
            h_new = h_new * keep
        ys[t] = h_new
    out = np.empty_like(ys)
    out[pos, rows] = ys
    empty = (lens == 0)[:, None]
    h = np.where(empty, 0, h)
    c = None if c is None else np.where(empty, 0, c)
    return out, h, c


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


def _layer(kind, x, w, r, extras, out, *, hidden_size, direction="forward", layout=0,
           optional_inputs=(), activations=None, activation_alpha=None, activation_beta=None,
           clip=None, **cell_attrs):
    """The shared driver: per direction, project, scan, write Y, Y_h (and Y_c)."""
    opt = dict(zip(optional_inputs, extras))
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
    acts = _bind_activations(kind, dirs, activations, activation_alpha, activation_beta)
    xs = x.reshape(seq * batch, x.shape[2]).astype(dtype, copy=False)
    n = hidden_size
    for d in range(dirs):
        state = [opt[k][d].astype(dtype, copy=False) if k in opt else np.zeros((batch, n), dtype)
                 for k in ("initial_h", "initial_c")]
        b = opt["B"][d].astype(dtype, copy=False) if "B" in opt else None
        half = None if b is None else b.shape[0] // 2
        p = opt["P"][d].astype(dtype, copy=False) if "P" in opt else None
        # R^T made contiguous once: the per-step matmul reads it about 20% faster
        rt = _transposed(r[d], dtype)
        bias, step, scale, loop = _make_cell(kind, rt, None if b is None else b[:half],
                                       None if b is None else b[half:], p, acts[d], clip, n,
                                       _default_activations(kind, activations, d, dirs), **cell_attrs)
        proj = xs @ w[d].astype(dtype, copy=False).T
        if bias is not None:
            proj += bias
        if scale is not None:
            proj *= scale
        reverse = direction == "reverse" or d == 1
        ys, h, c = _scan(step, loop, proj.reshape(seq, batch, -1), state[0], state[1] if kind == "lstm" else None,
                         lens, reverse, n)
        np.copyto(y[:, d], ys, casting="unsafe")
        np.copyto(y_h[d], h, casting="unsafe")
        if y_c is not None:
            np.copyto(y_c[d], c, casting="unsafe")


@register_kernel("nn.rnn")
def rnn(x, w, r, *extras, out, **attrs):
    """ONNX RNN: ``out`` is (Y, Y_h); ``extras`` are the inputs ``optional_inputs`` names."""
    _layer("rnn", x, w, r, extras, out, **attrs)


@register_kernel("nn.gru")
def gru(x, w, r, *extras, out, **attrs):
    """ONNX GRU: ``out`` is (Y, Y_h)."""
    _layer("gru", x, w, r, extras, out, **attrs)


@register_kernel("nn.lstm")
def lstm(x, w, r, *extras, out, **attrs):
    """ONNX LSTM: ``out`` is (Y, Y_h, Y_c)."""
    _layer("lstm", x, w, r, extras, out, **attrs)

"""The recurrent kernels' per-instruction memo (recurrent._specialize): a call whose W, R, B and
P are the instruction's constants reuses each direction's packed weights and cell, and gives
the plain kernel's bits; weights that are not constants, or whose R^T sits in the thread's
huge-page buffer (reused by the next call), are packed on every call."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import recurrent, recurrent_joint
from relaxpack.runtime.kernels.recurrent import gru, lstm

ATTRS = dict(hidden_size=5, direction="bidirectional", layout=0, activations=None, activation_alpha=None,
             activation_beta=None, clip=None, packed=False)


def _weights(gates: int, rng):
    return (rng.standard_normal((2, gates * 5, 3)).astype(np.float32),
            rng.standard_normal((2, gates * 5, 5)).astype(np.float32),
            rng.standard_normal((2, 2 * gates * 5)).astype(np.float32))


def _outputs(kind: str, seq: int, batch: int):
    shapes = [(seq, 2, batch, 5), (2, batch, 5)] + ([(2, batch, 5)] if kind == "lstm" else [])
    return tuple(np.empty(s, np.float32) for s in shapes)


@pytest.mark.parametrize("kind, kernel, attrs", [
    ("lstm", lstm, dict(input_forget=0, quantize_inputs=False)),
    ("gru", gru, dict(linear_before_reset=1)),
])
def test_the_memo_gives_the_plain_kernels_bits_call_after_call(kind, kernel, attrs):
    rng = np.random.default_rng(0)
    w, r, b = _weights(4 if kind == "lstm" else 3, rng)
    full = dict(ATTRS, optional_inputs=("B", "initial_h"), **attrs)
    call = kernel.specialize_attrs(full, (False, True, True, True, False))
    for seq, batch in [(1, 1), (3, 2), (1, 1), (4, 1)]:
        x = rng.standard_normal((seq, batch, 3)).astype(np.float32)
        h0 = rng.standard_normal((2, batch, 5)).astype(np.float32)
        got, want = _outputs(kind, seq, batch), _outputs(kind, seq, batch)
        call(x, w, r, b, h0, out=got)
        kernel(x, w, r, b, h0, out=want, **full)
        for g, e in zip(got, want):
            np.testing.assert_array_equal(g, e)
    other = [a.copy() for a in (w, r, b)]
    other[1] *= 0.5                     # new arrays: packed afresh, not the kept ones
    got, want = _outputs(kind, 2, 1), _outputs(kind, 2, 1)
    x, h0 = np.ones((2, 1, 3), np.float32), np.zeros((2, 1, 5), np.float32)
    call(x, *other, h0, out=got)
    kernel(x, *other, h0, out=want, **full)
    for g, e in zip(got, want):
        np.testing.assert_array_equal(g, e)


def test_weights_in_the_huge_page_buffer_or_not_constant_are_never_kept(monkeypatch):
    # the per-direction cells (here every LSTM: none fits the joint loop)
    made = []
    real = recurrent._make_cell
    monkeypatch.setattr(recurrent, "_make_cell", lambda *a, **k: made.append(1) or real(*a, **k))
    monkeypatch.setattr(recurrent_joint, "MAX_BYTES", 0)
    rng = np.random.default_rng(1)
    w, r, b = _weights(4, rng)
    full = dict(ATTRS, optional_inputs=("B",), input_forget=0, quantize_inputs=False)
    x = np.ones((1, 1, 3), np.float32)
    kept = lstm.specialize_attrs(full, (False, True, True, True))
    for _ in range(3):
        kept(x, w, r, b, out=_outputs("lstm", 1, 1))
    assert len(made) == 2                       # once per direction
    per_call = lstm.specialize_attrs(full, (False, False, True, True))
    for _ in range(3):
        per_call(x, w, r, b, out=_outputs("lstm", 1, 1))
    assert len(made) == 2 + 6
    monkeypatch.setattr(recurrent, "in_huge_pages", lambda m: m.copy())
    huge = lstm.specialize_attrs(full, (False, True, True, True))
    for _ in range(2):
        huge(x, w, r, b, out=_outputs("lstm", 1, 1))
    assert len(made) == 2 + 6 + 4


def test_the_joint_loop_is_kept_for_constant_weights_only(monkeypatch):
    made = []
    real = recurrent.JointLSTM
    monkeypatch.setattr(recurrent, "JointLSTM", lambda *a, **k: made.append(1) or real(*a, **k))
    rng = np.random.default_rng(2)
    w, r, b = _weights(4, rng)
    full = dict(ATTRS, optional_inputs=("B",), input_forget=0, quantize_inputs=False)
    kept = lstm.specialize_attrs(full, (False, True, True, True))
    for seq, batch in [(2, 1), (1, 3), (2, 1)]:
        got, want = _outputs("lstm", seq, batch), _outputs("lstm", seq, batch)
        x = rng.standard_normal((seq, batch, 3)).astype(np.float32)
        kept(x, w, r, b, out=got)
        lstm(x, w, r, b, out=want, **full)
        for g, e in zip(got, want):
            np.testing.assert_array_equal(g, e)
    assert len(made) == 1 + 3                   # the plain kernel makes one a call
    per_call = lstm.specialize_attrs(full, (False, False, True, True))
    for _ in range(2):
        per_call(np.ones((1, 1, 3), np.float32), w, r, b, out=_outputs("lstm", 1, 1))
    assert len(made) == 1 + 3 + 2


def test_a_kept_lstm_cell_reuses_its_buffer_and_earlier_outputs_stay():
    """The kept cell's working buffer (per batch and dtype) serves call after call: each call's
    Y, Y_h and Y_c are the plain kernel's bits, and outputs of an earlier call (Y_c came from that
    buffer) do not change when a later call runs, at alternating batches and directions."""
    rng = np.random.default_rng(3)
    w, r, b = _weights(4, rng)
    full = dict(ATTRS, optional_inputs=("B", "initial_h", "initial_c"), input_forget=0, quantize_inputs=False)
    call = lstm.specialize_attrs(full, (False, True, True, True, False, False))
    kept = []
    for seq, batch in [(1, 1), (1, 3), (2, 1), (1, 1), (0, 3), (1, 3)]:
        x = rng.standard_normal((seq, batch, 3)).astype(np.float32)
        h0, c0 = (rng.standard_normal((2, batch, 5)).astype(np.float32) for _ in range(2))
        got, want = _outputs("lstm", seq, batch), _outputs("lstm", seq, batch)
        call(x, w, r, b, h0, c0, out=got)
        lstm(x, w, r, b, h0, c0, out=want, optional_inputs=full["optional_inputs"],
             **{k: v for k, v in full.items() if k != "optional_inputs"})
        for g, e in zip(got, want):
            np.testing.assert_array_equal(g, e)
        kept.append((got, tuple(a.copy() for a in got)))
    for got, copies in kept:
        for g, c in zip(got, copies):
            np.testing.assert_array_equal(g, c)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("optional", [("B", "initial_h", "initial_c"), ("B",), ()])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_a_kept_joint_loop_is_called_straight_and_gives_the_plain_kernels_bits(monkeypatch, direction, layout,
                                                                             optional, dtype):
    """After its first call an LSTM instruction with constant weights runs its kept joint loop
    without :func:`recurrent._layer` (``_joint_call``), with the plain kernel's bits at every
    layout, direction and state; an empty sequence, new weights or another output dtype go back
    to ``_layer``."""
    layers = []
    real = recurrent._layer
    monkeypatch.setattr(recurrent, "_layer", lambda *a, **k: layers.append(1) or real(*a, **k))
    rng = np.random.default_rng(4)
    dirs = 2 if direction == "bidirectional" else 1
    w, r, b = (a[:dirs].astype(dtype) for a in _weights(4, rng))
    extra = {"B": b}
    full = dict(ATTRS, direction=direction, layout=layout, optional_inputs=optional, input_forget=0,
                quantize_inputs=False)
    call = lstm.specialize_attrs(full, (False, True, True) + tuple(k == "B" for k in optional))

    def outputs(seq, batch, out_dtype):
        ys = (seq, dirs, batch, 5) if layout == 0 else (batch, seq, dirs, 5)
        hs = (dirs, batch, 5) if layout == 0 else (batch, dirs, 5)
        return np.empty(ys, out_dtype), np.empty(hs, out_dtype), np.empty(hs, out_dtype)

    for step, (seq, batch, weights, out_dtype) in enumerate(
            [(3, 1, w, dtype), (1, 3, w, dtype), (2, 2, w, dtype), (0, 2, w, dtype), (2, 1, w * 0.5, dtype),
             (2, 1, w, np.float64)]):
        x = rng.standard_normal((seq, batch, 3) if layout == 0 else (batch, seq, 3)).astype(dtype)
        hs = (dirs, batch, 5) if layout == 0 else (batch, dirs, 5)
        extra["initial_h"], extra["initial_c"] = (rng.standard_normal(hs).astype(dtype) for _ in range(2))
        args = [x, weights, r, *[extra[k] for k in optional]]
        got, want = outputs(seq, batch, out_dtype), outputs(seq, batch, out_dtype)
        before = len(layers)
        call(*args, out=got)
        assert len(layers) - before == (1 if step == 0 or step >= 3 else 0)
        lstm(*args, out=want, **full)
        for g, e in zip(got, want):
            np.testing.assert_array_equal(g, e)

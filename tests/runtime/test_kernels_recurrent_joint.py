"""The LSTM's joint gate-major loop (recurrent_joint.py) against the per-direction loops it
replaces (every fast LSTM whose R_joint fits): the same results up to the product's summation
order (BLAS may group the zero terms of R_joint's other directions apart), in every direction,
layout and float type, with and without initial state; where it switches on and off."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import recurrent, recurrent_joint
from relaxpack.runtime.kernels.recurrent import lstm
from relaxpack.runtime.kernels.recurrent_weights import pack_weights, projector

#: float type -> (rtol, atol) between the two loops: a few ulps of the work dtype (float16
#: computes in float32 and rounds once: a value near a rounding boundary may take the next one)
CLOSE = {np.float64: (1e-12, 1e-13), np.float32: (2e-6, 1e-6), np.float16: (1e-3, 1e-3)}
UINT = {np.float64: np.uint64, np.float32: np.uint32}


def _attrs(n: int, direction: str, layout: int, optional=("B",), **extra):
    return dict(hidden_size=n, direction=direction, layout=layout, activations=None, activation_alpha=None,
                activation_beta=None, clip=None, packed=False, input_forget=0, quantize_inputs=False,
                optional_inputs=optional, **extra)


def _case(seq, batch, n, dirs, layout, dtype, rng, inp=3, state=True):
    w = rng.standard_normal((dirs, 4 * n, inp)).astype(dtype)
    r = (rng.standard_normal((dirs, 4 * n, n)) * 0.5).astype(dtype)
    b = rng.standard_normal((dirs, 8 * n)).astype(dtype)
    x = rng.standard_normal((seq, batch, inp) if layout == 0 else (batch, seq, inp)).astype(dtype)
    hs = (dirs, batch, n) if layout == 0 else (batch, dirs, n)
    states = [rng.standard_normal(hs).astype(dtype) for _ in range(2)] if state else []
    return [x, w, r, b, *states]


def _outputs(seq, batch, n, dirs, layout, dtype):
    y = (seq, dirs, batch, n) if layout == 0 else (batch, seq, dirs, n)
    hs = (dirs, batch, n) if layout == 0 else (batch, dirs, n)
    return np.empty(y, dtype), np.empty(hs, dtype), np.empty(hs, dtype)


def _both(monkeypatch, inputs, attrs, shape_args):
    """(joint, per-direction) outputs of the plain kernel, counting the joint loops made."""
    made = []
    real = recurrent.JointLSTM
    monkeypatch.setattr(recurrent, "JointLSTM", lambda *a, **k: made.append(1) or real(*a, **k))
    joint = _outputs(*shape_args)
    lstm(*inputs, out=joint, **attrs)
    monkeypatch.setattr(recurrent_joint, "MAX_BYTES", 0)
    alone = _outputs(*shape_args)
    lstm(*inputs, out=alone, **attrs)
    return joint, alone, len(made)


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
@pytest.mark.parametrize("seq, batch", [(1, 2), (5, 3), (4, 1), (1, 1)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_the_joint_loop_gives_the_per_direction_loops_results(monkeypatch, direction, layout, seq, batch, dtype):
    rng = np.random.default_rng(seq * 10 + batch)
    n, dirs = 5, 2 if direction == "bidirectional" else 1
    inputs = _case(seq, batch, n, dirs, layout, dtype, rng)
    attrs = _attrs(n, direction, layout, ("B", "initial_h", "initial_c"))
    before = [a.copy() for a in inputs]
    joint, alone, made = _both(monkeypatch, inputs, attrs, (seq, batch, n, dirs, layout, dtype))
    assert made == 1
    rtol, atol = CLOSE[dtype]
    for got, want in zip(joint, alone):
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol)
    for a, b in zip(inputs, before):
        np.testing.assert_array_equal(a, b)         # the initial state is read, not written


@pytest.mark.parametrize("seq, batch", [(6, 2), (1, 3), (1, 1), (4, 1)])
def test_without_initial_state_or_bias(monkeypatch, seq, batch):
    # (1, 3): a single step at batch > 1 projects gate-major in place, with no bias to add
    rng = np.random.default_rng(7)
    x, w, r, _ = _case(seq, batch, 4, 2, 0, np.float32, rng, state=False)
    attrs = _attrs(4, "bidirectional", 0, ())
    joint, alone, made = _both(monkeypatch, [x, w, r], attrs, (seq, batch, 4, 2, 0, np.float32))
    assert made == 1
    for got, want in zip(joint, alone):
        np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-6)


def test_weights_packed_at_build_time_give_the_same_bits():
    rng = np.random.default_rng(8)
    x, w, r, b = _case(3, 2, 4, 2, 0, np.float32, rng, state=False)
    packed, plain = _outputs(3, 2, 4, 2, 0, np.float32), _outputs(3, 2, 4, 2, 0, np.float32)
    lstm(x, *pack_weights("lstm", w, r, b, hidden_size=4), out=packed, **dict(_attrs(4, "bidirectional", 0), packed=True))
    lstm(x, w, r, b, out=plain, **_attrs(4, "bidirectional", 0))
    for got, want in zip(packed, plain):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dirs, dtype", [(2, np.float32), (1, np.float32), (2, np.float64)])
def test_the_joint_loop_stops_where_r_joint_outgrows_max_bytes(monkeypatch, dirs, dtype):
    itemsize = np.dtype(dtype).itemsize
    largest = int((recurrent_joint.MAX_BYTES / (4 * dirs * dirs * itemsize)) ** 0.5)
    assert recurrent_joint.fits(dirs, largest, itemsize) and not recurrent_joint.fits(dirs, largest + 1, itemsize)
    rng = np.random.default_rng(9)
    direction = "bidirectional" if dirs == 2 else "forward"
    for n, taken in [(largest, 1), (largest + 1, 0)]:
        inputs = _case(2, 2, n, dirs, 0, dtype, rng, state=False)[:4]
        joint, alone, made = _both(monkeypatch, inputs, _attrs(n, direction, 0), (2, 2, n, dirs, 0, dtype))
        monkeypatch.undo()
        assert made == taken
        rtol, atol = CLOSE[dtype]
        for got, want in zip(joint, alone):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol)


@pytest.mark.parametrize("extra, optional", [
    (dict(clip=2.0), ("B",)),
    (dict(activations=("Sigmoid", "Tanh", "Relu") * 2), ("B",)),
    (dict(input_forget=1), ("B",)),
    ({}, ("B", "sequence_lens")),
    ({}, ("B", "initial_h", "initial_c", "P")),
])
def test_cells_the_joint_loop_does_not_take(monkeypatch, extra, optional):
    rng = np.random.default_rng(10)
    x, w, r, b, h0, c0 = _case(3, 2, 4, 2, 0, np.float32, rng)
    extras = {"B": b, "initial_h": h0, "initial_c": c0, "P": rng.standard_normal((2, 12)).astype(np.float32),
              "sequence_lens": np.array([3, 1], np.int32)}
    attrs = dict(_attrs(4, "bidirectional", 0, optional), **extra)
    made = []
    real = recurrent.JointLSTM
    monkeypatch.setattr(recurrent, "JointLSTM", lambda *a, **k: made.append(1) or real(*a, **k))
    lstm(x, w, r, *[extras[k] for k in optional], out=_outputs(3, 2, 4, 2, 0, np.float32), **attrs)
    assert made == []


def test_an_empty_batch_gives_empty_outputs():
    rng = np.random.default_rng(11)
    x, w, r, b = _case(3, 0, 4, 2, 0, np.float32, rng, state=False)
    out = _outputs(3, 0, 4, 2, 0, np.float32)
    lstm(x, w, r, b, out=out, **_attrs(4, "bidirectional", 0))
    assert [o.shape for o in out] == [(3, 2, 0, 4), (2, 0, 4), (2, 0, 4)]


def test_plans_per_shape_stay_bounded_and_right():
    """A joint loop keeps at most 16 plans (one per sequence length, batch, dtype and reverse):
    a shape per call empties the store and makes its plan afresh, with the same bits."""
    rng = np.random.default_rng(12)
    w, r, b = _case(1, 1, 4, 2, 0, np.float32, rng, state=False)[1:]
    joint = recurrent_joint.JointLSTM(w, r, b, 4, np.float32, packed=False)
    results = {}
    for rounds in range(2):
        for seq in range(1, 21):
            x = np.random.default_rng(seq).standard_normal((seq, 1, 3)).astype(np.float32)
            y, y_h, y_c = _outputs(seq, 1, 4, 2, 0, np.float32)
            joint.run(x.reshape(seq, 3), seq, 1, (False, True), None, None, y, y_h, y_c)
            assert len(joint._plans) <= 16
            if rounds:
                for got, want in zip((y, y_h, y_c), results[seq]):
                    np.testing.assert_array_equal(got, want)
            results[seq] = (y, y_h, y_c)


@pytest.mark.parametrize("seq, batch", [(1, 1), (2, 1), (7, 1), (1, 3), (2, 2), (5, 3)])
@pytest.mark.parametrize("reverse", [(False,), (True,), (False, True)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("whole", [True, False])
def test_the_projection_adds_the_whole_bias_with_a_rows_bits(monkeypatch, seq, batch, reverse, dtype, bias, whole):
    """A plan's projection (its bias repeated to the product's shape, one contiguous add, or one
    row past WHOLE_BIAS_MAX_BYTES) holds the bits of ``projector``'s broadcast row add, each
    direction's rows in its step order."""
    if not whole:
        monkeypatch.setattr(recurrent_joint, "WHOLE_BIAS_MAX_BYTES", seq * batch * 4 * len(reverse) * 5 * dtype().itemsize - 1)
    rng = np.random.default_rng(seq * 100 + batch * 10 + len(reverse))
    n, dirs, inp = 5, len(reverse), 3
    w, r, b = _case(1, 1, n, dirs, 0, dtype, rng, inp=inp, state=False)[1:]
    joint = recurrent_joint.JointLSTM(w, r, b if bias else None, n, dtype, packed=False)
    xs = (rng.standard_normal((seq * batch, inp)) * 1e3).astype(dtype)
    plan = recurrent_joint._Plan(joint, seq, batch, dtype, reverse)
    plan.project(xs)
    want = projector(joint.bias)(xs, joint.wt).reshape(seq, batch, 4, dirs, n)
    for d, back in enumerate(reverse):
        rows = want[::-1] if back else want
        got = plan.xj[:, :, d]                   # (seq, 4, n, batch)
        np.testing.assert_array_equal(got.view(UINT[dtype]), rows[:, :, :, d].transpose(0, 2, 3, 1).view(UINT[dtype]))
    if bias and (batch == 1 or seq > 1):        # (a single step at batch > 1 has its own bias)
        assert plan.bias.shape == ((seq * batch, 4 * dirs * n) if whole else (1, 4 * dirs * n))
        assert not whole or not plan.bias.flags.writeable

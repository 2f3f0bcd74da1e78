"""Struct-info inference of nn.rnn, nn.gru and nn.lstm: symbolic batch and
seq in both layouts, optional inputs named by attribute, shape and
attribute errors; and the kernel implements every activation the op allows."""

import numpy as np
import pytest

from relaxpack.errors import IRError, ShapeError
from relaxpack.ir import BlockBuilder, TensorStructInfo, TupleStructInfo, Var, sym
from relaxpack.ops import make_call
from relaxpack.ops.definitions.recurrent import ACTIVATIONS
from relaxpack.runtime.kernels import recurrent as kernels
from relaxpack.runtime.kernels import recurrent_activations, recurrent_weights

b, s = sym("batch"), sym("seq")


def T(shape, dtype="float32"):
    return TensorStructInfo(shape, dtype)


def infer(name, *sinfos, **attrs):
    call = make_call(name, *[Var(f"x{i}", struct_info=si) for i, si in enumerate(sinfos)], **attrs)
    return BlockBuilder().infer_call(call)


def test_lstm_bidirectional_layout_0_with_symbolic_dims():
    got = infer("nn.lstm", T((s, b, 7)), T((2, 24, 7)), T((2, 24, 6)), T((2, 48)), T((b,), "int32"),
                hidden_size=6, direction="bidirectional", optional_inputs=("B", "sequence_lens"))
    assert got == TupleStructInfo((T((s, 2, b, 6)), T((2, b, 6)), T((2, b, 6))))


def test_gru_layout_1_with_initial_state():
    got = infer("nn.gru", T((b, s, 3)), T((1, 15, 3)), T((1, 15, 5)), T((b, 1, 5)),
                hidden_size=5, layout=1, optional_inputs=("initial_h",))
    assert got == TupleStructInfo((T((b, s, 1, 5)), T((b, 1, 5))))


def test_rnn_float16():
    got = infer("nn.rnn", T((4, 2, 3), "float16"), T((1, 5, 3), "float16"), T((1, 5, 5), "float16"), hidden_size=5)
    assert got == TupleStructInfo((T((4, 1, 2, 5), "float16"), T((1, 2, 5), "float16")))


def test_packed_weights_are_transposed():
    got = infer("nn.lstm", T((s, b, 7)), T((2, 7, 24)), T((2, 6, 24)), T((2, 48)), hidden_size=6,
                direction="bidirectional", optional_inputs=("B",), packed=True)
    assert got == TupleStructInfo((T((s, 2, b, 6)), T((2, b, 6)), T((2, b, 6))))
    with pytest.raises(ShapeError, match=r"R\.nn\.gru: W \(1, 15, 3\): dim 1: 15 != 3"):
        infer("nn.gru", T((s, b, 3)), T((1, 15, 3)), T((1, 5, 15)), hidden_size=5, packed=True)
    with pytest.raises(IRError, match=r"attribute packed must be a bool"):
        infer("nn.rnn", T((s, b, 3)), T((1, 3, 5)), T((1, 5, 5)), hidden_size=5, packed=1)


def test_weight_that_does_not_match_hidden_size():
    with pytest.raises(ShapeError, match=r"R\.nn\.gru: R \(1, 15, 4\): dim 2: 4 != 5"):
        infer("nn.gru", T((s, b, 3)), T((1, 15, 3)), T((1, 15, 4)), hidden_size=5)


def test_initial_state_of_another_batch():
    with pytest.raises(ShapeError, match=r"R\.nn\.rnn: initial_h \(1, 3, 5\): dim 1: 3 and batch are not "
                                         r"provably equal"):
        infer("nn.rnn", T((s, b, 3)), T((1, 5, 3)), T((1, 5, 5)), T((1, 3, 5)), hidden_size=5,
              optional_inputs=("initial_h",))


def test_dtypes_must_agree():
    with pytest.raises(ShapeError, match=r"operands must have the same dtype, got float32 \(X"):
        infer("nn.rnn", T((s, b, 3)), T((1, 5, 3), "float64"), T((1, 5, 5)), hidden_size=5)


def test_optional_inputs_must_match_the_arguments():
    with pytest.raises(ShapeError, match=r"takes X, W, R and the 1 optional input\(s\) \('B',\), got 3 arguments"):
        infer("nn.rnn", T((s, b, 3)), T((1, 5, 3)), T((1, 5, 5)), hidden_size=5, optional_inputs=("B",))
    with pytest.raises(IRError, match=r"optional_inputs must name some of"):
        infer("nn.gru", T((s, b, 3)), T((1, 15, 3)), T((1, 15, 5)), T((1, 10)), hidden_size=5,
              optional_inputs=("P",))
    with pytest.raises(IRError, match=r"must keep the order"):
        infer("nn.lstm", T((s, b, 3)), T((1, 20, 3)), T((1, 20, 5)), T((b, 1, 5)), T((1, 40)), hidden_size=5,
              optional_inputs=("initial_h", "B"))


def test_activation_attributes():
    with pytest.raises(IRError, match=r"activations must be None or 4 names"):
        infer("nn.gru", T((s, b, 3)), T((2, 15, 3)), T((2, 15, 5)), hidden_size=5, direction="bidirectional",
              activations=("Sigmoid", "Tanh"))
    with pytest.raises(IRError, match=r"activation_alpha must be None or 1 numbers"):
        infer("nn.rnn", T((s, b, 3)), T((1, 5, 3)), T((1, 5, 5)), hidden_size=5, activations=("Elu",),
              activation_alpha=(1.0, 2.0))


def test_the_kernel_implements_every_activation_the_op_allows():
    assert set(ACTIVATIONS) == set(recurrent_activations.ACTIVATIONS)


@pytest.mark.parametrize("kind, attrs", [("lstm", {}), ("gru", {"linear_before_reset": True})])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("batch", [1, 2])
def test_fast_cells_loop_equals_their_step_bit_for_bit(kind, attrs, reverse, batch):
    # the whole-sequence loop (rows of equal length) and the per-step path do the
    # same float operations in the same order, in place or not
    n, gates, seq = 5, {"lstm": 4, "gru": 3}[kind], 6
    rng = np.random.default_rng(0)
    w, r = rng.standard_normal((gates * n, 3)), rng.standard_normal((gates * n, n))
    b = rng.standard_normal(2 * gates * n)
    x = rng.standard_normal((seq * batch, 3))
    h0, c0 = rng.standard_normal((batch, n)), rng.standard_normal((batch, n))
    c0_before = c0.copy()
    wt, rt, b = recurrent_weights.pack_direction(w, r, b, n, *recurrent_weights.gate_layout(kind, True),
                                                 np.float64)
    cell = kernels._make_cell(kind, True, rt, b[:gates * n], b[gates * n:], None, None, None, n, **attrs)
    assert cell.loop is not None
    proj = cell.project(x, wt).reshape(seq, batch, -1)
    c = c0 if kind == "lstm" else None
    stepped, looped = np.empty((seq, batch, n)), np.empty((seq, batch, n))
    want = kernels._scan(cell._replace(loop=None), proj, h0, c, None, reverse, stepped)
    got = kernels._scan(cell, proj, h0, c, None, reverse, looped)
    np.testing.assert_array_equal(c0, c0_before)
    np.testing.assert_array_equal(looped, stepped)
    for g, w_ in zip(got, want):
        np.testing.assert_array_equal(g, w_)


def test_a_large_r_is_read_from_a_copy_in_huge_pages():
    m = np.random.default_rng(0).standard_normal((256, 1024)).astype(np.float32)
    got = recurrent_weights.in_huge_pages(m)
    np.testing.assert_array_equal(got, m)
    if recurrent_weights.HAS_HUGE_PAGES:
        assert got.ctypes.data % (2 << 20) == 0
        again = recurrent_weights.in_huge_pages(m[:, :768].copy())     # the thread's buffer, reused
        assert again.ctypes.data == got.ctypes.data
    small = m[:, :8].copy()
    assert recurrent_weights.in_huge_pages(small) is small


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("rows", [0, 1, 5])
@pytest.mark.parametrize("with_bias", [False, True])
def test_the_input_projection_is_the_operators_product_plus_bias_bit_for_bit(dtype, rows, with_bias):
    # np.dot and a one-row bias (no broadcast for one step) in place of `xs @ wt + bias`
    rng = np.random.default_rng(rows)
    xs, wt = rng.standard_normal((rows, 7)).astype(dtype), rng.standard_normal((7, 20)).astype(dtype)
    bias = rng.standard_normal(20).astype(dtype) if with_bias else None
    got = recurrent_weights.projector(bias)(xs, wt)
    want = xs @ wt + bias if with_bias else xs @ wt
    assert got.shape == (rows, 20) and got.dtype == dtype
    np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{want.itemsize}"))

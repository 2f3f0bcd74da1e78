"""PackRecurrentWeights: constant W, R and B of nn.lstm / nn.gru / nn.rnn
packed into the layout their kernel reads (W^T, R^T; a fast cell's gates
reordered and its sigmoid gates halved), and left alone where it cannot."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.ir import parse
from relaxpack.passes.pack_recurrent_weights import pack_recurrent_weights
from relaxpack.passes.core.rules import explain

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, with_dce


def c(values, dtype="float32") -> str:
    """A constant in the text form."""
    return f'R.const({np.asarray(values, dtype).tolist()}, "{dtype}")'


def program(op: str, args: str, attrs: str, *, gates: int, dirs: int = 1, dtype: str = "float32",
            params: str = "") -> str:
    """``main(x)`` returning Y of one ``op`` call, hidden size 1, input size 1."""
    return f'''
@I.ir_module
class Module:
    @R.function
    def main(x: R.Tensor(("seq", "n", 1), "{dtype}"){params}) -> R.Tensor(("seq", {dirs}, "n", 1), "{dtype}"):
        n = T.int64()
        seq = T.int64()
        lv = R.{op}(x, {args}, hidden_size=1, {attrs})
        lv1 = lv[0]
        return lv1
'''


def weights(gates: int, dirs: int = 1, start: float = 1.0):
    """W (dirs, gates, 1), R (dirs, gates, 1), B (dirs, 2*gates): 1, 2, 3, ... in ONNX gate order."""
    w = start + np.arange(dirs * gates, dtype=np.float64).reshape(dirs, gates, 1)
    return w, w + 10, np.concatenate([w[..., 0] + 20, w[..., 0] + 30], axis=1)


# ---------------------------------------------------------------- what packing does


def test_lstm_gates_become_o_i_f_c_with_the_sigmoid_gates_halved():
    w, r, b = weights(4)                 # gates i, o, f, c
    before = program("nn.lstm", f"{c(w)}, {c(r)}, {c(b)}", 'optional_inputs=("B",)', gates=4)
    expected = program("nn.lstm", f"{c([[[1.0, 0.5, 1.5, 4.0]]])}, {c([[[6.0, 5.5, 6.5, 14.0]]])}, "
                                  f"{c([[11.0, 10.5, 11.5, 24.0, 16.0, 15.5, 16.5, 34.0]])}",
                       'optional_inputs=("B",), packed=True', gates=4)
    mod, out = assert_rewrites(with_dce(pack_recurrent_weights), before, expected)
    assert_same_results(mod, out, [{"seq": 3, "n": 1}, {"seq": 2, "n": 4}])


def test_gru_with_linear_before_reset_halves_z_and_r():
    w, r, b = weights(3)                 # gates z, r, h
    before = program("nn.gru", f"{c(w)}, {c(r)}, {c(b)}", 'optional_inputs=("B",), linear_before_reset=True',
                     gates=3)
    expected = program("nn.gru", f"{c([[[0.5, 1.0, 3.0]]])}, {c([[[5.5, 6.0, 13.0]]])}, "
                                 f"{c([[10.5, 11.0, 23.0, 15.5, 16.0, 33.0]])}",
                       'optional_inputs=("B",), linear_before_reset=True, packed=True', gates=3)
    mod, out = assert_rewrites(with_dce(pack_recurrent_weights), before, expected)
    assert_same_results(mod, out, [{"seq": 3, "n": 2}])


@pytest.mark.parametrize("op, gates, attrs", [
    ("nn.rnn", 1, ""),
    ("nn.gru", 3, ""),                                   # reset before the product: the general cell
    ("nn.lstm", 4, "clip=0.5"),
    ("nn.lstm", 4, 'activations=("Sigmoid", "Tanh", "Relu")'),
], ids=["rnn", "gru_reset_first", "lstm_clip", "lstm_relu"])
def test_general_cells_are_only_transposed(op, gates, attrs):
    w, r, _ = weights(gates)
    before = program(op, f"{c(w)}, {c(r)}", attrs, gates=gates)
    packed = f"{attrs}, packed=True" if attrs else "packed=True"
    expected = program(op, f"{c(w.transpose(0, 2, 1))}, {c(r.transpose(0, 2, 1))}", packed, gates=gates)
    mod, out = assert_rewrites(with_dce(pack_recurrent_weights), before, expected)
    assert_same_results(mod, out, [{"seq": 4, "n": 3}])


def test_each_direction_packs_for_its_own_cell():
    # forward: default activations (fast, z and r halved); reverse: HardSigmoid (general, as it is)
    w, r, b = weights(3, dirs=2)
    attrs = ('direction="bidirectional", linear_before_reset=True, optional_inputs=("B",), '
             'activations=("Sigmoid", "Tanh", "HardSigmoid", "Tanh")')
    before = program("nn.gru", f"{c(w)}, {c(r)}, {c(b)}", attrs, gates=3, dirs=2)
    expected = program("nn.gru", f"{c([[[0.5, 1.0, 3.0]], [[4.0, 5.0, 6.0]]])}, "
                                 f"{c([[[5.5, 6.0, 13.0]], [[14.0, 15.0, 16.0]]])}, "
                                 f"{c([[10.5, 11.0, 23.0, 15.5, 16.0, 33.0], [24.0, 25.0, 26.0, 34.0, 35.0, 36.0]])}",
                       attrs + ", packed=True", gates=3, dirs=2)
    mod, out = assert_rewrites(with_dce(pack_recurrent_weights), before, expected)
    assert_same_results(mod, out, [{"seq": 3, "n": 2}])


def test_float64_weights_are_packed_in_float64():
    w, r, b = weights(4)
    before = program("nn.lstm", f"{c(w, 'float64')}, {c(r, 'float64')}, {c(b, 'float64')}",
                     'optional_inputs=("B",)', gates=4, dtype="float64")
    mod, out = assert_rewrites(with_dce(pack_recurrent_weights), before, program(
        "nn.lstm", f"{c([[[1.0, 0.5, 1.5, 4.0]]], 'float64')}, {c([[[6.0, 5.5, 6.5, 14.0]]], 'float64')}, "
                   f"{c([[11.0, 10.5, 11.5, 24.0, 16.0, 15.5, 16.5, 34.0]], 'float64')}",
        'optional_inputs=("B",), packed=True', gates=4, dtype="float64"))
    assert_same_results(mod, out, [{"seq": 3, "n": 2}], rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- where it does not


def test_weights_that_are_not_constants_stay():
    w, r, b = weights(4)
    r_param = ', r: R.Tensor((1, 4, 1), "float32")'
    b_param = ', b: R.Tensor((1, 8), "float32")'
    mod = parse(program("nn.lstm", f"{c(w)}, r", "", gates=4, params=r_param))
    assert_unchanged(pack_recurrent_weights, mod.script())
    assert explain(mod, "pack_recurrent_weights") == [("lv", "R r is not a constant")]
    mod = parse(program("nn.lstm", f"{c(w)}, {c(r)}, b", 'optional_inputs=("B",)', gates=4, params=b_param))
    assert_unchanged(pack_recurrent_weights, mod.script())
    assert explain(mod, "pack_recurrent_weights") == [("lv", "B is not a constant")]


def test_float16_weights_stay():
    w, r, _ = weights(4)
    text = program("nn.lstm", f"{c(w, 'float16')}, {c(r, 'float16')}", "", gates=4, dtype="float16")
    assert_unchanged(pack_recurrent_weights, text)
    assert explain(parse(text), "pack_recurrent_weights") == [
        ("lv", "its weights are float16: the kernel converts them to float32 on every call anyway")]


def test_packed_weights_are_not_packed_again():
    w, r, _ = weights(1)
    text = program("nn.rnn", f"{c(w.transpose(0, 2, 1))}, {c(r.transpose(0, 2, 1))}", "packed=True", gates=1)
    assert_unchanged(pack_recurrent_weights, text)
    assert explain(parse(text), "pack_recurrent_weights") == [("lv", "its weights are packed already")]

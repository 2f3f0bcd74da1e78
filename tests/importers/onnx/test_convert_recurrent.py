"""Converters of recurrent layers (converters/recurrent.py) against onnxruntime:
RNN, GRU and LSTM in every direction and layout, with and without each
optional input and output, per-row sequence lengths, activations with
alpha/beta, clip, input_forget, linear_before_reset; symbolic batch and
sequence length from one build."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import relaxpack
from relaxpack.errors import ShapeError, UnsupportedOpError
from relaxpack.passes import PassContext
from relaxpack.runtime import VirtualMachine

from .backend_case import assert_close
from .helpers import reference

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
TOL = {np.float32: (1e-5, 1e-6), np.float64: (1e-11, 1e-12), np.float16: (1e-2, 1e-2)}


def layer(op, *, size=7, hidden=6, direction="forward", layout=0, optional=(), outputs=None, dtype=np.float32,
          opset=22, sym=True, seed=0, scale=0.5, **attrs):
    """A one-node model: weights (W, R, B, P) are initializers (``scale`` times
    standard normal), the rest graph inputs with symbolic batch and seq (when
    ``sym``); ``outputs`` names the outputs to keep (default: all), in ONNX
    order, the others omitted."""
    rng = np.random.default_rng(seed)
    g, dirs = GATES[op], 2 if direction == "bidirectional" else 1
    w = {"W": (dirs, g * hidden, size), "R": (dirs, g * hidden, hidden), "B": (dirs, 2 * g * hidden),
         "P": (dirs, 3 * hidden)}
    consts = {n: (rng.standard_normal(s) * scale).astype(dtype) for n, s in w.items() if n in ("W", "R", *optional)}
    seq_batch = ["seq", "batch"] if layout == 0 else ["batch", "seq"]
    state = ([dirs, "batch", hidden] if layout == 0 else ["batch", dirs, hidden]) if sym else None
    shapes = {"X": seq_batch + [size] if sym else None, "sequence_lens": ["batch"] if sym else None,
              "initial_h": state, "initial_c": state}
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    graph_inputs = [helper.make_tensor_value_info(n, onnx.TensorProto.INT32 if n == "sequence_lens" else elem,
                                                  shapes[n])
                    for n in ("X", "sequence_lens", "initial_h", "initial_c") if n == "X" or n in optional]
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"][:3 + (5 if op == "LSTM" else 3)]
    inputs = [n if n in ("X", "W", "R") or n in optional else "" for n in names]
    while inputs[-1] == "":
        inputs.pop()
    all_outs = ["Y", "Y_h", "Y_c"][:3 if op == "LSTM" else 2]
    keep = all_outs if outputs is None else outputs
    outs = [n if n in keep else "" for n in all_outs]
    while outs[-1] == "":
        outs.pop()
    if opset >= 14:
        attrs["layout"] = layout
    node = helper.make_node(op, inputs, outs, hidden_size=hidden, direction=direction, **attrs)
    graph = helper.make_graph([node], "g", graph_inputs, [onnx.ValueInfoProto(name=o) for o in keep],
                              [numpy_helper.from_array(a, n) for n, a in consts.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def feeds(model, seq, batch, *, lens=None, seed=1):
    """Random values for the model's graph inputs at ``seq`` and ``batch``."""
    rng = np.random.default_rng(seed)
    node = model.graph.node[0]
    layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
    weights = {i.name: tuple(i.dims) for i in model.graph.initializer}
    dirs, _, size = weights["W"]
    hidden = weights["R"][2]
    out = {}
    for vi in model.graph.input:
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        if vi.name == "sequence_lens":
            out[vi.name] = (np.array(lens, np.int32) if lens is not None
                            else rng.integers(1, seq + 1, batch).astype(np.int32))
            continue
        shape = {"X": (seq, batch, size) if layout == 0 else (batch, seq, size)}.get(
            vi.name, (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden))
        out[vi.name] = rng.standard_normal(shape).astype(dtype)
    return out


def check(model, *feeds_list, ref="ort", dtype=np.float32):
    """Import and build ``model`` once; compare every output at each feeds."""
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    names = [o.name for o in model.graph.output]
    rtol, atol = TOL[dtype]
    for f in feeds_list:
        got = vm.run(f)
        for name, want in zip(names, batchwise_reference(model, f, ref)):
            assert_close(got[name], want, rtol, atol, name)


def batchwise_reference(model, feeds_, ref):
    """The reference outputs; onnxruntime has no layout 1, so a layout-1 model
    runs as its layout-0 twin on transposed inputs, with transposed outputs."""
    layout = next((a for a in model.graph.node[0].attribute if a.name == "layout"), None)
    if layout is None or layout.i == 0:
        return reference(model, feeds_, ref)
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    next(a for a in twin.graph.node[0].attribute if a.name == "layout").i = 0
    for vi in twin.graph.input:
        vi.type.tensor_type.ClearField("shape")     # the twin's shapes are layout 0's
    swapped = {n: a if n == "sequence_lens" else a.swapaxes(0, 1) for n, a in feeds_.items()}
    outs = reference(twin, swapped, ref)
    return [y.transpose(2, 0, 1, 3) if y.ndim == 4 else y.swapaxes(0, 1) for y in outs]


ALL_OPTIONAL = {"RNN": ("B", "sequence_lens", "initial_h"), "GRU": ("B", "sequence_lens", "initial_h"),
                "LSTM": ("B", "sequence_lens", "initial_h", "initial_c", "P")}

# ---------------------------------------------------------------- directions, layouts, optional inputs


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_every_input_with_lengths_at_two_sizes(op, direction, layout):
    model = layer(op, direction=direction, layout=layout, optional=ALL_OPTIONAL[op])
    check(model, feeds(model, 5, 4, lens=[5, 2, 1, 4]), feeds(model, 3, 2, lens=[3, 3], seed=2))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_no_optional_inputs(op, direction):
    model = layer(op, direction=direction, layout=1)
    check(model, feeds(model, 4, 3), feeds(model, 9, 1, seed=2))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("optional", [("B",), ("initial_h",), ("sequence_lens",), ("B", "initial_h")])
def test_each_optional_input_alone(op, optional):
    model = layer(op, direction="bidirectional", optional=optional)
    check(model, feeds(model, 4, 3))


@pytest.mark.parametrize("optional", [("initial_c",), ("P",), ("initial_h", "P"), ("B", "initial_c", "P")])
def test_lstm_cell_state_and_peepholes(optional):
    model = layer("LSTM", direction="bidirectional", optional=optional)
    check(model, feeds(model, 4, 3))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("seq, batch", [(1, 1), (1, 3), (6, 1)])
def test_batch_one_and_seq_one(op, seq, batch):
    model = layer(op, direction="bidirectional", optional=ALL_OPTIONAL[op], size=1, hidden=1)
    check(model, feeds(model, seq, batch, lens=[seq] * batch))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_length_zero_gives_zero_outputs_and_state(op, direction):
    model = layer(op, direction=direction, optional=ALL_OPTIONAL[op])
    check(model, feeds(model, 4, 3, lens=[0, 4, 2]))


@pytest.mark.parametrize("op, keep", [(op, keep) for op in ("RNN", "GRU", "LSTM")
                                      for keep in (["Y"], ["Y_h"], ["Y_c"], ["Y", "Y_c"])
                                      if op == "LSTM" or "Y_c" not in keep])
def test_outputs_are_optional(op, keep):
    model = layer(op, direction="bidirectional", optional=("B", "sequence_lens"), outputs=keep)
    check(model, feeds(model, 5, 3, lens=[2, 5, 3]))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_opset_7_without_layout(op):
    model = layer(op, direction="bidirectional", optional=ALL_OPTIONAL[op], opset=7)
    check(model, feeds(model, 5, 2, lens=[3, 5]))


@pytest.mark.parametrize("op, opset, attrs", [
    ("RNN", 1, {}), ("GRU", 1, {}), ("GRU", 3, {"linear_before_reset": 1}), ("LSTM", 1, {"input_forget": 1}),
], ids=["rnn_1", "gru_1", "gru_3", "lstm_1"])
@pytest.mark.parametrize("output_sequence", [0, 1])
def test_opsets_before_7_against_their_opset_7_twin(op, opset, attrs, output_sequence):
    """Opsets 1-6 compute what opset 7 does; their output_sequence only said
    whether Y must be named (Y is computed when named). Neither onnxruntime
    nor onnx's reference load them: the reference is the opset-7 twin."""
    optional = ("B", "sequence_lens", "initial_h") + (("initial_c", "P") if op == "LSTM" else ())
    model = layer(op, opset=opset, direction="bidirectional", optional=optional, output_sequence=output_sequence,
                  **attrs)
    twin = layer(op, opset=7, direction="bidirectional", optional=optional, **attrs)
    check(model, feeds(model, 5, 3), feeds(model, 2, 1, seed=4), ref=lambda f: reference(twin, f, "ort"))


def test_static_shapes_and_hidden_size_taken_from_r():
    model = layer("GRU", optional=("B",), sym=False)
    model.graph.input[0].type.tensor_type.shape.CopyFrom(
        helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, (4, 2, 7)).tensor_type.shape)
    without = onnx.ModelProto()
    without.CopyFrom(model)
    node = without.graph.node[0]
    kept = [a for a in node.attribute if a.name != "hidden_size"]
    del node.attribute[:]
    node.attribute.extend(kept)
    f = feeds(model, 4, 2)
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(without))).run(f)
    for name, want in zip(["Y", "Y_h"], reference(model, f, "ort")):   # onnxruntime needs hidden_size
        assert_close(got[name], want, *TOL[np.float32], name)


# ---------------------------------------------------------------- dtypes


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_float64_against_the_reference_evaluator(op, direction):
    # onnxruntime has no float64 kernels for these; onnx's reference evaluator
    # ignores sequence_lens, so every row runs the whole sequence
    model = layer(op, direction=direction, optional=ALL_OPTIONAL[op], dtype=np.float64)
    check(model, feeds(model, 5, 3, lens=[5, 5, 5]), ref="onnx", dtype=np.float64)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_float16(op):
    model = layer(op, direction="bidirectional", optional=ALL_OPTIONAL[op], dtype=np.float16)
    check(model, feeds(model, 5, 3, lens=[5, 1, 3]), dtype=np.float16)


@pytest.mark.parametrize("op, attrs", [("LSTM", {}), ("GRU", {"linear_before_reset": 1})])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_default_activation_cells_in_every_float_type(op, attrs, dtype):
    # no peepholes, clip or explicit activations: the cells that fold sigmoid's halving into R
    if dtype == np.float64:     # onnxruntime has no float64 LSTM; the reference evaluator ignores lengths
        model = layer(op, direction="bidirectional", optional=("B", "initial_h"), dtype=dtype, **attrs)
        check(model, feeds(model, 6, 3), ref="onnx", dtype=dtype)
        return
    model = layer(op, direction="bidirectional", optional=("B", "sequence_lens", "initial_h"), dtype=dtype,
                  **attrs)
    check(model, feeds(model, 6, 3, lens=[6, 2, 4]), dtype=dtype)


# Rows of equal length (no sequence_lens, or every length the full seq) take the
# fast cells' whole-sequence loop, which updates its buffers in place.
FULL_LENGTH_CELLS = [("LSTM", {}, ("B", "initial_h", "initial_c")),
                     ("GRU", {"linear_before_reset": 1}, ("B", "initial_h"))]


@pytest.mark.parametrize("op, attrs, optional", FULL_LENGTH_CELLS)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_full_length_loop_in_every_direction_and_layout(op, attrs, optional, direction, layout):
    model = layer(op, direction=direction, layout=layout, optional=optional + ("sequence_lens",), **attrs)
    check(model, feeds(model, 7, 1, lens=[7]), feeds(model, 4, 3, lens=[4, 4, 4], seed=2))
    model = layer(op, direction=direction, layout=layout, optional=optional, **attrs)
    check(model, feeds(model, 5, 2))


@pytest.mark.parametrize("op, attrs, optional", FULL_LENGTH_CELLS)
@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_full_length_loop_in_float16_and_float64(op, attrs, optional, dtype):
    model = layer(op, direction="bidirectional", optional=optional, dtype=dtype, **attrs)
    check(model, feeds(model, 6, 2), ref="onnx" if dtype == np.float64 else "ort", dtype=dtype)


@pytest.mark.parametrize("op, attrs, optional", FULL_LENGTH_CELLS)
def test_full_length_loop_leaves_the_initial_state_and_repeats_exactly(op, attrs, optional):
    # the loop updates C in place and writes H into Y: it must neither touch the
    # caller's initial state nor carry anything over to the next run
    model = layer(op, direction="bidirectional", optional=optional, **attrs)
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    f = feeds(model, 5, 1)
    before = {n: a.copy() for n, a in f.items()}
    first = {n: a.copy() for n, a in vm.run(f).items()}
    for n in f:
        np.testing.assert_array_equal(f[n], before[n])
    for n, a in vm.run(f).items():
        np.testing.assert_array_equal(a, first[n])


# Built at -O2, constant weights are packed once (PackRecurrentWeights); without
# the pass the kernel packs them on every call, the same way: the same bits.
PACKING_CASES = [("RNN", {}), ("GRU", {}), ("GRU", {"linear_before_reset": 1}), ("LSTM", {}),
                 ("LSTM", {"clip": 0.7}), ("LSTM", {"input_forget": 1})]


@pytest.mark.parametrize("op, attrs", PACKING_CASES, ids=lambda v: str(v) if isinstance(v, dict) else v)
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("layout", [0, 1])
def test_weights_packed_at_build_time_give_the_same_bits(op, attrs, direction, layout):
    model = layer(op, direction=direction, layout=layout, hidden=7, size=5, optional=ALL_OPTIONAL[op], **attrs)
    exe = relaxpack.build(relaxpack.from_onnx(model))
    assert '("packed", True)' in exe.metadata["ir"]
    with PassContext(disabled_passes=["PackRecurrentWeights"]):
        unpacked = relaxpack.build(relaxpack.from_onnx(model))
    assert '("packed", False)' in unpacked.metadata["ir"]
    packed_vm, unpacked_vm = VirtualMachine(exe), VirtualMachine(unpacked)
    lens = {"forward": [6, 6, 6], "reverse": [6, 2, 5], "bidirectional": [1, 6, 0]}[direction]
    for f in (feeds(model, 6, 3, lens=lens), feeds(model, 9, 1, lens=[9], seed=2)):
        got, want = packed_vm.run(f), unpacked_vm.run(f)
        for name in got:
            np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    check(model, feeds(model, 6, 3, lens=lens))


@pytest.mark.parametrize("op, attrs", [("LSTM", {}), ("GRU", {"linear_before_reset": 1}), ("GRU", {})])
def test_hidden_256_both_directions(op, attrs):
    # R^T of 0.75-1 MiB: each direction reads it from the same huge-page buffer in turn.
    # Weights of a trained layer's scale (~1/sqrt(hidden)): with 0.5 the gates saturate
    # and the summation order alone moves outputs by 1e-5
    model = layer(op, direction="bidirectional", hidden=256, size=8, optional=ALL_OPTIONAL[op], scale=0.06,
                  **attrs)
    check(model, feeds(model, 4, 1, lens=[4]), feeds(model, 3, 2, lens=[3, 1], seed=2))


def test_weights_that_are_graph_inputs_are_packed_per_call():
    # W and R fed at run time: the op stays unpacked and the kernel packs them
    model = layer("LSTM", direction="bidirectional", optional=("B", "initial_h"))
    f = feeds(model, 5, 2)
    for init in [i for i in model.graph.initializer if i.name in ("W", "R")]:
        f[init.name] = numpy_helper.to_array(init)
        model.graph.input.append(helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
        model.graph.initializer.remove(init)
    exe = relaxpack.build(relaxpack.from_onnx(model))
    assert '("packed", False)' in exe.metadata["ir"]
    check(model, f)


# ---------------------------------------------------------------- activations, clip, cell options

# (activation, alpha, beta): alpha/beta given where the activation takes them
ACTIVATIONS = [("Relu", None, None), ("Tanh", None, None), ("Sigmoid", None, None), ("Affine", 0.7, -0.2),
               ("LeakyRelu", 0.1, None), ("ThresholdedRelu", 0.3, None), ("ScaledTanh", 1.5, 0.8),
               ("HardSigmoid", 0.3, 0.4), ("Elu", 0.9, None), ("Softsign", None, None), ("Softplus", None, None)]


@pytest.mark.parametrize("name, alpha, beta", ACTIVATIONS)
def test_rnn_activation(name, alpha, beta):
    attrs = {"activations": [name, "Tanh"]}
    if alpha is not None:
        attrs["activation_alpha"] = [alpha]
    if beta is not None:
        attrs["activation_beta"] = [beta]
    model = layer("RNN", direction="bidirectional", optional=("B", "initial_h"), **attrs)
    check(model, feeds(model, 4, 3))


@pytest.mark.parametrize("name, alpha, beta", [a for a in ACTIVATIONS if a[0] in ("LeakyRelu", "HardSigmoid", "Elu")])
def test_default_alpha_and_beta(name, alpha, beta):
    model = layer("GRU", optional=("B",), activations=[name, "Tanh"])
    check(model, feeds(model, 4, 3))


def test_alpha_and_beta_are_consumed_in_order_by_the_activations_that_take_them():
    # HardSigmoid takes (0.3, 0.6), Tanh nothing, LeakyRelu 0.2 and no beta, Elu 0.5
    model = layer("LSTM", direction="bidirectional", optional=("B",),
                  activations=["HardSigmoid", "Tanh", "LeakyRelu", "Sigmoid", "Elu", "Softsign"],
                  activation_alpha=[0.3, 0.2, 0.5], activation_beta=[0.6])
    check(model, feeds(model, 4, 3))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_clip(op):
    model = layer(op, direction="bidirectional", optional=ALL_OPTIONAL[op], clip=0.4)
    check(model, feeds(model, 5, 3, lens=[5, 2, 4]))


@pytest.mark.parametrize("linear_before_reset", [0, 1])
@pytest.mark.parametrize("optional", [(), ("B", "initial_h")])
def test_gru_linear_before_reset(linear_before_reset, optional):
    model = layer("GRU", direction="bidirectional", optional=optional, linear_before_reset=linear_before_reset)
    check(model, feeds(model, 5, 3))


@pytest.mark.parametrize("optional", [("B",), ("B", "initial_c", "P")])
def test_lstm_input_forget(optional):
    model = layer("LSTM", direction="bidirectional", optional=optional, input_forget=1)
    check(model, feeds(model, 5, 3))


# ---------------------------------------------------------------- the IR and errors


def test_struct_info_keeps_batch_and_seq_symbolic():
    mod = relaxpack.from_onnx(layer("LSTM", direction="bidirectional", layout=1, optional=("initial_h",)))
    text = mod.script(show_meta=False)
    assert 'R.Tuple(R.Tensor(("batch", "seq", 2, 6), "float32"), R.Tensor(("batch", 2, 6), "float32"), ' \
           'R.Tensor(("batch", 2, 6), "float32")) = R.nn.lstm(X, ' in text
    assert 'optional_inputs=("initial_h",)' in text


def test_unknown_activation_is_unsupported():
    model = layer("RNN", activations=["Swish"])
    with pytest.raises(UnsupportedOpError, match=r"RNN node \(opset 22\): activation 'Swish' is not supported"):
        relaxpack.from_onnx(model)


def test_wrong_number_of_activations():
    model = layer("GRU", activations=["Sigmoid", "Tanh", "Tanh"])
    with pytest.raises(ShapeError, match=r"GRU node: needs 2 activations \(2 per direction\), got 3"):
        relaxpack.from_onnx(model)


def test_hidden_size_that_does_not_match_r():
    model = layer("LSTM")
    next(a for a in model.graph.node[0].attribute if a.name == "hidden_size").i = 5
    with pytest.raises(ShapeError, match=r"R\.nn\.lstm: W \(1, 24, 7\): dim 1: 24 != 20"):
        relaxpack.from_onnx(model)


def test_sequence_length_beyond_the_sequence_is_rejected_at_run_time():
    model = layer("RNN", optional=("sequence_lens",))
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    with pytest.raises(ShapeError, match=r"nn\.rnn: sequence_lens must be in \[0, 3\]"):
        vm.run(feeds(model, 3, 2, lens=[4, 1]))

"""Minimal reproductions of what real models (shipped inside PyPI wheels, tried as a new user
would) did to relaxpack: each graph is the smallest that fails, or failed, the same way as the
real model, built with onnx.helper. The real models stay out of the repository."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from .helpers import check_model, rand


def squeeze_if_then_unsqueeze():
    """silero_vad.onnx (silero-vad, spox; and its TorchScript exports): torch's ``x.squeeze(2)`` is
    ``If(Shape(x)[2] == 1, Squeeze(x, 2), Identity(x))``, whose branches differ in rank, and the
    scripted LSTMCell after it unsqueezes the result."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4, "time"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 1, 4])
    axis2, axis1 = helper.make_tensor("two", TensorProto.INT64, [1], [2]), helper.make_tensor("one", TensorProto.INT64, [1], [1])
    then = helper.make_graph([helper.make_node("Squeeze", ["x", "two"], ["s"])], "then", [],
                             [helper.make_tensor_value_info("s", TensorProto.FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["i"])], "else", [],
                              [helper.make_tensor_value_info("i", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "idx"], ["time"], axis=0),
             helper.make_node("Equal", ["time", "unit"], ["is_one"]),
             helper.make_node("If", ["is_one"], ["h"], then_branch=then, else_branch=other),
             helper.make_node("Unsqueeze", ["h", "one"], ["y"])]
    inits = [axis2, axis1, helper.make_tensor("idx", TensorProto.INT64, [], [2]),
             helper.make_tensor("unit", TensorProto.INT64, [], [1])]
    graph = helper.make_graph(nodes, "squeeze_if", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)


def test_squeeze_if_then_unsqueeze_as_silero_vad():
    # silero feeds chunks whose time axis is 1 after the encoder: the squeezing branch is the one taken
    check_model(squeeze_if_then_unsqueeze(), {"x": rand(1, 4, 1)}, {"x": rand(3, 4, 1, seed=1)})


def squeeze_if_then_lstm(hidden=5):
    """silero's scripted LSTMCell: its input comes out of the squeeze-If (rank unknown), is unsqueezed
    to a sequence of one step and fed to an ONNX LSTM, whose X the spec fixes at rank 3."""
    model = squeeze_if_then_unsqueeze()
    graph = model.graph
    graph.output[0].CopyFrom(helper.make_tensor_value_info("y", TensorProto.FLOAT, None))
    rng = np.random.default_rng(7)
    for name, shape in (("W", (1, 4 * hidden, 4)), ("R", (1, 4 * hidden, hidden)), ("B", (1, 8 * hidden))):
        graph.initializer.append(helper.make_tensor(name, TensorProto.FLOAT, shape, rng.standard_normal(shape).ravel()))
    graph.node.append(helper.make_node("LSTM", ["y", "W", "R", "B"], ["Y", "Y_h", "Y_c"], hidden_size=hidden))
    del graph.output[:]
    graph.output.extend([helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("Y", "Y_h", "Y_c")])
    return model


def test_lstm_takes_the_rank_its_spec_fixes_after_a_squeeze_if():
    """X of unknown rank (out of the squeeze-If, then unsqueezed) is cast to rank 3, checked at run
    time; before, the build refused ("R.nn.lstm needs its operands' rank")."""
    check_model(squeeze_if_then_lstm(), {"x": rand(1, 4, 1)}, {"x": rand(3, 4, 1, seed=1)})


def squeeze_if_then_conv():
    """silero's decoder: the cell's output, of unknown rank (a squeeze-If), unsqueezed and fed to a
    1x1 Conv1d, whose weight's rank is the input's."""
    model = squeeze_if_then_unsqueeze()
    graph = model.graph
    graph.node[-1].input[1] = "two"     # (batch, 4) -> (batch, 4, 1)
    rng = np.random.default_rng(8)
    graph.initializer.append(helper.make_tensor("w", TensorProto.FLOAT, (3, 4, 1), rng.standard_normal(12)))
    graph.node.append(helper.make_node("Conv", ["y", "w"], ["z"]))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("z", TensorProto.FLOAT, None))
    return model


def test_conv_takes_its_weights_rank_after_a_squeeze_if():
    """An input of unknown rank is cast to the weight's rank, checked at run time; before, the build
    refused ("R.nn.conv needs its operands' rank")."""
    check_model(squeeze_if_then_conv(), {"x": rand(1, 4, 1)}, {"x": rand(3, 4, 1, seed=1)})


def squeeze_ifs_then_concat():
    """silero's new state: the cell's h and c, each out of a squeeze-If (rank unknown), unsqueezed
    and concatenated, every operand of the Concat of unknown rank."""
    model = squeeze_if_then_unsqueeze()
    graph = model.graph
    graph.node.append(helper.make_node("Neg", ["y"], ["y_neg"]))
    graph.node.append(helper.make_node("Concat", ["y", "y_neg"], ["state"], axis=0))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("state", TensorProto.FLOAT, None))
    return model


def test_concat_of_operands_of_unknown_rank_as_silero_vad_state():
    """Every operand of unknown rank: the run shapes the result (``dyn.apply``); before, the build
    refused ("R.concat needs its operands' shape")."""
    check_model(squeeze_ifs_then_concat(), {"x": rand(1, 4, 1)}, {"x": rand(3, 4, 1, seed=1)})


def squeeze_if_then_reduce_mean():
    """silero's output: the decoder's (batch, 1, 1) squeezed by a squeeze-If on axis 1 (rank unknown),
    then a mean over axis 1."""
    model = squeeze_if_then_unsqueeze()
    graph = model.graph
    graph.node.pop()    # no Unsqueeze: the mean reads the If's result
    graph.node.append(helper.make_node("ReduceMean", ["h"], ["m"], axes=[1], keepdims=0))
    del graph.output[:]
    graph.output.append(helper.make_tensor_value_info("m", TensorProto.FLOAT, None))
    return model


def test_reduce_mean_of_unknown_rank_as_silero_vad_output():
    """The axis counts in the rank the run meets; before, the build refused (a reduction's output rank
    depends on its input's)."""
    check_model(squeeze_if_then_reduce_mean(), {"x": rand(1, 4, 1)}, {"x": rand(3, 4, 1, seed=1)})


def per_class_top_k_then_concat(classes=90, k=3):
    """torchvision's SSD postprocess: for each class, the scores above a threshold (a
    data-dependent length ``n_c``), then their top ``min(n_c, k)``; the per-class results are
    concatenated, a length that is the sum of ``classes`` data-dependent dims."""
    nodes, parts = [], []
    for c in range(classes):
        nodes += [helper.make_node("Gather", ["scores", f"c{c}"], [f"col{c}"], axis=1),
                  helper.make_node("Greater", [f"col{c}", "thresh"], [f"keep{c}"]),
                  helper.make_node("Compress", [f"col{c}", f"keep{c}"], [f"kept{c}"], axis=0),
                  helper.make_node("Shape", [f"kept{c}"], [f"n{c}"]),
                  helper.make_node("Min", [f"n{c}", "k"], [f"kk{c}"]),
                  helper.make_node("TopK", [f"kept{c}", f"kk{c}"], [f"top{c}", f"idx{c}"])]
        parts.append(f"top{c}")
    nodes.append(helper.make_node("Concat", parts, ["y"], axis=0))
    inits = [helper.make_tensor(f"c{c}", TensorProto.INT64, [], [c]) for c in range(classes)]
    inits += [helper.make_tensor("thresh", TensorProto.FLOAT, [], [0.5]),
              helper.make_tensor("k", TensorProto.INT64, [1], [k])]
    graph = helper.make_graph(nodes, "per_class_top_k", [helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", classes])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_a_sum_of_ninety_data_dependent_lengths_as_ssd_postprocess():
    """The output's length was a shape program 89 deep, refused when the VM was prepared
    ("shape program nested too deeply"); sums are balanced trees now (packager/dim_program.py)."""
    check_model(per_class_top_k_then_concat(), {"scores": rand(6, 90)}, {"scores": rand(2, 90, seed=1)})


def paste_mask_resize():
    """torchvision's Mask R-CNN pastes each 28x28 mask into its box: a bilinear Resize
    (half_pixel) to run-time sizes ``(h, w)`` computed from the box."""
    node = helper.make_node("Resize", ["mask", "", "", "sizes"], ["y"], mode="linear",
                            coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75, nearest_mode="floor")
    graph = helper.make_graph([node], "paste_resize",
                              [helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 1, 28, 28]),
                               helper.make_tensor_value_info("sizes", TensorProto.INT64, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_paste_mask_resize_at_widths_whose_source_lands_on_a_pixel():
    """28 -> 164: output 20's source coordinate is 3.0000000000000004; the kernel took its taps
    from a floor rounded up (4.0) and its weights from the true one, so that pixel was its left
    neighbor (a 0 where onnxruntime has 1 in Mask R-CNN's masks)."""
    mask = np.zeros((1, 1, 28, 28), np.float32)
    mask[..., 3] = 1.0
    feeds = [{"mask": mask, "sizes": np.array([1, 1, h, w], np.int64)} for h, w in ((1, 164), (5, 164), (3, 99))]
    check_model(paste_mask_resize(), *feeds)

"""ConvertLayout carries ShuffleNet's channel shuffle (reshape, swap of the group axes, reshape),
its split / slice of the shuffled channels and the split's pieces through a channels-last region:
results as onnxruntime's, and the transposes gone."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import relaxpack

from .test_convert_layout import _check_against_onnxruntime, _feeds

CHANNELS, HW = 16, (9, 7)


def _shuffle_nodes(src: str, dst: str, groups: int, channels: int, shape_of: str, perm=(0, 2, 1, 3, 4)) -> list:
    """``dst = shuffle(src)``: Reshape to (N, g, C / g, H, W) with N, H, W read from ``shape_of``'s
    Shape (as torch exports ``x.view(b, g, c // g, h, w)``), Transpose ``perm``, Reshape back."""
    return [
        helper.make_node("Shape", [shape_of], [f"{dst}_shape"]),
        helper.make_node("Gather", [f"{dst}_shape", "i0"], [f"{dst}_n"]),
        helper.make_node("Slice", [f"{dst}_shape", "i2", "i4"], [f"{dst}_hw"]),
        helper.make_node("Concat", [f"{dst}_n", f"{dst}_groups", f"{dst}_hw"], [f"{dst}_five"], axis=0),
        helper.make_node("Concat", [f"{dst}_n", f"{dst}_channels", f"{dst}_hw"], [f"{dst}_four"], axis=0),
        helper.make_node("Constant", [], [f"{dst}_groups"],
                         value=numpy_helper.from_array(np.array([groups, channels // groups], np.int64))),
        helper.make_node("Constant", [], [f"{dst}_channels"],
                         value=numpy_helper.from_array(np.array([channels], np.int64))),
        helper.make_node("Reshape", [src, f"{dst}_five"], [f"{dst}_grouped"]),
        helper.make_node("Transpose", [f"{dst}_grouped"], [f"{dst}_swapped"], perm=list(perm)),
        helper.make_node("Reshape", [f"{dst}_swapped", f"{dst}_four"], [dst]),
    ]


def _unit_model(groups: int = 2, halves: str = "split", perm=(0, 2, 1, 3, 4), extra_output: str | None = None):
    """depthwise 3x3 (starts the region) -> two branches concatenated -> shuffle -> halves (Split, or
    two Slices) -> depthwise 3x3 on the second half, concatenated with the first -> shuffle ->
    depthwise 3x3 -> output (ShuffleNet V2's units in small)."""
    rng = np.random.default_rng(7)
    arrays = {f"dw{i}": rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
              for i, c in enumerate((CHANNELS, CHANNELS, CHANNELS // 2, 2 * CHANNELS))}
    arrays.update(i0=np.array([0], np.int64), i2=np.array([2], np.int64), i4=np.array([4], np.int64),
                  halfc=np.array([CHANNELS, CHANNELS], np.int64))
    inits = [numpy_helper.from_array(v, k) for k, v in arrays.items()]
    nodes = [helper.make_node("Conv", ["input", "dw0"], ["a"], group=CHANNELS, pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["input", "dw1"], ["b"], group=CHANNELS, pads=[1, 1, 1, 1]),
             helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
             *_shuffle_nodes("cat", "s1", groups, 2 * CHANNELS, "cat", perm)]
    if halves == "split":
        nodes.append(helper.make_node("Split", ["s1", "halfc"], ["h0", "h1"], axis=1))
    else:
        arrays_slice = {"c0": [0], "c16": [CHANNELS], "c32": [2 * CHANNELS], "ax1": [1]}
        inits += [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in arrays_slice.items()]
        nodes += [helper.make_node("Slice", ["s1", "c0", "c16", "ax1"], ["h0"]),
                  helper.make_node("Slice", ["s1", "c16", "c32", "ax1"], ["h1"])]
    inits.append(numpy_helper.from_array(np.tile(arrays["dw2"], (2, 1, 1, 1)), "dw2x"))
    nodes += [helper.make_node("Conv", ["h1", "dw2x"], ["h1c"], group=CHANNELS, pads=[1, 1, 1, 1]),
              helper.make_node("Concat", ["h0", "h1c"], ["cat2"], axis=1),
              *_shuffle_nodes("cat2", "s2", groups, 2 * CHANNELS, "cat2", perm),
              helper.make_node("Conv", ["s2", "dw3"], ["output"], group=2 * CHANNELS, pads=[1, 1, 1, 1])]
    outputs = [helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, None)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(extra_output, onnx.TensorProto.FLOAT, None))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT,
                                                                          ["batch", CHANNELS, *HW])], outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def _ir(model) -> str:
    return relaxpack.build(relaxpack.from_onnx(model, dims={"batch": (1, 4)})).metadata["ir"]


def _layout_transposes(ir: str) -> int:
    return ir.count("(0, 2, 3, 1)") + ir.count("(0, 3, 1, 2)")


@pytest.mark.parametrize("groups", [2, 4])
@pytest.mark.parametrize("halves", ["split", "slices"])
def test_a_shuffle_unit_runs_channels_last(groups, halves):
    """Both shuffles, the split (or the two slices) and the concats stay in the region: one transpose
    in and one out; each shuffle of its concat then one interleaving concat channels last
    (ConcatOfSplit's shuffle_of_concat) when its groups are the concat's parts, else one copy
    ``(N, H, W, g, C / g) -> (N, H, W, C / g, g)``."""
    model = _unit_model(groups, halves)
    _check_against_onnxruntime(model, {"batch": (1, 4)}, _feeds(hw=HW))
    ir = _ir(model)
    assert _layout_transposes(ir) == 2, ir
    interleaving = [line for line in ir.splitlines() if '"concat"' in line and '("axis", 4)' in line]
    assert "(0, 2, 1, 3, 4)" not in ir
    if groups == 2:         # the groups are the concat's two parts
        assert len(interleaving) == 2
    else:                   # four groups over two parts: each shuffle one transposing copy
        assert not interleaving and ir.count("(0, 1, 2, 4, 3)") == 2


def test_a_shuffle_whose_grouped_value_is_read_elsewhere_stays_channels_first():
    """The grouped 5-d value is also an output: the shuffle is left as it is (its intermediates
    cannot be dropped), results unchanged."""
    model = _unit_model(extra_output="s1_swapped")
    _check_against_onnxruntime(model, {"batch": (1, 4)}, _feeds(hw=HW))
    assert '("axis", 1), ("indices_or_sections"' in _ir(model)     # the split after it channels first


def test_a_swap_of_more_axes_is_not_a_shuffle():
    """A transpose of the 5-d value that swaps H and W besides the group axes is not a channel
    shuffle: it stays channels first, results as onnxruntime's."""
    global HW
    saved, HW = HW, (7, 7)
    try:
        model = _unit_model(perm=(0, 2, 1, 4, 3))
        _check_against_onnxruntime(model, {"batch": (1, 4)}, _feeds(hw=HW))
        ir = _ir(model)
        assert "(0, 2, 1, 4, 3)" in ir and '("axis", 4)' not in ir
    finally:
        HW = saved


def _sliced_model(convs: int):
    """``convs`` depthwise 3x3 convs (gains), then two Slices of the channels, each read by a
    Softmax over the channels (no layout rule: channels first)."""
    rng = np.random.default_rng(9)
    inits = [numpy_helper.from_array(rng.standard_normal((CHANNELS, 1, 3, 3)).astype(np.float32), f"dw{i}")
             for i in range(convs)]
    inits += [numpy_helper.from_array(np.array(v, np.int64), k)
              for k, v in {"c0": [0], "c8": [8], "c16": [16], "ax1": [1]}.items()]
    nodes = [helper.make_node("Conv", ["input" if i == 0 else f"d{i - 1}", f"dw{i}"], [f"d{i}"], group=CHANNELS,
                              pads=[1, 1, 1, 1]) for i in range(convs)]
    last = f"d{convs - 1}"
    nodes += [helper.make_node("Slice", [last, "c0", "c8", "ax1"], ["h0"]),
              helper.make_node("Slice", [last, "c8", "c16", "ax1"], ["h1"]),
              helper.make_node("Softmax", ["h0"], ["out0"], axis=1),
              helper.make_node("Softmax", ["h1"], ["out1"], axis=1)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT,
                                                                          ["batch", CHANNELS, *HW])],
                              [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                               for n in ("out0", "out1")], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


@pytest.mark.parametrize("convs", [2, 3])
def test_slices_read_outside_the_region_stay_channels_first(convs):
    """Two slices whose pieces are both read channels first would cost a transpose each where one
    transpose of the sliced value does: with two gaining convs the region would not pay (it is
    planned again with the slices channels first, and kept), with three it would, with one
    transpose more. Either way: one transpose in, one out, the slices channels first."""
    model = _sliced_model(convs)
    _check_against_onnxruntime(model, {"batch": (1, 4)}, _feeds(hw=HW))
    ir = _ir(model)
    assert _layout_transposes(ir) == 2, ir
    assert '("axes", (1,))' in ir


def _dynamo_shuffle_model():
    """Two depthwise 3x3 stride-2 convs concatenated and shuffled with the reshape's H and W computed
    from the input's as torch's dynamo export writes them, ``(h0 - 1) / 2 + 1`` (ONNX's truncating
    Div: ``max(h0 - 1, 0) // 2 + 1``, not provably the convs' ``(h0 + 1) // 2`` at ``h0 = 0``), then
    a depthwise 3x3 conv."""
    rng = np.random.default_rng(11)
    arrays = {f"dw{i}": rng.standard_normal((c, 1, 3, 3)).astype(np.float32)
              for i, c in enumerate((CHANNELS, CHANNELS, 2 * CHANNELS))}
    arrays.update(one=np.array(1, np.int64), two=np.array(2, np.int64), axes0=np.array([0], np.int64),
                  groups=np.array([2, CHANNELS], np.int64), channels=np.array([2 * CHANNELS], np.int64))
    inits = [numpy_helper.from_array(v, k) for k, v in arrays.items()]
    nodes = [helper.make_node("Conv", ["input", "dw0"], ["a"], group=CHANNELS, pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Conv", ["input", "dw1"], ["b"], group=CHANNELS, pads=[1, 1, 1, 1], strides=[2, 2]),
             helper.make_node("Concat", ["a", "b"], ["cat"], axis=1),
             helper.make_node("Shape", ["input"], ["n"], start=0, end=1)]
    for axis, name in ((2, "h"), (3, "w")):
        nodes += [helper.make_node("Shape", ["input"], [f"{name}0"], start=axis, end=axis + 1),
                  helper.make_node("Squeeze", [f"{name}0"], [f"{name}1"]),
                  helper.make_node("Sub", [f"{name}1", "one"], [f"{name}2"]),
                  helper.make_node("Div", [f"{name}2", "two"], [f"{name}3"]),
                  helper.make_node("Add", [f"{name}3", "one"], [f"{name}4"]),
                  helper.make_node("Unsqueeze", [f"{name}4", "axes0"], [name])]
    nodes += [helper.make_node("Concat", ["n", "groups", "h", "w"], ["five"], axis=0),
              helper.make_node("Concat", ["n", "channels", "h", "w"], ["four"], axis=0),
              helper.make_node("Reshape", ["cat", "five"], ["grouped"], allowzero=1),
              helper.make_node("Transpose", ["grouped"], ["swapped"], perm=[0, 2, 1, 3, 4]),
              helper.make_node("Reshape", ["swapped", "four"], ["shuffled"], allowzero=1),
              helper.make_node("Conv", ["shuffled", "dw2"], ["output"], group=2 * CHANNELS, pads=[1, 1, 1, 1])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT,
                                                                          ["batch", CHANNELS, "h", "w"])],
                              [helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def test_a_shuffle_whose_dims_are_not_proved_the_convs_runs_channels_last():
    """The shuffle's reshape dims are not proved the concat's (they differ at an input height of 0):
    with N and C kept the reshape keeps each pixel's flat index either way, so it is carried
    channels last all the same (one interleaving concat), results as onnxruntime's at odd and even
    sizes."""
    model = _dynamo_shuffle_model()
    for hw in ((9, 7), (8, 6), (1, 2)):
        _check_against_onnxruntime(model, {"batch": (1, 4)}, _feeds(hw=hw))
    ir = _ir(model)
    assert "max(h - 1, 0) // 2 + 1" in ir
    assert _layout_transposes(ir) == 2, ir
    assert "(0, 2, 1, 3, 4)" not in ir
    assert len([line for line in ir.splitlines() if '"concat"' in line and '("axis", 4)' in line]) == 1

"""ConvertLayout on ConvNeXt's block: depthwise conv, transpose to channels last, layer norm,
pointwise products, transpose back, residual add. The transpose in reads the region's value, the
second product writes channels last (no ``out_axes``) and the residual add joins the region
reading the layer norm's transposed result as it is: results as onnxruntime's, fewer transposes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import relaxpack

from .test_convert_layout import _check_against_onnxruntime, _feeds

C, HW = 16, (9, 7)


def _block_model(blocks: int = 2, extra_output: str | None = None, patchify: bool = False):
    """``blocks`` ConvNeXt blocks (depthwise 3x3, Transpose to NHWC, LayerNormalization, MatMul to
    4C, Relu, MatMul back, Transpose to NCHW, Add of the block's input) after a depthwise stem, or
    with ``patchify`` ConvNeXt's stem (a 3-channel 4x4 stride-4 conv on an image of any size, then
    Transpose, LayerNormalization, Transpose back)."""
    rng = np.random.default_rng(8)
    if patchify:
        inits = [numpy_helper.from_array(rng.standard_normal((C, 3, 4, 4)).astype(np.float32), "stem"),
                 numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), "sg"),
                 numpy_helper.from_array(rng.standard_normal(C).astype(np.float32), "sb")]
        nodes = [helper.make_node("Conv", ["input", "stem"], ["s"], strides=[4, 4]),
                 helper.make_node("Transpose", ["s"], ["st"], perm=[0, 2, 3, 1]),
                 helper.make_node("LayerNormalization", ["st", "sg", "sb"], ["sn"], axis=-1),
                 helper.make_node("Transpose", ["sn"], ["x0"], perm=[0, 3, 1, 2])]
    else:
        inits = [numpy_helper.from_array(rng.standard_normal((C, 1, 3, 3)).astype(np.float32), "stem")]
        nodes = [helper.make_node("Conv", ["input", "stem"], ["x0"], group=C, pads=[1, 1, 1, 1])]
    for i in range(blocks):
        arrays = {f"dw{i}": rng.standard_normal((C, 1, 3, 3)), f"g{i}": rng.standard_normal(C),
                  f"b{i}": rng.standard_normal(C), f"w1_{i}": rng.standard_normal((C, 4 * C)) / 4,
                  f"w2_{i}": rng.standard_normal((4 * C, C)) / 8}
        inits += [numpy_helper.from_array(v.astype(np.float32), k) for k, v in arrays.items()]
        x, y = f"x{i}", f"x{i + 1}"
        nodes += [helper.make_node("Conv", [x, f"dw{i}"], [f"d{i}"], group=C, pads=[1, 1, 1, 1]),
                  helper.make_node("Transpose", [f"d{i}"], [f"t{i}"], perm=[0, 2, 3, 1]),
                  helper.make_node("LayerNormalization", [f"t{i}", f"g{i}", f"b{i}"], [f"n{i}"], axis=-1),
                  helper.make_node("MatMul", [f"n{i}", f"w1_{i}"], [f"m{i}"]),
                  helper.make_node("Relu", [f"m{i}"], [f"r{i}"]),
                  helper.make_node("MatMul", [f"r{i}", f"w2_{i}"], [f"p{i}"]),
                  helper.make_node("Transpose", [f"p{i}"], [f"q{i}"], perm=[0, 3, 1, 2]),
                  helper.make_node("Add", [x, f"q{i}"], [y])]
    nodes.append(helper.make_node("Identity", [f"x{blocks}"], ["output"]))
    outputs = [helper.make_tensor_value_info("output", onnx.TensorProto.FLOAT, None)]
    if extra_output:
        outputs.append(helper.make_tensor_value_info(extra_output, onnx.TensorProto.FLOAT, None))
    shape = ["batch", 3, "h", "w"] if patchify else ["batch", C, *HW]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("input", onnx.TensorProto.FLOAT, shape)],
                              outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)


def _ir(model) -> str:
    return relaxpack.build(relaxpack.from_onnx(model, dims={"batch": (1, 4)})).metadata["ir"]


@pytest.mark.parametrize("blocks", [1, 2])
def test_convnext_blocks_run_channels_last_between_one_transpose_in_and_one_out(blocks):
    model = _block_model(blocks)
    _check_against_onnxruntime(model, {"batch": (1, 4)}, _feeds(hw=HW))
    ir = _ir(model)
    assert ir.count('"permute_dims"') == 2, ir
    assert '("out_axes", (0, 3, 1, 2))' not in ir


def test_a_product_also_read_channels_first_keeps_its_transposed_result():
    """The second product's channels-first result is also an output: it keeps ``out_axes`` (a
    transpose moved, not saved, otherwise); results as onnxruntime's."""
    model = _block_model(1, extra_output="q0")
    _check_against_onnxruntime(model, {"batch": (1, 4)}, _feeds(hw=HW))
    assert '("out_axes", (0, 3, 1, 2))' in _ir(model)


def test_convnext_stem_writes_channels_last_for_its_layer_norm():
    """The patchify stem writes channels last (its transpose to the layer norm was a copy: a gain
    for the region), so the model's one transpose is its channels-first output."""
    model = _block_model(2, patchify=True)
    rng = np.random.default_rng(10)
    for hw in ((37, 50), (16, 12)):
        _check_against_onnxruntime(model, {"batch": (1, 4)}, lambda b: {
            "input": rng.standard_normal((b, 3, *hw)).astype(np.float32)})
    ir = relaxpack.build(relaxpack.from_onnx(model, dims={"batch": (1, 4)})).metadata["ir"]
    assert ir.count('"permute_dims"') == 1 and '("out_layout", "NHWC")' in ir, ir

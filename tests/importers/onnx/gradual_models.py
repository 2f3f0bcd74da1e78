"""Small ONNX models with the shape patterns of real models that relaxpack
once refused for want of a proof (issue 15's table), built with onnx.helper.

Each returns a ModelProto whose graph inputs have symbolic dims only.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


def _model(nodes, inputs, outputs, inits=(), opset=OPSET):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _init(name, array):
    return numpy_helper.from_array(np.asarray(array), name)


def _weights(seed, *shape):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 0.3


def _image_input(name="x", channels=3):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, ["batch", channels, "height", "width"])


def _output(name="y"):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, None)


def _conv(name, x, out, cin, cout, seed, stride=1, kernel=3):
    w = _init(f"{name}_w", _weights(seed, cout, cin, kernel, kernel))
    pad = kernel // 2
    node = helper.make_node("Conv", [x, w.name], [out], name=name, strides=[stride, stride],
                            pads=[pad] * 4, kernel_shape=[kernel, kernel])
    return node, w


def _resize2x(name, x, out, factor=2.0, mode="nearest"):
    scales = _init(f"{name}_scales", np.array([1, 1, factor, factor], np.float32))
    return helper.make_node("Resize", [x, "", scales.name], [out], name=name, mode=mode), scales


def unet_concat(kind: str = "resize") -> onnx.ModelProto:
    """A UNet level: max-pool to h // 4 (the skip), once more to h // 8,
    upsample x2 (Resize, or a 2x2 stride-2 ConvTranspose) to
    2 * (h // 8), concat with the skip: 2 * (height // 8) vs height // 4."""
    c1, w1 = _conv("c1", "x", "a", 3, 4, 1)
    p1 = helper.make_node("MaxPool", ["a"], ["p1"], name="p1", kernel_shape=[2, 2], strides=[2, 2])
    p2 = helper.make_node("MaxPool", ["p1"], ["skip"], name="p2", kernel_shape=[2, 2], strides=[2, 2])
    p3 = helper.make_node("MaxPool", ["skip"], ["deep"], name="p3", kernel_shape=[2, 2], strides=[2, 2])
    c2, w2 = _conv("c2", "deep", "deep2", 4, 6, 2)
    inits = [w1, w2]
    if kind == "resize":
        up, scales = _resize2x("up", "deep2", "up")
        inits.append(scales)
    else:
        wt = _init("up_w", _weights(3, 6, 6, 2, 2))
        up = helper.make_node("ConvTranspose", ["deep2", "up_w"], ["up"], name="up", strides=[2, 2],
                              kernel_shape=[2, 2])
        inits.append(wt)
    cat = helper.make_node("Concat", ["up", "skip"], ["cat"], name="up/Concat", axis=1)
    c3, w3 = _conv("c3", "cat", "y", 10, 2, 4)
    inits.append(w3)
    return _model([c1, p1, p2, p3, c2, up, cat, c3], [_image_input()], [_output()], inits)


def yolo_neck() -> onnx.ModelProto:
    """Stride-2 convs give (h + 1) // 2, ((h + 1) // 2 + 1) // 2, ...; the
    deepest map is resized x2 and concatenated with the one above it."""
    nodes, inits = [], []
    prev, cin = "x", 3
    for i, cout in enumerate((4, 6, 8)):
        node, w = _conv(f"down{i}", prev, f"d{i}", cin, cout, 10 + i, stride=2)
        nodes.append(node)
        inits.append(w)
        prev, cin = f"d{i}", cout
    up, scales = _resize2x("neck/Resize", "d2", "up")
    cat = helper.make_node("Concat", ["up", "d1"], ["cat"], name="neck/Concat", axis=1)
    out, w = _conv("head", "cat", "y", 14, 3, 20, kernel=1)
    return _model(nodes + [up, cat, out], [_image_input()], [_output()], inits + [scales, w])


def ppocr_fpn() -> onnx.ModelProto:
    """An FPN head as paddle2onnx writes it: two pyramid levels (h // 16 and
    h // 32) resized x4 and x8 to a common size and concatenated:
    4 * (height // 16) vs 8 * (height // 32)."""
    p4 = helper.make_node("MaxPool", ["x"], ["f16"], name="pool16", kernel_shape=[16, 16], strides=[16, 16])
    p5 = helper.make_node("MaxPool", ["x"], ["f32"], name="pool32", kernel_shape=[32, 32], strides=[32, 32])
    up4, s4 = _resize2x("fpn/up4", "f16", "u4", factor=4.0)
    up8, s8 = _resize2x("fpn/up8", "f32", "u8", factor=8.0)
    cat = helper.make_node("Concat", ["u4", "u8"], ["y"], name="fpn/Concat", axis=1)
    return _model([p4, p5, up4, up8, cat], [_image_input()], [_output()], [s4, s8])


def bert_mask(max_positions: int = 16, expand: bool = False) -> onnx.ModelProto:
    """BERT's attention with its mask path, as the TorchScript exporter writes
    it: positions sliced from a (1, max_positions) buffer up to seq
    (``min(seq, max_positions)``), ``mask[:, None, None, :]`` by two
    Unsqueezes, Cast, ``(1 - mask) * -10000``, added to the scores
    (batch, heads, seq, seq). ``expand``: the position ids are Expanded to
    (batch, seq) first (the exporters' ``position_ids.expand(...)``) and the
    mask is Expanded to (batch, 1, seq, seq) and chosen by a Where, as
    transformers' 4-D mask helper writes it."""
    hidden, heads = 8, 2
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", hidden]),
              helper.make_tensor_value_info("mask", TensorProto.INT64, ["batch", "seq"])]
    inits = [_init("pos_ids", np.arange(max_positions, dtype=np.int64)[None]),
             _init("pos_emb", _weights(1, max_positions, hidden)),
             _init("zero", np.array([0], np.int64)), _init("one", np.array([1], np.int64)),
             _init("axis1", np.array([1], np.int64)), _init("axis2", np.array([2], np.int64)),
             _init("wq", _weights(2, hidden, hidden)), _init("wk", _weights(3, hidden, hidden)),
             _init("f_one", np.array(1.0, np.float32)), _init("f_big", np.array(-10000.0, np.float32)),
             _init("heads_shape", np.array([0, 0, heads, hidden // heads], np.int64))]
    nodes = [
        helper.make_node("Shape", ["x"], ["x_shape"], name="/Shape"),
        helper.make_node("Gather", ["x_shape", "one"], ["seq_len"], name="/Gather", axis=0),
        helper.make_node("Slice", ["pos_ids", "zero", "seq_len", "axis1"], ["pos_sliced"], name="/Slice"),
        helper.make_node("Gather", ["pos_emb", "pos"], ["pos_vec"], name="/pos/Gather"),
        helper.make_node("Add", ["x", "pos_vec"], ["h"], name="/Add_1"),
        helper.make_node("MatMul", ["h", "wq"], ["q0"], name="/q/MatMul"),
        helper.make_node("MatMul", ["h", "wk"], ["k0"], name="/k/MatMul"),
        helper.make_node("Reshape", ["q0", "heads_shape"], ["q1"], name="/q/Reshape"),
        helper.make_node("Reshape", ["k0", "heads_shape"], ["k1"], name="/k/Reshape"),
        helper.make_node("Transpose", ["q1"], ["q"], name="/q/Transpose", perm=[0, 2, 1, 3]),
        helper.make_node("Transpose", ["k1"], ["kt"], name="/k/Transpose", perm=[0, 2, 3, 1]),
        helper.make_node("MatMul", ["q", "kt"], ["scores"], name="/attn/MatMul"),
        helper.make_node("Unsqueeze", ["mask", "axis1"], ["m1"], name="/Unsqueeze_1"),
        helper.make_node("Unsqueeze", ["m1", "axis2"], ["m2"], name="/Unsqueeze_2"),
        helper.make_node("Add", ["scores", "bias"], ["masked"], name="/attn/Add"),
        helper.make_node("Softmax", ["masked"], ["probs"], name="/attn/Softmax", axis=-1),
        helper.make_node("MatMul", ["probs", "q"], ["y"], name="/attn/MatMul_1"),
    ]
    if not expand:
        nodes += [helper.make_node("Identity", ["pos_sliced"], ["pos"], name="/pos/Identity"),
                  helper.make_node("Cast", ["m2"], ["mf"], name="/Cast", to=TensorProto.FLOAT),
                  helper.make_node("Sub", ["f_one", "mf"], ["inv"], name="/Sub"),
                  helper.make_node("Mul", ["inv", "f_big"], ["bias"], name="/Mul")]
        return _model(nodes, inputs, [_output()], inits)
    inits += [_init("zero_f", np.array(0.0, np.float32)), _init("zero_scalar", np.array(0, np.int64)),
              _init("one_1d", np.array([1], np.int64))]
    nodes += [
        helper.make_node("Gather", ["x_shape", "zero_scalar"], ["batch_len"], name="/Gather_b", axis=0),
        helper.make_node("Unsqueeze", ["batch_len", "zero"], ["batch_1d"], name="/Unsqueeze_b"),
        helper.make_node("Concat", ["batch_1d", "seq_len"], ["bs_shape"], name="/Concat_bs", axis=0),
        helper.make_node("Expand", ["pos_sliced", "bs_shape"], ["pos"], name="/pos/Expand"),
        helper.make_node("Concat", ["batch_1d", "one_1d", "seq_len", "seq_len"], ["mask_shape"],
                         name="/mask/Concat", axis=0),
        helper.make_node("Expand", ["m2", "mask_shape"], ["m4"], name="/mask/Expand"),
        helper.make_node("Cast", ["m4"], ["m4b"], name="/mask/Cast", to=TensorProto.BOOL),
        helper.make_node("Where", ["m4b", "zero_f", "f_big"], ["bias"], name="/mask/Where"),
    ]
    return _model(nodes, inputs, [_output()], inits)


def paddle_unknown_dims() -> onnx.ModelProto:
    """paddle2onnx's spelling of unknown dims: ``dim_value: -1`` for the
    batch, a missing dim_value/dim_param for the height, a literal "?" for
    the width."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, 3, None, None])
    dims = x.type.tensor_type.shape.dim
    dims[0].dim_value = -1
    dims[2].Clear()
    dims[3].dim_param = "?"
    c1, w1 = _conv("conv", "x", "a", 3, 4, 5, stride=2)
    relu = helper.make_node("Relu", ["a"], ["y"], name="relu")
    return _model([c1, relu], [x], [_output()], [w1])


def shape_in_if_branch() -> onnx.ModelProto:
    """silero VAD's spox-generated pattern: an If whose branch takes the
    Shape (and Size) of an outer value whose rank the graph never states (no
    shape in its type): relaxpack takes it at run time."""
    state = helper.make_tensor_value_info("state", TensorProto.FLOAT, None)
    flag = helper.make_tensor_value_info("flag", TensorProto.BOOL, [])
    inits = [_init("zero_i", np.array([0], np.int64)), _init("flat", np.array([-1], np.int64))]
    then_nodes = [
        helper.make_node("Shape", ["state"], ["s_shape"], name="then/Shape"),
        helper.make_node("Gather", ["s_shape", "zero_i"], ["n"], name="then/Gather", axis=0),
        helper.make_node("Size", ["state"], ["size"], name="then/Size"),
        helper.make_node("Add", ["n", "size"], ["k"], name="then/Add"),
        helper.make_node("Cast", ["k"], ["kf"], name="then/Cast", to=TensorProto.FLOAT),
        helper.make_node("Reshape", ["state", "flat"], ["v"], name="then/Reshape"),
        helper.make_node("Mul", ["v", "kf"], ["out"], name="then/Mul"),
    ]
    else_nodes = [helper.make_node("Reshape", ["state", "flat"], ["v_e"], name="else/Reshape"),
                  helper.make_node("Neg", ["v_e"], ["out_e"], name="else/Neg")]
    then_graph = helper.make_graph(then_nodes, "then", [], [_output("out")])
    else_graph = helper.make_graph(else_nodes, "else", [], [_output("out_e")])
    node = helper.make_node("If", ["flag"], ["y"], name="/If", then_branch=then_graph, else_branch=else_graph)
    return _model([node], [state, flag], [_output()], inits)


def same_name_on_two_axes() -> onnx.ModelProto:
    """One dim_param name on height and width (exporters write "N" or "dynamic"
    for every unknown dim): onnxruntime does not hold them equal."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, "N", "N"])
    c1, w1 = _conv("conv", "x", "a", 3, 2, 6)
    red = helper.make_node("ReduceMean", ["a"], ["y"], name="mean", axes=[3], keepdims=0)
    return _model([c1, red], [x], [_output()], [w1])

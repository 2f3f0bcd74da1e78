"""Symbolic-dim patterns real exporters write, as small onnx.helper models.

Each builder returns ``(model, feeds)``: a ModelProto whose inputs have
symbolic dims only, and a function of the dims giving seeded inputs. The
shape arithmetic is spelled the way torch's exporters and transformers'
code spell it (Shape -> Gather -> arithmetic -> Unsqueeze -> Concat), so the
importer meets them as it would in a real model.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F, I64 = TensorProto.FLOAT, TensorProto.INT64
OPSET = 18


def _model(nodes, inputs, outputs, inits=None, opset=OPSET) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info(o, F, None) for o in outputs],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in (inits or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _x(name="x", dims=("b", "s", 4), elem=F):
    return helper.make_tensor_value_info(name, elem, list(dims))


def _n(op, inputs, outputs, **attrs):
    return helper.make_node(op, list(inputs), list(outputs), name=f"/{outputs[0]}", **attrs)


def _dim(src: str, axis: int, out: str) -> list:
    """``out`` = Shape(src)[axis] as a 1-element tensor (torch's Shape -> Gather -> Unsqueeze)."""
    return [_n("Shape", [src], [f"{out}_shape"]),
            _n("Gather", [f"{out}_shape", f"i{axis}"], [f"{out}_scalar"], axis=0),
            _n("Unsqueeze", [f"{out}_scalar", "ax0"], [out])]


_SHAPE_INITS = {**{f"i{k}": np.array(k, np.int64) for k in range(4)}, "ax0": np.array([0], np.int64),
                "one": np.array([1], np.int64), "two": np.array([2], np.int64), "zero": np.array([0], np.int64)}


def _normal(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def slice_from_shape():
    """x[:, 1 : s - 1] and x[:, -(s // 2):], the bounds computed from Shape."""
    nodes = [*_dim("x", 1, "s"),
             _n("Sub", ["s", "one"], ["end"]),
             _n("Slice", ["x", "one", "end", "one"], ["mid"]),
             _n("Div", ["s", "two"], ["half"]),
             _n("Neg", ["half"], ["neg_half"]),
             _n("Slice", ["x", "neg_half", "big", "one"], ["tail"]),
             _n("Relu", ["mid"], ["y"]), _n("Sigmoid", ["tail"], ["z"])]
    model = _model(nodes, [_x()], ["y", "z"], {**_SHAPE_INITS, "big": np.array([2 ** 62], np.int64)})
    return model, lambda b, s: {"x": _normal(b, s, 4)}


def range_then_gather():
    """Position ids: Range(0, seq) then Gather from a table, added to the input (BERT's embeddings)."""
    nodes = [_n("Shape", ["x"], ["x_shape"]),
             _n("Gather", ["x_shape", "i1"], ["seq"], axis=0),
             _n("Range", ["start", "seq", "step"], ["pos"]),
             _n("Gather", ["table", "pos"], ["pos_emb"], axis=0),
             _n("Add", ["x", "pos_emb"], ["y"])]
    inits = {**_SHAPE_INITS, "start": np.array(0, np.int64), "step": np.array(1, np.int64),
             "table": _normal(32, 4, seed=7)}
    return _model(nodes, [_x()], ["y"], inits), lambda b, s: {"x": _normal(b, s, 4)}


def constant_of_shape_from_concat():
    """A zero state (b, 4, s) from Concat of shape pieces, added to a transposed input."""
    nodes = [*_dim("x", 0, "b"), *_dim("x", 1, "s"),
             _n("Concat", ["b", "four", "s"], ["state_shape"], axis=0),
             _n("ConstantOfShape", ["state_shape"], ["state"],
                value=numpy_helper.from_array(np.array([0.5], np.float32))),
             _n("Transpose", ["x"], ["xt"], perm=[0, 2, 1]),
             _n("Add", ["state", "xt"], ["y"])]
    model = _model(nodes, [_x()], ["y"], {**_SHAPE_INITS, "four": np.array([4], np.int64)})
    return model, lambda b, s: {"x": _normal(b, s, 4)}


def where_broadcasting_unknown_dims():
    """Where(mask (b, 1, 1, s), scores (b, h, s, s), fill): an attention mask of another input."""
    mask = helper.make_tensor_value_info("mask", TensorProto.BOOL, ["b", 1, 1, "s"])
    scores = helper.make_tensor_value_info("scores", F, ["b", "h", "q", "s"])
    nodes = [_n("Where", ["mask", "scores", "fill"], ["masked"]),
             _n("Softmax", ["masked"], ["y"], axis=-1)]
    model = _model(nodes, [mask, scores], ["y"], {"fill": np.array(-1e4, np.float32)})

    def feeds(b, s):
        rng = np.random.default_rng(b * 100 + s)
        m = rng.random((b, 1, 1, s)) < 0.7
        m[..., 0] = True
        return {"mask": m, "scores": _normal(b, 2, s, s, seed=s)}
    return model, feeds


def tile_symbolic_repeats():
    """A learned (1, 4) token tiled to the batch: Tile(cls, Concat(b, 1))."""
    nodes = [*_dim("x", 0, "b"), _n("Concat", ["b", "one"], ["reps"], axis=0),
             _n("Tile", ["cls", "reps"], ["tiled"]),
             _n("Unsqueeze", ["tiled", "one"], ["tok"]),
             _n("Concat", ["tok", "x"], ["y"], axis=1)]
    model = _model(nodes, [_x()], ["y"], {**_SHAPE_INITS, "cls": _normal(1, 4, seed=3)})
    return model, lambda b, s: {"x": _normal(b, s, 4)}


def pad_symbolic_pads():
    """Pad the sequence to a multiple of 4: pads = (4 - s % 4) % 4 at its end (Swin's window padding)."""
    nodes = [*_dim("x", 1, "s"),
             _n("Mod", ["s", "four"], ["r"]),
             _n("Sub", ["four", "r"], ["p4"]),
             _n("Mod", ["p4", "four"], ["p"]),
             _n("Concat", ["zero", "zero", "zero", "zero", "p", "zero"], ["pads"], axis=0),
             _n("Pad", ["x", "pads"], ["padded"]),
             _n("Mul", ["padded", "twof"], ["y"])]
    model = _model(nodes, [_x()], ["y"], {**_SHAPE_INITS, "four": np.array([4], np.int64),
                                          "twof": np.array(2.0, np.float32)})
    return model, lambda b, s: {"x": _normal(b, s, 4)}


def resize_sizes_from_shape():
    """Resize to sizes (n, c, 2h, 2w) computed from Shape (a U-Net decoder's upsample)."""
    x = helper.make_tensor_value_info("x", F, ["n", 3, "h", "w"])
    nodes = [_n("Shape", ["x"], ["x_shape"]),
             _n("Slice", ["x_shape", "zero", "two", "zero"], ["nc"]),
             _n("Slice", ["x_shape", "two", "four", "zero"], ["hw"]),
             _n("Mul", ["hw", "two"], ["hw2"]),
             _n("Concat", ["nc", "hw2"], ["sizes"], axis=0),
             _n("Resize", ["x", "", "", "sizes"], ["up"], mode="nearest"),
             _n("Relu", ["up"], ["y"])]
    model = _model(nodes, [x], ["y"], {**_SHAPE_INITS, "four": np.array([4], np.int64)})
    return model, lambda b, s: {"x": _normal(b, 3, s, s + 1)}


def topk_k_from_shape():
    """TopK with k = s // 2 (+ 1), computed from the input's Shape."""
    nodes = [*_dim("x", 1, "s"),
             _n("Div", ["s", "two"], ["half"]),
             _n("Add", ["half", "one"], ["k"]),
             _n("TopK", ["x", "k"], ["vals", "idx"], axis=1),
             _n("Cast", ["idx"], ["idx_f"], to=F),
             _n("Add", ["vals", "idx_f"], ["y"])]
    return _model(nodes, [_x()], ["y"], _SHAPE_INITS), lambda b, s: {"x": _normal(b, s, 4)}


def nonzero_then_gather():
    """NonZero of a mask, then GatherND and Reshape of what it selects (a data-dependent count)."""
    nodes = [_n("Greater", ["x", "zerof"], ["pos"]),
             _n("NonZero", ["pos"], ["nz"]),
             _n("Transpose", ["nz"], ["nz_t"], perm=[1, 0]),
             _n("GatherND", ["x", "nz_t"], ["picked"]),
             _n("Reshape", ["picked", "flat"], ["flat_picked"]),
             _n("ReduceSum", ["flat_picked"], ["y"], keepdims=1),
             _n("Shape", ["flat_picked"], ["count"]),
             _n("Cast", ["count"], ["z"], to=F)]
    model = _model(nodes, [_x()], ["y", "z"], {"zerof": np.array(0.0, np.float32),
                                                "flat": np.array([-1], np.int64)})
    return model, lambda b, s: {"x": _normal(b, s, 4)}


def split_sizes_from_shape():
    """Split the sequence into (s - 2, 2) with sizes from Shape (a sliding-window tail)."""
    nodes = [*_dim("x", 1, "s"),
             _n("Sub", ["s", "two"], ["head"]),
             _n("Concat", ["head", "two"], ["sizes"], axis=0),
             _n("Split", ["x", "sizes"], ["first", "last"], axis=1),
             _n("Neg", ["first"], ["y"]), _n("Abs", ["last"], ["z"])]
    return _model(nodes, [_x()], ["y", "z"], _SHAPE_INITS), lambda b, s: {"x": _normal(b, s, 4)}


def squeeze_unsqueeze_axes_inputs():
    """Unsqueeze at the last axis computed as Size(Shape(x)), then Squeeze it away again."""
    nodes = [_n("Shape", ["x"], ["x_shape"]),
             _n("Size", ["x_shape"], ["rank"]),
             _n("Unsqueeze", ["rank", "ax0"], ["last"]),
             _n("Unsqueeze", ["x", "last"], ["x4"]),
             _n("Mul", ["x4", "col"], ["m"]),
             _n("Squeeze", ["m", "neg1"], ["y"])]
    model = _model(nodes, [_x()], ["y"], {**_SHAPE_INITS, "col": np.array([[2.0]], np.float32),
                                          "neg1": np.array([-1], np.int64)})
    return model, lambda b, s: {"x": _normal(b, s, 4)}


def cumsum_symbolic_axis():
    """CumSum over axis = rank - 2, computed from Shape (the sequence axis)."""
    nodes = [_n("Shape", ["x"], ["x_shape"]),
             _n("Size", ["x_shape"], ["rank"]),
             _n("Sub", ["rank", "i2"], ["axis"]),
             _n("CumSum", ["x", "axis"], ["y"]),
             _n("CumSum", ["x", "i1"], ["z"], reverse=1)]
    return _model(nodes, [_x()], ["y", "z"], _SHAPE_INITS), lambda b, s: {"x": _normal(b, s, 4)}


def attention_with_past():
    """Decoder attention with a KV cache: past (b, 2, p, 4) may be empty (p = 0); the
    causal mask comes from the lengths (Shape of past and of the new keys)."""
    inputs = [_x("q", ("b", 2, "s", 4)), _x("k", ("b", 2, "s", 4)), _x("v", ("b", 2, "s", 4)),
              _x("past_k", ("b", 2, "p", 4)), _x("past_v", ("b", 2, "p", 4))]
    nodes = [_n("Concat", ["past_k", "k"], ["keys"], axis=2),
             _n("Concat", ["past_v", "v"], ["values"], axis=2),
             _n("Transpose", ["keys"], ["keys_t"], perm=[0, 1, 3, 2]),
             _n("MatMul", ["q", "keys_t"], ["raw"]),
             _n("Mul", ["raw", "scale"], ["scores"]),
             # causal mask: query i (at position p + i) sees keys j <= p + i
             *_dim("keys", 2, "total"), *_dim("q", 2, "sq"),
             _n("Sub", ["total", "sq"], ["past_len_1d"]),
             _n("Squeeze", ["past_len_1d", "ax0"], ["past_len"]),
             _n("Concat", ["sq", "total"], ["mask_shape"], axis=0),
             _n("ConstantOfShape", ["mask_shape"], ["ones"],
                value=numpy_helper.from_array(np.array([1.0], np.float32))),
             _n("Trilu", ["ones", "past_len"], ["tri"], upper=0),
             _n("Equal", ["tri", "zerof"], ["hidden"]),
             _n("Where", ["hidden", "neg", "scores"], ["masked"]),
             _n("Softmax", ["masked"], ["probs"], axis=-1),
             _n("MatMul", ["probs", "values"], ["y"]),
             _n("Identity", ["keys"], ["present_k"])]
    inits = {**_SHAPE_INITS, "scale": np.array(0.5, np.float32), "zerof": np.array(0.0, np.float32),
             "neg": np.array(-1e9, np.float32)}
    model = _model(nodes, inputs, ["y", "present_k"], inits)

    def feeds(b, s, p):
        return {"q": _normal(b, 2, s, 4, seed=1), "k": _normal(b, 2, s, 4, seed=2), "v": _normal(b, 2, s, 4, seed=3),
                "past_k": _normal(b, 2, p, 4, seed=4), "past_v": _normal(b, 2, p, 4, seed=5)}
    return model, feeds


# ---------------------------------------------------------------- the same patterns, their results meeting the inputs again


def roll_by_slices():
    """Rotate the sequence by k = s // 3: Concat(x[:, k:], x[:, :k]), added to x
    ((s - s // 3) + s // 3 must be s)."""
    nodes = [*_dim("x", 1, "s"),
             _n("Div", ["s", "three"], ["k"]),
             _n("Slice", ["x", "k", "big", "one"], ["right"]),
             _n("Slice", ["x", "zero", "k", "one"], ["left"]),
             _n("Concat", ["right", "left"], ["rolled"], axis=1),
             _n("Add", ["rolled", "x"], ["y"])]
    inits = {**_SHAPE_INITS, "three": np.array([3], np.int64), "big": np.array([2 ** 62], np.int64)}
    return _model(nodes, [_x()], ["y"], inits), lambda b, s: {"x": _normal(b, s, 4)}


def gpt2_positions_after_past():
    """GPT-2's position ids Range(p, p + s) from the past's Shape, gathered from a table and
    added to the hidden states; the attention mask input spans p + s under a name of its own."""
    inputs = [_x("h", ("b", "s", 4)), _x("past", ("b", 2, "p", 4)),
              helper.make_tensor_value_info("mask", I64, ["b", "total"])]
    nodes = [_n("Shape", ["past"], ["past_shape"]),
             _n("Gather", ["past_shape", "i2"], ["p"], axis=0),
             _n("Shape", ["h"], ["h_shape"]),
             _n("Gather", ["h_shape", "i1"], ["s"], axis=0),
             _n("Add", ["p", "s"], ["end"]),
             _n("Range", ["p", "end", "step"], ["pos"]),
             _n("Gather", ["wpe", "pos"], ["pos_emb"], axis=0),
             _n("Add", ["h", "pos_emb"], ["hidden"]),
             # the mask's last s columns are the new tokens': Slice(mask, p, p + s) (total must be p + s)
             _n("Unsqueeze", ["p", "ax0"], ["p1"]), _n("Unsqueeze", ["end", "ax0"], ["end1"]),
             _n("Slice", ["mask", "p1", "end1", "one"], ["new_mask"]),
             _n("Cast", ["new_mask"], ["mask_f"], to=F),
             _n("Unsqueeze", ["mask_f", "two"], ["mask_3d"]),
             _n("Mul", ["hidden", "mask_3d"], ["y"])]
    inits = {**_SHAPE_INITS, "step": np.array(1, np.int64), "wpe": _normal(32, 4, seed=9)}
    model = _model(nodes, inputs, ["y"], inits)

    def feeds(b, s, p):
        mask = np.ones((b, p + s), np.int64)
        if mask.size:
            mask[:, -1] = 0
        return {"h": _normal(b, s, 4), "past": _normal(b, 2, p, 4, seed=1), "mask": mask}
    return model, feeds


def window_partition_after_pad():
    """Swin's window partition: pad the sequence to a multiple of 4, Reshape to (b, -1, 4, 4),
    a computation per window, Reshape back and Slice the padding off, add the input."""
    nodes = [*_dim("x", 0, "b"), *_dim("x", 1, "s"),
             _n("Mod", ["s", "four"], ["r"]), _n("Sub", ["four", "r"], ["p4"]), _n("Mod", ["p4", "four"], ["p"]),
             _n("Concat", ["zero", "zero", "zero", "zero", "p", "zero"], ["pads"], axis=0),
             _n("Pad", ["x", "pads"], ["padded"]),
             _n("Concat", ["b", "neg1", "four", "four"], ["win_shape"], axis=0),
             _n("Reshape", ["padded", "win_shape"], ["windows"]),
             _n("Softmax", ["windows"], ["win_soft"], axis=2),
             _n("Shape", ["padded"], ["padded_shape"]),
             _n("Reshape", ["win_soft", "padded_shape"], ["merged"]),
             _n("Slice", ["merged", "zero", "s", "one"], ["unpadded"]),
             _n("Add", ["unpadded", "x"], ["y"])]
    inits = {**_SHAPE_INITS, "four": np.array([4], np.int64), "neg1": np.array([-1], np.int64)}
    return _model(nodes, [_x()], ["y"], inits), lambda b, s: {"x": _normal(b, s, 4)}


def resize_to_skip_then_concat():
    """A decoder upsamples to the skip connection's own size (sizes = Shape(skip)), then
    concatenates with it along the channels."""
    x = helper.make_tensor_value_info("x", F, ["n", 3, "h", "w"])
    skip = helper.make_tensor_value_info("skip", F, ["n", 2, "H", "W"])
    nodes = [_n("Shape", ["skip"], ["skip_shape"]),
             _n("Slice", ["skip_shape", "two", "four", "zero"], ["hw"]),
             _n("Shape", ["x"], ["x_shape"]),
             _n("Slice", ["x_shape", "zero", "two", "zero"], ["nc"]),
             _n("Concat", ["nc", "hw"], ["sizes"], axis=0),
             _n("Resize", ["x", "", "", "sizes"], ["up"], mode="linear"),
             _n("Concat", ["up", "skip"], ["y"], axis=1)]
    model = _model(nodes, [x, skip], ["y"], {**_SHAPE_INITS, "four": np.array([4], np.int64)})
    return model, lambda b, s: {"x": _normal(b, 3, s, s + 2), "skip": _normal(b, 2, 2 * s + 1, s, seed=1)}


def topk_indices_gather_other():
    """TopK over the sequence with k = min(s, 3), its indices gathering rows of another input."""
    inputs = [_x(), _x("other", ("b", "s", 6))]
    nodes = [*_dim("x", 1, "s"),
             _n("Min", ["s", "three"], ["k"]),
             _n("ReduceSum", ["x", "two"], ["score"], keepdims=0),
             _n("TopK", ["score", "k"], ["vals", "idx"], axis=1),
             _n("Unsqueeze", ["idx", "two"], ["idx3"]),
             _n("Expand", ["idx3", "expand_to"], ["idx_e"]),
             _n("Shape", ["idx3"], ["idx_shape"]),
             _n("GatherElements", ["other", "idx_e"], ["picked"], axis=1),
             _n("ReduceMax", ["picked", "two"], ["y"], keepdims=0)]
    inits = {**_SHAPE_INITS, "three": np.array([3], np.int64), "expand_to": np.array([1, 1, 6], np.int64)}
    model = _model(nodes, inputs, ["y"], inits)
    return model, lambda b, s: {"x": _normal(b, s, 4), "other": _normal(b, s, 6, seed=2)}


def split_then_concat_back():
    """Split into sizes (s - 2, 2) from Shape, swap the parts and concatenate, add the input."""
    nodes = [*_dim("x", 1, "s"), _n("Sub", ["s", "two"], ["head"]),
             _n("Concat", ["head", "two"], ["sizes"], axis=0),
             _n("Split", ["x", "sizes"], ["first", "last"], axis=1),
             _n("Concat", ["last", "first"], ["swapped"], axis=1),
             _n("Add", ["swapped", "x"], ["y"])]
    return _model(nodes, [_x()], ["y"], _SHAPE_INITS), lambda b, s: {"x": _normal(b, s, 4)}


def expand_to_other_shape():
    """A per-sequence bias (b, 1, s) from a mask, Expanded to Shape(scores) and added to it."""
    inputs = [helper.make_tensor_value_info("mask", I64, ["b", "s"]), _x("scores", ("b", "t", "s"))]
    nodes = [_n("Unsqueeze", ["mask", "one"], ["m3"]),
             _n("Cast", ["m3"], ["mf"], to=F),
             _n("Sub", ["onef", "mf"], ["inv"]),
             _n("Mul", ["inv", "neg"], ["bias"]),
             _n("Shape", ["scores"], ["sc_shape"]),
             _n("Expand", ["bias", "sc_shape"], ["bias_full"]),
             _n("Add", ["scores", "bias_full"], ["masked"]),
             _n("Softmax", ["masked"], ["y"], axis=-1)]
    inits = {**_SHAPE_INITS, "onef": np.array(1.0, np.float32), "neg": np.array(-1e4, np.float32)}
    model = _model(nodes, inputs, ["y"], inits)

    def feeds(b, s):
        m = (np.random.default_rng(s).random((b, s)) < 0.7).astype(np.int64)
        if m.size:
            m[:, 0] = 1
        return {"mask": m, "scores": _normal(b, 3, s)}
    return model, feeds


def pad_to_stride_then_conv():
    """Detection models pad the image to a multiple of 32 with pads from Shape (mmdet,
    PP-OCR), then convolve: the conv needs the channels, which the Pad does not touch."""
    x = helper.make_tensor_value_info("x", F, ["n", 3, "h", "w"])
    nodes = [*_dim("x", 2, "h"), *_dim("x", 3, "w"),
             _n("Mod", ["h", "stride"], ["rh"]), _n("Sub", ["stride", "rh"], ["ph0"]), _n("Mod", ["ph0", "stride"], ["ph"]),
             _n("Mod", ["w", "stride"], ["rw"]), _n("Sub", ["stride", "rw"], ["pw0"]), _n("Mod", ["pw0", "stride"], ["pw"]),
             _n("Concat", ["zero", "zero", "zero", "zero", "zero", "zero", "ph", "pw"], ["pads"], axis=0),
             _n("Pad", ["x", "pads"], ["padded"]),
             _n("Conv", ["padded", "weight"], ["conv"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             _n("Relu", ["conv"], ["y"])]
    inits = {**_SHAPE_INITS, "stride": np.array([8], np.int64), "weight": _normal(4, 3, 3, 3, seed=4) * 0.3}
    return _model(nodes, [x], ["y"], inits), lambda b, s: {"x": _normal(b, 3, s, s + 3)}


def tile_then_matmul():
    """Repeat a (1, 4) query for every batch row with repeats from Shape, then project it."""
    nodes = [*_dim("x", 0, "b"), _n("Concat", ["b", "one"], ["reps"], axis=0),
             _n("Tile", ["query", "reps"], ["q"]),
             _n("MatMul", ["q", "proj"], ["qp"]),
             _n("Unsqueeze", ["qp", "one"], ["q3"]),
             _n("Add", ["x", "q3"], ["y"])]
    inits = {**_SHAPE_INITS, "query": _normal(1, 4, seed=5), "proj": _normal(4, 4, seed=6)}
    return _model(nodes, [_x()], ["y"], inits), lambda b, s: {"x": _normal(b, s, 4)}


def hf_causal_mask_with_past():
    """transformers' 4-D causal mask for a decoder with a cache: Range over the total length
    (past + new, from Shape), compared with Range(s) + past, Expanded to (b, 1, s, total)
    from a Concat of shape pieces and combined with the 2-D attention mask input, whose
    length has a name of its own; then applied to scores q @ keys^T."""
    inputs = [_x("q", ("b", 2, "s", 4)), _x("past_k", ("b", 2, "p", 4)), _x("k", ("b", 2, "s", 4)),
              helper.make_tensor_value_info("attention_mask", I64, ["b", "total"])]
    nodes = [_n("Concat", ["past_k", "k"], ["keys"], axis=2),
             _n("Transpose", ["keys"], ["keys_t"], perm=[0, 1, 3, 2]),
             _n("MatMul", ["q", "keys_t"], ["scores"]),
             _n("Shape", ["past_k"], ["pk_shape"]), _n("Gather", ["pk_shape", "i2"], ["past"], axis=0),
             _n("Shape", ["q"], ["q_shape"]), _n("Gather", ["q_shape", "i2"], ["s"], axis=0),
             _n("Gather", ["q_shape", "i0"], ["b"], axis=0),
             _n("Add", ["past", "s"], ["total"]),
             _n("Range", ["start", "total", "step"], ["cols"]),
             _n("Range", ["start", "s", "step"], ["rows0"]),
             _n("Add", ["rows0", "past"], ["rows"]),
             _n("Unsqueeze", ["rows", "one"], ["rows_col"]),
             _n("Greater", ["cols", "rows_col"], ["future"]),          # (s, total)
             _n("Cast", ["future"], ["future_f"], to=F),
             _n("Mul", ["future_f", "minf"], ["causal"]),
             _n("Unsqueeze", ["b", "ax0"], ["b1"]), _n("Unsqueeze", ["s", "ax0"], ["s1"]),
             _n("Unsqueeze", ["total", "ax0"], ["t1"]),
             _n("Concat", ["b1", "one", "s1", "t1"], ["mask_shape"], axis=0),
             _n("Expand", ["causal", "mask_shape"], ["causal4"]),
             _n("Unsqueeze", ["attention_mask", "ax12"], ["am4"]),      # (b, 1, 1, total)
             _n("Cast", ["am4"], ["am4f"], to=F),
             _n("Sub", ["onef", "am4f"], ["inv"]),
             _n("Mul", ["inv", "minf"], ["pad_bias"]),
             _n("Add", ["causal4", "pad_bias"], ["bias"]),
             _n("Add", ["scores", "bias"], ["masked"]),
             _n("Softmax", ["masked"], ["y"], axis=-1)]
    inits = {**_SHAPE_INITS, "start": np.array(0, np.int64), "step": np.array(1, np.int64),
             "minf": np.array(-1e4, np.float32), "onef": np.array(1.0, np.float32),
             "ax12": np.array([1, 2], np.int64)}
    model = _model(nodes, inputs, ["y"], inits)

    def feeds(b, s, p):
        mask = np.ones((b, p + s), np.int64)
        if mask.size and p + s > 1:
            mask[0, 0] = 0
        return {"q": _normal(b, 2, s, 4, seed=1), "past_k": _normal(b, 2, p, 4, seed=2),
                "k": _normal(b, 2, s, 4, seed=3), "attention_mask": mask}
    return model, feeds


def channel_shuffle_after_strided_conv():
    """torch.export's ShuffleNet: a stride-2 conv, then a channel shuffle whose view sizes are
    ``(h - 1) / 2 + 1`` with ONNX's truncating Div (a floor once ``h >= 1``)."""
    x = helper.make_tensor_value_info("x", F, ["n", 3, "h", "w"])

    def out_size(axis, name):
        return [*_dim("x", axis, f"{name}_in"), _n("Sub", [f"{name}_in", "one"], [f"{name}_m1"]),
                _n("Div", [f"{name}_m1", "two"], [f"{name}_q"]), _n("Add", [f"{name}_q", "one"], [name])]
    nodes = [_n("Conv", ["x", "weight"], ["conv"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             *_dim("x", 0, "n"), *out_size(2, "oh"), *out_size(3, "ow"),
             _n("Concat", ["n", "two", "two", "oh", "ow"], ["grouped"], axis=0),
             _n("Reshape", ["conv", "grouped"], ["view"]),
             _n("Transpose", ["view"], ["swapped"], perm=[0, 2, 1, 3, 4]),
             _n("Concat", ["n", "four", "oh", "ow"], ["flat"], axis=0),
             _n("Reshape", ["swapped", "flat"], ["y"])]
    inits = {**_SHAPE_INITS, "four": np.array([4], np.int64), "weight": _normal(4, 3, 3, 3, seed=7) * 0.3}
    return _model(nodes, [x], ["y"], inits), lambda b, s: {"x": _normal(b, 3, s, s + 2)}


def truncating_div_of_a_negative_size():
    """``(s - 3) / 2 + 1`` as a length: below ``s = 3`` the truncation is not a floor
    (``s = 2`` gives 1, not 0), so the import keeps the Div as it is."""
    nodes = [*_dim("x", 1, "s"), _n("Sub", ["s", "three"], ["m"]), _n("Div", ["m", "two"], ["q"]),
             _n("Add", ["q", "one"], ["length"]),
             _n("ConstantOfShape", ["length"], ["ones"], value=helper.make_tensor("v", F, [1], [1.0])),
             _n("ReduceSum", ["x", "one"], ["rows"], keepdims=0),
             _n("ReduceSum", ["ones"], ["count"], keepdims=1),
             _n("Mul", ["rows", "count"], ["y"])]
    inits = {**_SHAPE_INITS, "three": np.array([3], np.int64)}
    return _model(nodes, [_x()], ["y"], inits), lambda b, s: {"x": _normal(b, s, 4)}

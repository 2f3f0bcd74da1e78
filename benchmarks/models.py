"""The suite's models, built with ``onnx.helper`` from seeded random weights.

Every generator takes ``size``: ``"smoke"`` (tiny, for CI) or ``"full"`` (the
real table), and returns a :class:`Benchmark`: the model, the dims relaxpack
imports it with, and one :class:`Setting` per row of the results table (the
concrete dims and the inputs for them).

>>> bench = MODELS["bert"]("smoke")
>>> [s.label for s in bench.settings]
['seq 8', 'seq 16']
>>> sorted(bench.settings[0].feeds(0))
['attention_mask', 'input_ids']

The graphs follow what the exporters emit (torch's for the networks,
skl2onnx's for the tree ensemble): batch norm kept apart from the conv,
reshape targets computed from ``Shape``, GELU spelled with ``Erf`` or
``Tanh``, ReLU6 as ``Clip``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
ML_OPSET = 3
SIZES = ("smoke", "full")

FLOAT, INT64 = TensorProto.FLOAT, TensorProto.INT64


@dataclass
class Setting:
    """One row of the table: a label, the value of each symbolic dim, the inputs."""

    label: str
    dims: dict[str, int]
    make_feeds: Callable[[np.random.Generator], dict[str, np.ndarray]] = field(repr=False)

    def feeds(self, seed: int = 0) -> dict[str, np.ndarray]:
        return self.make_feeds(np.random.default_rng(seed))

    def input_shapes(self, seed: int = 0) -> str:
        return ", ".join(f"{k} {list(v.shape)}" for k, v in self.feeds(seed).items())


@dataclass
class Benchmark:
    """A model of the suite and the settings it is timed at."""

    name: str
    model: onnx.ModelProto
    import_dims: dict[str, int | tuple[int, int]]      # relaxpack.from_onnx(model, dims=...)
    settings: list[Setting]
    description: str = ""


class _Builder:
    """Nodes, initializers and fresh names for one graph."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def fresh(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def const(self, array, base: str = "c") -> str:
        name = self.fresh(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def ints(self, *values: int) -> str:
        return self.const(np.array(values, np.int64), "shape")

    def weight(self, *shape: int, scale: float | None = None, base: str = "w") -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        scale = 1.0 / np.sqrt(fan_in) if scale is None else scale
        return self.const((scale * self.rng.standard_normal(shape)).astype(np.float32), base)

    def op(self, op_type: str, *inputs: str, n_out: int = 1, domain: str = "", out: str | None = None, **attrs):
        outs = [out] if out else [self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=f"/{outs[0]}/{op_type}",
                                           domain=domain, **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, name: str, inputs, outputs, ml: bool = False) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid("ai.onnx.ml", ML_OPSET)] if ml else [])
        model = helper.make_model(graph, opset_imports=opsets, ir_version=8, producer_name="benchmarks.models")
        onnx.checker.check_model(model)
        return model

    # ---------------------------------------------------------------- layers
    def conv(self, x: str, c_in: int, c_out: int, k: int, stride: int = 1, group: int = 1,
             bias: bool = True) -> str:
        inputs = [x, self.weight(c_out, c_in // group, k, k)]
        if bias:
            inputs.append(self.weight(c_out, scale=0.1, base="b"))
        return self.op("Conv", *inputs, kernel_shape=[k, k], strides=[stride, stride],
                       pads=[k // 2] * 4, group=group)

    def batch_norm(self, x: str, c: int) -> str:
        r = self.rng
        stats = [(1 + 0.1 * r.standard_normal(c)), 0.1 * r.standard_normal(c), 0.1 * r.standard_normal(c),
                 1 + 0.1 * r.random(c)]
        return self.op("BatchNormalization", x, *(self.const(s.astype(np.float32), "bn") for s in stats),
                       epsilon=1e-5)

    def linear(self, x: str, n_in: int, n_out: int) -> str:
        return self.op("Add", self.op("MatMul", x, self.weight(n_in, n_out)), self.weight(n_out, scale=0.02))

    def gemm(self, x: str, n_in: int, n_out: int, out: str | None = None) -> str:
        return self.op("Gemm", x, self.weight(n_out, n_in), self.weight(n_out, scale=0.1), transB=1, out=out)

    def layer_norm(self, x: str, d: int, out: str | None = None) -> str:
        gamma = (1 + 0.1 * self.rng.standard_normal(d)).astype(np.float32)
        beta = (0.1 * self.rng.standard_normal(d)).astype(np.float32)
        return self.op("LayerNormalization", x, self.const(gamma, "ln_g"), self.const(beta, "ln_b"),
                       axis=-1, epsilon=1e-5, out=out)

    def dim(self, x: str, axis: int) -> str:
        """``x.shape[axis]`` as a 1-element int64 tensor (Shape -> Gather -> Unsqueeze)."""
        scalar = self.op("Gather", self.op("Shape", x), self.const(np.array(axis, np.int64), "axis"), axis=0)
        return self.op("Unsqueeze", scalar, self.ints(0))


def _value(name: str, elem: int, shape) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, elem, shape)


def _normal(shapes: Mapping[str, tuple]) -> Callable[[np.random.Generator], dict]:
    return lambda rng: {k: rng.standard_normal(s).astype(np.float32) for k, s in shapes.items()}


def _pick(size: str, smoke, full):
    if size not in SIZES:
        raise ValueError(f"size must be one of {SIZES}, not {size!r}")
    return smoke if size == "smoke" else full


def _image_settings(name: str, c: int, hw: int) -> list[Setting]:
    return [Setting(f"1x{c}x{hw}x{hw}", {"batch": 1}, _normal({name: (1, c, hw, hw)}))]


# -------------------------------------------------------------------- CNNs
def resnet18(size: str = "full", seed: int = 0) -> Benchmark:
    """ResNet-18: BasicBlocks (2, 2, 2, 2) with batch norm; 224x224 (smoke: 32x32, narrow)."""
    hw, widths, classes = _pick(size, (32, (8, 8, 16, 16), 10), (224, (64, 128, 256, 512), 1000))
    g = _Builder(seed)
    relu = lambda v: g.op("Relu", v)  # noqa: E731
    x = relu(g.batch_norm(g.conv("input", 3, widths[0], 7, 2, bias=False), widths[0]))
    x = g.op("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c_in = widths[0]
    for stage, c in enumerate(widths):
        for block in range(2):
            stride = 2 if stage > 0 and block == 0 else 1
            y = relu(g.batch_norm(g.conv(x, c_in, c, 3, stride, bias=False), c))
            y = g.batch_norm(g.conv(y, c, c, 3, bias=False), c)
            if stride != 1 or c_in != c:
                x = g.batch_norm(g.conv(x, c_in, c, 1, stride, bias=False), c)
            x, c_in = relu(g.op("Add", y, x)), c
    x = g.op("Flatten", g.op("GlobalAveragePool", x), axis=1)
    g.gemm(x, c_in, classes, out="logits")
    model = g.model("resnet18", [_value("input", FLOAT, ["batch", 3, hw, hw])],
                    [_value("logits", FLOAT, ["batch", classes])])
    return Benchmark("resnet18", model, {"batch": (1, 8)}, _image_settings("input", 3, hw),
                     f"ResNet-18, {hw}x{hw}, widths {widths}, separate BatchNormalization")


def resnet50(size: str = "full", seed: int = 0) -> Benchmark:
    """ResNet-50: Bottleneck blocks (3, 4, 6, 3), expansion 4, batch norm; 224x224 (smoke: 32x32,
    narrow). 25.6 M parameters: the size the convert-time target is stated for."""
    hw, widths, classes = _pick(size, (32, (4, 4, 8, 8), 10), (224, (64, 128, 256, 512), 1000))
    g = _Builder(seed)
    relu = lambda v: g.op("Relu", v)  # noqa: E731
    x = relu(g.batch_norm(g.conv("input", 3, widths[0], 7, 2, bias=False), widths[0]))
    x = g.op("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    c_in = widths[0]
    for stage, (c, blocks) in enumerate(zip(widths, (3, 4, 6, 3))):
        for block in range(blocks):
            stride = 2 if stage > 0 and block == 0 else 1
            y = relu(g.batch_norm(g.conv(x, c_in, c, 1, bias=False), c))
            y = relu(g.batch_norm(g.conv(y, c, c, 3, stride, bias=False), c))
            y = g.batch_norm(g.conv(y, c, 4 * c, 1, bias=False), 4 * c)
            if stride != 1 or c_in != 4 * c:
                x = g.batch_norm(g.conv(x, c_in, 4 * c, 1, stride, bias=False), 4 * c)
            x, c_in = relu(g.op("Add", y, x)), 4 * c
    x = g.op("Flatten", g.op("GlobalAveragePool", x), axis=1)
    g.gemm(x, c_in, classes, out="logits")
    model = g.model("resnet50", [_value("input", FLOAT, ["batch", 3, hw, hw])],
                    [_value("logits", FLOAT, ["batch", classes])])
    return Benchmark("resnet50", model, {"batch": (1, 8)}, _image_settings("input", 3, hw),
                     f"ResNet-50, {hw}x{hw}, bottleneck widths {widths} x4, separate BatchNormalization")


def mobilenetv2(size: str = "full", seed: int = 0) -> Benchmark:
    """MobileNetV2: inverted residuals with depthwise convs, ReLU6 as Clip; 224x224."""
    hw, width = _pick(size, (32, 0.25), (224, 1.0))
    blocks = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
              (6, 320, 1, 1)]
    if size == "smoke":
        blocks = [(t, c, 1, s) for t, c, _, s in blocks]
    scaled = lambda c: max(8, int(c * width + 4) // 8 * 8)  # noqa: E731
    g = _Builder(seed)
    lo, hi = g.const(np.array(0, np.float32), "zero"), g.const(np.array(6, np.float32), "six")

    def conv_bn(v, c_in, c_out, k, stride=1, group=1, act=True):
        v = g.batch_norm(g.conv(v, c_in, c_out, k, stride, group, bias=False), c_out)
        return g.op("Clip", v, lo, hi) if act else v

    c_in = scaled(32)
    x = conv_bn("input", 3, c_in, 3, 2)
    for t, c, n, s in blocks:
        c_out = scaled(c)
        for i in range(n):
            stride = s if i == 0 else 1
            hidden = c_in * t
            y = conv_bn(x, c_in, hidden, 1) if t != 1 else x
            y = conv_bn(y, hidden, hidden, 3, stride, group=hidden)
            y = conv_bn(y, hidden, c_out, 1, act=False)
            x = g.op("Add", x, y) if stride == 1 and c_in == c_out else y
            c_in = c_out
    last = 1280 if width <= 1.0 else scaled(1280)
    x = conv_bn(x, c_in, last, 1)
    x = g.op("Flatten", g.op("GlobalAveragePool", x), axis=1)
    classes = _pick(size, 10, 1000)
    g.gemm(x, last, classes, out="logits")
    model = g.model("mobilenetv2", [_value("input", FLOAT, ["batch", 3, hw, hw])],
                    [_value("logits", FLOAT, ["batch", classes])])
    return Benchmark("mobilenetv2", model, {"batch": (1, 8)}, _image_settings("input", 3, hw),
                     f"MobileNetV2, width {width}, {hw}x{hw}, depthwise convs, Clip(0, 6)")


def unet(size: str = "full", seed: int = 0) -> Benchmark:
    """UNet (symbolic batch, height, width in the model): MaxPool down; up by ConvTranspose and by Resize
    (nearest and linear, alternating) then a 1x1 conv; skip connections by Concat."""
    hw, base, depth = _pick(size, (32, 4, 3), (256, 16, 4))
    g = _Builder(seed)

    def double_conv(v, c_in, c_out):
        v = g.op("Relu", g.batch_norm(g.conv(v, c_in, c_out, 3, bias=False), c_out))
        return g.op("Relu", g.batch_norm(g.conv(v, c_out, c_out, 3, bias=False), c_out))

    skips, x, c_in = [], "input", 3
    for level in range(depth):
        c = base * 2 ** level
        x = double_conv(x, c_in, c)
        skips.append((x, c))
        x, c_in = g.op("MaxPool", x, kernel_shape=[2, 2], strides=[2, 2]), c
    x = double_conv(x, c_in, 2 * c_in)
    c_in *= 2
    for level, (skip, c) in enumerate(reversed(skips)):
        if level % 2 == 0:
            up = g.op("ConvTranspose", x, g.weight(c_in, c, 2, 2), g.weight(c, scale=0.1),
                      kernel_shape=[2, 2], strides=[2, 2])
        else:
            scales = g.const(np.array([1, 1, 2, 2], np.float32), "scales")
            mode = {"mode": "nearest", "coordinate_transformation_mode": "asymmetric",
                    "nearest_mode": "floor"} if level % 4 == 1 else \
                {"mode": "linear", "coordinate_transformation_mode": "pytorch_half_pixel"}
            up = g.conv(g.op("Resize", x, "", scales, **mode), c_in, c, 1)
        x, c_in = double_conv(g.op("Concat", up, skip, axis=1), 2 * c, c), c
    g.op("Conv", x, g.weight(2, c_in, 1, 1), g.weight(2, scale=0.1), kernel_shape=[1, 1], out="mask")
    shape = ["batch", 3, "height", "width"]
    model = g.model("unet", [_value("input", FLOAT, shape)], [_value("mask", FLOAT, ["batch", 2, "height", "width"])])
    settings = [Setting(f"1x3x{hw}x{hw}", {"batch": 1, "height": hw, "width": hw},
                        _normal({"input": (1, 3, hw, hw)}))]
    # height and width are bound at import: with them symbolic, relaxpack cannot prove that the
    # upsampled 2 * (h // 8) equals the skip's h // 4 (it holds only for h divisible by 8).
    return Benchmark("unet", model, {"batch": (1, 8), "height": hw, "width": hw}, settings,
                     f"UNet, depth {depth}, base {base} channels, height/width bound to {hw} at import")


def yolo_head(size: str = "full", seed: int = 0) -> Benchmark:
    """A YOLOv5-style detector: SiLU conv backbone to strides 8/16/32, a small FPN
    (Resize nearest + Concat), per-scale 1x1 heads reshaped to (batch, anchors*h*w, 5+classes),
    sigmoid, and the scales concatenated."""
    hw, widths, classes = _pick(size, (64, (4, 8, 16, 32, 64), 3), (320, (32, 64, 128, 256, 512), 80))
    anchors, no = 3, 5 + classes
    g = _Builder(seed)

    def conv_silu(v, c_in, c_out, k, stride=1):
        v = g.batch_norm(g.conv(v, c_in, c_out, k, stride, bias=False), c_out)
        return g.op("Mul", v, g.op("Sigmoid", v))

    x, c_in, features = "images", 3, []
    for i, c in enumerate(widths):
        x = conv_silu(conv_silu(x, c_in, c, 3, 2), c, c, 3)
        c_in = c
        if i >= 2:
            features.append((x, c))
    (p3, c3), (p4, c4), (p5, c5) = features
    scales = g.const(np.array([1, 1, 2, 2], np.float32), "scales")
    up = lambda v: g.op("Resize", v, "", scales, mode="nearest", coordinate_transformation_mode="asymmetric",  # noqa: E731
                        nearest_mode="floor")
    t5 = conv_silu(p5, c5, c4, 1)
    t4 = conv_silu(g.op("Concat", up(t5), p4, axis=1), 2 * c4, c4, 3)
    t4s = conv_silu(t4, c4, c3, 1)
    t3 = conv_silu(g.op("Concat", up(t4s), p3, axis=1), 2 * c3, c3, 3)
    outs = []
    for v, c in ((t3, c3), (t4, c4), (t5, c4)):
        y = g.conv(v, c, anchors * no, 1)
        y = g.op("Reshape", y, g.ints(0, anchors, no, -1))                  # (b, a, no, h*w)
        y = g.op("Transpose", y, perm=[0, 1, 3, 2])                            # (b, a, h*w, no)
        outs.append(g.op("Sigmoid", g.op("Reshape", y, g.ints(0, -1, no))))   # (b, a*h*w, no)
    g.op("Concat", *outs, axis=1, out="detections")
    boxes = anchors * sum((hw // s) ** 2 for s in (8, 16, 32))
    model = g.model("yolo_head", [_value("images", FLOAT, ["batch", 3, hw, hw])],
                    [_value("detections", FLOAT, ["batch", boxes, no])])
    return Benchmark("yolo_head", model, {"batch": (1, 8)}, _image_settings("images", 3, hw),
                     f"YOLOv5-style, {hw}x{hw}, {classes} classes, {boxes} boxes")


# -------------------------------------------------------------- transformers
def _heads_shape(g: _Builder, x: str, heads: int, d_head: int) -> tuple[str, str]:
    """Reshape targets (batch, seq, heads, d_head) and (batch, seq, heads*d_head) from x's shape."""
    b, s = g.dim(x, 0), g.dim(x, 1)
    return (g.op("Concat", b, s, g.ints(heads, d_head), axis=0),
            g.op("Concat", b, s, g.ints(heads * d_head), axis=0))


def _attention(g: _Builder, q: str, k: str, v: str, split: str, merge: str, d_head: int, bias=None,
               causal=None) -> str:
    q = g.op("Transpose", g.op("Reshape", q, split), perm=[0, 2, 1, 3])
    k = g.op("Transpose", g.op("Reshape", k, split), perm=[0, 2, 3, 1])
    v = g.op("Transpose", g.op("Reshape", v, split), perm=[0, 2, 1, 3])
    scores = g.op("Div", g.op("MatMul", q, k), g.const(np.array(np.sqrt(d_head), np.float32), "sqrt_d"))
    if bias is not None:
        scores = g.op("Add", scores, bias)
    if causal is not None:
        scores = g.op("Where", causal, scores, g.const(np.array(np.finfo(np.float32).min, np.float32), "neg"))
    ctx = g.op("Transpose", g.op("MatMul", g.op("Softmax", scores, axis=-1), v), perm=[0, 2, 1, 3])
    return g.op("Reshape", ctx, merge)


def _positions(g: _Builder, ids: str) -> str:
    """``arange(seq)`` for ids of shape (batch, seq): Shape -> Gather -> Range."""
    seq = g.op("Gather", g.op("Shape", ids), g.const(np.array(1, np.int64), "axis"), axis=0)
    return g.op("Range", g.const(np.array(0, np.int64), "zero"), seq, g.const(np.array(1, np.int64), "one"))


def _seq_settings(size: str, vocab: int, mask: bool) -> list[Setting]:
    def feeds(seq):
        def make(rng):
            out = {"input_ids": rng.integers(0, vocab, (1, seq)).astype(np.int64)}
            if mask:
                m = np.ones((1, seq), np.int64)
                m[:, seq - seq // 4:] = 0           # padding at the end
                out["attention_mask"] = m
            return out
        return make
    return [Setting(f"seq {s}", {"batch": 1, "seq": s}, feeds(s)) for s in _pick(size, (8, 16), (32, 128))]


def bert(size: str = "full", seed: int = 0) -> Benchmark:
    """A BERT encoder (positions sliced from a buffer with symbolic bounds, post-LN, Erf GELU,
    additive padding mask, tanh pooler); symbolic batch and seq."""
    layers, d, heads, ff, vocab, max_pos = _pick(size, (2, 32, 4, 64, 100, 64), (4, 512, 8, 2048, 30522, 512))
    d_head = d // heads
    g = _Builder(seed)
    seq = g.dim("input_ids", 1)          # position_ids[:, :seq] of a buffer, as HF's BERT exports it
    pos = g.op("Slice", g.const(np.arange(max_pos, dtype=np.int64)[None], "position_ids"), g.ints(0), seq, g.ints(1))
    x = g.op("Add", g.op("Gather", g.weight(vocab, d, scale=0.02), "input_ids"),
             g.op("Gather", g.weight(max_pos, d, scale=0.02), pos))
    x = g.layer_norm(g.op("Add", x, g.weight(d, scale=0.02)), d)        # + token type 0
    one, half = g.const(np.array(1, np.float32), "one"), g.const(np.array(0.5, np.float32), "half")
    rt2 = g.const(np.array(np.sqrt(2), np.float32), "rt2")
    mask = g.op("Cast", g.op("Unsqueeze", "attention_mask", g.ints(1, 2)), to=FLOAT)
    bias = g.op("Mul", g.op("Sub", one, mask), g.const(np.array(-10000, np.float32), "big"))
    split, merge = _heads_shape(g, x, heads, d_head)
    for _ in range(layers):
        q, k, v = (g.linear(x, d, d) for _ in range(3))
        attn = _attention(g, q, k, v, split, merge, d_head, bias=bias)
        x = g.layer_norm(g.op("Add", g.linear(attn, d, d), x), d)
        h = g.linear(x, d, ff)
        h = g.op("Mul", g.op("Mul", h, g.op("Add", g.op("Erf", g.op("Div", h, rt2)), one)), half)
        x = g.layer_norm(g.op("Add", g.linear(h, ff, d), x), d)
    g.op("Identity", x, out="last_hidden_state")
    first = g.op("Gather", x, g.const(np.array(0, np.int64), "first"), axis=1)
    g.op("Tanh", g.gemm(first, d, d), out="pooler_output")
    model = g.model("bert", [_value("input_ids", INT64, ["batch", "seq"]),
                             _value("attention_mask", INT64, ["batch", "seq"])],
                    [_value("last_hidden_state", FLOAT, ["batch", "seq", d]),
                     _value("pooler_output", FLOAT, ["batch", d])])
    return Benchmark("bert", model, {"batch": (1, 8), "seq": (1, max_pos)}, _seq_settings(size, vocab, True),
                     f"BERT encoder, {layers} layers, d {d}, {heads} heads, ff {ff}, vocab {vocab}")


def gpt2(size: str = "full", seed: int = 0) -> Benchmark:
    """A GPT-2 decoder (positions by Range, pre-LN, fused QKV + Split, causal mask sliced from a
    buffer with symbolic bounds, tanh GELU with Pow, tied LM head); symbolic batch and seq."""
    layers, d, heads, vocab, n_ctx = _pick(size, (2, 32, 4, 128, 64), (6, 512, 8, 16384, 512))
    d_head = d // heads
    g = _Builder(seed)
    positions = _positions(g, "input_ids")
    wte = (0.02 * g.rng.standard_normal((vocab, d))).astype(np.float32)
    x = g.op("Add", g.op("Gather", g.const(wte, "wte"), "input_ids"),
             g.op("Gather", g.weight(n_ctx, d, scale=0.01), positions))
    seq = g.dim("input_ids", 1)          # bias[:, :, :seq, :seq] of a lower-triangular buffer
    tril = np.tril(np.ones((n_ctx, n_ctx), bool))[None, None]
    causal = g.op("Slice", g.const(tril, "causal"), g.ints(0, 0), g.op("Concat", seq, seq, axis=0), g.ints(2, 3))
    split, merge = _heads_shape(g, x, heads, d_head)
    c = {k: g.const(np.array(v, np.float32), k) for k, v in
         (("half", 0.5), ("one", 1.0), ("k", np.sqrt(2 / np.pi)), ("cube", 0.044715), ("three", 3.0))}
    for _ in range(layers):
        qkv = g.linear(g.layer_norm(x, d), d, 3 * d)
        q, k, v = g.op("Split", qkv, g.ints(d, d, d), axis=2, n_out=3)
        x = g.op("Add", x, g.linear(_attention(g, q, k, v, split, merge, d_head, causal=causal), d, d))
        h = g.linear(g.layer_norm(x, d), d, 4 * d)
        inner = g.op("Mul", g.op("Add", h, g.op("Mul", g.op("Pow", h, c["three"]), c["cube"])), c["k"])
        h = g.op("Mul", g.op("Mul", h, c["half"]), g.op("Add", g.op("Tanh", inner), c["one"]))
        x = g.op("Add", x, g.linear(h, 4 * d, d))
    g.op("MatMul", g.layer_norm(x, d), g.const(np.ascontiguousarray(wte.T), "lm_head"), out="logits")
    model = g.model("gpt2", [_value("input_ids", INT64, ["batch", "seq"])],
                    [_value("logits", FLOAT, ["batch", "seq", vocab])])
    return Benchmark("gpt2", model, {"batch": (1, 8), "seq": (1, n_ctx)}, _seq_settings(size, vocab, False),
                     f"GPT-2 decoder, {layers} layers, d {d}, {heads} heads, vocab {vocab}")


# ------------------------------------------------------------------- others
def lstm_gru(size: str = "full", seed: int = 0) -> Benchmark:
    """An LSTM layer, then a GRU layer (torch's ``linear_before_reset``), then a classifier on
    the GRU's last hidden state; input (seq, batch, features), symbolic seq and batch."""
    seq, n_in, hidden, classes = _pick(size, (5, 8, 16, 4), (100, 64, 256, 10))
    g = _Builder(seed)
    lstm = [g.weight(1, 4 * hidden, n_in), g.weight(1, 4 * hidden, hidden), g.weight(1, 8 * hidden, scale=0.1)]
    y, _, _ = g.op("LSTM", "x", *lstm, hidden_size=hidden, n_out=3)
    gru = [g.weight(1, 3 * hidden, hidden), g.weight(1, 3 * hidden, hidden), g.weight(1, 6 * hidden, scale=0.1)]
    _, h = g.op("GRU", g.op("Squeeze", y, g.ints(1)), *gru, hidden_size=hidden, linear_before_reset=1, n_out=2)
    g.gemm(g.op("Squeeze", h, g.ints(0)), hidden, classes, out="logits")
    model = g.model("lstm_gru", [_value("x", FLOAT, ["seq", "batch", n_in])],
                    [_value("logits", FLOAT, ["batch", classes])])
    settings = [Setting(f"seq {seq}, batch 1", {"seq": seq, "batch": 1}, _normal({"x": (seq, 1, n_in)}))]
    return Benchmark("lstm_gru", model, {"seq": (1, 512), "batch": (1, 8)}, settings,
                     f"LSTM + GRU, hidden {hidden}")


def mlp(size: str = "full", seed: int = 0) -> Benchmark:
    """A small MLP (Gemm + Relu) at batch 1 and a larger batch; symbolic batch."""
    widths = _pick(size, (16, 32, 16, 4), (784, 512, 256, 10))
    g = _Builder(seed)
    x = "x"
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        last = i == len(widths) - 2
        x = g.gemm(x, a, b, out="logits" if last else None)
        x = x if last else g.op("Relu", x)
    model = g.model("mlp", [_value("x", FLOAT, ["batch", widths[0]])], [_value("logits", FLOAT, ["batch", widths[-1]])])
    settings = [Setting(f"batch {b}", {"batch": b}, _normal({"x": (b, widths[0])})) for b in _pick(size, (1, 8), (1, 64))]
    return Benchmark("mlp", model, {"batch": (1, 256)}, settings, f"MLP {widths}")


def tree_ensemble(size: str = "full", seed: int = 0) -> Benchmark:
    """ai.onnx.ml TreeEnsembleRegressor: full binary trees of random splits, summed."""
    trees, depth, features, batch = _pick(size, (3, 3, 4, 8), (100, 6, 32, 256))
    rng = np.random.default_rng(seed)
    attrs: dict[str, list] = {k: [] for k in (
        "nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values", "nodes_modes",
        "nodes_truenodeids", "nodes_falsenodeids", "target_treeids", "target_nodeids", "target_ids",
        "target_weights")}
    n_internal = 2 ** depth - 1
    for t in range(trees):
        for node in range(2 ** (depth + 1) - 1):
            leaf = node >= n_internal
            attrs["nodes_treeids"].append(t)
            attrs["nodes_nodeids"].append(node)
            attrs["nodes_featureids"].append(0 if leaf else int(rng.integers(features)))
            attrs["nodes_values"].append(0.0 if leaf else float(rng.standard_normal()))
            attrs["nodes_modes"].append("LEAF" if leaf else "BRANCH_LEQ")
            attrs["nodes_truenodeids"].append(0 if leaf else 2 * node + 1)
            attrs["nodes_falsenodeids"].append(0 if leaf else 2 * node + 2)
            if leaf:
                attrs["target_treeids"].append(t)
                attrs["target_nodeids"].append(node)
                attrs["target_ids"].append(0)
                attrs["target_weights"].append(float(rng.standard_normal() / trees))
    g = _Builder(seed)
    g.op("TreeEnsembleRegressor", "x", domain="ai.onnx.ml", out="y", n_targets=1, aggregate_function="SUM",
         post_transform="NONE", base_values=[0.5], **attrs)
    model = g.model("tree_ensemble", [_value("x", FLOAT, ["batch", features])], [_value("y", FLOAT, ["batch", 1])],
                    ml=True)
    settings = [Setting(f"batch {batch}", {"batch": batch}, _normal({"x": (batch, features)}))]
    return Benchmark("tree_ensemble", model, {"batch": (1, 4096)}, settings,
                     f"{trees} trees of depth {depth}, {features} features")


MODELS: dict[str, Callable[..., Benchmark]] = {
    "resnet18": resnet18,
    "resnet50": resnet50,
    "mobilenetv2": mobilenetv2,
    "unet": unet,
    "yolo_head": yolo_head,
    "bert": bert,
    "gpt2": gpt2,
    "lstm_gru": lstm_gru,
    "mlp": mlp,
    "tree_ensemble": tree_ensemble,
}

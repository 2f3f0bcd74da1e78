"""Example ONNX models built with ``onnx.helper`` (seeded random weights).

- :func:`small_cnn`: Conv + BatchNorm + Relu + MaxPool, twice, then global
  pooling and a Gemm classifier; symbolic ``batch``.
- :func:`transformer_block_onnx`: one encoder block as torch exports it,
  with reshape targets computed by Shape -> Gather -> Unsqueeze -> Concat;
  symbolic ``batch`` and ``seq``.

Both ship in the package as ``relaxpack/examples/<name>.onnx`` (see
:data:`BUNDLED`); ``python -m relaxpack.examples.onnx_models --write``
makes them again (a test checks the files equal what this code makes).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17


class _Graph:
    """A tiny graph builder: nodes, initializers and fresh names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self.count = 0

    def name(self, base: str) -> str:
        self.count += 1
        return f"{base}_{self.count}"

    def init(self, base: str, array) -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(self, base: str, *shape, scale: float | None = None) -> str:
        fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else shape[0]
        scale = scale if scale is not None else 1.0 / np.sqrt(fan_in)
        return self.init(base, (scale * self.rng.standard_normal(shape)).astype(np.float32))

    def node(self, op: str, inputs, n_out: int = 1, **attrs):
        outs = [self.name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=f"/{outs[0]}/{op}", **attrs))
        return outs[0] if n_out == 1 else outs

    def model(self, name: str, inputs, outputs) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=8,
                                  producer_name="relaxpack.examples")
        onnx.checker.check_model(model)
        return model


def small_cnn(channels: int = 8, classes: int = 10, seed: int = 0) -> onnx.ModelProto:
    """``input (batch, 3, 32, 32) -> logits (batch, classes)``."""
    g = _Graph(seed)
    x = "input"
    c_in = 3
    for c_out in (channels, 2 * channels):
        x = g.node("Conv", [x, g.weight("w", c_out, c_in, 3, 3), g.weight("b", c_out, scale=0.1)],
                   pads=[1, 1, 1, 1], strides=[1, 1])
        bn = [g.init("gamma", (1 + 0.1 * g.rng.standard_normal(c_out)).astype(np.float32)),
              g.init("beta", (0.1 * g.rng.standard_normal(c_out)).astype(np.float32)),
              g.init("mean", (0.1 * g.rng.standard_normal(c_out)).astype(np.float32)),
              g.init("var", (1 + 0.1 * g.rng.random(c_out)).astype(np.float32))]
        x = g.node("BatchNormalization", [x, *bn], epsilon=1e-5)
        x = g.node("Relu", [x])
        x = g.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
        c_in = c_out
    x = g.node("GlobalAveragePool", [x])
    x = g.node("Flatten", [x], axis=1)
    g.node("Gemm", [x, g.weight("fc", classes, c_in), g.weight("fc_b", classes, scale=0.1)], transB=1)
    g.nodes[-1].output[0] = "logits"
    return g.model("small_cnn", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["batch", 3, 32, 32])],
                   [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", classes])])


def transformer_block_onnx(d_model: int = 32, heads: int = 4, d_ff: int = 64, seed: int = 0) -> onnx.ModelProto:
    """``x (batch, seq, d_model) -> y (batch, seq, d_model)``, as torch exports it."""
    g = _Graph(seed)
    d_head = d_model // heads
    x = "x"
    shape = g.node("Shape", [x])
    batch = g.node("Gather", [shape, g.init("i0", np.array(0, np.int64))], axis=0)
    seq = g.node("Gather", [shape, g.init("i1", np.array(1, np.int64))], axis=0)
    axes0 = g.init("axes0", np.array([0], np.int64))
    batch1 = g.node("Unsqueeze", [batch, axes0])
    seq1 = g.node("Unsqueeze", [seq, axes0])
    heads_shape = g.node("Concat", [batch1, seq1, g.init("hd", np.array([heads, d_head], np.int64))], axis=0)
    merged_shape = g.node("Concat", [batch1, seq1, g.init("dm", np.array([d_model], np.int64))], axis=0)

    def linear(v, n_in, n_out):
        return g.node("Add", [g.node("MatMul", [v, g.weight("w", n_in, n_out)]), g.weight("b", n_out, scale=0.1)])

    def split_heads(v, perm):
        return g.node("Transpose", [g.node("Reshape", [v, heads_shape])], perm=perm)

    q = split_heads(linear(x, d_model, d_model), [0, 2, 1, 3])
    k = split_heads(linear(x, d_model, d_model), [0, 2, 3, 1])
    v = split_heads(linear(x, d_model, d_model), [0, 2, 1, 3])
    scores = g.node("Div", [g.node("MatMul", [q, k]), g.init("scale", np.array(np.sqrt(d_head), np.float32))])
    probs = g.node("Softmax", [scores], axis=-1)
    attn = g.node("Transpose", [g.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    merged = g.node("Reshape", [attn, merged_shape])
    h = g.node("Add", [x, linear(merged, d_model, d_model)])

    def layer_norm(v):
        return g.node("LayerNormalization", [v, g.init("ln_g", np.ones(d_model, np.float32)),
                                             g.init("ln_b", np.zeros(d_model, np.float32))], axis=-1, epsilon=1e-5)

    y = layer_norm(h)
    ff = linear(g.node("Relu", [linear(y, d_model, d_ff)]), d_ff, d_model)
    out = layer_norm(g.node("Add", [y, ff]))
    g.nodes[-1].output[0] = "y"
    del out
    value = helper.make_tensor_value_info
    return g.model("transformer_block", [value("x", TensorProto.FLOAT, ["batch", "seq", d_model])],
                   [value("y", TensorProto.FLOAT, ["batch", "seq", d_model])])


#: the example models shipped as package data: file name -> the function that makes it
BUNDLED = {"small_cnn.onnx": small_cnn, "transformer_block.onnx": transformer_block_onnx}
FOLDER = Path(__file__).resolve().parent


def bundled_path(name: str) -> Path:
    """The installed copy of a bundled example model, e.g. ``bundled_path("transformer_block.onnx")``."""
    return FOLDER / name


def write_bundled(folder: Path = FOLDER) -> list[Path]:
    """Write every bundled model into ``folder``; returns the paths."""
    paths = []
    for name, make in BUNDLED.items():
        path = Path(folder) / name
        path.write_bytes(make().SerializeToString())
        paths.append(path)
    return paths


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description="Write the bundled example models (relaxpack/examples/*.onnx).")
    parser.add_argument("--write", action="store_true", help="Write them (else list them).")
    parser.add_argument("--folder", type=Path, default=FOLDER, help="Where to write (default: the package).")
    args = parser.parse_args(argv)
    for name in BUNDLED:
        if not args.write:
            print(bundled_path(name))
    if args.write:
        for path in write_bundled(args.folder):
            print(f"wrote {path}")


if __name__ == "__main__":
    main(sys.argv[1:])

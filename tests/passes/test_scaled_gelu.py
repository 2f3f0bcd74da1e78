"""The erf GELU with sqrt(2) rounded to float16 (onnxconverter-common's float16 models) becomes
``nn.gelu(x * s) / s`` in float32 (passes/scaled_gelu.py): the chain's own function, ``c`` as
written, checked against a float64 evaluation of it; other divisors keep the erf chain."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import relaxpack
from relaxpack.runtime import VirtualMachine

C16 = float(np.float16(math.sqrt(2)))          # 1.4140625
W = np.random.default_rng(0).standard_normal((16, 24)) / 3


def gelu_model(c: float, dtype=np.float16, product: bool = True):
    """0.5 * x' * (erf(x' / c) + 1), x' = x @ W (or x itself)."""
    onnx_type = T.FLOAT16 if dtype == np.float16 else T.FLOAT
    inits = [numpy_helper.from_array(np.array(v, dtype), n) for n, v in (("c", c), ("one", 1.0), ("half", 0.5))]
    nodes = []
    src = "x"
    if product:
        inits.append(numpy_helper.from_array(W.astype(dtype), "w"))
        nodes.append(h.make_node("MatMul", ["x", "w"], ["p"]))
        src = "p"
    nodes += [h.make_node("Div", [src, "c"], ["d"]), h.make_node("Erf", ["d"], ["e"]),
              h.make_node("Add", ["e", "one"], ["a"]), h.make_node("Mul", [src, "a"], ["m"]),
              h.make_node("Mul", ["m", "half"], ["y"])]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", onnx_type, ["n", 16])],
                     [h.make_tensor_value_info("y", onnx_type, None)], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def reference(x: np.ndarray, c: float, product: bool) -> np.ndarray:
    """The chain in float64 (from the float32 product, unrounded, as onnxruntime computes it)."""
    p = (x.astype(np.float32) @ W.astype(x.dtype).astype(np.float32)).astype(np.float64) if product \
        else x.astype(np.float64)
    erf = np.vectorize(math.erf)
    return 0.5 * p * (erf(p / c) + 1)


def _ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    def key(v):
        bits = v.astype(np.float16).view(np.int16).astype(np.int64)
        return np.where(bits < 0, -32768 - bits, bits)
    return np.abs(key(a) - key(b))


def _run(model, x):
    exe = relaxpack.build(relaxpack.from_onnx(model), opt_level=2)
    return exe, VirtualMachine(exe).run({"x": x})["y"]


@pytest.mark.parametrize("product", [True, False])
@pytest.mark.parametrize("rows", [1, 7, 300])
def test_float16_gelu_with_a_rounded_sqrt2_is_a_scaled_gelu(product, rows):
    rng = np.random.default_rng(rows)
    x = (rng.standard_normal((rows, 16)) * (1 if product else 3)).astype(np.float16)
    exe, got = _run(gelu_model(C16, product=product), x)
    text = exe.as_text()
    assert "gelu" in text and "erf" not in text
    want = reference(x, C16, product)
    ulps = _ulps(got, want.astype(np.float16))
    assert got.dtype == np.float16 and ulps.max() <= 1 and (ulps > 0).mean() < 0.01
    np.testing.assert_array_equal(_run(gelu_model(C16, product=product), -x)[1] >= 0,
                                  reference(-x, C16, product).astype(np.float16) >= 0)


def test_float32_gelu_with_a_rounded_sqrt2():
    x = np.random.default_rng(3).standard_normal((9, 16)).astype(np.float32)
    exe, got = _run(gelu_model(C16, np.float32), x)
    assert "gelu" in exe.as_text() and "erf" not in exe.as_text()
    # within the float32 product's own rounding
    np.testing.assert_allclose(got, reference(x, C16, True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("c", [1.5, 1.4])
def test_other_divisors_keep_the_erf_chain(c):
    x = np.random.default_rng(4).standard_normal((5, 16)).astype(np.float16)
    exe, got = _run(gelu_model(c), x)
    assert "erf" in exe.as_text() and "gelu" not in exe.as_text()
    assert _ulps(got, reference(x, float(np.float16(c)), True).astype(np.float16)).max() <= 1


def test_exact_sqrt2_is_plain_gelu():
    x = np.random.default_rng(5).standard_normal((5, 16)).astype(np.float32)
    exe, got = _run(gelu_model(math.sqrt(2), np.float32), x)
    text = exe.as_text()
    assert 'activation="gelu"' in text and "multiply" not in text
    sqrt2 = float(np.float32(math.sqrt(2)))
    np.testing.assert_allclose(got, reference(x, sqrt2, True), rtol=1e-5, atol=1e-6)

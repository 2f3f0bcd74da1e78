"""ExactIntegerMatmul (passes/exact_integer_matmul.py): an int32 matmul whose operands' bounds
(value_range) and reduced dim's bound (declared ranges, or an assumption the importer recorded,
analysis/dim_bounds.py) keep every partial sum within 2**24 runs as a float32 product; a constant
right operand as an nn.gemm of its float32 copy. Checked on both sides of the bound (255 * 255 * K:
K = 258 rewritten, 259 not) with the largest products, at odd and empty sizes, against the int64
product; lookalikes (an unbounded operand, an unbounded K) stay. Through the importer: a
QLinearMatMul whose K is the sequence of a BERT-like slice of a 64-row table (the assumption
``min(k, 64) == k``) loses its int32 matmul at -O2 and gives the integer semantics."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.ir import parse
from relaxpack.ir.dims import sym
from relaxpack.passes import PassContext
from relaxpack.passes.analysis.dim_bounds import function_dims
from relaxpack.passes.exact_integer_matmul import exact_integer_matmul
from relaxpack.passes.pipeline import optimize_pipeline
from relaxpack.runtime import VirtualMachine

from .helpers import products_of, run_pass


def _text(upper: str, rhs: str = "R.subtract(R.astype(b, dtype=\"int32\"), R.const(0, \"int32\"))",
          lhs: str = "R.astype(a, dtype=\"int32\")") -> str:
    return f'''
@I.ir_module
class Module:
    @R.function
    def main(a: R.Tensor(("m", "k"), "uint8"), b: R.Tensor(("k", 3), "uint8")) -> R.Tensor(("m", 3), "int32"):
        m = T.int64()
        k = T.int64({upper})
        lhs = {lhs}
        rhs = {rhs}
        y = R.matmul(lhs, rhs)
        return y
'''


def _run(mod, feeds):
    return np.asarray(VirtualMachine(relaxpack.build(mod, opt_level=0)).run(feeds)["y"])


def _exact(feeds, shift=0):
    return feeds["a"].astype(np.int64) @ (feeds["b"].astype(np.int64) - shift)


@pytest.mark.parametrize("k, rewritten", [(258, True), (259, False)])
def test_the_bound_on_k(k, rewritten):
    """255 * 255 * 258 <= 2**24 < 255 * 255 * 259: both sides give the int64 product's values."""
    mod = parse(_text(f"upper={k}"))
    out = run_pass(exact_integer_matmul, mod)
    assert products_of(out["main"]) == ([("matmul", "float32")] if rewritten else [("matmul", "int32")])
    rng = np.random.default_rng(0)
    largest = {"a": np.full((2, k), 255, np.uint8), "b": np.full((k, 3), 255, np.uint8)}
    mixed = {"a": rng.integers(0, 256, (3, k)).astype(np.uint8), "b": rng.integers(0, 256, (k, 3)).astype(np.uint8)}
    for feeds in (largest, mixed):
        got = _run(out, feeds)
        assert got.dtype == np.int32
        np.testing.assert_array_equal(got, _exact(feeds))
        np.testing.assert_array_equal(got, _run(mod, feeds))


@pytest.mark.parametrize("m, k", [(0, 5), (3, 0), (1, 1), (7, 13), (0, 0)])
def test_odd_and_empty_sizes(m, k):
    mod = parse(_text("upper=64", rhs='R.subtract(R.astype(b, dtype="int32"), R.const(122, "int32"))'))
    out = run_pass(exact_integer_matmul, mod)
    assert products_of(out["main"]) == [("matmul", "float32")]
    rng = np.random.default_rng(1)
    feeds = {"a": rng.integers(0, 256, (m, k)).astype(np.uint8), "b": rng.integers(0, 256, (k, 3)).astype(np.uint8)}
    got = _run(out, feeds)
    assert got.dtype == np.int32 and got.shape == (m, 3)
    np.testing.assert_array_equal(got, _exact(feeds, 122))


def test_a_constant_right_operand_is_a_gemm_bounded_by_its_column_sums():
    """A column sum of 65793 (= 2**24 / 255, rounded down) is within the bound with K static at 300,
    past what 255 * max|b| * K would allow."""
    weight = np.zeros((300, 2), np.int32)
    weight[:257, 0] = 256
    weight[257, 0] = 1
    weight[:, 1] = np.arange(300) % 7 - 3
    text = f'''
@I.ir_module
class Module:
    @R.function
    def main(a: R.Tensor(("m", 300), "uint8")) -> R.Tensor(("m", 2), "int32"):
        m = T.int64()
        lhs = R.astype(a, dtype="int32")
        y = R.matmul(lhs, R.const({weight.tolist()}, "int32"))
        return y
'''
    assert 255 * int(np.abs(weight).sum(axis=0).max()) <= 2 ** 24 < 255 * 256 * 300
    mod = parse(text)
    out = run_pass(exact_integer_matmul, mod)
    assert products_of(out["main"]) == [("nn.gemm", "float32")]
    feeds = {"a": np.full((3, 300), 255, np.uint8)}
    feeds["a"][1] = np.arange(300) % 256
    got = np.asarray(VirtualMachine(relaxpack.build(out, opt_level=0)).run(feeds)["y"])
    np.testing.assert_array_equal(got, feeds["a"].astype(np.int64) @ weight.astype(np.int64))


@pytest.mark.parametrize("case, text", [
    ("an unbounded K", _text("")),
    ("an operand of any int32", _text("upper=4", lhs='R.multiply(R.astype(a, dtype="int32"), R.astype(a, dtype="int32"))')),
])
def test_lookalikes_stay(case, text):
    out = run_pass(exact_integer_matmul, parse(text))
    assert products_of(out["main"]) == [("matmul", "int32")], case


# ---------------------------------------------------------------- through the importer


def _bert_like():
    """QLinearMatMul of two run-time uint8 operands reducing over ``k``; ``k`` also slices a
    64-row table added to ``b`` (BERT's position embeddings): the importer assumes
    ``min(k, 64) == k``."""
    from onnx import TensorProto, helper, numpy_helper
    inits = {"as": np.float32(1.0), "bs": np.float32(1.0), "ys": np.float32(20000.0), "azp": np.uint8(0),
             "bzp": np.uint8(7), "yzp": np.uint8(3), "table": np.arange(192, dtype=np.float32).reshape(64, 3),
             "zero": np.array([0], np.int64), "one": np.array([1], np.int64)}
    nodes = [helper.make_node("QLinearMatMul", ["a", "as", "azp", "b", "bs", "bzp", "ys", "yzp"], ["y"]),
             helper.make_node("Shape", ["b"], ["shape"]),
             helper.make_node("Slice", ["shape", "zero", "one"], ["k"]),
             helper.make_node("Slice", ["table", "zero", "k", "zero"], ["rows"]),
             helper.make_node("Cast", ["b"], ["bf"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["bf", "rows"], ["z"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("a", TensorProto.UINT8, [2, "k"]),
                     helper.make_tensor_value_info("b", TensorProto.UINT8, ["k", 3])],
        [helper.make_empty_tensor_value_info("y"), helper.make_empty_tensor_value_info("z")],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in inits.items()])
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 13)])


def test_an_assumed_bound_on_the_sequence_makes_the_product_float32():
    m = _bert_like()
    mod = relaxpack.from_onnx(m)
    assert function_dims(mod["main"]).upper_bound(sym("k")) == 64
    assert ("matmul", "int32") in products_of(mod["main"])
    with PassContext(opt_level=2):
        optimized = optimize_pipeline()(mod)
    assert ("matmul", "int32") not in products_of(optimized["main"])
    vms = [VirtualMachine(relaxpack.build(mod, opt_level=level)) for level in (0, 2)]
    rng = np.random.default_rng(3)
    for k in (64, 1, 17, 0):
        for feeds in ({"a": np.full((2, k), 255, np.uint8), "b": np.full((k, 3), 0, np.uint8)},
                      {"a": rng.integers(0, 256, (2, k)).astype(np.uint8),
                       "b": rng.integers(0, 256, (k, 3)).astype(np.uint8)}):
            acc = feeds["a"].astype(np.int64) @ (feeds["b"].astype(np.int64) - 7)
            want = np.clip(np.rint(acc.astype(np.float32) * (np.float32(1.0) / np.float32(20000.0))) + 3,
                           0, 255).astype(np.uint8)
            for vm in vms:
                np.testing.assert_array_equal(vm.run(feeds)["y"], want)

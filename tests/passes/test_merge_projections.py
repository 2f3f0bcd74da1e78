"""MergeProjections: sibling products of one input by constant weights become one batched matmul
whose parts are views (``vm.builtin.index_view``); results are the unmerged products, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper

import relaxpack
from relaxpack.errors import ShapeError
from relaxpack.passes.core.context import PassContext
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.builtins import index_view

_ONNX_TYPE = {np.float32: T.FLOAT, np.float16: T.FLOAT16, np.float64: T.DOUBLE}


def projections_model(weights, biases=(), dtype=np.float32, rank=3, outputs=None):
    """x @ W_i (+ b_i) for each weight, each through Tanh (so the projections are intermediates)
    unless it is listed in ``outputs``; x of shape (batch, seq, K) (rank 3) or (rows, K)."""
    inits, nodes, outs = [], [], []
    for i, w in enumerate(weights):
        inits.append(numpy_helper.from_array(w.astype(dtype), f"w{i}"))
        nodes.append(h.make_node("MatMul", ["x", f"w{i}"], [f"p{i}"]))
        name = f"p{i}"
        if i < len(biases) and biases[i] is not None:
            inits.append(numpy_helper.from_array(biases[i].astype(dtype), f"b{i}"))
            nodes.append(h.make_node("Add", [name, f"b{i}"], [f"a{i}"]))
            name = f"a{i}"
        if outputs is None or i not in outputs:
            nodes.append(h.make_node("Tanh", [name], [f"y{i}"]))
            name = f"y{i}"
        outs.append(h.make_tensor_value_info(name, _ONNX_TYPE[dtype], None))
    k = weights[0].shape[0]
    shape = ["batch", "seq", k] if rank == 3 else ["rows", k]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", _ONNX_TYPE[dtype], shape)], outs, inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def _weights(rng, n, k=8, m=6):
    return [rng.standard_normal((k, m)).astype(np.float32) for _ in range(n)]


def run_both(model, x):
    """Outputs at -O0 and -O2 and the -O2 executable."""
    o0, o2 = (relaxpack.build(relaxpack.from_onnx(model), opt_level=level) for level in (0, 2))
    return VirtualMachine(o0).run({"x": x}), VirtualMachine(o2).run({"x": x}), o2


def _matmul_calls(exe) -> int:
    text = exe.as_text()
    return text.count("kernel.matmul(") + text.count("kernel.nn.gemm(") + text.count("kernel.fused_elementwise(")


@pytest.mark.parametrize("biased", [False, True])
@pytest.mark.parametrize("shape", [(1, 5), (3, 17), (2, 1)])
def test_three_projections_are_one_product_and_views(biased, shape):
    rng = np.random.default_rng(0)
    ws = _weights(rng, 3)
    bs = [rng.standard_normal(6).astype(np.float32) for _ in range(3)] if biased else ()
    x = rng.standard_normal((*shape, 8)).astype(np.float32)
    want, got, exe = run_both(projections_model(ws, bs), x)
    text = exe.as_text()
    assert text.count("vm.builtin.index_view(") == 3 and "kernel.take(" not in text
    assert _matmul_calls(exe) == 1
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_a_member_without_bias_leaves_the_adds_apart():
    """Biases stack only when every member has one (adding a zero would turn -0 into +0)."""
    rng = np.random.default_rng(1)
    ws = _weights(rng, 3)
    bs = [rng.standard_normal(6).astype(np.float32), None, rng.standard_normal(6).astype(np.float32)]
    x = rng.standard_normal((2, 4, 8)).astype(np.float32)
    want, got, exe = run_both(projections_model(ws, bs), x)
    assert exe.as_text().count("vm.builtin.index_view(") == 3
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


@pytest.mark.parametrize("case", ["other_shape", "one_member"])
def test_products_that_do_not_stack_stay_apart(case):
    rng = np.random.default_rng(2)
    ws = _weights(rng, 2) + ([rng.standard_normal((8, 5)).astype(np.float32)] if case == "other_shape" else [])
    if case == "one_member":
        ws = ws[:1]
    x = rng.standard_normal((1, 3, 8)).astype(np.float32)
    want, got, exe = run_both(projections_model(ws), x)
    merged = 1 if case == "other_shape" else 0        # the two (8, 6) weights still merge
    assert exe.as_text().count("vm.builtin.index_view(") == 2 * merged
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_rank_two_input_float64_and_float16():
    """Bit for bit the program without the merge: -O0's for float64; for float16 -O2's without
    MergeProjections (at -O2 the float16 products and their Tanh compute in float32 and round once,
    WidenFloat16Regions, where -O0 rounds after each op)."""
    rng = np.random.default_rng(3)
    ws = _weights(rng, 2)
    for dtype in (np.float64, np.float16):
        x = rng.standard_normal((7, 8)).astype(dtype)
        model = projections_model(ws, dtype=dtype, rank=2)
        want, got, exe = run_both(model, x)
        if dtype == np.float16:
            with PassContext(disabled_passes=["MergeProjections"]):
                unmerged = relaxpack.build(relaxpack.from_onnx(model), opt_level=2)
            assert "index_view" not in unmerged.as_text()
            want = VirtualMachine(unmerged).run({"x": x})
        assert exe.as_text().count("vm.builtin.index_view(") == 2
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])


def test_projections_that_are_outputs_are_fresh_and_apart():
    """Two outputs that are parts of one product: fresh memory per run, not each other's."""
    rng = np.random.default_rng(4)
    ws = _weights(rng, 3)
    x = rng.standard_normal((2, 3, 8)).astype(np.float32)
    exe = relaxpack.build(relaxpack.from_onnx(projections_model(ws, outputs={0, 1})), opt_level=2)
    vm = VirtualMachine(exe)
    first = vm.run({"x": x})
    kept = {k: v.copy() for k, v in first.items()}
    second = vm.run({"x": -x})
    for name, w in (("p0", ws[0]), ("p1", ws[1])):
        np.testing.assert_array_equal(first[name], kept[name])
        np.testing.assert_allclose(second[name], -x @ w, rtol=1e-5, atol=1e-6)
    first["p0"][...] = 0
    np.testing.assert_array_equal(first["p1"], kept["p1"])


def test_empty_rows():
    rng = np.random.default_rng(5)
    x = np.zeros((0, 3, 8), np.float32)
    want, got, _ = run_both(projections_model(_weights(rng, 3)), x)
    for name in want:
        assert got[name].shape == want[name].shape == (0, 3, 6)


def test_index_view_checks_its_operands():
    x = np.arange(6.0).reshape(3, 2)
    assert np.shares_memory(index_view(x, 2), x) and index_view(x, 2).tolist() == [4.0, 5.0]
    flat = np.arange(3.0)
    item = index_view(flat, 1)          # a 0-d view, not a scalar copied at the call
    flat[1] = 7.0
    assert isinstance(item, np.ndarray) and item.shape == () and float(item) == 7.0
    for value, index in ((x, 3), (x, -1), (np.float64(1.0), 0), (x, 1.0)):
        with pytest.raises(ShapeError):
            index_view(value, index)


def split_model(sizes, dtype=np.float32, bias=True, reshape=True):
    """GPT-2's attention input: x @ W (+ b), viewed (batch, seq, 3N), split along the last axis by
    ``sizes``, each part through Tanh; x of shape (batch * seq, K) when reshaped, else (batch, seq, K)."""
    rng = np.random.default_rng(6)
    total = sum(sizes)
    inits = [numpy_helper.from_array(rng.standard_normal((8, total)).astype(dtype), "w"),
             numpy_helper.from_array(np.array(sizes, np.int64), "sizes")]
    nodes = [h.make_node("MatMul", ["x", "w"], ["p"])]
    name = "p"
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(total).astype(dtype), "b"))
        nodes.append(h.make_node("Add", [name, "b"], ["pb"]))
        name = "pb"
    if reshape:
        inits.append(numpy_helper.from_array(np.array([2, -1, total], np.int64), "shape"))
        nodes.append(h.make_node("Reshape", [name, "shape"], ["r"]))
        name = "r"
    parts = [f"s{i}" for i in range(len(sizes))]
    nodes.append(h.make_node("Split", [name, "sizes"], parts, axis=-1))
    nodes += [h.make_node("Tanh", [p], [f"y{i}"]) for i, p in enumerate(parts)]
    x_shape = ["rows", 8] if reshape else ["batch", "seq", 8]
    g = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", _ONNX_TYPE[dtype], x_shape)],
                     [h.make_tensor_value_info(f"y{i}", _ONNX_TYPE[dtype], None) for i in range(len(sizes))], inits)
    return h.make_model(g, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("reshape", [False, True])
def test_a_split_product_becomes_the_products_of_its_column_blocks(bias, reshape):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((6, 8) if reshape else (2, 3, 8)).astype(np.float32)
    want, got, exe = run_both(split_model((6, 6, 6), bias=bias, reshape=reshape), x)
    text = exe.as_text()
    assert text.count("vm.builtin.index_view(") == 3 and "kernel.split(" not in text and _matmul_calls(exe) == 1
    for name in want:        # each column block's dot products are the full product's
        np.testing.assert_allclose(got[name], want[name], rtol=1e-6, atol=1e-7)


def test_a_float16_split_product_computed_in_float32():
    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 8)).astype(np.float16)
    want, got, exe = run_both(split_model((4, 4), dtype=np.float16), x)
    assert exe.as_text().count("vm.builtin.index_view(") == 2 and "kernel.split(" not in exe.as_text()
    for name in want:
        np.testing.assert_allclose(got[name].astype(np.float32), want[name].astype(np.float32), rtol=2e-3, atol=2e-3)


def test_the_parts_of_a_float16_split_product_round_in_one_call():
    """GPT-2 float16's q, k and v, each rounded from the float32 product (its bias float32): the
    merged product is rounded once (in its fused kernel) and the parts are views of it, not one
    cast call a part; the values as the product rounded and split."""
    rng = np.random.default_rng(10)
    x = rng.standard_normal((6, 8)).astype(np.float16)
    model = split_model((4, 4), dtype=np.float16)
    exe = relaxpack.build(relaxpack.from_onnx(model), opt_level=2)
    text = exe.as_text()
    assert text.count("vm.builtin.index_view(") == 2 and "kernel.astype(" not in text
    assert text.count("kernel.fused_elementwise(") == 1
    with PassContext(disabled_passes=["MergeProjections"]):
        unmerged = relaxpack.build(relaxpack.from_onnx(model), opt_level=2)
    assert "kernel.split(" in unmerged.as_text()
    want = VirtualMachine(unmerged).run({"x": x})
    got = VirtualMachine(exe).run({"x": x})
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_an_unequal_split_stays():
    x = np.random.default_rng(9).standard_normal((6, 8)).astype(np.float32)
    want, got, exe = run_both(split_model((6, 4, 6)), x)
    assert "kernel.split(" in exe.as_text() and "index_view" not in exe.as_text()
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_empty_parts_and_their_split_points_stay():
    """A split into empty parts (points (0, 0), or 0 columns) is no equal-width split."""
    from relaxpack.passes.merge_projections import _equal_parts
    assert _equal_parts((0, 0), 0) is None and _equal_parts(3, 0) is None and _equal_parts((0, 0), 6) is None
    assert _equal_parts((2, 4), 6) == 3 and _equal_parts(3, 6) == 3 and _equal_parts((2, 5), 6) is None


def test_a_dead_sibling_joins_no_group():
    """A product nothing reads (a folded attention scale leaves the original behind until
    DeadCodeElimination) is not merged: the batched product holds the live members only."""
    from relaxpack.ir import parse
    from relaxpack.passes.merge_projections import merge_projections

    from .helpers import program, run_pass
    rng = np.random.default_rng(5)
    ws = [rng.standard_normal((4, 3)).astype(np.float32).tolist() for _ in range(3)]
    body = f'''lv = R.matmul(x, R.const({ws[0]}, "float32"))
lv1 = R.matmul(x, R.const({ws[1]}, "float32"))
lv2 = R.matmul(x, R.const({ws[2]}, "float32"))
lv3 = R.tanh(lv)
lv4 = R.add(lv3, lv2)
return lv4'''
    out = run_pass(merge_projections, parse(program('x: R.Tensor(("n", 4), "float32")', '("n", 3)', body)))
    stacked = [b.value.args[1].data.shape for block in out["main"].body.blocks for b in block.bindings
               if getattr(b.value, "op", None) is not None and getattr(b.value.op, "name", "") == "matmul"]
    assert (2, 4, 3) in stacked and (3, 4, 3) not in stacked

"""FoldPermuteMatmul: attention's head transposes read as strided views by
R.permute_matmul; its kernel against onnxruntime (Transpose -> MatMul -> Transpose)."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.check import onnxruntime_session
from relaxpack.passes.fold_permute_matmul import fold_permute_matmul
from relaxpack.passes.core.rules import explain
from relaxpack.ir import parse
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.kernels import get_kernel

from ..runtime.kernel_calls import call_kernel
from .helpers import assert_rewrites, assert_same_results, assert_unchanged, program, with_dce


def program_ns(params: str, ret: str, body: str) -> str:
    """:func:`.test_rewrite.program` over the dims n (batch) and s (sequence)."""
    return program(params, ret, body, dims=("n", "s"))


HEADS = ('q: R.Tensor(("n", "s", 4, 8), "float32"), k: R.Tensor(("n", "s", 4, 8), "float32")', '("n", 4, "s", "s")')


def test_attention_scores_fold_both_operands():
    before = program_ns(*HEADS, """
lv = R.permute_dims(q, axes=[0, 2, 1, 3])
lv1 = R.permute_dims(k, axes=[0, 2, 3, 1])
lv2 = R.matmul(lv, lv1)
return lv2
""")
    expected = program_ns(*HEADS, """
lv = R.permute_matmul(q, k, lhs_axes=[0, 2, 1, 3], rhs_axes=[0, 2, 3, 1])
return lv
""")
    mod, out = assert_rewrites(with_dce(fold_permute_matmul), before, expected)
    assert_same_results(mod, out, [{"n": 1, "s": 5}, {"n": 2, "s": 1}, {"n": 1, "s": 0}])


def test_context_folds_value_and_result_permutes():
    params = ('p: R.Tensor(("n", 4, "s", "s"), "float32"), v: R.Tensor(("n", "s", 4, 8), "float32")',
              '("n", "s", 4, 8)')
    before = program_ns(*params, """
lv = R.permute_dims(v, axes=[0, 2, 1, 3])
lv1 = R.matmul(p, lv)
lv2 = R.permute_dims(lv1, axes=[0, 2, 1, 3])
return lv2
""")
    expected = program_ns(*params, """
lv = R.permute_matmul(p, v, rhs_axes=[0, 2, 1, 3], out_axes=[0, 2, 1, 3])
return lv
""")
    mod, out = assert_rewrites(with_dce(fold_permute_matmul), before, expected)
    assert_same_results(mod, out, [{"n": 1, "s": 7}, {"n": 3, "s": 2}])


def test_attention_scores_with_a_mask_fold_out_of_the_gemm():
    """FuseBiasActivation made q @ k^T + mask one nn.gemm: split back into matmul + add, the
    permutes fold; a gemm with an activation, or without a permuted operand, stays."""
    params = HEADS[0] + ', mask: R.Tensor(("n", 1, "s", "s"), "float32")'
    before = program_ns(params, HEADS[1], """
lv = R.permute_dims(q, axes=[0, 2, 1, 3])
lv1 = R.permute_dims(k, axes=[0, 2, 3, 1])
lv2 = R.nn.gemm(lv, lv1, mask)
return lv2
""")
    expected = program_ns(params, HEADS[1], """
lv = R.permute_matmul(q, k, lhs_axes=[0, 2, 1, 3], rhs_axes=[0, 2, 3, 1])
lv1 = R.add(lv, mask)
return lv1
""")
    mod, out = assert_rewrites(with_dce(fold_permute_matmul), before, expected)
    assert_same_results(mod, out, [{"n": 1, "s": 5}, {"n": 2, "s": 1}, {"n": 1, "s": 0}])
    kept = program_ns(params, HEADS[1], """
lv = R.permute_dims(q, axes=[0, 2, 1, 3])
lv1 = R.permute_dims(k, axes=[0, 2, 3, 1])
lv2 = R.nn.gemm(lv, lv1, mask, activation="relu")
lv3 = R.nn.gemm(lv2, lv2, mask)
return lv3
""")
    assert_unchanged(fold_permute_matmul, kept)
    reasons = dict(explain(parse(kept), "split_permuted_gemm"))
    assert reasons == {"lv2": "the gemm has an activation", "lv3": "no operand is a permute_dims"}


def test_permutation_without_unit_stride_and_shared_permutes_stay():
    params = ('x: R.Tensor((3, 5, 2), "float32"), w: R.Tensor((3, 4), "float32")', '(2, 5, 4)')
    # (2, 1, 0) puts x's last dim first: the view's matrices have no unit stride
    text = program_ns(*params, """
lv = R.permute_dims(x, axes=[2, 1, 0])
lv1 = R.matmul(lv, w)
return lv1
""")
    assert_unchanged(fold_permute_matmul, text)
    assert any("no BLAS view" in reason for _, reason in explain(parse(text), "fold_lhs_permute"))
    shared = program_ns('x: R.Tensor((4, 4), "float32")', '(4, 4)', """
lv = R.permute_dims(x, axes=[1, 0])
lv1 = R.matmul(lv, lv)
lv2 = R.add(lv1, lv)
return lv2
""")
    assert_unchanged(fold_permute_matmul, shared)
    assert ("lv1", "the permuted lhs lv is used 3 times") in explain(parse(shared), "fold_lhs_permute")


def _labels(exe):
    vm = VirtualMachine(exe)
    return {vm._label(ins) for prepared in vm._prepared for ins in prepared.func.instructions}


def _transpose_matmul_model(dtype: int, perm_a, perm_b, perm_out):
    a = helper.make_tensor_value_info("a", dtype, ["n", "s", 3, 5])
    b = helper.make_tensor_value_info("b", dtype, ["n", "t", 3, 5])
    y = helper.make_tensor_value_info("y", dtype, None)
    nodes = [helper.make_node("Transpose", ["a"], ["ta"], perm=perm_a),
             helper.make_node("Transpose", ["b"], ["tb"], perm=perm_b),
             helper.make_node("MatMul", ["ta", "tb"], ["p"]),
             helper.make_node("Transpose", ["p"], ["y"], perm=perm_out)]
    graph = helper.make_graph(nodes, "tmm", [a, b], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32])
def test_imported_transposes_run_as_permute_matmul_against_onnxruntime(dtype):
    elem = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16,
            np.int32: TensorProto.INT32}[dtype]
    model = _transpose_matmul_model(elem, [0, 2, 1, 3], [0, 2, 3, 1], [0, 2, 1, 3])
    exe = relaxpack.build(relaxpack.from_onnx(model))
    assert "permute_matmul" in {label.removeprefix("kernel.") for label in _labels(exe)}
    vm = VirtualMachine(exe)
    try:
        session = onnxruntime_session(model, threads=1)
    except Exception as e:          # onnxruntime lacks some integer MatMul kernels
        pytest.skip(f"onnxruntime cannot run it: {e}")
    rng = np.random.default_rng(0)
    for n, s, t in [(1, 7, 7), (2, 3, 9), (1, 0, 4), (0, 2, 2)]:
        feeds = {"a": (rng.standard_normal((n, s, 3, 5)) * 4).astype(dtype),
                 "b": (rng.standard_normal((n, t, 3, 5)) * 4).astype(dtype)}
        want = session.run(None, feeds)[0]
        got = vm.run(feeds)["y"]
        assert got.shape == want.shape == (n, s, 3, t)
        tol = 2e-2 if dtype == np.float16 else 1e-5
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=tol, atol=tol)


@pytest.mark.parametrize("axes", [((0, 2, 1, 3), (0, 2, 3, 1), (0, 2, 1, 3)), ((0, 1, 3, 2), None, None),
                                  (None, (0, 2, 3, 1), (0, 1, 3, 2)), ((2, 0, 1, 3), (2, 0, 3, 1), (1, 2, 0, 3))])
def test_kernel_matches_the_composition(axes):
    lhs_axes, rhs_axes, out_axes = axes
    rng = np.random.default_rng(1)
    a = rng.standard_normal((2, 5, 3, 4)).astype(np.float32)
    b = rng.standard_normal((2, 7, 3, 4)).astype(np.float32)
    la = a if lhs_axes is None else a.transpose(lhs_axes)
    if rhs_axes is None:
        b = rng.standard_normal(la.shape[:-2] + (la.shape[-1], 6)).astype(np.float32)
        lb = b
    else:
        if b.transpose(rhs_axes).shape[-2] != la.shape[-1] or b.transpose(rhs_axes).shape[:-2] != la.shape[:-2]:
            b = rng.standard_normal(tuple(np.argsort(rhs_axes).choose(
                [*la.shape[:-2], la.shape[-1], 6]))).astype(np.float32)
        lb = b.transpose(rhs_axes)
    want = la.astype(np.float64) @ lb.astype(np.float64)
    if out_axes is not None:
        want = want.transpose(out_axes)
    out = np.full(want.shape, np.nan, np.float32)
    call_kernel("permute_matmul", a, b, out=out, lhs_axes=lhs_axes, rhs_axes=rhs_axes, out_axes=out_axes)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
    # per instruction (the permutations as lists, as an archive may give them back): the same bits
    listed = {k: None if v is None else list(v) for k, v in
              (("lhs_axes", lhs_axes), ("rhs_axes", rhs_axes), ("out_axes", out_axes))}
    specialized = get_kernel("permute_matmul").fn.specialize_attrs({**listed, "out_dtype": None}, (False, False))
    got = np.full(want.shape, np.nan, np.float32)
    specialized(a, b, out=got)
    np.testing.assert_array_equal(got, out)

"""FuseRMSNorm: the exporters' RMS normalization chains become one nn.rms_norm,
bit for bit the chain's result; and what does not fuse, with its reason."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.ir import parse
from relaxpack.passes.core.rules import explain
from relaxpack.passes.fuse_rms_norm import fuse_rms_norm

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, ops_of, program, run_pass, with_dce

PARAMS = 'x: R.Tensor(("n", "s", 8), "{dtype}"), w: R.Tensor((8,), "{dtype}")'
RET = '("n", "s", 8)'
DIMS = ("n", "s")

#: the chain as torch.onnx's dynamo exporter writes it (llama, qwen2, T5 eager): reciprocal, weight first
DYNAMO = """
lv = R.power(x, R.const(2.0, "{dtype}"))
lv1 = R.mean(lv, axis=(-1,), keepdims=True)
lv2 = R.add(lv1, R.const(1e-06, "{dtype}"))
lv3 = R.sqrt(lv2)
lv4 = R.reciprocal(lv3)
lv5 = R.multiply(x, lv4)
lv6 = R.multiply(w, lv5)
return lv6
"""
#: as the TorchScript exporter writes it (llama_ts, mistral_ts, T5): 1 / sqrt, the last axis by number
TORCHSCRIPT = """
lv = R.power(x, R.const(2.0, "{dtype}"))
lv1 = R.mean(lv, axis=(2,), keepdims=True)
lv2 = R.add(R.const(1e-05, "{dtype}"), lv1)
lv3 = R.sqrt(lv2)
lv4 = R.divide(R.const(1.0, "{dtype}"), lv3)
lv5 = R.multiply(lv4, x)
lv6 = R.multiply(lv5, w)
return lv6
"""


def _fused(eps: str) -> str:
    return f"""
lv6 = R.nn.rms_norm(x, w, epsilon={eps})
return lv6
"""


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("form, eps", [(DYNAMO, "1e-06"), (TORCHSCRIPT, "1e-05")], ids=["dynamo", "torchscript"])
def test_the_chain_becomes_one_call_with_the_same_bits(form, eps, dtype):
    params = PARAMS.format(dtype=dtype)
    eps_value = repr(float(np.dtype(dtype).type(float(eps))))
    mod, out = assert_rewrites(with_dce(fuse_rms_norm), program(params, RET, form.format(dtype=dtype), dtype, DIMS),
                               program(params, RET, _fused(eps_value), dtype, DIMS))
    assert ops_of(out) == ["nn.rms_norm"]
    # odd sizes, one row, empty batches: the kernel runs the chain's steps, so exactly its results
    assert_same_results(mod, out, [{"n": 1, "s": 1}, {"n": 3, "s": 7}, {"n": 0, "s": 5}, {"n": 2, "s": 0}],
                        rtol=0, atol=0)


def test_a_weight_of_the_full_shape_is_a_scale_too():
    params = 'x: R.Tensor(("n", 5), "float32"), w: R.Tensor(("n", 5), "float32")'
    body = DYNAMO.format(dtype="float32")
    mod, out = assert_rewrites(with_dce(fuse_rms_norm), program(params, '("n", 5)', body),
                               program(params, '("n", 5)', _fused(repr(float(np.float32(1e-6))))))
    assert_same_results(mod, out, [{"n": 1}, {"n": 4}], rtol=0, atol=0)


def _chain(k: int, x: str, w: str, dtype: str = "float32", exponent: str = "2.0", axis: str = "-1",
           inverse: str = "R.reciprocal({})") -> str:
    """An RMS normalization chain binding lv{k} .. lv{k + 6} (the result)."""
    v = [f"lv{k + i}" for i in range(7)]
    return f"""
{v[0]} = R.power({x}, R.const({exponent}, "{dtype}"))
{v[1]} = R.mean({v[0]}, axis=({axis},), keepdims=True)
{v[2]} = R.add({v[1]}, R.const(1e-06, "{dtype}"))
{v[3]} = R.sqrt({v[2]})
{v[4]} = {inverse.format(v[3])}
{v[5]} = R.multiply({x}, {v[4]})
{v[6]} = R.multiply({w}, {v[5]})"""


def test_what_does_not_fuse_and_why():
    params = ('x: R.Tensor(("n", 8), "float32"), w: R.Tensor((8,), "float32"), '
              'h: R.Tensor(("n", 8), "float16"), hw: R.Tensor((8,), "float16"), '
              'b: R.Tensor((3, 1, 8), "float32")')
    body = (_chain(0, "x", "w") + _chain(10, "x", "w", exponent="3.0")
            + _chain(20, "x", "w", inverse='R.divide(R.const(2.0, "float32"), {})')
            + _chain(30, "h", "hw", dtype="float16") + _chain(40, "x", "b") + """
lv50 = R.negative(lv5)
lv51 = R.astype(lv36, dtype="float32")
lv52 = R.sum(lv46, axis=0)
lv53 = R.add(lv6, lv16)
lv54 = R.add(lv53, lv26)
lv55 = R.add(lv54, lv51)
lv56 = R.add(lv55, lv52)
lv57 = R.add(lv56, lv50)
return lv57
""")
    mod = parse(program(params, '("n", 8)', body))
    out = run_pass(with_dce(fuse_rms_norm), mod)
    assert "nn.rms_norm" not in ops_of(out)
    reasons = dict(explain(mod, "fuse_rms_norm"))
    assert reasons["lv6"] == "the normalized value lv5 is used twice"
    assert reasons["lv16"] == "the exponent is 3.0, not 2.0"
    assert reasons["lv26"] == "the dividend is 2.0, not 1.0"
    assert reasons["lv36"] == "x is float16, not one of float32, float64"
    assert reasons["lv46"].startswith("the result's shape (3, n, 8) is not provably the shape (n, 8) of x")
    assert_same_results(mod, out, [{"n": 1}, {"n": 3}])


def test_a_mean_over_another_axis_stays():
    params = 'x: R.Tensor((4, 8), "float32"), w: R.Tensor((8,), "float32")'
    text = program(params, "(4, 8)", _chain(0, "x", "w", axis="0") + "\nreturn lv6", dims=())
    assert_unchanged(with_dce(fuse_rms_norm), text)
    assert dict(explain(parse(text), "fuse_rms_norm"))["lv6"] == "the mean is over axes (0,), not the last axis alone"


#: onnxruntime's SimplifiedLayerNormalization as the importer writes it for float32 (its casts to
#: float32 gone): square and rsqrt; and a square written as a product
SQUARE_RSQRT = """
lv = R.square(x)
lv1 = R.mean(lv, axis=(-1,), keepdims=True)
lv2 = R.add(lv1, R.const(1e-06, "float32"))
lv4 = R.rsqrt(lv2)
lv5 = R.multiply(x, lv4)
lv6 = R.multiply(lv5, w)
return lv6
"""
PRODUCT = DYNAMO.format(dtype="float32").replace('R.power(x, R.const(2.0, "float32"))', "R.multiply(x, x)")


@pytest.mark.parametrize("body", [SQUARE_RSQRT, PRODUCT], ids=["square_rsqrt", "product"])
def test_the_other_spellings_fuse_too(body):
    params = PARAMS.format(dtype="float32")
    mod, out = assert_rewrites(with_dce(fuse_rms_norm), program(params, RET, body, "float32", DIMS),
                               program(params, RET, _fused(repr(float(np.float32(1e-6)))), "float32", DIMS))
    assert_same_results(mod, out, [{"n": 1, "s": 1}, {"n": 3, "s": 7}, {"n": 0, "s": 2}], rtol=0, atol=0)


def _simplified_layer_norm_model(epsilon: float):
    from onnx import TensorProto, helper, numpy_helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "s", 16])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    scale = numpy_helper.from_array(np.random.default_rng(2).standard_normal(16).astype(np.float32), "scale")
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], axis=-1, epsilon=epsilon)
    graph = helper.make_graph([node], "rms", [x], [y], initializer=[scale])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def test_simplified_layer_norm_runs_as_one_kernel_against_onnxruntime():
    """onnxruntime's RMS norm op, imported and built at -O2: one nn.rms_norm call, the -O0 chain's
    results bit for bit and onnxruntime's within float32 rounding."""
    import relaxpack
    from relaxpack.check import onnxruntime_session
    from relaxpack.runtime import VirtualMachine
    model = _simplified_layer_norm_model(1e-5)
    fused = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model), opt_level=2))
    plain = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model), opt_level=0))
    labels = {fused._label(ins) for prepared in fused._prepared for ins in prepared.func.instructions}
    assert "kernel.nn.rms_norm" in labels and not {"kernel.mean", "kernel.rsqrt"} & labels
    session = onnxruntime_session(model, threads=1)
    rng = np.random.default_rng(3)
    for n, s in [(1, 5), (3, 17), (2, 0)]:
        feeds = {"x": (rng.standard_normal((n, s, 16)) * 3).astype(np.float32)}
        got = fused.run(feeds)["y"]
        np.testing.assert_array_equal(got, plain.run(feeds)["y"])
        np.testing.assert_allclose(got, session.run(None, feeds)[0], rtol=2e-6, atol=2e-6)

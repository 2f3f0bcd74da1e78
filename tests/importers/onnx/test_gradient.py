"""Gradient (ai.onnx.preview.training): reverse-mode differentiation at import
(importers/onnx/gradient.py), checked against central finite differences of
the forward model run by onnx's reference evaluator (float64), and against the two backend
models of onnx's suite (onnx's reference evaluator has no Gradient; the
suite's data sets are the reference). Plus the errors."""

from __future__ import annotations

import glob
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from relaxpack.errors import RelaxpackError, UnsupportedOpError
from relaxpack.runtime import VirtualMachine

from .helpers import reference

TRAINING = "ai.onnx.preview.training"
F64 = TensorProto.DOUBLE


def _model(nodes, feeds, y, xs, zs=(), sym=None, consts=None, opset=17, grad_first=False):
    """Forward ``nodes`` plus Gradient(xs, zs, y); outputs y then dy/dx for each x."""
    grads = [f"d_{x}" for x in xs]
    gradient = helper.make_node("Gradient", [*xs, *zs], grads, domain=TRAINING, name="grad", xs=list(xs),
                                y=y, **({"zs": list(zs)} if zs else {}))
    inputs = [helper.make_tensor_value_info(n, F64, (sym or {}).get(n, a.shape)) for n, a in feeds.items()]
    outputs = [helper.make_tensor_value_info(n, F64, None) for n in (y, *grads)]
    inits = [numpy_helper.from_array(a, n) for n, a in (consts or {}).items()]
    body = [gradient, *nodes] if grad_first else [*nodes, gradient]
    graph = helper.make_graph(body, "g", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(TRAINING, 1)],
                             ir_version=10)


def _forward_sum(nodes, feeds, y, consts, opset):
    """sum(y) at ``feeds`` by onnx's reference evaluator (onnxruntime lacks
    float64 Mean), on the forward nodes alone."""
    inputs = [helper.make_tensor_value_info(n, F64, None) for n in feeds]
    graph = helper.make_graph(nodes, "f", inputs, [helper.make_tensor_value_info(y, F64, None)],
                              [numpy_helper.from_array(a, n) for n, a in (consts or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return lambda f: float(np.sum(reference(model, f, "onnx")[0]))


def _numeric(total, feeds, x, eps=1e-6):
    grad = np.zeros_like(feeds[x])
    for i in np.ndindex(grad.shape):
        plus, minus = {k: v.copy() for k, v in feeds.items()}, {k: v.copy() for k, v in feeds.items()}
        plus[x][i] += eps
        minus[x][i] -= eps
        grad[i] = (total(plus) - total(minus)) / (2 * eps)
    return grad


def check_gradient(nodes, feeds, y, xs, zs=(), sym=None, consts=None, opset=17, more=()):
    """Import and run the Gradient model; y must match onnxruntime's forward,
    each gradient the finite differences, at ``feeds`` and each of ``more``."""
    model = _model(nodes, feeds, y, xs, zs, sym, consts, opset)
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    total = _forward_sum(nodes, feeds, y, consts, opset)
    for f in (feeds, *more):
        got = vm.run(f)
        assert np.isclose(np.sum(got[y]), total(f), rtol=1e-12, atol=1e-12)
        for x in xs:
            assert got[f"d_{x}"].shape == f[x].shape, x
            np.testing.assert_allclose(got[f"d_{x}"], _numeric(total, f, x), rtol=1e-6, atol=1e-7, err_msg=x)


def r(*shape, seed=0, low=-2.0, high=2.0):
    return np.random.default_rng(seed).uniform(low, high, shape)


def node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs, **attrs)


# ---------------------------------------------------------------- the backend suite's models


def _simple_case(name):
    from onnx.backend.test.loader import load_model_tests
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return next(c for c in load_model_tests(kind="simple") if c.name == name)


@pytest.mark.parametrize("name", ["test_gradient_of_add", "test_gradient_of_add_and_mul"])
def test_the_backend_models(name):
    """Scalar inputs of unknown rank: broadcasts are undone at run time."""
    case = _simple_case(name)
    model = onnx.load(f"{case.model_dir}/model.onnx")
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    for folder in sorted(glob.glob(f"{case.model_dir}/test_data_set_*")):
        def load(kind, count):
            return [numpy_helper.to_array(onnx.load_tensor(f"{folder}/{kind}_{i}.pb")) for i in range(count)]
        inputs, outputs = load("input", len(model.graph.input)), load("output", len(model.graph.output))
        got = vm.run({i.name: a for i, a in zip(model.graph.input, inputs)})
        for out, want in zip(model.graph.output, outputs):
            np.testing.assert_allclose(got[out.name], want, rtol=1e-6, err_msg=out.name)


# ---------------------------------------------------------------- one op at a time


@pytest.mark.parametrize("op,shapes", [
    ("Add", [(3, 4), (4,)]), ("Sub", [(2, 1, 4), (3, 1)]), ("Mul", [(3, 1), (1, 5)]), ("Div", [(2, 3), (2, 3)]),
    ("Sum", [(3, 4), (4,), (1, 4)]), ("Mean", [(2, 3), (3,)]),
])
def test_binary_broadcasting(op, shapes):
    feeds = {f"x{i}": r(*s, seed=i) + (3.0 if op == "Div" and i else 0.0) for i, s in enumerate(shapes)}
    check_gradient([node(op, list(feeds), ["y"])], feeds, "y", list(feeds))


@pytest.mark.parametrize("op", ["Neg", "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Abs", "Identity"])
def test_unary(op):
    low = 0.5 if op in ("Log", "Sqrt") else -2.0
    x = r(3, 5, low=low)
    x[np.abs(x) < 1e-3] = 0.5                          # away from the kinks of Relu and Abs
    check_gradient([node(op, ["x"], ["y"])], {"x": x}, "y", ["x"])


@pytest.mark.parametrize("a,b", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((3, 4), (2, 4, 5)), ((2, 1, 3, 4), (3, 4, 2)),
                                 ((4,), (4, 5)), ((3, 4), (4,)), ((4,), (4,))])
def test_matmul(a, b):
    check_gradient([node("MatMul", ["a", "b"], ["y"])], {"a": r(*a), "b": r(*b, seed=1)}, "y", ["a", "b"])


@pytest.mark.parametrize("trans_a,trans_b", [(0, 0), (1, 0), (0, 1), (1, 1)])
@pytest.mark.parametrize("c_shape", [None, (5,), (3, 1), (3, 5)])
def test_gemm(trans_a, trans_b, c_shape):
    feeds = {"a": r(*((4, 3) if trans_a else (3, 4))), "b": r(*((5, 4) if trans_b else (4, 5)), seed=1)}
    if c_shape is not None:
        feeds["c"] = r(*c_shape, seed=2)
    check_gradient([node("Gemm", list(feeds), ["y"], transA=trans_a, transB=trans_b, alpha=0.5, beta=-1.5)],
                   feeds, "y", list(feeds))


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMean"])
@pytest.mark.parametrize("axes,keepdims", [([1], 0), ([0, -1], 1), (None, 0), (None, 1)])
def test_reductions(op, axes, keepdims):
    """Axes as an input (ReduceSum-13, ReduceMean-18) and as an attribute (opset 11)."""
    x = {"x": r(2, 3, 4)}
    consts = {} if axes is None else {"axes": np.array(axes, np.int64)}
    new = node(op, ["x"] + (["axes"] if axes is not None else []), ["y"], keepdims=keepdims)
    check_gradient([new], x, "y", ["x"], consts=consts, opset=18)
    old = node(op, ["x"], ["y"], keepdims=keepdims, **({} if axes is None else {"axes": axes}))
    check_gradient([old], x, "y", ["x"], opset=11)


def test_shape_ops():
    nodes = [node("Reshape", ["x", "shape"], ["r"]), node("Transpose", ["r"], ["t"], perm=[2, 0, 1]),
             node("Flatten", ["t"], ["f"], axis=2), node("Unsqueeze", ["f", "one"], ["u"]),
             node("Squeeze", ["u", "one"], ["s"]), node("Transpose", ["s"], ["y0"]), node("Mul", ["y0", "y0"], ["y"])]
    consts = {"shape": np.array([2, 3, 4], np.int64), "one": np.array([1], np.int64)}
    check_gradient(nodes, {"x": r(6, 4)}, "y", ["x"], consts=consts)


# ---------------------------------------------------------------- graphs


def _mlp():
    nodes = [node("MatMul", ["x", "w1"], ["h0"]), node("Add", ["h0", "b1"], ["h1"]), node("Relu", ["h1"], ["h"]),
             node("Gemm", ["h", "w2", "b2"], ["o"], transB=1), node("Sigmoid", ["o"], ["p"]),
             node("Sub", ["p", "t"], ["e"]), node("Mul", ["e", "e"], ["e2"]), node("ReduceMean", ["e2"], ["loss"],
                                                                                 keepdims=0)]
    return nodes


def test_an_mlp_loss_with_a_symbolic_batch():
    """Gradients of the weights (xs) with the data as zs, at several batch sizes."""
    def feeds(n, seed):
        return {"x": r(n, 4, seed=seed), "t": r(n, 2, seed=seed + 1, low=0, high=1), "w1": r(4, 6, seed=7),
                "b1": r(6, seed=8), "w2": r(2, 6, seed=9), "b2": r(2, seed=10)}
    sym = {"x": ["n", 4], "t": ["n", 2]}
    check_gradient(_mlp(), feeds(5, 0), "loss", ["w1", "b1", "w2", "b2"], zs=["x", "t"], sym=sym,
                   more=[feeds(1, 3), feeds(9, 4)])


def test_a_value_used_twice_accumulates_and_an_unused_x_gets_zeros():
    nodes = [node("Mul", ["a", "a"], ["s"]), node("Add", ["s", "a"], ["y"])]
    feeds = {"a": r(3), "b": r(2, 2)}
    model = _model(nodes, feeds, "y", ["a", "b"])
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model))).run(feeds)
    np.testing.assert_allclose(got["d_a"], 2 * feeds["a"] + 1, rtol=1e-12)
    np.testing.assert_array_equal(got["d_b"], np.zeros((2, 2)))


def test_an_intermediate_x_is_independent():
    """xs=[h]: dy/dh with h's own producer not differentiated (the spec's dY/dH)."""
    nodes = [node("Exp", ["a"], ["h"]), node("Mul", ["h", "a"], ["y"])]
    feeds = {"a": r(4)}
    model = _model(nodes, feeds, "y", ["h", "a"])
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model))).run(feeds)
    np.testing.assert_allclose(got["d_h"], feeds["a"], rtol=1e-12)
    np.testing.assert_allclose(got["d_a"], np.exp(feeds["a"]), rtol=1e-12)   # only through Mul's direct use


def test_a_gradient_node_listed_before_its_forward_nodes():
    nodes = [node("Mul", ["a", "b"], ["y"])]
    feeds = {"a": r(3), "b": r(3, seed=1)}
    model = _model(nodes, feeds, "y", ["a"], zs=["b"], grad_first=True)
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model))).run(feeds)
    np.testing.assert_allclose(got["d_a"], feeds["b"], rtol=1e-12)


# ---------------------------------------------------------------- errors


def test_an_op_without_a_derivative_is_named():
    nodes = [node("Softmax", ["a"], ["s"], name="soft"), node("Mul", ["s", "a"], ["y"])]
    model = _model(nodes, {"a": r(2, 3)}, "y", ["a"])
    with pytest.raises(UnsupportedOpError, match=r"^Gradient node 'grad' \(domain ai.onnx.preview.training, "
                                                 r"opset 1\): no derivative for Softmax node 'soft'"):
        relaxpack.from_onnx(model)


def test_an_op_off_the_path_needs_no_derivative():
    """Softmax of a zs-only value is a constant of the differentiation."""
    nodes = [node("Softmax", ["z"], ["s"]), node("Mul", ["s", "a"], ["y"])]
    check_gradient(nodes, {"a": r(2, 3), "z": r(2, 3, seed=1)}, "y", ["a"], zs=["z"])


def test_integer_and_unknown_names_fail_clearly():
    model = _model([node("Mul", ["a", "a"], ["y"])], {"a": r(3)}, "y", ["a"])
    model.graph.node[-1].attribute[-1].s = b"nowhere"
    with pytest.raises(RelaxpackError, match="'nowhere' is not a value of this graph"):
        relaxpack.from_onnx(model)
    nodes = [node("Cast", ["a"], ["i"], to=TensorProto.INT64), node("Mul", ["i", "i"], ["y"])]
    model = _model(nodes, {"a": r(3)}, "y", ["a"])
    model.graph.output[0].type.tensor_type.elem_type = TensorProto.INT64
    with pytest.raises(UnsupportedOpError, match="'y' is int64; gradients are taken of and with respect to float"):
        relaxpack.from_onnx(model)

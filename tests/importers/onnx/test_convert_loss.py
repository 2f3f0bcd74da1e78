"""NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: onnx's backend node
tests (the ``test_sce_*_expanded`` ones run NegativeLogLikelihoodLoss too),
then onnxruntime over reductions, ignore_index, weights, dtypes and symbolic
dims."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import ShapeError, UnsupportedOpError

from .backend_case import node_cases, run_backend_case
from .test_convert_elementwise import check, inp, model, node, rand

#: backend node tests relaxpack does not pass, and why (none so far)
KNOWN_FAILURES: dict[str, str] = {}


def _cases():
    return sorted(n for n in node_cases() if n.startswith(("test_nllloss", "test_sce")))


@pytest.mark.parametrize("name", _cases())
def test_backend_node(name):
    if name in KNOWN_FAILURES:
        with pytest.raises(AssertionError, match="Not equal to tolerance"):
            run_backend_case(name)
    else:
        run_backend_case(name)


def test_backend_coverage():
    assert len(_cases()) >= 100


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def _targets(rng, shape, classes, ignore_index):
    target = rng.integers(0, classes, shape).astype(np.int64)
    if ignore_index is not None:
        target[rng.random(shape) < 0.3] = ignore_index
    return target


LOSSES = {"NegativeLogLikelihoodLoss": 22, "SoftmaxCrossEntropyLoss": 13}


@pytest.mark.parametrize("op", LOSSES)
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("ignore_index", [None, -1, 4, 9])
@pytest.mark.parametrize("weighted", [False, True])
def test_loss(op, reduction, ignore_index, weighted, rng):
    """``mean`` divides by the weights that apply: ignored targets count for
    nothing, also without weights (onnxruntime; onnx's reference counts them
    for ignore_index=-1 without weights). ``ignore_index`` 9 lies past the
    classes."""
    attrs = {"reduction": reduction} | ({} if ignore_index is None else {"ignore_index": ignore_index})
    names = ["x", "t", "w"] if weighted else ["x", "t"]
    outputs = ["y", "log_prob"] if op == "SoftmaxCrossEntropyLoss" else ["y"]
    inputs = [inp("x", "float32", [3, 5, 4]), inp("t", "int64", [3, 4])] + \
        ([inp("w", "float32", [5])] if weighted else [])
    m = model(node(op, names, outputs, **attrs), inputs, outputs, opset=LOSSES[op])
    feeds = {"x": rand(rng, (3, 5, 4)), "t": _targets(rng, (3, 4), 5, ignore_index)}
    if weighted:
        feeds["w"] = rand(rng, (5,), low=0.1, high=2)
    check(m, feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", LOSSES)
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 2, 2, 1)])
@pytest.mark.parametrize("dtype, target", [("float64", "int32"), ("float32", "int32")])
def test_loss_ranks_and_dtypes(op, shape, dtype, target, rng):
    m = model(node(op, ["x", "t", "w"], ignore_index=0), [inp("x", dtype, shape),
              inp("t", target, (shape[0],) + shape[2:]), inp("w", dtype, [shape[1]])], opset=LOSSES[op])
    x = rand(rng, shape, dtype)
    if op == "NegativeLogLikelihoodLoss":
        x = np.log(rng.uniform(0.05, 1, shape)).astype(dtype)
    feeds = {"x": x, "t": _targets(rng, (shape[0],) + shape[2:], shape[1], None).astype(target),
             "w": rand(rng, (shape[1],), dtype, 0.1, 2)}
    check(m, feeds, rtol=1e-6 if dtype == "float64" else 1e-5, atol=1e-6)


@pytest.mark.parametrize("op", LOSSES)
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_loss_symbolic_dims(op, reduction, rng):
    m = model(node(op, ["x", "t"], reduction=reduction, ignore_index=-100),
              [inp("x", "float32", ["n", 6, "d"]), inp("t", "int64", ["n", "d"])], opset=LOSSES[op])
    feeds = [{"x": rand(rng, (n, 6, d)), "t": _targets(rng, (n, d), 6, -100)} for n, d in [(2, 3), (5, 1)]]
    check(m, feeds, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("x_shape, t_shape, t_dtype, attrs, error, match", [
    ([3, 5], [3], "int64", {"reduction": "avg"}, UnsupportedOpError, "reduction='avg'"),
    ([3, 5], [3], "float32", {}, ShapeError, "must be integers"),
    ([5], [1], "int64", {}, ShapeError, r"\(N, C, \.\.\.\)"),
    ([3, 5, 2], [3], "int64", {}, ShapeError, "rank 2"),
])
def test_loss_errors(x_shape, t_shape, t_dtype, attrs, error, match):
    m = model(node("NegativeLogLikelihoodLoss", ["x", "t"], **attrs),
              [inp("x", "float32", x_shape), inp("t", t_dtype, t_shape)], opset=22)
    with pytest.raises(error, match=match):
        relaxpack.from_onnx(m)

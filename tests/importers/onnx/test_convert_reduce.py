"""Reductions and ArgMax/ArgMin against onnxruntime: axes as attribute
(before opset 13 / 18) and as a constant input (after), keepdims,
noop_with_empty_axes, empty reductions, symbolic dims; and onnx's own node
tests, whose axes are graph inputs, with the axes frozen into initializers."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import relaxpack
from relaxpack.errors import ShapeError

from relaxpack.runtime import VirtualMachine
from relaxpack.vm_build import build

from .backend_case import assert_close, node_cases
from .test_convert_elementwise import check, inp, model, node, rand

REDUCE = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]
AXES_INPUT_SINCE = {op: 13 if op == "ReduceSum" else 18 for op in REDUCE}


@pytest.fixture
def rng():
    return np.random.default_rng(0)


def feeds_for(op, rng, shapes):
    low = 0.2 if op == "ReduceLogSum" else -2
    return [{"x": rand(rng, s, low=low, high=2)} for s in shapes]


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("axes, keepdims", [((1,), 1), ((0, 2), 0), ((-1,), 1), (None, 0), (None, 1)])
def test_reduce_axes_attribute(op, axes, keepdims, rng):
    attrs = {"keepdims": keepdims} | ({} if axes is None else {"axes": list(axes)})
    m = model(node(op, ["x"], **attrs), [inp("x", "float32", ["n", 3, 4])], opset=AXES_INPUT_SINCE[op] - 1)
    check(m, feeds_for(op, rng, [(2, 3, 4), (5, 3, 4)]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("axes, keepdims", [((1,), 0), ((0, -1), 1), ((), 1), (None, 0)])
def test_reduce_axes_input(op, axes, keepdims, rng):
    names = ["x"] if axes is None else ["x", "axes"]
    inits = {} if axes is None else {"axes": np.array(axes, np.int64)}
    m = model(node(op, names, keepdims=keepdims), [inp("x", "float32", ["n", 3, 4])], opset=18,
              initializers=inits)
    check(m, feeds_for(op, rng, [(1, 3, 4), (3, 3, 4)]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", REDUCE)
def test_noop_with_empty_axes(op, rng):
    """No reduction; the composed ops keep their elementwise steps (L2: |x|)."""
    m = model(node(op, ["x", "axes"], noop_with_empty_axes=1), [inp("x", "float32", ["n", 3])], opset=18,
              initializers={"axes": np.zeros(0, np.int64)})
    mod = check(m, feeds_for(op, rng, [(2, 3), (4, 3)]), rtol=1e-6)
    if op in ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd"):
        assert "R.call" not in mod.script() and "= R." not in mod.script(), mod.script()


# ---------------------------------------------------------------- axes fed at run time


def runtime_axes_model(op, x_shape, axes_len, keepdims=1, noop=0, dtype="float32"):
    """``op(x, axes)`` with ``axes`` a graph input of length ``axes_len`` (a dim name: symbolic)."""
    attrs = {"keepdims": keepdims} | ({"noop_with_empty_axes": noop} if noop else {})
    return model(node(op, ["x", "axes"], **attrs), [inp("x", dtype, x_shape), inp("axes", "int64", [axes_len])],
                 opset=AXES_INPUT_SINCE[op])


def with_axes(feeds, *axes_values):
    return [f | {"axes": np.array(a, np.int64)} for f in feeds for a in axes_values]


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("keepdims", [0, 1])
def test_reduce_axes_fed_at_run_time(op, keepdims, rng):
    """One build, several axes (negative ones too) and input sizes."""
    m = runtime_axes_model(op, ["n", 3, 5], 1, keepdims)
    mod = check(m, with_axes(feeds_for(op, rng, [(2, 3, 5), (7, 3, 5)]), [0], [1], [-1], [-3]),
                rtol=1e-5, atol=1e-5)
    assert 'R.call_packed("dyn.reduce"' in mod.script()
    m = runtime_axes_model(op, ["n", 3, 5], 2, keepdims)
    check(m, with_axes(feeds_for(op, rng, [(1, 3, 5), (4, 3, 5)]), [0, 2], [-1, 1], [2, 0]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", REDUCE)
@pytest.mark.parametrize("noop", [0, 1])
def test_reduce_axes_of_run_time_length_may_be_empty(op, noop, rng):
    """Empty axes fed at run time reduce every axis, or none with noop_with_empty_axes."""
    m = runtime_axes_model(op, [3, "n"], "k", keepdims=1, noop=noop)
    check(m, with_axes(feeds_for(op, rng, [(3, 5), (3, 1)]), [], [1], [-2, 1]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean", "ReduceL1",
                                "ReduceSumSquare", "ReduceLogSumExp"])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_reduce_int_axes_at_run_time(op, dtype, rng):
    m = runtime_axes_model(op, [3, 5], 1, keepdims=0, dtype=dtype)
    check(m, with_axes([{"x": rand(rng, (3, 5), dtype, -9, 9)}], [0], [-1]))


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean", "ReduceL2",
                                "ReduceLogSumExp"])
def test_reduce_empty_tensor_at_run_time(op):
    """Reducing the empty axis gives the identity; reducing another keeps it empty."""
    m = runtime_axes_model(op, [2, "n", 3], 1)
    check(m, with_axes([{"x": np.zeros((2, 0, 3), np.float32)}], [1], [0], [-1]), reference="ref")


def test_reduce_axes_computed_from_a_symbolic_dim(rng):
    """axes = [dim 1 - 2]: symbolic at import time, so it is read at run time."""
    nodes = [node("Shape", ["x"], ["s"]), node("Gather", ["s", "one"], ["g"], axis=0), node("Sub", ["g", "two"], ["a"]),
             node("Unsqueeze", ["a", "zero"], ["axes"]), node("ReduceMax", ["x", "axes"], keepdims=1)]
    m = model(nodes, [inp("x", "float32", [2, "n", 3])], opset=18,
              initializers={"one": np.array(1), "two": np.array(2), "zero": np.array([0])})
    check(m, [{"x": rand(rng, (2, n, 3))} for n in (2, 3, 4)])


def test_reduce_keeps_dims_of_one_and_infers_the_rank():
    m = runtime_axes_model("ReduceSum", ["n", 1, 4], 2, keepdims=0)
    assert relaxpack.from_onnx(m)["main"].ret_struct_info.ndim == 1
    mod = relaxpack.from_onnx(runtime_axes_model("ReduceSum", ["n", 1, 4], 1, keepdims=1))
    assert mod["main"].ret_struct_info.shape[1] == 1


@pytest.mark.parametrize("op", REDUCE)
def test_reduce_axes_of_run_time_length_without_keepdims_give_the_runs_rank(op, rng):
    """tf2onnx's reduce_sum over axes computed at run time: as many dims go as axes come (the
    result's rank is the run's; it was refused as needing a static length)."""
    m = runtime_axes_model(op, [3, "n"], "k", keepdims=0)
    assert relaxpack.from_onnx(m)["main"].ret_struct_info.ndim == -1
    check(m, with_axes(feeds_for(op, rng, [(3, 5), (3, 1)]), [1], [0, -1], [-2]), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("axes, message", [([1, -1], "twice"), ([2], "out of range")])
def test_reduce_bad_axes_at_run_time_are_errors(axes, message):
    vm = VirtualMachine(build(relaxpack.from_onnx(runtime_axes_model("ReduceSum", [2, 3], len(axes)))))
    with pytest.raises(ShapeError, match=message):
        vm.run({"x": np.ones((2, 3), np.float32), "axes": np.array(axes, np.int64)})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceMean", "ReduceL1",
                                "ReduceSumSquare"])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_reduce_int(op, dtype, rng):
    m = model(node(op, ["x", "axes"], keepdims=0), [inp("x", dtype, [3, 5])], opset=18,
              initializers={"axes": np.array([1], np.int64)})
    check(m, {"x": rand(rng, (3, 5), dtype, -9, 9)})


@pytest.mark.parametrize("op", ["ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceLogSum",
                                "ReduceLogSumExp", "ReduceSumSquare"])
def test_empty_reduction(op):
    """An empty reduced axis gives the identity (0, 1, -inf, +inf, log 0)."""
    m = model(node(op, ["x", "axes"], keepdims=1), [inp("x", "float32", [2, 0, 3])], opset=18,
              initializers={"axes": np.array([1], np.int64)})
    check(m, {"x": np.zeros((2, 0, 3), np.float32)}, reference="ref")


def test_log_sum_exp_is_stable_with_large_and_infinite_values():
    x = np.array([[1000.0, 1000.0, -5], [-np.inf, -np.inf, -np.inf], [np.inf, 1, 2], [-1000, -1001, -1002]],
                 np.float32)
    m = model(node("ReduceLogSumExp", ["x"], axes=[1], keepdims=0), [inp("x", "float32", [4, 3])], opset=13)
    check(m, {"x": x}, rtol=1e-6, atol=1e-4)


def test_reduce_max_bool():
    m = model(node("ReduceMax", ["x", "axes"], keepdims=0), [inp("x", "bool", [2, 3])], opset=20,
              initializers={"axes": np.array([1], np.int64)})
    check(m, {"x": np.array([[True, False, False], [False, False, False]])}, reference="ref")


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("axis, keepdims, last", [(0, 1, 0), (1, 0, 0), (-1, 1, 1), (1, 0, 1)])
def test_arg_reduce(op, axis, keepdims, last, rng):
    m = model(node(op, ["x"], axis=axis, keepdims=keepdims, select_last_index=last),
              [inp("x", "float32", ["n", 4, 3])], opset=13)
    feeds = [{"x": np.round(rand(rng, (n, 4, 3)))} for n in (2, 5)]      # ties
    check(m, feeds)


def test_arg_max_int_default_attributes(rng):
    m = model(node("ArgMax", ["x"]), [inp("x", "int32", [5, 2])], opset=11)
    check(m, {"x": rand(rng, (5, 2), "int32", -3, 3)})


# ---------------------------------------------------------------- onnx's node tests, axes frozen


def frozen(case_model: onnx.ModelProto, inputs, frozen_name: str = "axes"):
    """The model with the graph input ``frozen_name`` turned into an
    initializer of its value in the data set, and the remaining inputs."""
    m = onnx.ModelProto()
    m.CopyFrom(case_model)
    names = [i.name for i in m.graph.input]
    rest = []
    for name, value in zip(names, inputs):
        if name == frozen_name:
            m.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
        else:
            rest.append(value)
    kept = [i for i in m.graph.input if i.name != frozen_name]
    del m.graph.input[:]
    m.graph.input.extend(kept)
    return m, rest


def _backend_reduce_cases():
    prefixes = ("test_reduce_", "test_argmax_", "test_argmin_")
    return sorted(name for name in node_cases() if name.startswith(prefixes) and not name.endswith("_expanded"))


def test_onnx_backend_reduce_cases_with_frozen_axes():
    names = _backend_reduce_cases()
    assert len(names) > 100
    for name in names:
        case = node_cases()[name]
        for inputs, expected in case.data_sets:
            m, rest = frozen(case.model, inputs)
            vm = VirtualMachine(build(relaxpack.from_onnx(m)))
            outputs = list(vm.run(dict(zip([i.name for i in m.graph.input], rest))).values())
            for got, want in zip(outputs, expected):
                assert_close(got, want, case.rtol, case.atol, name)

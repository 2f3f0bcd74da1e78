"""Inputs at run time: every input is either handled correctly (the same
output as onnxruntime, or as its contiguous copy) or rejected with an
InputError that names it. Never a wrong answer, never a modified input."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from relaxpack.errors import InputError
from relaxpack.runtime import VirtualMachine

from .differential import compare, ort_session

F = TensorProto.FLOAT
OUTPUTS = ("sum", "mm", "t", "sm")


def two_input_model() -> onnx.ModelProto:
    """x, y: float32 [n, 4] (n in 1..8): Relu(x) + y, x @ w, Transpose(y), Softmax(x)."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3) / 10, "w")
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "y"], ["sum"]),
             helper.make_node("MatMul", ["x", "w"], ["mm"]), helper.make_node("Transpose", ["y"], ["t"]),
             helper.make_node("Softmax", ["x"], ["sm"], axis=-1)]
    graph = helper.make_graph(nodes, "inputs", [helper.make_tensor_value_info("x", F, ["n", 4]),
                                                 helper.make_tensor_value_info("y", F, ["n", 4])],
                              [onnx.ValueInfoProto(name=n) for n in OUTPUTS], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def scalar_model() -> onnx.ModelProto:
    """s: float32 [], k: int64 []: s * 2, k + 1."""
    nodes = [helper.make_node("Mul", ["s", "two"], ["a"]), helper.make_node("Add", ["k", "one"], ["b"])]
    graph = helper.make_graph(nodes, "scalars", [helper.make_tensor_value_info("s", F, []),
                                                  helper.make_tensor_value_info("k", TensorProto.INT64, [])],
                              [onnx.ValueInfoProto(name="a"), onnx.ValueInfoProto(name="b")],
                              [numpy_helper.from_array(np.array(2, np.float32), "two"),
                               numpy_helper.from_array(np.array(1, np.int64), "one")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


@pytest.fixture(scope="module")
def two():
    m = two_input_model()
    exe = relaxpack.build(relaxpack.from_onnx(m, dims={"n": (1, 8)}))
    return m, VirtualMachine(exe), ort_session(m)


@pytest.fixture(scope="module")
def scalars():
    m = scalar_model()
    return m, VirtualMachine(relaxpack.build(relaxpack.from_onnx(m))), ort_session(m)


def feeds(n=3, seed=0):
    rng = np.random.default_rng(seed)
    return {k: rng.standard_normal((n, 4)).astype(np.float32) for k in ("x", "y")}


def assert_matches(vm, session, given, reference_feeds, names):
    """Run ``given`` (maybe odd arrays); compare with onnxruntime on contiguous copies."""
    before = {k: np.array(v, copy=True) for k, v in given.items()}
    got = vm.run(given)
    want = session.run(None, {k: np.ascontiguousarray(v) for k, v in reference_feeds.items()})
    for name, ref in zip(names, want):
        assert compare(got[name], ref) is None, (name, compare(got[name], ref))
    for k, v in given.items():
        assert np.array_equal(np.asarray(v), before[k], equal_nan=True), f"input {k!r} was modified"
    return got


# ---------------------------------------------------------------- rejected, naming the input
@pytest.mark.parametrize("bad, named", [
    (lambda f: {"x": f["x"]}, "y"),                                                   # missing
    (lambda f: {**f, "z": f["x"]}, "z"),                                              # extra
    (lambda f: {"X": f["x"], "y": f["y"]}, "X"),                                      # wrong name
    (lambda f: {**f, "x": f["x"].astype(np.float64)}, "x"),                           # dtype
    (lambda f: {**f, "x": f["x"].astype(np.float16)}, "x"),
    (lambda f: {**f, "y": f["y"].astype(np.int32)}, "y"),
    (lambda f: {**f, "x": f["x"][None]}, "x"),                                        # rank
    (lambda f: {**f, "y": f["y"][0]}, "y"),
    (lambda f: {**f, "x": np.zeros((3, 5), np.float32)}, "x"),                         # static dim
    (lambda f: {"x": np.zeros((9, 4), np.float32), "y": np.zeros((9, 4), np.float32)}, "x"),   # n > 8
    (lambda f: {"x": np.zeros((0, 4), np.float32), "y": np.zeros((0, 4), np.float32)}, "x"),   # n < 1
    (lambda f: {**f, "y": np.zeros((4, 4), np.float32)}, "y"),                          # n of x != n of y
    (lambda f: {**f, "x": f["x"].tolist()}, "x"),                                     # a list is float64
    (lambda f: {**f, "x": "not an array"}, "x"),
    (lambda f: {**f, "x": None}, "x"),
    (lambda f: {**f, "x": f["x"].astype(">f4")}, "x"),                                 # byte-swapped
])
def test_bad_inputs_are_rejected_naming_them(two, bad, named):
    _, vm, _ = two
    with pytest.raises(InputError) as err:
        vm.run(bad(feeds()))
    assert repr(named) in str(err.value) or f"'{named}'" in str(err.value), str(err.value)


# ---------------------------------------------------------------- handled correctly
def odd_layouts(f):
    """Views with the same values as ``f`` but other layouts."""
    x, y = f["x"], f["y"]
    big = np.zeros((x.shape[0] * 2, 8), np.float32)
    big[::2, ::2] = x
    yield "stepped slice", {"x": big[::2, ::2], "y": y}
    yield "transposed view", {"x": np.ascontiguousarray(x.T).T, "y": np.ascontiguousarray(y.T).T}
    rev = np.ascontiguousarray(x[::-1, ::-1])
    yield "negative strides", {"x": rev[::-1, ::-1], "y": y[::-1][::-1]}
    yield "Fortran order", {"x": np.asfortranarray(x), "y": np.asfortranarray(y)}
    ro_x, ro_y = x.copy(), y.copy()
    ro_x.flags.writeable = False
    ro_y.flags.writeable = False
    yield "read-only", {"x": ro_x, "y": ro_y}
    raw = np.zeros(x.nbytes + 1, np.uint8)
    unaligned = raw[1:].view(np.float32).reshape(x.shape)
    unaligned[...] = x
    yield "unaligned", {"x": unaligned, "y": y}
    yield "broadcast view (zero strides)", {"x": np.broadcast_to(x[:1], x.shape), "y": y}
    yield "ndarray subclass", {"x": x.view(_Sub), "y": y.view(_Sub)}
    yield "np.matrix (where * is a matrix product)", {"x": np.asmatrix(x), "y": np.asmatrix(y)}


class _Sub(np.ndarray):
    """A user's ndarray subclass."""


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")   # np.matrix
@pytest.mark.parametrize("n", [1, 3, 8])
def test_odd_layouts_give_the_contiguous_answer(two, n):
    _, vm, session = two
    f = feeds(n, seed=n)
    for label, given in odd_layouts(f):
        reference = {k: np.ascontiguousarray(v) for k, v in given.items()}
        try:
            assert_matches(vm, session, given, reference, OUTPUTS)
        except InputError as err:   # allowed, if it names the input
            assert "'x'" in str(err) or "'y'" in str(err), (label, str(err))


@pytest.mark.filterwarnings("ignore::PendingDeprecationWarning")
def test_same_vm_alternates_shapes_and_layouts(two):
    _, vm, session = two
    for i, n in enumerate([5, 1, 8, 2, 5]):
        f = feeds(n, seed=10 + i)
        layouts = list(odd_layouts(f))
        label, given = layouts[i % len(layouts)]
        assert_matches(vm, session, given, f, OUTPUTS)


def test_nan_and_inf_inputs(two):
    _, vm, session = two
    f = feeds(4, seed=3)
    f["x"][0, 0], f["x"][1, 2], f["y"][2, 1], f["x"][3, 3] = np.nan, np.inf, -np.inf, -np.inf
    assert_matches(vm, session, f, f, OUTPUTS)


@given(st.integers(1, 8), st.integers(1, 3), st.integers(1, 3), st.booleans(), st.booleans(), st.integers(0, 2 ** 16))
@settings(max_examples=60, deadline=None, derandomize=True, database=None)
def test_random_strided_views(n, step0, step1, flip, transpose, seed):
    m = two_input_model()
    vm, session = _cached(m)
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n * step0, 4 * step1)).astype(np.float32)
    x = base[::step0, ::step1]
    if flip:
        x = x[::-1]
    if transpose:
        x = np.ascontiguousarray(x.T).T
    y = rng.standard_normal((n, 4)).astype(np.float32)
    assert_matches(vm, session, {"x": x, "y": y}, {"x": x.copy(), "y": y}, OUTPUTS)


_CACHE = {}


def _cached(m):
    if "vm" not in _CACHE:
        _CACHE["vm"] = (VirtualMachine(relaxpack.build(relaxpack.from_onnx(m, dims={"n": (1, 8)}))), ort_session(m))
    return _CACHE["vm"]


# ---------------------------------------------------------------- scalars
@pytest.mark.parametrize("s, k", [
    (np.array(1.5, np.float32), np.array(4, np.int64)),      # 0-d arrays
    (np.float32(1.5), np.int64(4)),                           # numpy scalars
])
def test_scalars(scalars, s, k):
    m, vm, session = scalars
    got = vm.run({"s": s, "k": k})
    want = session.run(None, {"s": np.asarray(s), "k": np.asarray(k)})
    assert compare(got["a"], want[0]) is None and compare(got["b"], want[1]) is None


@pytest.mark.parametrize("s, k, named", [
    (1.5, np.array(4, np.int64), "s"),                        # a Python float is float64
    (np.array([1.5], np.float32), np.array(4, np.int64), "s"),  # shape [1] where [] is declared
    (np.array(1.5, np.float32), np.array(4, np.int32), "k"),
])
def test_scalars_of_the_wrong_kind_are_rejected(scalars, s, k, named):
    _, vm, _ = scalars
    with pytest.raises(InputError, match=f"'{named}'"):
        vm.run({"s": s, "k": k})


def test_python_int_for_an_int64_scalar_is_handled_or_rejected(scalars):
    _, vm, _ = scalars
    try:
        got = vm.run({"s": np.array(1.5, np.float32), "k": 4})
    except InputError as err:
        assert "'k'" in str(err)
        return
    assert got["b"].dtype == np.int64 and int(got["b"]) == 5


# ---------------------------------------------------------------- outputs
def test_outputs_survive_the_next_run(two):
    """Outputs are not views of the VM's arena: a later run does not change them."""
    _, vm, _ = two
    first_feeds = feeds(3, seed=1)
    first = {k: v for k, v in vm.run(first_feeds).items()}
    kept = {k: v.copy() for k, v in first.items()}
    vm.run(feeds(8, seed=2))
    vm.run(feeds(3, seed=3))
    for k in first:
        assert np.array_equal(first[k], kept[k]), k


def test_an_output_that_is_a_constant_cannot_corrupt_later_runs():
    w = numpy_helper.from_array(np.arange(3, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("Identity", ["w"], ["c"]), helper.make_node("Add", ["x", "w"], ["s"])],
                              "const_out", [helper.make_tensor_value_info("x", F, [3])],
                              [onnx.ValueInfoProto(name="c"), onnx.ValueInfoProto(name="s")], [w])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(m)))
    out = vm.run({"x": np.zeros(3, np.float32)})
    try:
        out["c"][:] = 100.0
    except ValueError:   # read-only: fine
        pass
    again = vm.run({"x": np.zeros(3, np.float32)})
    assert np.array_equal(again["s"], np.arange(3, dtype=np.float32)), "a written output changed the model"

"""A float Range over a shape cast to float (YOLO's anchor grids: ``arange(0.0, float(w), 1.0)``)
imports as the int range of static length rounded once, not a packed ``dyn.range`` with a fresh
dim: its values are the float Range's bit for bit (checked against onnx's reference evaluator
and onnxruntime), its grid stays shape-only (the shape memo computes it once per input shape),
and the bound that makes it exact (integers of at most 2**24 in float32) is checked per input
shape. Other bounds (a fractional start, float16, a limit that is no shape) keep the packed
kernel."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from relaxpack.errors import RelaxpackError
from relaxpack.importers.onnx.converters import algorithm
from relaxpack.runtime import VirtualMachine

from ...runtime.test_shape_value_memo import _memo_kernels
from .helpers import check_model, rand

FLOAT, FLOAT16, DOUBLE = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE
NP = {FLOAT: np.float32, FLOAT16: np.float16, DOUBLE: np.float64}


def grid_model(start=0.0, delta=1.0, dtype=FLOAT, axis=1, offset=0, data=False, scaled=False):
    """``r = Range(start, Cast(Shape(x)[axis] + offset), delta)`` and ``y = 2 * grid``, the grid
    being ``r + 0.5`` as a row expanded to ``(h, len(r))``; both are outputs. With ``data``
    (``x`` and the grid of one shape) ``y = x * grid`` is the only output, as in a detection head.
    With ``scaled`` the float limit itself is read by an op too (``y`` divided by it)."""
    c = lambda name, v, t=dtype: numpy_helper.from_array(np.array(v, NP[t]), name)  # noqa: E731
    i64 = lambda name, *v: numpy_helper.from_array(np.array(v, np.int64), name)  # noqa: E731
    nodes = [
        helper.make_node("Shape", ["x"], ["shp"]),
        helper.make_node("Gather", ["shp", "axis"], ["n0"], axis=0),
        helper.make_node("Add", ["n0", "offset"], ["n"]),
        helper.make_node("Cast", ["n"], ["limit"], to=dtype),
        helper.make_node("Range", ["start", "limit", "delta"], ["r"]),
        helper.make_node("Add", ["r", "half"], ["rh"]),
        helper.make_node("Unsqueeze", ["rh", "ax0"], ["row"]),
        helper.make_node("Gather", ["shp", "zero"], ["h"], axis=0),
        helper.make_node("Unsqueeze", ["h", "ax0"], ["h1"]),
        helper.make_node("Shape", ["r"], ["rlen"]),
        helper.make_node("Concat", ["h1", "rlen"], ["gshape"], axis=0),
        helper.make_node("Expand", ["row", "gshape"], ["grid"]),
        helper.make_node("Mul", ["grid", "x" if data else "two"], ["y" if not scaled else "y0"]),
    ]
    if scaled:
        nodes.append(helper.make_node("Div", ["y0", "limit"], ["y"]))
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", FLOAT, ["h", "w"])],
        [onnx.ValueInfoProto(name=name) for name in (("y",) if data else ("y", "r"))],
        [c("start", start), c("delta", delta), c("half", 0.5), c("two", 2.0),
         numpy_helper.from_array(np.array(axis, np.int64), "axis"),
         numpy_helper.from_array(np.array(0, np.int64), "zero"),
         numpy_helper.from_array(np.array(offset, np.int64), "offset"), i64("ax0", 0)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)


def _kernels(mod) -> set[str]:
    text = mod.script()
    return {name for name in ("dyn.range", "R.range(") if name in text}


SHAPES = [(3, 5), (1, 1), (2, 0), (4, 17), (3, 5), (1, 8)]


@pytest.mark.parametrize("start,delta,dtype,offset", [
    (0.0, 1.0, FLOAT, 0), (2.0, 1.0, FLOAT, 0), (0.0, 3.0, FLOAT, 0), (7.0, -1.0, FLOAT, 0),
    (-4.0, 2.0, FLOAT, -3), (0.0, 1.0, DOUBLE, 0), (1.0, 5.0, DOUBLE, 2),
])
def test_integral_bounds_give_a_static_range_equal_to_the_references(start, delta, dtype, offset):
    model = grid_model(start, delta, dtype, offset=offset)
    feeds = [{"x": rand(*s)} for s in SHAPES]
    mod = check_model(model, *feeds, ref="onnx")
    assert _kernels(mod) == {"R.range("}
    check_model(model, *feeds, ref="ort")
    for level in (0, 2):     # bit for bit the references at both levels, the shape memo's runs too
        vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model), opt_level=level))
        ref = onnx.reference.ReferenceEvaluator(model)
        for f in feeds:
            got, want = vm.run(f), ref.run(None, f)
            for name, expected in zip(("y", "r"), want):
                assert got[name].dtype == expected.dtype and got[name].shape == expected.shape
                np.testing.assert_array_equal(got[name], expected)


def test_the_float_limit_read_by_another_op_is_made():
    model = grid_model(scaled=True)
    mod = check_model(model, *({"x": rand(*s)} for s in SHAPES if s[1]), ref="onnx")
    assert _kernels(mod) == {"R.range("}


@pytest.mark.parametrize("start,delta,dtype", [(0.5, 1.0, FLOAT), (0.0, 0.5, FLOAT), (0.0, 1.0, FLOAT16)])
def test_other_bounds_keep_the_packed_range(start, delta, dtype):
    model = grid_model(start, delta, dtype)
    mod = check_model(model, *({"x": rand(*s)} for s in SHAPES[:4]), ref="onnx")
    assert "dyn.range" in _kernels(mod)


@pytest.mark.parametrize("level", [0, 2])
def test_the_grid_is_computed_once_per_input_shape(level):
    model = grid_model(data=True)
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model), opt_level=level))
    assert {"range", "add"} <= set(_memo_kernels(vm))
    ref = onnx.reference.ReferenceEvaluator(model)
    for s in SHAPES:
        x = rand(*s)
        np.testing.assert_array_equal(vm.run({"x": x})["y"], ref.run(None, {"x": x})[0])
    memo = vm._prepared[0].compiled.memo
    # the kept kernel outputs, handed out as read-only views (shape_memo.filler: their readers keep
    # what they prepared for a view)
    kept = [v for entry in memo.values() for v in entry if isinstance(v, np.ndarray)]
    assert len(memo) == len(set(SHAPES)) and kept
    assert all(v.base is not None and v.base.base is None for v in kept)
    assert not any(v.flags.writeable or v.base.flags.writeable for v in kept)


def test_the_exact_bound_is_checked_per_input_shape(monkeypatch):
    """Past the bound (made 8 here: 2**24 in float32 needs a 64 MB range) the run is refused
    with the relation it broke; at the bound it runs."""
    monkeypatch.setitem(algorithm.EXACT_INTS, "float32", 8)
    model = grid_model(0.0, 1.0, FLOAT)
    check_model(model, {"x": rand(2, 8)}, {"x": rand(1, 3)}, ref="onnx")
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    with pytest.raises(RelaxpackError, match="<= 8"):
        vm.run({"x": rand(2, 9)})

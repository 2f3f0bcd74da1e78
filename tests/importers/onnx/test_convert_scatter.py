"""Converters of GatherND, ScatterND, ScatterElements and Scatter
(converters/scatter.py) against onnxruntime, plus ONNX's backend node tests."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import ShapeError, UnsupportedOpError
from relaxpack.runtime import VirtualMachine
from relaxpack.vm_build import build

from .backend_case import node_cases, run_backend_case
from .test_convert_image import check_model
from .helpers import one_node, rand, reference

DTYPES = [np.float32, np.float64, np.float16, np.int32, np.int64, np.int8, np.uint8, np.bool_]
EXACT = dict(rtol=0, atol=0)


def i64(*values):
    return np.array(values, np.int64)


# ---------------------------------------------------------------- GatherND


GATHER_ND_CASES = [
    ((2, 2), [[0, 0], [1, 1]], 0), ((2, 2), [[1], [0]], 0), ((2, 2, 2), [[[0, 1]], [[1, 0]]], 0),
    ((3, 4, 5), [[-1, 2], [0, -4], [2, 3]], 0), ((2, 2, 2), [[1], [0]], 1), ((2, 3, 4), [[[1, -1]], [[0, 0]]], 1),
    ((2, 3, 4, 5), [[[1], [2], [0]], [[-1], [0], [3]]], 2),
]


@pytest.mark.parametrize("opset, dshape, indices, batch_dims", [
    (opset, *case) for opset in (11, 12, 13) for case in GATHER_ND_CASES if opset >= 12 or case[2] == 0])
def test_gather_nd(opset, dshape, indices, batch_dims):
    attrs = {"batch_dims": batch_dims} if opset >= 12 else {}
    x = rand(*dshape)
    check_model(one_node("GatherND", {"x": x}, consts={"i": np.array(indices, np.int64)}, attrs=attrs, opset=opset),
                {"x": x}, tol=EXACT)


@pytest.mark.parametrize("dtype", DTYPES)
def test_gather_nd_dtypes(dtype):
    x = rand(3, 4, 2, dtype=dtype)
    indices = np.array([[[0, 1], [2, -1]], [[-3, 0], [1, 3]]], np.int64)
    check_model(one_node("GatherND", {"x": x, "i": indices}, opset=13), {"x": x, "i": indices}, tol=EXACT)


def test_gather_nd_symbolic_dims_one_build():
    model = one_node("GatherND", {"x": rand(2, 5, 3), "i": i64(0, 0).reshape(1, 2)}, opset=13,
                     sym={"x": ["batch", 5, 3], "i": ["n", 2]})
    feeds = [{"x": rand(b, 5, 3, seed=b), "i": np.stack([np.arange(n) % b, np.arange(n) % 5], 1).astype(np.int64)}
             for b, n in ((2, 3), (4, 7))]
    mod = check_model(model, *feeds, tol=EXACT)
    assert 'R.Tensor(("n", 3), "float32")' in mod.script()


def test_gather_nd_unsupported_index_depth_and_range_errors():
    model = one_node("GatherND", {"x": rand(2, 3), "i": i64(0, 0).reshape(1, 2)}, opset=13,
                     sym={"i": ["n", "k"]})
    with pytest.raises(UnsupportedOpError, match=r"GatherND node \(opset 13\): the last dim of indices \(the index "
                                                 r"depth\) must be static, got k"):
        relaxpack.from_onnx(model)
    vm = VirtualMachine(build(relaxpack.from_onnx(one_node("GatherND", {"x": rand(2, 3), "i": i64(0, 0).reshape(1, 2)},
                                                           opset=13))))
    with pytest.raises(ShapeError, match=r"gather_nd: index 3 is out of range for axis 1 of size 3"):
        vm.run({"x": rand(2, 3), "i": i64(1, 3).reshape(1, 2)})


# ---------------------------------------------------------------- ScatterND


def scatter_nd_inputs(dtype=np.float32):
    data = rand(4, 3, 5, dtype=dtype)
    indices = np.array([[[1, 0]], [[-1, 2]], [[0, -3]]], np.int64)
    updates = rand(3, 1, 5, dtype=dtype, seed=1)
    return data, indices, updates


@pytest.mark.parametrize("opset, reduction", [
    (11, None), (13, None), (16, "none"), (16, "add"), (16, "mul"), (18, "max"), (18, "min"), (18, "add"),
])
def test_scatter_nd(opset, reduction):
    data, indices, updates = scatter_nd_inputs()
    attrs = {} if reduction is None else {"reduction": reduction}
    model = one_node("ScatterND", {"d": data, "u": updates}, inputs=["d", "i", "u"], consts={"i": indices},
                     attrs=attrs, opset=opset)
    check_model(model, {"d": data, "u": updates}, tol=dict(rtol=1e-6, atol=1e-7))


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_nd_dtypes(dtype):
    data, indices, updates = scatter_nd_inputs(dtype)
    feeds = {"d": data, "i": indices, "u": updates}
    check_model(one_node("ScatterND", feeds, opset=18), feeds, tol=EXACT)


def test_scatter_nd_duplicates_reduce():
    data = rand(5, 2)
    indices = np.array([[1], [3], [1], [-4]], np.int64)
    updates = rand(4, 2, seed=1)
    for reduction in ("add", "mul", "max", "min"):
        feeds = {"d": data, "i": indices, "u": updates}
        check_model(one_node("ScatterND", feeds, attrs={"reduction": reduction}, opset=18), feeds,
                    tol=dict(rtol=1e-6, atol=1e-7))


def test_scatter_nd_symbolic_dims_one_build():
    model = one_node("ScatterND", {"d": rand(4, 3), "i": i64(0).reshape(1, 1), "u": rand(1, 3)},
                     attrs={"reduction": "add"}, opset=16, sym={"d": ["n", 3], "i": ["m", 1], "u": ["m", 3]})
    feeds = [{"d": rand(n, 3, seed=n), "i": (np.arange(m) % n).reshape(m, 1).astype(np.int64), "u": rand(m, 3)}
             for n, m in ((4, 2), (6, 9))]
    mod = check_model(model, *feeds, tol=dict(rtol=1e-6, atol=1e-7))
    assert 'R.Tensor(("n", 3), "float32")' in mod.script()


@pytest.mark.parametrize("opset", [16, 17])
@pytest.mark.parametrize("reduction", ["max", "min"])
def test_scatter_nd_max_and_min_before_opset_18_as_onnxruntime_takes_them(opset, reduction):
    """The spec adds max and min at 18; tf2onnx writes them at 16 and 17 (tensor_scatter_nd_max),
    and onnxruntime runs them there."""
    data, indices, updates = scatter_nd_inputs()
    feeds = {"d": data, "i": indices, "u": updates}
    check_model(one_node("ScatterND", feeds, attrs={"reduction": reduction}, opset=opset), feeds, tol=EXACT)


def test_scatter_nd_reduction_needs_its_opset():
    data, indices, updates = scatter_nd_inputs()
    model = one_node("ScatterND", {"d": data}, inputs=["d", "i", "u"], consts={"i": indices, "u": updates},
                     attrs={"reduction": "average"}, opset=18)
    with pytest.raises(UnsupportedOpError, match=r"ScatterND node \(opset 18\): reduction 'average' \(none, add, "
                                                 r"mul, max, min\)"):
        relaxpack.from_onnx(model)
    model = one_node("ScatterND", {"d": data}, inputs=["d", "i", "u"], consts={"i": indices, "u": updates},
                     attrs={"reduction": "add"}, opset=13)
    with pytest.raises(UnsupportedOpError, match=r"reduction"):
        relaxpack.from_onnx(model)


# ---------------------------------------------------------------- ScatterElements, Scatter


@pytest.mark.parametrize("op, opset, reduction", [
    ("Scatter", 9, None), ("Scatter", 11, None), ("ScatterElements", 11, None), ("ScatterElements", 13, None),
    ("ScatterElements", 16, "add"), ("ScatterElements", 16, "mul"), ("ScatterElements", 18, "max"),
    ("ScatterElements", 18, "min"), ("ScatterElements", 18, "none"), ("ScatterElements", 16, "max"),
    ("ScatterElements", 17, "min"),
])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_scatter_elements(op, opset, reduction, axis):
    data = rand(4, 5)
    if axis == 0:
        indices = np.array([[1, 0, 3, 2, 0], [3, 2, 1, 0, 1]], np.int64)
    else:
        indices = np.array([[4, 0, 2], [1, 3, 0], [2, 1, 4], [0, 4, 1]], np.int64)
    if opset >= 11:
        indices = np.where(indices % 2 == 1, indices - data.shape[axis], indices)   # negative ones too
    updates = rand(*indices.shape, seed=1)
    attrs = {"axis": axis} | ({} if reduction is None else {"reduction": reduction})
    model = one_node(op, {"d": data, "u": updates}, inputs=["d", "i", "u"], consts={"i": indices}, attrs=attrs,
                     opset=opset)
    # onnxruntime rejects Scatter-11 (deprecated); it is ScatterElements-11
    same = one_node("ScatterElements", {"d": data, "u": updates}, inputs=["d", "i", "u"], consts={"i": indices},
                    attrs=attrs, opset=opset) if (op, opset) == ("Scatter", 11) else model
    check_model(model, {"d": data, "u": updates}, ref=lambda feeds: reference(same, feeds, "ort"),
                tol=dict(rtol=1e-6, atol=1e-7))


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_elements_dtypes(dtype):
    data, updates = rand(3, 4, dtype=dtype), rand(3, 2, dtype=dtype, seed=1)
    indices = np.array([[0, 3], [-1, 2], [1, -4]], np.int64)
    feeds = {"d": data, "i": indices, "u": updates}
    check_model(one_node("ScatterElements", feeds, attrs={"axis": 1}, opset=13), feeds, tol=EXACT)


def test_scatter_elements_symbolic_dims_one_build():
    model = one_node("ScatterElements", {"d": rand(3, 4), "i": i64(0).reshape(1, 1), "u": rand(1, 1)},
                     attrs={"axis": 1, "reduction": "add"}, opset=18,
                     sym={"d": ["b", "n"], "i": ["b", "m"], "u": ["b", "m"]})
    feeds = [{"d": rand(b, n, seed=n), "i": (np.arange(b * m) % n).reshape(b, m).astype(np.int64),
              "u": rand(b, m)} for b, n, m in ((3, 4, 2), (2, 7, 5))]
    check_model(model, *feeds, tol=dict(rtol=1e-6, atol=1e-7))


def test_scatter_elements_errors():
    model = one_node("ScatterElements", {"d": rand(3, 4), "i": i64(0).reshape(1, 1), "u": rand(1, 1)},
                     attrs={"axis": 2}, opset=13)
    with pytest.raises(ShapeError, match=r"ScatterElements node: axis 2 is out of range for rank 2"):
        relaxpack.from_onnx(model)
    model = one_node("ScatterElements", {"d": rand(3, 4), "i": rand(1, 1), "u": rand(1, 1)}, opset=13)
    with pytest.raises(ShapeError, match=r"ScatterElements node: indices must be integers, got float32"):
        relaxpack.from_onnx(model)


# ---------------------------------------------------------------- ONNX backend node tests

BACKEND_CASES = sorted(n for n in node_cases() if n.startswith(("test_gathernd_", "test_scatternd",
                                                                "test_scatter_elements_", "test_scatter_with",
                                                                "test_scatter_without", "test_gather_elements_")))


@pytest.mark.parametrize("name", BACKEND_CASES)
def test_backend_node_case(name):
    run_backend_case(name)


# ---------------------------------------------------------------- TensorScatter


def kv_feeds(batch, heads, length, steps, dim, start, dtype=np.float32, seed=0):
    return {"cache": rand(batch, heads, length, dim, dtype=dtype, seed=seed),
            "update": rand(batch, heads, steps, dim, dtype=dtype, seed=seed + 1),
            "at": np.array(start, np.int64)}


@pytest.mark.parametrize("mode", ["linear", "circular"])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.bool_])
def test_tensor_scatter_kv_cache(mode, dtype):
    """Decode steps of a (batch, heads, max_len, dim) cache at per-batch positions,
    batch and step count symbolic, against onnx's reference evaluator."""
    wrap = mode == "circular"
    feeds = [kv_feeds(3, 2, 7, 2, 5, [0, 5, 9 if wrap else 3], dtype), kv_feeds(1, 2, 7, 1, 5, [6], dtype, 2),
             kv_feeds(2, 2, 7, 0, 5, [1, 2], dtype, 4), kv_feeds(2, 2, 7, 7, 5, [0, 3 if wrap else 0], dtype, 6)]
    sym = {"cache": ["b", 2, 7, 5], "update": ["b", 2, "s", 5], "at": ["b"]}
    model = one_node("TensorScatter", feeds[0], attrs={"mode": mode}, opset=24, sym=sym)
    check_model(model, *feeds, ref="onnx")


@pytest.mark.parametrize("axis", [1, -1])
def test_tensor_scatter_other_axes_without_write_indices(axis):
    cache, update = rand(2, 6, 4, seed=1), rand(2, 6, 4, seed=2)
    update = update[:, :3] if axis == 1 else update[..., :2]
    feeds = {"cache": cache, "update": update}
    check_model(one_node("TensorScatter", feeds, attrs={"axis": axis}, opset=24), feeds, ref="onnx")


def test_tensor_scatter_linear_overrun_is_an_error():
    feeds = kv_feeds(1, 1, 4, 2, 3, [3])
    vm = VirtualMachine(build(relaxpack.from_onnx(one_node("TensorScatter", feeds, opset=24))))
    with pytest.raises(ShapeError, match=r"tensor_scatter: writing 2 steps at \[3\] overruns the cache length 4"):
        vm.run(feeds)


# ---------------------------------------------------------------- ReverseSequence


@pytest.mark.parametrize("batch_axis, time_axis", [(0, 1), (1, 0)])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.bool_, np.uint8])
def test_reverse_sequence(batch_axis, time_axis, dtype):
    def feeds(batch, steps, seed):
        shape = (batch, steps, 3) if batch_axis == 0 else (steps, batch, 3)
        lens = np.random.default_rng(seed).integers(0, steps + 1, batch)
        return {"x": rand(*shape, dtype=dtype, seed=seed), "lens": lens.astype(np.int64)}
    all_feeds = [feeds(4, 5, 0), feeds(1, 1, 1), feeds(3, 0, 2), feeds(0, 4, 3), feeds(5, 9, 4)]
    sym = {"x": ["b", "t", 3] if batch_axis == 0 else ["t", "b", 3], "lens": ["b"]}
    model = one_node("ReverseSequence", all_feeds[0], attrs={"batch_axis": batch_axis, "time_axis": time_axis},
                     opset=10, sym=sym)
    check_model(model, *all_feeds)


def test_reverse_sequence_rejects_a_length_past_the_end():
    feeds = {"x": rand(2, 3), "lens": i64(1, 4)}
    vm = VirtualMachine(build(relaxpack.from_onnx(one_node("ReverseSequence", feeds, opset=10,
                                                           attrs={"batch_axis": 0, "time_axis": 1}))))
    with pytest.raises(ShapeError, match=r"reverse_sequence: sequence_lens \[1, 4\] must hold 2 lengths in \[0, 3\]"):
        vm.run(feeds)

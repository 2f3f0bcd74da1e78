"""Converters of algorithms (converters/algorithm.py) against onnxruntime:
Einsum, TopK, CumSum, NonZero, OneHot, Trilu, Range, Tile; and ONNX's
backend node tests of those ops."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import ShapeError, UnsupportedOpError
from relaxpack.ir import TensorStructInfo
from relaxpack.runtime import VirtualMachine
from relaxpack.vm_build import build

from .backend_case import node_cases, run_backend_case
from .test_convert_shape import model_of, node
from .helpers import check, check_model, check_runtime, i64, one_node, rand, run_backend


def scalar(value, dtype=np.int64):
    return np.array(value, dtype)


def small(*shape, seed=0):
    """Float32 small integers: sums in any order are exact, so einsum matches bit for bit."""
    return np.random.default_rng(seed).integers(-4, 5, shape).astype(np.float32)


def output_sinfo(mod, index=0):
    body = mod["main"].body.body
    return (body.fields[index] if hasattr(body, "fields") else body).struct_info


# ---------------------------------------------------------------- Einsum


@pytest.mark.parametrize("opset", [12, 23])
@pytest.mark.parametrize("equation, shapes", [
    ("ij,jk->ik", [(3, 5), (5, 2)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]), ("ii->i", [(4, 4)]),
    ("...ii->...i", [(3, 5, 5)]), ("ij->ji", [(3, 7)]), ("i,i", [(7,), (7,)]), ("ij->", [(3, 4)]),
    ("i,j->ij", [(3,), (0,)]), ("bhqd, bhkd -> bhqk", [(1, 2, 3, 4), (1, 2, 5, 4)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]), ("...ij,...jk", [(2, 1, 3, 4), (1, 5, 4, 2)]),
])
def test_einsum(opset, equation, shapes):
    feeds = {f"x{i}": small(*s, seed=i) for i, s in enumerate(shapes)}
    check("Einsum", feeds, attrs={"equation": equation}, opset=opset)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_einsum_dtypes(dtype):
    check("Einsum", {"x": rand(3, 4, dtype=dtype), "y": rand(4, 2, dtype=dtype, seed=1)},
          attrs={"equation": "ij,jk->ik"}, opset=12)


def test_einsum_symbolic_attention_scores():
    feeds = {"q": small(2, 3, 8), "k": small(2, 5, 8, seed=1)}
    mod = check("Einsum", feeds, attrs={"equation": "bqd,bkd->bqk"},
                sym={"q": ["batch", "sq", 8], "k": ["batch", "sk", 8]}, opset=12,
                more=[{"q": small(1, 4, 8), "k": small(1, 2, 8, seed=1)}])
    assert output_sinfo(mod).shape == tuple(relaxpack.ir.parse_dim(d) for d in ("batch", "sq", "sk"))


def test_einsum_bad_equation_is_a_shape_error():
    model = one_node("Einsum", {"x": rand(2, 3)}, attrs={"equation": "ij,jk->ik"}, opset=12)
    with pytest.raises(ShapeError, match=r"R\.einsum: equation 'ij,jk->ik' has 2 input term\(s\) but 1"):
        relaxpack.from_onnx(model)


# ---------------------------------------------------------------- TopK


@pytest.mark.parametrize("shape, k, axis", [((5, 7), 3, -1), ((5, 7), 5, 0), ((4, 6, 3), 2, 1), ((9,), 9, 0),
                                            ((5, 7), 0, 1), ((0, 4), 2, 1)])
@pytest.mark.parametrize("opset", [10, 11, 24])
def test_topk(shape, k, axis, opset):
    check("TopK", {"x": rand(*shape)}, consts={"k": i64(k)}, attrs={"axis": axis}, outputs=2, opset=opset)


def test_topk_opset1_attribute():
    check("TopK", {"x": rand(4, 6)}, attrs={"k": 2, "axis": 0}, outputs=2, opset=1)


@pytest.mark.parametrize("largest", [0, 1])
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.int64, np.int32, np.uint8, np.int8, np.float64])
def test_topk_ties_and_dtypes(largest, dtype):
    x = np.random.default_rng(0).integers(0, 4, (6, 11)).astype(dtype)       # many ties
    check("TopK", {"x": x}, consts={"k": i64(5)}, attrs={"largest": largest}, outputs=2, opset=11)


def test_topk_unsorted_gives_the_same_set():
    x = rand(3, 8)
    model = one_node("TopK", {"x": x}, consts={"k": i64(4)}, attrs={"sorted": 0}, outputs=2, opset=11)
    got = VirtualMachine(build(relaxpack.from_onnx(model))).run({"x": x})
    np.testing.assert_array_equal(np.sort(got["y0"], axis=1), np.sort(-np.sort(-x, axis=1)[:, :4], axis=1))


def test_topk_symbolic_batch():
    check("TopK", {"x": rand(2, 9)}, consts={"k": i64(3)}, outputs=2, sym={"x": ["n", 9]}, opset=11,
          more=[{"x": rand(5, 9)}, {"x": rand(0, 9)}])


@pytest.mark.parametrize("largest", [0, 1])
def test_topk_k_at_run_time_keeps_the_other_dims(largest):
    x = rand(3, 5)
    model = one_node("TopK", {"x": x, "k": i64(2)}, attrs={"largest": largest}, outputs=2, sym={"x": ["n", 5]},
                     opset=11)
    mod = check_runtime(model, [{"x": x, "k": i64(2)}, {"x": x, "k": i64(5)}, {"x": rand(2, 5), "k": i64(0)},
                                {"x": rand(0, 5), "k": i64(1)}],
                        errors=[({"x": x, "k": i64(6)}, r"topk: k=6 is larger than dim 1 \(of size 5\)"),
                                ({"x": x, "k": i64(-1)}, r"topk: K must be non-negative, got -1")])
    assert output_sinfo(mod).shape[0] == relaxpack.ir.sym("n")
    assert output_sinfo(mod, 1).dtype == "int64"


def test_topk_errors():
    with pytest.raises(ShapeError, match=r"TopK node: K must hold one value, got shape \(2,\)"):
        relaxpack.from_onnx(one_node("TopK", {"x": rand(3, 4), "k": i64(1, 2)}, outputs=2, opset=11))
    model = one_node("TopK", {"x": rand(3, 4)}, consts={"k": i64(5)}, outputs=2, opset=11)
    with pytest.raises(ShapeError, match=r"R\.topk: k=5 is larger than dim 1 of the data \(3, 4\)"):
        relaxpack.from_onnx(model)
    model = one_node("TopK", {"x": rand(3, 4)}, consts={"k": i64(1, 2)}, outputs=2, opset=11)
    with pytest.raises(ShapeError, match=r"TopK node: K must hold one value, got \(1, 2\)"):
        relaxpack.from_onnx(model)


def test_topk_with_k_from_a_shape_runs_at_run_time():
    # a symbolic K is not an attribute value: the packed kernel reads it
    nodes = [node("Shape", ["x"], "s"), node("Slice", ["s", "one", "two"], "k"),
             node("TopK", ["x", "k"], ["v", "i"])]
    model = model_of(nodes, {"x": [4, "n"]}, ["v", "i"], {"one": i64(1), "two": i64(2)})
    check_model(model, {"x": rand(4, 3)}, {"x": rand(4, 7)}, {"x": rand(4, 0)})


# ---------------------------------------------------------------- CumSum


@pytest.mark.parametrize("shape, axis", [((7,), 0), ((4, 5), 0), ((4, 5), -1), ((2, 3, 4), 1), ((0, 3), 0)])
@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumsum(shape, axis, exclusive, reverse):
    check("CumSum", {"x": rand(*shape)}, consts={"axis": scalar(axis, np.int32)},
          attrs={"exclusive": exclusive, "reverse": reverse}, opset=14)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64])
def test_cumsum_dtypes_and_opset11(dtype):
    check("CumSum", {"x": rand(3, 6, dtype=dtype)}, consts={"axis": i64(1)}, opset=11)


def test_cumsum_symbolic():
    mod = check("CumSum", {"x": rand(2, 5)}, consts={"axis": scalar(1)}, sym={"x": ["b", "s"]}, opset=14,
                attrs={"reverse": 1}, more=[{"x": rand(3, 8)}])
    assert "R.cumsum(x, axis=1, exclusive=False, reverse=True)" in mod.script()


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 1)])
@pytest.mark.parametrize("axis_dtype", [np.int32, np.int64])
def test_cumsum_axis_fed_at_run_time(exclusive, reverse, axis_dtype):
    """One build, every axis (negative too); the output keeps the input's symbolic shape."""
    feeds = [{"x": rand(*shape, seed=i), "a": scalar(a, axis_dtype)}
             for i, shape in enumerate([(3, 5, 2), (1, 7, 4), (2, 0, 3)]) for a in (0, 1, 2, -1, -3)]
    mod = check("CumSum", feeds[0], more=feeds[1:], sym={"x": ["b", "n", "c"]},
                attrs={"exclusive": exclusive, "reverse": reverse}, opset=14)
    assert "R.cumsum(x, a, axis=None" in mod.script()
    assert output_sinfo(mod).shape == mod["main"].params[0].struct_info.shape


def test_cumsum_axis_out_of_range_at_run_time():
    vm = VirtualMachine(build(relaxpack.from_onnx(one_node("CumSum", {"x": rand(3), "a": scalar(0)}, opset=14))))
    with pytest.raises(ShapeError, match="axis 1 is out of range"):
        vm.run({"x": rand(3), "a": scalar(1)})


def test_cumsum_errors():
    with pytest.raises(ShapeError, match="CumSum node: axis 2 is out of range for rank 2"):
        relaxpack.from_onnx(one_node("CumSum", {"x": rand(3, 4)}, consts={"a": scalar(2)}, opset=14))


# ---------------------------------------------------------------- NonZero


@pytest.mark.parametrize("shape", [(7,), (3, 4), (2, 3, 4), (0, 3)])
@pytest.mark.parametrize("dtype", [np.float32, np.bool_, np.int64, np.uint8])
def test_nonzero(shape, dtype):
    x = (rand(*shape) > 0.3).astype(dtype)
    check("NonZero", {"x": x}, opset=13, more=[{"x": np.zeros(shape, dtype)}, {"x": np.ones(shape, dtype)}])


def test_nonzero_binds_a_fresh_dim_used_downstream():
    nodes = [node("NonZero", ["x"], "nz"), node("Transpose", ["nz"], "t"), node("NonZero", ["y"], "nz2")]
    model = model_of(nodes, {"x": ["n", 4], "y": ["n"]}, ["t", "nz2"])
    mod = check_model(model, {"x": rand(3, 4), "y": rand(3)}, {"x": rand(6, 4, seed=1), "y": np.zeros(6, np.float32)})
    t, nz2 = output_sinfo(mod, 0), output_sinfo(mod, 1)
    assert t.shape[1] == 2 and nz2.shape[0] == 1 and t.shape[0] != nz2.shape[1]     # two fresh dims
    assert "R.call_packed(\"nonzero\"" in mod.script() and "R.match_cast" in mod.script()


def test_nonzero_of_a_constant_folds():
    model = one_node("NonZero", {}, consts={"c": np.array([[0, 2], [3, 0]], np.int32)}, opset=13)
    mod = check_model(model, {})
    assert "call_packed" not in mod.script()


def test_nonzero_of_a_scalar():
    model = one_node("NonZero", {"x": np.array(2.0, np.float32)}, opset=13)
    mod = relaxpack.from_onnx(model)
    vm = VirtualMachine(build(mod))
    assert vm.run({"x": np.array(2.0, np.float32)})["y0"].shape == (0, 1)
    assert vm.run({"x": np.array(0.0, np.float32)})["y0"].shape == (0, 0)


# ---------------------------------------------------------------- OneHot


@pytest.mark.parametrize("opset", [9, 11, 21])
@pytest.mark.parametrize("shape, depth, axis", [((3,), 5, -1), ((2, 3), 4, 0), ((2, 3), 4, 1), ((2, 3), 4, -2),
                                                ((0, 2), 3, -1)])
def test_one_hot(opset, shape, depth, axis):
    indices = np.random.default_rng(0).integers(0 if opset < 11 else -depth, depth, shape)
    check("OneHot", {"i": indices, "v": np.array([-1.0, 2.0], np.float32)}, consts={"d": i64(depth)},
          inputs=["i", "d", "v"], attrs={"axis": axis}, opset=opset)


@pytest.mark.parametrize("idtype, ddtype, vdtype", [
    (np.int32, np.float32, np.int64), (np.float32, np.int32, np.float16), (np.int64, np.float64, np.int32),
    (np.int64, np.int64, np.float32),
])
def test_one_hot_dtypes(idtype, ddtype, vdtype):
    # onnxruntime implements few of these; the reference evaluator takes only a 0-d depth
    indices = np.array([[0, 2, -1], [1, 5, -4]]).astype(idtype)
    check("OneHot", {"i": indices, "v": np.array([0, 3], vdtype)}, consts={"d": np.array(4, ddtype)},
          inputs=["i", "d", "v"], opset=11, ref="onnx")


def test_one_hot_depth_of_one_element():
    check("OneHot", {"i": np.array([[0, 2, -1], [1, 5, -4]]), "v": np.array([0.0, 3.0], np.float32)},
          consts={"d": i64(4)}, inputs=["i", "d", "v"], opset=11)


def test_one_hot_symbolic_and_out_of_range():
    check("OneHot", {"i": np.array([1, 7, -2]), "v": np.array([0.0, 1.0], np.float32)}, consts={"d": scalar(3)},
          inputs=["i", "d", "v"], sym={"i": ["n"]}, opset=11, more=[{"i": np.array([0, -4, 2, 2, 1]),
                                                                   "v": np.array([5.0, 6.0], np.float32)}])


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot_depth_at_run_time(axis):
    v = np.array([0.0, 1.0], np.float32)
    i = np.array([[1, 7, -2], [0, 3, 2]])
    model = one_node("OneHot", {"i": i, "d": scalar(4), "v": v}, attrs={"axis": axis}, sym={"i": ["n", 3]}, opset=11)
    mod = check_runtime(model, [{"i": i, "d": scalar(4), "v": v}, {"i": i, "d": scalar(1), "v": v},
                                {"i": i[:0], "d": scalar(5), "v": v}],
                        errors=[({"i": i, "d": scalar(-1), "v": v}, r"one_hot: depth must be non-negative, got -1")])
    assert relaxpack.ir.sym("n") in output_sinfo(mod).shape


def test_one_hot_float_depth_at_run_time_is_truncated():
    v, i = np.array([0.0, 1.0], np.float32), np.array([1, 3])
    model = one_node("OneHot", {"i": i, "d": scalar(3.7, np.float32), "v": v}, opset=11)
    check_runtime(model, [{"i": i, "d": scalar(3.7, np.float32), "v": v}, {"i": i, "d": scalar(5.0, np.float32), "v": v}],
                  errors=[({"i": i, "d": scalar(np.inf, np.float32), "v": v}, r"one_hot: depth must hold one finite")])


# ---------------------------------------------------------------- Trilu


@pytest.mark.parametrize("shape", [(4, 5), (5, 4), (2, 3, 3), (0, 3)])
@pytest.mark.parametrize("k", [None, -7, -1, 0, 2, 6])
@pytest.mark.parametrize("upper", [0, 1])
def test_trilu(shape, k, upper):
    consts = {} if k is None else {"k": scalar(k)}
    check("Trilu", {"x": rand(*shape)}, consts=consts, attrs={"upper": upper}, opset=14)


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float64])
def test_trilu_dtypes_and_symbolic(dtype):
    check("Trilu", {"x": rand(2, 3, 3, dtype=dtype)}, consts={"k": scalar(1)}, sym={"x": ["b", "n", "n"]},
          opset=14, more=[{"x": rand(1, 5, 5, dtype=dtype)}])


@pytest.mark.parametrize("upper", [0, 1])
def test_trilu_k_fed_at_run_time(upper):
    """One build, k inside and beyond the matrix; the output keeps the input's symbolic shape."""
    feeds = [{"x": rand(*shape, seed=i), "k": scalar(k)}
             for i, shape in enumerate([(2, 4, 5), (1, 5, 3), (3, 0, 2)]) for k in (-7, -1, 0, 2, 6)]
    mod = check("Trilu", feeds[0], more=feeds[1:], sym={"x": ["b", "r", "c"]}, attrs={"upper": upper}, opset=14)
    assert "R.trilu(x, k, k=None" in mod.script()
    assert output_sinfo(mod).shape == mod["main"].params[0].struct_info.shape


def test_trilu_k_computed_from_a_symbolic_dim():
    nodes = [node("Shape", ["x"], "s"), node("Gather", ["s", "one"], "g", axis=0), node("Sub", ["g", "two"], "k"),
             node("Trilu", ["x", "k"], "y")]
    model = model_of(nodes, {"x": [3, "n"]}, ["y"], {"one": i64(1)[0], "two": i64(2)[0]})
    check_model(model, *({"x": rand(3, n, seed=n)} for n in (1, 3, 6)))


def test_trilu_k_at_run_time_must_hold_one_int():
    vm = VirtualMachine(build(relaxpack.from_onnx(one_node("Trilu", {"x": rand(3, 3), "k": i64(1)},
                                                           sym={"k": ["m"]}, opset=14))))
    with pytest.raises(ShapeError, match="trilu: k must be one int"):
        vm.run({"x": rand(3, 3), "k": i64(1, 2)})


# ---------------------------------------------------------------- Range


@pytest.mark.parametrize("start, limit, delta, dtype", [
    (0, 5, 1, np.int64), (10, 1, -3, np.int32), (1, 1, 1, np.int64), (0.5, 3.2, 0.7, np.float32),
    (5, 0, 1, np.int64), (-2.0, 2.0, 0.5, np.float64), (3, 10, 4, np.int16), (0, 5000, 1, np.int64),
    (0.0, 1.0, 0.1, np.float32),
])
@pytest.mark.parametrize("opset", [11, 23])
def test_range_constant(start, limit, delta, dtype, opset):
    consts = {n: np.array(v, dtype) for n, v in (("start", start), ("limit", limit), ("delta", delta))}
    check("Range", {}, consts=consts, opset=opset)


@pytest.mark.parametrize("stash_type", [1, 11])
@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_range_opset27_stash_type(stash_type, dtype):
    consts = {n: np.array(v, dtype) for n, v in (("start", 1.5), ("limit", 40.0), ("delta", 0.3))}
    check("Range", {}, consts=consts, attrs={"stash_type": stash_type}, opset=27, ref="onnx")
    with pytest.raises(UnsupportedOpError, match="stash_type 5"):
        relaxpack.from_onnx(one_node("Range", {}, consts=consts, attrs={"stash_type": 5}, opset=27))


def test_range_over_the_fold_limit_stays_an_op():
    # onnxruntime adds delta 5000 times (and drifts by 2e-2); the spec, the
    # reference evaluator and relaxpack compute start + i * delta
    consts = {n: np.array(v, np.float32) for n, v in (("start", 0.0), ("limit", 500.0), ("delta", 0.1))}
    mod = check("Range", {}, consts=consts, opset=11, ref="onnx")
    assert "R.range(" in mod.script()


def seq_range_model(start="zero", delta="one", opset=17):
    """Range(start, seq, delta) with seq = Shape(x)[1], as torch exports arange(x.size(1))."""
    nodes = [node("Shape", ["x"], "s"), node("Gather", ["s", "one"], "seq", axis=0),
             node("Range", [start, "seq", delta], "y")]
    consts = {"zero": scalar(0), "one": scalar(1), "two": scalar(2), "minus": scalar(-1)}
    return model_of(nodes, {"x": ["batch", "seq"]}, ["y"], consts, opset=opset)


def test_range_to_a_symbolic_seq_has_shape_seq():
    model = seq_range_model()
    mod = relaxpack.from_onnx(model)
    sinfo = output_sinfo(mod)
    assert sinfo == TensorStructInfo((relaxpack.ir.sym("seq"),), "int64")
    assert "R.range(R.prim_value(0), R.prim_value(seq), R.prim_value(1), dtype=\"int64\")" in mod.script()
    vm = VirtualMachine(build(mod))           # one build, two seq values
    for batch, seq in ((2, 3), (1, 11), (3, 0)):
        got = vm.run({"x": rand(batch, seq)})["y"]
        np.testing.assert_array_equal(got, np.arange(seq))
        assert got.dtype == np.int64


@pytest.mark.parametrize("start, delta", [("one", "two"), ("seq", "minus"), ("two", "one")])
def test_range_symbolic_bounds_match_onnxruntime(start, delta):
    nodes = [node("Shape", ["x"], "s"), node("Gather", ["s", "one"], "seq", axis=0),
             node("Range", [start, "seq", delta], "y") if start != "seq" else
             node("Range", ["seq", "minus", delta], "y")]
    consts = {"one": scalar(1), "two": scalar(2), "minus": scalar(-1)}
    model = model_of(nodes, {"x": ["batch", "seq"]}, ["y"], consts)
    check_model(model, {"x": rand(2, 7)}, {"x": rand(1, 2)}, {"x": rand(1, 1)}, {"x": rand(3, 12)})


def test_range_symbolic_delta_runs_at_run_time():
    # the length would be a division by a variable: the packed kernel computes it
    nodes = [node("Shape", ["x"], "s"), node("Gather", ["s", "zero"], "n", axis=0),
             node("Range", ["zero", "seven", "n"], "y")]
    model = model_of(nodes, {"x": ["n"]}, ["y"], {"zero": scalar(0), "seven": scalar(7)})
    check_model(model, {"x": rand(1)}, {"x": rand(3)}, {"x": rand(8)})


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float32, np.float64])
def test_range_bounds_at_run_time(dtype):
    def feeds(start, limit, delta):
        return {n: scalar(v, dtype) for n, v in (("start", start), ("limit", limit), ("delta", delta))}
    model = one_node("Range", feeds(0, 5, 1), opset=11)
    mod = check_runtime(model, [feeds(0, 5, 1), feeds(10, 1, -3), feeds(1, 1, 1), feeds(5, 0, 2)] +
                        ([feeds(0.5, 3.2, 0.7), feeds(-2, 2, 0.5)] if np.dtype(dtype).kind == "f" else []),
                        errors=[(feeds(0, 4, 0), r"range: delta must not be 0")])
    assert output_sinfo(mod).ndim == 1


def test_range_errors():
    consts = {"start": scalar(0), "limit": scalar(4), "delta": scalar(0)}
    with pytest.raises(ShapeError, match="Range node: delta must not be 0"):
        relaxpack.from_onnx(one_node("Range", {}, consts=consts, opset=11))
    consts = {"start": scalar(0), "limit": scalar(4.0, np.float32), "delta": scalar(1)}
    with pytest.raises(ShapeError, match="start, limit and delta must have one dtype, got int64, float32, int64"):
        relaxpack.from_onnx(one_node("Range", {}, consts=consts, opset=11))
    consts = {"start": i64(0, 1), "limit": scalar(4), "delta": scalar(1)}
    with pytest.raises(ShapeError, match=r"start must be a scalar, got shape \(2,\)"):
        relaxpack.from_onnx(one_node("Range", {}, consts=consts, opset=11))


# ---------------------------------------------------------------- Tile


@pytest.mark.parametrize("opset", [6, 13])
@pytest.mark.parametrize("shape, repeats", [((2, 3), (2, 2)), ((3,), (4,)), ((2, 1, 3), (1, 3, 2)),
                                            ((2, 3), (0, 2)), ((0, 3), (2, 1)), ((2, 3), (1, 1))])
def test_tile(opset, shape, repeats):
    check("Tile", {"x": rand(*shape)}, consts={"r": i64(*repeats)}, opset=opset)


@pytest.mark.parametrize("dtype", [np.int64, np.bool_, np.float16, np.uint8])
def test_tile_dtypes(dtype):
    check("Tile", {"x": rand(3, 2, dtype=dtype)}, consts={"r": i64(2, 3)}, opset=13)


def test_tile_opset1_tiles_and_axis():
    check("Tile", {"x": rand(2, 3)}, consts={"t": scalar(3), "a": scalar(1)}, inputs=["x", "t", "a"], opset=1,
          ref=lambda f: [np.tile(f["x"], (1, 3))])


def test_tile_symbolic_dims_multiply():
    mod = check("Tile", {"x": rand(2, 3)}, consts={"r": i64(3, 2)}, sym={"x": ["n", "m"]}, opset=13,
                more=[{"x": rand(5, 1)}, {"x": rand(0, 2)}])
    assert "R.tile(x, repeats=(3, 2))" in mod.script()
    assert output_sinfo(mod).shape == (3 * relaxpack.ir.sym("n"), 2 * relaxpack.ir.sym("m"))


def test_tile_repeats_at_run_time():
    x = rand(2, 3)
    model = one_node("Tile", {"x": x, "r": i64(1, 2)}, sym={"x": ["a", "b"]}, opset=13)
    check_runtime(model, [{"x": x, "r": i64(1, 1)}, {"x": x, "r": i64(2, 3)}, {"x": x, "r": i64(0, 2)},
                          {"x": rand(0, 4), "r": i64(3, 1)}],
                  errors=[({"x": x, "r": i64(-1, 1)}, r"tile: repeats \(-1, 1\) must be 2 non-negative counts")])


def _tile_by_batch(x_shape):
    """Tile(x, concat(Shape(y)[0:1], [1] * (rank - 1))): repeats computed from y's batch dim,
    as transformers' ``position_ids.repeat(batch, 1)`` exports."""
    ones = np.ones(len(x_shape) - 1, np.int64)
    return model_of([node("Shape", ["y"], "sy", start=0, end=1), node("Concat", ["sy", "ones"], "r", axis=0),
                     node("Tile", ["x", "r"], "out")],
                    {"x": x_shape, "y": ["b", 2]}, ["out"], consts={"ones": ones}, opset=15)


def test_tile_of_unit_axes_by_a_dim_is_a_broadcast():
    """Repeats known as dims, every repeated axis of size 1: a broadcast_to, no run-time tile."""
    model = _tile_by_batch([1, "s"])
    mod = relaxpack.from_onnx(model)
    assert "R.broadcast_to(x, R.shape([b, s]))" in mod.script() and "dyn.tile" not in mod.script()
    check_model(model, {"x": rand(1, 4), "y": rand(3, 2)}, {"x": rand(1, 1), "y": rand(1, 2)},
                {"x": rand(1, 0), "y": rand(2, 2)}, {"x": rand(1, 3), "y": rand(0, 2)})
    wide = _tile_by_batch([2, "s"])       # a repeated axis of size 2: a broadcast of (b, 2) merged
    assert "dyn.tile" not in relaxpack.from_onnx(wide).script()
    check_model(wide, {"x": rand(2, 3), "y": rand(3, 2)})


def _tile_by_pieces(x_shape, pieces):
    """Tile(x, concat(pieces)): a piece "b" is y's batch dim (Shape(y)[0:1]), an int a constant."""
    nodes = [node("Shape", ["y"], "sy", start=0, end=1)]
    names, consts = [], {}
    for k, p in enumerate(pieces):
        if p == "b":
            names.append("sy")
        else:
            consts[f"c{k}"] = np.array([p], np.int64)
            names.append(f"c{k}")
    nodes += [node("Concat", names, "r", axis=0), node("Tile", ["x", "r"], "out")]
    return model_of(nodes, {"x": x_shape, "y": ["b", 2]}, ["out"], consts=consts, opset=15)


@pytest.mark.parametrize("level", [0, 2])
@pytest.mark.parametrize("x_shape, pieces, x_sizes", [
    ([2, 3, 4], ["b", 1, 1], [(2, 3, 4)]),            # DeBERTa's x.repeat(batch, 1, 1)
    ([2, "s"], [1, "b"], [(2, 3), (2, 1), (2, 0)]),   # a symbolic axis repeated
    ([1, 3], ["b", 2], [(1, 3)]),                     # a unit axis beside a repeated one
    (["n", 2], ["b", 3], [(3, 2), (1, 2), (0, 2)]),   # both axes tiled, one of symbolic size
    ([2, 3], ["b", "b"], [(2, 3)]),
])
def test_tile_by_dims_is_a_broadcast_and_equals_numpy(level, x_shape, pieces, x_sizes):
    """Repeats known as dims over axes longer than 1: reshape, broadcast_to and reshape (static
    ops, no packed dyn.tile), bit for bit numpy's tile at every batch, empty ones included."""
    model = _tile_by_pieces(x_shape, pieces)
    mod = relaxpack.from_onnx(model)
    assert "dyn.tile" not in mod.script() and "R.broadcast_to(" in mod.script()
    vm = VirtualMachine(relaxpack.build(mod, opt_level=level))
    rng = np.random.default_rng(0)
    for size in x_sizes:
        for b in (3, 1, 0, 2):
            x = rng.standard_normal(size).astype(np.float32)
            reps = [b if p == "b" else p for p in pieces]
            got = vm.run({"x": x, "y": rand(b, 2)})["out"]
            np.testing.assert_array_equal(got, np.tile(x, reps))
            assert got.shape == np.tile(x, reps).shape


def test_tile_errors():
    with pytest.raises(ShapeError, match=r"Tile node: \(3,\) repeats for a tensor of rank 2"):
        relaxpack.from_onnx(one_node("Tile", {"x": rand(2, 3), "r": i64(1, 2, 3)}, opset=13))
    with pytest.raises(ShapeError, match=r"Tile node: 1 repeats \(2,\) for a tensor of rank 2"):
        relaxpack.from_onnx(one_node("Tile", {"x": rand(2, 3)}, consts={"r": i64(2)}, opset=13))
    with pytest.raises(ShapeError, match=r"repeats \(2, -1\) must not be negative"):
        relaxpack.from_onnx(one_node("Tile", {"x": rand(2, 3)}, consts={"r": i64(2, -1)}, opset=13))


# ---------------------------------------------------------------- ONNX's backend node tests

#: node tests that pass as they are (every input a graph input)
AS_IS = [
    "test_einsum_batch_diagonal", "test_einsum_batch_matmul", "test_einsum_batch_matmul_bfloat16",
    "test_einsum_inner_prod", "test_einsum_scalar", "test_einsum_sum", "test_einsum_sum_bfloat16",
    "test_einsum_transpose", "test_einsum_transpose_bfloat16", "test_nonzero_example",
    "test_tril", "test_tril_one_row_neg", "test_tril_square", "test_triu", "test_triu_square",
]

#: node tests whose shape-like inputs (K, axis, depth, k, repeats, Range's
#: bounds) are graph inputs there; they pass once those are initializers, as
#: in exported models. As they are, they are read at run time (below).
FROZEN = {
    **{f"test_cumsum_{s}": ("axis",) for s in (
        "1d", "1d_exclusive", "1d_int32_exclusive", "1d_reverse", "1d_reverse_exclusive", "2d_axis_0",
        "2d_axis_1", "2d_int32", "2d_negative_axis")},
    **{f"test_onehot_{s}": ("depth",) for s in (
        "negative_indices", "out_of_range_indices", "with_axis", "with_bfloat16_values", "with_negative_axis",
        "without_axis")},
    **{f"test_range_{s}": ("start", "limit", "delta") for s in (
        "bfloat16_type_positive_delta", "float16_type_positive_delta", "float_type_positive_delta",
        "int32_type_negative_delta")},
    "test_tile": ("y",), "test_tile_precomputed": ("y",),
    **{f"test_top_k{s}": ("k",) for s in (
        "", "_negative_axis", "_same_values", "_same_values_2d", "_same_values_largest", "_smallest", "_uint64")},
    **{f"test_{s}": ("k",) for s in (
        "tril_neg", "tril_out_neg", "tril_out_pos", "tril_pos", "tril_square_neg", "tril_zero", "triu_neg",
        "triu_one_row", "triu_out_neg_out", "triu_out_pos", "triu_pos", "triu_square_neg", "triu_zero")},
}


@pytest.mark.parametrize("name", AS_IS)
def test_backend_node_as_is(name):
    run_backend_case(name)


@pytest.mark.parametrize("name", sorted(FROZEN))
def test_backend_node_with_constant_operands(name):
    run_backend(name, FROZEN[name])


@pytest.mark.parametrize("name", sorted(FROZEN))
def test_backend_node_with_operands_known_at_run_time(name):
    run_backend_case(name)


def test_every_backend_node_test_of_these_ops_is_listed():
    prefixes = ("test_einsum", "test_top_k", "test_cumsum", "test_nonzero", "test_onehot", "test_tril",
                "test_triu", "test_range", "test_tile")
    names = {n for n in node_cases() if n.startswith(prefixes) and not n.endswith("_expanded")}
    assert names == set(AS_IS) | set(FROZEN)


# ---------------------------------------------------------------- malformed nodes


def test_malformed_nodes_are_relaxpack_errors():
    with pytest.raises(ShapeError, match="OneHot node: needs the input values"):
        relaxpack.from_onnx(one_node("OneHot", {"i": i64(1)}, consts={"d": scalar(3)}, inputs=["i", "d", ""],
                                     opset=11))
    with pytest.raises(ShapeError, match="TopK node: K must be an integer tensor, got float32"):
        relaxpack.from_onnx(one_node("TopK", {"x": rand(3, 4)}, consts={"k": np.array([2.0], np.float32)},
                                     outputs=2, opset=11))
    with pytest.raises(ShapeError, match="OneHot node: depth must hold one finite value"):
        relaxpack.from_onnx(one_node("OneHot", {"i": i64(1), "v": np.array([0.0, 1.0], np.float32)},
                                     consts={"d": np.array(np.nan, np.float32)}, inputs=["i", "d", "v"], opset=11))
    with pytest.raises(UnsupportedOpError, match="equation"):      # a required attribute is missing
        relaxpack.from_onnx(one_node("Einsum", {"x": rand(2, 2)}, opset=12))

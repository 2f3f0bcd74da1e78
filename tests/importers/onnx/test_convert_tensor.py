"""Converters of data movement (converters/tensor.py) against onnxruntime:
Reshape, Expand, Flatten, Transpose, Concat, Split, Slice, Gather,
GatherElements, Squeeze, Unsqueeze, Tile, DepthToSpace, SpaceToDepth.

The shared helpers live in ``helpers.py``.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import relaxpack
from relaxpack.errors import ShapeError, UnsupportedOpError


from .helpers import (
    INT64_MAX, INT64_MIN, check, check_model, check_runtime, i64, one_node, output_sinfo, rand, run_backend,
)


# ---------------------------------------------------------------- Reshape


@pytest.mark.parametrize("opset", [5, 13, 14, 19, 21, 23])
@pytest.mark.parametrize("target", [(5, 6), (0, -1), (-1,), (0, 0, 5), (2, 15, 1), (-1, 5), (1, 30, 1)])
def test_reshape_targets(opset, target):
    check("Reshape", {"x": rand(2, 3, 5)}, consts={"s": i64(*target)}, opset=opset)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64, np.int64, np.int8, np.uint8, np.bool_])
def test_reshape_dtypes(dtype):
    check("Reshape", {"x": rand(4, 3, dtype=dtype)}, consts={"s": i64(3, -1)}, opset=14)


def test_reshape_opset1_attribute():
    check("Reshape", {"x": rand(2, 6)}, attrs={"shape": [0, 3, -1]}, opset=1)


def test_reshape_allowzero():
    check("Reshape", {"x": rand(0, 3)}, consts={"s": i64(3, 0)}, attrs={"allowzero": 1}, opset=14)
    check("Reshape", {"x": rand(2, 3)}, consts={"s": i64(3, 2)}, attrs={"allowzero": 1}, opset=14)
    check("Reshape", {"x": rand(0, 4)}, consts={"s": i64(0, 2, 2)}, opset=14)   # 0 copies the dim


def test_reshape_symbolic_input_with_constant_target():
    mod = check("Reshape", {"x": rand(2, 3, 12)}, consts={"s": i64(0, 0, 3, -1)},
                sym={"x": ["batch", "seq", 12]}, more=[{"x": rand(5, 1, 12)}])
    assert "R.shape([batch, seq, 3, -1])" in mod.script()
    check("Reshape", {"x": rand(2, 3, 12)}, consts={"s": i64(0, -1)}, sym={"x": ["batch", "seq", 12]},
          more=[{"x": rand(4, 7, 12)}])


def test_reshape_target_at_run_time():
    x = rand(2, 3, 4)
    model = one_node("Reshape", {"x": x, "s": i64(4, 3, 2)}, sym={"x": ["a", "b", "c"]}, opset=14)
    mod = check_runtime(model, [{"x": x, "s": i64(4, 3, 2)}, {"x": x, "s": i64(0, -1, 1)},
                                {"x": x, "s": i64(-1, 2, 2)}, {"x": rand(0, 3, 4), "s": i64(0, 12, 1)}],
                        errors=[({"x": x, "s": i64(5, 5, 1)}, r"reshape: cannot reshape \(2, 3, 4\) \(24 elements\) "
                                                            r"into \(5, 5, 1\)"),
                                ({"x": x, "s": i64(-1, -1, 2)}, r"reshape: target \(-1, -1, 2\) has more than one -1"),
                                ({"x": x, "s": i64(5, -1, 1)}, r"reshape: cannot infer the -1 of target \(5, -1, 1\)"),
                                ({"x": x, "s": i64(2, -2, 1)}, r"reshape: invalid dim -2")])
    assert output_sinfo(mod).ndim == 3


def test_a_1d_target_at_run_time_flattens_to_an_exact_shape():
    x = rand(2, 3, 4)
    model = one_node("Reshape", {"x": x, "s": i64(24)}, sym={"x": ["a", 3, 4]}, opset=14)
    mod = check_runtime(model, [{"x": x, "s": i64(-1)}, {"x": rand(5, 3, 4), "s": i64(60)}],
                        errors=[({"x": x, "s": i64(25)}, r"reshape: cannot reshape \(2, 3, 4\)")])
    assert output_sinfo(mod).shape == (12 * relaxpack.ir.sym("a"),)


def test_reshape_allowzero_target_at_run_time():
    model = one_node("Reshape", {"x": rand(3, 0), "s": i64(0, 7)}, attrs={"allowzero": 1},
                     sym={"x": ["a", "b"]}, opset=14)
    check_runtime(model, [{"x": rand(3, 0), "s": i64(0, 7)}, {"x": rand(2, 3), "s": i64(3, 2)}],
                  errors=[({"x": rand(2, 3), "s": i64(0, 6)}, r"reshape: cannot reshape \(2, 3\)")])


def test_reshape_wrong_size_is_a_shape_error():
    with pytest.raises(ShapeError):
        relaxpack.from_onnx(one_node("Reshape", {"x": rand(2, 3)}, consts={"s": i64(4, 2)}, opset=14))


# ---------------------------------------------------------------- Expand


@pytest.mark.parametrize("opset", [8, 13])
@pytest.mark.parametrize("shape,target", [((3, 1), (2, 1, 4)), ((1, 4), (3, 1)), ((2, 3, 4), (3, 1)),
                                          ((1,), (0, 3)), ((), (2, 2)), ((3,), (3,))])
def test_expand(opset, shape, target):
    check("Expand", {"x": rand(*shape)}, consts={"s": i64(*target)}, opset=opset)


@pytest.mark.parametrize("dtype", [np.int32, np.bool_, np.float16])
def test_expand_dtypes(dtype):
    check("Expand", {"x": rand(3, 1, dtype=dtype)}, consts={"s": i64(3, 4)}, opset=13)


def test_expand_symbolic():
    mod = check("Expand", {"x": rand(2, 1)}, consts={"s": i64(1, 5)}, sym={"x": ["n", 1]},
                more=[{"x": rand(7, 1)}], opset=13)
    assert "R.broadcast_to(x, R.shape([n, 5]))" in mod.script()


def test_expand_to_the_shape_of_another_input():
    nodes = [helper.make_node("Shape", ["y"], ["s"]), helper.make_node("Expand", ["x", "s"], ["z"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, "b"]),
                                           helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["a", "b"])],
                              [onnx.ValueInfoProto(name="z")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    mod = check_model(model, {"x": rand(1, 3), "y": rand(2, 3)}, {"x": rand(1, 5), "y": rand(4, 5)})
    assert "R.shape([a, b])" in mod.script() and "shape_to_tensor" not in mod.script()


def test_expand_shape_at_run_time_keeps_the_dims_it_knows():
    x = rand(3, 1)
    model = one_node("Expand", {"x": x, "s": i64(2, 1, 6)}, opset=13)
    mod = check_runtime(model, [{"x": x, "s": i64(2, 1, 6)}, {"x": x, "s": i64(1, 1, 1)}, {"x": x, "s": i64(1, 3, 0)}],
                        errors=[({"x": x, "s": i64(2, 4, 1)}, r"expand: cannot broadcast \(3, 1\) to \(2, 4, 1\)"),
                                ({"x": x, "s": i64(1, 1, -1)}, r"expand: negative dim")])
    assert output_sinfo(mod).shape[1:2] == (3,)     # x's 3 stays: the target must be 1 or 3 there


def test_expand_of_a_last_cell_to_a_dim_of_the_same_variable():
    """Canine's "repeat the last molecule" (dynamo export): ``p[..., -1:]`` of a pooled axis,
    ``min(s // 4, 1)`` (0 or 1), expanded to ``s % 4 + 4``. The two share ``s`` but are not equal:
    the first broadcasts; it was assumed equal and broadcast_to refused the model."""
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[4], strides=[4]),
             helper.make_node("Slice", ["p", "last", "end", "axis"], ["cell"]),
             helper.make_node("Shape", ["x"], ["s"], start=2, end=3),
             helper.make_node("Mod", ["s", "four"], ["r"]), helper.make_node("Add", ["r", "four"], ["n"]),
             helper.make_node("Concat", ["ones", "n"], ["target"], axis=0),
             helper.make_node("Expand", ["cell", "target"], ["y"])]
    inits = [numpy_helper.from_array(i64(*v), name) for name, v in
             (("last", (-1,)), ("end", (INT64_MAX,)), ("axis", (2,)), ("four", (4,)), ("ones", (1, 1)))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, "s"])],
                              [onnx.ValueInfoProto(name="y")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    check_model(model, *({"x": rand(1, 1, s)} for s in (4, 10, 13, 16)))


def test_expand_incompatible_is_a_shape_error():
    with pytest.raises(ShapeError, match="Expand"):
        relaxpack.from_onnx(one_node("Expand", {"x": rand(3, 2)}, consts={"s": i64(3, 4)}, opset=13))


# ---------------------------------------------------------------- Flatten, Transpose


@pytest.mark.parametrize("opset,axis", [(1, 0), (1, 2), (9, 1), (11, -1), (11, -3), (13, 3), (21, 2), (23, -2)])
def test_flatten(opset, axis):
    check("Flatten", {"x": rand(2, 3, 4)}, attrs={"axis": axis}, opset=opset)


def test_flatten_default_axis_symbolic_and_empty():
    check("Flatten", {"x": rand(2, 3, 4)}, sym={"x": ["n", 3, "m"]}, more=[{"x": rand(1, 3, 5)}], opset=13)
    check("Flatten", {"x": rand(0, 3)}, opset=13)


@pytest.mark.parametrize("opset", [1, 13, 21, 23])
@pytest.mark.parametrize("perm", [None, (0, 2, 1), (2, 0, 1), (1, 0, 2), (0, 1, 2)])
def test_transpose(opset, perm):
    attrs = {} if perm is None else {"perm": list(perm)}
    check("Transpose", {"x": rand(2, 3, 4)}, attrs=attrs, opset=opset)


@pytest.mark.parametrize("dtype", [np.int64, np.bool_, np.float16, np.uint8])
def test_transpose_dtypes_and_symbolic(dtype):
    check("Transpose", {"x": rand(2, 3, 4, dtype=dtype)}, attrs={"perm": [2, 0, 1]}, sym={"x": ["a", 3, "b"]},
          more=[{"x": rand(5, 3, 1, dtype=dtype)}], opset=13)


def test_transpose_bad_perm_is_a_shape_error():
    with pytest.raises(ShapeError):
        relaxpack.from_onnx(one_node("Transpose", {"x": rand(2, 3)}, attrs={"perm": [0, 0]}))


# ---------------------------------------------------------------- Concat, Split


@pytest.mark.parametrize("opset,axis", [(o, a) for o in (4, 11, 13) for a in (0, 1, -1)
                                        if o >= 11 or a >= 0])   # negative axes from opset 11
def test_concat(opset, axis):
    shapes = {0: [(1, 3), (2, 3), (0, 3)], 1: [(2, 1), (2, 4), (2, 2)], -1: [(2, 1), (2, 4), (2, 2)]}[axis]
    feeds = {f"x{i}": rand(*s, seed=i) for i, s in enumerate(shapes)}
    check("Concat", feeds, attrs={"axis": axis}, opset=opset)


def test_concat_symbolic_and_mixed_with_constants():
    check("Concat", {"a": rand(2, 3), "b": rand(2, 5)}, attrs={"axis": 1},
          sym={"a": ["n", 3], "b": ["n", 5]}, more=[{"a": rand(4, 3), "b": rand(4, 5)}], opset=13)
    check("Concat", {"a": rand(2, 3), "b": rand(1, 3)}, consts={"c": rand(1, 3)}, attrs={"axis": 0},
          sym={"a": ["n", 3], "b": ["m", 3]}, more=[{"a": rand(4, 3), "b": rand(0, 3)}], opset=13)


def test_concat_opset1_default_axis_is_1():
    a, b = rand(2, 3), rand(2, 4)
    check("Concat", {"a": a, "b": b}, opset=1, ref=lambda f: [np.concatenate([f["a"], f["b"]], 1)])


@pytest.mark.parametrize("opset,attrs,split,outputs", [
    (2, {"axis": 1, "split": [1, 4]}, None, 2),
    (11, {"axis": -1, "split": [2, 0, 3]}, None, 3),
    (11, {"axis": 0}, None, 2),
    (13, {"axis": 1}, [3, 2], 2),
    (13, {"axis": 1}, None, 5),
    (18, {"axis": 1, "num_outputs": 2}, None, 2),        # uneven: 3 + 2
    (18, {"axis": -1, "num_outputs": 3}, None, 3),       # uneven: 2 + 2 + 1
    (18, {"axis": 0}, [1, 3], 2),
])
def test_split(opset, attrs, split, outputs):
    consts = {} if split is None else {"split": i64(*split)}
    check("Split", {"x": rand(4, 5)}, consts=consts, attrs=attrs, opset=opset, outputs=outputs)


def test_split_symbolic_other_axis():
    check("Split", {"x": rand(2, 6)}, consts={"s": i64(2, 4)}, attrs={"axis": 1}, outputs=2,
          sym={"x": ["n", 6]}, more=[{"x": rand(5, 6)}], opset=13)
    check("Split", {"x": rand(2, 6)}, attrs={"axis": 1, "num_outputs": 3}, outputs=3,
          sym={"x": ["n", 6]}, more=[{"x": rand(5, 6)}], opset=18)


def test_split_opset1_sizes_as_input():
    x = rand(3, 5)
    check("Split", {"x": x}, consts={"s": i64(2, 3)}, attrs={"axis": 1}, outputs=2, opset=1,
          ref=lambda f: np.split(f["x"], [2], axis=1))


@pytest.mark.parametrize("opset", [13, 18])
def test_split_sizes_at_run_time(opset):
    x = rand(6, 4)
    model = one_node("Split", {"x": x, "s": i64(1, 2, 3)}, outputs=3, sym={"x": ["n", 4]}, opset=opset)
    mod = check_runtime(model, [{"x": x, "s": i64(1, 2, 3)}, {"x": x, "s": i64(0, 6, 0)},
                                {"x": rand(3, 4), "s": i64(2, 0, 1)}],
                        errors=[({"x": x, "s": i64(1, 1, 1)}, r"split: split \(1, 1, 1\) sums to 3, not the dim 6"),
                                ({"x": x, "s": i64(7, -1, 0)}, r"split: split \(7, -1, 0\) must give 3 non-negative")])
    assert output_sinfo(mod).shape[1] == 4


def test_split_sizes_of_a_symbolic_axis_give_shaped_pieces_and_assume_their_sum():
    # EfficientFormer (timm, dynamo exporter) splits q, k, v off a reshaped dim: the pieces past the
    # first split point were of unknown size and the MatMul after them could not be lowered
    model = one_node("Split", {"x": rand(2, 8)}, consts={"s": i64(2, 2, 4)}, attrs={"axis": 1}, outputs=3,
                     sym={"x": ["n", "d"]}, opset=13)
    mod = check_model(model, {"x": rand(2, 8)}, {"x": rand(5, 8, seed=1)})
    assert [output_sinfo(mod, i).shape[1] for i in range(3)] == [2, 2, 4]
    vm = relaxpack.runtime.VirtualMachine(relaxpack.build(mod))
    with pytest.raises(ShapeError, match=r"assumes d == 8"):
        vm.run({"x": rand(2, 9)})


@pytest.mark.parametrize("sizes", [None, (1, 1)])
def test_split_of_a_static_shape_keeps_its_dims_known(sizes):
    """paddle2onnx's yolo_box splits Shape(x) of a static x into its dims and concatenates them
    back as a Reshape target: the pieces were an unfolded split, the Reshape's dims fresh ones,
    and two slices of them broadcast in a Mul were assumed equal (a run-time failure)."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Split", ["shape", *(["sizes"] if sizes else [])], ["d0", "d1"], axis=0),
             helper.make_node("Concat", ["d0", "d1"], ["target"], axis=0),
             helper.make_node("Reshape", ["x", "target"], ["r"]),
             helper.make_node("Slice", ["r", "s1", "e1", "axis"], ["a"]),
             helper.make_node("Slice", ["r", "s2", "e2", "axis"], ["b"]),
             helper.make_node("Mul", ["a", "b"], ["y"])]
    consts = {"s1": [4], "e1": [5], "s2": [5], "e2": [999999], "axis": [-1]} | ({"sizes": list(sizes)} if sizes else {})
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 7])],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in consts.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    mod = check_model(model, {"x": rand(2, 7)})
    assert "dyn.reshape" not in mod.script(show_meta=False)
    assert output_sinfo(mod).shape == (2, 2)


def test_split_sizes_must_add_up():
    with pytest.raises(ShapeError, match="Split"):
        relaxpack.from_onnx(one_node("Split", {"x": rand(4)}, consts={"s": i64(1, 2)}, outputs=2, opset=13))


# ---------------------------------------------------------------- Slice

SLICES = [  # starts, ends, axes, steps
    ((1,), (3,), None, None),
    ((0, 1), (2, -1), (0, 2), None),
    ((-1,), (INT64_MIN,), (1,), (-1,)),
    ((INT64_MAX,), (0,), (-1,), (-2,)),
    ((1, 0), (INT64_MAX, INT64_MAX), (-2, 0), (2, 3)),
    ((10,), (20,), (2,), None),
    ((-100,), (2,), (2,), None),
    ((3,), (1,), (1,), None),            # empty
    ((0,), (-1,), (-1,), (-1,)),         # empty with a negative step
    ((-100, 1), (INT64_MIN, 0), (1, 0), (-1, -1)),   # a start below -dim is the first element
]


@pytest.mark.parametrize("opset,starts,ends,axes,steps", [
    (o, *case) for o in (10, 11, 13) for case in SLICES
    if o >= 11 or not case[2] or min(case[2]) >= 0])    # negative axes from opset 11
def test_slice(opset, starts, ends, axes, steps):
    consts = {"starts": i64(*starts), "ends": i64(*ends)}
    names = ["x", "starts", "ends", "axes" if axes else "", "steps" if steps else ""]
    if axes:
        consts["axes"] = i64(*axes)
    if steps:
        consts["steps"] = i64(*steps)
    check("Slice", {"x": rand(4, 5, 6)}, consts=consts, inputs=names, opset=opset)


def test_slice_opset1_attributes():
    check("Slice", {"x": rand(4, 5)}, attrs={"starts": [1, -3], "ends": [INT64_MAX, -1], "axes": [0, 1]}, opset=1)
    check("Slice", {"x": rand(4, 5)}, attrs={"starts": [1], "ends": [3]}, opset=1)


@pytest.mark.parametrize("dtype", [np.int64, np.bool_, np.float16])
def test_slice_symbolic_dims(dtype):
    consts = {"starts": i64(1, -3), "ends": i64(INT64_MAX, -1), "axes": i64(0, 1), "steps": i64(1, 1)}
    mod = check("Slice", {"x": rand(4, 5, dtype=dtype)}, consts=consts, sym={"x": ["n", "m"]},
                more=[{"x": rand(7, 3, dtype=dtype)}, {"x": rand(1, 1, dtype=dtype)}], opset=13)
    assert "strided_slice" in mod.script()
    check("Slice", {"x": rand(6, 5, dtype=dtype)}, consts={"starts": i64(-1), "ends": i64(INT64_MIN),
                                                           "axes": i64(0), "steps": i64(-2)},
          sym={"x": ["n", 5]}, more=[{"x": rand(3, 5, dtype=dtype)}], opset=13)


def test_slice_to_a_symbolic_end_from_shape():
    """x[:, : y.shape[1]] where the ends are the dims themselves (a full slice),
    and x[:, : n - 1] (the Python index -1)."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "one", "two"], ["n"]),
             helper.make_node("Slice", ["x", "zero", "n", "one"], ["full"]),
             helper.make_node("Sub", ["n", "one"], ["n1"]),
             helper.make_node("Slice", ["x", "zero", "n1", "one"], ["short"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, "n"])],
                              [onnx.ValueInfoProto(name="full"), onnx.ValueInfoProto(name="short")],
                              [numpy_helper.from_array(i64(v), k) for k, v in (("zero", 0), ("one", 1), ("two", 2))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    check_model(model, {"x": rand(2, 5)}, {"x": rand(2, 1)}, {"x": rand(2, 0)})


def test_slice_symbolic_bounds_that_depend_on_the_dims_value():
    """x[: n - 3]: for n < 3 ONNX adds n twice (n = 2 gives x[:1]); the packed
    dyn.slice clamps at run time, or (where the range of n rules that out) a
    strided slice."""
    nodes = [helper.make_node("Shape", ["x"], ["n"]),
             helper.make_node("Sub", ["n", "three"], ["end"]),
             helper.make_node("Slice", ["x", "zero", "end"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, ["n"])],
                              [onnx.ValueInfoProto(name="y")],
                              [numpy_helper.from_array(i64(v), k) for k, v in (("zero", 0), ("three", 3))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=10)
    check_model(model, {"x": rand(5)}, {"x": rand(3)}, {"x": rand(2)}, {"x": rand(0)})
    check_model(model, {"x": rand(5)}, {"x": rand(3)}, dims={"n": (3, None)})


def test_slice_operands_at_run_time():
    x = rand(5, 6)

    def feeds(starts, ends, axes, steps, data=x):
        return {"x": data, "starts": i64(*starts), "ends": i64(*ends), "axes": i64(*axes), "steps": i64(*steps)}
    model = one_node("Slice", feeds((0, 0), (1, 1), (0, 1), (1, 1)), sym={"x": ["a", "b"]}, opset=13)
    check_runtime(model, [feeds((1, 0), (4, 6), (0, 1), (1, 2)), feeds((-1, 5), (-100, 0), (1, 0), (-1, -2)),
                          feeds((-100, 2), (INT64_MIN, INT64_MIN), (0, -1), (-1, -1)),
                          feeds((3, 0), (1, 6), (0, 1), (1, 1)), feeds((0, 0), (2, 2), (0, 1), (1, 1), rand(4, 0))],
                  errors=[(feeds((0, 0), (2, 2), (0, 1), (0, 1)), r"slice: steps \(0, 1\) must not be 0"),
                          (feeds((0, 0), (2, 2), (0, 0), (1, 1)), r"slice: axes \(0, 0\) repeat an axis"),
                          (feeds((0, 0), (2, 2), (0, 2), (1, 1)), r"slice: axis 2 is out of range for rank 2")])


def test_slice_bounds_at_run_time_keep_the_other_dims():
    model = one_node("Slice", {"x": rand(5, 6), "starts": i64(1), "ends": i64(3)}, consts={"axes": i64(1)},
                     inputs=["x", "starts", "ends", "axes"], opset=13)
    mod = check_runtime(model, [{"x": rand(5, 6), "starts": i64(1), "ends": i64(3)},
                                {"x": rand(5, 6), "starts": i64(4), "ends": i64(2)}])
    assert output_sinfo(mod).shape[0] == 5


# ---------------------------------------------------------------- Gather, GatherElements


GATHERS = [(0, i64(0, 2)), (1, i64(-1, 0, -4)), (-1, i64(3)), (0, np.array(-2, np.int64)),
           (1, i64([0, -1], [2, 1])), (2, np.zeros((0,), np.int64)), (1, np.array(1, np.int64))]


@pytest.mark.parametrize("opset,axis,indices", [
    (o, a, i) for o in (1, 11, 13) for a, i in GATHERS
    if o >= 11 or (a >= 0 and (i >= 0).all())])   # negative axes and indices from opset 11
def test_gather_constant_indices(opset, axis, indices):
    check("Gather", {"x": rand(3, 4, 5)}, consts={"i": indices}, attrs={"axis": axis}, opset=opset)


@pytest.mark.parametrize("index_dtype", [np.int64, np.int32])
def test_gather_dynamic_negative_indices(index_dtype):
    idx = np.array([[0, -1], [-3, 2]], index_dtype)
    check("Gather", {"x": rand(3, 4), "i": idx}, attrs={"axis": 0}, opset=13,
          more=[{"x": rand(3, 4, seed=1), "i": np.array([[-2, 1]], index_dtype)}],
          sym={"i": ["a", 2]})


def test_gather_symbolic_dim_with_negative_constant_index():
    mod = check("Gather", {"x": rand(3, 4)}, consts={"i": i64(-1, 0)}, attrs={"axis": 0}, sym={"x": ["n", 4]},
                more=[{"x": rand(6, 4)}], opset=13)
    # the kernel counts -1 from the end of the run-time axis (and checks it): no where(i < 0, i + n, i)
    assert "R.take" in mod.script() and "R.where" not in mod.script()


def test_gather_out_of_range_constant_index_is_a_shape_error():
    with pytest.raises(ShapeError, match="index 3 is out of range"):
        relaxpack.from_onnx(one_node("Gather", {"x": rand(3)}, consts={"i": i64(3)}, opset=13))


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_gather_elements(opset, axis):
    rng = np.random.default_rng(1)
    idx = rng.integers(-3, 3, (2, 3)).astype(np.int64)
    check("GatherElements", {"x": rand(3, 3), "i": idx}, attrs={"axis": axis}, opset=opset)
    check("GatherElements", {"x": rand(3, 4)}, consts={"i": idx}, attrs={"axis": axis}, opset=opset)


def test_gather_elements_symbolic():
    idx = np.array([[0, -1, 1], [-2, 0, 0]], np.int64)
    check("GatherElements", {"x": rand(4, 3), "i": idx}, attrs={"axis": 0}, sym={"x": ["n", 3], "i": ["k", 3]},
          more=[{"x": rand(2, 3), "i": idx[:1]}], opset=13)


# ---------------------------------------------------------------- Squeeze, Unsqueeze


@pytest.mark.parametrize("opset,axes", [(1, [0]), (1, [0, 2]), (11, [-1]), (13, [0, -1]), (13, None), (21, [2]),
                                        (23, None)])
def test_squeeze(opset, axes):
    x = rand(1, 3, 1)
    if opset < 13:
        check("Squeeze", {"x": x}, attrs={} if axes is None else {"axes": axes}, opset=opset)
    else:
        check("Squeeze", {"x": x}, consts={} if axes is None else {"a": i64(*axes)}, opset=opset)


def test_squeeze_symbolic():
    check("Squeeze", {"x": rand(2, 1, 3)}, consts={"a": i64(1)}, sym={"x": ["n", 1, "m"]},
          more=[{"x": rand(1, 1, 5)}], opset=13)


def test_squeeze_and_unsqueeze_axes_at_run_time():
    model = one_node("Squeeze", {"x": rand(1, 3, 1), "a": i64(0)}, sym={"x": ["a", "b", "c"]}, opset=13)
    check_runtime(model, [{"x": rand(1, 3, 1), "a": i64(0)}, {"x": rand(1, 3, 1), "a": i64(-1)},
                          {"x": rand(2, 1, 0), "a": i64(1)}],
                  errors=[({"x": rand(1, 3, 1), "a": i64(1)}, r"squeeze: cannot squeeze axes \(1,\) of shape "
                                                             r"\(1, 3, 1\)"),
                          ({"x": rand(1, 3, 1), "a": i64(3)}, r"squeeze: axis 3 is out of range for rank 3")])
    model = one_node("Unsqueeze", {"x": rand(2, 3), "a": i64(0, 1)}, sym={"x": ["a", "b"]}, opset=13)
    check_runtime(model, [{"x": rand(2, 3), "a": i64(0, 1)}, {"x": rand(2, 3), "a": i64(-1, 0)},
                          {"x": rand(0, 3), "a": i64(1, 3)}],
                  errors=[({"x": rand(2, 3), "a": i64(0, 0)}, r"unsqueeze: axes \(0, 0\) repeat an axis"),
                          ({"x": rand(2, 3), "a": i64(5, 0)}, r"unsqueeze: axis 5 is out of range for rank 4")])


def test_unsqueeze_a_scalar_with_axes_at_run_time_is_all_ones():
    model = one_node("Unsqueeze", {"x": np.array(2.5, np.float32), "a": i64(0, 1)}, opset=13)
    mod = check_runtime(model, [{"x": np.array(2.5, np.float32), "a": i64(-1, 0)}])
    assert output_sinfo(mod).shape == (1, 1)


def test_squeeze_without_axes_keeps_undecided_dims_and_checks_them_at_run_time():
    """A symbolic dim that may be 1 stays (the output's rank cannot depend on data);
    the run fails, naming the node, when it is 1."""
    model = one_node("Squeeze", {"x": rand(2, 1, 3)}, sym={"x": ["n", 1, 3]}, opset=13)
    mod = check_runtime(model, [{"x": rand(2, 1, 3)}, {"x": rand(4, 1, 3)}],
                        errors=[({"x": rand(1, 1, 3)}, r"Squeeze node: Squeeze without axes .* leaves rank 1, "
                                                       r"but the model was imported for rank 2")])
    assert output_sinfo(mod).shape == (relaxpack.ir.sym("n"), 3)
    check_model(model, {"x": rand(2, 1, 3)}, {"x": rand(4, 1, 3)}, dims={"n": (2, None)})


@pytest.mark.parametrize("opset,axes", [(1, [0]), (1, [1, 0]), (11, [-1]), (13, [4, 0, -3]), (21, [1]), (23, [0])])
def test_unsqueeze(opset, axes):
    if opset < 13:
        check("Unsqueeze", {"x": rand(2, 3)}, attrs={"axes": axes}, opset=opset)
    else:
        check("Unsqueeze", {"x": rand(2, 3)}, consts={"a": i64(*axes)}, sym={"x": ["n", 3]},
              more=[{"x": rand(5, 3)}], opset=opset)


# ---------------------------------------------------------------- Tile


@pytest.mark.parametrize("opset", [6, 13])
@pytest.mark.parametrize("shape,repeats", [((2, 3), (2, 1)), ((2, 3), (1, 3)), ((3,), (4,)), ((2, 1, 3), (2, 3, 1)),
                                           ((2, 3), (1, 1)), ((2, 3), (0, 2))])
def test_tile(opset, shape, repeats):
    check("Tile", {"x": rand(*shape)}, consts={"r": i64(*repeats)}, opset=opset)


def test_tile_symbolic_and_constant_data():
    check("Tile", {"x": rand(2, 3)}, consts={"r": i64(3, 2)}, sym={"x": ["n", 3]}, more=[{"x": rand(5, 3)}])
    check("Tile", {"x": rand(2, dtype=np.int64)}, consts={"c": rand(2, 2), "r": i64(2, 3)}, inputs=["c", "r"])


def test_tile_opset1_tiles_and_axis():
    check("Tile", {"x": rand(2, 3)}, consts={"t": np.array(3, np.int64), "a": np.array(1, np.int64)}, opset=1,
          ref=lambda f: [np.tile(f["x"], (1, 3))])


# ---------------------------------------------------------------- DepthToSpace, SpaceToDepth


@pytest.mark.parametrize("opset,mode", [(1, None), (11, "DCR"), (11, "CRD"), (13, "CRD"), (13, None)])
def test_depth_to_space(opset, mode):
    attrs = {"blocksize": 2} | ({} if mode is None else {"mode": mode})
    check("DepthToSpace", {"x": rand(2, 8, 3, 5)}, attrs=attrs, opset=opset, sym={"x": ["n", 8, "h", "w"]},
          more=[{"x": rand(1, 8, 2, 1)}])


@pytest.mark.parametrize("opset", [1, 13])
def test_space_to_depth(opset):
    check("SpaceToDepth", {"x": rand(2, 3, 6, 4)}, attrs={"blocksize": 2}, opset=opset)
    check("SpaceToDepth", {"x": rand(1, 2, 6, 9)}, attrs={"blocksize": 3}, opset=opset, sym={"x": ["n", 2, 6, 9]},
          more=[{"x": rand(3, 2, 6, 9)}])


@pytest.mark.parametrize("mode", [None, "DCR", "CRD"])
def test_space_to_depth_opset28_mode(mode):
    attrs = {"blocksize": 2} | ({} if mode is None else {"mode": mode})
    check("SpaceToDepth", {"x": rand(2, 3, 6, 4)}, attrs=attrs, opset=28, ref="onnx",
          sym={"x": ["n", 3, 6, 4]}, more=[{"x": rand(1, 3, 6, 4)}])


# ---------------------------------------------------------------- ONNX's backend node tests

BACKEND = {
    **{f"test_reshape_{n}": ("shape",) for n in (
        "allowzero_reordered", "extended_dims", "negative_dim", "negative_extended_dims", "one_dim",
        "reduced_dims", "reordered_all_dims", "reordered_last_dims", "zero_and_negative_dim", "zero_dim")},
    "test_expand_dim_changed": ("new_shape",), "test_expand_dim_unchanged": ("new_shape",),
    **{f"test_flatten_{n}": () for n in ("axis0", "axis1", "axis2", "axis3", "default_axis", "negative_axis1",
                                         "negative_axis2", "negative_axis3", "negative_axis4")},
    **{f"test_transpose_all_permutations_{i}": () for i in range(6)}, "test_transpose_default": (),
    **{f"test_concat_{n}": () for n in (
        "1d_axis_0", "1d_axis_negative_1", "2d_axis_0", "2d_axis_1", "2d_axis_negative_1", "2d_axis_negative_2",
        "3d_axis_0", "3d_axis_1", "3d_axis_2", "3d_axis_negative_1", "3d_axis_negative_2", "3d_axis_negative_3")},
    **{f"test_split_{n}": () for n in (
        "1d_uneven_split_opset18", "2d_uneven_split_opset18", "equal_parts_1d_opset13", "equal_parts_1d_opset18",
        "equal_parts_2d", "equal_parts_2d_opset13", "equal_parts_default_axis_opset13",
        "equal_parts_default_axis_opset18")},
    **{f"test_split_{n}": ("split",) for n in (
        "variable_parts_1d_opset13", "variable_parts_1d_opset18", "variable_parts_2d_opset13",
        "variable_parts_2d_opset18", "variable_parts_default_axis_opset13", "variable_parts_default_axis_opset18",
        "zero_size_splits_opset13", "zero_size_splits_opset18")},
    "test_slice": ("starts", "ends", "axes", "steps"), "test_slice_default_axes": ("starts", "ends"),
    "test_slice_default_steps": ("starts", "ends", "axes"),
    "test_slice_end_out_of_bounds": ("starts", "ends", "axes", "steps"),
    "test_slice_neg": ("starts", "ends", "axes", "steps"), "test_slice_neg_steps": ("starts", "ends", "axes", "steps"),
    "test_slice_negative_axes": ("starts", "ends", "axes"),
    "test_slice_start_out_of_bounds": ("starts", "ends", "axes", "steps"),
    **{f"test_gather_{n}": ("indices",) for n in ("0", "1", "2d_indices", "negative_indices")},
    **{f"test_gather_elements_{n}": () for n in ("0", "1", "negative_indices")},
    "test_squeeze": ("axes",), "test_squeeze_negative_axes": ("axes",),
    **{f"test_unsqueeze_{n}": ("axes",) for n in (
        "axis_0", "axis_1", "axis_2", "negative_axes", "three_axes", "two_axes", "unsorted_axes")},
    "test_tile": ("y",), "test_tile_precomputed": ("y",),
    "test_depthtospace_example": (), "test_depthtospace_crd_mode_example": (),
    "test_spacetodepth": (), "test_spacetodepth_example": (),
    "test_spacetodepth_crd_mode_example": (), "test_spacetodepth_dcr_mode_example": (),
}


@pytest.mark.parametrize("name", sorted(BACKEND))
def test_backend_node(name):
    run_backend(name, BACKEND[name])


def test_gather_dynamic_indices_from_the_backend_suite_unfrozen():
    run_backend("test_gather_negative_indices")

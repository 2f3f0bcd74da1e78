"""Converters of shapes and values as data (converters/shape.py): Shape,
Size, ConstantOfShape, Range, Constant, Identity, Cast, CastLike; and shape
arithmetic staying symbolic through the data-movement converters."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from relaxpack.errors import UnsupportedOpError
from relaxpack.importers.onnx import register_converter
from relaxpack.ir import TensorStructInfo

from .helpers import INT64_MAX, check, check_model, check_runtime, i64, one_node, rand, run_backend

FLOAT = TensorProto.FLOAT


def model_of(nodes, inputs, outputs, consts=None, opset=17):
    """A model of ``nodes``: float32 graph inputs ``{name: shape}``, initializers ``consts``."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, FLOAT, s) for n, s in inputs.items()],
        [onnx.ValueInfoProto(name=o) for o in outputs],
        [numpy_helper.from_array(np.asarray(a), n) for n, a in (consts or {}).items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def node(op, inputs, outputs, **attrs):
    return helper.make_node(op, inputs, outputs if isinstance(outputs, list) else [outputs], **attrs)


# ---------------------------------------------------------------- Shape, Size


@pytest.mark.parametrize("opset", [1, 13, 15, 19, 21, 23])
def test_shape_is_symbolic(opset):
    mod = check("Shape", {"x": rand(2, 3, 4)}, sym={"x": ["batch", "seq", 4]}, opset=opset,
                more=[{"x": rand(5, 1, 4)}, {"x": rand(0, 2, 4)}])
    assert "R.shape_to_tensor(R.shape([batch, seq, 4])" in mod.script()


@pytest.mark.parametrize("start,end", [(1, None), (0, 2), (-1, None), (None, -1), (-10, 10), (2, 1), (1, -1),
                                       (3, None), (None, 0)])
def test_shape_start_end(start, end):
    attrs = {k: v for k, v in (("start", start), ("end", end)) if v is not None}
    check("Shape", {"x": rand(2, 3, 4)}, attrs=attrs, sym={"x": ["a", 3, "b"]}, opset=15,
          more=[{"x": rand(6, 3, 1)}])


@pytest.mark.parametrize("op, attrs", [("Shape", {}), ("Shape", {"start": 1}), ("Shape", {"start": -2, "end": -1}),
                                       ("Size", {})])
def test_shape_of_unknown_rank_is_taken_at_run_time(op, attrs):
    graph = helper.make_graph([node(op, ["x"], "y", **attrs)], "g", [helper.make_tensor_value_info("x", FLOAT, None)],
                              [onnx.ValueInfoProto(name="y")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=10)
    check_model(model, {"x": rand(2, 3, 4)}, {"x": rand(5)}, {"x": rand(1, 2, 1, 3)})


FORGET_DOMAIN = "test.relaxpack.shape"


@register_converter(FORGET_DOMAIN, "ForgetShape", since_opset=1)
def _forget_shape(ctx, x):
    """Its input with only the rank known (as after a data-dependent op)."""
    return ctx.bb.match_cast(ctx.expr(x), TensorStructInfo(None, x.dtype, ndim=x.ndim), "forgot")


def test_shape_of_a_value_of_known_rank_binds_fresh_dims():
    nodes = [helper.make_node("ForgetShape", ["x"], ["y"], domain=FORGET_DOMAIN),
             node("Shape", ["y"], "s"), node("Size", ["y"], "n"),
             node("Slice", ["s", "minus_one", "big"], "last"), node("Slice", ["s", "zero", "one"], "first"),
             node("Concat", ["last", "first"], "swapped", axis=0),
             node("Reshape", ["y", "swapped"], "z")]
    consts = {"minus_one": i64(-1), "big": i64(INT64_MAX), "zero": i64(0), "one": i64(1)}
    model = model_of(nodes, {"x": ["a", "b"]}, ["z", "n"], consts)
    model.opset_import.append(helper.make_opsetid(FORGET_DOMAIN, 1))
    mod = check_model(model, {"x": rand(2, 3)}, {"x": rand(4, 1)},
                      ref=lambda f: [f["x"].reshape(f["x"].shape[::-1]), np.array(f["x"].size, np.int64)])
    text = mod.script()
    assert "R.match_cast(forgot" in text and "R.reshape(" in text and "ndim=2" in text


def test_data_movement_on_a_value_of_known_rank_gets_shapes_to_allocate():
    """Ops on a value whose dims are unknown match-cast it once, so their
    outputs have shapes the build can allocate."""
    nodes = [helper.make_node("ForgetShape", ["x"], ["y"], domain=FORGET_DOMAIN),
             node("Transpose", ["y"], "t", perm=[1, 0]),
             node("Slice", ["y", "zero", "minus_one", "zero"], "s"),
             node("Concat", ["y", "s"], "c", axis=0),
             node("Unsqueeze", ["c", "zero"], "u"),
             node("Gather", ["y", "minus_one"], "g", axis=1)]
    model = model_of(nodes, {"x": ["a", "b"]}, ["t", "u", "g"], {"zero": i64(0), "minus_one": i64(-1)})
    model.opset_import.append(helper.make_opsetid(FORGET_DOMAIN, 1))

    def ref(f):
        x = f["x"]
        return [x.T, np.concatenate([x, x[:-1]])[None], x[:, [-1]]]
    mod = check_model(model, {"x": rand(3, 2)}, {"x": rand(5, 4)}, ref=ref)
    assert mod.script().count("R.match_cast(forgot") == 1


@pytest.mark.parametrize("opset", [1, 13, 19, 21, 23])
def test_size(opset):
    mod = check("Size", {"x": rand(2, 3, 4)}, sym={"x": ["n", 3, "m"]}, opset=opset,
                more=[{"x": rand(1, 3, 7)}, {"x": rand(0, 3, 2)}])
    assert "R.shape([m * n * 3])" in mod.script() or "R.shape([3 * m * n])" in mod.script()
    check("Size", {"x": rand(2, 3)}, opset=opset)


# ---------------------------------------------------------------- ConstantOfShape, Range


@pytest.mark.parametrize("opset", [9, 20, 21, 23])
@pytest.mark.parametrize("shape,value", [
    ((2, 3), None), ((4,), np.array([7], np.int64)), ((), np.array([1.5], np.float32)), ((2, 0), np.array([True])),
    ((3, 1), np.array([2], np.float16)), ((100, 50), np.array([3], np.int32))])
def test_constant_of_shape(opset, shape, value):
    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    check("ConstantOfShape", {}, consts={"s": np.array(shape, np.int64)}, attrs=attrs, opset=opset)


def test_constant_of_shape_symbolic_is_a_broadcast():
    nodes = [node("Shape", ["x"], "s"), node("ConstantOfShape", ["s"], "y",
                                              value=numpy_helper.from_array(np.array([2.5], np.float32)))]
    model = model_of(nodes, {"x": ["n", 3]}, ["y"])
    mod = check_model(model, {"x": rand(2, 3)}, {"x": rand(5, 3)})
    assert "R.broadcast_to(R.const(2.5" in mod.script() and "R.shape([n, 3])" in mod.script()


@pytest.mark.parametrize("value", [None, np.array([7], np.int32)])
def test_constant_of_shape_at_run_time(value):
    attrs = {} if value is None else {"value": numpy_helper.from_array(value)}
    model = one_node("ConstantOfShape", {"s": i64(2, 3)}, attrs=attrs, opset=9)
    check_runtime(model, [{"s": i64(2, 3)}, {"s": i64(0, 4)}, {"s": i64(1, 1)}],
                  errors=[({"s": i64(-1, 2)}, r"ConstantOfShape node: element 0 is -1, but the model uses it "
                                                   r"as a dim \(must be >= 0\)")])


@pytest.mark.parametrize("start,limit,delta,dtype", [(0, 5, 1, np.int64), (10, 1, -3, np.int32), (1, 1, 1, np.int64),
                                                     (0.5, 3.2, 0.7, np.float32), (5, 0, 1, np.int64),
                                                     (-2.0, 2.0, 0.5, np.float64), (3, 10, 4, np.int16)])
def test_range_constant(start, limit, delta, dtype):
    consts = {n: np.array(v, dtype) for n, v in (("start", start), ("limit", limit), ("delta", delta))}
    check("Range", {}, consts=consts, opset=11)


def test_range_over_a_symbolic_dim():
    """Range(0, n, 1) on a Shape (torch's position ids); the converter lives in algorithm.py."""
    nodes = [node("Shape", ["x"], "s"), node("Squeeze", ["s"], "n"), node("Range", ["zero", "n", "one"], "y")]
    model = model_of(nodes, {"x": ["n"]}, ["y"], {"zero": np.array(0, np.int64), "one": np.array(1, np.int64)})
    check_model(model, {"x": rand(5)}, {"x": rand(1)}, {"x": rand(0)})


# ---------------------------------------------------------------- Constant, Identity


@pytest.mark.parametrize("opset,attrs", [
    (1, {"value": numpy_helper.from_array(rand(2, 3))}),
    (13, {"value": numpy_helper.from_array(rand(4, dtype=np.int32))}),
    (12, {"value_float": 1.5}), (12, {"value_floats": [1.0, 2.5]}),
    (13, {"value_int": 7}), (19, {"value_ints": [3, -1, 4]}),
    (21, {"value": numpy_helper.from_array(np.array(True))}),
])
def test_constant(opset, attrs):
    check("Constant", {}, inputs=[], attrs=attrs, opset=opset)


def test_constant_empty_list():
    model = one_node("Constant", {}, inputs=[], opset=23)
    model.graph.node[0].attribute.append(helper.make_attribute("value_ints", [], attr_type=onnx.AttributeProto.INTS))
    check_model(model, {})


@pytest.mark.parametrize("attrs", [{"value_string": "hi"}, {"value_strings": ["a", "é", ""]},
                                   {"value": numpy_helper.from_array(np.array([["a"], ["bc"]], object))}])
def test_constant_strings(attrs):
    check("Constant", {}, inputs=[], attrs=attrs, opset=13)


def test_constant_sparse_is_unsupported():
    sparse = helper.make_sparse_tensor(numpy_helper.from_array(np.array([1.0], np.float32), "v"),
                                       numpy_helper.from_array(i64(1), "i"), [3])
    model = one_node("Constant", {}, inputs=[], opset=13)
    model.graph.node[0].attribute.append(helper.make_attribute("sparse_value", sparse))
    with pytest.raises(UnsupportedOpError, match="sparse"):
        relaxpack.from_onnx(model)


@pytest.mark.parametrize("opset", [1, 13, 16, 21, 23])
def test_identity(opset):
    check("Identity", {"x": rand(2, 3)}, sym={"x": ["n", 3]}, more=[{"x": rand(4, 3)}], opset=opset)


# ---------------------------------------------------------------- Cast, CastLike

CASTS = [(np.float32, TensorProto.INT32), (np.float32, TensorProto.BOOL), (np.int64, TensorProto.FLOAT16),
         (np.bool_, TensorProto.FLOAT), (np.int32, TensorProto.INT64), (np.float64, TensorProto.FLOAT),
         (np.float32, TensorProto.UINT8), (np.int64, TensorProto.INT8), (np.float16, TensorProto.DOUBLE),
         (np.float32, TensorProto.FLOAT)]


@pytest.mark.parametrize("opset", [6, 13, 19, 21, 23])
@pytest.mark.parametrize("dtype,to", CASTS)
def test_cast(opset, dtype, to):
    x = (rand(3, 4, dtype=np.float32) * 20).astype(dtype) if dtype != np.bool_ else rand(3, 4, dtype=dtype)
    if to == TensorProto.UINT8 and np.dtype(dtype).kind == "f":
        x = np.abs(x)   # negative floats to unsigned ints are undefined
    check("Cast", {"x": x}, attrs={"to": to}, opset=opset)


def test_cast_opset1_names_the_type():
    x = rand(2, 3) * 10
    check("Cast", {"x": x}, attrs={"to": "INT32"}, opset=1, ref=lambda f: [f["x"].astype(np.int32)])


@pytest.mark.parametrize("opset,saturate", [(15, None), (19, None), (21, 1)])
def test_cast_like(opset, saturate):
    attrs = {} if saturate is None else {"saturate": saturate}
    check("CastLike", {"x": rand(2, 3) * 10, "t": rand(1, dtype=np.int64)}, attrs=attrs, opset=opset)


@pytest.mark.parametrize("to,dtype", [(TensorProto.INT32, np.int32), (TensorProto.INT64, np.int64),
                                      (TensorProto.FLOAT, np.float32)])
def test_cast_of_a_shape(to, dtype):
    model = model_of([node("Shape", ["x"], "s"), node("Cast", ["s"], "y", to=to)], {"x": ["n", 3]}, ["y"])
    mod = check_model(model, {"x": rand(2, 3)}, {"x": rand(5, 3)})
    assert "R.shape_to_tensor(R.shape([n, 3])" in mod.script()


BACKEND = [
    "test_cast_FLOAT_to_FLOAT16", "test_cast_FLOAT16_to_FLOAT", "test_cast_DOUBLE_to_FLOAT",
    "test_cast_FLOAT_to_DOUBLE", "test_cast_FLOAT16_to_DOUBLE", "test_cast_DOUBLE_to_FLOAT16",
    "test_cast_FLOAT_to_BFLOAT16", "test_cast_BFLOAT16_to_FLOAT",
    *(f"test_cast_{s}FLOAT_to_{t}" for s in ("", "no_saturate_")
      for t in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ")),
    *(f"test_cast_{s}_to_FLOAT" for s in ("FLOAT8E4M3FN", "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ")),
    "test_castlike_FLOAT_to_DOUBLE", "test_castlike_FLOAT16_to_FLOAT", "test_castlike_FLOAT_to_FLOAT8E4M3FN",
    "test_castlike_no_saturate_FLOAT_to_FLOAT8E5M2",
    "test_shape", "test_shape_example", "test_shape_clip_end", "test_shape_clip_start", "test_shape_end_1",
    "test_shape_end_negative_1", "test_shape_start_1", "test_shape_start_1_end_2", "test_shape_start_1_end_negative_1",
    "test_shape_start_greater_than_end", "test_shape_start_negative_1", "test_size", "test_size_example",
    "test_constant", "test_identity",
]


@pytest.mark.parametrize("name", BACKEND)
def test_backend_node(name):
    run_backend(name)


@pytest.mark.parametrize("name", ["test_constantofshape_float_ones", "test_constantofshape_int_shape_zero",
                                  "test_constantofshape_int_zeros"])
def test_backend_constant_of_shape(name):
    run_backend(name, ("x",))


@pytest.mark.parametrize("name", ["test_range_float_type_positive_delta", "test_range_int32_type_negative_delta"])
def test_backend_range(name):
    run_backend(name, ("start", "limit", "delta"))


# ---------------------------------------------------------------- shape arithmetic stays symbolic


def test_shape_arithmetic_through_the_data_movement_converters():
    """Gather (0-d, negative, 1-d), Slice, Concat, Split, Squeeze, Unsqueeze,
    Reshape, Identity, Cast and Expand on a shape compute at import time."""
    nodes = [
        node("Shape", ["x"], "s"),                                       # (b, s, 12)
        node("Gather", ["s", "i0"], "b"),                                # b, 0-d
        node("Gather", ["s", "neg"], "last"),                            # (12,) with index [-1]
        node("Slice", ["s", "one", "big"], "tail"),                      # (s, 12)
        node("Split", ["tail", "split"], ["seq", "d"], axis=0),          # (s,), (12,)
        node("Unsqueeze", ["b", "ax0"], "b1"),                           # (b,)
        node("Squeeze", ["seq", "ax0"], "seq0"),                         # s, 0-d
        node("Unsqueeze", ["seq0", "ax0"], "seq1"),
        node("Identity", ["seq1"], "seq2"),
        node("Cast", ["seq2"], "seq3", to=TensorProto.INT64),
        node("Concat", ["b1", "seq3", "three", "minus"], "target", axis=0),
        node("Reshape", ["x", "target"], "heads"),                       # (b, s, 3, 4)
        node("Reshape", ["target", "two_two"], "square"),                # (2, 2) from a 1-D shape
        node("Concat", ["b1", "one", "seq3", "last"], "t2", axis=0),     # (b, 1, s, 12)
        node("Expand", ["x", "t2"], "wide"),                             # (b, b, s, 12)
    ]
    consts = {"i0": np.array(0, np.int64), "neg": i64(-1), "one": i64(1), "big": i64(INT64_MAX),
              "split": i64(1, 1), "ax0": i64(0), "three": i64(3), "minus": i64(-1), "two_two": i64(2, 2)}
    model = model_of(nodes, {"x": ["batch", "seq", 12]}, ["heads", "wide", "square"], consts, opset=13)
    mod = check_model(model, {"x": rand(2, 3, 12)}, {"x": rand(1, 5, 12)})
    text = mod.script()
    assert "R.reshape(x, R.shape([batch, seq, 3, -1]))" in text
    assert "R.broadcast_to(x, R.shape([batch, batch, seq, 12]))" in text
    assert text.count("shape_to_tensor") == 1   # only the (2, 2) output needs the shape as a tensor

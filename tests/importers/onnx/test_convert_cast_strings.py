"""Cast and CastLike to and from strings against onnxruntime: numbers
formatted as ``%.8g`` with ``NaN``/``INF``/``-INF``, strings parsed incl.
the reserved literals in any case, integers wrapped to their width; and the
one place the reference evaluator agrees (string -> float)."""

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

import relaxpack
from relaxpack.errors import ExecutionError
from relaxpack.runtime import VirtualMachine

from .helpers import reference


def strings(*items):
    a = np.empty(len(items), dtype=object)
    a[:] = list(items)
    return a


def cast_model(src, dst, opset=21, like=False):
    if like:
        node = helper.make_node("CastLike", ["x", "t"], ["y"])
        inits = [helper.make_tensor("t", dst, [1], [b"a"] if dst == TP.STRING else [0])]
    else:
        node, inits = helper.make_node("Cast", ["x"], ["y"], to=dst), []
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", src, ["n"])],
                              [helper.make_tensor_value_info("y", dst, ["n"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def run(m, x):
    return VirtualMachine(relaxpack.build(relaxpack.from_onnx(m))).run({"x": x})["y"]


FLOATS = np.array([0.1, 1.0, -2.5, 1e20, 1e-7, 3.14159265, np.nan, np.inf, -np.inf, 100, 123456789, 0.0, -0.0,
                   1 / 3], np.float32)


@pytest.mark.parametrize("src, x", [
    (TP.FLOAT, FLOATS), (TP.DOUBLE, FLOATS.astype(np.float64)), (TP.FLOAT16, FLOATS[:6].astype(np.float16)),
    (TP.INT64, np.array([0, -5, 2 ** 62], np.int64)), (TP.INT8, np.array([-128, 7], np.int8)),
    (TP.UINT64, np.array([2 ** 64 - 1], np.uint64)), (TP.BOOL, np.array([True, False])),
], ids=["float", "double", "float16", "int64", "int8", "uint64", "bool"])
@pytest.mark.parametrize("like", [False, True], ids=["Cast", "CastLike"])
def test_numbers_to_strings(src, x, like):
    m = cast_model(src, TP.STRING, like=like)
    got, want = run(m, x), reference(m, {"x": x}, "ort")[0]
    assert got.dtype == object and got.tolist() == want.tolist()


TEXT = strings("1.5", "INF", "-inf", "+Inf", "NaN", "nan", "-NaN", "1e3", " 2", "0x10", "1E-2", "-0", "3.4e39", "100")


@pytest.mark.parametrize("dst, dtype", [(TP.FLOAT, np.float32), (TP.DOUBLE, np.float64), (TP.FLOAT16, np.float16)],
                         ids=["float", "double", "float16"])
def test_strings_to_floats(dst, dtype):
    m = cast_model(TP.STRING, dst)
    got, want = run(m, TEXT), reference(m, {"x": TEXT}, "ort")[0]
    assert got.dtype == dtype
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))    # "-0" is -0.0


@pytest.mark.parametrize("dst", [TP.INT64, TP.INT32, TP.INT8, TP.UINT8, TP.UINT64],
                         ids=["int64", "int32", "int8", "uint8", "uint64"])
def test_strings_to_integers_wrap_like_onnxruntime(dst):
    x = strings("1", "-7", "100", "+5", " 3", "2147483648")
    m = cast_model(TP.STRING, dst)
    got, want = run(m, x), reference(m, {"x": x}, "ort")[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def test_strings_to_floats_agree_with_the_reference_evaluator():
    x = strings("1.5", "INF", "-inf", "NaN", "1e3", " 2", "1E-2", "-0", "100")
    m = cast_model(TP.STRING, TP.FLOAT, like=True)
    np.testing.assert_array_equal(run(m, x), reference(m, {"x": x}, "onnx")[0])


def test_round_trip_and_string_to_bool():
    x = strings("0", "1", "2", "-0.0", "nan")
    assert run(cast_model(TP.STRING, TP.BOOL), x).tolist() == [False, True, True, False, True]
    floats = FLOATS[np.isfinite(FLOATS)]
    back = run(cast_model(TP.STRING, TP.FLOAT), run(cast_model(TP.FLOAT, TP.STRING), floats))
    np.testing.assert_array_equal(back, floats)        # 8 significant digits hold every float32


def test_a_string_that_is_not_a_number_fails_naming_it():
    with pytest.raises(ExecutionError, match="'hello'"):
        run(cast_model(TP.STRING, TP.FLOAT), strings("1", "hello"))
    with pytest.raises(ExecutionError, match="'1_0'"):
        run(cast_model(TP.STRING, TP.INT64), strings("1_0"))


def test_cast_of_a_string_constant_folds():
    node = helper.make_node("Cast", ["c"], ["k"], to=TP.INT64)
    add = helper.make_node("Add", ["x", "k"], ["y"])
    graph = helper.make_graph([node, add], "g", [helper.make_tensor_value_info("x", TP.INT64, [2])],
                              [helper.make_tensor_value_info("y", TP.INT64, [2])],
                              [helper.make_tensor("c", TP.STRING, [2], [b"40", b"-2"])])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10)
    x = np.array([2, 2], np.int64)
    np.testing.assert_array_equal(run(m, x), reference(m, {"x": x}, "ort")[0])

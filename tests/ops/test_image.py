"""Struct-info inference of image.resize and pad."""

import pytest

from relaxpack.errors import IRError, ShapeError
from relaxpack.ir import BlockBuilder, DimAnalyzer, ShapeExpr, ShapeStructInfo, TensorStructInfo, Var, sym
from relaxpack.ir.parser import parse
from relaxpack.ir.equality import assert_structural_equal
from relaxpack.ops import make_call

b, h, w = sym("batch"), sym("h"), sym("w")


def T(shape, dtype="float32", ndim=-1):
    return TensorStructInfo(shape, dtype, ndim)


def arg(sinfo, name="x"):
    return Var(name, struct_info=sinfo)


def infer(name, *args, analyzer=None, **attrs):
    args = [a if not isinstance(a, (TensorStructInfo, ShapeStructInfo)) else arg(a, f"x{i}")
            for i, a in enumerate(args)]
    return BlockBuilder(analyzer=analyzer).infer_call(make_call(name, *args, **attrs))


def size(*dims):
    return ShapeExpr(tuple(dims))


# ---------------------------------------------------------------- image.resize


@pytest.mark.parametrize("data, dims, axes, out", [
    (T((1, 3, 4, 5)), (8, 15), (2, 3), T((1, 3, 8, 15))),
    (T((1, 3, 4, 5)), (15, 8), (3, 2), T((1, 3, 8, 15))),        # axes in any order
    (T((1, 3, 4, 5)), (7,), (-1,), T((1, 3, 4, 7))),             # negative axis
    (T((b, 3, h, w)), (2 * h, w // 2), (2, 3), T((b, 3, 2 * h, w // 2))),
    (T((b, 3, h, w)), (0, 9), (2, 3), T((b, 3, 0, 9))),
    (T((4, 6), "uint8"), (b,), (0,), T((b, 6), "uint8")),
    (T(None, "float32", 4), (8, 8), (2, 3), T(None, "float32", 4)),
    (T(None, "float32"), (8, 8), (2, 3), T(None, "float32")),
])
def test_resize_shapes(data, dims, axes, out):
    assert infer("image.resize", data, size(*dims), axes=axes, scales=None, method="linear") == out


def test_resize_size_of_unknown_values_keeps_the_rank():
    assert infer("image.resize", T((1, 3, 4, 5)), ShapeStructInfo(ndim=2), axes=(2, 3)) == T(None, "float32", 4)


def test_resize_nearest_takes_any_dtype_interpolation_numbers_only():
    assert infer("image.resize", T((2, 3), "bool"), size(4), axes=(1,)) == T((2, 4), "bool")
    assert infer("image.resize", T((2, 3), "string"), size(4), axes=(1,)) == T((2, 4), "string")
    with pytest.raises(ShapeError, match=r"R\.image\.resize: data must have a numeric \(int or float\) dtype, "
                                         r"got bool \(shape \(2, 3\)\)"):
        infer("image.resize", T((2, 3), "bool"), size(4), axes=(1,), method="cubic")


@pytest.mark.parametrize("attrs, error, message", [
    (dict(axes=(2, 3), method="bilinear"), IRError, r"attribute method must be one of nearest_neighbor, linear, "
                                                    r"cubic; got 'bilinear'"),
    (dict(axes=(2, 3), coordinate_transformation_mode="tf"), IRError,
     r"attribute coordinate_transformation_mode must be one of"),
    (dict(axes=(2, 3), rounding_method="round"), IRError, r"attribute rounding_method must be one of"),
    (dict(axes=(2, 3), scales=(2.0,)), IRError, r"attribute scales must be a tuple of 2 numbers, got \(2.0,\)"),
    (dict(axes=(2, 3), scales=(2.0, 0.0)), IRError, r"scales \(2.0, 0.0\) must be positive"),
    (dict(axes=(2, 3), coordinate_transformation_mode="tf_crop_and_resize"), IRError,
     r"coordinate_transformation_mode 'tf_crop_and_resize' needs the attribute roi"),
    (dict(axes=(2, 3), roi=(0.0, 1.0)), IRError, r"attribute roi must be a tuple of 4 numbers"),
    (dict(axes=(2, 3), cubic_exclude=1), IRError, r"attribute cubic_exclude must be a bool, got 1"),
    (dict(axes=(2, 3), cubic_alpha="a"), IRError, r"attribute cubic_alpha must be a number, got 'a'"),
    (dict(axes=(2, 4)), ShapeError, r"axis 4 is out of range for a tensor of rank 4 of shape \(1, 3, 4, 5\)"),
    (dict(axes=(2, -2)), ShapeError, r"repeated axis in \(2, -2\) for rank 4"),
    (dict(axes=(2,)), ShapeError, r"size R\.Shape\(8, 8\) must give one dim per resized axis \(2,\)"),
])
def test_resize_errors_name_the_op(attrs, error, message):
    with pytest.raises(error, match=r"R\.image\.resize: " + message):
        infer("image.resize", T((1, 3, 4, 5)), size(8, 8), **attrs)


def test_resize_negative_size():
    with pytest.raises(ShapeError, match=r"R\.image\.resize: size R\.Shape\(8, -1\) has a negative dim"):
        infer("image.resize", T((1, 3, 4, 5)), size(8, -1), axes=(2, 3))


def test_resize_size_must_be_a_shape():
    with pytest.raises(ShapeError, match=r"R\.image\.resize: argument 1 \(size\) must be a shape, got \(2,\)"):
        infer("image.resize", T((1, 3, 4, 5)), T((2,), "int64"), axes=(2, 3))


def test_resize_round_trips_through_the_text_form():
    x = Var("x", struct_info=T((b, 3, h, w)))
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            y = bb.emit_output(make_call("image.resize", x, size(2 * h, 7), axes=(2, 3), scales=(2.0, 0.25),
                                         roi=(0.0, 0.1, 1.0, 0.9), method="cubic",
                                         coordinate_transformation_mode="tf_crop_and_resize",
                                         extrapolation_value=-1.5))
        bb.emit_func_output(y)
    mod = bb.get()
    assert "R.image.resize(x, R.shape([2 * h, 7])" in mod.script()
    assert_structural_equal(parse(mod.script()), mod)


# ---------------------------------------------------------------- pad


@pytest.mark.parametrize("data, pads, mode, out", [
    (T((3, 4)), (1, 2, 3, 4), "constant", T((7, 10))),
    (T((3, 4)), (0, -1, 0, -2), "constant", T((3, 1))),           # negative pads crop
    (T((3, 4)), (-3, 0, 0, 0), "edge", T((0, 4))),
    (T((b, 4)), (1, 0, 2, 0), "reflect", T((b + 3, 4))),
    (T((b, 4)), (-1, 0, 0, 0), "wrap", T((b - 1, 4))),
    (T((), "int64"), (), "constant", T((), "int64")),
    (T(None, "float32", 2), (1, 1, 1, 1), "constant", T(None, "float32", 2)),
    (T(None, "float32"), (1, 1, 1, 1), "constant", T(None, "float32")),
])
def test_pad_shapes(data, pads, mode, out):
    assert infer("pad", data, pads=pads, pad_mode=mode) == out


def test_pad_value_argument():
    out = infer("pad", T((b, 4)), T((), "float32"), pads=(0, 1, 0, 2))
    assert out == T((b, 7))
    assert infer("pad", T((2,), "int8"), T((1,), "int8"), pads=(1, 1)) == T((4,), "int8")


@pytest.mark.parametrize("args, attrs, error, message", [
    ((T((3, 4)),), dict(pads=(1, 2, 3)), IRError, r"pads \(1, 2, 3\) must hold a begin and an end per axis"),
    ((T((3, 4)),), dict(pads=(1, 2)), ShapeError, r"pads \(1, 2\) need 4 values \(begins, then ends\) for data "
                                                   r"of shape \(3, 4\)"),
    ((T((3, 4)),), dict(pads=(-2, 0, -2, 0)), ShapeError, r"pads \(-2, 0, -2, 0\) crop more than the dim 3 of "
                                                           r"axis 0 of shape \(3, 4\)"),
    ((T((0, 4)),), dict(pads=(1, 0, 0, 0), pad_mode="edge"), ShapeError,
     r"pad_mode 'edge' cannot extend the empty axis 0 of shape \(0, 4\)"),
    ((T((3, 4)),), dict(pads=(0, 0, 0, 0), pad_mode="symmetric"), IRError,
     r"attribute pad_mode must be one of constant, reflect, edge, wrap; got 'symmetric'"),
    ((T((3, 4)),), dict(pads=(0, 0, 0, 0), pad_value=None), IRError,
     r"attribute pad_value must be a number, bool or string, got None"),
    ((T((3, 4)), T((), "float32")), dict(pads=(0, 0, 0, 0), pad_mode="edge"), ShapeError,
     r"a pad value argument needs pad_mode 'constant', not 'edge'"),
    ((T((3, 4)), T((2,), "float32")), dict(pads=(0, 0, 0, 0)), ShapeError,
     r"the pad value must be a scalar, got shape \(2,\)"),
    ((T((3, 4)), T((), "float16")), dict(pads=(0, 0, 0, 0)), ShapeError,
     r"the pad value's dtype float16 differs from the data's float32"),
])
def test_pad_errors_name_the_op(args, attrs, error, message):
    with pytest.raises(error, match=r"R\.pad: " + message):
        infer("pad", *args, **attrs)


def test_pad_crop_of_a_symbolic_dim_that_is_provably_too_small():
    ana = DimAnalyzer({"batch": (1, 4)})
    with pytest.raises(ShapeError, match=r"R\.pad: pads \(-3, 0, -3, 0\) crop more than the dim batch"):
        infer("pad", T((b, 4)), pads=(-3, 0, -3, 0), analyzer=ana)
    assert infer("pad", T((b, 4)), pads=(-1, 0, 0, 0), analyzer=ana) == T((b - 1, 4))


# ---------------------------------------------------------------- dynamic_pad


def test_dynamic_pad_shapes_are_symbolic():
    t = 2 * ((h + 1) // 2) + 1 - h          # SAME padding of a stride-2, 3-wide window over h
    out = infer("dynamic_pad", T((b, 3, h)), size(0, 0, t // 2, 0, 0, t - t // 2), pad_value=0.0)
    assert out == T((b, 3, 2 * ((h + 1) // 2) + 1))
    assert infer("dynamic_pad", T((b, 4)), size(h, 0, 1, w)) == T((b + h + 1, w + 4))


@pytest.mark.parametrize("args, attrs, error, message", [
    ((T((3, 4)), size(h, 0, 0)), {}, IRError, r"pads \(h, 0, 0\) must hold a begin and an end per axis"),
    ((T((3, 4)), size(-4, 0, 0, 0)), {}, ShapeError, r"pads \(-4, 0, 0, 0\) crop more than the dim 3"),
    ((T((3, 4)), size(h, 0, 0, 0)), dict(pad_value="z"), IRError,
     r"attribute pad_value must be a number or bool, got 'z'"),
    ((T((3, 4)), T((4,), "int64")), {}, ShapeError, r"argument 1 \(pads\) must be a shape"),
])
def test_dynamic_pad_errors_name_the_op(args, attrs, error, message):
    with pytest.raises(error, match=r"R\.dynamic_pad: " + message):
        infer("dynamic_pad", *args, **attrs)

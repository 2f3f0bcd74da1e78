"""Converters of Resize, Upsample and Pad (converters/image.py) against
onnxruntime, or onnx's reference evaluator where the two disagree (onnx's
reference is the spec's reading: float64 coordinates, ``scale * in`` as the
output length of align_corners / tf_crop_and_resize, -0.5 for
pytorch_half_pixel of length 1; onnxruntime uses float32 and the integer
length), plus ONNX's backend node tests of these ops.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import relaxpack
from relaxpack.errors import ShapeError, UnsupportedOpError
from relaxpack.runtime import VirtualMachine
from relaxpack.vm_build import build

from .backend_case import assert_close, node_cases, run_backend_case
from .helpers import check_runtime, i64, one_node, output_sinfo, rand, reference, run_backend

#: onnxruntime interpolates in float32, relaxpack (like onnx's reference) in float64
TOLERANCE = {"ort": dict(rtol=1e-4, atol=1e-5), "onnx": dict(rtol=1e-5, atol=1e-6)}


def check_model(model, *feeds_list, ref="ort", dims=None, tol=None):
    """Import and build ``model`` once; compare it with ``ref`` at each feeds."""
    tol = tol or TOLERANCE.get(ref, TOLERANCE["onnx"])
    mod = relaxpack.from_onnx(model, dims=dims)
    vm = VirtualMachine(build(mod))
    for feeds in feeds_list:
        got = vm.run(feeds)
        for out, want in zip(model.graph.output, reference(model, feeds, ref)):
            assert_close(got[out.name], want, tol["rtol"], tol["atol"], out.name)
    return mod


def resize_model(x_shape, *, scales=None, sizes=None, roi=None, opset=19, dtype=np.float32, **attrs):
    """A one-Resize model with constant roi/scales/sizes (omitted when None)."""
    consts = {k: np.array(v, t) for k, v, t in (("roi", roi, np.float32), ("scales", scales, np.float32),
                                                 ("sizes", sizes, np.int64)) if v is not None}
    names = ["x"] + [k if k in consts else "" for k in ("roi", "scales", "sizes")]
    while names[-1] == "":
        names.pop()
    if opset < 13:      # roi and scales are required inputs (empty when unused)
        for k in ("roi", "scales"):
            consts.setdefault(k, np.zeros(0, np.float32))
        names = ["x", "roi", "scales"] + (["sizes"] if "sizes" in consts else [])
    feeds = {"x": np.zeros(x_shape, dtype)}
    return one_node("Resize", feeds, inputs=names, consts=consts, attrs=attrs, opset=opset)


def check_resize(x, *, ref="ort", tol=None, **kwargs):
    return check_model(resize_model(x.shape, dtype=x.dtype, **kwargs), {"x": x}, ref=ref, tol=tol)


# ---------------------------------------------------------------- Resize 11, 13, 18, 19


@pytest.mark.parametrize("opset", [11, 13, 18, 19])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coord", ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"])
def test_resize_opsets_against_onnxruntime(opset, mode, coord):
    x = rand(2, 3, 5, 7, seed=opset)
    check_resize(x, scales=[1, 1, 2, 3], opset=opset, mode=mode, coordinate_transformation_mode=coord)
    check_resize(x, sizes=[2, 3, 3, 11], opset=opset, mode=mode, coordinate_transformation_mode=coord)


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
@pytest.mark.parametrize("coord", ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                   "asymmetric", "tf_crop_and_resize"])
def test_resize_fractional_scales_against_onnx_reference(mode, coord):
    x = rand(1, 2, 5, 7, seed=1)
    roi = dict(roi=[0, 0, 0.2, 0.1, 1, 1, 0.9, 0.7], extrapolation_value=-2.0) if coord == "tf_crop_and_resize" else {}
    for scales in ([1, 1, 0.6, 1.7], [1, 1, 0.5, 0.3]):
        check_resize(x, ref="onnx", scales=scales, mode=mode, coordinate_transformation_mode=coord, **roi)


def test_resize_half_pixel_symmetric_against_onnxruntime():
    x = rand(1, 2, 5, 7, seed=2)
    for mode in ("linear", "cubic"):
        check_resize(x, sizes=[1, 2, 8, 4], mode=mode, coordinate_transformation_mode="half_pixel_symmetric")


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
def test_resize_nearest_modes(nearest_mode):
    x = rand(1, 1, 4, 6, seed=3)
    for coord in ("half_pixel", "asymmetric", "align_corners"):
        check_resize(x, sizes=[1, 1, 7, 5], mode="nearest", nearest_mode=nearest_mode,
                     coordinate_transformation_mode=coord)


def test_resize_tf_half_pixel_for_nn():
    x = rand(1, 2, 5, 7, seed=9)
    for scales in ([1, 1, 2, 3], [1, 1, 1.6, 2.4]):
        for nearest_mode in ("round_prefer_floor", "ceil"):
            check_resize(x, scales=scales, opset=11, mode="nearest", nearest_mode=nearest_mode,
                         coordinate_transformation_mode="tf_half_pixel_for_nn")
    # the spec drops it at 13; onnxruntime runs it at every opset and tf2onnx writes it there
    for opset in (13, 18, 19):
        check_resize(x, sizes=[1, 2, 10, 14], opset=opset, mode="nearest",
                     coordinate_transformation_mode="tf_half_pixel_for_nn")


@pytest.mark.parametrize("a, exclude", [(-0.5, 1), (-0.75, 1), (-0.6, 0)])
def test_resize_cubic_coefficient_and_exclude_outside(a, exclude):
    x = rand(1, 2, 6, 5, seed=4)
    check_resize(x, scales=[1, 1, 2, 3], mode="cubic", cubic_coeff_a=a, exclude_outside=exclude)
    check_resize(x, sizes=[1, 2, 4, 3], mode="cubic", cubic_coeff_a=a, exclude_outside=exclude)


def test_resize_tf_crop_and_resize():
    x = rand(2, 3, 6, 5, seed=5)
    roi = [0, 0, 0.4, 0.6, 1, 1, 1.2, 1.7]
    for mode in ("nearest", "linear", "cubic"):
        check_resize(x, sizes=[2, 3, 3, 4], roi=roi, mode=mode, coordinate_transformation_mode="tf_crop_and_resize",
                     extrapolation_value=10.0)
        check_resize(x, sizes=[4, 3], roi=[0.4, 0.6, 1.2, 1.7], axes=[2, 3], mode=mode,
                     coordinate_transformation_mode="tf_crop_and_resize")
    check_resize(x, sizes=[3, 4], roi=[0.6, 0.4, 1.7, 1.2], axes=[3, 2], mode="linear",
                 coordinate_transformation_mode="tf_crop_and_resize")
    with pytest.raises(ShapeError, match=r"Resize node: tf_crop_and_resize needs a constant roi of 8 values"):
        relaxpack.from_onnx(resize_model((2, 3, 6, 5), sizes=[2, 3, 3, 4], mode="linear",
                                         coordinate_transformation_mode="tf_crop_and_resize"))


@pytest.mark.parametrize("mode", ["linear", "cubic"])
def test_resize_antialias(mode):
    x = rand(1, 2, 12, 9, seed=6)
    check_resize(x, scales=[1, 1, 0.5, 0.3], opset=18, mode=mode, antialias=1)
    check_resize(x, sizes=[1, 2, 5, 4], opset=18, mode=mode, antialias=1)
    check_resize(x, sizes=[1, 2, 5, 4], opset=18, mode=mode, antialias=1, exclude_outside=1)


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
@pytest.mark.parametrize("axes", [[2, 3], [3, 2], [-1, -2]])
def test_resize_axes_and_keep_aspect_ratio(axes, policy):
    x = rand(2, 3, 4, 6, seed=7)
    # onnxruntime ignores the policy when axes are negative: compare with the same axes counted from 0
    same = resize_model(x.shape, sizes=[7, 5], axes=[a % 4 for a in axes], opset=18, mode="linear",
                        keep_aspect_ratio_policy=policy)
    model = resize_model(x.shape, sizes=[7, 5], axes=axes, opset=18, mode="linear", keep_aspect_ratio_policy=policy)
    check_model(model, {"x": x}, ref=lambda feeds: reference(same, feeds, "ort"))
    check_resize(x, scales=[2.0, 1.5], axes=axes, opset=18, mode="nearest")


@pytest.mark.parametrize("dtype", [np.float16, np.float64, np.int8, np.uint8, np.int32, np.int64])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_dtypes(dtype, mode):
    x = rand(2, 2, 5, 4, dtype=dtype, seed=8)
    tol = dict(rtol=1e-3, atol=1e-3) if dtype == np.float16 else dict(rtol=1e-12, atol=1e-12)
    check_resize(x, ref="onnx", scales=[1, 1, 1.6, 2.5], mode=mode, tol=tol)


def test_resize_empty_and_identity():
    x = rand(0, 3, 4, 5)
    check_resize(x, scales=[1, 1, 2, 3], mode="linear")
    mod = relaxpack.from_onnx(resize_model((2, 3, 4, 5), scales=[1, 1, 1, 1], mode="cubic"))
    assert "image.resize" not in mod.script()
    mod = relaxpack.from_onnx(resize_model((2, 3, 4, 5), sizes=[2, 3, 8, 5], mode="linear"))
    assert "axes=(2,)" in mod.script()              # only the axis that changes


# ---------------------------------------------------------------- symbolic dims


def test_resize_symbolic_batch_integer_scale_one_build_two_batches():
    model = one_node("Resize", {"x": rand(1, 3, 4, 5)}, inputs=["x", "", "s"],
                     consts={"s": np.array([1, 1, 2, 3], np.float32)}, attrs={"mode": "cubic"}, opset=19,
                     sym={"x": ["batch", 3, 4, 5]})
    mod = check_model(model, {"x": rand(1, 3, 4, 5, seed=1)}, {"x": rand(4, 3, 4, 5, seed=2)})
    assert 'R.Tensor(("batch", 3, 8, 15), "float32")' in mod.script()


def test_resize_symbolic_spatial_dims_with_k_and_one_over_k():
    model = one_node("Resize", {"x": rand(1, 2, 4, 6)}, inputs=["x", "", "s"],
                     consts={"s": np.array([1, 1, 3, 1 / 3], np.float32)}, attrs={"mode": "linear"}, opset=19,
                     sym={"x": ["n", 2, "h", "w"]})
    mod = check_model(model, {"x": rand(1, 2, 4, 6, seed=1)}, {"x": rand(2, 2, 3, 10, seed=2)},
                      {"x": rand(1, 2, 5, 2, seed=3)})
    assert 'R.Tensor(("n", 2, "3 * h", "w // 3"), "float32")' in mod.script()


def test_resize_one_over_k_must_be_exact_for_the_dims_range():
    def model(k):
        return one_node("Resize", {"x": rand(1, 50)}, inputs=["x", "", "s"], opset=19, sym={"x": [1, "w"]},
                        consts={"s": np.array([1, 1 / k], np.float32)})
    # float32(1/3) is a little above 1/3: floor(w * scale) == w // 3 for w below about 1.1e7
    assert 'R.Tensor((1, "w // 3"), "float32")' in relaxpack.from_onnx(model(3), dims={"w": (1, 10 ** 6)}).script()
    # beyond that, the exact fraction float32(1/3) == 11184811 / 2**25
    script = relaxpack.from_onnx(model(3), dims={"w": (1, 10 ** 8)}).script()
    assert "11184811" in script and "w // 3" not in script
    # float32(1/25) is below 1/25: floor(25 * scale) == 0, not 25 // 25
    mod = check_model(model(25), *({"x": rand(1, w, seed=w)} for w in (24, 25, 26, 50, 51)), ref="onnx")
    assert "w // 25" not in mod.script()


def test_resize_sizes_computed_from_shape_stay_symbolic():
    # sizes = concat(shape(x)[:2], [9, 4]): the exporters' way of resizing to a fixed size
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Slice", ["shape", "zero", "two"], ["nc"]),
        helper.make_node("Concat", ["nc", "hw"], ["sizes"], axis=0),
        helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear"),
    ]
    inits = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in (("zero", [0]), ("two", [2]),
                                                                          ("hw", [9, 4]))]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT,
                                                                         ["n", "c", "h", "w"])],
                              [onnx.ValueInfoProto(name="y")], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 19)], ir_version=10)
    mod = check_model(model, {"x": rand(1, 2, 4, 6, seed=1)}, {"x": rand(3, 1, 7, 3, seed=2)})
    assert 'R.image.resize(x, R.shape([9, 4])' in mod.script()


@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_fractional_scales_on_symbolic_dims(mode):
    """floor(h * 1.5) == (3 * h) // 2 and floor(w * 0.75) == (3 * w) // 4 exactly: one build, several sizes."""
    model = one_node("Resize", {"x": rand(1, 2, 4, 5)}, inputs=["x", "", "s"], opset=19,
                     sym={"x": ["n", 2, "h", "w"]}, consts={"s": np.array([1, 1, 1.5, 0.75], np.float32)},
                     attrs={"mode": mode})
    mod = check_model(model, *({"x": rand(n, 2, h, w, seed=h * w)} for n, h, w in ((1, 4, 5), (2, 5, 8), (1, 7, 3))))
    assert 'R.Tensor(("n", 2, "(3 * h) // 2", "(3 * w) // 4"), "float32")' in mod.script()


def test_resize_unsupported_cases_name_what_is_missing():
    sym = {"x": ["n", 3, "h", 5]}
    with pytest.raises(UnsupportedOpError, match=r"antialias=1 needs mode 'linear' or 'cubic', not 'nearest'"):
        relaxpack.from_onnx(resize_model((1, 3, 4, 5), scales=[1, 1, 0.5, 0.5], opset=18, antialias=1))
    with pytest.raises(UnsupportedOpError, match=r"coordinate_transformation_mode 'half_pixel_symmetric'"):
        relaxpack.from_onnx(resize_model((1, 3, 4, 5), scales=[1, 1, 2, 2], opset=18,
                                         coordinate_transformation_mode="half_pixel_symmetric"))
    with pytest.raises(UnsupportedOpError, match=r"keep_aspect_ratio_policy 'not_larger' needs static"):
        relaxpack.from_onnx(one_node("Resize", {"x": rand(1, 3, 4, 5)}, inputs=["x", "", "", "s"], opset=19,
                                     sym=sym, consts={"s": np.array([8, 8], np.int64)},
                                     attrs={"axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"}))
    with pytest.raises(ShapeError, match=r"Resize node: needs exactly one of the inputs scales and sizes"):
        relaxpack.from_onnx(resize_model((1, 3, 4, 5), scales=[1, 1, 2, 2], sizes=[1, 3, 8, 10], opset=13))


# ---------------------------------------------------------------- scales, sizes, roi fed at run time


def feeds_of(x_shapes, name, values, dtype):
    return [{"x": rand(*shape, seed=i), name: np.array(v, dtype)}
            for i, shape in enumerate(x_shapes) for v in values]


@pytest.mark.parametrize("mode, extra", [("nearest", {}), ("linear", {}), ("cubic", {}),
                                         ("linear", {"antialias": 1}), ("cubic", {"exclude_outside": 1}),
                                         ("nearest", {"coordinate_transformation_mode": "asymmetric"})])
def test_resize_scales_fed_at_run_time(mode, extra):
    """One build, up- and downsampling, odd sizes; the resized axes get fresh dims."""
    feeds = feeds_of([(1, 2, 5, 7), (2, 1, 3, 4)], "s", [[2, 3], [0.6, 0.35], [1, 1.5]], np.float32)
    model = one_node("Resize", feeds[0], inputs=["x", "", "s"], attrs={"mode": mode, "axes": [2, 3]} | extra,
                     opset=19, sym={"x": ["n", "c", "h", "w"]})
    mod = check_model(model, *feeds, ref="onnx")
    assert 'R.call_packed("dyn.resize"' in mod.script()
    out = mod["main"].ret_struct_info.shape
    assert out[:2] == mod["main"].params[0].struct_info.shape[:2] and all(not isinstance(d, int) for d in out[2:])


@pytest.mark.parametrize("policy", ["stretch", "not_larger", "not_smaller"])
def test_resize_sizes_fed_at_run_time(policy):
    feeds = feeds_of([(1, 2, 5, 7), (1, 1, 4, 4)], "s", [[8, 9], [3, 2], [5, 7]], np.int64)
    model = one_node("Resize", feeds[0], inputs=["x", "", "", "s"], opset=19, sym={"x": [1, "c", "h", "w"]},
                     attrs={"mode": "linear", "axes": [3, 2], "keep_aspect_ratio_policy": policy})
    check_model(model, *feeds, ref="onnx")


def test_resize_roi_fed_at_run_time_keeps_constant_sizes():
    feeds = [{"x": rand(1, 1, 5, 6, seed=i), "roi": np.array(r, np.float32)} for i, r in
             enumerate([[0.1, 0.2, 0.9, 0.7], [0.0, 0.0, 1.0, 1.0], [-0.2, 0.5, 1.3, 1.1]])]
    model = one_node("Resize", feeds[0], inputs=["x", "roi", "", "s"], consts={"s": np.array([4, 3], np.int64)},
                     attrs={"mode": "linear", "axes": [2, 3], "coordinate_transformation_mode": "tf_crop_and_resize",
                            "extrapolation_value": 7.0}, opset=19)
    mod = check_model(model, *feeds, ref="onnx")
    assert mod["main"].ret_struct_info.shape == (1, 1, 4, 3)


def test_resize_of_an_empty_tensor_at_run_time():
    feeds = feeds_of([(0, 2, 3, 3)], "s", [[1, 1, 2, 2], [1, 1, 0.5, 1]], np.float32)
    check_model(one_node("Resize", feeds[0], inputs=["x", "", "s"], opset=13, sym={"x": ["n", 2, 3, 3]}),
                *feeds, ref="onnx")


@pytest.mark.parametrize("op, opset", [("Upsample", 9), ("Resize", 10)])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_v10_and_upsample_scales_fed_at_run_time(op, opset, mode):
    scales = [[1, 1, 2, 3], [1, 1, 1.7, 2.5]] + ([[2, 1, 1, 1]] if mode == "nearest" else [])
    if op == "Resize":   # onnxruntime's nearest rounds up when downsampling
        scales += [[1, 1, 0.6, 0.35], [1, 1, 0.6, 2.5]]
    feeds = feeds_of([(2, 3, 4, 5)], "s", scales, np.float32)
    check_model(one_node(op, feeds[0], attrs={"mode": mode}, opset=opset), *feeds)


def test_resize_bad_scales_at_run_time_are_errors():
    model = one_node("Resize", {"x": rand(1, 1, 2, 2), "s": np.ones(4, np.float32)}, inputs=["x", "", "s"],
                     opset=19, sym={"s": ["k"]})
    vm = VirtualMachine(build(relaxpack.from_onnx(model)))
    with pytest.raises(ShapeError, match=r"dyn.resize: scales \[1.0, 2.0\] must hold 4 values"):
        vm.run({"x": rand(1, 1, 2, 2), "s": np.array([1, 2], np.float32)})
    with pytest.raises(ShapeError, match=r"dyn.resize: scales \[1.0, 1.0, 0.0, 1.0\] must be positive"):
        vm.run({"x": rand(1, 1, 2, 2), "s": np.array([1, 1, 0, 1], np.float32)})
    wrong = one_node("Resize", {"x": rand(1, 1, 2, 2), "s": np.ones(3, np.float32)}, inputs=["x", "", "s"], opset=19)
    with pytest.raises(ShapeError, match=r"Resize node: scales of shape \(3,\) need one value per resized axis"):
        relaxpack.from_onnx(wrong)


# ---------------------------------------------------------------- Resize-10, Upsample


@pytest.mark.parametrize("op, opset", [("Upsample", 7), ("Upsample", 9), ("Resize", 10)])
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_v10_and_upsample(op, opset, mode):
    x = rand(2, 3, 4, 5)
    all_scales = [[1, 1, 2, 3], [1, 1, 1.7, 2.5]] + ([[2, 1, 1, 1]] if mode == "nearest" else [])
    if op == "Resize":   # onnxruntime's nearest rounds up when downsampling
        all_scales += [[1, 1, 0.6, 0.35], [1, 1, 0.6, 2.5]]
    for scales in all_scales:
        if opset == 7:
            model = one_node(op, {"x": x}, attrs={"mode": mode, "scales": [float(s) for s in scales]}, opset=7)
        else:
            model = one_node(op, {"x": x}, consts={"s": np.array(scales, np.float32)}, attrs={"mode": mode},
                             opset=opset)
        check_model(model, {"x": x})


def test_upsample_symbolic_batch():
    model = one_node("Upsample", {"x": rand(1, 3, 4, 5)}, consts={"s": np.array([1, 1, 2, 2], np.float32)},
                     opset=9, sym={"x": ["batch", 3, 4, 5]})
    check_model(model, {"x": rand(1, 3, 4, 5, seed=1)}, {"x": rand(3, 3, 4, 5, seed=2)})


# ---------------------------------------------------------------- Pad


PAD_DTYPES = [np.float32, np.float64, np.int8, np.uint8, np.int32, np.int64, np.bool_, np.float16]


@pytest.mark.parametrize("opset", [11, 13, 18, 19, 21])
@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_opsets(opset, mode):
    x = rand(3, 4, 5, seed=opset)
    for pads, value in (([0, 1, 2, 2, 1, 0], 1.5), ([1, -1, 0, -1, 2, 1], -3.0), ([0, 0, 0, 0, 0, 0], 0.0)):
        check_model(one_node("Pad", {"x": x}, consts={"p": np.array(pads, np.int64), "v": np.array(value, np.float32)},
                             attrs={"mode": mode}, opset=opset), {"x": x})


@pytest.mark.parametrize("dtype", PAD_DTYPES)
def test_pad_dtypes(dtype):
    x = rand(3, 4, dtype=dtype)
    value = np.array(1, dtype)
    for mode in ("constant", "edge", "reflect"):
        check_model(one_node("Pad", {"x": x}, consts={"p": np.array([1, 2, 0, 1], np.int64), "v": value},
                             attrs={"mode": mode}, opset=13), {"x": x}, tol=dict(rtol=0, atol=0))


def test_pad_opset2_attributes_and_opset1_paddings():
    x = rand(3, 4)
    check_model(one_node("Pad", {"x": x}, attrs={"pads": [1, 0, 2, 3], "value": 2.5}, opset=2), {"x": x})
    check_model(one_node("Pad", {"x": x}, attrs={"pads": [0, 1, 0, 1], "mode": "reflect"}, opset=2), {"x": x})
    xi = rand(3, 4, dtype=np.int32)   # Pad-2's float value, cast to the data's type
    check_model(one_node("Pad", {"x": xi}, attrs={"pads": [1, 1, 1, 1], "value": 7.0}, opset=2), {"x": xi},
                ref="onnx")
    model = one_node("Pad", {"x": x}, attrs={"paddings": [1, 0, 0, 2], "value": -1.0}, opset=1)
    check_model(model, {"x": x}, ref=lambda feeds: [np.pad(feeds["x"], ((1, 0), (0, 2)), constant_values=-1.0)])


def test_pad_axes_and_wrap():
    x = rand(3, 4, 5)
    for axes, pads in (([1], [2, 3]), ([-1, 0], [1, 2, 0, 1]), ([2, 1], [-1, 1, 2, -2])):
        for mode in ("constant", "edge", "wrap"):
            check_model(one_node("Pad", {"x": x}, inputs=["x", "p", "", "a"], attrs={"mode": mode}, opset=19,
                                 consts={"p": np.array(pads, np.int64), "a": np.array(axes, np.int64)}), {"x": x})
    with pytest.raises(UnsupportedOpError, match=r"Pad node \(opset 18\): mode 'wrap' \(this opset has constant, "
                                                 r"reflect, edge\)"):
        relaxpack.from_onnx(one_node("Pad", {"x": x}, consts={"p": np.ones(6, np.int64)}, attrs={"mode": "wrap"},
                                     opset=18))


def test_pad_constant_value_known_only_at_run_time():
    x, v = rand(3, 4), np.array(-7.5, np.float32)
    model = one_node("Pad", {"x": x, "v": v}, inputs=["x", "p", "v"], consts={"p": np.array([1, 0, 2, 1], np.int64)},
                     opset=13)
    mod = check_model(model, {"x": x, "v": v}, {"x": x, "v": np.array(3.0, np.float32)})
    assert "R.pad(x, v," in mod.script()


def test_pad_symbolic_dims_one_build():
    model = one_node("Pad", {"x": rand(2, 4)}, consts={"p": np.array([1, -1, 2, 0], np.int64)},
                     attrs={"mode": "edge"}, opset=13, sym={"x": ["batch", "n"]})
    mod = check_model(model, {"x": rand(2, 4, seed=1)}, {"x": rand(5, 3, seed=2)})
    assert 'R.Tensor(("batch + 3", "n - 1"), "float32")' in mod.script()


def test_pad_empty_and_errors():
    x = rand(0, 3)
    check_model(one_node("Pad", {"x": x}, consts={"p": np.array([1, 1, 1, 1], np.int64)}, opset=13), {"x": x})
    with pytest.raises(ShapeError, match=r"R\.pad: pad_mode 'edge' cannot extend the empty axis 0"):
        relaxpack.from_onnx(one_node("Pad", {"x": x}, consts={"p": np.array([1, 0, 0, 0], np.int64)},
                                     attrs={"mode": "edge"}, opset=13))
    with pytest.raises(ShapeError, match=r"Pad node: pads must be an integer tensor, got float32"):
        relaxpack.from_onnx(one_node("Pad", {"x": rand(2, 3), "p": np.zeros(4, np.float32)}, opset=13))
    with pytest.raises(ShapeError, match=r"Pad node: pads \(1, 1\) need 4 values"):
        relaxpack.from_onnx(one_node("Pad", {"x": rand(2, 3)}, consts={"p": np.ones(2, np.int64)}, opset=13))


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
def test_pad_pads_and_value_at_run_time(mode):
    x, c = rand(3, 4), np.array(2.5, np.float32)
    model = one_node("Pad", {"x": x, "p": i64(1, 2, 0, 1), "c": c}, attrs={"mode": mode}, sym={"x": ["a", "b"]},
                     opset=19)
    check_runtime(model, [{"x": x, "p": i64(1, 2, 0, 1), "c": c}, {"x": x, "p": i64(0, 0, 0, 0), "c": c},
                          {"x": x, "p": i64(-1, 0, 1, -3), "c": c}, {"x": rand(2, 1), "p": i64(0, 0, 1, 0), "c": c}],
                  errors=[({"x": x, "p": i64(-3, 0, -1, 0), "c": c}, r"pad: pads \(-3, 0, -1, 0\) crop more than")])


def test_pad_axes_at_run_time():
    x = rand(2, 3, 4)
    model = one_node("Pad", {"x": x, "p": i64(1, 2), "a": i64(1)}, inputs=["x", "p", "", "a"], opset=18)
    check_runtime(model, [{"x": x, "p": i64(1, 2), "a": i64(1)}, {"x": x, "p": i64(0, 3), "a": i64(-1)}],
                  errors=[({"x": x, "p": i64(1, 2), "a": i64(3)}, r"pad: axis 3 is out of range for rank 3")])
    model = one_node("Pad", {"x": x, "p": i64(1, 2)}, consts={"a": i64(1)}, inputs=["x", "p", "", "a"], opset=18)
    mod = check_runtime(model, [{"x": x, "p": i64(1, 2)}, {"x": x, "p": i64(-1, -2)}])
    assert output_sinfo(mod).shape[::2] == (2, 4)      # the unpadded axes keep their dims


# ---------------------------------------------------------------- ONNX backend node tests

#: graph inputs that hold constants in real models; frozen into initializers
#: (they also run as they are, read at run time: below)
FROZEN = ("roi", "scales", "sizes", "pads", "axes")
BACKEND_CASES = sorted(n for n in node_cases() if n.startswith(("test_resize_", "test_upsample_"))
                       or n in ("test_constant_pad", "test_constant_pad_axes", "test_constant_pad_negative_axes",
                                "test_edge_pad", "test_reflect_pad", "test_wrap_pad"))


@pytest.mark.parametrize("name", BACKEND_CASES)
def test_backend_node_case(name):
    inputs = [i.name for i in node_cases()[name].model.graph.input]
    run_backend(name, freeze=[n for n in inputs if n in FROZEN])


@pytest.mark.parametrize("name", [n for n in BACKEND_CASES if n.startswith(("test_resize_", "test_upsample_"))])
def test_backend_node_case_with_run_time_scales_sizes_roi(name):
    run_backend_case(name)


@pytest.mark.parametrize("name", [n for n in BACKEND_CASES if not n.startswith(("test_resize_", "test_upsample_"))])
def test_backend_node_case_with_run_time_pads(name):
    run_backend_case(name)


@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
@pytest.mark.parametrize("scales", [(2.0, 3.0), (1.7, 2.5)])
def test_upsample_v1_against_its_opset_7_twin(mode, scales):
    """Opset 1 spells the scales as height_scale/width_scale and linear as
    "bilinear"; neither onnxruntime nor onnx's reference load it, so the
    reference is the same upsampling at opset 7 on onnxruntime."""
    x = rand(2, 3, 4, 5)
    model = one_node("Upsample", {"x": x}, attrs={"mode": mode, "height_scale": scales[0],
                                                  "width_scale": scales[1]}, opset=1)
    twin = one_node("Upsample", {"x": x}, attrs={"mode": mode.replace("bilinear", "linear"),
                                                 "scales": [1.0, 1.0, *scales]}, opset=7)
    check_model(model, {"x": x}, ref=lambda feeds: reference(twin, feeds, "ort"))


def test_upsample_v1_needs_a_4d_input_and_both_scales():
    with pytest.raises(ShapeError, match="4-D"):
        relaxpack.from_onnx(one_node("Upsample", {"x": rand(3, 4, 5)}, attrs={"height_scale": 2.0,
                                                                               "width_scale": 2.0}, opset=1))
    with pytest.raises(ShapeError, match="height_scale and width_scale"):
        relaxpack.from_onnx(one_node("Upsample", {"x": rand(1, 3, 4, 5)}, attrs={"height_scale": 2.0}, opset=1))

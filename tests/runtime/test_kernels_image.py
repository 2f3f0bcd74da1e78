"""image.resize and pad kernels against onnx's reference evaluator
(onnxruntime for negative pads, which the reference's np.pad rejects)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from relaxpack.errors import ShapeError
from relaxpack.runtime.kernels import image

from .kernel_calls import call_kernel
from .test_kernels_registry import Shape, assert_close, rand, run_kernel, run_onnx

RESIZE_OPSET = 19
COORD_MODES = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric",
               "tf_crop_and_resize"]
METHODS = {"nearest": "nearest_neighbor", "linear": "linear", "cubic": "cubic"}


def resize_both(x, *, scales=None, sizes=None, axes=None, roi=None, mode="nearest", tol=None, **attrs):
    """Run ONNX Resize (reference evaluator) and the kernel with the attrs a
    converter would give it; compare. ``attrs`` are ONNX attributes."""
    onnx_attrs = dict(mode=mode, **attrs)
    if axes is not None:
        onnx_attrs["axes"] = list(axes)
    f32 = None if scales is None else np.array(scales, np.float32)
    inputs = [x, None if roi is None else np.array(roi, np.float32), f32,
              None if sizes is None else np.array(sizes, np.int64)]
    want, = run_onnx("Resize", inputs, onnx_attrs, opset=RESIZE_OPSET)
    axes = tuple(range(x.ndim)) if axes is None else tuple(axes)
    if sizes is not None:
        size, used = tuple(sizes), None
    else:
        used = tuple(float(s) for s in f32)
        size = tuple(int(np.floor(x.shape[a] * s)) for a, s in zip(axes, used))
    got = run_kernel("image.resize", x, Shape(size), axes=axes, scales=used, roi=None if roi is None else tuple(roi),
                     method=METHODS[mode],
                     coordinate_transformation_mode=attrs.get("coordinate_transformation_mode", "half_pixel"),
                     rounding_method=attrs.get("nearest_mode", "round_prefer_floor"),
                     cubic_alpha=attrs.get("cubic_coeff_a", -0.75), cubic_exclude=bool(attrs.get("exclude_outside")),
                     antialias=bool(attrs.get("antialias")),
                     extrapolation_value=attrs.get("extrapolation_value", 0.0))
    assert_close(got, want, **(tol or {}))
    return got


ROI = [0.0, 0.0, 0.2, 0.1, 1.0, 1.0, 0.9, 0.7]


@pytest.mark.parametrize("size_spec", [
    dict(scales=[1, 1, 2, 3]), dict(scales=[1, 1, 0.6, 1.7]), dict(scales=[1, 1, 0.5, 0.3]),
    dict(sizes=[1, 2, 3, 11]), dict(sizes=[1, 2, 1, 1]), dict(sizes=[1, 2, 8, 4]),
], ids=["up", "mixed", "down", "sizes", "to1", "sizes2"])
@pytest.mark.parametrize("coord", COORD_MODES)
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_modes(mode, coord, size_spec):
    x = rand(np.random.default_rng(0), (1, 2, 5, 7), "float32")
    extra = dict(roi=ROI, extrapolation_value=-3.0) if coord == "tf_crop_and_resize" else {}
    resize_both(x, mode=mode, coordinate_transformation_mode=coord, **size_spec, **extra)


@pytest.mark.parametrize("nearest_mode", ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"])
@pytest.mark.parametrize("coord", COORD_MODES)
def test_resize_nearest_modes(coord, nearest_mode):
    x = rand(np.random.default_rng(1), (2, 6, 5), "float32")
    extra = dict(roi=[0.1, 0.2, 0.0, 0.9, 0.8, 1.0]) if coord == "tf_crop_and_resize" else {}
    # integer factors: where every axis repeats its cells (asymmetric/floor, half_pixel/round, ...) the
    # kernel makes one broadcasting copy; the other modes map them otherwise and gather
    for scales in ([1, 1.7, 2.5], [1, 0.6, 0.35], [1, 2, 3], [1, 2, 1], [2, 1, 2]):
        resize_both(x, scales=scales, mode="nearest", nearest_mode=nearest_mode, coordinate_transformation_mode=coord,
                    **extra)


@pytest.mark.parametrize("a, exclude", [(-0.75, 0), (-0.5, 1), (-0.5, 0), (-0.3, 1)])
@pytest.mark.parametrize("coord", ["half_pixel", "align_corners", "asymmetric"])
def test_resize_cubic_coefficients(coord, a, exclude):
    x = rand(np.random.default_rng(2), (1, 1, 6, 4), "float32")
    for scales in ([1, 1, 1.5, 2.25], [1, 1, 0.8, 0.5]):
        resize_both(x, scales=scales, mode="cubic", cubic_coeff_a=a, exclude_outside=exclude,
                    coordinate_transformation_mode=coord)


@pytest.mark.parametrize("mode", ["linear", "cubic"])
@pytest.mark.parametrize("size_spec", [dict(scales=[1, 1, 0.6, 0.25]), dict(sizes=[1, 1, 3, 2]),
                                       dict(scales=[1, 1, 1.5, 0.4])])
def test_resize_antialias(mode, size_spec):
    x = rand(np.random.default_rng(3), (1, 1, 9, 10), "float32")
    resize_both(x, mode=mode, antialias=1, **size_spec)
    resize_both(x, mode=mode, antialias=1, exclude_outside=1, **size_spec)


@pytest.mark.parametrize("dtype", ["float16", "float64", "int8", "uint8", "int32", "int64"])
@pytest.mark.parametrize("mode", ["nearest", "linear", "cubic"])
def test_resize_dtypes(dtype, mode):
    rng = np.random.default_rng(4)
    x = rand(rng, (2, 3, 6, 5), dtype, 0 if dtype.startswith("u") else -120, 120)
    for scales in ([1, 1, 0.6, 1.7], [1, 1, 2, 3]):
        resize_both(x, scales=scales, mode=mode)
    resize_both(x, sizes=[2, 3, 4, 9], mode=mode, coordinate_transformation_mode="tf_crop_and_resize",
                roi=ROI, extrapolation_value=17.5)


@pytest.mark.parametrize("axes", [(2, 3), (3, 2), (1,), (3, 0)])   # onnx's reference fails on negative axes
def test_resize_axes(axes):
    x = rand(np.random.default_rng(5), (2, 3, 4, 5), "float32")
    resize_both(x, scales=[1.5, 2.0][:len(axes)], axes=axes, mode="linear")
    resize_both(x, sizes=[7, 3][:len(axes)], axes=axes, mode="cubic")


@pytest.mark.parametrize("policy", ["not_larger", "not_smaller"])
def test_resize_keep_aspect_ratio_is_a_scale_and_a_size(policy):
    # what the converter passes for keep_aspect_ratio_policy: one scale, the rounded sizes
    x = rand(np.random.default_rng(6), (1, 1, 4, 6), "float32")
    want, = run_onnx("Resize", [x, None, None, np.array([7, 7], np.int64)],
                     dict(mode="linear", axes=[2, 3], keep_aspect_ratio_policy=policy), opset=RESIZE_OPSET)
    scale = min(7 / 4, 7 / 6) if policy == "not_larger" else max(7 / 4, 7 / 6)
    size = (int(4 * scale + 0.5), int(6 * scale + 0.5))
    got = run_kernel("image.resize", x, Shape(size), axes=(2, 3), scales=(scale, scale), method="linear")
    assert_close(got, want)


def _source_index(n_in, n_out, **attrs):
    """Which input element each output element of a nearest resize reads."""
    src = np.arange(n_in, dtype=np.float32).reshape(1, n_in)
    return run_kernel("image.resize", src, Shape((n_out,)), axes=(1,), **attrs).astype(np.int64)[0]


@pytest.mark.parametrize("dtype", ["bool", "string", "int64"])
def test_resize_nearest_gathers_any_dtype_exactly(dtype):
    rng = np.random.default_rng(7)
    if dtype == "string":
        x = np.array([[f"s{i}{j}" for j in range(5)] for i in range(3)], dtype=object)
    elif dtype == "int64":
        x = rng.integers(2 ** 60, 2 ** 62, (3, 5))        # beyond float64's exact integers
    else:
        x = rand(rng, (3, 5), dtype)
    attrs = dict(coordinate_transformation_mode="asymmetric", rounding_method="ceil", scales=(1.7,))
    got = run_kernel("image.resize", x, Shape((8,)), axes=(1,), **attrs)
    assert got.dtype == x.dtype
    np.testing.assert_array_equal(got, x[:, _source_index(5, 8, **attrs)])


def test_resize_empty_tensors():
    x = rand(np.random.default_rng(8), (0, 3, 4, 5), "float32")
    resize_both(x, scales=[1, 1, 2, 0.5], mode="linear")
    got = run_kernel("image.resize", np.ones((1, 3, 4, 5), np.float32), Shape((0, 3)), axes=(2, 3), method="cubic")
    assert got.shape == (1, 3, 0, 3)
    with pytest.raises(ShapeError, match=r"image\.resize: cannot resize the empty axis 2 to size 3"):
        run_kernel("image.resize", np.zeros((1, 3, 0, 5), np.float32), Shape((3,)), axes=(2,), method="linear")


def test_resize_identity_axes_are_skipped():
    x = rand(np.random.default_rng(9), (2, 3, 4), "float32")
    got = run_kernel("image.resize", x, Shape((3, 8)), axes=(1, 2), scales=(1.0, 2.0), method="cubic")
    assert_close(got, resize_both(x, scales=[1, 1, 2], mode="cubic"))
    got = run_kernel("image.resize", x, Shape((3, 4)), axes=(1, 2), method="cubic")
    np.testing.assert_array_equal(got, x)


def test_resize_tf_half_pixel_for_nn():
    # Resize-11 only (not in onnx's reference): x = (y + 0.5) / scale, here rounded half down
    scale = float(np.float32(1.6))
    x = (np.arange(8) + 0.5) / scale
    want = np.minimum(np.floor(x) + (x - np.floor(x) > 0.5), 4)
    got = _source_index(5, 8, scales=(scale,), coordinate_transformation_mode="tf_half_pixel_for_nn")
    assert got.tolist() == want.astype(int).tolist()


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 5), min_size=1, max_size=3), k=st.integers(1, 4),
       method=st.sampled_from(["nearest_neighbor", "linear", "cubic"]))
def test_resize_by_k_and_back_is_the_identity(shape, k, method):
    # asymmetric coordinates put every k-th output sample on an input sample
    x = rand(np.random.default_rng(len(shape) * 10 + k), tuple(shape), "float64")
    axes = tuple(range(len(shape)))
    up = run_kernel("image.resize", x, Shape(tuple(d * k for d in shape)), axes=axes, scales=(float(k),) * len(shape),
                    method=method, coordinate_transformation_mode="asymmetric", rounding_method="floor")
    if method == "nearest_neighbor":     # Upsample's nearest: every element repeated k times per axis
        want = x
        for axis in axes:
            want = want.repeat(k, axis=axis)
        np.testing.assert_array_equal(up, want)
    down = run_kernel("image.resize", up, Shape(tuple(shape)), axes=axes, scales=(1 / k,) * len(shape),
                      method="nearest_neighbor", coordinate_transformation_mode="asymmetric")
    np.testing.assert_allclose(down, x, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- pad


@settings(max_examples=60, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=3), data=st.data(),
       mode=st.sampled_from(["constant", "reflect", "edge", "wrap"]))
def test_pad_then_negative_pad_is_the_identity(shape, data, mode):
    pads = tuple(data.draw(st.lists(st.integers(0, 3 if mode != "reflect" else min(shape) - 1),
                                    min_size=2 * len(shape), max_size=2 * len(shape))))
    x = rand(np.random.default_rng(0), tuple(shape), "int32")
    padded = run_kernel("pad", x, pads=pads, pad_mode=mode, pad_value=5)
    np.testing.assert_array_equal(run_kernel("pad", padded, pads=tuple(-p for p in pads)), x)

PAD_DTYPES = ["float16", "float32", "float64", "int8", "uint8", "int32", "int64", "bool"]


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge", "wrap"])
@pytest.mark.parametrize("dtype", PAD_DTYPES)
def test_pad_modes_and_dtypes(dtype, mode):
    rng = np.random.default_rng(10)
    x = rand(rng, (3, 4, 5), dtype)
    value = np.array(True if dtype == "bool" else 7, dtype)
    for pads in [(0, 1, 2, 2, 1, 0), (1, 0, 0, 0, 3, 4), (0, 0, 0, 0, 0, 0), (2, 3, 4, 2, 3, 4)]:
        want, = run_onnx("Pad", [x, np.array(pads, np.int64), value], {"mode": mode})
        assert_close(run_kernel("pad", x, pads=pads, pad_mode=mode, pad_value=value.item()), want)
        if mode == "constant":
            assert_close(run_kernel("pad", x, value, pads=pads, pad_mode=mode), want)


@pytest.mark.parametrize("mode, pads", [
    *[(mode, pads) for mode in ("constant", "edge", "wrap") for pads in
      [(1, -2, -1, 3), (-1, 2, 2, -3), (0, -1, 0, -1), (-3, 0, 2, 4)]],
    ("constant", (-2, 0, -2, 1)), ("reflect", (1, -1, -1, 1)), ("reflect", (-1, 1, 1, -2)),
])
def test_pad_negative_pads_crop_first(mode, pads):
    x = rand(np.random.default_rng(11), (4, 5), "float32")
    want, = run_onnx("Pad", [x, np.array(pads, np.int64), np.array(1.5, np.float32)], {"mode": mode}, backend="ort")
    assert_close(run_kernel("pad", x, pads=pads, pad_mode=mode, pad_value=1.5), want)


@pytest.mark.parametrize("mode", ["reflect", "edge", "wrap"])
def test_pad_gathers_are_numpys_pad_for_any_width(mode):
    """reflect/edge/wrap as one gather per padded axis (image._pad_gathers): numpy's np.pad,
    pads wider than the axis (numpy reflects and wraps again), an axis of one, a transposed
    (non-contiguous) input, one or several padded axes."""
    rng = np.random.default_rng(12)
    for shape in [(1,), (2,), (5,), (1, 3), (3, 1, 2), (4, 2)]:
        for _ in range(6):
            widths = [tuple(int(v) for v in rng.integers(0, 8, 2)) for _ in shape]
            x = rand(rng, shape[::-1], "float32").T
            pads = tuple(b for b, _ in widths) + tuple(e for _, e in widths)
            np.testing.assert_array_equal(run_kernel("pad", x, pads=pads, pad_mode=mode),
                                          np.pad(x, widths, mode=mode))


def test_pad_strings_and_scalars():
    x = np.array([["a", "b"], ["c", "d"]], dtype=object)
    got = run_kernel("pad", x, pads=(1, 0, 0, 1), pad_mode="constant", pad_value="z")
    assert got.tolist() == [["z", "z", "z"], ["a", "b", "z"], ["c", "d", "z"]]
    got = run_kernel("pad", x, pads=(0, 1, 0, 1), pad_mode="edge")
    assert got.tolist() == [["a", "a", "b", "b"], ["c", "c", "d", "d"]]
    assert run_kernel("pad", np.array(3.0, np.float32), pads=()).item() == 3.0


def test_pad_empty_tensors():
    x = np.zeros((0, 3), np.float32)
    got = run_kernel("pad", x, pads=(1, 0, 1, 2), pad_value=2.0)
    np.testing.assert_array_equal(got, np.full((2, 5), 2.0, np.float32))
    assert run_kernel("pad", x, pads=(0, 1, 0, 1), pad_mode="edge").shape == (0, 5)
    with pytest.raises(ShapeError, match=r"pad: pad_mode 'reflect' cannot extend the empty axis 0"):
        call_kernel("pad", x, out=np.empty((2, 3), np.float32), pads=(1, 0, 1, 0), pad_mode="reflect")


def test_pad_plan_kept_per_shape_serves_every_call():
    """The plan (crop, interior, gathers) is kept per shape, pads and mode: calls of another
    dtype, a list of pads, a non-contiguous output or a second call on the same shape give
    np.pad's values, and a bad pad raises on every call (an error is never kept)."""
    image._pad_plan.cache_clear()
    rng = np.random.default_rng(13)
    for dtype in ("float32", "int64", "float64"):
        for pads in [(1, 0, 2, 3), [1, 0, 2, 3], (0, 2, 0, 0)]:
            widths = list(zip(pads[:2], pads[2:]))
            x = rand(rng, (3, 4), dtype)
            for mode in ("reflect", "edge", "wrap", "constant"):
                np.testing.assert_array_equal(run_kernel("pad", x, pads=pads, pad_mode=mode),
                                              np.pad(x, widths, mode=mode))
            out = np.empty((4 + pads[1] + pads[3], 3 + pads[0] + pads[2]), dtype).T
            call_kernel("pad", x, out=out, pads=pads, pad_mode="reflect")
            np.testing.assert_array_equal(out, np.pad(x, widths, mode="reflect"))
    assert image._pad_plan.cache_info().hits > 0
    for _ in range(2):
        with pytest.raises(ShapeError, match=r"pad: pads \(1, 0\) need 4 values"):
            call_kernel("pad", np.zeros((2, 2), np.float32), out=np.empty((3, 2), np.float32), pads=(1, 0),
                        pad_mode="reflect")


def test_dynamic_pad_pads_and_crops_by_run_time_amounts():
    x = rand(np.random.default_rng(0), (1, 2, 5), "float32")
    got = run_kernel("dynamic_pad", x, Shape((0, 0, 1, 0, 0, -2)), pad_value=-np.inf)
    want = np.concatenate([np.full((1, 2, 1), -np.inf, np.float32), x[:, :, :3]], axis=2)
    np.testing.assert_array_equal(got, want)
    assert_close(run_kernel("dynamic_pad", x, Shape((0, 1, 2, 0, 0, 1))), np.pad(x, ((0, 0), (1, 0), (2, 1))))



@pytest.mark.parametrize("method", ["linear", "cubic"])
@pytest.mark.parametrize("coord", ["half_pixel", "pytorch_half_pixel", "asymmetric", "align_corners"])
def test_resize_of_a_ramp_is_the_source_coordinate(method, coord):
    """Linear and cubic interpolation reproduce a linear function: resizing ``arange(28)`` gives
    each output's source coordinate (cubic: Keys' a = -0.5, away from the edge-padded ends;
    its weights are float32, hence its tolerance). Widths where that
    coordinate lands a rounding error above a pixel (28 -> 164: x = 3.0000000000000004 at
    output 20) once took the taps from floor(x + 1) = 4.0 and the weights from floor(x) = 3, so
    the result was the left neighbor (Mask R-CNN's mask paste: one pixel 0 instead of 1).
    onnx's reference evaluator rounds the same way (``x += pad_width``); onnxruntime does
    not, so this test holds the kernel to the exact value instead."""
    in_w = 28
    ramp = np.arange(in_w, dtype=np.float64)
    for width in (164, 57, 99, 130, 193, 7):
        got = run_kernel("image.resize", ramp, Shape((width,)), axes=(0,), method=METHODS[method],
                         coordinate_transformation_mode=coord, cubic_alpha=-0.5)
        scale = width / in_w
        y = np.arange(width, dtype=np.float64)
        source = {"half_pixel": (y + 0.5) / scale - 0.5, "pytorch_half_pixel": (y + 0.5) / scale - 0.5,
                  "asymmetric": y / scale, "align_corners": y * (in_w - 1) / (width - 1)}[coord]
        inside = (source >= 2) & (source <= in_w - 3) if method == "cubic" else np.ones(width, bool)
        np.testing.assert_allclose(got[inside], np.clip(source, 0, in_w - 1)[inside], rtol=0,
                                   atol=1e-4 if method == "cubic" else 1e-9,
                                   err_msg=f"{method} {coord} 28 -> {width}")


@pytest.mark.parametrize("method, coord, scales", [
    ("nearest_neighbor", "asymmetric", (2.0, 2.0)),         # repeats along both axes: the kept plan
    ("nearest_neighbor", "half_pixel", (1.0, 3.0)),
    ("nearest_neighbor", "asymmetric", (2.0, 1.5)),         # not a repeat: the kernel
    ("nearest_neighbor", "asymmetric", (1.0, 0.1)),         # an empty result: the kernel
    ("linear", "half_pixel", (2.0, 2.0)),                    # the kernel
])
def test_a_specialized_resize_is_the_kernel_call_after_call(method, coord, scales):
    from relaxpack.runtime.kernels import get_kernel
    kernel = get_kernel("image.resize").fn
    attrs = dict(axes=(2, 3), scales=scales, roi=None, method=method, coordinate_transformation_mode=coord,
                 rounding_method="round_prefer_floor", cubic_alpha=-0.75, cubic_exclude=False, antialias=False,
                 extrapolation_value=0.0)
    call = kernel.specialize_attrs(attrs, (False, False))
    rng = np.random.default_rng(12)
    x = rand(rng, (2, 3, 4, 6), "float32")
    size = tuple(int(n * s) for n, s in zip(x.shape[2:], scales))
    want = np.empty((2, 3, *size), np.float32)
    out = np.full_like(want, np.nan)
    for round_ in range(5):
        if round_ == 2:
            x = rand(rng, x.shape, "float32")          # new data
        if round_ == 3:
            out = np.full_like(want, np.nan)           # a new output
        x[...] = rand(rng, x.shape, "float32")
        call(x, size, out=out)
        kernel(x, size, out=want, **attrs)
        np.testing.assert_array_equal(out, want, err_msg=f"round {round_}")

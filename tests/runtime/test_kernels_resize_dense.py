"""image.resize's dense products (kernels/resize_dense.py): linear and cubic resizes of the
last two axes of small planes as two matrix products, within float rounding of the planned
passes and against onnx's reference evaluator; where they switch off (a source axis past
MAX_SOURCE, other axes resized, non-finite data, nothing to resize); dyn.resize's products
kept per instruction, data shape and run-time sizes."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import dynamic_resize, image, resize_dense

from .test_kernels_image import resize_both
from .test_kernels_registry import Shape, assert_close, run_kernel, run_onnx


def _kernel(x, size, axes, *, method="linear", mode="half_pixel", antialias=False):
    return run_kernel("image.resize", x, Shape(size), axes=axes, scales=None, roi=None, method=method,
                      coordinate_transformation_mode=mode, rounding_method="round_prefer_floor",
                      cubic_alpha=-0.75, cubic_exclude=False, antialias=antialias, extrapolation_value=0.0)


def _dense(x, size, axes, **attrs):
    """(whether the dense form serves this geometry, the kernel's result, the planned passes')."""
    image._dense_plan.cache_clear()
    got = _kernel(x, size, axes, **attrs)
    key = (x.shape, x.dtype, tuple(axes), tuple(size), None, None, attrs.get("method", "linear"),
           attrs.get("mode", "half_pixel"), "round_prefer_floor", -0.75, False, bool(attrs.get("antialias")))
    used = image._dense_plan(*key) is not None
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(resize_dense, "MAX_SOURCE", 0)
        image._dense_plan.cache_clear()
        planned = _kernel(x, size, axes, **attrs)
    image._dense_plan.cache_clear()
    return used, got, planned


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("method,antialias", [("linear", False), ("cubic", False), ("linear", True)])
@pytest.mark.parametrize("shape,size", [((1, 1, 30, 30), (1, 1, 23, 17)), ((2, 3, 7, 5), (2, 3, 14, 10)),
                                        ((1, 1, 30, 30), (1, 1, 30, 61)), ((1, 2, 1, 9), (1, 2, 5, 1))],
                         ids=["mask-paste", "batch-upsample", "one-axis", "one-pixel"])
def test_within_rounding_of_the_planned_passes(dtype, method, antialias, shape, size):
    x = np.random.default_rng(0).standard_normal(shape).astype(dtype)
    used, got, planned = _dense(x, size, (0, 1, 2, 3), method=method, antialias=antialias)
    assert used
    assert got.dtype == dtype
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, planned, rtol=tol, atol=tol)


@pytest.mark.parametrize("mode", ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"])
def test_against_the_reference(mode):
    x = np.random.default_rng(1).standard_normal((1, 1, 28, 28)).astype(np.float32)
    image._dense_plan.cache_clear()
    resize_both(x, sizes=[1, 1, 19, 41], mode="linear", coordinate_transformation_mode=mode)
    assert image._dense_plan.cache_info().misses == 1 and image._dense_plan(
        x.shape, x.dtype, (0, 1, 2, 3), (1, 1, 19, 41), None, None, "linear", mode, "round_prefer_floor",
        -0.75, False, False) is not None


@pytest.mark.parametrize("source,dense", [(resize_dense.MAX_SOURCE, True), (resize_dense.MAX_SOURCE + 1, False)])
def test_the_source_bar(source, dense):
    x = np.random.default_rng(2).standard_normal((1, 1, 4, source)).astype(np.float32)
    used, got, planned = _dense(x, (1, 1, 6, 37), (0, 1, 2, 3))
    assert used == dense
    np.testing.assert_allclose(got, planned, rtol=1e-5, atol=1e-5)


def test_other_axes_take_the_passes():
    """A channels-last resize (H and W are not the last two axes) is no dense form."""
    x = np.random.default_rng(3).standard_normal((1, 6, 5, 3)).astype(np.float32)
    used, got, planned = _dense(x, (1, 11, 9, 3), (0, 1, 2, 3))
    assert not used
    np.testing.assert_array_equal(got, planned)


def test_nothing_to_resize():
    x = np.random.default_rng(4).standard_normal((1, 2, 5, 4)).astype(np.float32)
    used, got, _ = _dense(x, (1, 2, 5, 4), (0, 1, 2, 3))
    assert not used
    np.testing.assert_array_equal(got, x)


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_data_takes_the_passes(bad):
    """0 * inf would spread NaN along a whole row of the products: such data takes the passes,
    which keep it to the outputs that read it."""
    x = np.random.default_rng(5).standard_normal((1, 1, 9, 8)).astype(np.float32)
    x[0, 0, 4, 3] = bad
    used, got, planned = _dense(x, (1, 1, 17, 15), (0, 1, 2, 3))
    assert used
    np.testing.assert_array_equal(got, planned)
    assert np.isfinite(got).any() and not np.isfinite(got).all()


def test_a_strided_view_of_the_data():
    x = np.random.default_rng(6).standard_normal((1, 1, 12, 10)).astype(np.float32)
    view = x.swapaxes(2, 3)
    used, got, planned = _dense(view, (1, 1, 7, 20), (0, 1, 2, 3))
    assert used
    np.testing.assert_allclose(got, planned, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- dyn.resize's kept products

RUN_TIME = dict(antialias=False, axes=(0, 1, 2, 3), coordinate_transformation_mode="half_pixel", cubic_alpha=-0.75,
                cubic_exclude=False, extrapolation_value=0.0, given_is="sizes", legacy=False, method="linear",
                policy="stretch", rounding_method="floor")


def _at_run_time(**changes):
    """dyn.resize specialized for one instruction (as the VM does), and its general path."""
    attrs = dict(RUN_TIME, **changes)
    return (dynamic_resize.resize_at_run_time.specialize_attrs(dict(attrs), None),
            lambda *operands: dynamic_resize.resize_at_run_time(*operands, **dict(attrs)))


def _reference(x, sizes=None, scales=None, mode="linear", **attrs):
    inputs = [x, None, None if scales is None else np.array(scales, np.float32),
              None if sizes is None else np.array(sizes, np.int64)]
    want, = run_onnx("Resize", inputs, dict(mode=mode, **attrs), opset=19)
    return want


def test_run_time_sizes_kept_per_shape_and_values():
    """Masks of one shape pasted into boxes of changing sizes, then data of another shape: each
    call as the general path's and the reference's."""
    kept, general = _at_run_time()
    rng = np.random.default_rng(7)
    for shape, sizes in [((1, 1, 30, 30), (1, 1, 23, 17)), ((1, 1, 30, 30), (1, 1, 5, 40)),
                         ((1, 1, 30, 30), (1, 1, 23, 17)), ((2, 3, 6, 9), (2, 3, 12, 4))]:
        x = rng.standard_normal(shape).astype(np.float32)
        given = np.array(sizes, np.int64)
        got = kept(x, given)
        assert got.shape == sizes and got.dtype == np.float32
        np.testing.assert_array_equal(got, general(x, given))
        assert_close(got, _reference(x, sizes=sizes))


@pytest.mark.parametrize("changes", [dict(given_is="scales"), dict(method="cubic"), dict(method="nearest_neighbor"),
                                     dict(legacy=True, given_is="scales", coordinate_transformation_mode="asymmetric"),
                                     dict(policy="not_larger")],
                         ids=["scales", "cubic", "nearest", "legacy", "keep-aspect"])
def test_run_time_attributes_as_the_general_path(changes):
    kept, general = _at_run_time(**changes)
    x = np.random.default_rng(8).standard_normal((1, 2, 8, 6)).astype(np.float64)
    given = np.array([1, 1, 2.0, 1.5]) if changes.get("given_is") == "scales" else np.array([1, 2, 13, 5], np.int64)
    for _ in range(2):
        np.testing.assert_array_equal(kept(x, given), general(x, given))


def test_run_time_non_finite_data_and_roi_take_the_general_path():
    kept, general = _at_run_time()
    x = np.random.default_rng(9).standard_normal((1, 1, 7, 7)).astype(np.float32)
    given = np.array([1, 1, 11, 3], np.int64)
    kept(x, given)
    x[0, 0, 3, 3] = np.inf
    got = kept(x, given)
    np.testing.assert_array_equal(got, general(x, given))
    assert not np.isfinite(got).all() and np.isfinite(got).any()
    kept, general = _at_run_time(coordinate_transformation_mode="tf_crop_and_resize")
    roi = np.array([0, 0, 0.1, 0.2, 1, 1, 0.8, 0.9], np.float32)
    x = np.random.default_rng(10).standard_normal((1, 1, 7, 7)).astype(np.float32)
    np.testing.assert_array_equal(kept(x, given, roi), general(x, given, roi))


def test_run_time_empty_sizes():
    kept, general = _at_run_time()
    x = np.random.default_rng(11).standard_normal((1, 1, 4, 4)).astype(np.float32)
    given = np.array([1, 1, 0, 3], np.int64)
    assert kept(x, given).shape == (1, 1, 0, 3) == general(x, given).shape


@pytest.mark.parametrize("shape, sizes", [
    ((1, 1, 30, 30), (1, 1, 23, 17)),          # two passes, the intermediate kept by the instruction
    ((1, 1, 30, 30), (1, 1, 30, 17)),          # one pass: no intermediate
    ((1, 4, 120, 128), (1, 4, 37, 128 * 4)),   # an intermediate over the bar: the thread's scratch
])
def test_run_time_kept_intermediate_serves_new_data_each_call(shape, sizes):
    kept, general = _at_run_time()
    given = np.array(sizes, np.int64)
    known = dynamic_resize._dense_at_run_time(np.zeros(shape, np.float32), given, RUN_TIME)
    between = resize_dense.intermediate(known[1])
    assert (known[2] is None) == (between is None or 4 * np.prod(between) > dynamic_resize.KEPT_BETWEEN_BYTES)
    rng = np.random.default_rng(12)
    results = []
    for _ in range(3):
        x = rng.standard_normal(shape).astype(np.float32)
        got = kept(x, given)
        np.testing.assert_array_equal(got, general(x, given))
        results.append((got, got.copy()))
    for got, copy in results:           # no call wrote into an earlier result
        np.testing.assert_array_equal(got, copy)


def _specialized(method="linear", axes=(2, 3), **extra):
    attrs = dict(axes=axes, scales=None, roi=None, method=method, coordinate_transformation_mode="half_pixel",
                 rounding_method="round_prefer_floor", cubic_alpha=-0.75, cubic_exclude=False, antialias=False,
                 extrapolation_value=0.0, **extra)
    return image.resize.specialize_attrs(attrs, ()), attrs


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("method", ["linear", "cubic"])
@pytest.mark.parametrize("shape,size,axes", [((1, 8, 32, 20), (64, 40), (2, 3)),          # UNet's 2x upsample
                                             ((2, 3, 7, 5), (2, 3, 14, 9), (0, 1, 2, 3)),
                                             ((1, 2, 30, 30), (30, 61), (2, 3)),             # one pass
                                             ((1, 2, 9, 30), (17, 30), (2, 3))],             # one pass, rows
                         ids=["unet", "all-axes", "width-only", "height-only"])
def test_the_per_instruction_runner_is_the_kernel_bit_for_bit(dtype, method, shape, size, axes, monkeypatch):
    """The specialized call keeps the dense plan, its intermediate and ``out``: the kernel's matmul
    calls, so its bits, on the same ``out`` with new data every call; non-finite data go to the
    kernel (its planned passes); a fresh ``out`` and a new shape are prepared again."""
    call, attrs = _specialized(method, axes)
    full = list(shape)
    for a, n in zip(axes, size):
        full[a] = n
    out = np.empty(full, dtype)
    rng = np.random.default_rng(3)
    prepared = []
    inner = resize_dense.runner
    monkeypatch.setattr(resize_dense, "runner", lambda *args: prepared.append(args) or inner(*args))
    for round_ in range(4):
        x = rng.standard_normal(shape).astype(dtype)
        if round_ == 2:
            x.flat[5] = np.inf
        with np.errstate(invalid="ignore"):      # (inf times a zero weight in the passes)
            call(x, size, out=out)
            want = np.empty(full, dtype)
            image.resize(x, size, out=want, **attrs)
        np.testing.assert_array_equal(out, want, err_msg=f"round {round_}")
    assert len(prepared) == 1
    fresh = np.empty(full, dtype)
    call(x, size, out=fresh)
    np.testing.assert_array_equal(fresh, want)
    assert len(prepared) == 2


def test_the_runner_leaves_a_large_intermediate_and_other_calls_to_the_kernel(monkeypatch):
    call, attrs = _specialized()
    x = np.random.default_rng(4).standard_normal((1, 8, 32, 20)).astype(np.float32)
    out = np.empty((1, 8, 64, 40), np.float32)
    monkeypatch.setattr(resize_dense, "OWN_BETWEEN_MAX_BYTES", 8 * 32 * 40 * 4 - 1)   # (W first: 8x32x40)
    assert image._prepare_dense(x, (64, 40), out, attrs) is None
    monkeypatch.setattr(resize_dense, "OWN_BETWEEN_MAX_BYTES", 8 * 32 * 40 * 4)
    assert image._prepare_dense(x, (64, 40), out, attrs) is not None
    assert image._prepare_dense(x.astype(np.float16), (64, 40), np.empty(out.shape, np.float16), attrs) is None
    assert image._prepare_dense(x, (64, 40), np.empty((1, 8, 64, 41), np.float32), attrs) is None
    call(x, (64, 40), out=out)
    want = np.empty_like(out)
    image.resize(x, (64, 40), out=want, **attrs)
    np.testing.assert_array_equal(out, want)

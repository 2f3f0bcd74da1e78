"""image.resize's planned interpolation (kernels/image.py: ``_interpolation_plan``): float32 and
float64 linear / cubic resizes run from a plan kept per geometry, bit for bit the general
path's passes, and against onnx's reference evaluator: growing, shrinking and identity axes,
one-pixel axes, scales and sizes, tf_crop_and_resize inside the image (planned) and
extrapolating (the general path), antialias, every coordinate mode. The dense products that
serve small planes first (``resize_dense``) are off here: test_kernels_resize_dense.py."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import image

from .test_kernels_image import resize_both
from .test_kernels_registry import Shape, run_kernel

MODES = ["half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners", "asymmetric"]


def _kernel(x, size, axes, *, scales=None, roi=None, method="linear", mode="half_pixel", antialias=False,
            extrapolation_value=0.0):
    return run_kernel("image.resize", x, Shape(size), axes=axes, scales=scales, roi=roi, method=method,
                      coordinate_transformation_mode=mode, rounding_method="round_prefer_floor",
                      cubic_alpha=-0.75, cubic_exclude=False, antialias=antialias,
                      extrapolation_value=extrapolation_value)


@pytest.fixture(autouse=True)
def _planned_passes(monkeypatch):
    """The planned passes, not the dense products (which serve these small planes first)."""
    monkeypatch.setattr(image.resize_dense, "MAX_SOURCE", 0)
    image._dense_plan.cache_clear()
    yield
    image._dense_plan.cache_clear()


def _planned_and_general(*args, **kwargs):
    image._interpolation_plan.cache_clear()
    planned = _kernel(*args, **kwargs)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(image, "_PLANNED", ())
        general = _kernel(*args, **kwargs)
    return planned, general


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("method", ["linear", "cubic"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("size", [(1, 1, 37, 23), (1, 1, 30, 30), (1, 1, 7, 61), (1, 1, 1, 1), (1, 1, 30, 1)],
                         ids=["grow-shrink", "identity", "shrink-grow", "to-1", "one-column"])
def test_bit_for_bit_the_general_path(dtype, method, mode, size):
    x = np.random.default_rng(0).standard_normal((1, 1, 30, 30)).astype(dtype)
    planned, general = _planned_and_general(x, size, (0, 1, 2, 3), method=method, mode=mode)
    np.testing.assert_array_equal(planned, general)
    assert planned.dtype == dtype


def test_a_plan_is_kept_per_geometry():
    x = np.random.default_rng(1).standard_normal((2, 3, 5, 4)).astype(np.float32)
    image._interpolation_plan.cache_clear()
    for _ in range(3):
        _kernel(x, (9, 2), (2, 3))
    info = image._interpolation_plan.cache_info()
    assert (info.misses, info.hits) == (1, 3)       # the first call asks twice (for the dense form, then the passes)
    _kernel(x, (9, 3), (2, 3))
    assert image._interpolation_plan.cache_info().misses == 2


@pytest.mark.parametrize("roi,extrapolates", [([0.0, 0.0, 0.2, 0.1, 1.0, 1.0, 0.9, 0.7], False),
                                              ([0.0, 0.0, -0.3, 0.1, 1.0, 1.0, 1.4, 0.7], True)])
def test_crop_and_resize(roi, extrapolates):
    """Inside the image the crop is planned; a crop that reaches outside takes the general path
    (its extrapolation value)."""
    x = np.random.default_rng(2).standard_normal((1, 2, 6, 8)).astype(np.float32)
    image._interpolation_plan.cache_clear()
    got = resize_both(x, sizes=[1, 2, 9, 5], roi=roi, mode="linear",
                      coordinate_transformation_mode="tf_crop_and_resize", extrapolation_value=-3.0)
    assert (-3.0 in got) == extrapolates
    planned = image._interpolation_plan(x.shape, x.dtype, (0, 1, 2, 3), (1, 2, 9, 5), None, tuple(roi),
                                        "linear", "tf_crop_and_resize", "round_prefer_floor", -0.75, False, False)
    assert (planned is None) == extrapolates


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("antialias", [0, 1])
def test_against_the_reference(mode, antialias):
    x = np.random.default_rng(3).standard_normal((1, 2, 8, 7)).astype(np.float32)
    resize_both(x, sizes=[1, 2, 3, 15], mode="linear", coordinate_transformation_mode=mode, antialias=antialias)
    # (scales whose sizes are whole: where they are not, half_pixel_symmetric's reference,
    # onnxruntime and the kernel disagree with each other, planned or not)
    resize_both(x, scales=[1, 1, 0.5, 2.0], mode="cubic", coordinate_transformation_mode=mode,
                antialias=antialias, tol=dict(rtol=1e-4, atol=1e-5))

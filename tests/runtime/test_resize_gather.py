"""resize_gather.py: a specialized nearest resize of adjacent axes that are not whole repeats is one
flat gather, the kernel's result bit for bit (and onnx's reference evaluator's), call after call;
other resizes keep their paths."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import get_kernel, resize_gather

from .test_kernels_registry import rand, run_onnx

KERNEL = get_kernel("image.resize").fn
ONNX_ROUNDING = {"round_prefer_floor": "round_prefer_floor", "round_prefer_ceil": "round_prefer_ceil",
                 "floor": "floor", "ceil": "ceil"}

# (shape, axes, sizes, coordinate mode, rounding, whether the flat gather serves it)
CASES = [
    ((1, 4, 5, 7), (2, 3), (18, 25), "asymmetric", "floor", True),            # DB-det's FPN, channels first
    ((1, 3, 4, 16), (1, 2), (5, 7), "asymmetric", "floor", True),             # ... channels last
    ((2, 3, 9, 13), (2, 3), (4, 6), "half_pixel", "round_prefer_floor", True),  # down, a batch
    ((2, 3, 9, 13), (3, 2), (5, 5), "align_corners", "round_prefer_ceil", True),  # axes in reverse order
    ((1, 2, 3, 5), (2, 3), (3, 11), "pytorch_half_pixel", "ceil", True),       # an identity axis
    ((1, 7, 3), (2,), (8,), "half_pixel_symmetric", "round_prefer_floor", True),  # one axis
    ((3, 4, 5), (0, 1, 2), (4, 9, 2), "asymmetric", "floor", True),           # every axis
    ((1, 1, 1, 2), (2, 3), (1, 3), "asymmetric", "floor", True),              # one row
    ((2, 4, 5, 7), (0, 2), (3, 9), "asymmetric", "floor", False),             # not adjacent: the kernel
    ((1, 4, 5, 7), (2, 3), (10, 14), "asymmetric", "floor", False),           # whole repeats: their plan
    ((1, 4, 5, 7), (2, 3), (0, 3), "asymmetric", "floor", False),             # empty result: the kernel
]


def attrs_of(axes, coord, rounding):
    return dict(axes=axes, scales=None, roi=None, method="nearest_neighbor", coordinate_transformation_mode=coord,
                rounding_method=rounding, cubic_alpha=-0.75, cubic_exclude=False, antialias=False,
                extrapolation_value=0.0)


@pytest.mark.parametrize("dtype", ["float32", "int8", "int64", "bool"])
@pytest.mark.parametrize("shape, axes, sizes, coord, rounding, gathers", CASES, ids=str)
def test_a_nearest_resize_by_one_gather_is_the_kernel_call_after_call(shape, axes, sizes, coord, rounding,
                                                                     gathers, dtype, monkeypatch):
    made = []
    real = resize_gather.runner
    monkeypatch.setattr(resize_gather, "runner", lambda plan, out: made.append(plan) or real(plan, out))
    attrs = attrs_of(axes, coord, rounding)
    call = KERNEL.specialize_attrs(attrs, (False, False))
    rng = np.random.default_rng(5)
    out_shape = list(shape)
    for a, n in zip(axes, sizes):
        out_shape[a] = n
    out = np.empty(int(np.prod(out_shape)) + 1, dtype)[1:].reshape(out_shape)     # a view (an arena's)
    x = rand(rng, shape, dtype)
    for round_ in range(4):
        if round_ == 2:
            x = rand(rng, shape, dtype)                 # a new input array
        else:
            x[...] = rand(rng, shape, dtype)            # new values in the same one
        call(x, sizes, out=out)
        want = np.zeros(out_shape, dtype)
        KERNEL(x, sizes, out=want, **attrs)
        np.testing.assert_array_equal(out, want, err_msg=f"round {round_}")
    assert bool(made) == gathers


@pytest.mark.parametrize("shape, axes, sizes, coord, rounding, gathers", [c for c in CASES if c[5]], ids=str)
def test_the_flat_gather_is_onnx_resize(shape, axes, sizes, coord, rounding, gathers):
    x = rand(np.random.default_rng(6), shape, "float32")
    full_sizes = list(shape)
    for a, n in zip(axes, sizes):
        full_sizes[a] = n
    want, = run_onnx("Resize", [x, None, None, np.array(full_sizes, np.int64)],
                     dict(mode="nearest", coordinate_transformation_mode=coord, nearest_mode=ONNX_ROUNDING[rounding]),
                     opset=19)
    call = KERNEL.specialize_attrs(attrs_of(axes, coord, rounding), (False, False))
    out = np.empty(want.shape, np.float32)
    call(x, sizes, out=out)
    np.testing.assert_array_equal(out, want)


def test_a_crop_that_extrapolates_keeps_the_kernel():
    """tf_crop_and_resize with a roi reaching outside the input fills extrapolation_value: no plan."""
    from relaxpack.runtime.kernels.image import _gather_plan
    assert _gather_plan((1, 2, 5, 7), (3,), (9,), None, (-0.2, 1.3), "tf_crop_and_resize",
                        "round_prefer_floor", -0.75, False, False) is None
    assert _gather_plan((1, 2, 5, 7), (3,), (9,), None, (0.1, 0.8), "tf_crop_and_resize",
                        "round_prefer_floor", -0.75, False, False) is not None


def test_plan_refuses_what_it_cannot_take():
    ramp = np.arange(3)
    assert resize_gather.plan((2, 3, 4), (0, 2), (ramp, ramp)) is None                  # not adjacent
    assert resize_gather.plan((2, 3, 4), (2,), (np.array([0, 4]),)) is None              # out of range
    big = np.zeros(resize_gather.MAX_INDEX_CELLS + 1, np.intp)
    assert resize_gather.plan((2, 3, 4), (2,), (big,)) is None                           # too large an index
    index, src, dst = resize_gather.plan((2, 3, 4, 5), (1, 2), (np.array([2, 0]), None))
    assert src == (2, 12, 5) and dst == (2, 8, 5)
    assert index.tolist() == [8, 9, 10, 11, 0, 1, 2, 3]

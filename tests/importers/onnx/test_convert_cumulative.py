"""CumProd (converters/cumulative.py) against onnx's reference evaluator and
numpy: constant and run-time axes, exclusive/reverse, every dtype, symbolic
and empty dims."""

from __future__ import annotations

import numpy as np
import pytest

import relaxpack
from relaxpack.errors import ShapeError
from relaxpack.runtime import VirtualMachine
from relaxpack.vm_build import build

from .helpers import check, one_node


def values(shape, dtype, seed=0):
    """Small values, so products neither overflow nor lose precision much."""
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0 if np.dtype(dtype).kind == "u" else -3, 4, shape).astype(dtype)
    return rng.uniform(0.5, 1.5, shape).astype(dtype) * rng.choice([-1, 1], shape).astype(dtype)


def by_numpy(x, axis, exclusive, reverse):
    axis = int(np.asarray(axis).reshape(()))
    x = np.flip(x, axis) if reverse else x
    if exclusive:
        pad = [(0, 0)] * x.ndim
        pad[axis] = (1, 0)
        x = np.delete(np.pad(x, pad, constant_values=1), -1, axis=axis)
    y = np.cumprod(x, axis=axis, dtype=x.dtype)
    return np.flip(y, axis) if reverse else y


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint32", "uint64"])
@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cumprod_runtime_axis(dtype, exclusive, reverse):
    """The axis is a graph input: every axis of a (n, 5, 3) tensor, n symbolic and 0."""
    first, more = runtime_axis_feeds(dtype)
    check("CumProd", first, more=more, attrs={"exclusive": exclusive, "reverse": reverse}, opset=26,
          sym={"x": ["n", 5, 3]}, ref="onnx")


def runtime_axis_feeds(dtype):
    feeds = [{"x": values((n, 5, 3), dtype, n), "axis": np.array(a, np.int64)}
             for n, a in ((4, 0), (2, 1), (3, -1), (0, 2), (1, -3))]
    return feeds[0], feeds[1:]


@pytest.mark.parametrize("exclusive, reverse", [(0, 0), (1, 1)])
def test_cumprod_float16_rounds_once(exclusive, reverse):
    """float16 multiplies in float32 and rounds once: within float16's precision of numpy's float32."""
    first, more = runtime_axis_feeds("float16")
    model = one_node("CumProd", first, attrs={"exclusive": exclusive, "reverse": reverse}, opset=26,
                     sym={"x": ["n", 5, 3]})
    vm = VirtualMachine(build(relaxpack.from_onnx(model)))
    for f in [first, *more]:
        want = by_numpy(f["x"].astype(np.float32), f["axis"], exclusive, reverse).astype(np.float16)
        got = vm.run(f)["y0"]
        assert got.dtype == np.float16 and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_cumprod_constant_axis_is_an_attribute(axis):
    x = values((3, 7), "float32")
    model = one_node("CumProd", {"x": x}, consts={"axis": np.array(axis, np.int32)}, attrs={"exclusive": 1},
                     opset=26)
    mod = relaxpack.from_onnx(model)
    assert f"axis={axis % 2}" in mod.script()
    check("CumProd", {"x": x}, consts={"axis": np.array(axis, np.int32)}, attrs={"exclusive": 1}, opset=26,
          ref="onnx")


def test_cumprod_integers_wrap():
    x = np.full(70, 3, np.int64)
    check("CumProd", {"x": x}, consts={"axis": np.array(0, np.int64)}, opset=26,
          ref=lambda f: [np.cumprod(f["x"])])


def test_cumprod_rejects_an_axis_out_of_range():
    model = one_node("CumProd", {"x": np.ones((2, 3), np.float32)}, consts={"axis": np.array(2, np.int64)},
                     opset=26)
    with pytest.raises(ShapeError, match="CumProd.*axis 2 is out of range"):
        relaxpack.from_onnx(model)

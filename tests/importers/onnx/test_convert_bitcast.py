"""BitCast (converters/bitcast.py) against onnx's reference evaluator and
numpy's ``view``: every width, symbolic and empty dims, NaN payloads."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import helper, numpy_helper

import relaxpack
from relaxpack.errors import ShapeError
from relaxpack.runtime import VirtualMachine
from relaxpack.vm_build import build

from .helpers import check, one_node

PAIRS = [
    ("float32", "int32"), ("int32", "float32"), ("float64", "int64"), ("uint64", "float64"),
    ("float16", "int16"), ("uint16", "bfloat16"), ("bfloat16", "float16"), ("int8", "uint8"),
    ("uint8", "float8_e4m3fn"), ("float8_e5m2", "int8"), ("bool", "uint8"), ("complex64", "int64"),
    ("uint32", "int32"),
]


def np_dtype(name):
    return np.dtype(getattr(ml_dtypes, name) if hasattr(ml_dtypes, name) and name not in np.sctypeDict
                    else name)


def bits(dtype, shape, seed=0):
    """Random bit patterns of ``dtype`` (any, NaN payloads included); bools are 0/1."""
    raw = np.random.default_rng(seed).integers(0, 256, (*shape, np_dtype(dtype).itemsize), dtype=np.uint8)
    if dtype == "bool":
        return raw[..., 0] % 2 == 1
    return raw.view(np_dtype(dtype)).reshape(shape)


@pytest.mark.parametrize("src, dst", PAIRS)
def test_bitcast_keeps_the_bits(src, dst):
    to = helper.np_dtype_to_tensor_dtype(np_dtype(dst))
    feeds = [{"x": bits(src, (3, 5))}, {"x": bits(src, (1, 2), 1)}, {"x": bits(src, (0, 7))}]
    model = one_node("BitCast", feeds[0], attrs={"to": to}, sym={"x": ["a", "b"]}, opset=26)
    vm = VirtualMachine(build(relaxpack.from_onnx(model)))
    for f in feeds:     # bit for bit: NaN payloads too
        got, want = vm.run(f)["y0"], f["x"].view(np_dtype(dst))
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    if src != "bfloat16" and dst not in ("bfloat16", "float8_e4m3fn"):
        check("BitCast", feeds[0], more=feeds[1:], attrs={"to": to}, sym={"x": ["a", "b"]}, opset=26,
              ref="onnx")


def test_bitcast_of_a_scalar_and_of_a_constant():
    check("BitCast", {"x": np.array(-0.0, np.float32)}, opset=26, ref="onnx",
          attrs={"to": helper.np_dtype_to_tensor_dtype(np.dtype("uint32"))})
    model = one_node("BitCast", {}, consts={"c": np.array([1.5, np.inf], np.float64)},
                     attrs={"to": helper.np_dtype_to_tensor_dtype(np.dtype("int64"))}, opset=26)
    mod = relaxpack.from_onnx(model)
    assert "bitcast" not in mod.script()


def test_bitcast_bytes_to_bool_are_true_when_nonzero():
    check("BitCast", {"x": np.array([0, 1, 2, 255], np.uint8)}, opset=26, ref=lambda feeds: [feeds["x"] != 0],
          attrs={"to": helper.np_dtype_to_tensor_dtype(np.dtype(bool))})


def test_bitcast_needs_equal_widths():
    model = one_node("BitCast", {"x": np.zeros(3, np.float32)},
                     attrs={"to": helper.np_dtype_to_tensor_dtype(np.dtype("int64"))}, opset=26)
    with pytest.raises(ShapeError, match=r"BitCast.*float32 \(32 bits\) as int64 \(64 bits\)"):
        relaxpack.from_onnx(model)


# ---------------------------------------------------------------- Cast to float8_e8m0fnu (opset 24)


def e8m0_inputs(dtype, seed=0):
    """Random magnitudes over float32's whole exponent range, plus the special values."""
    rng = np.random.default_rng(seed)
    x = (rng.uniform(1, 2, 50) * 2.0 ** rng.integers(-130, 128, 50)).astype(np.float32)
    special = np.array([0, 1, 1.5, 2 ** 127, 2 ** 127 * 1.5, 3.4e38, np.inf, np.nan, 2 ** -127, 2 ** -149],
                       np.float32)
    x = np.concatenate([x, special])
    if np.dtype(dtype).kind in "iu":
        return rng.integers(0, 1000, 13).astype(dtype)
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@pytest.mark.parametrize("round_mode", ["up", "down", "nearest"])
@pytest.mark.parametrize("saturate", [0, 1])
@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int32"])
def test_cast_to_float8_e8m0_rounds_the_exponent(round_mode, saturate, dtype):
    """Bit for bit as onnx's reference (which casts to float32 first)."""
    x = e8m0_inputs(dtype)
    to = helper.np_dtype_to_tensor_dtype(np.dtype(ml_dtypes.float8_e8m0fnu))
    model = one_node("Cast", {"x": x}, attrs={"to": to, "saturate": saturate, "round_mode": round_mode},
                     opset=24, sym={"x": ["n"]})
    vm = VirtualMachine(build(relaxpack.from_onnx(model)))
    for feed in (x, x[:0]):
        got = vm.run({"x": feed})["y0"]
        want = numpy_helper.to_float8e8m0(feed, bool(saturate), round_mode)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))


def test_cast_like_to_float8_e8m0_and_other_targets_at_opset_24():
    x = e8m0_inputs("float32")
    like = np.zeros(1, ml_dtypes.float8_e8m0fnu)
    model = one_node("CastLike", {"x": x}, consts={"like": like}, attrs={"round_mode": "down"}, opset=24)
    got = VirtualMachine(build(relaxpack.from_onnx(model))).run({"x": x})["y0"]
    np.testing.assert_array_equal(got.view(np.uint8), numpy_helper.to_float8e8m0(x, True, "down").view(np.uint8))
    check("Cast", {"x": x[np.abs(x) < 6e4]}, attrs={"to": helper.np_dtype_to_tensor_dtype(np.dtype("float16"))},
          opset=24,
          ref="onnx")

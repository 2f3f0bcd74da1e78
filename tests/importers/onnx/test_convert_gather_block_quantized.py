"""com.microsoft GatherBlockQuantized (onnxruntime-genai's quantized embedding table) against onnxruntime."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.errors import ShapeError, UnsupportedOpError

from .test_convert_matmul_nbits import pack
from .test_convert_microsoft import MS, check

ROWS, WIDTH, BLOCK = 10, 40, 16   # the last block of each row is partial
BLOCKS = -(-WIDTH // BLOCK)


def _tensor(name, array, elem_type):
    return helper.make_tensor(name, elem_type, array.shape, np.asarray(array).reshape(-1).tolist())


def _model(data, scales, zero_points=None, *, data_type, index_type=TensorProto.INT64, **attrs):
    """One node over constant ``data`` (of ONNX type ``data_type``), ``scales`` and zero points;
    the indices a (b, s) graph input."""
    inits = [_tensor("data", data, data_type), _tensor("scales", scales, helper.np_dtype_to_tensor_dtype(scales.dtype))]
    names = ["data", "indices", "scales"]
    if zero_points is not None:
        inits.append(_tensor("zero_points", zero_points, data_type))
        names.append("zero_points")
    node = helper.make_node("GatherBlockQuantized", names, ["y"], domain=MS, **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("indices", index_type, ["b", "s"])],
                              [helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(scales.dtype), None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS, 1)],
                             ir_version=10)


def _indices(batch, seq, size, seed, dtype=np.int64):
    """Indices in [-size - 2, size + 2): negative ones count from the end; those outside
    [-size, size) give zeros in onnxruntime."""
    return {"indices": np.random.default_rng(seed).integers(-size - 2, size + 2, (batch, seq)).astype(dtype)}


def _scales(*shape, dtype=np.float32, seed=1):
    return (np.random.default_rng(seed).random(shape) * 0.1 + 0.01).astype(dtype)


@pytest.mark.parametrize("data_type", [TensorProto.INT4, TensorProto.UINT4])
@pytest.mark.parametrize("with_zero_points", [False, True])
@pytest.mark.parametrize("scale_type", [np.float32, np.float16])
def test_4bit_types(data_type, with_zero_points, scale_type):
    low, high = (-8, 8) if data_type == TensorProto.INT4 else (0, 16)
    rng = np.random.default_rng(0)
    data = rng.integers(low, high, (ROWS, WIDTH))
    zero_points = rng.integers(low, high, (ROWS, BLOCKS)) if with_zero_points else None
    model = _model(data, _scales(ROWS, BLOCKS, dtype=scale_type), zero_points, data_type=data_type,
                   block_size=BLOCK)
    check(model, _indices(1, 3, ROWS, 1), _indices(3, 7, ROWS, 2), tol=(0, 0))   # rounded once, as onnxruntime


@pytest.mark.parametrize("bits", [2, 4, 8])
@pytest.mark.parametrize("with_zero_points", [False, True])
def test_packed_uint8(bits, with_zero_points):
    """uint8 bytes holding ``bits``-bit codes low bits first (onnxruntime-genai's layout); zero
    points packed alike, 2^(bits-1) when omitted."""
    rng = np.random.default_rng(0)
    data = pack(rng.integers(0, 1 << bits, (ROWS, WIDTH)), bits)
    zero_points = pack(rng.integers(0, 1 << bits, (ROWS, BLOCKS)), bits) if with_zero_points else None
    model = _model(data, _scales(ROWS, BLOCKS), zero_points, data_type=TensorProto.UINT8,
                   index_type=TensorProto.INT32, bits=bits, block_size=BLOCK)
    check(model, _indices(1, 3, ROWS, 1, np.int32), _indices(3, 7, ROWS, 2, np.int32))


def test_gather_along_the_quantized_columns():
    """gather_axis 1 and quantize_axis 0 (int4): the indices pick columns of the table."""
    rng = np.random.default_rng(0)
    data = rng.integers(-8, 8, (WIDTH, ROWS))
    model = _model(data, _scales(BLOCKS, ROWS), rng.integers(-8, 8, (BLOCKS, ROWS)), data_type=TensorProto.INT4,
                   block_size=BLOCK, gather_axis=1, quantize_axis=0)
    check(model, _indices(1, 3, ROWS, 1), _indices(3, 7, ROWS, 2))


def test_a_three_dimensional_table():
    rng = np.random.default_rng(0)
    data = rng.integers(0, 16, (ROWS, 3, WIDTH))
    model = _model(data, _scales(ROWS, 3, BLOCKS), data_type=TensorProto.UINT4, block_size=BLOCK, quantize_axis=2)
    check(model, _indices(1, 3, ROWS, 1), _indices(3, 7, ROWS, 2))


def test_float8_rows_scaled_whole():
    """float8 data scaled per row (block_size 0) without zero points."""
    values = np.random.default_rng(0).standard_normal((ROWS, WIDTH)).astype(ml_dtypes.float8_e4m3fn)
    model = _model(values.astype(np.float32), _scales(ROWS, 1), data_type=TensorProto.FLOAT8E4M3FN, block_size=0)
    check(model, _indices(1, 3, ROWS, 1), _indices(3, 7, ROWS, 2))


def test_data_computed_at_run_time_is_refused_by_name():
    model = _model(np.zeros((ROWS, WIDTH), np.int64), _scales(ROWS, BLOCKS), data_type=TensorProto.INT4,
                   block_size=BLOCK)
    model.graph.initializer.pop(0)
    model.graph.input.append(helper.make_tensor_value_info("data", TensorProto.INT4, [ROWS, WIDTH]))
    with pytest.raises(UnsupportedOpError, match=r"GatherBlockQuantized.*data must be an initializer"):
        relaxpack.from_onnx(model)


def test_scales_that_do_not_fit_the_blocks_are_malformed():
    model = _model(np.zeros((ROWS, WIDTH), np.int64), _scales(ROWS, BLOCKS + 1), data_type=TensorProto.INT4,
                   block_size=BLOCK)
    with pytest.raises(ShapeError, match=r"GatherBlockQuantized.*scales of shape \[10, 4\] do not hold 3 blocks"):
        relaxpack.from_onnx(model)

"""com.microsoft MatMulNBits (onnxruntime's int4 weight-only quantization) against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from relaxpack.importers.onnx.converters.microsoft_nbits import unpack_codes
from relaxpack.runtime import VirtualMachine


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    """``bits``-bit codes (..., count) packed into uint8 bytes, low bits first (the inverse of unpack_codes)."""
    flat = ((codes[..., None] >> np.arange(bits)) & 1).astype(np.uint8).reshape(*codes.shape[:-1], -1)
    pad = (-flat.shape[-1]) % 8
    flat = np.concatenate([flat, np.zeros((*flat.shape[:-1], pad), np.uint8)], axis=-1)
    return np.packbits(flat, axis=-1, bitorder="little")


def nbits_model(k, n, block_size, zero_points, bias, bits=4, accuracy_level=0, seed=0):
    rng = np.random.default_rng(seed)
    blocks = -(-k // block_size)
    codes = rng.integers(0, 1 << bits, (n, blocks, block_size))
    inits = {"B": pack(codes, bits), "scales": (rng.random((n, blocks)) * 0.1 + 0.01).astype(np.float32).ravel()}
    inputs = ["a", "B", "scales"]
    if zero_points == "packed":
        inits["zp"] = pack(rng.integers(0, 1 << bits, (n, blocks)), bits).ravel()
    elif zero_points == "float":
        inits["zp"] = (rng.random(n * blocks) * (1 << bits)).astype(np.float32)
    inputs.append("zp" if zero_points else "")
    if bias:
        inputs += ["", "bias"]
        inits["bias"] = rng.standard_normal(n).astype(np.float32)
    node = helper.make_node("MatMulNBits", inputs, ["y"], domain="com.microsoft", K=k, N=n, bits=bits,
                            block_size=block_size, accuracy_level=accuracy_level)
    graph = helper.make_graph([node], "nbits", [helper.make_tensor_value_info("a", TensorProto.FLOAT, ["m", "seq", k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["m", "seq", n])],
                              [numpy_helper.from_array(v, name) for name, v in inits.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=9)


@pytest.mark.parametrize("k, block_size, zero_points, bias", [
    (64, 16, "packed", False), (40, 16, "packed", True), (64, 32, None, False), (48, 16, "float", True),
])
def test_matmul_nbits_matches_onnxruntime(k, block_size, zero_points, bias):
    """K a multiple of the block or not (the last block's padding unused), zero points packed, as
    floats or omitted (8), with a bias; float math (accuracy_level 0)."""
    model = nbits_model(k, 24, block_size, zero_points, bias)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    mod = relaxpack.from_onnx(model)
    rng = np.random.default_rng(1)
    for level in (0, 2):
        vm = VirtualMachine(relaxpack.build(mod, opt_level=level))
        for shape in ((1, 1, k), (3, 5, k)):
            a = rng.standard_normal(shape).astype(np.float32)
            np.testing.assert_allclose(vm.run({"a": a})["y"], session.run(None, {"a": a})[0], rtol=1e-5, atol=1e-5)


def test_unpack_codes_reads_low_bits_first():
    codes = np.arange(16).reshape(2, 8) % 8
    assert unpack_codes(pack(codes, 3), 3, 8).tolist() == codes.tolist()
    assert unpack_codes(np.array([[0x21, 0x43]], np.uint8), 4, 4).tolist() == [[1, 2, 3, 4]]

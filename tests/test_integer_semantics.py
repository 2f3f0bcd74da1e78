"""onnxruntime's integer GEMM against the exact result, on any x86-64 CPU:
what ``tests/integer_semantics.py`` says of it holds, and relaxpack computes
the exact result where onnxruntime does not."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from relaxpack.runtime import VirtualMachine

from .integer_semantics import exact_matmul_integer, ort_u8s8_matmul, pairs_cannot_saturate


def matmul_integer_model(b, a_zero_point, b_zero_point, k):
    inits = [numpy_helper.from_array(b, "b"), numpy_helper.from_array(np.uint8(a_zero_point), "za"),
             numpy_helper.from_array(np.int8(b_zero_point), "zb")]
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["y"])], "g",
                              [helper.make_tensor_value_info("a", TensorProto.UINT8, ["n", k])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=9)


def saturating_operands(rng, n, k):
    """uint8 rows and int8 columns of large magnitude: most pairs leave int16."""
    a = rng.integers(200, 256, (n, k)).astype(np.uint8)
    b = (rng.integers(100, 129, (k, 5)) * rng.choice([-1, 1], (k, 5))).clip(-128, 127).astype(np.int8)
    return a, b


@pytest.mark.parametrize("k, za, zb", [(64, 0, 0), (7, 130, 0), (33, 3, 5)])
def test_onnxruntime_is_exact_or_saturates_in_pairs_and_relaxpack_is_exact(k, za, zb):
    rng = np.random.default_rng(k)
    a, b = saturating_operands(rng, 4, k)
    exact = exact_matmul_integer(a, b, za, zb)
    emulated = ort_u8s8_matmul(a, b, za, zb)
    assert not np.array_equal(exact, emulated)       # these inputs do tell the two apart
    model = matmul_integer_model(b, za, zb, k)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    got_ort = session.run(None, {"a": a})[0]
    # with VNNI (or AMX) onnxruntime is exact; without, it is the saturating pairs, bit for bit
    assert np.array_equal(got_ort, exact) or np.array_equal(got_ort, emulated)
    for level in (0, 2):
        vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model), opt_level=level))
        np.testing.assert_array_equal(vm.run({"a": a})["y"], exact)


def test_the_emulation_is_exact_when_pairs_cannot_saturate():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 128, (3, 2, 31)).astype(np.uint8)
    b = rng.integers(-128, 128, (31, 6)).astype(np.int8)
    assert pairs_cannot_saturate(a, b)
    np.testing.assert_array_equal(ort_u8s8_matmul(a, b, 9, -4), exact_matmul_integer(a, b, 9, -4))
    big_a, big_b = saturating_operands(rng, 2, 8)
    assert not pairs_cannot_saturate(big_a, big_b)

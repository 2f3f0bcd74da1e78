"""com.microsoft MurmurHash3 (skl2onnx's FeatureHasher) against onnxruntime and the
algorithm's published check values: strings by their UTF-8 bytes (every tail length, empty
and non-ASCII ones), int32 and uint32 keys by their four bytes, signed and unsigned output."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.errors import UnsupportedOpError
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.kernels.hashing import murmur_hash3_bytes

WORDS = np.array(["", "a", "ab", "abc", "abcd", "abcde", "héllo wörld", "日本語", "x" * 37, "cat"], dtype=object)


def hash_model(elem_type: int, shape, **attrs):
    node = helper.make_node("MurmurHash3", ["X"], ["Y"], domain="com.microsoft", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", elem_type, shape)],
                              [onnx.ValueInfoProto(name="Y")])
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=10)


def check(model, x):
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"X": x})[0]
    for level in (0, 2):
        got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model), opt_level=level)).run({"X": x})["Y"]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("text, seed, expected", [
    (b"", 0, 0), (b"", 1, 0x514E28B7), (b"", 0xFFFFFFFF, 0x81F16F39), (b"\xff\xff\xff\xff", 0, 0x76293B50),
    (b"!Ce\x87", 0, 0xF55B516B), (b"!Ce", 0, 0x7E4A8634), (b"!C", 0, 0xA0F7B07A), (b"!", 0, 0x72661CF4),
    (b"hello", 0, 0x248BFA47)])
def test_the_published_check_values(text, seed, expected):
    assert murmur_hash3_bytes(text, seed) == expected


@pytest.mark.parametrize("positive", [0, 1])
@pytest.mark.parametrize("seed", [0, 42, 0x7FFFFFFF])
def test_strings(positive, seed):
    check(hash_model(TensorProto.STRING, ["n", 2], positive=positive, seed=seed), WORDS.reshape(5, 2))


@pytest.mark.parametrize("dtype", [np.int32, np.uint32])
@pytest.mark.parametrize("positive", [0, 1])
def test_int_keys(dtype, positive):
    info = np.iinfo(dtype)
    keys = np.random.default_rng(0).integers(info.min, info.max, (3, 7), endpoint=True).astype(dtype)
    keys[0, :3] = [info.min, 0, info.max]
    check(hash_model(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), ["n", 7], positive=positive, seed=5), keys)
    check(hash_model(helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), [], positive=positive), np.array(keys[0, 0]))


def test_keys_onnxruntime_does_not_hash_are_refused():
    with pytest.raises(UnsupportedOpError, match="keys of dtype int64"):
        relaxpack.from_onnx(hash_model(TensorProto.INT64, [3]))

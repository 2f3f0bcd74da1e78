"""The protocol's datatypes against numpy's, in JSON and in the binary tensor data layout."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from relaxpack.errors import InputError
from relaxpack.serve.datatypes import TO_DTYPE, from_binary, from_json, numpy_dtype_of, to_binary, to_json
from tests.serve.models import dtype_values

FEEDS = dtype_values(np.random.default_rng(5), 3)


@pytest.mark.parametrize("datatype", list(TO_DTYPE))
def test_binary_and_json_round_trips(datatype):
    array = FEEDS[f"in_{TO_DTYPE[datatype]}"]
    for back in (from_binary(to_binary(array, datatype), datatype, array.shape, "x"),
                 from_json(to_json(array, datatype), datatype, array.shape, "x")):
        assert back.shape == array.shape
        if datatype == "BYTES":
            assert [b.decode() if isinstance(b, bytes) else b for b in back.flat] == list(array.flat)
        else:
            assert back.dtype == array.dtype
            np.testing.assert_array_equal(back, array)


def test_binary_layout_is_little_endian_bool_one_byte_bytes_length_prefixed():
    assert to_binary(np.array([1, 256], np.int32), "INT32") == b"\x01\x00\x00\x00\x00\x01\x00\x00"
    assert to_binary(np.array([True, False]), "BOOL") == b"\x01\x00"
    assert to_binary(np.array(["ab", "é"], object), "BYTES") == struct.pack("<I", 2) + b"ab" + \
        struct.pack("<I", 2) + "é".encode()
    assert numpy_dtype_of("FP16") == np.dtype("<f2")


@pytest.mark.parametrize("raw, message", [
    (struct.pack("<I", 5) + b"abc", "says 5 bytes, past the end"),
    (struct.pack("<I", 1) + b"a" + b"\x00\x00", "ends inside element 1's length"),
    (struct.pack("<I", 1) + b"a" + struct.pack("<I", 0) + b"z", "1 bytes of binary data after"),
])
def test_malformed_bytes_elements(raw, message):
    with pytest.raises(InputError, match=message):
        from_binary(raw, "BYTES", (2,), "input 's'")


def test_wrong_lengths_and_values():
    with pytest.raises(InputError, match="12 bytes of binary data, but FP32\\[2, 2\\] takes 16"):
        from_binary(bytes(12), "FP32", (2, 2), "input 'x'")
    with pytest.raises(InputError, match="BOOL binary data holds bytes other than 0 and 1"):
        from_binary(b"\x00\x02", "BOOL", (2,), "input 'b'")
    with pytest.raises(InputError, match="a value lies outside UINT8's range"):
        from_json([1, 256], "UINT8", (2,), "input 'u'")
    with pytest.raises(InputError, match="True is not a valid INT32 element"):
        from_json([1, True], "INT32", (2,), "input 'i'")
    with pytest.raises(InputError, match="unknown datatype 'BF16'"):
        numpy_dtype_of("BF16")
    # a shape whose element count overflows int64 is a mismatch, not a crash
    with pytest.raises(InputError, match="0 bytes of binary data"):
        from_binary(b"", "FP32", (2 ** 62, 4), "input 'x'")

"""The Open Inference Protocol's tensor datatypes and the archive's dtypes, both ways.

The protocol names element types ``FP32``, ``INT64``, ``BOOL``, ``BYTES``, ...; an
archive names them as numpy does (``float32``, ``int64``, ``bool``, ``string``).
Binary tensor data is little-endian and row major, BOOL one byte per element and
BYTES each element a 4-byte little-endian length and its bytes. Numpy only.
"""

from __future__ import annotations

import struct
from math import prod

import numpy as np

from ..errors import InputError

#: protocol datatype -> archive dtype name (``string`` is BYTES: the runtime's strings)
TO_DTYPE = {
    "BOOL": "bool", "UINT8": "uint8", "UINT16": "uint16", "UINT32": "uint32", "UINT64": "uint64",
    "INT8": "int8", "INT16": "int16", "INT32": "int32", "INT64": "int64",
    "FP16": "float16", "FP32": "float32", "FP64": "float64", "BYTES": "string",
}
#: archive dtype name -> protocol datatype
TO_DATATYPE = {dtype: datatype for datatype, dtype in TO_DTYPE.items()}

_LENGTH = struct.Struct("<I")


def datatype_of(dtype: str) -> str:
    """The protocol's name for an archive dtype; a dtype it has no name for is an InputError."""
    try:
        return TO_DATATYPE[dtype]
    except KeyError:
        raise InputError(f"dtype {dtype} has no Open Inference Protocol datatype "
                         f"(it carries {', '.join(TO_DTYPE)})") from None


def numpy_dtype_of(datatype: str) -> np.dtype:
    """The numpy dtype of a protocol datatype's elements (``object`` for BYTES), little-endian."""
    dtype = TO_DTYPE.get(datatype)
    if dtype is None:
        raise InputError(f"unknown datatype {datatype!r}; the protocol's are {', '.join(TO_DTYPE)}")
    return np.dtype(object) if dtype == "string" else np.dtype(dtype).newbyteorder("<")


def from_binary(raw: bytes | memoryview, datatype: str, shape: tuple[int, ...], what: str) -> np.ndarray:
    """The tensor of ``shape`` held in ``raw`` (the binary tensor data extension's layout)."""
    count = prod(shape)
    if datatype == "BYTES":
        return _bytes_elements(raw, count, what).reshape(shape)
    dtype = numpy_dtype_of(datatype)
    if len(raw) != count * dtype.itemsize:
        raise InputError(f"{what}: {len(raw)} bytes of binary data, but {datatype}{list(shape)} takes "
                         f"{count * dtype.itemsize}")
    array = np.frombuffer(raw, dtype, count).reshape(shape)
    if datatype == "BOOL":
        if np.any(array.view(np.uint8) > 1):
            raise InputError(f"{what}: BOOL binary data holds bytes other than 0 and 1")
    return array.astype(dtype.newbyteorder("="), copy=False)


def to_binary(array: np.ndarray, datatype: str) -> bytes:
    """``array``'s elements in the binary tensor data extension's layout."""
    if datatype == "BYTES":
        return b"".join(_LENGTH.pack(len(b)) + b for b in (_as_bytes(s) for s in array.reshape(-1)))
    return np.ascontiguousarray(array, dtype=numpy_dtype_of(datatype)).tobytes()


def from_json(data, datatype: str, shape: tuple[int, ...], what: str) -> np.ndarray:
    """The tensor of ``shape`` from JSON ``data``: a row-major list of elements, flat or nested."""
    count = prod(shape)
    flat = _flatten(data, what)
    if len(flat) != count:
        raise InputError(f"{what}: {len(flat)} elements of data, but shape {list(shape)} holds {count}")
    if datatype == "BYTES":
        if not all(isinstance(s, str) for s in flat):
            raise InputError(f"{what}: BYTES data in JSON must be strings")
        array = np.empty(count, dtype=object)
        array[:] = flat
        return array.reshape(shape)
    dtype = numpy_dtype_of(datatype).newbyteorder("=")
    kind = dtype.kind
    for value in flat:
        if not _fits(value, kind):
            raise InputError(f"{what}: {value!r} is not a valid {datatype} element")
    try:
        return np.array(flat, dtype=dtype).reshape(shape)
    except OverflowError:
        raise InputError(f"{what}: a value lies outside {datatype}'s range") from None


def to_json(array: np.ndarray, datatype: str) -> list:
    """``array``'s elements as a flat row-major JSON list (BYTES as UTF-8 strings)."""
    flat = array.reshape(-1)
    if datatype == "BYTES":
        return [_as_bytes(s).decode("utf-8", errors="replace") for s in flat]
    return flat.tolist()


def _fits(value, kind: str) -> bool:
    if kind == "b":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind in "iu":
        return isinstance(value, int)
    return isinstance(value, (int, float))


def _flatten(data, what: str) -> list:
    """A nested list's elements in row-major order (a scalar is a one-element list)."""
    if not isinstance(data, list):
        return [data]
    if not any(isinstance(item, list) for item in data):
        return data
    flat: list = []
    stack = [iter(data)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, list):
                stack.append(iter(item))
                break
            flat.append(item)
        else:
            stack.pop()
    return flat


def _bytes_elements(raw, count: int, what: str) -> np.ndarray:
    view = memoryview(raw)
    out = np.empty(count, dtype=object)
    pos = 0
    for i in range(count):
        if pos + 4 > len(view):
            raise InputError(f"{what}: BYTES binary data ends inside element {i}'s length")
        (n,) = _LENGTH.unpack_from(view, pos)
        pos += 4
        if pos + n > len(view):
            raise InputError(f"{what}: BYTES element {i} says {n} bytes, past the end of its data")
        out[i] = bytes(view[pos:pos + n])
        pos += n
    if pos != len(view):
        raise InputError(f"{what}: {len(view) - pos} bytes of binary data after its {count} BYTES elements")
    return out


def _as_bytes(value) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode("utf-8")


__all__ = ["TO_DATATYPE", "TO_DTYPE", "datatype_of", "from_binary", "from_json", "numpy_dtype_of", "to_binary",
           "to_json"]

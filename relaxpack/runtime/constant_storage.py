"""A constant stored in a narrower dtype than it has, when that loses nothing.

A QOperator model's weights become float32 at import (``w - w_zero_point``:
integers of -255..255), a float16 model's float32 regions hold widened
float16 weights, an index table is int64 of small values. The archive
(format 3) stores such a constant in the narrowest dtype of
:func:`candidates` whose values give back the constant's bytes exactly
(``stored.astype(dtype)``, compared bit for bit: -0.0 and NaN payloads
count), and records that dtype as the constant's ``stored``; loading widens
it once into private, read-only memory. The executable sees the same arrays
either way: same results, same bits. What changes is the file (a QOperator
ResNet 3.9x smaller, a float16 one 2x) and that such a constant is no longer
a view of the mapped file. docs/design-notes.md, "Constants stored narrower".
"""

from __future__ import annotations

import numpy as np

from .mapped_pages import release

#: constants below this many bytes stay as they are (their widened copy is not worth a call)
MIN_BYTES = 4096
#: values of the first exact check; a constant that fails it is not converted whole
_SAMPLE = 1024

_SIGNED = (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16), np.dtype(np.uint16), np.dtype(np.int32),
           np.dtype(np.uint32))
_UNSIGNED = (np.dtype(np.uint8), np.dtype(np.uint16), np.dtype(np.uint32))
_FLOAT = (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16), np.dtype(np.uint16), np.dtype(np.float16),
          np.dtype(np.int32), np.dtype(np.float32))


def candidates(dtype: np.dtype) -> tuple:
    """The dtypes a constant of ``dtype`` may be stored in, narrowest first (none for other dtypes:
    bool, complex, the ml_dtypes floats); the loader accepts no other."""
    dtype = np.dtype(dtype).newbyteorder("=")
    if dtype not in (np.float64, np.float32, np.float16, np.int64, np.int32, np.int16, np.uint64, np.uint32,
                     np.uint16):
        return ()
    pool = _FLOAT if dtype.kind == "f" else _SIGNED if dtype.kind == "i" else _UNSIGNED
    return tuple(d for d in pool if d.itemsize < dtype.itemsize)


def narrowest(array: np.ndarray):
    """The narrowest of :func:`candidates` that holds every value of ``array`` exactly, or None
    (kept as it is: none does, or it has fewer than :data:`MIN_BYTES` bytes)."""
    if array.nbytes < MIN_BYTES:
        return None
    flat = np.ascontiguousarray(array).reshape(-1)
    for stored in candidates(array.dtype):
        if _exact(flat[:_SAMPLE], stored) and _exact(flat, stored):
            return stored
    return None


def _exact(values: np.ndarray, stored: np.dtype) -> bool:
    """Whether ``values`` cast to ``stored`` and back are the same bytes."""
    with np.errstate(all="ignore"):     # out-of-range and NaN casts: the comparison says no
        back = values.astype(stored).astype(values.dtype)
    return np.array_equal(back.view(np.uint8), values.view(np.uint8))


def widened(buffer, stored: np.dtype, dtype: np.dtype, shape: tuple, offset: int) -> np.ndarray:
    """The read-only ``dtype`` array of ``shape`` whose values are stored in ``buffer`` at ``offset``
    as ``stored`` (a fresh array owning its memory: no view of ``buffer`` is kept). The stored bytes'
    pages of a file mapping are given back once read (:func:`.mapped_pages.release`)."""
    count = int(np.prod(shape, dtype=np.int64))
    array = np.empty(shape, dtype)
    source = np.frombuffer(buffer, stored, count, offset)
    np.copyto(array.reshape(-1), source, casting="unsafe")
    release(source)
    array.flags.writeable = False
    return array


__all__ = ["MIN_BYTES", "candidates", "narrowest", "widened"]

"""Integer products (matmul, conv) by float BLAS when that is provably exact.

numpy has no BLAS for integer matrices: an int32 ``matmul`` or conv GEMM runs
its own loops, 10-50x slower than sgemm. A quantized model's products are of
int8 / uint8 values shifted by their zero points, so their sums are small:
a float GEMM gives the very same integers whenever every partial sum it
forms is exactly representable. For ``out = a @ w`` (a conv is a GEMM over
its windows, zero padding adding nothing), any partial sum of output ``j``
is bounded by ``max|a| * sum_k |w[k, j]|`` (plus ``|bias[j]|`` when the bias
is added after). :func:`exact_dtype` takes that bound ``B``:

- ``B <= 2**24``: float32 (every integer up to 2**24 is a float32; a fused
  multiply-add rounds once, its exact result again such an integer);
- ``B <= 2**53``: float64, likewise;
- and only when ``B`` fits the integer result's type: the integer kernel
  wraps on overflow (modulo 2**32), the float one would not. Otherwise the
  integer kernel runs as before.

An operand that is a bound value (a constant: read-only memory, the same
array every call) has its bound and float copies worked out once
(:func:`constant_facts`); any other operand is bounded per call by
``max|w| * K`` (two read-only reductions). The float result is converted
back to the integer type (exact: an integer within range).
"""

from __future__ import annotations

import threading
import weakref

import numpy as np

#: the largest integer bound each float type holds exactly, all smaller integers included
FLOAT32_EXACT = 1 << 24
FLOAT64_EXACT = 1 << 53

#: integer result types handled (signed: the integer kernel's wrap-around is the only difference)
RESULT_TYPES = (np.dtype(np.int32), np.dtype(np.int64))

#: below this many multiply-adds the integer loops run: the bound, the conversions and the
#: copy back cost more than they save (measured, 1 thread: a (5, 32) x (32, 32) int32 product
#: takes 6 us by the loops, 10 us this way; (51, 32) x (32, 32) 28 us against 10)
MIN_PRODUCTS = 1 << 14
_RESULT_MAX = {t: int(np.iinfo(t).max) for t in RESULT_TYPES}


def magnitude(x: np.ndarray) -> int:
    """``max |x|`` as a Python int (0 for an empty array), from two read-only reductions."""
    if x.size == 0:
        return 0
    return max(abs(int(x.min())), abs(int(x.max())))


def exact_dtype(bound: int, result: np.dtype) -> np.dtype | None:
    """The float type whose products and sums are exact for partial sums up to ``bound``
    in magnitude and whose result fits ``result`` (an integer type), or None."""
    limit = _RESULT_MAX.get(result)
    if limit is None or bound > limit:
        return None
    if bound <= FLOAT32_EXACT:
        return np.dtype(np.float32)
    if bound <= FLOAT64_EXACT:
        return np.dtype(np.float64)
    return None


def is_integer(*arrays) -> bool:
    """Whether every array given (None skipped) has an integer dtype."""
    for a in arrays:
        if a is not None and a.dtype.kind not in "iu":
            return False
    return True


class ConstantFacts:
    """A constant operand's sum bound (``max`` over outputs of ``sum |w|`` over the
    reduced axes) and its float copies, made on first use."""

    def __init__(self, array: np.ndarray, reduce_axes: tuple[int, ...]):
        # 64-bit values: Python ints (|int64 min| and the sums of large values overflow int64)
        wide = np.abs(array.astype(object if array.dtype.itemsize >= 8 else np.int64))
        sums = np.asarray(wide.sum(axis=reduce_axes))
        self.bound = int(np.max(sums)) if sums.size else 0
        self._copies: dict[np.dtype, np.ndarray] = {}      # (not the array itself: the cache is weak)

    def as_float(self, array: np.ndarray, dtype: np.dtype) -> np.ndarray:
        """``array`` (the one these facts are of) in ``dtype``, converted once."""
        copy = self._copies.get(dtype)
        if copy is None:
            copy = self._copies[dtype] = array.astype(dtype)
        return copy


_CACHE: dict[tuple[int, tuple], tuple[weakref.ref, ConstantFacts]] = {}
_LOCK = threading.Lock()


_DECLARED: dict[int, weakref.ref] = {}


def declare_constant(array: np.ndarray) -> None:
    """Note that ``array`` is a bound value of an instruction (``constant[i]`` of
    ``specialize_attrs``: the same array with the same values every call), so its facts may be
    kept although it is writeable (an in-memory executable's constants are)."""
    key = id(array)
    ref = _DECLARED.get(key)
    if ref is not None and ref() is array:
        return
    with _LOCK:
        _DECLARED[key] = weakref.ref(array, lambda r, key=key, table=_DECLARED, forget=_forget:
                                     forget(table, key, r))


def constant_facts(array: np.ndarray, reduce_axes: tuple[int, ...]) -> ConstantFacts | None:
    """The :class:`ConstantFacts` of ``array`` when it is a constant (read-only, down to
    the memory it views: the archive's constants are; or declared by :func:`declare_constant`),
    kept while the array lives; None for another array (its values may change between calls)."""
    key = (id(array), reduce_axes)
    entry = _CACHE.get(key)
    if entry is not None and entry[0]() is array:      # a constant when its facts were made
        return entry[1]
    if not _read_only(array):
        ref = _DECLARED.get(id(array))
        if ref is None or ref() is not array:
            return None
    facts = ConstantFacts(array, reduce_axes)
    with _LOCK:
        _CACHE[key] = (weakref.ref(array, lambda ref, key=key, cache=_CACHE, forget=_forget:
                                   forget(cache, key, ref)), facts)
    return facts


def _forget(table: dict, key, ref) -> None:
    """Drop ``key``'s entry once its array is gone (not a newer entry under a reused id). The
    callbacks bind it as a default: an array freed at interpreter exit, after the module's globals
    are cleared, would otherwise call None ("Exception ignored in ...")."""
    entry = table.get(key)
    if entry is not None and (entry[0] if isinstance(entry, tuple) else entry) is ref:
        del table[key]


def _read_only(array: np.ndarray) -> bool:
    """``array`` and every array it views are read-only (a read-only view of
    writeable memory is not a constant)."""
    node = array
    while isinstance(node, np.ndarray):
        if node.flags.writeable:
            return False
        node = node.base
    return True


def operand_bound(array: np.ndarray, reduce_axes: tuple[int, ...]) -> tuple[int, ConstantFacts | None]:
    """The sum bound of the weight-like operand ``array`` (``sum |w|`` over ``reduce_axes``,
    maximized over outputs) and its constant facts; a non-constant is bounded per call by
    ``max|w|`` times the number of reduced values."""
    facts = constant_facts(array, reduce_axes)
    if facts is not None:
        return facts.bound, facts
    count = 1
    for axis in reduce_axes:
        count *= array.shape[axis]
    return magnitude(array) * count, None


def as_float(array: np.ndarray, dtype: np.dtype, facts: ConstantFacts | None) -> np.ndarray:
    """``array`` in ``dtype`` (a constant's kept copy when ``facts`` is given)."""
    return facts.as_float(array, dtype) if facts is not None else array.astype(dtype)

"""ai.onnx.ml's map ops: ZipMap, CastMap, DictVectorizer (packed kernels).

Maps are Python dicts at run time (runtime/maps.py). These kernels follow
onnxruntime, whose results are what a scikit-learn user compares with:

- ZipMap: one ``{label: probability}`` dict per row of a 1-D or 2-D float
  tensor (a tuple of dicts, the VM's sequence), keys in label order.
- CastMap: the values of an int64-keyed map in ascending key order (DENSE,
  shape ``(1, len)``) or at the index their key names (SPARSE, ``(1,
  max_map)``; keys outside ``[0, max_map)`` are dropped), cast TO_FLOAT,
  TO_INT64 (truncated, as C++ casts) or TO_STRING (``%f``, and ``"0.f"`` for
  a sparse hole: onnxruntime's text for it).
- DictVectorizer: the map's values at the vocabulary's positions, shape
  ``(1, len(vocabulary))``, 0 (or "") where the map has no such key; keys
  outside the vocabulary are ignored.

>>> zip_map(np.array([[0.25, 0.75]], np.float32), labels=(0, 1))
({0: 0.25, 1: 0.75},)
"""

from __future__ import annotations

import functools
import re
from itertools import repeat

import numpy as np

from ...errors import ShapeError
from ..dtypes import numpy_dtype
from ..maps import PlainMaps
from ._registry import register_packed


@register_packed("ml.zip_map")
def zip_map(x, *, labels):
    """ZipMap: a tuple of ``{label: float}`` dicts, one per row of ``x`` (labels are Python
    ints or strs, the values Python floats: a :class:`PlainMaps`)."""
    x = np.asarray(x)
    if x.ndim not in (1, 2):
        raise ShapeError(f"zip_map: ZipMap takes a 1-D or 2-D tensor, got shape {x.shape}")
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    if rows.shape[1] != len(labels):
        raise ShapeError(f"zip_map: {rows.shape[1]} columns for {len(labels)} class labels")
    if 0 < len(labels) <= DISPLAY_MAX_LABELS:
        return PlainMaps(_row_dicts(len(labels))(rows.tolist(), *labels))
    return PlainMaps([dict(zip(labels, row)) for row in rows.tolist()])


#: the most labels ZipMap writes its rows with a dict display (a function made per count)
DISPLAY_MAX_LABELS = 64


def _zip_map_specialized(attrs: dict, constant) -> object:
    """ZipMap per instruction: its labels' row function found once, and a 2-D ndarray of as many
    columns as labels (a classifier's probabilities) goes straight to it, past the general call's
    keyword, conversions and tests (~1 us of its ~2 at one row). Anything else takes
    :func:`zip_map`: the same dicts."""
    labels = attrs["labels"]
    if set(attrs) != {"labels"} or not 0 < len(labels) <= DISPLAY_MAX_LABELS:
        return lambda x: zip_map(x, **attrs)
    rows_of, width = _row_dicts(len(labels)), len(labels)

    def call(x):
        if x.__class__ is np.ndarray and x.ndim == 2 and x.shape[1] == width:
            return PlainMaps(rows_of(x.tolist(), *labels))
        return zip_map(x, labels=labels)
    return call


zip_map.specialize_attrs = _zip_map_specialized


@functools.lru_cache(maxsize=DISPLAY_MAX_LABELS)
def _row_dicts(width: int):
    """``f(rows, *labels)``: one dict per row (a list of ``width`` values), built by one dict
    display ``{k0: v0, k1: v1, ...}`` over the unpacked row: the same dict as ``dict(zip(labels,
    row))`` (keys inserted in order, a repeated label's last value at its first place) at less
    than half the cost (64 rows of 3: 17 -> 7.5 us). Only the count goes into the source."""
    keys, values = [f"k{i}" for i in range(width)], [f"v{i}" for i in range(width)]
    display = ", ".join(f"{k}: {v}" for k, v in zip(keys, values))
    source = (f"def row_dicts(rows, {', '.join(keys)}):\n"
              f"    return [{{{display}}} for {', '.join(values)}, in rows]\n")
    namespace: dict = {}
    exec(compile(source, f"<zip_map {width}>", "exec"), namespace)  # noqa: S102
    return namespace["row_dicts"]


#: CastMap's cast_to -> the output dtype
CAST_TO = {"TO_FLOAT": "float32", "TO_INT64": "int64", "TO_STRING": "string"}


def _cast_value(value, cast_to: str):
    if cast_to == "TO_STRING":
        return value if isinstance(value, str) else f"{float(value):f}"
    if isinstance(value, str):
        return _parse(value, _FLOAT if cast_to == "TO_FLOAT" else _INTEGER)
    return float(value) if cast_to == "TO_FLOAT" else int(value)


#: the numeric prefixes C's strtof and strtoll read (onnxruntime's std::stof / std::stoll)
_FLOAT = re.compile(r"\s*([+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf(inity)?|nan))", re.I)
_INTEGER = re.compile(r"\s*([+-]?\d+)")


def _parse(text: str, pattern: re.Pattern):
    """The number at the start of ``text``, as C parses it; a ShapeError if there is none."""
    match = pattern.match(text)
    if match is None:
        raise ShapeError(f"cast_map: value {text!r} is not a number")
    return float(match.group(1)) if pattern is _FLOAT else int(match.group(1))


@register_packed("ml.cast_map")
def cast_map(m, *, cast_to: str, map_form: str, max_map: int):
    """CastMap of the int64-keyed dict ``m``: a ``(1, n)`` tensor."""
    dtype = numpy_dtype(CAST_TO[cast_to])
    keys = sorted(m)
    if map_form == "DENSE":
        values = [_cast_value(m[k], cast_to) for k in keys]
        return np.array([values], dtype=dtype).reshape(1, len(keys))
    if any(k < 0 for k in keys):
        raise ShapeError(f"cast_map: SPARSE keys must be non-negative, got {keys[0]}")
    out = np.full((1, max_map), "0.f" if cast_to == "TO_STRING" else 0, dtype=dtype)
    for k in keys:
        if k < max_map:
            out[0, k] = _cast_value(m[k], cast_to)
    return out


@register_packed("ml.dict_vectorizer")
def dict_vectorizer(m, *, vocabulary, dtype: str):
    """DictVectorizer of the dict ``m``: a ``(1, len(vocabulary))`` tensor of ``dtype``."""
    if dtype == "string":
        return np.array([[m.get(k, "") for k in vocabulary]], dtype=object).reshape(1, len(vocabulary))
    # numbers: one fromiter (np.array of a list of numpy scalars costs ~0.5 us more on ten)
    return np.fromiter(map(m.get, vocabulary, repeat(0)), numpy_dtype(dtype), len(vocabulary)).reshape(
        1, len(vocabulary))


def _dict_vectorizer_specialized(attrs: dict, constant) -> object:
    """DictVectorizer per instruction: a numeric output's dtype and length found once and the
    ``fromiter`` called with them (the general call's keywords and dtype lookup were ~0.4 us a
    call); strings take :func:`dict_vectorizer`. The same lookups, the same casts."""
    vocabulary, dtype = attrs.get("vocabulary"), attrs.get("dtype")
    if set(attrs) != {"vocabulary", "dtype"} or dtype == "string":
        return lambda m: dict_vectorizer(m, **attrs)
    vocabulary, numpy_type, size, zeros = tuple(vocabulary), numpy_dtype(dtype), len(vocabulary), repeat(0)
    shape = (1, size)

    def call(m):
        return np.fromiter(map(m.get, vocabulary, zeros), numpy_type, size).reshape(shape)
    return call


dict_vectorizer.specialize_attrs = _dict_vectorizer_specialized

"""Casts between numbers and strings (ONNX Cast/CastLike with a string
side), as the ONNX spec says and onnxruntime does.

Numbers to strings: integers in decimal, booleans as ``"1"``/``"0"``,
floats as C's ``%.8g`` of their value ("plain floating-point
representation", 8 significant digits as onnxruntime writes them), with the
spec's reserved literals ``"NaN"``, ``"INF"`` and ``"-INF"``. onnx's
reference evaluator writes Python's ``str`` instead (``"1.0"``, ``"nan"``).

Strings to numbers: decimal, scientific (``"1e-5"``, ``"1E8"``) and C99
hexadecimal (``"0x1p4"``) literals with surrounding whitespace; ``"INF"``,
``"+INF"``, ``"-INF"`` and ``"NaN"`` in any case. Values beyond a float
type's range become infinities. For integer types the spec leaves
non-integral strings undefined: an integral literal is read exactly and
wraps to the type's width (onnxruntime's reading), anything else numeric is
truncated toward zero. A string that is not a number is an ExecutionError
naming it.

>>> format_numbers(np.array([1.0, 0.1, np.nan, -np.inf], np.float32)).tolist()
['1', '0.1', 'NaN', '-INF']
>>> parse_numbers(np.array(["1e3", " -inf", "NaN", "0x10"], object), np.dtype(np.float32)).tolist()
[1000.0, -inf, nan, 16.0]
"""

from __future__ import annotations

import math
import re

import numpy as np

from ...errors import ExecutionError
from ..fpstate import quiet

_SPECIAL = {"inf": math.inf, "+inf": math.inf, "-inf": -math.inf, "nan": math.nan, "+nan": math.nan,
            "-nan": -math.nan}
_HEX = re.compile(r"[+-]?0[xX]")


def _format_float(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "INF" if v > 0 else "-INF"
    return "%.8g" % v


def format_numbers(x: np.ndarray) -> np.ndarray:
    """An object array of ``str``, one per element of the numeric ``x``."""
    if x.dtype == np.bool_:
        items = ["1" if v else "0" for v in x.reshape(-1).tolist()]
    elif x.dtype.kind in "iu" or x.dtype.name.startswith(("int", "uint")):     # ml_dtypes' int4 and friends
        items = [str(v) for v in x.reshape(-1).astype(np.int64 if x.dtype.kind != "u" else np.uint64).tolist()]
    else:
        items = [_format_float(v) for v in x.reshape(-1).astype(np.float64).tolist()]
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(x.shape)


def _parse_float(s) -> float:
    if not isinstance(s, str):
        raise ExecutionError(f"Cast: cannot read {s!r} as a number: not a string")
    text = s.strip()
    special = _SPECIAL.get(text.lower())
    if special is not None:
        return special
    try:
        if _HEX.match(text):
            return float.fromhex(text)
        if "_" in text or text.lower().lstrip("+-").startswith(("inf", "nan")):
            raise ValueError(text)              # Python's spellings C does not accept ("1_0", "infinity")
        return float(text)
    except (ValueError, OverflowError):
        raise ExecutionError(f"Cast: cannot read the string {s!r} as a number") from None


def _parse_int(s, bits: int, signed: bool) -> int:
    """An integer literal wrapped to ``bits`` (two's complement when signed);
    other numbers truncated toward zero first."""
    text = s.strip() if isinstance(s, str) else s
    try:
        value = int(text, 0) if isinstance(text, str) and _HEX.match(text) else int(text)
        if isinstance(text, str) and "_" in text:
            raise ValueError(text)
    except (ValueError, TypeError):
        number = _parse_float(s)
        if not math.isfinite(number):
            raise ExecutionError(f"Cast: the string {s!r} is not a finite number, no integer holds it") from None
        value = int(number)
    value %= 1 << bits
    return value - (1 << bits) if signed and value >= 1 << (bits - 1) else value


def parse_numbers(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The strings of the object array ``x`` read as numbers of ``dtype``."""
    flat = x.reshape(-1).tolist()
    if dtype == np.bool_:
        return np.array([_parse_float(s) != 0 for s in flat], dtype=bool).reshape(x.shape)
    if dtype.kind in "iu":
        bits, signed = dtype.itemsize * 8, dtype.kind == "i"
        return np.array([_parse_int(s, bits, signed) for s in flat], dtype=dtype).reshape(x.shape)
    values = np.array([_parse_float(s) for s in flat], dtype=np.float64).reshape(x.shape)
    with quiet():
        return values.astype(dtype)

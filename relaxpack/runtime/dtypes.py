"""IR dtype names to numpy dtypes; the 8-bit and 4-bit floats and bfloat16
come from ml_dtypes, imported only when such a dtype is used."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..errors import RelaxpackError

_ML_DTYPES = {
    "bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
    "float8_e8m0fnu", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn", "int2", "uint2", "int4", "uint4",
}
_NUMPY = {
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128",
}


@lru_cache(maxsize=None)
def numpy_dtype(name: str) -> np.dtype:
    """The numpy dtype for an IR dtype name; unknown names raise RelaxpackError."""
    if name in _NUMPY:
        return np.dtype(name)
    if name == "string":
        return np.dtype(object)
    if name in _ML_DTYPES:
        try:
            import ml_dtypes
        except ImportError:
            raise RelaxpackError(f"dtype {name} needs the ml_dtypes package (pip install ml_dtypes)") from None
        return np.dtype(getattr(ml_dtypes, name))
    raise RelaxpackError(f"unknown dtype {name!r}")

"""Read-only 0-d constants per float dtype, made once per process.

A ufunc call on a small array reads a numpy scalar or a Python number operand at
about twice the cost of a 0-d array (it converts the scalar on every call: ~0.15-0.3 us
more from 160 to 5000 values, float32 and float64; design-notes, "Scalar operands as
0-d arrays"). A 0-d array of the other operand's dtype holds the same value and gives
the same result dtype and bits (NEP 50: a Python number is weak, and the 0-d array is
of the array's own dtype). They are read-only: every thread and instruction shares them.
"""

from __future__ import annotations

import numpy as np

from ._math import scalar_array

FLOATS = tuple(np.dtype(t) for t in (np.float16, np.float32, np.float64))


def per_float_dtype(value) -> dict:
    """``{dtype: value as a read-only 0-d array of dtype}`` for float16, float32 and float64;
    a caller looks its operand's dtype up with ``.get(dtype, value)`` (any other dtype: the
    plain number, as before)."""
    return {dtype: scalar_array(value, dtype) for dtype in FLOATS}


ZERO, ONE = per_float_dtype(0), per_float_dtype(1)

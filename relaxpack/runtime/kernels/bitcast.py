"""The bitcast kernel: the same bits read as another dtype.

>>> out = np.empty(2, np.int32)
>>> bitcast(np.array([1.0, -2.0], np.float32), out=out, dtype="int32"); out
array([ 1065353216, -1073741824], dtype=int32)
"""

from __future__ import annotations

import numpy as np

from ._registry import register_kernel


@register_kernel("bitcast")
def bitcast(x, *, out, dtype):
    """``out = x`` reinterpreted as ``out``'s dtype (``dtype`` names it), in
    little-endian byte order. A byte read as a bool is True when it is nonzero
    (numpy would keep a bool whose byte is 2, which compares unequal to True)."""
    x = np.asarray(x)
    if x.dtype.byteorder == ">":
        x = x.astype(x.dtype.newbyteorder("<"))
    if out.dtype == np.bool_:
        np.not_equal(x.view(np.uint8), 0, out=out)
    else:
        np.copyto(out, x.view(out.dtype))

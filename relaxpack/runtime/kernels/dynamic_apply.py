"""``dyn.apply``: a destination-passing kernel whose output is allocated at run time.

An elementwise op (or softmax, cumsum, astype: an op whose output has its
operands' broadcast shape) on a value of unknown rank -- an If whose
branches give different ranks, an input typed without a shape as spox
writes them -- has no shape the build can allocate. The kernels themselves
do not care about rank, so Legalize calls this packed kernel instead: it
broadcasts the operands' shapes, allocates the output (outside the arena,
like every packed result) and calls the op's own kernel into it.

>>> apply(np.ones((2, 1)), np.arange(3.0), kernel="add", dtype="float64")
array([[1., 2., 3.],
       [1., 2., 3.]])
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..dtypes import numpy_dtype
from ._registry import get_kernel, register_packed


@register_packed("dyn.apply")
def apply(*args, kernel: str, dtype: str, attrs=()):
    """``kernel(*args, out=new, **attrs)`` with ``new`` of the operands'
    broadcast shape and ``dtype``; a ShapeError naming the shapes when they
    do not broadcast."""
    shapes = [np.shape(a) for a in args]
    try:
        shape = np.broadcast_shapes(*shapes)
    except ValueError:
        shown = " and ".join(str(tuple(s)) for s in shapes)
        raise ShapeError(f"{kernel}: operands of shapes {shown} do not broadcast") from None
    out = np.empty(shape, numpy_dtype(dtype))
    get_kernel(kernel).fn(*args, out=out, **dict(attrs))
    return out

"""``dyn.apply``: a destination-passing kernel whose output is allocated at run time.

An op on a value of unknown rank -- an If whose branches give different
ranks, an input typed without a shape as spox writes them -- has no shape
the build can allocate. The kernels themselves take any rank, so Legalize
calls this packed kernel instead: it works out the output's shape from the
operands it meets (their broadcast shape, or the op's rule in
output_shapes.py: a concat, a reduction, a matmul, ...), allocates the
output (outside the arena, like every packed result) and calls the op's own
kernel into it. A tuple output (split) is a tuple of arrays, ``dtype`` one
dtype per field.

>>> apply(np.ones((2, 1)), np.arange(3.0), kernel="add", dtype="float64")
array([[1., 2., 3.],
       [1., 2., 3.]])
"""

from __future__ import annotations

import numpy as np

from ..dtypes import numpy_dtype
from ..kept import keep
from ._registry import get_kernel, register_packed
from .output_shapes import OUTPUT_SHAPES, broadcast


@register_packed("dyn.apply")
def apply(*args, kernel: str, dtype, attrs):
    """``kernel(*args, out=new, **attrs)`` with ``new`` of the shape the
    kernel's rule gives (the operands' broadcast shape for ops without one)
    and ``dtype``; a ShapeError naming the op when the operands do not fit."""
    attrs = dict(attrs)
    rule = OUTPUT_SHAPES.get(kernel)
    shape = rule(list(args), attrs) if rule is not None else broadcast(kernel, [np.shape(a) for a in args])
    if isinstance(dtype, tuple):
        out = tuple(np.empty(s, numpy_dtype(d)) for s, d in zip(shape, dtype))
    else:
        out = np.empty(shape, numpy_dtype(dtype))
    get_kernel(kernel).fn(*args, out=out, **attrs)
    return out


def _specialize_apply(attrs: dict, constant: tuple):
    """Per instruction: the op's kernel, its attributes, shape rule and output dtype looked up
    once (a lookup through the lazy kernel table, ``dict(attrs)`` and the dtype cost ~2 us a
    call on silero's relu and concat of 16 values), and the output shape kept per operand
    shapes (:func:`shapes_key`): a rule reads only its operands' shapes, so the same shapes give
    the same shape (concat's rule and broadcast cost ~1.5 us; silero's concat 3.5 -> 1.8 us). A
    tuple output or a kernel this runtime cannot find keeps the general path, which raises where
    it did."""
    kernel, dtype = attrs["kernel"], attrs["dtype"]
    try:
        fn = get_kernel(kernel).fn
    except Exception:  # noqa: BLE001 - the general path raises it, at run time as before
        fn = None
    if fn is None or isinstance(dtype, tuple):
        return lambda *args, out=None, workspace=None: apply(*args, **attrs)
    kattrs, rule, np_dtype = dict(attrs["attrs"]), OUTPUT_SHAPES.get(kernel), numpy_dtype(dtype)
    shape_of: dict = {}
    empty = np.empty

    def call(*args, workspace=None):
        key = shapes_key(args)
        shape = shape_of.get(key)
        if shape is None:
            shape = rule(list(args), kattrs) if rule is not None else broadcast(kernel, [np.shape(a) for a in args])
            if key is not None:
                keep(shape_of, key, shape, _SHAPES_KEPT)
        out = empty(shape, np_dtype)
        fn(*args, out=out, **kattrs)
        return out
    return call


#: output shapes an instruction keeps (a loop whose operands grow every step would grow it forever)
_SHAPES_KEPT = 64


def shapes_key(args) -> tuple | None:
    """The shapes of ``args``, each an array or a tuple of arrays (a concat's, marked by a leading
    None, which no shape holds), or None for anything else (a scalar, a list, an array subclass:
    its shape is worked out each call)."""
    key = []
    for a in args:
        if type(a) is np.ndarray:
            key.append(a.shape)
        elif type(a) is tuple and all(type(x) is np.ndarray for x in a):
            key.append((None, *[x.shape for x in a]))
        else:
            return None
    return tuple(key)


apply.specialize_attrs = _specialize_apply

"""The numpy kernel library: one kernel per IR op, under the op's name.

A plain table, :data:`KERNELS`, maps a kernel name to a :class:`Kernel`;
:func:`get_kernel` looks one up and raises
:class:`~relaxpack.errors.UnsupportedOpError` for an unknown name. Kernels
import numpy, the standard library and :mod:`relaxpack.errors` only.

Destination-passing kernels (``Kernel.dps``) are called as
``fn(*inputs, out=out, **attrs)`` and write into ``out``; inputs are never
written. A shape argument arrives as a tuple of ints, a tuple argument as a
tuple of arrays; every attribute of the op is passed, defaults filled in.

The modules that register kernels are imported on first use of one of
their kernels (:class:`._registry._KernelTable`, the owners listed in
:mod:`._index`), not with this package.

>>> import numpy as np
>>> out = np.empty(3, np.float32)
>>> get_kernel("add").fn(np.ones(3, np.float32), np.float32(2), out=out)
>>> out
array([3., 3., 3.], dtype=float32)
"""

from __future__ import annotations

from ._registry import KERNELS, Kernel, bare_ufunc, get_kernel, load_all, register_kernel, register_packed

__all__ = ["KERNELS", "Kernel", "bare_ufunc", "get_kernel", "load_all", "register_kernel", "register_packed"]

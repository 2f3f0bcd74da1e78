"""The numpy kernel library: one kernel per IR op, under the op's name.

A plain table, :data:`KERNELS`, maps a kernel name to a :class:`Kernel`;
:func:`get_kernel` looks one up and raises
:class:`~relaxpack.errors.UnsupportedOpError` for an unknown name. Kernels
import numpy, the standard library and :mod:`relaxpack.errors` only.

Destination-passing kernels (``Kernel.dps``) are called as
``fn(*inputs, out=out, **attrs)`` and write into ``out``; inputs are never
written. A shape argument arrives as a tuple of ints, a tuple argument as a
tuple of arrays; every attribute of the op is passed, defaults filled in.

>>> import numpy as np
>>> out = np.empty(3, np.float32)
>>> get_kernel("add").fn(np.ones(3, np.float32), np.float32(2), out=out)
>>> out
array([3., 3., 3.], dtype=float32)
"""

from __future__ import annotations

from . import (  # noqa: F401  (imported for their registrations)
    activation, elementwise, index, linalg, manipulate, nn, normalization, reduce, shape,
)
from . import image, scatter  # noqa: F401
from . import algorithm  # noqa: F401
from . import fused  # noqa: F401
from . import fused_elementwise  # noqa: F401
from . import recurrent  # noqa: F401
from . import dynamic_reduce, dynamic_resize  # noqa: F401
from . import sampling  # noqa: F401
from . import signal  # noqa: F401
from . import fold  # noqa: F401
from . import strings, tokenizer  # noqa: F401
from . import ml, tree_ensemble  # noqa: F401
from . import sequence  # noqa: F401  (sequences and optionals)
from . import detection  # noqa: F401
from . import bitcast  # noqa: F401
from . import cumulative  # noqa: F401
from . import selection  # noqa: F401
from . import random  # noqa: F401
from . import training  # noqa: F401
from . import dynamic_apply, dynamic_shape  # noqa: F401
from . import svm  # noqa: F401
from . import ml_maps  # noqa: F401  (ZipMap, CastMap, DictVectorizer: dicts)
from . import quantize  # noqa: F401  (dynamic_quantize_params)
from . import image_decode  # noqa: F401  (ImageDecoder: dyn.image_decoder)
from ._registry import KERNELS, Kernel, get_kernel, register_kernel, register_packed

__all__ = ["KERNELS", "Kernel", "get_kernel", "register_kernel", "register_packed"]

"""The kernel table and the decorator that fills it.

A kernel is a plain numpy function registered under the name of the IR op it
implements. Destination-passing kernels (``dps=True``) write into ``out``, a
preallocated array (or a tuple of arrays) of the inferred shape and dtype,
and return ``None``; packed kernels (``dps=False``) return new arrays, for
ops whose output shape depends on the data.

A kernel that takes a keyword ``workspace`` may be handed its scratch
memory by the VM: a flat uint8 view into the memory plan's arena, sized by
the op's ``workspace`` hook at build time (``register_op(..., workspace=)``).

Two optional attributes of a kernel function let callers skip work:

- ``fn.specialize_attrs(attrs, constant) -> callable(*inputs, out, workspace=None)``:
  the VM calls it once per instruction whose attributes are all bound
  values (``attrs``, a dict) and calls what it returns instead of ``fn`` (a
  kernel that plans per call keeps the plan there, see ``fused_specialized.py``).
  ``constant[i]`` says whether positional operand ``i`` is a bound value (a
  constant: the same array, with the same values, on every call); only such
  operands may have values derived from them kept across calls (a converted
  weight): a register may hold the same array object with new values;
- ``fn.ufunc`` (:func:`as_ufunc`): ``fn(*inputs, out=out)`` is exactly that
  ufunc's call, so a generated chain may call the ufunc itself.

>>> @register_kernel("negative")                       # doctest: +SKIP
... def negative(x, *, out):
...     np.negative(x, out=out)
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

from ...errors import UnsupportedOpError


@dataclass(frozen=True)
class Kernel:
    """A registered kernel: ``fn(*inputs, out, **attrs)`` when ``dps``, else
    ``fn(*inputs, **attrs) -> array | tuple[array, ...]``."""

    name: str
    fn: Callable
    dps: bool
    #: the function takes ``workspace=`` (planned scratch memory)
    takes_workspace: bool = False


#: kernel name (the IR op's name) -> kernel
KERNELS: dict[str, Kernel] = {}


def register_kernel(*names: str, dps: bool = True) -> Callable[[Callable], Callable]:
    """Register the decorated function as the kernel of each op in ``names``.

    The function is returned unchanged, so one function may serve several
    names when it takes the op name as a bound argument elsewhere.
    """
    if not names:
        raise TypeError("register_kernel needs at least one kernel name")

    def wrap(fn: Callable) -> Callable:
        for name in names:
            if name in KERNELS:
                raise ValueError(f"kernel {name!r} is registered twice")
            KERNELS[name] = Kernel(name, fn, dps, _takes_workspace(fn))
        return fn
    return wrap


def _takes_workspace(fn: Callable) -> bool:
    try:
        return "workspace" in inspect.signature(fn).parameters
    except (TypeError, ValueError):     # a builtin without a signature
        return False


def register_packed(*names: str) -> Callable[[Callable], Callable]:
    """Register a kernel that returns new arrays (data-dependent output shapes)."""
    return register_kernel(*names, dps=False)


def as_ufunc(fn: Callable, ufunc, *, quiet: bool = False, low_float: bool = True) -> Callable:
    """Mark ``fn`` as ``ufunc(*inputs, out=out)``: under :func:`~relaxpack.runtime.fpstate.quiet`
    when ``quiet``, and for the small floats and bfloat16 only when ``low_float`` (else ``fn``
    computes those in float32)."""
    fn.ufunc, fn.ufunc_quiet, fn.ufunc_low_float = ufunc, quiet, low_float
    return fn


def get_kernel(name: str) -> Kernel:
    """The kernel registered as ``name``; an :class:`UnsupportedOpError` if none is."""
    kernel = KERNELS.get(name)
    if kernel is None:
        raise UnsupportedOpError(f"no runtime kernel for op {name!r} "
                                 f"({len(KERNELS)} kernels are registered)")
    return kernel

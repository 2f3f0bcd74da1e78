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
  weight): a register may hold the same array object with new values. The VM
  passes a :class:`BoundFlags`, whose ``values`` are those operands (None for
  a register), for a kernel that decides by their shapes;
- ``fn.ufunc`` (:func:`as_ufunc`): ``fn(*inputs, out=out)`` is exactly that
  ufunc's call, so a generated chain may call the ufunc itself.

>>> @register_kernel("negative")                       # doctest: +SKIP
... def negative(x, *, out):
...     np.negative(x, out=out)
"""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ...errors import UnsupportedOpError
from ._index import KERNEL_MODULES, OWNER


class BoundFlags(tuple):
    """``constant`` of ``specialize_attrs``: per positional operand whether it is a bound value,
    with ``values``, the bound operands themselves (None for a register)."""

    def __new__(cls, values: tuple, bound: tuple):
        flags = super().__new__(cls, bound)
        flags.values = tuple(v if b else None for v, b in zip(values, bound))
        return flags


def bound_value(constant: tuple, i: int):
    """Operand ``i``'s bound value when ``constant`` carries it (:class:`BoundFlags`), else None."""
    values = getattr(constant, "values", None)
    return values[i] if values is not None and i < len(values) else None


@dataclass(frozen=True)
class Kernel:
    """A registered kernel: ``fn(*inputs, out, **attrs)`` when ``dps``, else
    ``fn(*inputs, **attrs) -> array | tuple[array, ...]``."""

    name: str
    fn: Callable
    dps: bool
    #: the function takes ``workspace=`` (planned scratch memory)
    takes_workspace: bool = False


class _KernelTable(dict):
    """kernel name -> :class:`Kernel`, filled as the modules that register kernels are imported:
    a lookup of a name imports its module (:data:`._index.OWNER`) first, iterating imports them
    all. ``import relaxpack.runtime`` then imports no kernel module; an archive's load imports
    those of the kernels it calls (a cold start pays for what the model uses)."""

    def _owner(self, name) -> None:
        module = OWNER.get(name) if isinstance(name, str) else None
        if module is not None and not dict.__contains__(self, name):
            importlib.import_module(f"{__package__}.{module}")

    def __getitem__(self, name):
        self._owner(name)
        return dict.__getitem__(self, name)

    def get(self, name, default=None):
        self._owner(name)
        return dict.get(self, name, default)

    def __contains__(self, name) -> bool:
        self._owner(name)
        return dict.__contains__(self, name)

    def __iter__(self):
        load_all()
        return dict.__iter__(self)

    def __len__(self) -> int:
        load_all()
        return dict.__len__(self)

    def keys(self):
        load_all()
        return dict.keys(self)

    def values(self):
        load_all()
        return dict.values(self)

    def items(self):
        load_all()
        return dict.items(self)


def load_all() -> None:
    """Import every kernel module (a table of every kernel, e.g. to list them)."""
    for module in KERNEL_MODULES:
        importlib.import_module(f"{__package__}.{module}")


#: kernel name (the IR op's name) -> kernel
KERNELS: dict[str, Kernel] = _KernelTable()
#: kernel name -> the module that registered it (what :data:`._index.OWNER` must say)
ORIGIN: dict[str, str] = {}


def register_kernel(*names: str, dps: bool = True) -> Callable[[Callable], Callable]:
    """Register the decorated function as the kernel of each op in ``names``.

    The function is returned unchanged, so one function may serve several
    names when it takes the op name as a bound argument elsewhere.
    """
    if not names:
        raise TypeError("register_kernel needs at least one kernel name")

    def wrap(fn: Callable) -> Callable:
        module = sys._getframe(1).f_globals.get("__name__", "")
        for name in names:
            if dict.__contains__(KERNELS, name):
                raise ValueError(f"kernel {name!r} is registered twice")
            KERNELS[name] = Kernel(name, fn, dps, _takes_workspace(fn))
            ORIGIN[name] = module
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


def as_float_ufunc(fn: Callable, ufunc, *, quiet: bool = False) -> Callable:
    """Mark ``fn`` as ``ufunc(*inputs, out=out)`` (under :func:`~relaxpack.runtime.fpstate.quiet`
    when ``quiet``) where ``out`` is float16, float32 or float64 only: ``fn`` has integer semantics
    of its own (ONNX Div truncates), so it is no :func:`as_ufunc`, but a fused chain's float step
    may call the ufunc itself (``fused_specialized``)."""
    fn.float_ufunc, fn.float_ufunc_quiet = ufunc, quiet
    return fn


#: ufuncs whose ``out`` numpy 2 no longer takes positionally (it warns, which costs microseconds)
KEYWORD_OUT = frozenset({np.maximum, np.minimum})


def positional_out(ufunc, n_inputs: int) -> bool:
    """Whether ``ufunc(*inputs, out=out)`` may be called ``ufunc(*inputs, out)``: on a small
    array the keyword's parsing is half of the call."""
    return ufunc.nin == n_inputs and ufunc.nout == 1 and ufunc not in KEYWORD_OUT


def bare_ufunc(fn: Callable, n_inputs: int):
    """The ufunc that may stand in for kernel ``fn`` called on ``n_inputs`` operands with ``out``
    only, out positional, for every dtype (:func:`as_ufunc` with ``low_float``; floating-point
    warnings are off for a whole VM run); None if there is none."""
    ufunc = getattr(fn, "ufunc", None)
    if ufunc is None or getattr(fn, "ufunc_low_float", True) is False or not positional_out(ufunc, n_inputs):
        return None
    return ufunc


def get_kernel(name: str) -> Kernel:
    """The kernel registered as ``name``; an :class:`UnsupportedOpError` if none is."""
    kernel = KERNELS.get(name)
    if kernel is None:
        raise UnsupportedOpError(f"no runtime kernel for op {name!r} "
                                 f"({len(KERNELS)} kernels are registered)")
    return kernel

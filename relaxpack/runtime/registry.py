"""Functions registered by name: the runtime side of custom ops.

The IR calls a registered function by name with ``call_packed`` (it returns
new arrays; impure, so passes never drop, merge or move it) or
``call_dps_packed`` (it writes into ``out``, preallocated by the memory
planner; pure). An archive stores only the name (function-table kind
``"func"``), never code, so every process that loads the archive registers
the function first::

    from relaxpack.runtime import register_func

    @register_func("acme.scale", dps=True)
    def scale(x, *, factor, out):
        np.multiply(x, factor, out=out)

    @register_func("acme.log")                   # call_packed: returns its value
    def log_rows(x):
        print(x.shape)
        return x

Loading an archive (or making a VM for an executable) that calls a name no
one registered fails once, listing every missing name and how to register it.
Registered functions live beside the kernel library (:data:`KERNELS`), not
in it: a name that is a built-in kernel is refused unless ``override=True``,
which then replaces that kernel in this process.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Iterable

from ..errors import MissingFunctionError, RelaxpackError
from .bytecode import Call
from .kernels import KERNELS

#: the function-table kind of a call to a registered function
FUNC_KIND = "func"


@dataclass(frozen=True)
class RegisteredFunc:
    """A registered function: ``fn(*inputs, out, **attrs)`` when ``dps``, else
    ``fn(*inputs, **attrs) -> array | tuple[array, ...]``."""

    name: str
    fn: Callable
    dps: bool


#: name -> registered function (the users'; the library's kernels are in KERNELS)
FUNCTIONS: dict[str, RegisteredFunc] = {}
_LOCK = threading.Lock()


def register_func(name: str, fn: Callable | None = None, *, dps: bool = False, override: bool = False):
    """Register ``fn`` under ``name`` for ``call_packed`` (``dps=False``: it
    returns its outputs) or ``call_dps_packed`` (``dps=True``: it writes into
    the keyword argument ``out`` and returns None). Usable as a decorator;
    returns ``fn`` unchanged.

    A name already registered, or the name of a built-in kernel, is refused
    unless ``override=True``. Prefer a dotted name of your own (``acme.op``).

    >>> @register_func("acme.double", dps=True)          # doctest: +SKIP
    ... def double(x, *, out):
    ...     np.multiply(x, 2, out=out)
    """
    def register(fn: Callable) -> Callable:
        _check_name(name)
        if not callable(fn):
            raise RelaxpackError(f"register_func({name!r}): {fn!r} is not callable")
        with _LOCK:
            _check_free(name, dps, override)
            FUNCTIONS[name] = RegisteredFunc(name, fn, bool(dps))
        return fn
    return register(fn) if fn is not None else register


def unregister_func(name: str) -> None:
    """Remove ``name`` from the registry (a built-in kernel it overrode comes back)."""
    with _LOCK:
        if FUNCTIONS.pop(name, None) is None:
            raise RelaxpackError(f"no function {name!r} is registered")


def registered_funcs() -> list[str]:
    """The names registered with :func:`register_func`, sorted."""
    return sorted(FUNCTIONS)


def _check_name(name) -> None:
    if not isinstance(name, str) or not name or len(name) > 256 or not name.isprintable() or name != name.strip():
        raise RelaxpackError(f"register_func: the name must be a non-empty printable string without "
                             f"surrounding spaces, got {name!r}")


def _check_free(name: str, dps: bool, override: bool) -> None:
    kernel = KERNELS.get(name)
    if kernel is not None:
        if not override:
            raise RelaxpackError(f"register_func: {name!r} is a built-in kernel; pass override=True to replace "
                                 f"it in this process, or choose another name (e.g. 'mylib.{name}')")
        if kernel.dps != bool(dps):
            raise RelaxpackError(f"register_func: the built-in kernel {name!r} has dps={kernel.dps}; "
                                 f"an override must use the same calling convention")
    if name in FUNCTIONS and not override:
        raise RelaxpackError(f"register_func: {name!r} is already registered; pass override=True to replace it")


# ---------------------------------------------------------------- lookup (the VM's side)
def resolve(kind: str, name: str) -> Callable | None:
    """The callable for a ``kernel``/``packed``/``func`` function-table entry:
    a registered function first (an override or a user's function), then a
    built-in kernel; None if neither exists."""
    registered = FUNCTIONS.get(name)
    if registered is not None:
        return registered.fn
    if kind == FUNC_KIND:
        return None
    kernel = KERNELS.get(name)
    return kernel.fn if kernel is not None else None


def check_registered(exe) -> None:
    """Every registered function ``exe`` calls exists, with the calling
    convention the bytecode uses; one :class:`MissingFunctionError` lists all
    that do not."""
    styles = _call_styles(exe)
    missing, mismatched = [], []
    for name, dps in sorted(styles.items()):
        found = FUNCTIONS.get(name)
        if found is None:
            missing.append((name, dps))
        elif dps is not None and found.dps != dps:
            mismatched.append((name, dps))
    if missing:
        how = "; ".join(f"register_func({n!r}, fn{', dps=True' if d else ''})" for n, d in missing)
        raise MissingFunctionError(
            f"the archive calls functions that are not registered in this process: "
            f"{[n for n, _ in missing]}; register them before loading, with "
            f"relaxpack.runtime.register_func: {how} (on the command line: --plugin FILE.py "
            f"that registers them)")
    if mismatched:
        raise MissingFunctionError("; ".join(
            f"function {n!r} is called {'in destination-passing style (call_dps_packed)' if d else 'with call_packed'}"
            f" but registered with dps={not d}" for n, d in mismatched))


def _call_styles(exe) -> dict[str, bool | None]:
    """Registered-function name -> whether its calls pass ``out`` (None if never called)."""
    index = {i: e.name for i, e in enumerate(exe.func_table) if e.kind == FUNC_KIND}
    styles: dict[str, bool | None] = {name: None for name in index.values()}
    for fn in exe.functions.values():
        for ins in _calls(fn.instructions):
            name = index.get(ins.func)
            if name is not None:
                styles[name] = any(k == "out" for k, _ in ins.kwargs)
    return styles


def _calls(instructions: Iterable) -> Iterable[Call]:
    return (ins for ins in instructions if isinstance(ins, Call))


__all__ = ["FUNCTIONS", "FUNC_KIND", "RegisteredFunc", "check_registered", "register_func", "registered_funcs",
           "resolve", "unregister_func"]

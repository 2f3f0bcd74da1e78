"""Budgets for untrusted work: how many instructions, seconds and bytes one call may take.

A :class:`~relaxpack.runtime.VirtualMachine` made with ``max_steps``,
``timeout`` or ``max_memory`` keeps one :class:`Budget`; every top-level
call starts it afresh and a call that goes past it stops with a
:class:`~relaxpack.errors.BudgetError` (an ``ExecutionError``).

- **Steps** are bytecode instructions, counted across nested function calls
  and every iteration of a loop (each iteration runs the body's
  instructions), so ``vm.builtin.loop`` with a trip count of ``2**62`` stops:
  a call that runs instruction ``max_steps + 1`` stops there.
- **Time** is wall-clock seconds from the start of the call, checked between
  instructions (every :data:`CHECK_PERIOD` of them); a single kernel call is
  never interrupted.
- **Memory** is the bytes of the arrays the VM allocates: its arenas (kept
  between calls), tensors made by ``vm.builtin.alloc_tensor`` and the arrays
  that data-dependent (packed) kernels and loops return, while they are alive.
  Sizes known before an allocation (arenas, tensors of static shape) are
  refused before it happens; a packed kernel's result is counted when it
  returns. Temporaries inside a kernel are not counted.

The dispatch loop pays nothing for budgets it does not have: a VM without
one runs the plain loop (see ``VirtualMachine._invoke``).
"""

from __future__ import annotations

import itertools
import time
import weakref
from numbers import Integral, Real

import numpy as np

from ..errors import BudgetError, InputError

#: instructions between two looks at the clock when a timeout is set
CHECK_PERIOD = 32
_FOREVER = 1 << 62


class Budget:
    """The limits of one VM and what the running call has used of them.

    >>> budget = Budget(max_steps=1000, timeout=2.0, max_memory=1 << 30)
    """

    __slots__ = ("max_steps", "timeout", "max_memory", "counter", "limit", "_deadline", "_live", "_arena",
                 "_call", "__weakref__")

    def __init__(self, max_steps: int | None = None, timeout: float | None = None,
                 max_memory: int | None = None):
        self.max_steps = _positive_int(max_steps, "max_steps")
        self.timeout = _positive_seconds(timeout)
        self.max_memory = _positive_int(max_memory, "max_memory")
        self._arena = 0      # bytes of the VM's arenas (they outlive calls)
        self._live = 0       # bytes of live arrays allocated by the running call
        self._call = 0       # which call is running (releases from earlier calls are ignored)
        self._deadline = float("inf")
        #: instructions run by the call so far: ``next(counter)`` counts one
        self.counter = itertools.count(1)
        self.limit = _FOREVER

    @property
    def counts_steps(self) -> bool:
        """Whether the dispatch loop must count instructions (a step or time limit is set)."""
        return self.max_steps is not None or self.timeout is not None

    # ------------------------------------------------------------ steps and time
    def start(self) -> None:
        """A new top-level call: nothing used yet, the clock starts now."""
        self._call += 1
        self._live = 0
        self.counter = itertools.count(1)
        self._deadline = time.monotonic() + self.timeout if self.timeout is not None else float("inf")
        self.limit = self._next_limit(0)

    def _next_limit(self, used: int) -> int:
        period = CHECK_PERIOD if self.timeout is not None else _FOREVER
        if self.max_steps is not None:
            period = min(period, self.max_steps + 1 - used)
        return used + period

    def checkpoint(self, used: int, function: str) -> int:
        """Called by the dispatch loop when ``used`` instructions have run and
        that reached its ``limit``: checks both budgets, returns the next limit.

        (Each nested call's loop keeps its own copy of the limit; a stale, lower
        one only makes that loop look at the clock sooner.)"""
        if self.max_steps is not None and used > self.max_steps:
            raise BudgetError(f"stopped in {function} after {used} instructions, over the step budget "
                              f"(max_steps={self.max_steps}; a loop that does not end?)")
        if self.timeout is not None and time.monotonic() > self._deadline:
            raise BudgetError(f"stopped in {function} after {self.timeout:g} s, the time budget "
                              f"(timeout={self.timeout:g}; {used} instructions run)")
        self.limit = self._next_limit(used)
        return self.limit

    # ------------------------------------------------------------ memory
    def reserve_arena(self, extra: int) -> None:
        """The VM's arenas are about to grow by ``extra`` bytes."""
        self._check(self._arena + extra + self._live, f"its memory plan needs {extra} more arena bytes")
        self._arena += extra

    def reserve(self, nbytes: int, what: str) -> None:
        """Refuse an allocation of ``nbytes`` known before it is made."""
        self._check(self._arena + self._live + nbytes, f"{what} needs {nbytes} bytes")

    def charge(self, value, what: str):
        """Count the arrays in ``value`` (an array, or tuples of them) that own
        their memory, for as long as they live; returns ``value``."""
        for array in _owning_arrays(value):
            nbytes = array.nbytes
            self._live += nbytes
            weakref.finalize(array, _release, weakref.ref(self), self._call, nbytes)
            self._check(self._arena + self._live, f"{what} returned {nbytes} bytes")
        return value

    def _check(self, total: int, what: str) -> None:
        if self.max_memory is not None and total > self.max_memory:
            raise BudgetError(f"{what}, which would bring this VM to {total} bytes, over its memory budget "
                              f"(max_memory={self.max_memory})")

    def _release(self, call: int, nbytes: int) -> None:
        if call == self._call:
            self._live -= nbytes


def metered(entry, fn, static: tuple, operands: list, budget: Budget, label: str):
    """The prepared callee ``fn`` of function-table ``entry``, made to count what it
    allocates against ``budget``; ``static`` are the immediates it was specialized
    on, ``operands`` its remaining ``(is_register, value)`` operands. A tensor of
    static shape over the budget is refused here, when the VM is made."""
    kind, name = entry.kind, entry.name
    if kind == "builtin" and name == "vm.builtin.plan_arena":
        state = getattr(fn, "state", None)
        if state is not None:
            state.reserve = budget.reserve_arena
        return fn
    if kind == "builtin" and name == "vm.builtin.alloc_tensor":
        itemsize = _itemsize(static[0]) if static else None
        if itemsize is not None and operands and not operands[-1][0]:
            budget.reserve(_nbytes(operands[-1][1], itemsize) or 0, f"{label} of shape {operands[-1][1]!r}")

        def alloc(*args):
            nbytes = _nbytes(args[-1], itemsize) if itemsize is not None else None
            if nbytes is not None:
                budget.reserve(nbytes, f"{label} of shape {tuple(args[-1])}")
            return budget.charge(fn(*args), label)
        return alloc
    if kind in ("packed", "func") or (kind == "builtin" and name == "vm.builtin.loop"):
        def call(*args, **kwargs):
            return budget.charge(fn(*args, **kwargs), label)
        return call
    return fn


def _itemsize(dtype) -> int | None:
    from .dtypes import numpy_dtype
    try:
        return numpy_dtype(dtype).itemsize
    except Exception:   # noqa: BLE001 - the allocation itself will say what is wrong
        return None


def _nbytes(shape, itemsize: int) -> int | None:
    if not isinstance(shape, (tuple, list)) or not all(isinstance(d, Integral) and d >= 0 for d in shape):
        return None
    n = itemsize
    for d in shape:
        n *= int(d)
    return n


def _release(ref, call: int, nbytes: int) -> None:
    budget = ref()
    if budget is not None:
        budget._release(call, nbytes)


def _owning_arrays(value):
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, np.ndarray):
            if v.base is None and v.nbytes:
                yield v
        elif isinstance(v, (tuple, list)):
            stack.extend(v)


def _positive_int(value, name: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral) or value <= 0:
        raise InputError(f"{name} must be a positive int (or None for no limit), got {value!r}")
    return int(value)


def _positive_seconds(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, Real) or not 0 < value < float("inf"):
        raise InputError(f"timeout must be a positive number of seconds (or None for no limit), got {value!r}")
    return float(value)


__all__ = ["Budget", "CHECK_PERIOD", "metered"]

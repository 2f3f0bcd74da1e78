"""A bytecode function passed as an operand (a loop's body), as the VM hands it to a builtin.

Calling it runs the function as any call does (``VirtualMachine._invoke``:
argument count, compiled code or the interpreter, errors named by
instruction). A builtin that calls it many times (``vm.builtin.loop``) asks
:meth:`FunctionRef.direct` once for the compiled code itself and the VM's
error naming, and skips the two Python calls in between on every iteration.
"""

from __future__ import annotations

from typing import Callable


class FunctionRef:
    """``ref(*args)`` runs the function; ``ref.direct(n)`` is ``(compiled, name_error)`` for calls of
    ``n`` arguments, or None where calls must go through ``ref`` (the interpreter runs the
    function, or ``n`` is not its parameter count: ``ref`` raises the VM's error)."""

    __slots__ = ("_call", "_vm", "_index")

    def __init__(self, call: Callable, vm, index: int):
        self._call, self._vm, self._index = call, vm, index     # the VM's _direct(index, n) answers

    def __call__(self, *args):
        return self._call(*args)

    def direct(self, num_args: int):
        """``(compiled, name_error)``: the function as compiled (runtime/compiled.py: ``run(*args)``,
        its warm variant); ``name_error(err)`` raises what the VM raises for ``err`` escaping
        either (named by instruction). Or None."""
        return self._vm._direct(self._index, num_args)

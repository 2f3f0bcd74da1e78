"""The loader's bounds on the work and memory an archive's program asks for.

:mod:`.archive_check` proves every operand in range; this module bounds what
the program *does* with them, before anything runs:

- **Calls** (:func:`check_calls`): functions call each other (``vm`` entries
  of the function table, and function operands such as a loop's body) in a
  graph without cycles, at most :data:`MAX_CALL_DEPTH` deep, and one call of
  any function runs at most :data:`MAX_CALL_COST` instructions counting each
  callee at every call site, a loop's body once (memoized over the graph:
  a binary call DAG 60 deep, 2**60 calls, is refused in microseconds). How
  many times a loop runs is data (ONNX's ``M`` may be 2**63 - 1 with a
  condition that stops it); that is the run-time step and time budgets' job.
- **Allocations from immediates** (:func:`check_allocations`): a shape heap
  is no larger than the dims the function's input checks store into it, and
  a tensor of static shape holds at most :data:`MAX_TENSOR_BYTES`, the
  compiler's own limit. Sizes that depend on inputs are bounded at run time
  by the planned sizes (arena views) and the VM's memory budget.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ..errors import ArchiveError
from .bytecode import FUNC, IMM, Call, VMFunction
from .dtypes import numpy_dtype

#: instructions one call may run, callees included (loop bodies counted once): 16x the
#: instructions an archive may hold, seconds of work, never hours
MAX_CALL_COST = 1 << 24
#: nested calls (each costs the Python stack a few frames)
MAX_CALL_DEPTH = 64
#: the largest tensor of static shape (the compiler refuses larger ones too)
MAX_TENSOR_BYTES = 1 << 35


def check_calls(functions: Mapping[str, VMFunction], table: Sequence) -> None:
    """Raise :class:`ArchiveError` on a call cycle, a call chain deeper than
    :data:`MAX_CALL_DEPTH` or a call that may run more than :data:`MAX_CALL_COST` instructions."""
    names = list(functions)
    index = {name: i for i, name in enumerate(names)}
    callees = [_callees(fn, table, index) for fn in functions.values()]
    cost: list[int | None] = [None] * len(names)
    depth = [0] * len(names)
    state = [0] * len(names)            # 0 new, 1 on the path, 2 done
    for root in range(len(names)):
        if state[root]:
            continue
        path = [(root, iter(callees[root]))]
        state[root] = 1
        while path:                     # depth first, without recursion
            node, pending = path[-1]
            child = next(pending, None)
            if child is not None:
                if state[child] == 1:
                    cycle = [names[n] for n, _ in path[[n for n, _ in path].index(child):]] + [names[child]]
                    raise ArchiveError(f"functions call each other in a cycle ({' -> '.join(cycle[:8])}"
                                       f"{' ...' if len(cycle) > 8 else ''}); calls must form a DAG")
                if state[child] == 0:
                    state[child] = 1
                    path.append((child, iter(callees[child])))
                continue
            path.pop()
            state[node] = 2
            fn = functions[names[node]]
            cost[node] = len(fn.instructions) + sum(cost[c] for c in callees[node])
            depth[node] = 1 + max((depth[c] for c in callees[node]), default=0)
            if depth[node] > MAX_CALL_DEPTH:
                raise ArchiveError(f"function {fn.name!r} nests calls {depth[node]} deep, more than "
                                   f"{MAX_CALL_DEPTH}")
            if cost[node] > MAX_CALL_COST:
                raise ArchiveError(f"one call of function {fn.name!r} may run {cost[node]} instructions through "
                                   f"the functions it calls, more than {MAX_CALL_COST}")


def _callees(fn: VMFunction, table: Sequence, index: Mapping[str, int]) -> list[int]:
    """The functions ``fn`` may call, once per call site (with repeats)."""
    out = []
    for ins in fn.instructions:
        if not isinstance(ins, Call):
            continue
        if table[ins.func].kind == "vm":
            out.append(index[table[ins.func].name])
        for kind, value in list(ins.args) + [op for _, op in ins.kwargs]:
            if kind == FUNC and table[value].kind == "vm":
                out.append(index[table[value].name])
    return out


def check_allocations(functions: Mapping[str, VMFunction], table: Sequence) -> None:
    """Raise :class:`ArchiveError` on a shape heap or a static tensor larger than the program can need."""
    for fn in functions.values():
        stores = sum(_stores(ins, table) for ins in fn.instructions)
        for pc, ins in enumerate(fn.instructions):
            if not isinstance(ins, Call) or table[ins.func].kind != "builtin":
                continue
            name = table[ins.func].name
            if name == "vm.builtin.alloc_shape_heap":
                _check_heap(fn, pc, ins, max(stores, 1))
            elif name == "vm.builtin.alloc_tensor":
                _check_static_tensor(fn, pc, ins)


def _stores(ins, table) -> int:
    """How many dims a ``match_shape`` stores into the heap."""
    if not isinstance(ins, Call) or table[ins.func].name != "vm.builtin.match_shape" or not ins.args \
            or ins.args[0][0] != IMM or not isinstance(ins.args[0][1], tuple):
        return 0
    return sum(1 for e in ins.args[0][1] if isinstance(e, tuple) and e[:1] == ("store",))


def _check_heap(fn: VMFunction, pc: int, ins: Call, most: int) -> None:
    size = ins.args[0][1] if len(ins.args) == 1 and ins.args[0][0] == IMM else None
    if isinstance(size, bool) or not isinstance(size, int) or not 0 <= size <= most:
        raise ArchiveError(f"function {fn.name!r}, instruction {pc}: a shape heap of {size!r} slots; its input "
                           f"checks store {most} dims")


def _check_static_tensor(fn: VMFunction, pc: int, ins: Call) -> None:
    if len(ins.args) != 2 or ins.args[0][0] != IMM or ins.args[1][0] != IMM:
        return                          # a shape from a register: bounded at run time
    dtype, shape = ins.args[0][1], ins.args[1][1]
    where = f"function {fn.name!r}, instruction {pc}"
    try:
        itemsize = numpy_dtype(dtype).itemsize
    except Exception:   # noqa: BLE001 - any malformed dtype immediate
        raise ArchiveError(f"{where}: alloc_tensor of unknown dtype {str(dtype)[:40]!r}") from None
    if not isinstance(shape, tuple) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                               for d in shape):
        raise ArchiveError(f"{where}: alloc_tensor's static shape {str(shape)[:80]} is not a list of dims")
    nbytes = itemsize
    for d in shape:
        nbytes *= d
    if nbytes > MAX_TENSOR_BYTES:
        raise ArchiveError(f"{where}: a static tensor of shape {str(shape)[:80]} {dtype} needs {nbytes} bytes, "
                           f"more than one tensor may take ({MAX_TENSOR_BYTES})")


__all__ = ["MAX_CALL_COST", "MAX_CALL_DEPTH", "MAX_TENSOR_BYTES", "check_allocations", "check_calls"]

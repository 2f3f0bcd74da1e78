"""The memory plan, serialized: PlanMemory's arena buffers as the bytecode's plan.

PlanMemory (passes/plan_memory.py) decides in the IR which tensors live
in which arena buffer (``R.memory.alloc_tensor(..., storage=i)``) and where
each dies (``R.memory.kill_tensor``); codegen translates each allocation
into a ``vm.builtin.arena_tensor`` view of buffer ``i`` and records, per
buffer, the instructions its lifetime spans. This module writes that down:
one ``vm.builtin.plan_arena`` call after the input checks carries, per
buffer, a size program over the shape heap, the lifetime ``[start, end]``
in pcs of the instructions without that call (the loader checks them
against the bytecode's own liveness, runtime/plan_check.py) and its pool;
the runtime plans each concrete shape (cached). The figures of the plan at
the bounds are PlanMemory's (the ``memory_plan`` function attr).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..runtime.bytecode import IMM, REG, Call, VMFunction
from ..runtime.dtypes import numpy_dtype

#: the register operand of arena views until the arena's register is known
ARENA = "__arena__"


@dataclass
class Storage:
    """One arena buffer as codegen met it: its first tensor's dtype and shape
    programs (its size), its pool and its lifetime in pcs."""

    dtype: str
    programs: tuple
    pool: str
    start: int
    end: int


def place_arena(func: VMFunction, storages: list[Storage], func_index, entry_pc: int, heap_reg: int,
                pools: dict | None) -> VMFunction:
    """``func`` with its plan_arena call at ``entry_pc`` (where the input checks end)
    and its arena views reading the arena's register; ``func_index(kind, name)``
    adds or finds a function-table entry."""
    spec = tuple((_bytes_program(s), s.start, s.end, s.pool) for s in storages)
    arena_reg = func.num_registers
    caps = tuple(sorted((name, cap) for name, cap in (pools or {}).items() if cap is not None))
    plan_call = Call(arena_reg, func_index("builtin", "vm.builtin.plan_arena"),
                     ((IMM, spec), (IMM, caps), (IMM, _heap_size(func)), (REG, heap_reg)))
    instrs = [_patch_arena(ins, arena_reg) for ins in func.instructions]
    instrs.insert(entry_pc, plan_call)
    spans = tuple((pc + (pc >= entry_pc), sources) for pc, sources in func.spans)   # plan_call moved them
    return dataclasses.replace(func, num_registers=func.num_registers + 1, instructions=tuple(instrs),
                               attrs=dict(func.attrs), spans=spans)


def _bytes_program(s: Storage):
    prog = numpy_dtype(s.dtype).itemsize
    for p in s.programs:
        prog = ["*", p, prog] if not (isinstance(p, int) and isinstance(prog, int)) else p * prog
    return prog


def _heap_size(func: VMFunction) -> int:
    first = func.instructions[0]
    return first.args[0][1] if isinstance(first, Call) and first.args and first.args[0][0] == IMM else 1


def _patch_arena(ins, arena_reg: int):
    if isinstance(ins, Call) and (REG, ARENA) in ins.args:
        return Call(ins.dst, ins.func, tuple((REG, arena_reg) if a == (REG, ARENA) else a for a in ins.args),
                    ins.kwargs)
    return ins


def plan_figures(attrs) -> dict:
    """The archive's ``memory_plan`` metadata from a function's PlanMemory attr."""
    figures = dict(attrs)
    if "pool_bytes" in figures:
        figures["pool_bytes"] = dict(figures["pool_bytes"])
    return figures

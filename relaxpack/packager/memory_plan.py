"""Memory planning on the bytecode: liveness, arenas, the plan at the bounds.

Every ``vm.builtin.alloc_tensor`` whose size is known once the inputs are
matched becomes a buffer of an arena: its lifetime runs from the allocation
to the last instruction that reads it or anything that may alias it (a
tuple holding it, its item taken from such a tuple, a value a function or
packed call may return), found in one linear pass that the archive loader
repeats to check the plan (``runtime/memory/liveness.py``). Bytecode jumps
only forward, so these intervals over instruction indices are sound across
``If`` branches; they are written in pcs of the bytecode before the
``plan_arena`` call is inserted (one less after it). Buffers that may
reach the function's result stay ordinary allocations: the arena is reused
by the next call. A ``vm.builtin.plan_arena`` after the input checks plans
the concrete shape (cached per shape); each planned allocation becomes a
``vm.builtin.arena_tensor`` view.

A kernel's ``workspace`` (scratch its op declares, ops/workspace.py) is a
buffer like any other whose lifetime is the one kernel call reading it
("lifted" allocations): it counts in the lower bound and the naive total,
and shares the arena with everything not live at that instruction.

At build time, when every dim has an upper bound, the same buffers are
planned at the bounds with every placement algorithm; the figures (arena,
lower bound, naive total, workspace) go into the executable's metadata.
"""

from __future__ import annotations

import dataclasses

from dataclasses import dataclass

from ..runtime.bytecode import IMM, NO_DST, REG, Call, VMFunction
from ..runtime.dtypes import numpy_dtype
from ..runtime.executable import FuncEntry
from ..runtime.memory import ALIGNMENT, Buffer, align_up, lower_bound, plan_memory
from ..runtime.memory.liveness import value_lifetimes
from ..runtime.shape_program import compile_program


@dataclass
class _Alloc:
    pc: int
    dst: int
    dtype: str
    shape: tuple          # the shape operand
    programs: tuple       # dims as shape programs (ints for static dims)


def plan_function(func: VMFunction, table: list[FuncEntry], func_index, entry_pc: int,
                  slot_names: dict[int, str], heap_reg: int, scopes: dict[int, str] | None = None,
                  pools: dict | None = None) -> tuple[VMFunction, dict]:
    """``func`` with its plannable allocations in an arena, and the plan's figures.

    ``entry_pc`` is where the input checks end (the plan goes there);
    ``slot_names`` the heap slots they fill and their dims' names;
    ``func_index(kind, name)`` adds or finds a function-table entry.
    ``scopes`` gives each allocation's memory scope (its tensor's vdevice);
    ``pools`` bounds pools in bytes: a tensor of scope "global" is first
    offered to the first bounded pool declared, and spills back to "global"
    when it does not fit (USMP's candidate pools).
    """
    entry_slots = set(slot_names)
    instrs = list(func.instructions)
    allocs = _plannable_allocs(instrs, table, entry_slots)
    if not allocs:
        return func, {}
    at = {a.pc for a in allocs}
    lifetimes = value_lifetimes(instrs, table, lambda pc, ins: pc in at)
    users = _workspace_users(instrs, table)
    intervals = {}
    for a in allocs:                    # a workspace lives at its kernel call alone
        start = lifetimes.first.get(a.pc, users[a.dst]) if a.dst in users else a.pc
        intervals[a.pc] = [start, max(start, lifetimes.last.get(a.pc, a.pc))]
    planned = [a for a in allocs if a.pc not in lifetimes.escaping]
    if not planned:
        return func, {}
    owner = _in_place(instrs, table, planned, intervals, lifetimes)   # alloc pc -> pc whose storage it reuses
    roots = [a for a in planned if owner[a.pc] == a.pc]
    for a in planned:                                              # a shared slot lives while any user does
        root = intervals[owner[a.pc]]
        root[1] = max(root[1], intervals[a.pc][1])
    slot = {a.pc: i for i, a in enumerate(roots)}
    index_of = {a.pc: slot[owner[a.pc]] for a in planned}
    pools = dict(pools or {})
    # lifetimes in pcs of the instructions without the plan_arena call inserted at entry_pc
    # (archives of every format say so); the loader checks them against the bytecode
    spec = tuple((_bytes_program(a), intervals[a.pc][0], intervals[a.pc][1], _pool(a, scopes, pools))
                 for a in roots)
    arena_reg = func.num_registers
    caps = tuple(sorted((name, cap) for name, cap in pools.items() if cap is not None))
    plan_call = Call(arena_reg, func_index("builtin", "vm.builtin.plan_arena"),
                     ((IMM, spec), (IMM, caps), (IMM, "__heap_size__"), (REG, heap_reg)))
    view = func_index("builtin", "vm.builtin.arena_tensor")
    for a in planned:
        instrs[a.pc] = Call(a.dst, view, ((IMM, index_of[a.pc]), (IMM, a.dtype), (REG, arena_reg), a.shape))
    instrs.insert(entry_pc, plan_call)
    heap_size = _heap_size(instrs, table)
    instrs = [_patch(i, heap_size) for i in instrs]
    spans = tuple((pc + (pc >= entry_pc), sources) for pc, sources in func.spans)   # plan_call moved them
    new = dataclasses.replace(func, num_registers=func.num_registers + 1, instructions=tuple(instrs),
                              attrs=dict(func.attrs), spans=spans)
    every = tuple(_bytes_program(a) for a in planned)   # each intermediate on its own: the naive total
    scratch = tuple(_bytes_program(a) for a in planned if a.dst in users)
    return new, _figures(spec, every, scratch, func.dim_ranges, slot_names, pools)


def _workspace_users(instrs, table) -> dict[int, int]:
    """Register passed as a kernel's ``workspace`` -> the pc of that call."""
    users = {}
    for pc, ins in enumerate(instrs):
        if isinstance(ins, Call) and table[ins.func].kind == "kernel":
            for key, (kind, value) in ins.kwargs:
                if key == "workspace" and kind == REG:
                    users[value] = pc
    return users


def _pool(a: _Alloc, scopes, pools: dict) -> str:
    scope = (scopes or {}).get(a.pc, "global")
    if scope == "global" and pools:
        return next(iter(pools))
    return scope


def _plannable_allocs(instrs, table, entry_slots) -> list[_Alloc]:
    defs = {ins.dst: ins for ins in instrs if isinstance(ins, Call) and ins.dst != NO_DST}
    out = []
    for pc, ins in enumerate(instrs):
        if not isinstance(ins, Call) or _name(table, ins) != "vm.builtin.alloc_tensor":
            continue
        (kind_d, dtype), shape = ins.args
        if dtype == "string":   # object arrays hold references, not bytes: they stay heap allocations
            continue
        programs = _shape_programs(shape, defs, table)
        if programs is None or not _reads_only(programs, entry_slots):
            continue
        out.append(_Alloc(pc, ins.dst, dtype, shape, programs))
    return out


def _shape_programs(shape, defs, table):
    kind, value = shape
    if kind == IMM:
        return tuple(value)
    src = defs.get(value)
    if src is None or _name(table, src) != "vm.builtin.make_shape":
        return None
    return tuple(src.args[0][1])


def _reads_only(programs, slots: set[int]) -> bool:
    def ok(p):
        if isinstance(p, int):
            return True
        if p[0] == "h":
            return p[1] in slots
        return all(ok(q) for q in p[1:])
    return all(ok(p) for p in programs)


def _bytes_program(a: _Alloc):
    prog = numpy_dtype(a.dtype).itemsize
    for p in a.programs:
        prog = ["*", p, prog] if not (isinstance(p, int) and isinstance(prog, int)) else p * prog
    return prog


def _in_place(instrs, table, planned, intervals, lifetimes) -> dict[int, int]:
    """Elementwise kernels write over an input that dies there when it has the
    output's shape and dtype and the output is untouched before: the output
    reuses that input's storage."""
    by_pc = {a.pc: a for a in planned}
    owner = {a.pc: a.pc for a in planned}
    taken: set[int] = set()   # storage already handed on: one reuse per dying input
    for pc, (args, out) in lifetimes.kernel_operands.items():
        o = by_pc.get(out)
        if o is None or lifetimes.first.get(o.pc) != pc or not _elementwise(table[instrs[pc].func].name):
            continue
        for held in args:
            a = by_pc.get(held)
            if a is None or a is o or a.pc in taken or intervals[a.pc][1] != pc:
                continue
            if a.dtype == o.dtype and a.programs == o.programs:
                owner[o.pc] = owner[a.pc]
                taken.add(a.pc)
                break
    return owner


def _elementwise(kernel: str) -> bool:
    from ..errors import RelaxpackError
    from ..ops.registry import get_op_def
    try:
        return get_op_def(kernel).elementwise
    except RelaxpackError:
        return False


def _name(table, ins) -> str:
    return table[ins.func].name if table[ins.func].kind == "builtin" else ""


def _heap_size(instrs, table) -> int:
    for ins in instrs:
        if isinstance(ins, Call) and _name(table, ins) == "vm.builtin.alloc_shape_heap":
            return ins.args[0][1]
    return 1


def _patch(ins, heap_size: int):
    if isinstance(ins, Call) and (IMM, "__heap_size__") in ins.args:
        args = tuple((IMM, heap_size) if a == (IMM, "__heap_size__") else a for a in ins.args)
        return Call(ins.dst, ins.func, args, ins.kwargs)
    return ins


def _figures(spec, every, scratch, dim_ranges, slot_names: dict[int, str], pools) -> dict:
    """The plan at the dims' upper bounds (all placement algorithms), if every dim has one.

    ``every`` holds the size programs of all planned intermediates, also those
    written in place over another: their sum is the naive total; ``scratch``
    those of the kernels' workspaces (among ``every``).
    """
    figures = {"buffers": len(spec), "intermediates": len(every), "planned_at": None, "arena_bytes": None,
               "lower_bound_bytes": None, "naive_bytes": None, "workspaces": len(scratch),
               "workspace_bytes": None, "largest_workspace_bytes": None}
    heap = _heap_at_bounds(spec, {name: hi for name, lo, hi in dim_ranges}, slot_names)
    if heap is None:
        return figures
    buffers = [Buffer(str(i), compile_program(prog, len(heap))(heap), start, end, pool)
               for i, (prog, start, end, pool) in enumerate(spec)]
    plan = plan_memory(buffers, ALIGNMENT, pools=pools)
    figures.update(planned_at="bounds", arena_bytes=plan.arena_bytes, pool_bytes=dict(plan.pool_sizes),
                   lower_bound_bytes=sum(lower_bound(buffers, ALIGNMENT).values()),
                   naive_bytes=_total(every, heap), workspace_bytes=_total(scratch, heap),
                   largest_workspace_bytes=max((_total((p,), heap) for p in scratch), default=0),
                   algorithm=plan.algorithm)
    return figures


def _total(programs, heap) -> int:
    return sum(align_up(compile_program(p, len(heap))(heap), ALIGNMENT) for p in programs)


def _heap_at_bounds(spec, bounds: dict, slot_names: dict[int, str]) -> list[int] | None:
    """The heap with every slot the sizes read at its dim's upper bound; None if one has none."""
    used: set[int] = set()

    def collect(p):
        if isinstance(p, (list, tuple)):
            if p and p[0] == "h":
                used.add(p[1])
            else:
                for q in p[1:]:
                    collect(q)
    for prog, *_ in spec:
        collect(prog)
    heap = [0] * (max(used, default=0) + 1)
    for slot in used:
        hi = bounds.get(slot_names.get(slot))
        if hi is None:
            return None
        heap[slot] = hi
    return heap

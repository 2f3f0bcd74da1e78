"""The loader's check of memory plans: no archive can make two live buffers overlap.

A function's ``vm.builtin.plan_arena`` call carries, for every buffer of its
arena, a size program and a lifetime ``[start, end]`` in instructions
(counted as if the plan_arena call were not there: one less than the pcs
after it, in every archive format); the
run-time planner (``runtime/arena.py``) only keeps buffers apart while their
declared lifetimes overlap. So the lifetimes must be true: :func:`check_plans`
computes from the bytecode itself where each view of a buffer
(``vm.builtin.arena_tensor``) is first and last used, through every alias
(``runtime/memory/liveness.py``, the analysis the compiler plans with), and
rejects an archive when

- a view is used outside its buffer's declared lifetime, or may be returned
  (the arena is reused by the next call);
- two views of one buffer are live at once, except where an elementwise-style
  kernel call reads one and writes the other as ``out`` (in-place reuse);
- the plan's register leaks anywhere but into ``arena_tensor`` (which would
  hand out views the analysis cannot see), a function has two plans, or a
  view names its buffer or dtype by anything but an immediate.

The views' sizes are checked when they are made (a view larger than its
buffer is refused, ``arena.py``). One pass over the bytecode per function.
"""

from __future__ import annotations

from typing import Mapping, Sequence

from ..errors import ArchiveError
from .bytecode import IMM, NO_DST, REG, Call, If, Ret, VMFunction
from .memory.liveness import value_lifetimes

PLAN = "vm.builtin.plan_arena"
VIEW = "vm.builtin.arena_tensor"


def check_plans(functions: Mapping[str, VMFunction], table: Sequence) -> None:
    """Raise :class:`ArchiveError` unless every function's memory plan agrees with its bytecode."""
    for fn in functions.values():
        plans = [pc for pc, ins in enumerate(fn.instructions) if _calls(ins, table, PLAN)]
        views = [pc for pc, ins in enumerate(fn.instructions) if _calls(ins, table, VIEW)]
        if plans or views:
            _check_function(fn, table, plans, views)


def _calls(ins, table, name: str) -> bool:
    return isinstance(ins, Call) and table[ins.func].kind == "builtin" and table[ins.func].name == name


def _fail(fn: VMFunction, message: str):
    raise ArchiveError(f"memory plan of function {fn.name!r}: {message}")


def _check_function(fn: VMFunction, table, plans: list[int], views: list[int]) -> None:
    instrs = fn.instructions
    if len(plans) != 1:
        _fail(fn, f"{len(plans)} plan_arena calls (instructions {plans[:5]}); a function has one plan "
                  f"before its views")
    at = plans[0]
    spec = _spec(fn, instrs[at], len(instrs), at)
    plan_reg = instrs[at].dst
    _check_plan_register(fn, table, at, plan_reg)
    index = {}
    for pc in views:
        args = instrs[pc].args
        if len(args) != 4 or args[0][0] != IMM or args[1][0] != IMM or args[2] != (REG, plan_reg):
            _fail(fn, f"instruction {pc}: arena_tensor takes an immediate buffer index and dtype and "
                      f"the plan's register {plan_reg}")
        i = args[0][1]
        if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(spec):
            _fail(fn, f"instruction {pc}: buffer index {i!r} out of range 0..{len(spec) - 1}")
        if pc < at:
            _fail(fn, f"instruction {pc}: a view made before the plan (instruction {at})")
        index[pc] = i
    lifetimes = value_lifetimes(instrs, table, lambda pc, ins: pc in index)
    for pc in views:
        if pc in lifetimes.escaping:
            _fail(fn, f"instruction {pc}: a view of buffer {index[pc]} may be returned, but the arena is "
                      f"reused by the next call")
    by_buffer: dict[int, list[int]] = {}
    for pc in views:
        if pc not in lifetimes.first:
            continue                    # never used: no data to keep
        start, end = spec[index[pc]]
        first, last = lifetimes.first[pc], lifetimes.last[pc]
        if first < start or last > end:
            _fail(fn, f"buffer {index[pc]} is declared live over instructions [{start}, {end}], but its view "
                      f"made at instruction {pc} is used over [{first}, {last}] (pcs of the bytecode)")
        by_buffer.setdefault(index[pc], []).append(pc)
    for i, pcs in by_buffer.items():
        _check_sharing(fn, i, pcs, lifetimes)


def _spec(fn: VMFunction, ins: Call, n: int, at: int) -> list[tuple[int, int]]:
    """The declared lifetimes of the plan's buffers, in pcs of the bytecode (the plan at ``at``)."""
    if ins.dst == NO_DST or len(ins.args) != 4 or any(a[0] != IMM for a in ins.args[:3]):
        _fail(fn, "plan_arena takes its buffers, pool bounds and heap size as immediates and keeps its result")
    buffers = ins.args[0][1]
    if not isinstance(buffers, (list, tuple)):
        _fail(fn, "plan_arena's buffers must be a list")
    out = []
    for i, b in enumerate(buffers):
        if not isinstance(b, (list, tuple)) or len(b) != 4:
            _fail(fn, f"buffer {i} is not [size, start, end, pool]")
        start, end = b[1], b[2]
        if any(isinstance(v, bool) or not isinstance(v, int) for v in (start, end)) or not 0 <= start <= end < n - 1:
            _fail(fn, f"buffer {i}: lifetime [{start!r}, {end!r}] is not within instructions 0..{n - 2}")
        out.append((start + (start >= at), end + (end >= at)))
    return out


def _check_plan_register(fn: VMFunction, table, at: int, plan_reg: int) -> None:
    """The plan's register is written once and read only as arena_tensor's plan."""
    for pc, ins in enumerate(fn.instructions):
        if isinstance(ins, Call):
            if ins.dst == plan_reg and pc != at:
                _fail(fn, f"instruction {pc} overwrites the plan's register {plan_reg}")
            operands = list(ins.args) + [v for _, v in ins.kwargs]
            uses = [j for j, op in enumerate(operands) if op == (REG, plan_reg)]
            if uses and (uses != [2] or not _calls(ins, table, VIEW)):
                _fail(fn, f"instruction {pc} reads the plan's register {plan_reg} other than as arena_tensor's plan")
        elif isinstance(ins, Ret) and ins.src == plan_reg or isinstance(ins, If) and ins.cond == plan_reg:
            _fail(fn, f"instruction {pc} reads the plan's register {plan_reg} other than as arena_tensor's plan")


def _check_sharing(fn: VMFunction, buffer: int, pcs: list[int], lifetimes) -> None:
    """Views of one buffer follow each other: each is first used at or after the last
    use of all earlier ones, meeting only where a kernel reads the old one and writes
    the new one as ``out``."""
    order = sorted(pcs, key=lambda pc: (lifetimes.first[pc], pc))
    reach, holder = -1, None
    for pc in order:
        first = lifetimes.first[pc]
        if first < reach or first == reach and not _in_place(lifetimes, first, holder, pc):
            _fail(fn, f"buffer {buffer} holds two values live together: the views made at instructions {holder} "
                      f"(used until {reach}) and {pc} (used from {first})")
        if lifetimes.last[pc] >= reach:
            reach, holder = lifetimes.last[pc], pc


def _in_place(lifetimes, pc: int, old: int, new: int) -> bool:
    operands = lifetimes.kernel_operands.get(pc)
    return operands is not None and operands[1] == new and old in operands[0]


__all__ = ["check_plans"]

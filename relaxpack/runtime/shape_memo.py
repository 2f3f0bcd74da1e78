"""The shape memo's plan: which shape-pure instructions a compiled function looks up once per
shape heap instead of running (see :mod:`.compiled`), and the fill that works them out.

A memo is looked up before the first memoizable instruction of an item list (the function's
top level after its input checks, each branch of an if) and after each data-dependent write
of the heap; it holds the instructions up to the next write that read only the heap, each
other and (a later memo) the shapes and arena plans of the memos before it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from .arena import ArenaPlan
from .bytecode import NO_DST, Call, Ret
from .frozen import freeze

if TYPE_CHECKING:
    from .compiled import Resolved

#: builtins whose result depends on the shape heap (and each other's results) alone; a view
#: (``reshape_view``, ``index_view``) is memoized only where its operand is (an arena tensor, never an output)
PURE = frozenset({"vm.builtin.make_shape", "vm.builtin.eval_dim", "vm.builtin.plan_arena",
                  "vm.builtin.arena_tensor", "vm.builtin.reshape_view", "vm.builtin.index_view"})
#: builtins that may take the heap and leave it unchanged, or (match_shape) write it
HEAP_USERS = PURE | {"vm.builtin.check_dims", "vm.builtin.match_shape", "vm.builtin.alloc_shape_heap"}
#: instructions that may come before the memo's lookup: input checks
CHECKS = frozenset({"vm.builtin.alloc_shape_heap", "vm.builtin.check_tensor", "vm.builtin.match_shape",
                    "vm.builtin.check_dims", "vm.builtin.check_container", "vm.builtin.check_prim"})
#: kernels a memo may run once per shape when every operand is memoized and their output is a
#: fresh ``alloc_tensor`` read nowhere else but as kernel operands (shape-only values: masks,
#: position tables; packager/shape_values.py picks them): functions of their operands alone
MEMO_KERNELS = frozenset({
    "range", "take", "fused_elementwise", "less", "less_equal", "greater", "greater_equal", "equal",
    "not_equal", "where", "broadcast_to", "concat", "cos", "sin", "add", "subtract", "multiply",
    "divide", "astype", "permute_dims", "dynamic_strided_slice", "strided_slice", "shape_to_tensor",
    "logical_and", "logical_or", "logical_not", "minimum", "maximum", "abs", "log", "exp", "floor",
    "trilu", "cumsum", "full", "zeros", "ones", "floor_divide", "expand_dims", "reshape", "tile",
    "image.resize", "squeeze", "clip",
})
ALLOC = "vm.builtin.alloc_tensor"
VIEW = "vm.builtin.reshape_view"
#: builtins whose result holds its operands as they are (a view, a tuple of them)
ALIASES = frozenset({VIEW, "vm.builtin.index_view", "vm.builtin.make_tuple"})
#: distinct shapes a function's memo keeps at least (then it starts afresh)
MEMO_ENTRIES = 16
#: memoized results a memo holds over all its shapes: a small function's memo keeps more shapes
#: than a large one's (a loop body sees a new carried-state shape every iteration), in bounded memory
MEMO_VALUES = 1 << 16
#: distinct shapes a memo keeps at most, however small its function
MEMO_MAX_ENTRIES = 1024
#: bytes of kept kernel outputs (masks, tables) a memo holds before it starts afresh (one
#: entry is always kept: it is what one call needs anyway)
MEMO_BYTES = 32 << 20


@dataclass(frozen=True)
class Memo:
    heap: int                  # the heap register
    items: int                 # id() of the item list (the function's or a branch's) the lookup is in
    at: int                    # index in that list the lookup goes before
    pcs: tuple[int, ...]       # the memoized instructions, in order
    later: bool = False        # looked up after a write of the heap in its list (never the top memo)
    reads: tuple[int, ...] = ()  # registers of earlier memos' shapes and plans it reads: part of its key


def memo_plans(instrs, tree, resolved) -> list[Memo]:
    """Which instructions each memo computes: one for the function's top level (its lookup after
    the input checks), one per branch of an if (its lookup before the branch's first
    memoizable instruction, where no instruction of the branch wrote the heap before it) and
    one after each later write of the heap. All but the top one may read the shapes and arena
    plans of the memos looked up before them on every path, which join their keys."""
    heaps = [r.dst for r in resolved.values() if r.name == "vm.builtin.alloc_shape_heap"]
    if len(heaps) != 1:
        return []
    heap = heaps[0]
    for pc, r in resolved.items():         # the heap only goes to builtins that read (or match) it
        if reads_register(r, heap) and r.name not in HEAP_USERS:
            return []
    written = write_counts(instrs)
    kept = _kept_allocs(resolved, instrs)
    memos: list[Memo] = []

    def plan(items, top: bool, avail: frozenset) -> None:
        first = next((k for k, item in enumerate(items)
                      if item[0] == "call" and resolved[item[1]].name in PURE), None)
        before = items[:first] if first is not None else ()
        if top:
            ok = first is not None and all(item[0] == "call" and resolved[item[1]].name in CHECKS for item in before)
        else:
            ok = first is not None and not any(writes_heap(item, instrs, resolved, heap) for item in before)
        if ok:      # (a branch's memo may read the shapes and plans of the memos before its if)
            pcs, reads = _memoized(items[first:], instrs, resolved, heap, written, kept,
                                     frozenset() if top else avail)
            if pcs:
                memos.append(Memo(heap, id(items), first, pcs, reads=reads))
        if first is not None:
            later(items, first, avail)
        for b, item in enumerate(items):
            if item[0] == "if":
                inner = avail | _shape_values(memos, id(items), b, resolved)
                plan(item[2], False, inner)
                plan(item[3], False, inner)

    def later(items, k: int, avail: frozenset) -> None:
        """A memo after each write of the heap in ``items`` (a data-dependent dim matched), from
        the next memoizable instruction: keyed by the heap as it is there, it holds what the
        instructions up to the next write compute (silero's branch after its Shape and
        match_casts: ~25 shape and arena calls a run). It may read the shapes and arena plans
        of memos looked up before it (``avail`` and this list's earlier ones), which then join
        its key (a plan by identity: the key holds it). Only where it saves two calls or more."""
        while True:
            stop = next((j for j in range(k, len(items)) if writes_heap(items[j], instrs, resolved, heap)), None)
            if stop is None:
                return
            k = next((j for j in range(stop + 1, len(items))
                      if items[j][0] == "call" and resolved[items[j][1]].name in PURE), None)
            if k is None:
                return
            extra = avail | _shape_values(memos, id(items), k, resolved)
            pcs, reads = _memoized(items[k:], instrs, resolved, heap, written, kept, extra)
            if len(pcs) >= 2:
                memos.append(Memo(heap, id(items), k, pcs, later=True, reads=reads))

    plan(tree, True, frozenset())
    return memos


#: the memoized builtins whose values a later memo may take into its key: shapes (tuples of ints)
#: and dims (ints) by value, arena plans by identity (never arrays: unhashable)
KEYABLE = frozenset({"vm.builtin.make_shape", "vm.builtin.eval_dim", "vm.builtin.plan_arena"})


def _shape_values(memos, items: int, before: int, resolved) -> frozenset:
    """The registers of :data:`KEYABLE` values that the memos of list ``items`` looked up before
    its item ``before`` hold (set on every path that reaches that item)."""
    return frozenset(resolved[pc].dst for memo in memos if memo.items == items and memo.at < before
                     for pc in memo.pcs if resolved[pc].name in KEYABLE)


def _memoized(items, instrs, resolved, heap: int, written, kept: dict, extra: frozenset = frozenset()) -> tuple:
    """(pcs, reads): the pure instructions among ``items`` (one level, from the first pure one)
    that read only the heap, each other and the ``extra`` registers, and write a register
    written nowhere else, up to the heap's first write; the ``extra`` registers they read.
    A :data:`MEMO_KERNELS` call joins with its ``out`` (a ``kept`` allocation) when all its
    operands are memoized values whose contents the shapes fix (shapes, dims, kept arrays; an
    arena view is memoized but holds what kernels write there each run): the value is then
    computed once per shape and kept read-only."""
    known, pcs = {heap} | extra, []
    fixed = set(known)                      # registers whose contents the shapes alone decide
    pending, kept_made = set(), set()
    for item in items:
        if item[0] == "if" and writes_heap(item, instrs, resolved, heap):
            break
        if item[0] != "call":
            continue
        r = resolved[item[1]]
        if r.name == "vm.builtin.match_shape" and reads_register(r, heap):
            break                          # the heap changes here: the memo stops
        regs = [v for is_reg, v in r.args if is_reg] + [v for _, is_reg, v in r.kwargs if is_reg]
        if r.name in ALIASES and r.dst != NO_DST and written.get(r.dst, 0) == 1 and not r.kwargs \
                and any(x in kept_made for x in regs) and all(x in known for x in regs):
            known.add(r.dst)             # a view of a kept array (the mask's expand_dims), a tuple of them
            if all(x in fixed for x in regs):     # (a tuple with an arena view is memoized, not fixed)
                fixed.add(r.dst)
                kept_made.add(r.dst)
            pcs.append(item[1])
        elif r.name in PURE and r.dst != NO_DST and written.get(r.dst, 0) == 1 and all(x in known for x in regs):
            known.add(r.dst)
            if r.name in KEYABLE:
                fixed.add(r.dst)
            pcs.append(item[1])
        elif r.name == ALLOC and r.dst in kept and written.get(r.dst, 0) == 1 and all(x in known for x in regs):
            pending.add(r.dst)           # known once its kernel is memoized too
            pcs.append(item[1])
        elif r.name in MEMO_KERNELS and r.dst == NO_DST and _out_of(r) in pending \
                and kept.get(_out_of(r)) == item[1] and all(x in fixed or x == _out_of(r) for x in _read(r)) \
                and all(x in known or x == _out_of(r) for x in regs):
            known.add(_out_of(r))
            fixed.add(_out_of(r))
            kept_made.add(_out_of(r))
            pcs.append(item[1])
    ran = {_out_of(resolved[pc]) for pc in pcs if resolved[pc].dst == NO_DST}
    pcs = [pc for pc in pcs if resolved[pc].name != ALLOC or resolved[pc].dst in ran]
    made = {resolved[pc].dst for pc in pcs}
    reads = sorted({v for pc in pcs for v in _operand_values(resolved[pc]) if v in extra and v not in made})
    return tuple(pcs), tuple(reads)


def _read(r: Resolved) -> list[int]:
    """The registers a kernel reads: its operands but ``out`` and ``workspace`` (scratch, whose
    contents its result never depends on; the fill hands it scratch of its own)."""
    return [v for is_reg, v in r.args if is_reg] + \
        [v for k, is_reg, v in r.kwargs if is_reg and k not in ("out", "workspace")]


def _out_of(r: Resolved):
    return next((v for k, is_reg, v in r.kwargs if k == "out" and is_reg), None)


def _kept_allocs(resolved, instrs=()) -> dict[int, int]:
    """``alloc_tensor`` registers a memo may keep across calls -> the pc of the one kernel that
    writes them: written there alone (as its ``out``) and otherwise read, directly or through
    ``reshape_view``s and ``make_tuple``s (concat's operand), only as a positional operand of a
    call with no result (a kernel, which writes its ``out``): never returned, passed to another
    builtin or function or written again, so no caller and no later write sees the kept array."""
    roots = {r.dst: {r.dst} for r in resolved.values() if r.name == ALLOC and r.dst != NO_DST}
    writer: dict[int, int] = {}
    bad: set[int] = set()
    for pc in sorted(resolved):
        r = resolved[pc]
        for k, is_reg, v in r.kwargs:
            if is_reg and v in roots:
                if k == "out" and roots[v] == {v} and r.name in MEMO_KERNELS and r.dst == NO_DST \
                        and v not in writer:
                    writer[v] = pc
                else:
                    bad.update(roots[v])
        read = set().union(*(roots[v] for is_reg, v in r.args if is_reg and v in roots))
        if r.name in ALIASES and r.dst != NO_DST and not r.kwargs:
            if read:
                roots[r.dst] = roots.get(r.dst, set()) | read
        elif r.name.startswith("vm.") or r.dst != NO_DST:
            bad.update(read)
    for ins in instrs:
        if isinstance(ins, Ret) and ins.src in roots:
            bad.update(roots[ins.src])
    return {v: pc for v, pc in writer.items() if v not in bad}


def _operand_values(r: Resolved) -> list[int]:
    return [v for is_reg, v in r.args if is_reg] + [v for _, is_reg, v in r.kwargs if is_reg]


def reads_register(r: Resolved, reg: int) -> bool:
    return any(is_reg and v == reg for is_reg, v in r.args) or any(is_reg and v == reg for _, is_reg, v in r.kwargs)


def write_counts(instrs) -> dict[int, int]:
    counts: dict[int, int] = {}
    for ins in instrs:
        if isinstance(ins, Call) and ins.dst != NO_DST:
            counts[ins.dst] = counts.get(ins.dst, 0) + 1
    return counts


def writes_heap(item, instrs, resolved, heap) -> bool:
    if item[0] == "call":
        r = resolved[item[1]]
        return r.name == "vm.builtin.match_shape" and reads_register(r, heap)
    if item[0] == "if":
        return any(writes_heap(i, instrs, resolved, heap) for i in item[2] + item[3])
    return False


def memo_capacity(memos) -> int:
    """The distinct shapes the memos of one function keep before starting afresh: at least
    :data:`MEMO_ENTRIES`, at most :data:`MEMO_MAX_ENTRIES`, and as many as keep about
    :data:`MEMO_VALUES` results over all of them."""
    per_shape = sum(len(memo.pcs) for memo in memos)
    return max(MEMO_ENTRIES, min(MEMO_MAX_ENTRIES, MEMO_VALUES // max(per_shape, 1)))


def filler(memo: Memo, resolved, store: dict, capacity: int = MEMO_ENTRIES):
    """``fill(heap)``: the memoized instructions run in order, their results kept for this heap
    (``capacity`` heaps, then the store starts afresh); None when one of them fails (the caller
    then runs the function without the memo)."""
    steps = [resolved[pc] for pc in memo.pcs]
    arenas: list = []         # the arena buffers the stored views are into
    held = [0]                # bytes of kept kernel outputs in the store

    def fill(heap, *extras):
        values = {memo.heap: heap, **dict(zip(memo.reads, extras))}
        try:
            for r in steps:
                args = [values[v] if is_reg else v for is_reg, v in r.args]
                kwargs = {k: values[v] if is_reg else v for k, is_reg, v in r.kwargs}
                if "workspace" in kwargs:   # the arena's scratch may hold live values at the lookup
                    kwargs["workspace"] = np.empty_like(kwargs["workspace"])
                values[r.dst] = r.fn(*args, **kwargs)
        except Exception:  # noqa: BLE001 - the plain run raises it where the interpreter would
            return None
        kept = [values[_out_of(r)] for r in steps if r.dst == NO_DST]
        for array in kept:        # a kernel's kept output: read-only from here on (.frozen)
            freeze(array)
        nbytes = sum(array.nbytes for array in kept)
        # handed out as a view: kernels keep what they prepare for an operand that is a view (an
        # arena's: the same object run after run) but not for an array owning its memory (a model
        # input: not held past the call), so a kept table owning its memory cost its readers their
        # checks on every run (a fused chain's overlap test, ~0.5 us)
        owned = {id(array) for array in kept}
        result = tuple(values[r.dst].view() if id(values[r.dst]) in owned else values[r.dst]
                       for r in steps if r.dst != NO_DST)
        for value in result:      # views made before their base was kept (a reshape): read-only too
            if isinstance(value, np.ndarray) and id(value.base) in owned:
                value.flags.writeable = False
        now = arena_buffers(result)
        if len(store) >= capacity or held[0] + nbytes > MEMO_BYTES or len(now) != len(arenas) \
                or any(a is not b for a, b in zip(now, arenas)):
            store.clear()     # an arena grew: views into the old one would keep it alive
            arenas[:] = now
            held[0] = 0
        held[0] += nbytes
        store[(tuple(heap), *extras) if extras else tuple(heap)] = result
        return result
    return fill


def arena_buffers(values) -> list:
    """The distinct arena buffers of the ArenaPlans among ``values``, in order."""
    seen: dict[int, object] = {}
    for v in values:
        if isinstance(v, ArenaPlan):
            for buffer in v.arenas:
                seen.setdefault(id(buffer), buffer)
    return list(seen.values())

"""Liveness on the bytecode: where each buffer is first and last used, in one pass.

The archive loader (``runtime/plan_check.py``) asks of one function's
instructions: for each *leaf* (an instruction that makes a buffer, e.g. an
``arena_tensor``), which instructions may read it, directly or through an
alias, and may it reach a ``ret``. The compiler plans on the IR with a
model that reads the IR as codegen emits it (``passes/analysis/liveness.py``),
so the lifetimes it writes are the ones this analysis finds.

A register holds a *node*: a leaf, a tuple built by ``make_tuple`` (its
fields), or a node that may hold any of several others (what a call that
may return one of its arguments returns, or a register written twice).
Every instruction that reads a register *uses* its node; after the pass,
uses flow from each node to the nodes it may hold, newest first (a node
only holds older ones), so each leaf learns its first and last use in time
linear in the bytecode. ``tuple_getitem`` with an immediate index of a
known tuple is its field, without using the other fields: a ``split`` into
10,000 outputs gives each its own lifetime.

Sound for hostile bytecode because jumps go forward only: an instruction
runs after every instruction before it that ran, so a value can only be
read at pcs between its definition and its last read. Everything not
known to make fresh values (kernels, packed calls, VM calls, loops) is
assumed to return any of its arguments.

>>> lt = value_lifetimes(instrs, table, lambda pc, ins: is_alloc(ins))     # doctest: +SKIP
>>> lt.first[7], lt.last[7], 7 in lt.escaping                             # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from ..bytecode import IMM, NO_DST, REG, Call, If, Ret

#: builtins whose result holds none of their arguments
FRESH_BUILTINS = frozenset({
    "vm.builtin.make_shape", "vm.builtin.eval_dim", "vm.builtin.alloc_shape_heap", "vm.builtin.read_if_cond",
    "vm.builtin.alloc_tensor", "vm.builtin.shape_of", "vm.builtin.check_prim", "vm.builtin.plan_arena",
    "vm.builtin.arena_tensor"})

_NEVER = 1 << 62


@dataclass
class Lifetimes:
    """What :func:`value_lifetimes` found; leaves are named by the pc that defines them."""

    #: leaf -> first pc that may read it (a leaf never read is absent)
    first: dict[int, int] = field(default_factory=dict)
    #: leaf -> last pc that may read it
    last: dict[int, int] = field(default_factory=dict)
    #: leaves that may be (or be held by) a function's result
    escaping: set[int] = field(default_factory=set)
    #: kernel call pc -> (leaf held by each positional register operand or None,
    #: leaf held by its ``out`` or None): what in-place reuse asks
    kernel_operands: dict[int, tuple[tuple, int | None]] = field(default_factory=dict)


def value_lifetimes(instrs: Sequence, table: Sequence, is_leaf: Callable[[int, Call], bool]) -> Lifetimes:
    """The lifetimes of the leaves of ``instrs`` (``is_leaf(pc, call)``) in one pass.

    ``table`` is the function table (entries with ``kind`` and ``name``).
    """
    kids: list[tuple] = []          # node -> the nodes it may hold
    first: list[int] = []
    last: list[int] = []
    escapes: list[bool] = []
    leaf_pc: dict[int, int] = {}    # leaf node -> its pc
    fields: dict[int, list] = {}    # tuple node -> its field nodes (None: holds no buffer)
    reg: dict[int, int] = {}        # register -> its node
    kernel_operands: dict[int, tuple] = {}

    def new(children: tuple = ()) -> int:
        kids.append(children)
        first.append(_NEVER)
        last.append(-1)
        escapes.append(False)
        return len(kids) - 1

    def use(node, pc: int) -> None:
        if node is not None:
            if pc < first[node]:
                first[node] = pc
            if pc > last[node]:
                last[node] = pc

    def holding(nodes) -> int | None:
        nodes = tuple(dict.fromkeys(n for n in nodes if n is not None))
        if not nodes:
            return None
        return nodes[0] if len(nodes) == 1 else new(nodes)

    for pc, ins in enumerate(instrs):
        if isinstance(ins, Ret):
            node = reg.get(ins.src)
            use(node, pc)
            if node is not None:
                escapes[node] = True
            continue
        if isinstance(ins, If):
            use(reg.get(ins.cond), pc)
            continue
        if not isinstance(ins, Call):
            continue
        entry = table[ins.func]
        builtin = entry.name if entry.kind == "builtin" else ""
        node = None
        if builtin == "vm.builtin.tuple_getitem" and _known_item(ins, reg, fields):
            node = fields[reg[ins.args[0][1]]][ins.args[1][1]]
        elif builtin == "vm.builtin.make_tuple":
            items = [reg.get(v) if k == REG else None for k, v in ins.args]
            for n in items:
                use(n, pc)
            node = new(tuple(n for n in items if n is not None))
            fields[node] = items
        else:
            reads = _registers(ins)
            for r in reads:
                use(reg.get(r), pc)
            if entry.kind == "kernel":
                out = dict(ins.kwargs).get("out")
                kernel_operands[pc] = (tuple(_leaf(reg.get(v), leaf_pc) if k == REG else None for k, v in ins.args),
                                       _leaf(reg.get(out[1]), leaf_pc) if out is not None and out[0] == REG else None)
            if is_leaf(pc, ins):
                node = new()
                leaf_pc[node] = pc
            elif builtin not in FRESH_BUILTINS and ins.dst != NO_DST:
                # may return or hold any argument, in any arrangement: a new node (never a
                # known tuple, whose items would then be taken as the arguments' items)
                held = tuple(dict.fromkeys(n for n in (reg.get(r) for r in reads) if n is not None))
                node = new(held) if held else None
        if ins.dst != NO_DST:
            old = reg.get(ins.dst)
            # a register written twice (the two arms of an If) may hold either value
            reg[ins.dst] = holding((old, node)) if old is not None else node

    for node in range(len(kids) - 1, -1, -1):   # a node holds only older nodes
        lo, hi, out = first[node], last[node], escapes[node]
        for k in kids[node]:
            if lo < first[k]:
                first[k] = lo
            if hi > last[k]:
                last[k] = hi
            if out:
                escapes[k] = True
    result = Lifetimes(kernel_operands=kernel_operands)
    for node, pc in leaf_pc.items():
        if last[node] >= 0:
            result.first[pc], result.last[pc] = first[node], last[node]
        if escapes[node]:
            result.escaping.add(pc)
    return result


def _known_item(ins: Call, reg: dict, fields: dict) -> bool:
    if len(ins.args) != 2 or ins.args[0][0] != REG or ins.args[1][0] != IMM:
        return False
    items = fields.get(reg.get(ins.args[0][1]))
    index = ins.args[1][1]
    return items is not None and isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(items)


def _leaf(node, leaf_pc: dict) -> int | None:
    return leaf_pc.get(node) if node is not None else None


def _registers(ins: Call) -> list[int]:
    return [v for k, v in ins.args if k == REG] + [v for _, (k, v) in ins.kwargs if k == REG]


__all__ = ["FRESH_BUILTINS", "Lifetimes", "value_lifetimes"]

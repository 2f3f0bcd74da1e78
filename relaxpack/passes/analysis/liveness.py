"""Liveness of a function's bindings in their order: the one model of which
buffers are live where, for ReorderBindings and the memory plan's figures.

Last-use style (as jax and tinygrad plan): bindings are numbered in
codegen's order; a binding that allocates (an op, ``call_tir``,
``call_dps_packed`` or a fused ``Primitive`` function) makes a buffer, and
everything else (a var alias, tuple, tuple item, ``match_cast``,
``call_packed``, a call of a module function) *holds* what its operands
hold. A buffer lives from its allocation to its last reader through every
alias: its *kill point*. Buffers that may reach the function's result, and
parameters and constants, are not counted. An elementwise op whose input of
the output's shape and dtype dies there writes over it (*in-place reuse*);
a kernel's workspace (its op's formula, ops.registry.call_workspace) is live at its binding alone.
Sizes come from struct info, aligned to :data:`runtime.memory.ALIGNMENT`,
symbolic dims at their upper bounds (``dim_ranges``) or, without one, at
:data:`REPRESENTATIVE_DIM`.

>>> lv = Liveness(mod["main"], mod)                          # doctest: +SKIP
>>> lv.buffers[0].alloc, lv.buffers[0].last, lv.kill_points()  # doctest: +SKIP
(0, 2, {2: [0]})
>>> lv.peak()                                                # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import RelaxpackError
from ...ir.block_builder import is_pure_expr
from ...ir.dims import DimExpr, evaluate, free_vars
from ...ir.expr import (
    Binding, Call, Expr, ExternFunc, Function, GlobalVar, If, MatchCast, Op, SeqExpr, Tuple,
    TupleGetItem, Var,
)
from ...ir.struct_info import StructInfo, TensorStructInfo, TupleStructInfo
from ...ops.definitions.memory import RESHAPES, index_view_of
from ...ops.registry import get_op_def
from ...ops.registry import call_workspace
from ...runtime.dtypes import numpy_dtype
from ...runtime.memory import ALIGNMENT, align_up
from ...runtime.memory.verify import peak_live

#: the value of a symbolic dim without an upper bound, for sizes
REPRESENTATIVE_DIM = 64

_DPS = frozenset({"call_tir", "call_dps_packed"})

# ---------------------------------------------------------------- sizes
class _Sizes:
    """Bytes of a value from its struct info, dims at their bounds."""

    def __init__(self, func: Function):
        self.bounds = {name: hi if hi is not None else max(lo, REPRESENTATIVE_DIM)
                       for name, lo, hi in func.attrs.get("dim_ranges", ())}

    def dim(self, d) -> int:
        if isinstance(d, int):
            return max(d, 0)
        env = {v: self.bounds.get(v, REPRESENTATIVE_DIM) for v in free_vars(d)}
        return max(evaluate(d, env), 0)

    def nbytes(self, sinfo: StructInfo | None) -> int:
        """Aligned bytes; a tuple is the sum of its fields (each its own allocation)."""
        if isinstance(sinfo, TupleStructInfo):
            return sum(self.nbytes(f) for f in sinfo.fields)
        if not isinstance(sinfo, TensorStructInfo) or sinfo.shape is None or sinfo.dtype is None:
            return 0
        n = _itemsize(sinfo.dtype)
        for d in sinfo.shape:
            n *= self.dim(d)
        return align_up(n, ALIGNMENT)


def _itemsize(dtype: str) -> int:
    try:
        return numpy_dtype(dtype).itemsize
    except RelaxpackError:  # e.g. ml_dtypes missing: its types are at most 2 bytes
        return 2


# ---------------------------------------------------------------- the IR, read for liveness
def vars_in(expr) -> list[Var]:
    """The vars an expression in A-normal form reads (not inside If branches)."""
    if isinstance(expr, Var):
        return [expr]
    if isinstance(expr, Tuple):
        return [v for f in expr.fields for v in vars_in(f)]
    if isinstance(expr, TupleGetItem):
        return vars_in(expr.tuple_value)
    if isinstance(expr, Call):
        return vars_in(expr.op) + [v for a in expr.args for v in vars_in(a)]
    if isinstance(expr, If):
        return vars_in(expr.cond)
    return []


def _dims_in(x) -> frozenset[str]:
    """Symbolic dim names an expression, struct info or attribute value mentions."""
    if isinstance(x, DimExpr):
        return free_vars(x)
    if isinstance(x, StructInfo):
        return x.dim_vars()
    if isinstance(x, (tuple, list)):
        return frozenset().union(*(_dims_in(v) for v in x))
    if isinstance(x, Call):
        return (_dims_in(x.struct_info) | _dims_in(x.args) | _dims_in(x.sinfo_args)
                | _dims_in(tuple(x.attrs.values())))
    if isinstance(x, Tuple):
        return _dims_in(x.fields) | _dims_in(x.struct_info)
    if isinstance(x, Expr):
        return _dims_in(x.struct_info)
    return frozenset()


def binding_dims(b: Binding) -> frozenset[str]:
    dims = _dims_in(b.var.struct_info) | _dims_in(b.value)
    return dims | _dims_in(b.struct_info) if isinstance(b, MatchCast) else dims


def is_planned_out(call: Call) -> bool:
    """Whether ``call`` is a destination-passing call whose output a plan already allocated."""
    return isinstance(call.op, Op) and call.op.name in _DPS and len(call.args) > 2


def _allocates(b: Binding, primitive: frozenset[str]) -> bool:
    """Whether the binding's result is a new allocation (vs. what its operands hold)."""
    if isinstance(b, MatchCast) or not isinstance(b.value, Call):
        return False
    op = b.value.op
    if isinstance(op, GlobalVar):   # a fused (Primitive) function becomes one kernel call
        return op.name_hint in primitive
    return (isinstance(op, Op) and op.name not in ("call_packed", "call_pure_packed", "loop")
            and not is_planned_out(b.value))


def kernel_args(call: Call) -> tuple:
    """The operands a kernel call (or a graph op) reads, in order."""
    if isinstance(call.op, Op) and call.op.name in _DPS:
        args = call.args[1]
        return args.fields if isinstance(args, Tuple) else (args,)
    return call.args


def _elementwise(call: Call) -> bool:
    op = call.op
    if not isinstance(op, Op):
        return False
    name = op.name
    if name in _DPS:
        if not isinstance(call.args[0], ExternFunc):
            return False
        name = call.args[0].global_symbol
    try:
        return getattr(get_op_def(name), "elementwise", False)
    except RelaxpackError:
        return False


def is_barrier(b: Binding) -> bool:
    return isinstance(b.value, If) or not is_pure_expr(b.value)


@dataclass
class _Buffer:
    size: int                      # aligned bytes; 0 when it reaches the result
    alloc: int                     # position of the allocating binding
    sinfo: StructInfo              # the allocated tensor's struct info
    readers: list[int] = field(default_factory=list)   # positions reading it (its own first)
    path: tuple[int, ...] = ()      # its field in the allocating binding's (tuple) output

    @property
    def last(self) -> int:
        """The kill point: the last position that reads the buffer or anything holding it."""
        return max(self.readers)


@dataclass(frozen=True)
class _Value:
    """What a var's register holds: the buffers it may hold, the one it is
    (when it is a buffer itself), a known tuple's fields, and whether it is
    memory the function allocated (what a reshape may view)."""

    held: frozenset = frozenset()
    leaf: int | None = None
    fields: tuple | None = None
    owned: bool = False


_NOTHING = _Value()


class Liveness:
    """Buffers and the positions that read them, bindings numbered in codegen's order.

    A binding is one position (an ``If`` reads its condition at its own
    position, then its branches follow); the end of every sequence -- a
    branch's result, the function's return -- is a position of its own.
    A tuple output is one buffer per field; taking an item of a known tuple
    reads nothing (the item's reader reads it), as in the bytecode.
    """

    def __init__(self, func: Function, mod=None):
        self.sizes = _Sizes(func)
        self.primitive = frozenset(name for name, f in (mod.items() if mod is not None else ())
                                   if f.attrs.get("Primitive"))
        self.buffers: list[_Buffer] = []
        self.values: dict[Var, _Value] = {}
        self.position: dict[Binding, int] = {}
        self.out_buffers: dict[int, list[int]] = {}  # position -> the buffers it allocates
        self.in_place: dict[int, list[int]] = {}    # position -> buffers it may write over
        self.scratch: dict[int, int] = {}           # position -> its kernel's workspace bytes
        self.new_dims: dict[Binding, frozenset[str]] = {}   # match_cast -> the dims it binds
        self.defined = set().union(*(_dims_in(p.struct_info) for p in func.params))
        self.entry_dims = frozenset(self.defined)
        self.ends: dict[int, SeqExpr] = {}          # position -> the sequence it ends
        self.leave_branch: set[int] = set()         # buffers a branch allocates and returns
        self.count = 0
        self.escaping = self._seq(func.body)
        for i in self.escaping:                     # what reaches the result is not planned
            self.buffers[i].size = 0

    def _next(self) -> int:
        self.count += 1
        return self.count - 1

    def _value(self, expr) -> _Value:
        return self.values.get(expr, _NOTHING) if isinstance(expr, Var) else _NOTHING

    def _read(self, expr, pos: int) -> frozenset[int]:
        held = frozenset().union(*(self._value(v).held for v in vars_in(expr)))
        for i in held:
            self.buffers[i].readers.append(pos)
        return held

    def _seq(self, seq: SeqExpr) -> frozenset[int]:
        for block in seq.blocks:
            for b in block.bindings:
                self._binding(b)
        pos = self._next()
        self.ends[pos] = seq
        return self._read(seq.body, pos)

    def _binding(self, b: Binding) -> None:
        pos = self.position[b] = self._next()
        value = b.value
        if isinstance(value, If):
            self._read(value.cond, pos)
            held = self._branch(value.true_branch) | self._branch(value.false_branch)
            self.values[b.var] = _Value(held)      # a register written twice: either branch's
            return
        if isinstance(b, MatchCast):
            self.new_dims[b] = b.struct_info.dim_vars() - self.defined
            self.defined |= self.new_dims[b]
        if isinstance(value, Var):                  # an alias (or a cast) shares the register
            if isinstance(b, MatchCast):
                self._read(value, pos)
            self.values[b.var] = self._value(value)
        elif isinstance(value, Tuple):
            self.values[b.var] = _Value(self._read(value, pos), fields=tuple(self._value(f) for f in value.fields))
        elif isinstance(value, TupleGetItem):
            tup = self._value(value.tuple_value)
            if tup.fields is not None and 0 <= value.index < len(tup.fields):
                self.values[b.var] = tup.fields[value.index]
            else:
                self.values[b.var] = _Value(self._read(value, pos))
        elif isinstance(value, Call) and self._is_view(value):
            self.values[b.var] = _Value(self._read(value, pos), owned=True)
        elif isinstance(value, Call) and _allocates(b, self.primitive):
            self._read(value, pos)
            self.values[b.var] = self._allocate(b.var.struct_info, pos, ())
            self._workspace_and_in_place(b, pos)
        elif isinstance(value, Call):
            self.values[b.var] = _Value(self._read(value, pos))
        else:
            self.values[b.var] = _NOTHING

    def _branch(self, seq: SeqExpr) -> frozenset[int]:
        start = self.count
        held = self._seq(seq)
        self.leave_branch |= {i for i in held if self.buffers[i].alloc >= start}
        return held

    def _is_view(self, call: Call) -> bool:
        """A reshape, or a take of one constant index along axis 0 (``index_view_of``), of
        memory the function allocated, which codegen makes a view."""
        if not (isinstance(call.op, Op) and call.op.name == "call_tir" and len(call.args) == 2
                and isinstance(call.args[0], ExternFunc)
                and (call.args[0].global_symbol in RESHAPES or index_view_of(call) is not None)
                and isinstance(call.args[1], Tuple) and call.args[1].fields
                and isinstance(call.sinfo_args[0], TensorStructInfo)):
            return False
        return self._value(call.args[1].fields[0]).owned

    def _allocate(self, sinfo: StructInfo, pos: int, path: tuple) -> _Value:
        if isinstance(sinfo, TupleStructInfo):
            fields = tuple(self._allocate(f, pos, path + (k,)) for k, f in enumerate(sinfo.fields))
            return _Value(frozenset().union(*(f.held for f in fields)), fields=fields, owned=True)
        i = len(self.buffers)
        self.buffers.append(_Buffer(self.sizes.nbytes(sinfo), pos, sinfo, [pos], path))
        self.out_buffers.setdefault(pos, []).append(i)
        return _Value(frozenset({i}), leaf=i, owned=True)

    def _workspace_and_in_place(self, b: Binding, pos: int) -> None:
        value, sinfo = b.value, b.var.struct_info
        workspace = call_workspace(value)
        if workspace is not None:
            self.scratch[pos] = align_up(self.sizes.dim(workspace), ALIGNMENT)
        if not isinstance(sinfo, TensorStructInfo) or not _elementwise(value):
            return
        args = kernel_args(value)
        if len(args) == 1 and self._value(args[0]).fields is not None:
            args = self._value(args[0]).fields     # a var bound to the argument tuple: its items
        cands = []
        for arg in args:
            arg = arg if isinstance(arg, _Value) else self._value(arg)
            i = arg.leaf
            s = self.buffers[i].sinfo if i is not None else None
            if isinstance(s, TensorStructInfo) and (s.shape, s.dtype) == (sinfo.shape, sinfo.dtype):
                cands.append(i)
        if cands:
            self.in_place[pos] = cands

    def in_place_reuse(self, planned=None) -> dict[int, int]:
        """Output buffer -> the dying input whose bytes it takes over: the first
        candidate whose kill point is the writing binding, each input once;
        ``planned(i)`` says which buffers may share (default: those counted)."""
        planned = planned or (lambda i: self.buffers[i].size > 0)
        reuse, taken = {}, set()
        for pos, cands in sorted(self.in_place.items()):
            (out,) = self.out_buffers[pos]
            for i in cands:
                if planned(i) and planned(out) and i not in taken and self.buffers[i].last == pos:
                    reuse[out] = i
                    taken.add(i)
                    break
        return reuse

    def kill_points(self) -> dict[int, list[int]]:
        """Position -> the counted buffers that die after it (their last use)."""
        kills: dict[int, list[int]] = {}
        for i, b in enumerate(self.buffers):
            if b.size:
                kills.setdefault(b.last, []).append(i)
        return kills

    def peak(self) -> int:
        """The largest total of live bytes at one position (the planner's lower bound)."""
        start = {i: b.alloc for i, b in enumerate(self.buffers)}
        for out in self.in_place_reuse():
            start[out] = self.buffers[out].alloc + 1   # the output takes over the input's bytes
        live = [(b.size, start[i], b.last) for i, b in enumerate(self.buffers)
                if b.size and start[i] <= b.last]
        return peak_live(live + [(size, pos, pos) for pos, size in self.scratch.items()])


def peak_live_bytes(func: Function, mod=None) -> int:
    """The peak of live intermediate bytes of ``func`` in its binding order (see the
    module doc); ``mod`` tells which called functions are fused kernels.

    >>> peak_live_bytes(mod["main"])                            # doctest: +SKIP
    """
    return Liveness(func, mod).peak()

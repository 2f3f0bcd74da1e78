"""PlanMemory: explicit allocations, arena buffers and kill points in the lowered IR.

As TVM's StaticPlanBlockMemory, on the liveness model ReorderBindings
costs with (passes/analysis/liveness.py). Every output of a
destination-passing call, and a kernel's workspace, becomes an explicit
``R.memory.alloc_tensor`` the call takes; an intermediate whose size the
inputs' dims decide gets an arena buffer (``storage``) of a pool, shared
with the dying input it is written over in place, and a kill point after
its last use; an output, or a size known only later, an allocation of its
own. With every dim bounded, the buffers are placed at the bounds (the
``offset`` s, and the figures in the ``memory_plan`` function attr); the
runtime re-plans each concrete shape (runtime/memory/)::

    y = R.call_tir("exp", (x,), out_sinfo=R.Tensor((n, 4), "float32"))
    z = R.call_tir("abs", (y,), out_sinfo=R.Tensor((n, 4), "float32"))
  ->
    alloc = R.memory.alloc_tensor(R.shape([n, 4]), dtype="float32", offset=0, storage=0)
    y = R.call_tir("exp", (x,), alloc, out_sinfo=R.Tensor((n, 4), "float32"))
    alloc1 = R.memory.alloc_tensor(R.shape([n, 4]), dtype="float32")
    z = R.call_tir("abs", (y,), alloc1, out_sinfo=R.Tensor((n, 4), "float32"))
    _ = R.memory.kill_tensor(alloc)

Pools: ``PassContext(config={"plan_memory.pools": {"fast": 262144}})``
offers every tensor of the default scope to the first pool named
(USMP's candidate pools); it spills back when it does not fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..ir.dims import evaluate, free_vars
from ..ir.expr import Binding, BindingBlock, Call, Function, If, Op, SeqExpr, ShapeExpr, Tuple, Var, VarBinding
from ..ir.op import make_call
from ..ir.struct_info import GLOBAL_SCOPE, TensorStructInfo, TupleStructInfo
from ..runtime.dtypes import numpy_dtype
from ..runtime.memory import ALIGNMENT, Buffer, align_up, lower_bound, plan_memory as place
from ..ops.registry import call_workspace
from .analysis.liveness import Liveness, is_planned_out
from .analysis.shape_values import shape_only_vars
from .core.infra import function_pass

#: config key: pools bounded in bytes ({name: bytes or None}), the first offered first
POOLS = "plan_memory.pools"

#: lifetimes at the bounds are in instants, finer than positions so that they order as the
#: bytecode's pcs do: binding ``p`` allocates its outputs at ``p * _STEP + k``, then runs (reads
#: its operands, uses its workspace) at ``p * _STEP + _RUN``
_STEP = 1 << 20
_RUN = _STEP - 1


@dataclass
class _Storage:
    """An arena buffer: its first tensor decides its size; a tensor written in
    place over a dying one shares it. Lifetimes are in instants (``_STEP``)."""

    index: int
    sinfo: TensorStructInfo
    pool: str
    start: int
    end: int
    workspace: bool


class _Plan:
    """Which buffers are planned, their storages and kill points, for one function."""

    def __init__(self, func: Function, mod, pools: dict):
        self.lv = lv = Liveness(func, mod)
        self.pools = pools
        self.binding_at = {p: b for b, p in lv.position.items()}
        self.storage_of: dict[tuple, _Storage] = {}   # (position, field path or "ws") -> storage
        self.sinfo_of: dict[tuple, TensorStructInfo] = {}
        self.storages: list[_Storage] = []
        self.kills: dict[int, list[tuple]] = {}        # position -> keys of the tensors dying there
        self.shape_only = shape_only_vars(func.body)   # memory of their own: the shape memo keeps them
        reuse = lv.in_place_reuse(self.planned)
        for pos in sorted(set(lv.out_buffers) | set(lv.scratch)):
            for k, i in enumerate(lv.out_buffers.get(pos, ())):
                b = lv.buffers[i]
                if not self.planned(i):
                    continue
                shared = reuse.get(i)
                key = (pos, b.path)
                if shared is not None:
                    st = self.storage_of[(lv.buffers[shared].alloc, lv.buffers[shared].path)]
                else:
                    st = self._new(b.sinfo, pos * _STEP + k, False)   # from its allocation
                self.storage_of[key], self.sinfo_of[key] = st, b.sinfo
                st.end = max(st.end, b.last * _STEP + _RUN)
                self.kills.setdefault(b.last, []).append(key)
            if pos in lv.scratch:
                sinfo = self.workspace_sinfo(pos)
                if sinfo is not None and self.plannable(sinfo):
                    st = self._new(sinfo, pos * _STEP + _RUN, True)   # at its call alone
                    self.storage_of[(pos, "ws")], self.sinfo_of[(pos, "ws")] = st, sinfo
                    self.kills.setdefault(pos, []).append((pos, "ws"))

    def _new(self, sinfo, start: int, workspace: bool) -> _Storage:
        scope = sinfo.vdevice or GLOBAL_SCOPE
        pool = next(iter(self.pools)) if scope == GLOBAL_SCOPE and self.pools else scope
        st = _Storage(len(self.storages), sinfo, pool, start, start, workspace)
        self.storages.append(st)
        return st

    def planned(self, i: int) -> bool:
        b = self.lv.buffers[i]
        return i not in self.lv.escaping and i not in self.lv.leave_branch and self.plannable(b.sinfo) \
            and self.binding_at[b.alloc].var not in self.shape_only

    def plannable(self, sinfo) -> bool:
        """A tensor of bytes (not string references) whose size the inputs' dims decide."""
        return (isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None and sinfo.dtype is not None
                and sinfo.dtype != "string"
                and all(isinstance(d, int) or free_vars(d) <= self.lv.entry_dims for d in sinfo.shape))

    def workspace_sinfo(self, pos: int):
        binding = self.binding_at[pos]
        nbytes = call_workspace(binding.value)
        out = binding.value.sinfo_args[0]
        scope = out.vdevice if isinstance(out, TensorStructInfo) else GLOBAL_SCOPE
        return None if nbytes is None else TensorStructInfo((nbytes,), "uint8", vdevice=scope)


# ---------------------------------------------------------------- the plan at the bounds
def _nbytes(sinfo: TensorStructInfo, bounds: dict) -> int | None:
    env = {}
    for d in sinfo.shape:
        for name in free_vars(d) if not isinstance(d, int) else ():
            if bounds.get(name) is None:
                return None
            env[name] = bounds[name]
    dims = [d if isinstance(d, int) else evaluate(d, env) for d in sinfo.shape]
    return numpy_dtype(sinfo.dtype).itemsize * math.prod(dims)


def figures(plan: _Plan, func: Function) -> tuple[dict, dict[int, int]]:
    """The plan's figures (those of the archive's metadata) and each storage's offset
    at the dims' upper bounds (none when a dim has no bound)."""
    sts, every = plan.storages, list(plan.storage_of.items())
    scratch = [st for st in sts if st.workspace]
    out = {"buffers": len(sts), "intermediates": len(every), "planned_at": None, "arena_bytes": None,
           "lower_bound_bytes": None, "naive_bytes": None, "workspaces": len(scratch),
           "workspace_bytes": None, "largest_workspace_bytes": None}
    bounds = {name: hi for name, lo, hi in func.attrs.get("dim_ranges", ())}
    sizes = [_nbytes(st.sinfo, bounds) for st in sts]
    if any(s is None for s in sizes):
        return out, {}
    buffers = [Buffer(str(st.index), size, st.start, st.end, st.pool) for st, size in zip(sts, sizes)]
    placed = place(buffers, ALIGNMENT, pools=plan.pools)
    naive = sum(align_up(_nbytes(plan.sinfo_of[key], bounds), ALIGNMENT) for key, _ in every)
    ws = [align_up(size, ALIGNMENT) for st, size in zip(sts, sizes) if st.workspace]
    out.update(planned_at="bounds", arena_bytes=placed.arena_bytes, pool_bytes=dict(placed.pool_sizes),
               lower_bound_bytes=sum(lower_bound(buffers, ALIGNMENT).values()), naive_bytes=naive,
               workspace_bytes=sum(ws), largest_workspace_bytes=max(ws, default=0), algorithm=placed.algorithm)
    return out, {st.index: placed.offsets[str(st.index)] for st in sts}


# ---------------------------------------------------------------- the IR with the plan
def _call(name: str, *args, sinfo, **attrs) -> Call:
    return make_call(name, *args, **attrs).replace(struct_info=sinfo)


class _Writer:
    """The function's bindings with their allocations and kill points made explicit."""

    def __init__(self, plan: _Plan, offsets: dict[int, int]):
        self.plan, self.offsets = plan, offsets
        self.lv = plan.lv
        self.alloc_var: dict[tuple, Var] = {}
        self.end_of = {id(seq): pos for pos, seq in self.lv.ends.items()}

    def seq(self, seq: SeqExpr, head: list[Binding] = ()) -> SeqExpr:
        blocks = [self.block(b) for b in seq.blocks]
        if head:
            if blocks:
                blocks[0] = blocks[0].replace(bindings=(*head, *blocks[0].bindings))
            else:
                blocks = [BindingBlock(tuple(head))]
        return seq.replace(blocks=tuple(blocks))

    def block(self, block: BindingBlock) -> BindingBlock:
        out: list[Binding] = []
        for b in block.bindings:
            pos = self.lv.position[b]
            if isinstance(b.value, If):
                node = b.value
                head = self.kill_bindings(pos, b.span)  # the condition was their last use
                out.append(b.replace(value=node.replace(true_branch=self.seq(node.true_branch, head),
                                                        false_branch=self.seq(node.false_branch))))
                for branch in (node.true_branch, node.false_branch):   # read by a branch's result
                    out += self.kill_bindings(self.end_of[id(branch)], b.span)
                continue
            if pos in self.lv.out_buffers and self.rewritable(b):
                b = self.allocate(b, pos, out)
            out.append(b)
            out += self.kill_bindings(pos, b.span)
        return block.replace(bindings=tuple(out))

    @staticmethod
    def rewritable(b: Binding) -> bool:
        value = b.value
        return (isinstance(b, VarBinding) and isinstance(value, Call) and isinstance(value.op, Op)
                and value.op.name in ("call_tir", "call_dps_packed") and not is_planned_out(value))

    @staticmethod
    def new_var(name: str, sinfo) -> Var:
        return Var(name, sinfo)      # a kill may follow in a later block: never a DataflowVar

    def allocate(self, b: Binding, pos: int, out: list[Binding]) -> Binding:
        value = b.value
        buffers = iter(self.lv.out_buffers[pos])
        self.span = b.span                          # the allocations' instructions are the call's
        dest = self.output(value.sinfo_args[0], pos, buffers, out)
        args = (*value.args, dest)
        if pos in self.lv.scratch:
            sinfo = self.plan.workspace_sinfo(pos)
            args += (self.alloc(sinfo, (pos, "ws"), "workspace", out),)
        return b.replace(value=value.replace(args=args))

    def output(self, sinfo, pos: int, buffers, out: list[Binding]) -> Var:
        if isinstance(sinfo, TupleStructInfo):
            fields = tuple(self.output(f, pos, buffers, out) for f in sinfo.fields)
            var = self.new_var("alloc", sinfo)
            out.append(VarBinding(var, Tuple(fields).replace(struct_info=sinfo), span=self.span))
            return var
        buf = self.lv.buffers[next(buffers)]
        return self.alloc(sinfo, (pos, buf.path), "alloc", out)

    def alloc(self, sinfo: TensorStructInfo, key: tuple, name: str, out: list[Binding]) -> Var:
        st = self.plan.storage_of.get(key)
        attrs = {"dtype": sinfo.dtype, "vdevice": sinfo.vdevice}
        if st is not None:
            attrs.update(storage=st.index, pool=st.pool, offset=self.offsets.get(st.index))
        var = self.new_var(name, sinfo)
        out.append(VarBinding(var, _call("memory.alloc_tensor", ShapeExpr(sinfo.shape), sinfo=sinfo, **attrs),
                              span=self.span))
        self.alloc_var[key] = var
        return var

    def kill_bindings(self, pos: int, span) -> list[Binding]:
        kills = []
        for key in self.plan.kills.get(pos, ()):
            var = self.alloc_var[key]
            kills.append(VarBinding(self.new_var("_", TupleStructInfo(())),
                                    _call("memory.kill_tensor", var, sinfo=TupleStructInfo(())), span=span))
        return kills


def _already_planned(func: Function) -> bool:
    """A function that allocates explicitly (a plan's output) is left alone."""
    def planned(seq: SeqExpr) -> bool:
        for block in seq.blocks:
            for b in block.bindings:
                v = b.value
                if isinstance(v, If) and (planned(v.true_branch) or planned(v.false_branch)):
                    return True
                if isinstance(v, Call) and (is_planned_out(v) or v.op == Op.get("memory.alloc_tensor")):
                    return True
        return False
    return planned(func.body)


@function_pass(name="PlanMemory", opt_level=0, requires=("lower", "plan"), produces="plan")
def plan_memory(func, mod, ctx):
    """Explicit allocations in arena buffers with kill points (see the module doc)."""
    if _already_planned(func):
        return func
    plan = _Plan(func, mod, dict(ctx.config.get(POOLS) or {}))
    if not plan.lv.out_buffers:
        return func
    figs, offsets = figures(plan, func) if plan.storages else ({}, {})
    body = _Writer(plan, offsets).seq(func.body)
    attrs = dict(func.attrs)
    if plan.storages:
        attrs["memory_plan"] = figs
    return func.replace(body=body, attrs=attrs)


__all__ = ["plan_memory", "POOLS"]

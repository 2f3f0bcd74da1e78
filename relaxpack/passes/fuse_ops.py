"""FuseOps: chains and trees of elementwise ops become one Primitive function.

Within a binding block, an elementwise op (``OpDef.elementwise``, plus
``where``, ``nn.prelu`` and ``astype``, and a ``take`` of a constant 1-D table:
``is_table_lookup``) joins the group of its users when
every use of its result is inside that one group; a ``matmul``, ``nn.conv``,
``nn.gemm`` or ``nn.conv_bias_act`` whose result only feeds the group (and
has the group's output shape) joins as its *producer*, the first step. Each
group of two or more ops (but two ops that are each a bare ufunc call,
:func:`_ufunc_pair`) becomes a function ``fused_<ops>`` with
``{"Primitive": True}`` and the group becomes one call of it::

    lv = R.exp(x)                       lv1 = cls.fused_exp_add_tanh(x, y)
    lv1 = R.add(lv, y)          ->
    lv2 = R.tanh(lv1)                   @R.function
                                        def fused_exp_add_tanh(x, y):
                                            R.func_attr({"Primitive": True})
                                            ...

A group grows only while its steps can run with ``out`` and one temporary (two when
it ends in a look-up: :func:`_buffers`)
(:func:`~relaxpack.runtime.kernels.fused_elementwise.plan_buffers`), also
when the memory planner makes ``out`` reuse an input of the output's shape;
LowerFusedFunctions then turns each call into one ``fused_elementwise``
kernel call. Identical fused functions are shared. The call keeps the
group's last var, so nothing after it changes. Why an op stays out of a
group is logged at DEBUG level (:func:`why_not_fused`).

>>> mod = fuse_ops(mod)                                   # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
from collections import defaultdict
from dataclasses import dataclass, field

from ..errors import PassError
from ..ir.block_builder import BlockBuilder
from ..ir.equality import structural_equal
from ..ir.expr import (
    BindingBlock, Call, Constant, Function, GlobalVar, If, Op, PrimValue, SeqExpr, ShapeExpr, Span, Var, VarBinding,
)
from ..ir.module import IRModule
from ..ir.struct_info import TensorStructInfo
from ..ir.visitor import ExprVisitor
from ..ir.well_formed import function_analyzer
from ..ops.definitions.fused_elementwise import fusible_kind, is_table_lookup, same_layout, same_shape
from ..runtime.kernels import KERNELS, bare_ufunc
from ..runtime.kernels.fused_elementwise import plan_buffers
from ..runtime.shape_memo import MEMO_KERNELS
from .core.infra import module_pass
from .lower_fused import recipe_of

log = logging.getLogger(__name__)

#: a group stops growing at this many ops
MAX_GROUP = 64


class _Uses(ExprVisitor):
    """For each var, the bindings whose value reads it (None: read elsewhere,
    e.g. returned). A call that is the result of an If branch counts as a
    binding of its own (``body_bindings``), so it may end a group."""

    def __init__(self):
        self.users: dict[Var, list] = defaultdict(list)
        self.body_bindings: dict[int, VarBinding] = {}
        self.current = None

    def _visit_bound(self, binding) -> None:
        saved, self.current = self.current, binding
        self.visit_expr(binding.value)
        self.current = saved

    visit_var_binding_ = _visit_bound
    visit_match_cast_ = _visit_bound

    def visit_seq_expr_(self, seq: SeqExpr) -> None:
        for block in seq.blocks:
            self.visit_binding_block(block)
        saved, self.current = self.current, None
        if isinstance(seq.body, Call):
            self.current = self.body_bindings[id(seq)] = VarBinding(Var("r", seq.body.struct_info), seq.body)
        self.visit_expr(seq.body)
        self.current = saved

    def visit_var_(self, var: Var) -> None:
        self.users[var].append(self.current)


@dataclass(eq=False)
class _Group:
    root: VarBinding
    members: list = field(default_factory=list)       # bindings, evaluation order decided by ordered()
    producer: VarBinding | None = None
    parts: dict = field(default_factory=dict)         # recipe steps of members and candidates (recipe_of)

    def ordered(self, index: dict, extra: VarBinding | None = None) -> list:
        """The producer first, then the rest in binding order (``members`` joined in
        reverse binding order, and ``extra`` comes before all of them)."""
        producer = self.producer or (extra if extra is not None and _kind(extra) == "producer" else None)
        rest = [m for m in reversed(self.members) if m is not producer]
        if extra is not None and extra is not producer:
            rest.insert(0, extra)
        return ([producer] if producer is not None else []) + rest


def _tensor(sinfo) -> bool:
    return isinstance(sinfo, TensorStructInfo) and sinfo.dtype not in (None, "string")


def _kind(binding) -> str | None:
    """How ``binding`` may be fused: ``"elementwise"``, ``"producer"`` or None."""
    if not isinstance(binding, VarBinding):
        return None
    call = binding.value
    if not (isinstance(call, Call) and isinstance(call.op, Op) and call.op.name not in
            ("call_tir", "call_dps_packed", "call_packed", "call_pure_packed")):
        return None
    if not (_tensor(call.struct_info) and call.struct_info.shape is not None):
        return None
    if not all(isinstance(a, (Var, Constant)) and _tensor(a.struct_info) for a in call.args):
        return None
    kind = fusible_kind(call.op.name)
    if kind == "lookup":
        return "elementwise" if is_table_lookup(call) else None
    return kind


def _ufunc_pair(group) -> bool:
    """Two ops each run as a bare ufunc call (``kernels._registry.bare_ufunc``), not float16: unfused,
    each is one ufunc call from the compiled bytecode, which costs less than one fused call of the
    two (``python -m benchmarks.fused_chains``: 5-10% on small tensors); float16 pairs fuse, to
    compute in float32 (``widen_float16``)."""
    if len(group.members) != 2 or group.producer is not None:
        return False
    for b in group.members:
        call = b.value
        if call.struct_info.dtype in ("float16", "bfloat16"):
            return False
        kernel = KERNELS.get(call.op.name)
        if kernel is None or bare_ufunc(kernel.fn, len(call.args)) is None or call.attrs:
            return False
    return True


def _shape_only(bindings: list) -> set:
    """The vars of ``bindings`` whose values are functions of the input shapes alone (and
    constants): ops the shape memo runs (``runtime.shape_memo.MEMO_KERNELS``) of constants,
    prim values, shapes and such vars, at least one of them not a constant (a symbolic dim's
    ``shape_to_tensor``: a pool's count). At the function's top level (the shape memo keeps no
    value of an If branch) such a value stays out of a group that reads data: fused into it, its
    steps ran on every call; on its own (or in a group of its kind) the compiled function's shape
    memo computes it once per input shape (``analysis.shape_values``)."""
    found: set = set()
    for b in bindings:
        call = b.value if isinstance(b, VarBinding) else None
        if not (isinstance(call, Call) and isinstance(call.op, Op) and call.op.name in MEMO_KERNELS):
            continue
        symbolic = False
        for a in call.args:
            if isinstance(a, Var) and a in found:
                symbolic = True
            elif isinstance(a, ShapeExpr):
                symbolic = symbolic or not all(isinstance(d, int) for d in a.values)
            elif not isinstance(a, (Constant, PrimValue)):
                break
        else:
            if symbolic:
                found.add(b.var)
    return found


def _params(ordered: list) -> list:
    """The group's inputs from outside it (vars and constants), in order of first use."""
    inside = {id(m.var) for m in ordered}
    seen, params = set(), []
    for m in ordered:
        for a in m.value.args:
            key = id(a)
            if key not in inside and key not in seen:
                seen.add(key)
                params.append(a)
    return params


def _buffers(root: VarBinding) -> int:
    """Buffers a group may use, ``out`` included: one temporary, two when the group ends in a table
    look-up (its index, an integer, rarely fits ``out``'s bytes or its input's; the look-up's own
    kernel call, which the second temporary saves, cost more than the memory)."""
    return 3 if isinstance(root.value, Call) and is_table_lookup(root.value) else 2


def why_not_fused(ordered: list, root: VarBinding, inputs: frozenset, parts: dict | None = None) -> str | None:
    """None if the group ``ordered`` (ending in ``root``) runs with ``out`` and one
    temporary, whichever same-shaped input the memory planner lets ``out``
    reuse (never one of the function's ``inputs``: the planner places only
    intermediates); else the reason it does not. ``parts`` caches the group's
    recipe steps between calls (:func:`recipe_of`)."""
    out = root.value.struct_info
    first = ordered[0]
    if first is not root and _kind(first) == "producer" and not same_shape(first.value.struct_info, out):
        return f"R.{first.value.op.name} gives {first.value.struct_info}, not the group's shape"
    for b in ordered:
        if is_table_lookup(b.value) and not same_shape(b.value.struct_info, out):
            return f"the look-up {b.var.name_hint} gives {b.value.struct_info}, not the group's shape"
    params = _params(ordered)
    try:
        recipe = recipe_of(params, ordered, out, parts)
    except PassError as err:
        return str(err)
    buffers = _buffers(root)
    if plan_buffers(recipe, frozenset(), buffers) is None:
        return "it would need a second temporary"
    for i, p in enumerate(params):
        if isinstance(p, Var) and p not in inputs and same_layout(p.struct_info, out):
            if plan_buffers(recipe, frozenset({i}), buffers) is None:
                return f"it would need a second temporary when out reuses {p.name_hint}"
    return None


class _Fuser:
    def __init__(self, func: Function, functions: dict):
        self.func, self.functions = func, functions
        self.inputs = frozenset(func.params)
        uses = _Uses()
        uses.visit_expr(func)
        self.users, self.body_bindings = uses.users, uses.body_bindings
        self.made: dict = {}       # fused-function key -> name (see _key)
        self.depth = 0              # inside how many If branches

    def run(self) -> Function:
        body = self.seq(self.func.body)
        return self.func.replace(body=body)

    def seq(self, seq: SeqExpr) -> SeqExpr:
        result = self.body_bindings.get(id(seq))
        if result is None:
            blocks = tuple(self.block(b) for b in seq.blocks)
            body = seq.body
        else:   # the result call joins the last block while groups are made
            last = seq.blocks[-1] if seq.blocks else BindingBlock(())
            blocks = tuple(self.block(b) for b in seq.blocks[:-1])
            *bindings, tail = self.block(last, result).bindings
            body = seq.body if tail is result else tail.value
            blocks += (last.replace(bindings=tuple(bindings)),)
        return seq.replace(blocks=blocks, body=body)

    def block(self, block: BindingBlock, result: VarBinding | None = None) -> BindingBlock:
        bindings = [self.nested(b) for b in block.bindings] + ([result] if result is not None else [])
        groups = self.groups(bindings)
        if not groups:
            return block.replace(bindings=tuple(bindings))
        index = {b.var: i for i, b in enumerate(bindings)}
        member_of = {id(m): g for g in groups for m in g.members}
        out = []
        for b in bindings:
            g = member_of.get(id(b))
            if g is None:
                out.append(b)
            elif b is g.root:
                out.append(self.fuse(g.ordered(index), g.root, g.parts))
        return block.replace(bindings=tuple(out))

    def nested(self, binding):
        value = binding.value
        if isinstance(binding, VarBinding) and isinstance(value, If):
            self.depth += 1         # (the shape memo keeps top-level values only: see _shape_only)
            try:
                new = value.replace(true_branch=self.seq(value.true_branch),
                                    false_branch=self.seq(value.false_branch))
            finally:
                self.depth -= 1
            return binding.replace(value=new)
        return binding

    def groups(self, bindings: list) -> list[_Group]:
        index = {b.var: i for i, b in enumerate(bindings)}
        group_of: dict[Var, _Group] = {}
        groups = []
        shape_only = _shape_only(bindings) if self.depth == 0 else set()
        for b in reversed(bindings):
            kind = _kind(b)
            if kind is None:
                continue
            g = self.target(b, kind, group_of)
            if g is not None and b.var in shape_only and g.root.var not in shape_only:
                g = None        # computed once per input shape by the shape memo (see _shape_only)
            reason = None if g is None else why_not_fused(g.ordered(index, b), g.root, self.inputs, g.parts)
            if reason is not None:
                log.debug("FuseOps: %s stays out of %s's group: %s", b.var.name_hint, g.root.var.name_hint, reason)
            if g is not None and reason is None:
                g.members.append(b)
                if kind == "producer":
                    g.producer = b
                group_of[b.var] = g
            elif kind == "elementwise":
                g = _Group(b, [b])
                groups.append(g)
                group_of[b.var] = g
        return [g for g in groups if len(g.members) > 1 and not _ufunc_pair(g)]

    def target(self, binding: VarBinding, kind: str, group_of: dict) -> _Group | None:
        """The group ``binding`` may join: the one all its users are in."""
        users = self.users.get(binding.var, [])
        if not users or any(u is None or not isinstance(u, VarBinding) for u in users):
            return None
        found = {id(group_of.get(u.var)): group_of.get(u.var) for u in users}
        if len(found) != 1:
            return None
        (g,) = found.values()
        if g is None or len(g.members) >= MAX_GROUP or any(u is g.producer for u in users):
            return None
        if not all(any(u is m for m in g.members) for u in users):
            return None
        if kind == "producer" and g.producer is not None:
            return None
        return g

    def fuse(self, ordered: list, root: VarBinding, parts: dict) -> VarBinding:
        params = _params(ordered)
        key = self._key(params, ordered, root, parts)
        name = self.made.get(key) if key is not None else None
        if name is None:        # a group unlike any before: build its function (an inference per op)
            func = _fused_function(params, ordered, root, function_analyzer(self.func))
            name = self.add_function(_name(ordered), func)
            if key is not None:
                self.made[key] = name
        gv = GlobalVar(name, struct_info=self.functions[name].struct_info)
        call = Call(gv, tuple(params), struct_info=self.functions[name].ret_struct_info)
        sources = []
        for m in ordered:
            for s in (m.span.sources if m.span is not None else ()):
                if s not in sources:
                    sources.append(s)
        return VarBinding(root.var, call, span=Span(tuple(sources)) if sources else root.span)

    @staticmethod
    def _key(params: list, ordered: list, root: VarBinding, parts: dict):
        """What decides a fused function up to renaming: the recipe (ops, attributes,
        wiring, dtypes), the parameters' and the result's struct info, the calls'
        sinfo_args. Equal keys give structurally equal functions, so a long chain
        of repeated groups builds each function once. None when there is no recipe."""
        try:
            recipe = recipe_of(params, ordered, root.value.struct_info, parts)
        except PassError:
            return None
        return (recipe, tuple(p.struct_info for p in params), root.value.struct_info,
                tuple(m.value.sinfo_args for m in ordered))

    def add_function(self, base: str, func: Function) -> str:
        """Add ``func`` as ``base`` (or ``base_1``, ...) unless the same function is there."""
        k = 0
        while True:
            name = base if k == 0 else f"{base}_{k}"
            existing = self.functions.get(name)
            if existing is None:
                self.functions[name] = func
                log.debug("FuseOps: new function %s", name)
                return name
            if existing.attrs.get("Primitive") and structural_equal(existing, func):
                return name
            k += 1


def _name(ordered: list) -> str:
    ops = [m.value.op.name.split(".")[-1] for m in ordered]
    if len(ops) > 8:
        ops = ops[:7] + [f"{len(ops) - 7}more"]
    return "fused_" + "_".join(ops)


def _fused_function(params: list, ordered: list, root: VarBinding, analyzer) -> Function:
    bb = BlockBuilder(analyzer=analyzer)
    new_params = [Var(p.name_hint if isinstance(p, Var) else "c", p.struct_info) for p in params]
    env = {id(p): q for p, q in zip(params, new_params)}
    with bb.function("fused", new_params, attrs={"Primitive": True}):
        with bb.dataflow():
            for m in ordered:
                call = m.value
                value = Call(call.op, tuple(env[id(a)] for a in call.args), call.attrs, call.sinfo_args)
                with bb.span(*m.span.sources) if m.span is not None else contextlib.nullcontext():
                    if m is root:
                        var = bb.emit_output(value, name_hint=m.var.name_hint)
                    else:
                        var = bb.emit(value, name_hint=m.var.name_hint)
                env[id(m.var)] = var
        bb.emit_func_output(var, ret_struct_info=root.value.struct_info)
    return bb.get()["fused"]


@module_pass(name="FuseOps", opt_level=2, requires=("import", "optimize"), produces="optimize")
def fuse_ops(mod: IRModule, ctx) -> IRModule:
    functions = dict(mod.functions)
    for name, func in mod.items():
        if func.attrs.get("Primitive"):
            continue
        functions[name] = _Fuser(func, functions).run()
    return mod.with_functions(functions)


__all__ = ["fuse_ops", "why_not_fused", "MAX_GROUP"]

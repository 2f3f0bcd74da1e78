"""ConvertLayout: run the convolutional parts of a model channels last (NHWC).

As TVM's ConvertLayout, the pass rewrites maximal regions of rank-4
bindings to ``data_layout="NHWC"``: a ``permute_dims`` in where a region
reads a channels-first value, one out where a channels-first value is still
needed, nothing in between::

    lv0 = R.nn.conv_bias_act(x, W, b, activation="relu")          # (n, 16, h, w)
    lv1 = R.add(lv0, R.const(... (1, 16, 1, 1)))
    ->
    x_nhwc = R.permute_dims(x, axes=(0, 2, 3, 1))
    lv0_nhwc = R.nn.conv_bias_act(x_nhwc, W', b, activation="relu", data_layout="NHWC")
    lv1_nhwc = R.add(lv0_nhwc, R.const(... (1, 1, 1, 16)))
    lv1 = R.permute_dims(lv1_nhwc, axes=(0, 3, 1, 2))            # only if something reads lv1

Which op joins, starts or ends a region, and how it is rewritten (conv
weights packed to HWIO, ``out_layout="NHWC"`` for a conv that stays channels
first): the rule table :data:`.layout_rules.RULES` and its
:class:`~.layout_rules.Thresholds`. A region is kept only when the calls
that gain from channels last are at least as many as its transposes; the
reasons and measurements are in docs/design-notes.md ("Layout").
"""

from __future__ import annotations

import numpy as np

from ..ir.block_builder import BlockBuilder
from ..ir.expr import (
    Call, Constant, DataflowBlock, DataflowVar, Expr, Function, MatchCast, Op, Tuple, TupleGetItem, Var, VarBinding,
)
from ..ir.visitor import ExprVisitor
from ..ir.well_formed import function_analyzer
from ..ops.registry import make_call
from .core.infra import function_pass
from .layout_carry import TO_NCHW, TO_NHWC
from .layout_rules import RULES, THRESHOLDS, LayoutRule, Thresholds, rank4, rule_for, rules_for

# the rules live in .layout_rules; the pass plans regions with them

# ---------------------------------------------------------------- analysis


def _transposed_from(value: Expr) -> Expr | None:
    """``v`` when ``value`` is ``permute_dims(v, (0, 3, 1, 2))`` (channels last -> first)."""
    if (isinstance(value, Call) and isinstance(value.op, Op) and value.op.name == "permute_dims"
            and tuple(value.attrs["axes"] or ()) == TO_NCHW):
        return value.args[0]
    return None


class _Uses(ExprVisitor):
    """How often each var is referenced in a function."""

    def __init__(self):
        self.count: dict[Var, int] = {}

    def visit_var_(self, var: Var) -> None:
        self.count[var] = self.count.get(var, 0) + 1

    def visit_dataflow_var_(self, var) -> None:
        self.count[var] = self.count.get(var, 0) + 1


def _plan(func: Function) -> dict[Var, LayoutRule]:
    """The top-level bindings to rewrite, each with its rule: a conv where
    its rule allows, the others when their operands allow it; then only
    the regions (connected by channels-last reads) that gain something.
    A conv that writes channels last for a region (``reads_nhwc`` False)
    stays only where the region reads all of its result: planned again
    without it otherwise (it would move a transpose, not save one). A call
    that only carries channels last from one region on (``connects``: a
    split, slice or channel shuffle) and is in a region not kept is planned
    again channels first: joined, two regions can fail together where one
    of them paid alone (YOLO's C2f slices); so are the splits and slices of
    a value two or more of whose pieces are read outside the region (a
    transpose each, where one transpose of the value would do: YOLO's C2f)."""
    uses = _Uses()
    uses.visit_expr(func.body)
    blocked: set[Var] = set()
    values = {b.var: b.value for block in func.body.blocks for b in block.bindings}
    while True:
        candidates, kept = _plan_regions(func, uses.count, blocked)
        reads = _region_reads(candidates, values)        # (an entry's readers are in its region)
        read_first = {v for v, rule in candidates.items()
                      if not rule.reads_nhwc and uses.count.get(v, 0) > reads.get(v, 0)}
        dropped = {v for v, rule in candidates.items() if rule.connects and v not in kept}
        dropped |= _leaky_splits(kept, values, uses.count)
        if not read_first | dropped:
            return kept
        blocked |= read_first | dropped


def _leaky_splits(kept: dict, values: dict, uses: dict) -> set[Var]:
    """The splits and slices in ``kept`` of a value two or more of whose pieces (a split's tuple
    items, slices) are read outside the region."""
    reads = _region_reads(kept, values)
    pieces: dict[Expr, set[Var]] = {}       # the value split or sliced -> the calls that cut it
    leaks: dict[Expr, int] = {}
    for v in kept:
        value, cut = values[v], v
        if isinstance(value, TupleGetItem):
            cut, value = value.tuple_value, values.get(value.tuple_value)
        if not (isinstance(value, Call) and isinstance(value.op, Op)
                and value.op.name in ("split", "strided_slice") and cut in kept):
            continue
        pieces.setdefault(value.args[0], set()).add(cut)
        if uses.get(v, 0) > reads.get(v, 0):
            leaks[value.args[0]] = leaks.get(value.args[0], 0) + 1
    return {cut for source, n in leaks.items() if n >= 2 for cut in pieces[source]}


def _region_reads(chosen: dict, values: dict) -> dict[Var, int]:
    """How often the chosen calls that read the region read each var."""
    reads: dict[Var, int] = {}
    for v, rule in chosen.items():
        for a in _reads(rule, values[v], values):
            if isinstance(a, Var):
                reads[a] = reads.get(a, 0) + 1
    return reads


def _plan_regions(func: Function, uses: dict, blocked: set) -> tuple[dict, dict]:
    """One planning sweep (the convs in ``blocked`` do not write channels
    last, the connecting calls in it stay channels first): every call that
    can join a region, and those of the regions kept."""
    nhwc: set[Var] = set()
    entered: set[Var] = set()                     # channels-first vars a chosen call reads (transposed in)
    chosen: dict[Var, LayoutRule] = {}
    region: dict[Var, Var] = {}                   # union-find: var -> a var of its region
    values = {b.var: b.value for block in func.body.blocks for b in block.bindings}
    is_nhwc = _RegionView(nhwc, entered, values, uses, function_analyzer(func))

    def root(v: Var) -> Var:
        while region[v] is not v:
            v = region[v]
        return v

    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b, MatchCast) or not isinstance(b.value, (Call, TupleGetItem)):
                continue
            rule = next((r for r in rules_for(b.value) if ((r.reads_nhwc and not r.connects) or b.var not in blocked)
                         and r.check(b.value, is_nhwc) is None), None)
            if rule is None:
                continue
            chosen[b.var] = rule
            region[b.var] = b.var
            if rule.output_nhwc:
                nhwc.add(b.var)
            for a in _reads(rule, b.value, values):
                if is_nhwc(a):
                    region[root(a)] = root(b.var)
                elif isinstance(a, Var) and rank4(a):
                    entered.add(a)
    return chosen, _worth_it(func, chosen, nhwc, root, uses)


class _RegionView:
    """The planner's view of the regions for the rules' checks: called with
    an expr, whether it is channels last in a region; ``transposed_in(expr)``:
    whether a chosen call already reads that channels-first var (through a
    transpose in); ``from_channels_last(expr)``: whether it is a transpose out of a
    channels-last value (a region reads that value instead, for free);
    ``used_once(var)``; ``items_only(call)``: whether every use of the tuple
    bound to ``call`` is an item of it; ``equal(a, b)``: dims the same or proved equal."""

    def __init__(self, nhwc: set, entered: set, values: dict | None = None, uses: dict | None = None,
                 analyzer=None):
        self.nhwc, self.entered, self.values, self.uses = nhwc, entered, values or {}, uses or {}
        self.analyzer = analyzer
        self.items: dict[Var, int] = {}
        for value in self.values.values():
            if isinstance(value, TupleGetItem) and isinstance(value.tuple_value, Var):
                self.items[value.tuple_value] = self.items.get(value.tuple_value, 0) + 1
        self.bound_to = {id(value): var for var, value in self.values.items()}

    def equal(self, a, b) -> bool:
        return a == b or (self.analyzer is not None and self.analyzer.prove_equal(a, b))

    def used_once(self, var: Expr) -> bool:
        return isinstance(var, Var) and self.uses.get(var, 0) == 1

    def items_only(self, call: Expr) -> bool:
        var = self.bound_to.get(id(call))
        return var is not None and self.uses.get(var, 0) == self.items.get(var, 0)

    def __call__(self, expr: Expr) -> bool:
        return isinstance(expr, Var) and expr in self.nhwc

    def transposed_in(self, expr: Expr) -> bool:
        return isinstance(expr, Var) and expr in self.entered

    def from_channels_last(self, expr: Expr) -> bool:
        return isinstance(expr, Var) and _transposed_from(self.values.get(expr)) is not None


def _worth_it(func: Function, chosen: dict, nhwc: set, root, uses: dict) -> dict[Var, LayoutRule]:
    """``chosen`` without the regions that have no gaining conv
    (:func:`_gains`) or fewer of them than the transposes in and out they
    need (each costs about what a conv gains: a copy of its input or output).
    A conv writing channels last counts as the transpose in it replaces: it
    never makes a region that would not pay without it."""
    values = {b.var: b.value for block in func.body.blocks for b in block.bindings}
    gains: dict[Var, int] = {}
    transposes: dict[Var, int] = {}
    entries: set[tuple[Var, Var]] = set()
    reads: dict[Var, int] = {}
    for v, rule in chosen.items():
        r = root(v)
        gains[r] = gains.get(r, 0) + (rule.gains is not None and rule.gains(values[v]))
        for a in _reads(rule, values[v], values):
            if isinstance(a, Var) and a in nhwc:
                reads[a] = reads.get(a, 0) + 1
            elif isinstance(a, Var) and rank4(a) and _transposed_from(values.get(a)) is None:
                entries.add((r, a))
        if not rule.reads_nhwc:
            entries.add((r, v))
    for r, _ in entries:
        transposes[r] = transposes.get(r, 0) + 1
    for v in nhwc:
        if uses.get(v, 0) > reads.get(v, 0):
            transposes[root(v)] = transposes.get(root(v), 0) + 1
    keep = {r for r, g in gains.items() if g > 0 and g >= transposes.get(r, 0)}
    return {v: rule for v, rule in chosen.items() if root(v) in keep}


def _operands(call: Call) -> list[Expr]:
    return [e for a in call.args for e in (a.fields if isinstance(a, Tuple) else (a,))]


def _reads(rule: LayoutRule, value: Expr, values: dict) -> list[Expr]:
    """What ``rule`` reads channels last of the call (or tuple item) ``value``."""
    if not rule.reads_nhwc:
        return []
    return rule.operands(value, values) if rule.operands is not None else _operands(value)


# ---------------------------------------------------------------- rewrite


class _Rewriter:
    def __init__(self, func: Function, chosen: dict[Var, LayoutRule]):
        self.builder = BlockBuilder(analyzer=function_analyzer(func))
        self.chosen = chosen
        uses = _Uses()
        uses.visit_expr(func.body)
        self.uses = uses.count
        self.nhwc_reads: dict[Var, int] = {}
        self.nhwc_of: dict[Var, Var] = {}      # channels-first var -> its channels-last var
        self.bound: dict[Var, Expr] = {}       # var -> its value (to read transposes through)
        self.values = {b.var: b.value for block in func.body.blocks for b in block.bindings}
        self.absorbed = {a for v, rule in chosen.items() if rule.absorbs is not None
                         for a in rule.absorbs(self.values[v], self.values)}

    def run(self, func: Function) -> Function:
        self._count_nhwc_reads(func)
        blocks = []
        for block in func.body.blocks:
            self.bindings: list = []
            self.entry: dict[Var, Var] = {}    # per block: region inputs transposed in
            self.dataflow = isinstance(block, DataflowBlock)
            for b in block.bindings:
                self._binding(b)
            blocks.append(type(block)(tuple(self.bindings)))
        return func.replace(body=func.body.replace(blocks=tuple(blocks)))

    def _count_nhwc_reads(self, func: Function) -> None:
        for block in func.body.blocks:
            for b in block.bindings:
                if b.var not in self.chosen:
                    continue
                for e in _reads(self.chosen[b.var], b.value, self.values):
                    if isinstance(e, Var):
                        self.nhwc_reads[e] = self.nhwc_reads.get(e, 0) + 1

    def _emit(self, var: Var | None, value: Expr, like: Var, span, var_type=None) -> Var:
        """Bind ``value`` to ``var``, or to a new ``<like>_nhwc`` var of
        ``var_type`` (default: like's own type, so it is visible where like is);
        a call among its arguments is bound first, to a var of its own."""
        if isinstance(value, Call) and any(isinstance(a, Call) for a in value.args):
            args = tuple(self._emit(None, a, like, span, var_type) if isinstance(a, Call) else a
                         for a in value.args)
            value = value.replace(args=args)
        value = self.builder.normalize(value)
        if var is None:
            var = (var_type or type(like))(like.name_hint + "_nhwc", struct_info=value.struct_info)
        self.bindings.append(VarBinding(var, value, span=span))
        return var

    def _nhwc(self, expr: Expr, span) -> Expr:
        """``expr`` (a channels-first rank-4 var, or a constant: transposed here) channels last."""
        if expr in self.nhwc_of:
            return self.nhwc_of[expr]
        if isinstance(expr, Constant):      # (a concat's constant operand: RAFT's coordinate grid)
            return Constant(np.ascontiguousarray(np.transpose(np.asarray(expr.data), TO_NHWC)))
        source = _transposed_from(self.bound.get(expr)) if isinstance(expr, Var) else None
        if source is not None:
            return source
        if expr not in self.entry:
            value = make_call("permute_dims", expr, axes=TO_NHWC)
            self.entry[expr] = self._emit(None, value, expr, span, DataflowVar if self.dataflow else Var)
        return self.entry[expr]

    def _binding(self, b) -> None:
        if b.var in self.absorbed:          # looked through by a chosen call's rule, used only there
            return
        rule = self.chosen.get(b.var)
        if rule is None:
            self.bindings.append(b)
            self.bound[b.var] = b.value
            return
        new = rule.rewrite(b.value, _ChannelsLast(self, b.span))
        if not rule.output_nhwc:
            self._emit(b.var, new, b.var, b.span)
            return
        nhwc_var = self._emit(None, new, b.var, b.span)
        self.nhwc_of[b.var] = nhwc_var
        if self.uses.get(b.var, 0) > self.nhwc_reads.get(b.var, 0):
            # read channels first too (outside the region, in a nested scope or as the result)
            self._emit(b.var, make_call("permute_dims", nhwc_var, axes=TO_NCHW), b.var, b.span)


class _ChannelsLast:
    """The ``nhwc`` a rule's rewrite calls: an operand channels last; ``values``: the function's
    var -> value (for rules that look through bindings)."""

    def __init__(self, rewriter: _Rewriter, span):
        self.rewriter, self.span, self.values = rewriter, span, rewriter.values

    def __call__(self, expr: Expr) -> Expr:
        return self.rewriter._nhwc(expr, self.span)


@function_pass(name="ConvertLayout", opt_level=2, requires=("import", "optimize"), produces="optimize")
def convert_layout(func, mod, ctx):
    """Rewrite the convolutional regions of ``func`` channels last (see the module docstring)."""
    chosen = _plan(func)
    if not chosen:      # (every region kept has a gaining call)
        return func
    return _Rewriter(func, chosen).run(func)


__all__ = ["convert_layout", "RULES", "LayoutRule", "Thresholds", "THRESHOLDS", "rule_for", "rules_for"]

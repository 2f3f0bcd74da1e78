"""SimplifyShapes: what import leaves of shape arithmetic, decided at compile time.

The ONNX importer already turns ``Shape -> Gather -> Concat -> Reshape`` into
``R.reshape(x, R.shape([batch, seq, 4, 8]))`` (in this IR a reshape takes a
shape value; no op turns a tensor back into a shape). This pass works on
what is left, with the function's :class:`DimAnalyzer` (its ``dim_ranges``):

- dims in ``R.shape``, ``R.prim_value``, struct infos (of bound vars,
  parameters, the return value, ``sinfo_args``) are simplified:
  ``min(seq, 512)`` is ``seq`` when ``seq <= 512``; a dim whose range is a
  single value becomes that value;
- a ``match_cast`` that provably succeeds disappears (becomes an alias):
  either its value is already of the cast's struct info, or the cast only
  gives new names to dims the value already has -- then the names are
  unified (``y = R.match_cast(x, R.Tensor((m, 4)))`` on ``x: (n, 4)``
  replaces ``m`` by ``n`` everywhere). A cast that could fail (unknown dims,
  an ``ndim``-only value, a dim outside the new name's range) stays;
- int64 arithmetic on shapes (``shape_to_tensor`` results through add,
  subtract, multiply, floor_divide, divide (truncating, where the sign is known), maximum/minimum,
  concat, take, reshape,
  ...) is evaluated symbolically into one ``R.shape_to_tensor(R.shape([...]))``
  (a constant when static);
- a ``where`` whose condition the value ranges decide picks its branch: the
  index normalization ``where(less(i, 0), add(i, n), i)`` of a Gather on
  ``R.range(0, seq, 1)`` (never negative) becomes ``i``.

Unused leftovers (the comparisons, the casts' old values) are left for
DeadCodeElimination, aliases for CanonicalizeBindings.

>>> mod = simplify_shapes(mod)                                  # doctest: +SKIP
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np

from ..ir.block_builder import BlockBuilder
from ..ir.dims import Dim, DimAnalyzer, dim_max, dim_min, free_vars, substitute, sym
from ..ir.expr import (
    Call, Constant, Expr, Function, MatchCast, Op, PrimValue, SeqExpr, ShapeExpr, Tuple, Var,
    VarBinding, identical,
)
from ..ir.struct_info import (
    FuncStructInfo, ObjectStructInfo, PrimStructInfo, ShapeStructInfo, StructInfo, TensorStructInfo, TupleStructInfo,
    is_base_of,
)
from ..ir.visitor import ExprMutator
from ..ir.well_formed import function_analyzer
from ..ops.registry import make_call
from ..runtime.semantics import onnx_slice
from .core.rules import Rule, apply_rules
from .core.infra import function_pass

log = logging.getLogger(__name__)

#: Shape tensors longer than this are not evaluated symbolically.
MAX_CONTENTS = 64


# ---------------------------------------------------------------- dims and struct info
@dataclass
class _Dims:
    """Simplifies dims: substitutions (unified names, single-value ranges), then ranges."""

    analyzer: DimAnalyzer
    subst: dict[str, Dim] = field(default_factory=dict)
    #: dim -> simplified, for the substitutions as they were when it was made
    memo: dict = field(default_factory=dict)
    memo_subst: dict | None = None

    def dim(self, d: Dim) -> Dim:
        if isinstance(d, int):
            return d
        if self.memo_subst != self.subst:       # the same few dims recur on every binding
            self.memo.clear()
            self.memo_subst = dict(self.subst)
        done = self.memo.get(d)
        if done is None:
            done = self.memo[d] = self._simplify(d)
        return done

    def _simplify(self, d: Dim) -> Dim:
        if self.subst and free_vars(d) & self.subst.keys():
            d = substitute(d, self.subst)
        return self.analyzer.simplify(d)

    def dims(self, values):
        if values is None:
            return None
        new = tuple(self.dim(d) for d in values)
        return values if all(a is b or a == b and type(a) is type(b) for a, b in zip(new, values)) else new

    def sinfo(self, s: StructInfo) -> StructInfo:
        if isinstance(s, TensorStructInfo):
            shape = self.dims(s.shape)
            return s if shape is s.shape else TensorStructInfo(shape, s.dtype, s.ndim, s.vdevice)
        if isinstance(s, ShapeStructInfo):
            values = self.dims(s.values)
            return s if values is s.values else ShapeStructInfo(values, s.ndim)
        if isinstance(s, PrimStructInfo) and s.value is not None:
            value = self.dim(s.value)
            return s if value == s.value and type(value) is type(s.value) else PrimStructInfo(s.dtype, value)
        if isinstance(s, TupleStructInfo):
            fields = tuple(self.sinfo(f) for f in s.fields)
            return s if identical(fields, s.fields) else TupleStructInfo(fields)
        if isinstance(s, FuncStructInfo):
            params = None if s.params is None else tuple(self.sinfo(p) for p in s.params)
            ret = self.sinfo(s.ret)
            if ret is s.ret and (params is None or identical(params, s.params)):
                return s
            return FuncStructInfo(params, ret, s.purity)
        return s


def unify_cast(cast: StructInfo, value: StructInfo, defined, dims: _Dims) -> dict[str, Dim] | str:
    """The names a ``match_cast`` to ``cast`` binds when it provably succeeds
    on a value of struct info ``value``, or the reason it may fail."""
    pairs: list[tuple[Dim, Dim]] = []
    reason = _pair_dims(cast, value, pairs)
    if reason:
        return reason
    bound: dict[str, Dim] = {}
    for c, v in pairs:                       # new names first: a cast binds them
        c = dims.dim(c)
        names = free_vars(c)
        if len(names) == 1 and not names & set(defined):
            (name,) = names
            if c == sym(name) and name not in bound:
                lo, hi = dims.analyzer.range_of(name)
                if not dims.analyzer.prove_ge(v, lo) or (hi is not None and not dims.analyzer.prove_le(v, hi)):
                    return f"{v} may be outside the range [{lo}, {hi}] of the new dim {name}"
                bound[name] = v
    for c, v in pairs:
        c = dims.dim(substitute(c, bound))
        if free_vars(c) - set(defined):
            return f"the dim {c} uses a new name that is not a plain dim"
        if not dims.analyzer.prove_equal(c, v):
            return f"the dim {c} is not provably {v}"
    return bound


def _pair_dims(cast, value, pairs) -> str | None:
    if isinstance(cast, ObjectStructInfo):
        return None
    if type(cast) is not type(value):
        return f"a {type(value).__name__} is cast to a {type(cast).__name__}"
    if isinstance(cast, TensorStructInfo):
        if cast.dtype is not None and cast.dtype != value.dtype:
            return f"dtype {value.dtype} is not provably {cast.dtype}"
        if cast.vdevice != value.vdevice:
            return f"device {value.vdevice} is not {cast.vdevice}"
        return _pair_shapes(cast.shape, cast.ndim, value.shape, value.ndim, pairs)
    if isinstance(cast, ShapeStructInfo):
        return _pair_shapes(cast.values, cast.ndim, value.values, value.ndim, pairs)
    if isinstance(cast, PrimStructInfo):
        if cast.dtype != value.dtype:
            return f"dtype {value.dtype} is not {cast.dtype}"
        if cast.value is None:
            return None
        if value.value is None:
            return "the value is only known at run time"
        pairs.append((cast.value, value.value))
        return None
    if isinstance(cast, TupleStructInfo):
        if len(cast.fields) != len(value.fields):
            return "the tuples differ in length"
        for c, v in zip(cast.fields, value.fields):
            reason = _pair_dims(c, v, pairs)
            if reason:
                return reason
        return None
    return "only tensors, shapes, prim values and tuples are compared"


def _pair_shapes(cshape, cndim, vshape, vndim, pairs) -> str | None:
    if cndim != -1 and cndim != vndim:
        return f"rank {vndim} is not provably {cndim}"
    if cshape is None:
        return None
    if vshape is None:
        return "the value's dims are only known at run time"
    pairs.extend(zip(cshape, vshape))
    return None


# ---------------------------------------------------------------- values of shape tensors
class _Values:
    """What is known at compile time of small int tensors and bool tensors:
    symbolic contents, bounds, truth. Looks through the bound values."""

    def __init__(self, dims: _Dims):
        self.dims = dims
        self.bound: dict[Var, Expr] = {}
        self._memo: dict[Var, tuple | None] = {}

    def value_of(self, expr):
        return self.bound.get(expr, expr) if isinstance(expr, Var) else expr

    def contents(self, expr) -> tuple[Dim, ...] | None:
        """The flat contents of a 0-d or 1-d int tensor, when known."""
        if isinstance(expr, Var):
            if expr not in self._memo:
                self._memo[expr] = self._contents(expr)
            return self._memo[expr]
        return self._contents(expr)

    def _contents(self, expr) -> tuple[Dim, ...] | None:
        sinfo = expr.struct_info
        # int64 only: shape arithmetic never wraps around in it (int32 could)
        if not isinstance(sinfo, TensorStructInfo) or sinfo.dtype != "int64" or sinfo.ndim > 1:
            return None
        expr = self.value_of(expr)
        if isinstance(expr, Constant):
            return tuple(int(v) for v in expr.data.reshape(-1)) if expr.data.size <= MAX_CONTENTS else None
        if not isinstance(expr, Call) or not isinstance(expr.op, Op):
            return None
        fn = _CONTENTS.get(expr.op.name)
        out = fn(self, expr) if fn else None
        if out is None or len(out) > MAX_CONTENTS:
            return None
        return tuple(self.dims.dim(d) for d in out)

    def bounds(self, expr) -> tuple[Dim | None, Dim | None]:
        """A lower and an upper bound of every element of an int tensor."""
        values = self.contents(expr)
        ana = self.dims.analyzer
        if values:
            lo = [ana.lower_bound(v) for v in values]
            hi = [ana.upper_bound(v) for v in values]
            return (None if None in lo else min(lo)), (None if None in hi else max(hi))
        expr = self.value_of(expr)
        if isinstance(expr, Constant) and expr.data.dtype.kind in "iu" and expr.data.size:
            return int(expr.data.min()), int(expr.data.max())
        if isinstance(expr, Call) and expr.op is Op.get("range"):
            start, stop, step = (a.value if isinstance(a, PrimValue) else None for a in expr.args)
            if isinstance(step, int) and not isinstance(start, float) and start is not None and step > 0:
                return start, (None if stop is None or isinstance(stop, float) else stop - 1)
        return None, None

    def truth(self, expr) -> bool | None:
        """True / False when every element of a bool tensor is known to be so."""
        expr = self.value_of(expr)
        if isinstance(expr, Constant) and expr.data.dtype == np.bool_ and expr.data.size:
            return bool(expr.data.all()) if expr.data.all() or not expr.data.any() else None
        if not isinstance(expr, Call) or not isinstance(expr.op, Op):
            return None
        name = expr.op.name
        if name == "logical_not":
            inner = self.truth(expr.args[0])
            return None if inner is None else not inner
        if name in _COMPARE:
            (alo, ahi), (blo, bhi) = self.bounds(expr.args[0]), self.bounds(expr.args[1])
            return _COMPARE[name](self.dims.analyzer, alo, ahi, blo, bhi)
        return None


def _known(*bounds) -> bool:
    return all(b is not None for b in bounds)


def _less(ana, alo, ahi, blo, bhi):
    if _known(ahi, blo) and ana.prove_lt(ahi, blo):
        return True
    if _known(alo, bhi) and ana.prove_ge(alo, bhi):
        return False
    return None


def _less_equal(ana, alo, ahi, blo, bhi):
    if _known(ahi, blo) and ana.prove_le(ahi, blo):
        return True
    if _known(alo, bhi) and ana.prove_gt(alo, bhi):
        return False
    return None


def _flip(fn):
    return lambda ana, alo, ahi, blo, bhi: fn(ana, blo, bhi, alo, ahi)


_COMPARE = {"less": _less, "less_equal": _less_equal, "greater": _flip(_less), "greater_equal": _flip(_less_equal)}


def _elementwise(op):
    def fn(values: _Values, call: Call):
        a, b = values.contents(call.args[0]), values.contents(call.args[1])
        if a is None or b is None:
            return None
        if len(a) == 1:
            a = a * len(b)
        if len(b) == 1:
            b = b * len(a)
        if len(a) != len(b):
            return None
        try:
            return tuple(op(x, y) for x, y in zip(a, b))
        except Exception:  # e.g. division by a symbolic or non-positive dim
            return None
    return fn


def _floor_div(x, y):
    if not isinstance(y, int) or y <= 0:
        raise ValueError("divisor")
    return x // y


def _trunc_divide(values: _Values, call: Call):
    """ONNX Div on int64 (``divide``) truncates toward zero: a dim by a constant where the
    dividend's range allows (:meth:`DimAnalyzer.trunc_div`)."""
    ana = values.dims.analyzer

    def div(x, c):
        q = ana.trunc_div(x, c) if isinstance(c, int) and c != 0 else None
        if q is None:
            raise ValueError("divisor, or a dividend that may be too negative")
        return q
    return _elementwise(div)(values, call)


def _concat(values: _Values, call: Call):
    parts = values.value_of(call.args[0])
    if not isinstance(parts, Tuple):
        return None
    out = []
    for p in parts.fields:
        c = values.contents(p)
        if c is None or p.struct_info.ndim != 1:
            return None
        out.extend(c)
    return tuple(out)


def _take(values: _Values, call: Call):
    data, idx = values.contents(call.args[0]), values.contents(call.args[1])
    if data is None or idx is None or not all(isinstance(i, int) and -len(data) <= i < len(data) for i in idx):
        return None
    return tuple(data[i] for i in idx)


def _strided_slice(values: _Values, call: Call):
    data = values.contents(call.args[0])
    if data is None or call.args[0].struct_info.ndim != 1:
        return None
    strides = call.attrs.get("strides") or (1,) * len(call.attrs["begin"])
    (b,), (e,), (s,) = call.attrs["begin"], call.attrs["end"], strides
    return tuple(data[onnx_slice(b, e, s, len(data))])


def _same(values: _Values, call: Call):
    return values.contents(call.args[0])


def _astype(values: _Values, call: Call):
    return values.contents(call.args[0]) if call.attrs["dtype"] == "int64" else None


_CONTENTS = {
    "shape_to_tensor": lambda values, call: values.value_of(call.args[0]).values
    if isinstance(values.value_of(call.args[0]), ShapeExpr) else None,
    "add": _elementwise(lambda x, y: x + y),
    "subtract": _elementwise(lambda x, y: x - y),
    "multiply": _elementwise(lambda x, y: x * y),
    "floor_divide": _elementwise(_floor_div),
    "divide": _trunc_divide,
    "maximum": _elementwise(dim_max),
    "minimum": _elementwise(dim_min),
    "concat": _concat,
    "take": _take,
    "strided_slice": _strided_slice,
    "reshape": _same, "expand_dims": _same, "squeeze": _same, "flatten": _same,
    "astype": _astype,
}


# ---------------------------------------------------------------- rules on bound values
def _check_shape_arithmetic(call: Call, values: _Values) -> str | None:
    sinfo = call.struct_info
    if call.op.name == "shape_to_tensor":
        return "already a shape_to_tensor"
    if not isinstance(sinfo, TensorStructInfo) or sinfo.dtype != "int64" or sinfo.shape is None \
            or sinfo.ndim > 1:
        return f"the result {sinfo} is not a 0-d or 1-d int64 tensor"
    if values.contents(call) is None:
        return "the contents are not known at compile time"
    return None


def _rewrite_shape_arithmetic(call: Call, values: _Values) -> Expr:
    contents = values.contents(call)
    scalar = call.struct_info.ndim == 0
    if all(isinstance(d, int) for d in contents):
        data = np.array(contents, np.int64)
        return Constant(data.reshape(()) if scalar else data)
    return make_call("shape_to_tensor", ShapeExpr(contents), scalar=scalar)


def _chosen_branch(call: Call, values: _Values):
    truth = values.truth(call.args[0])
    return None if truth is None else call.args[1] if truth else call.args[2]


def _check_where(call: Call, values: _Values) -> str | None:
    branch = _chosen_branch(call, values)
    if branch is None:
        return "the condition is not decided at compile time"
    out, sinfo = call.struct_info, branch.struct_info
    if not isinstance(sinfo, TensorStructInfo) or sinfo.shape is None or out.shape is None \
            or sinfo.dtype != out.dtype or len(sinfo.shape) != len(out.shape) \
            or not all(values.dims.analyzer.prove_equal(a, b) for a, b in zip(sinfo.shape, out.shape)):
        return f"the chosen operand {sinfo} would need a broadcast to {out}"
    return None


def _is_op(*names):
    ops = {Op.get(n) for n in names}
    return lambda e: isinstance(e, Call) and e.op in ops


RULES = (
    Rule("WhereOfDecidedCondition", _is_op("where"), _check_where, lambda c, v: _chosen_branch(c, v)),
    Rule("SymbolicShapeArithmetic", _is_op(*_CONTENTS), _check_shape_arithmetic, _rewrite_shape_arithmetic),
)


# ---------------------------------------------------------------- the mutator
class _Simplifier(ExprMutator):
    def __init__(self, func: Function):
        super().__init__(BlockBuilder(analyzer=function_analyzer(func)))
        analyzer = self.builder.analyzer
        singles = {name: lo for name, lo, hi in func.attrs.get("dim_ranges", ()) if lo == hi}
        self.dims = _Dims(analyzer, dict(singles))
        self.values = _Values(self.dims)
        self.defined: set[str] = set()
        self.unified: set[str] = set(singles)

    def visit_function_(self, func: Function) -> Expr:
        params = []
        for p in func.params:
            sinfo = self.dims.sinfo(p.struct_info)
            new = p if sinfo is p.struct_info else type(p)(p.name_hint, struct_info=sinfo)
            if new is not p:
                self.var_remap[p] = new
            self.defined |= sinfo.dim_vars()
            params.append(new)
        params = tuple(params)
        with self.builder.function_scope(params):
            body = ExprMutator.visit_seq_expr_(self, func.body)   # names bound here hold for the return
        ret = self.dims.sinfo(func.ret_struct_info)
        if not is_base_of(ret, body.struct_info, self.builder.analyzer):
            ret = body.struct_info
        attrs = func.attrs
        ranges = attrs.get("dim_ranges", ())
        kept = tuple(r for r in ranges if r[0] not in self.unified)
        if kept != ranges:
            attrs = {**attrs, "dim_ranges": kept} if kept else {k: v for k, v in attrs.items() if k != "dim_ranges"}
        if identical(params, func.params) and body is func.body and ret is func.ret_struct_info \
                and attrs is func.attrs:
            return func
        return Function(params, body, ret, func.is_pure, attrs)

    def visit_seq_expr_(self, seq: SeqExpr) -> SeqExpr:
        # an If branch: names it binds or unifies stay in it
        saved = dict(self.dims.subst), set(self.defined)
        try:
            return super().visit_seq_expr_(seq)
        finally:
            self.dims.subst, self.defined = saved

    def visit_shape_expr_(self, s: ShapeExpr) -> Expr:
        values = self.dims.dims(s.values)
        return s if values is s.values else ShapeExpr(values)

    def visit_prim_value_(self, p: PrimValue) -> Expr:
        if not p.dtype.startswith(("int", "uint")):
            return p
        value = self.dims.dim(p.value)
        return p if value == p.value and type(value) is type(p.value) else PrimValue(value, p.dtype)

    def visit_call_(self, call: Call) -> Expr:
        new = super().visit_call_(call)
        sinfo_args = tuple(self.dims.sinfo(s) for s in call.sinfo_args)
        if not identical(sinfo_args, call.sinfo_args):
            new = Call(new.op, new.args, new.attrs, sinfo_args)
        return new

    def visit_var_binding_(self, binding: VarBinding) -> None:
        value = self.visit_expr(binding.value)
        if value is not binding.value:
            value = self.builder.normalize(value)
        rewritten = apply_rules(RULES, value, self.values)
        if rewritten is not None:
            log.debug("simplified %s", binding.var.name_hint)
            value = self.builder.normalize(rewritten)
        self._emit(binding, binding.var, value)

    def visit_match_cast_(self, binding: MatchCast) -> None:
        value = self.visit_expr(binding.value)
        if value is not binding.value:
            value = self.builder.normalize(value)
        bound = unify_cast(binding.struct_info, value.struct_info, self.defined, self.dims)
        if isinstance(bound, str):
            log.debug("keeping the match_cast of %s: %s", binding.var.name_hint, bound)
            cast = self.dims.sinfo(binding.struct_info)
            self.defined |= cast.dim_vars()
            if cast is binding.struct_info and value is binding.value:
                self.builder.emit_binding(binding)
                self.values.bound[binding.var] = value
                return
            var = type(binding.var)(binding.var.name_hint, struct_info=cast)
            self.var_remap[binding.var] = var
            self.builder.emit_binding(MatchCast(var, value, cast, span=binding.span))
            self.values.bound[var] = value
            return
        self.dims.subst.update(bound)
        self.unified |= bound.keys()
        self._emit(VarBinding(binding.var, binding.value, span=binding.span), binding.var, value,
                   declared=self.dims.sinfo(binding.struct_info))

    def _emit(self, binding: VarBinding, var: Var, value: Expr, declared: StructInfo | None = None) -> None:
        if declared is None:   # a rewritten value: the var takes its (simplified) struct info
            declared = var.struct_info if value is binding.value else value.struct_info
        declared = self.dims.sinfo(declared)
        if not is_base_of(declared, value.struct_info, self.builder.analyzer):
            declared = self.dims.sinfo(value.struct_info)
        if declared != var.struct_info:
            new_var = type(var)(var.name_hint, struct_info=declared)
            self.var_remap[var] = new_var
            var = new_var
        if var is binding.var and value is binding.value and isinstance(binding, VarBinding):
            self.builder.emit_binding(binding)
        else:
            self.builder.emit_binding(VarBinding(var, value, span=binding.span))
        self.values.bound[var] = value


@function_pass(name="SimplifyShapes", opt_level=1, requires=("import", "optimize"), produces="optimize")
def simplify_shapes(func, mod, ctx):
    return _Simplifier(func).visit_expr(func)


__all__ = ["simplify_shapes", "unify_cast"]

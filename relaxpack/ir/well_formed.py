"""The well-formedness checker: the invariants every pass must keep.

- every var is defined once, before its uses, and used only in its scope
  (a DataflowVar never leaves its dataflow block; If branches are scopes);
- DataflowVars are bound only in dataflow blocks, and dataflow blocks hold
  no impure calls;
- every expression has struct info, a call's struct info is what its op's
  inference gives, and a bound var's struct info describes its value;
- symbolic dims used in the body are defined by parameters or match casts;
- calls to module functions name functions that exist.

``well_formed_errors(mod)`` lists the problems; ``check_well_formed(mod)``
raises one :class:`IRError` naming them all. Checking after every pass
re-infers every call, most of them unchanged since the last check (IR
nodes are immutable and passes keep what they do not rewrite): a ``memo``
carried from one check to the next reuses the inference of the very same
call object under the same dim ranges.
"""

from __future__ import annotations

from ..errors import IRError, RelaxpackError
from .block_builder import BlockBuilder, first_impure_call, is_pure_expr
from .dims import DimAnalyzer
from .expr import (
    BindingBlock, Call, DataflowBlock, DataflowVar, Function, GlobalVar, MatchCast, SeqExpr,
    ShapeExpr, Var,
)
from .module import IRModule
from .struct_info import is_base_of
from .visitor import ExprVisitor


def function_analyzer(func: Function) -> DimAnalyzer:
    """A DimAnalyzer with the ranges recorded in ``func.attrs["dim_ranges"]``."""
    analyzer = DimAnalyzer()
    for name, lo, hi in func.attrs.get("dim_ranges", ()):
        analyzer.set_range(name, lo, hi)
    return analyzer


class _Checker(ExprVisitor):
    def __init__(self, mod: IRModule, fname: str, func: Function, memo: tuple[dict, dict] | None = None):
        self.mod, self.fname = mod, fname
        self.ranges = tuple(func.attrs.get("dim_ranges", ()))
        self.memo_in, self.memo_out = memo if memo is not None else ({}, None)
        self.errors: list[str] = []
        self.defined_once: set[Var] = set()
        self.scopes: list[set[Var]] = [set()]
        self.dataflow_scope: set[Var] | None = None
        self.dims: set[str] = set()
        self.builder = BlockBuilder(analyzer=function_analyzer(func))
        self.where = ""

    def error(self, msg: str) -> None:
        self.errors.append(f"{self.fname}: {msg}{self.where}")

    # definitions and uses
    def define(self, var: Var) -> None:
        if var in self.defined_once:
            self.error(f"var {var.name_hint!r} is defined twice")
        self.defined_once.add(var)
        if var.struct_info is None:
            self.error(f"var {var.name_hint!r} has no struct info")
        if isinstance(var, DataflowVar):
            if self.dataflow_scope is None:
                self.error(f"DataflowVar {var.name_hint!r} is bound outside a dataflow block")
            else:
                self.dataflow_scope.add(var)
        else:
            self.scopes[-1].add(var)

    def visit_var_def(self, var: Var) -> None:
        self.define(var)

    def visit_var_(self, var: Var) -> None:
        if isinstance(var, DataflowVar):
            if var not in self.defined_once:
                self.error(f"DataflowVar {var.name_hint!r} is used before its definition")
            elif self.dataflow_scope is None or var not in self.dataflow_scope:
                self.error(f"DataflowVar {var.name_hint!r} is used outside its dataflow block")
            return
        if not any(var in scope for scope in self.scopes):
            self.error(f"var {var.name_hint!r} is used before its definition or outside its scope")

    def visit_global_var_(self, g: GlobalVar) -> None:
        if g.name_hint not in self.mod:
            self.error(f"call of unknown function {g.name_hint!r}")

    def visit_shape_expr_(self, s: ShapeExpr) -> None:
        self.check_dims(s.struct_info.dim_vars(), "R.shape")

    def check_dims(self, names, what: str) -> None:
        undefined = sorted(set(names) - self.dims)
        if undefined:
            self.error(f"{what} uses symbolic dim(s) {undefined} that no parameter or match_cast defines")

    # structure
    def visit_seq_expr_(self, seq: SeqExpr) -> None:
        self.scopes.append(set())
        super().visit_seq_expr_(seq)
        self.scopes.pop()

    def visit_binding_block_(self, block: BindingBlock) -> None:
        is_dataflow = isinstance(block, DataflowBlock)
        self.dataflow_scope = set() if is_dataflow else None
        for b in block.bindings:
            self.where = f" (in the binding of {b.var.name_hint!r}{_span(b)})"
            if is_dataflow and not is_pure_expr(b.value):
                self.error("impure call inside a dataflow block")
            self.visit_binding(b)
            self.check_binding(b)
        self.where = ""
        self.dataflow_scope = None

    def visit_match_cast_(self, binding: MatchCast) -> None:
        self.visit_expr(binding.value)
        self.dims |= binding.struct_info.dim_vars()
        self.visit_var_def(binding.var)

    def visit_call_(self, call: Call) -> None:
        super().visit_call_(call)
        if call.struct_info is None:
            self.error("a call has no struct info")
            return
        known = self.memo_in.get(id(call))
        if known is not None and known[0] is call and known[1] == self.ranges:
            inferred = known[2]
        else:
            try:
                inferred = self.builder.infer_call(call)
            except RelaxpackError as err:
                self.error(f"struct info inference fails: {err}")
                return
        if self.memo_out is not None:
            self.memo_out[id(call)] = (call, self.ranges, inferred)
        if inferred != call.struct_info:
            self.error(f"call's struct info {call.struct_info} differs from its inference {inferred}")

    def check_binding(self, b) -> None:
        value_sinfo = b.value.struct_info
        if value_sinfo is None:
            self.error("value has no struct info")
            return
        if isinstance(b, MatchCast):
            return  # checked at run time
        var_sinfo = b.var.struct_info
        if var_sinfo is not None:
            self.check_dims(var_sinfo.dim_vars(), "the var's struct info")
        if var_sinfo is not None and not self.describes(b, var_sinfo, value_sinfo):
            self.error(f"var's struct info {var_sinfo} does not describe its value's {value_sinfo}")

    def describes(self, b, var_sinfo, value_sinfo) -> bool:
        """``is_base_of(var_sinfo, value_sinfo)``, memoized per binding object like calls."""
        known = self.memo_in.get(id(b))
        if known is not None and known[0] is b and known[1] == self.ranges:
            ok = known[2]
        else:
            ok = is_base_of(var_sinfo, value_sinfo, self.builder.analyzer)
        if self.memo_out is not None:
            self.memo_out[id(b)] = (b, self.ranges, ok)
        return ok

    def check_purity(self, func: Function) -> None:
        impure = first_impure_call(func.body)
        if func.is_pure and impure is not None:
            self.error(f"the function is declared pure but calls impure {impure}")

    def check_function(self, func: Function) -> None:
        self.check_purity(func)
        for p in func.params:
            self.dims |= p.struct_info.dim_vars() if p.struct_info else set()
        self.visit_function_(func)
        body_sinfo = func.body.body.struct_info
        if body_sinfo is not None and not is_base_of(func.ret_struct_info, body_sinfo, self.builder.analyzer):
            self.error(f"return struct info {func.ret_struct_info} does not describe the body's {body_sinfo}")
        ranged = {name for name, _, _ in func.attrs.get("dim_ranges", ())}
        self.check_dims(ranged, "dim_ranges")


def _span(binding) -> str:
    return f" from {binding.span}" if binding.span is not None else ""


def well_formed_errors(mod: IRModule, memo: dict | None = None) -> list[str]:
    """The problems of ``mod``. ``memo`` (an initially empty dict, passed to
    every check of a pipeline) is left holding this check's call inferences
    for the next one; it keeps only calls of ``mod`` alive."""
    errors = []
    fresh: dict | None = {} if memo is not None else None
    for name, func in mod.items():
        checker = _Checker(mod, name, func, (memo or {}, fresh))
        checker.check_function(func)
        errors.extend(checker.errors)
    if memo is not None:
        memo.clear()
        memo.update(fresh)
    return errors


def check_well_formed(mod: IRModule) -> None:
    errors = well_formed_errors(mod)
    if errors:
        raise IRError("module is not well formed:\n  " + "\n  ".join(errors))


__all__ = ["check_well_formed", "well_formed_errors", "function_analyzer"]

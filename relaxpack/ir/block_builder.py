"""BlockBuilder: builds functions and blocks, normalizing as it goes.

Every emitted expression is put in A-normal form (nested calls become their
own bindings) and gets its struct info from its op's inference function, so
shape errors surface at the binding that causes them, with its span.

>>> bb = BlockBuilder()                                              # doctest: +SKIP
>>> x = Var("x", TensorStructInfo(("n", 4), "float32"))              # doctest: +SKIP
>>> with bb.function("main", [x]):                                   # doctest: +SKIP
...     with bb.dataflow():
...         lv = bb.emit(make_call("exp", x))
...         gv = bb.emit_output(lv)
...     bb.emit_func_output(gv)
>>> mod = bb.get()                                                   # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

from ..errors import IRError, RelaxpackError, ShapeError
from .dims import DimAnalyzer
from .gradual import infer_assuming
from .expr import (
    Binding, BindingBlock, Call, Constant, DataflowBlock, DataflowVar, Expr, ExternFunc,
    Function, GlobalVar, If, MatchCast, Op, PrimValue, SeqExpr, ShapeExpr, Span, StringImm,
    Tuple, TupleGetItem, Var, VarBinding, identical,
)
from .module import IRModule
from .op import get_op_def
from .struct_info import (
    FuncStructInfo, ObjectStructInfo, StructInfo, TupleStructInfo, erase_to_well_defined,
    unify_struct_info,
)

#: Expressions that may appear as call arguments in A-normal form.
LEAF_TYPES = (Var, Constant, ShapeExpr, PrimValue, StringImm, GlobalVar, ExternFunc, Op)


def is_leaf(expr: Expr) -> bool:
    if isinstance(expr, Tuple):
        return all(is_leaf(f) for f in expr.fields)
    return isinstance(expr, LEAF_TYPES)


@dataclass
class _BlockFrame:
    is_dataflow: bool
    bindings: list[Binding] = field(default_factory=list)


@dataclass
class _ScopeFrame:
    blocks: list[BindingBlock] = field(default_factory=list)
    block: _BlockFrame | None = None


@dataclass
class _FunctionFrame:
    name: str
    params: list[Var]
    attrs: dict[str, Any]
    pure: bool
    scope: _ScopeFrame = field(default_factory=_ScopeFrame)
    ret_struct_info: StructInfo | None = None
    output: Function | None = None


def dim_ranges_attr(analyzer: DimAnalyzer, names) -> tuple:
    """The ``dim_ranges`` function attribute: (name, lo, hi) of bounded dims."""
    out = []
    for name in sorted(names):
        lo, hi = analyzer.range_of(name)
        if (lo, hi) != (0, None):
            out.append((name, lo, hi))
    return tuple(out)


class BlockBuilder:
    """Builds an :class:`IRModule` binding by binding (Relax's BlockBuilder)."""

    def __init__(self, mod: IRModule | None = None, analyzer: DimAnalyzer | None = None,
                 gradual: bool = False):
        """``gradual=True``: an equality of dims that an op needs and the
        analyzer can neither prove nor refute is assumed and cast for, a
        run-time check (ir/gradual.py); by default it is a ShapeError."""
        self.gradual = gradual
        self._functions: dict[str, Function] = dict(mod.functions) if mod else {}
        self._mod_attrs = dict(mod.attrs) if mod else {}
        self.analyzer = analyzer or DimAnalyzer()
        self._func_stack: list[_FunctionFrame] = []
        self._scopes: list[_ScopeFrame] = []
        self._span: Span | None = None
        self._name_counter = 0
        self._bindings: dict[Var, Binding] = {}

    # ------------------------------------------------------------ module
    def add_func(self, func: Function, name: str) -> GlobalVar:
        if name in self._functions and self._functions[name] is not func:
            raise IRError(f"module already has a function named {name!r}")
        self._functions[name] = func
        return GlobalVar(name, struct_info=func.struct_info)

    def update_func(self, name: str, func: Function) -> None:
        self._functions[name] = func

    def get_func(self, name: str) -> Function | None:
        """The function ``name`` built so far (also while another is still being built)."""
        return self._functions.get(name)

    def remove_func(self, name: str) -> None:
        """Drop a finished function (e.g. a draft the importer built and then replaced)."""
        self._functions.pop(name, None)

    def func_names(self) -> frozenset[str]:
        return frozenset(self._functions)

    def get(self) -> IRModule:
        if self._func_stack:
            raise IRError(f"function {self._func_stack[-1].name!r} is still being built")
        return IRModule(self._functions, self._mod_attrs)

    # ------------------------------------------------------------ frames
    @contextlib.contextmanager
    def function(self, name: str, params: Sequence[Var] = (), attrs: Mapping[str, Any] | None = None,
                 pure: bool | None = None) -> Iterator[None]:
        """Build function ``name``; end it with :meth:`emit_func_output`.

        ``pure=None`` makes the function pure unless its body calls something
        impure; ``pure=True`` with an impure call in the body is an error.
        """
        for p in params:
            if not isinstance(p, Var) or isinstance(p, DataflowVar):
                raise IRError(f"parameter {p!r} of {name!r} must be a Var")
            if p.struct_info is None:
                raise IRError(f"parameter {p.name_hint!r} of {name!r} has no struct info")
        frame = _FunctionFrame(name, list(params), dict(attrs or {}), pure)
        self._func_stack.append(frame)
        self._scopes.append(frame.scope)
        try:
            yield
        finally:
            self._func_stack.pop()
            self._scopes.pop()
        if frame.output is None:
            raise IRError(f"function {name!r} ended without emit_func_output")
        self.add_func(frame.output, name)

    @contextlib.contextmanager
    def function_scope(self, params: Sequence[Var]) -> Iterator[None]:
        """Rewrite inside a function whose parameters are ``params`` (for
        :class:`ExprMutator`): nothing is added to the module."""
        self._func_stack.append(_FunctionFrame("<rewrite>", list(params), {}, True))
        try:
            yield
        finally:
            self._func_stack.pop()

    @contextlib.contextmanager
    def dataflow(self) -> Iterator[None]:
        self.begin_block(is_dataflow=True)
        try:
            yield
        finally:
            block = self.end_block()
        if block.bindings:
            self._scope.blocks.append(block)

    def begin_scope(self) -> None:
        """Start a nested sequence of blocks (e.g. an If branch)."""
        self._scopes.append(_ScopeFrame())

    def discard_scope(self) -> None:
        """Drop the innermost scope begun with :meth:`begin_scope` and its bindings (a branch
        whose conversion failed)."""
        self._scopes.pop()

    def end_scope(self, body: Expr) -> SeqExpr:
        body = self.normalize(body)
        self._flush_block()
        seq = SeqExpr(tuple(self._scope.blocks), body)
        self._scopes.pop()          # last: a scope is popped here only once all else succeeded
        return seq

    def begin_block(self, is_dataflow: bool) -> None:
        self._flush_block()
        self._scope.block = _BlockFrame(is_dataflow)

    def end_block(self) -> BindingBlock:
        """End the current block and return it (it is not added to the scope)."""
        frame = self._scope.block
        if frame is None:
            raise IRError("end_block without begin_block")
        self._scope.block = None
        cls = DataflowBlock if frame.is_dataflow else BindingBlock
        return cls(tuple(frame.bindings))

    def add_block(self, block: BindingBlock) -> None:
        self._flush_block()
        if block.bindings:
            self._scope.blocks.append(block)

    @contextlib.contextmanager
    def span(self, *sources: str) -> Iterator[None]:
        """Bindings emitted inside record ``sources`` (ONNX node names) as their span."""
        saved, self._span = self._span, Span(tuple(sources))
        try:
            yield
        finally:
            self._span = saved

    @property
    def _scope(self) -> _ScopeFrame:
        if not self._scopes:
            raise IRError("no function is being built")
        return self._scopes[-1]

    def _flush_block(self) -> None:
        scope = self._scope
        if scope.block is not None:
            block = self.end_block()
            if block.bindings:
                scope.blocks.append(block)

    def _current_block(self) -> _BlockFrame:
        scope = self._scope
        if scope.block is None:
            scope.block = _BlockFrame(is_dataflow=False)
        return scope.block

    @property
    def in_dataflow(self) -> bool:
        block = self._scope.block
        return block is not None and block.is_dataflow

    # ------------------------------------------------------------ emitting
    def emit(self, expr: Expr, name_hint: str = "lv", span: Span | None = None) -> Var:
        """Bind ``expr`` (normalized) to a fresh var and return the var."""
        value = self.normalize(expr)
        var_type = DataflowVar if self.in_dataflow else Var
        var = var_type(name_hint, struct_info=value.struct_info)
        self._append(VarBinding(var, value, span=span or self._span))
        return var

    def emit_output(self, expr: Expr, name_hint: str = "gv") -> Var:
        """Inside a dataflow block: bind ``expr`` to a Var visible after the block."""
        if not self.in_dataflow:
            raise IRError("emit_output is only allowed inside a dataflow block")
        value = self.normalize(expr)
        var = Var(name_hint, struct_info=value.struct_info)
        self._append(VarBinding(var, value, span=self._span))
        return var

    def match_cast(self, expr: Expr, struct_info: StructInfo, name_hint: str = "lv") -> Var:
        value = self.normalize(expr)
        var_type = DataflowVar if self.in_dataflow else Var
        var = var_type(name_hint, struct_info=struct_info)
        self._append(MatchCast(var, value, struct_info, span=self._span))
        return var

    def emit_binding(self, binding: Binding) -> None:
        """Append an already normalized binding as it is."""
        self._append(binding)

    def _append(self, binding: Binding) -> None:
        block = self._current_block()
        if isinstance(binding.var, DataflowVar) and not block.is_dataflow:
            raise IRError(f"DataflowVar {binding.var.name_hint!r} bound outside a dataflow block")
        self._check_purity(binding)
        block.bindings.append(binding)
        self._bindings[binding.var] = binding

    def lookup_binding(self, var: Var) -> Binding | None:
        """The binding this builder emitted for ``var`` (None for a parameter
        or a var bound elsewhere), as Relax's ``BlockBuilder.lookup_binding``."""
        return self._bindings.get(var)

    def _check_purity(self, binding: Binding) -> None:
        if self.in_dataflow and not is_pure_expr(binding.value):
            raise IRError(f"impure call {_callee_name(binding.value)} inside a dataflow block")

    def emit_func_output(self, output: Expr, ret_struct_info: StructInfo | None = None) -> None:
        if not self._func_stack or self._scopes[-1] is not self._func_stack[-1].scope:
            raise IRError("emit_func_output outside a function (or inside a nested scope)")
        frame = self._func_stack[-1]
        if self.in_dataflow:
            raise IRError("emit_func_output inside a dataflow block; end the block first")
        body = self.end_scope_of_function(output)
        ret = ret_struct_info or body.struct_info
        attrs = dict(frame.attrs)
        ranges = dim_ranges_attr(self.analyzer, _sinfo_vars(frame.params) | ret.dim_vars())
        if ranges:
            attrs["dim_ranges"] = ranges
        impure = first_impure_call(body)
        if frame.pure and impure is not None:
            raise IRError(f"function {frame.name!r} is declared pure but calls impure {impure}")
        pure = frame.pure if frame.pure is not None else impure is None
        frame.output = Function(tuple(frame.params), body, ret, pure, attrs)

    def end_scope_of_function(self, output: Expr) -> SeqExpr:
        body = self.normalize(output)
        if not is_leaf(body):
            body = self.emit(body, "gv")
        self._flush_block()
        scope = self._scope
        seq = SeqExpr(tuple(scope.blocks), body)
        scope.blocks = []
        return seq

    # ------------------------------------------------------------ normalization
    def normalize(self, expr: Expr) -> Expr:
        """Fill in struct info, emitting nested non-leaf arguments first (ANF)."""
        if isinstance(expr, Call):
            return self._normalize_call(expr)
        if isinstance(expr, Tuple):
            fields = tuple(self._normalize_arg(f) for f in expr.fields)
            if expr.struct_info is not None and identical(fields, expr.fields):
                return expr
            return Tuple(fields)
        if isinstance(expr, TupleGetItem):
            tup = self._normalize_arg(expr.tuple_value)
            if not isinstance(tup.struct_info, TupleStructInfo):
                raise ShapeError(f"TupleGetItem of a non-tuple {_describe(tup)}")
            return expr if tup is expr.tuple_value and expr.struct_info else TupleGetItem(tup, expr.index)
        if isinstance(expr, If):
            return self._normalize_if(expr)
        if isinstance(expr, (Var, GlobalVar)) and expr.struct_info is None:
            raise IRError(f"{expr!r} has no struct info")
        if isinstance(expr, Op):
            return expr.replace(struct_info=expr.struct_info or ObjectStructInfo())
        if expr.struct_info is None:
            raise IRError(f"cannot normalize a {type(expr).__name__} without struct info")
        return expr

    def _normalize_arg(self, expr: Expr) -> Expr:
        expr = self.normalize(expr)
        return expr if is_leaf(expr) or isinstance(expr, TupleGetItem) else self.emit(expr)

    def _normalize_call(self, call: Call) -> Call:
        new = call.replace(args=tuple(self._normalize_arg(a) for a in call.args))
        if new is call and call.struct_info is not None:
            return call
        call = new
        if not self.gradual:
            return call.replace(struct_info=self.infer_call(call))
        call, sinfo, casts = infer_assuming(call, self.infer_call, self.entry_dims(), self.in_dataflow)
        for cast in casts:
            self._append(cast.replace(span=self._span))
        return call.replace(struct_info=sinfo)

    def infer_call(self, call: Call) -> StructInfo:
        """The struct info of ``call``; shape errors name the op and the span."""
        op = call.op
        try:
            if isinstance(op, Op):
                opdef = get_op_def(op)
                opdef.check_call(call)
                return opdef.infer(call, self.analyzer)
            sinfo = op.struct_info
            if isinstance(sinfo, FuncStructInfo):
                return sinfo.ret
            if sinfo is None:
                raise IRError(f"callee {op!r} has no struct info")
            raise ShapeError(f"cannot call a value of type {type(sinfo).__name__}")
        except RelaxpackError as err:
            if self._span is not None and "[at " not in str(err):
                raise _reworded(err, f"{err} [at {self._span}]") from None
            raise

    def _normalize_if(self, expr: If) -> If:
        cond = self._normalize_arg(expr.cond)
        branches = (expr.true_branch, expr.false_branch)
        if expr.struct_info is not None and cond is expr.cond:
            return expr
        for branch in branches:
            if branch.struct_info is None:
                raise IRError("If branch without struct info; build branches with begin_scope/end_scope")
        defined = self.defined_dim_vars()
        sinfo = unify_struct_info(*(erase_to_well_defined(b.struct_info, defined) for b in branches),
                                  self.analyzer)
        return If(cond, *branches, struct_info=sinfo)

    def defined_dim_vars(self) -> frozenset[str]:
        """Symbolic dims defined so far in the current function (params, match casts)."""
        if not self._func_stack:
            return frozenset()
        names = set(_sinfo_vars(self._func_stack[-1].params))
        for scope in self._scopes:
            blocks = list(scope.blocks) + ([scope.block] if scope.block else [])
            for block in blocks:
                for b in block.bindings:
                    if isinstance(b, MatchCast):
                        names |= b.struct_info.dim_vars()
        return frozenset(names)

    def entry_dims(self) -> frozenset[str]:
        """The symbolic dims the current function's parameters define."""
        return _sinfo_vars(self._func_stack[-1].params) if self._func_stack else frozenset()

    def fresh_name(self, prefix: str = "v") -> str:
        self._name_counter += 1
        return f"{prefix}{self._name_counter}"


def _reworded(err: RelaxpackError, message: str) -> RelaxpackError:
    """``err`` with a new message, its other attributes kept."""
    new = type(err)(message)
    new.__dict__.update(err.__dict__)
    return new


def _sinfo_vars(params) -> frozenset[str]:
    return frozenset().union(*(p.struct_info.dim_vars() for p in params)) if params else frozenset()


def first_impure_call(seq: SeqExpr) -> str | None:
    """The name of the first impure call in ``seq`` (If branches included), or None."""
    for block in seq.blocks:
        for b in block.bindings:
            value = b.value
            if not is_pure_expr(value):
                return _callee_name(value)
            if isinstance(value, If):
                found = first_impure_call(value.true_branch) or first_impure_call(value.false_branch)
                if found:
                    return found
    return None


def is_pure_expr(expr: Expr) -> bool:
    """False for a call to an impure op or function."""
    if not isinstance(expr, Call):
        return True
    op = expr.op
    if isinstance(op, Op):
        return get_op_def(op).pure
    sinfo = op.struct_info
    return not isinstance(sinfo, FuncStructInfo) or sinfo.purity


def _callee_name(expr: Expr) -> str:
    op = getattr(expr, "op", None)
    if isinstance(op, Op):
        return f"R.{op.name}"
    return getattr(op, "name_hint", None) or getattr(op, "global_symbol", None) or repr(op)


def _describe(expr: Expr) -> str:
    return f"{getattr(expr, 'name_hint', type(expr).__name__)} of {expr.struct_info}"

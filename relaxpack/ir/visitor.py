"""ExprVisitor and ExprMutator: walk and rewrite the IR, Relax style.

Dispatch goes through a table from node type to a ``visit_<node>_`` hook, so a
subclass overrides only the hooks it cares about::

    class CountCalls(ExprVisitor):
        def __init__(self):
            self.count = 0
        def visit_call_(self, call):
            self.count += 1
            super().visit_call_(call)

The mutator rebuilds only what changed (``replace`` keeps unchanged nodes),
re-normalizes rewritten values through a :class:`BlockBuilder` and renames a
var whose struct info changed, so every use sees the new var.
"""

from __future__ import annotations

from .block_builder import BlockBuilder
from .struct_info import is_base_of
from .expr import (
    Binding, BindingBlock, Call, Constant, DataflowBlock, DataflowVar, Expr, ExternFunc,
    Function, GlobalVar, If, MatchCast, Op, PrimValue, SeqExpr, ShapeExpr, StringImm, Tuple,
    TupleGetItem, Var, VarBinding, identical,
)

_EXPR_HOOKS = {
    Var: "visit_var_", DataflowVar: "visit_dataflow_var_", Constant: "visit_constant_",
    Call: "visit_call_", Tuple: "visit_tuple_", TupleGetItem: "visit_tuple_getitem_",
    ShapeExpr: "visit_shape_expr_", PrimValue: "visit_prim_value_", StringImm: "visit_string_imm_",
    If: "visit_if_", SeqExpr: "visit_seq_expr_", Function: "visit_function_",
    GlobalVar: "visit_global_var_", ExternFunc: "visit_extern_func_", Op: "visit_op_",
}
_BINDING_HOOKS = {VarBinding: "visit_var_binding_", MatchCast: "visit_match_cast_"}
_BLOCK_HOOKS = {BindingBlock: "visit_binding_block_", DataflowBlock: "visit_dataflow_block_"}


def _hook(table: dict, node) -> str:
    name = table.get(type(node))
    if name is None:
        raise TypeError(f"no visitor hook for {type(node).__name__}")
    return name


class ExprVisitor:
    """Visits every expression, binding and block, in evaluation order."""

    def visit_expr(self, expr: Expr) -> None:
        getattr(self, _hook(_EXPR_HOOKS, expr))(expr)

    def visit_binding(self, binding: Binding) -> None:
        getattr(self, _hook(_BINDING_HOOKS, binding))(binding)

    def visit_binding_block(self, block: BindingBlock) -> None:
        getattr(self, _hook(_BLOCK_HOOKS, block))(block)

    def visit_var_def(self, var: Var) -> None:
        """Called where a var is defined (params, bindings)."""

    # leaves
    def visit_var_(self, var: Var) -> None:
        pass

    def visit_dataflow_var_(self, var: DataflowVar) -> None:
        self.visit_var_(var)

    def visit_constant_(self, c: Constant) -> None:
        pass

    def visit_shape_expr_(self, s: ShapeExpr) -> None:
        pass

    def visit_prim_value_(self, p: PrimValue) -> None:
        pass

    def visit_string_imm_(self, s: StringImm) -> None:
        pass

    def visit_global_var_(self, g: GlobalVar) -> None:
        pass

    def visit_extern_func_(self, e: ExternFunc) -> None:
        pass

    def visit_op_(self, op: Op) -> None:
        pass

    # compound
    def visit_call_(self, call: Call) -> None:
        self.visit_expr(call.op)
        for arg in call.args:
            self.visit_expr(arg)

    def visit_tuple_(self, tup: Tuple) -> None:
        for f in tup.fields:
            self.visit_expr(f)

    def visit_tuple_getitem_(self, item: TupleGetItem) -> None:
        self.visit_expr(item.tuple_value)

    def visit_if_(self, node: If) -> None:
        self.visit_expr(node.cond)
        self.visit_expr(node.true_branch)
        self.visit_expr(node.false_branch)

    def visit_seq_expr_(self, seq: SeqExpr) -> None:
        for block in seq.blocks:
            self.visit_binding_block(block)
        self.visit_expr(seq.body)

    def visit_function_(self, func: Function) -> None:
        for p in func.params:
            self.visit_var_def(p)
        self.visit_expr(func.body)

    # bindings and blocks
    def visit_var_binding_(self, binding: VarBinding) -> None:
        self.visit_expr(binding.value)
        self.visit_var_def(binding.var)

    def visit_match_cast_(self, binding: MatchCast) -> None:
        self.visit_expr(binding.value)
        self.visit_var_def(binding.var)

    def visit_binding_block_(self, block: BindingBlock) -> None:
        for b in block.bindings:
            self.visit_binding(b)

    def visit_dataflow_block_(self, block: DataflowBlock) -> None:
        self.visit_binding_block_(block)


def _same(new: tuple, old: tuple) -> tuple:
    return old if identical(new, old) else new


class ExprMutator:
    """Rewrites expressions bottom-up; returns the same node when nothing changed.

    Override ``visit_<node>_`` hooks to return a replacement. Binding hooks
    emit into ``self.builder`` (so one binding may become several, or none).
    """

    def __init__(self, builder: BlockBuilder | None = None):
        self.builder = builder or BlockBuilder()
        self.var_remap: dict[Var, Var] = {}

    def visit_expr(self, expr: Expr) -> Expr:
        return getattr(self, _hook(_EXPR_HOOKS, expr))(expr)

    def visit_binding(self, binding: Binding) -> None:
        getattr(self, _hook(_BINDING_HOOKS, binding))(binding)

    def visit_binding_block(self, block: BindingBlock) -> BindingBlock:
        return getattr(self, _hook(_BLOCK_HOOKS, block))(block)

    # leaves
    def visit_var_(self, var: Var) -> Expr:
        return self.var_remap.get(var, var)

    def visit_dataflow_var_(self, var: DataflowVar) -> Expr:
        return self.visit_var_(var)

    def visit_constant_(self, c):
        return c

    def visit_shape_expr_(self, s):
        return s

    def visit_prim_value_(self, p):
        return p

    def visit_string_imm_(self, s):
        return s

    def visit_global_var_(self, g):
        return g

    def visit_extern_func_(self, e):
        return e

    def visit_op_(self, op):
        return op

    # compound
    def visit_call_(self, call: Call) -> Expr:
        op = self.visit_expr(call.op)
        args = _same(tuple(self.visit_expr(a) for a in call.args), call.args)
        if op is call.op and args is call.args:
            return call
        return Call(op, args, call.attrs, call.sinfo_args)

    def visit_tuple_(self, tup: Tuple) -> Expr:
        fields = _same(tuple(self.visit_expr(f) for f in tup.fields), tup.fields)
        return tup if fields is tup.fields else Tuple(fields)

    def visit_tuple_getitem_(self, item: TupleGetItem) -> Expr:
        value = self.visit_expr(item.tuple_value)
        return item if value is item.tuple_value else TupleGetItem(value, item.index)

    def visit_if_(self, node: If) -> Expr:
        cond = self.visit_expr(node.cond)
        true_branch = self.visit_seq_expr_(node.true_branch)
        false_branch = self.visit_seq_expr_(node.false_branch)
        if cond is node.cond and true_branch is node.true_branch and false_branch is node.false_branch:
            return node
        return If(cond, true_branch, false_branch)

    def visit_seq_expr_(self, seq: SeqExpr) -> SeqExpr:
        self.builder.begin_scope()
        blocks = []
        for block in seq.blocks:
            new_block = self.visit_binding_block(block)
            if new_block.bindings:
                blocks.append(new_block)
        body = self.visit_expr(seq.body)
        new_seq = self.builder.end_scope(body)
        blocks = _same(tuple(blocks), seq.blocks)
        if blocks is seq.blocks and new_seq.body is seq.body:
            return seq
        return SeqExpr(blocks, new_seq.body)

    def visit_function_(self, func: Function) -> Expr:
        params = _same(tuple(self.visit_var_def(p) for p in func.params), func.params)
        with self.builder.function_scope(params):
            body = self.visit_seq_expr_(func.body)
        if params is func.params and body is func.body:
            return func
        ret = func.ret_struct_info
        if not is_base_of(ret, body.struct_info, self.builder.analyzer):
            ret = body.struct_info  # the rewrite changed what the function returns
        return Function(params, body, ret, func.is_pure, func.attrs)

    def visit_var_def(self, var: Var) -> Var:
        return self.var_remap.get(var, var)

    # bindings and blocks
    def visit_binding_block_(self, block: BindingBlock) -> BindingBlock:
        self.builder.begin_block(is_dataflow=isinstance(block, DataflowBlock))
        for b in block.bindings:
            self.visit_binding(b)
        new_block = self.builder.end_block()
        return block if _same(new_block.bindings, block.bindings) is block.bindings else new_block

    def visit_dataflow_block_(self, block: DataflowBlock) -> BindingBlock:
        return self.visit_binding_block_(block)

    def visit_var_binding_(self, binding: VarBinding) -> None:
        value = self.visit_expr(binding.value)
        if value is binding.value:
            self.builder.emit_binding(binding)
            return
        value = self.builder.normalize(value)
        var = self._updated_var(binding.var, value.struct_info)
        self.builder.emit_binding(VarBinding(var, value, span=binding.span))

    def visit_match_cast_(self, binding: MatchCast) -> None:
        value = self.visit_expr(binding.value)
        if value is binding.value:
            self.builder.emit_binding(binding)
            return
        value = self.builder.normalize(value)
        self.builder.emit_binding(MatchCast(binding.var, value, binding.struct_info, span=binding.span))

    def _updated_var(self, var: Var, sinfo) -> Var:
        if var.struct_info == sinfo:
            return var
        new_var = type(var)(var.name_hint, struct_info=sinfo)
        self.var_remap[var] = new_var
        return new_var

"""LowerFusedFunctions: each call of a fused elementwise function becomes one kernel call.

FuseOps leaves ``lv = cls.fused_exp_add(x, y)`` calling a ``Primitive``
function. This pass, run just before Legalize, replaces the call with
``lv = R.call_tir("fused_elementwise", (x, y), out_sinfo=..., kernel_attrs=(("recipe", RECIPE),))``
where RECIPE lists the function's steps as plain data (the format is in
``ops/definitions/fused_elementwise.py``), and removes the functions it
lowered. The recipe is checked by the ``fused_elementwise`` op's inference
before the call is made. Primitive functions that are not elementwise
recipes are left alone.

>>> mod = lower_fused_functions(fuse_ops(mod))            # doctest: +SKIP
"""

from __future__ import annotations

from typing import Sequence

from ..errors import PassError
from ..ir.block_builder import BlockBuilder
from ..ir.expr import Call, Expr, Function, GlobalVar, Op, VarBinding
from ..ir.module import IRModule
from ..ir.struct_info import TensorStructInfo
from ..ir.visitor import ExprMutator, ExprVisitor
from ..ir.well_formed import function_analyzer
from ..ops.definitions.fused_elementwise import NAME, fusible_kind, may_write_over, same_shape
from .core.infra import module_pass
from .legalize import legalize_call
from .widen_float16 import widen_float16


def recipe_of(params: Sequence[Expr], bindings: Sequence[VarBinding], result: TensorStructInfo,
              parts: dict | None = None) -> tuple:
    """The recipe of ``bindings`` (op calls in evaluation order, the last one the
    result of struct info ``result``) reading ``params`` (vars or constants).

    ``parts`` caches what each binding contributes apart from its references
    (FuseOps asks for the recipe of a growing group once per candidate, with
    one ``result``)."""
    refs: dict[int, tuple[str, int]] = {id(p): ("p", i) for i, p in enumerate(params)}
    steps = []
    for j, binding in enumerate(bindings):
        part = parts.get(id(binding)) if parts is not None else None
        if part is None:
            part = step_part(binding, result)
            if parts is not None:
                parts[id(binding)] = part
        name, attrs, dtype, full, inplace, arg_ids, var_id = part
        try:
            inputs = tuple([refs[a] for a in arg_ids])
        except KeyError:
            arg = next(a for a in binding.value.args if id(a) not in refs)
            raise PassError(f"fused step R.{name} reads {arg!r}, neither a parameter nor an earlier step") from None
        steps.append((name, inputs, attrs, dtype, full, inplace))
        refs[var_id] = ("s", j)
    return tuple(steps)


def step_part(binding: VarBinding, result: TensorStructInfo) -> tuple:
    """What ``binding`` contributes to a recipe of result ``result``, and the ids of
    its arguments and var (what its references are resolved by)."""
    call = binding.value
    out = call.struct_info
    inplace = tuple(may_write_over(call.op.name, k, arg.struct_info, out) for k, arg in enumerate(call.args))
    attrs = tuple((name, _plain(value, call.op.name, name)) for name, value in call.attrs.items())
    return (call.op.name, attrs, out.dtype, same_shape(out, result), inplace, tuple(id(a) for a in call.args),
            id(binding.var))


def _plain(value, op: str, name: str):
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, tuple):
        return tuple(_plain(v, op, name) for v in value)
    raise PassError(f"R.{op}: attribute {name}={value!r} is not plain data; it cannot go into a fused recipe")


def fused_steps(func: Function) -> list[VarBinding] | None:
    """The bindings of ``func`` if it is a fused elementwise function (Primitive,
    op calls of fusible ops on its parameters and earlier results, returning the
    last one), else None."""
    if not func.attrs.get("Primitive") or not isinstance(func.ret_struct_info, TensorStructInfo):
        return None
    bindings = [b for block in func.body.blocks for b in block.bindings]
    known = {id(p) for p in func.params}
    for b in bindings:
        call = b.value
        if not (isinstance(b, VarBinding) and isinstance(call, Call) and isinstance(call.op, Op)
                and fusible_kind(call.op.name) and isinstance(call.struct_info, TensorStructInfo)
                and all(id(a) in known for a in call.args)):
            return None
        known.add(id(b.var))
    if not bindings or func.body.body is not bindings[-1].var:
        return None
    return bindings


class _Lower(ExprMutator):
    def __init__(self, recipes: dict[str, tuple], analyzer):
        super().__init__(BlockBuilder(analyzer=analyzer))
        self.recipes = recipes
        self.checked: set = set()   # (function, argument struct infos) whose recipe type-checked

    def visit_call_(self, call: Call):
        call = super().visit_call_(call)
        if not isinstance(call.op, GlobalVar) or call.op.name_hint not in self.recipes:
            return call
        graph = Call(Op.get(NAME), call.args, {"recipe": self.recipes[call.op.name_hint]})
        key = (call.op.name_hint, tuple(a.struct_info for a in call.args))
        if key not in self.checked:         # the recipe type-checks on these arguments (once per kind)
            self.builder.infer_call(graph)
            self.checked.add(key)
        return legalize_call(graph.replace(struct_info=call.struct_info))


class _Callees(ExprVisitor):
    def __init__(self):
        self.names: set[str] = set()

    def visit_global_var_(self, g: GlobalVar) -> None:
        self.names.add(g.name_hint)


@module_pass(name="LowerFusedFunctions", opt_level=0, requires=("import", "optimize", "lower"))
def lower_fused_functions(mod: IRModule, ctx) -> IRModule:
    recipes = {}
    for name, func in mod.items():
        steps = fused_steps(func)
        if steps is not None:
            recipe = recipe_of(func.params, steps, func.ret_struct_info)
            recipes[name] = widen_float16(recipe, [p.struct_info for p in func.params], func.ret_struct_info)
    if not recipes:
        return mod
    functions = {name: func if name in recipes else _Lower(recipes, function_analyzer(func)).visit_expr(func)
                 for name, func in mod.items()}
    callees = _Callees()
    for name, func in functions.items():
        if name not in recipes:
            callees.visit_expr(func)
    return IRModule({name: f for name, f in functions.items() if name not in recipes or name in callees.names},
                    mod.attrs)


__all__ = ["lower_fused_functions", "recipe_of", "fused_steps"]

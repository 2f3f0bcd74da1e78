"""Loop and Scan bodies as module functions.

An ONNX body graph becomes a function of the module: its own inputs (the
iteration number, the condition, the loop-carried state, ...) are the
leading parameters, and every value of an enclosing scope it reads becomes
one more parameter (constants are inlined instead). The caller passes those
outer values along on every iteration::

    def loop_body3(i: R.Tensor((), "int64"), cond: R.Tensor((), "bool"),
                   x: R.Tensor(("n", 4), "float32"), w: R.Tensor((4,), "float32")):
        ...
        return (cond_out, x_next, scan_elem)

Dims of an outer value that are expressions (``2 * n``) get fresh names in
the body, so that each parameter's dims are bound by matching its shape on
entry. The function's return struct info keeps only the dims its parameters
define.

>>> body = build_body(ctx, graph, "loop_body", params, bind)     # doctest: +SKIP
>>> make_call("loop", body.gvar, trips, cond, *state, *body.captured, num_state=1, ...)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ....ir.dims import free_vars
from ....ir.expr import Expr, GlobalVar, Tuple, Var
from ....ir.struct_info import (
    OptionalStructInfo, SequenceStructInfo, StructInfo, TensorStructInfo, TupleStructInfo, erase_to_well_defined,
)
from ..graph import subgraphs
from ..value import Value
from ._shape_common import fresh_dims

#: bind(declared params) -> values of the body graph's inputs, by name
Binder = Callable[[Sequence[Var]], dict[str, Value]]


@dataclass
class Body:
    """A body function: how to call it and what it returns."""

    gvar: GlobalVar
    captured: list[Expr]            # outer values to pass after the declared parameters
    outputs: list[StructInfo]       # the struct info of each output, as the body computes it
    declared: list[Var]             # its leading parameters


def free_names(graph) -> set[str]:
    """The value names ``graph`` (or a subgraph of it) reads and does not define."""
    defined = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    defined |= {o for node in graph.node for o in node.output if o}
    read: set[str] = set()
    for node in graph.node:
        read.update(i for i in node.input if i)
        for attr in node.attribute:
            for sub in subgraphs(attr):
                read |= free_names(sub)
    return read - defined


def renamed_sinfo(ctx, sinfo: StructInfo, hint: str) -> StructInfo:
    """``sinfo`` with every dim that is not an int or a plain name replaced by a fresh name."""
    if isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None:
        compound = [d for d in sinfo.shape if not isinstance(d, int) and str(d) not in free_vars(d)]
        if not compound:
            return sinfo
        fresh = iter(fresh_dims(ctx, len(compound), hint))
        shape = tuple(d if isinstance(d, int) or str(d) in free_vars(d) else next(fresh) for d in sinfo.shape)
        return TensorStructInfo(shape, sinfo.dtype, vdevice=sinfo.vdevice)
    if isinstance(sinfo, TupleStructInfo):
        return TupleStructInfo(tuple(renamed_sinfo(ctx, f, hint) for f in sinfo.fields))
    return sinfo


def general_sinfo(ctx, sinfo: StructInfo, hint: str) -> StructInfo:
    """``sinfo`` with fresh dims in place of every dim (rank and dtype kept): a value that may
    change shape from one iteration to the next."""
    if isinstance(sinfo, TensorStructInfo) and sinfo.ndim >= 0:
        return TensorStructInfo(fresh_dims(ctx, sinfo.ndim, hint), sinfo.dtype, vdevice=sinfo.vdevice)
    if isinstance(sinfo, (SequenceStructInfo, OptionalStructInfo)):
        return type(sinfo)(forget_dims(sinfo.elem))
    return sinfo


def forget_dims(sinfo: StructInfo) -> StructInfo:
    """``sinfo`` knowing only ranks and dtypes (the struct info of a sequence's elements)."""
    if isinstance(sinfo, TensorStructInfo):
        return TensorStructInfo(None, sinfo.dtype, sinfo.ndim, sinfo.vdevice)
    if isinstance(sinfo, (SequenceStructInfo, OptionalStructInfo)):
        return type(sinfo)(forget_dims(sinfo.elem))
    if isinstance(sinfo, TupleStructInfo):
        return TupleStructInfo(tuple(forget_dims(f) for f in sinfo.fields))
    return sinfo


def build_body(ctx, graph, hint: str, declared: list[Var], bind: Binder,
               finish: Callable[[list[Value]], list[Value]] | None = None) -> Body:
    """Convert ``graph`` into a new module function (see the module docstring).

    ``bind`` maps the declared parameters to the graph's inputs (it may emit
    bindings, e.g. Scan's slicing); ``finish`` may rewrite the list of output
    values before they are returned (e.g. prepend Scan's condition).
    """
    scope, captured, params = {}, [], []
    outer = ctx.scope
    for name in sorted(free_names(graph)):
        value = outer.lookup(name) if outer is not None else None
        if value is None:
            continue  # no enclosing scope defines it: the node that reads it reports that
        if value.const is not None:  # inlined: the body sees its contents, as the caller does
            scope[name] = Value(value.sinfo, const=value.const)
            continue
        captured.append(ctx.expr(value))  # made in the caller's scope, before the body starts
        var = Var(_identifier(name), renamed_sinfo(ctx, value.sinfo, name))
        params.append(var)
        scope[name] = Value(var.struct_info, expr=var)
    fname = _function_name(ctx, hint)
    node, outer_scope = ctx.node, ctx.scope
    bb = ctx.bb
    try:
        with bb.function(fname, [*declared, *params]):
            scope.update(bind(declared))
            outputs = ctx.graphs.convert_graph(graph, scope)
            if finish is not None:
                outputs = finish(outputs)
            result = bb.normalize(Tuple([ctx.expr(v) for v in outputs]))
            defined = frozenset().union(*(p.struct_info.dim_vars() for p in [*declared, *params]))
            bb.emit_func_output(result, erase_to_well_defined(result.struct_info, defined))
    finally:
        ctx.node, ctx.scope = node, outer_scope
    func = bb.get_func(fname)
    return Body(GlobalVar(fname, struct_info=func.struct_info), captured, list(result.struct_info.fields),
                list(declared))


def drop_functions_since(ctx, names: frozenset[str]) -> None:
    """Remove the functions built after ``names`` was taken (a discarded draft and its nested bodies)."""
    for name in ctx.bb.func_names() - names:
        ctx.bb.remove_func(name)


def _function_name(ctx, hint: str) -> str:
    taken = ctx.bb.func_names()
    name = ctx.bb.fresh_name(hint)
    while name in taken:
        name = ctx.bb.fresh_name(hint)
    return name


def _identifier(name: str) -> str:
    out = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
    return out if out and not out[0].isdigit() else f"v_{out}"

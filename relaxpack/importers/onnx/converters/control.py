"""Control flow: If.

A condition known at import time converts only the taken branch, inline
(its values keep their known contents, so shapes stay symbolic through
it). Otherwise both branches become the SeqExprs of an ``If`` expression::

    cond = ...
    lv = R.If(cond, {then_branch}, {else_branch})   # a tuple if several outputs
    out0 = lv[0]; out1 = lv[1]

An output whose dims differ between the branches (or that a branch defines
with its own ``match_cast``) is ``match_cast`` after the If to its agreed
dims and fresh symbolic dims where they differ, so the ops that consume it
still have shapes to allocate.

A branch that the dims known at import prove cannot run (a ShapeError) is
kept as a call raising that error, for the run that takes it.
"""

from __future__ import annotations

import logging

from ....errors import ShapeError
from ....ir.dims import free_vars
from ....ir.expr import ExternFunc, If, SeqExpr, TupleGetItem
from ....ir.struct_info import TensorStructInfo, TupleStructInfo
from ....ops import make_call
from ..registry import register_converter
from ..value import Value
from ._shape_common import fresh_dims, shape_error, unsupported

log = logging.getLogger(__name__)


@register_converter("", "If", since_opset=1)
def if_(ctx, cond, *, then_branch, else_branch):
    count = len(ctx.node.output)
    for name, graph in (("then_branch", then_branch), ("else_branch", else_branch)):
        if len(graph.output) != count:
            raise shape_error(ctx, f"{name} has {len(graph.output)} outputs, the node {count}")
    taken = _known_condition(ctx, cond)
    if taken is not None:
        return tuple(ctx.graphs.convert_graph(then_branch if taken else else_branch, ctx.scope))
    return _emit_if(ctx, cond, then_branch, else_branch, count)


def _known_condition(ctx, cond: Value) -> bool | None:
    if cond.const is not None:
        if cond.const.size != 1:
            raise shape_error(ctx, f"the condition must hold one value, got shape {cond.const.shape}")
        return bool(cond.const.reshape(()))
    if cond.sym is not None and len(cond.sym) == 1 and isinstance(cond.sym[0], int):
        return bool(cond.sym[0])
    return None


def _emit_if(ctx, cond: Value, then_branch, else_branch, count: int):
    if cond.dtype is not None and cond.dtype != "bool":
        raise shape_error(ctx, f"the condition must be bool, got {cond.dtype}")
    if cond.shape is not None and any(isinstance(d, int) and d != 1 for d in cond.shape):
        raise shape_error(ctx, "the condition must hold one value")
    cond_expr = ctx.expr(cond)
    branches = _convert_branches(ctx, then_branch, else_branch)
    result = ctx.bb.emit(If(cond_expr, *branches), "if_out")
    sinfo = result.struct_info
    arms, shared = [b.struct_info for b in branches], {}
    if count == 1:
        return _rebind(ctx, Value(sinfo, expr=result), 0, arms, shared)
    if not isinstance(sinfo, TupleStructInfo):
        raise unsupported(ctx, f"expected a tuple of {count} outputs from the branches, got {sinfo}")
    outputs = []
    for i in range(count):
        item = ctx.bb.emit(TupleGetItem(result, i), "if_out")
        outputs.append(_rebind(ctx, Value(item.struct_info, expr=item), i,
                               [a.fields[i] if isinstance(a, TupleStructInfo) else None for a in arms], shared))
    return tuple(outputs)


def _convert_branches(ctx, then_branch, else_branch) -> list[SeqExpr]:
    """Both branches as SeqExprs. A branch that cannot run at the dims known here (a ShapeError:
    silero VAD's 8 kHz branch when its input is bound to 512 samples, the 16 kHz length) fails
    only when it is taken, as in onnxruntime, which runs the taken branch alone: it becomes a
    call that raises that error. Where both branches fail, the first error stands."""
    node, scope = ctx.node, ctx.scope
    branches, failures = [], []
    for name, graph in (("then_branch", then_branch), ("else_branch", else_branch)):
        try:
            branches.append(ctx.graphs.convert_branch(graph, scope))
        except ShapeError as err:
            branches.append(None)
            failures.append((name, err))
        ctx.node, ctx.scope = node, scope  # the branches' nodes set them
    if len(failures) == 2:
        raise failures[0][1]
    if failures:
        (name, err), failed = failures[0], branches.index(None)
        message = f"its {name} cannot run at the dims the model was converted with: {err}"
        log.info("%s: %s; it fails if taken", ctx.node_label(), message)
        branches[failed] = _failing_branch(ctx, branches[1 - failed].struct_info, message)
    return branches


def _failing_branch(ctx, sinfo, message: str) -> SeqExpr:
    """A branch that raises ``message`` when run; its outputs are typed as the other branch's
    (without the dims that branch defines), so the If's outputs keep their shapes."""
    bb = ctx.bb
    bb.begin_scope()
    call = make_call("call_packed", ExternFunc("control.branch_error"),
                     sinfo_args=(_outer_sinfo(sinfo, bb.defined_dim_vars()),),
                     kernel_attrs=(("message", message),))
    return bb.end_scope(bb.emit(call, "branch_error"))


def _outer_sinfo(sinfo, outer: frozenset[str]):
    """``sinfo`` with every tensor shape that uses a dim not in ``outer`` reduced to its rank."""
    if isinstance(sinfo, TupleStructInfo):
        return TupleStructInfo(tuple(_outer_sinfo(f, outer) for f in sinfo.fields))
    if isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None and \
            not all(free_vars(d) <= outer for d in sinfo.shape):
        return TensorStructInfo(None, sinfo.dtype, sinfo.ndim, vdevice=sinfo.vdevice)
    return sinfo


def _rebind(ctx, value: Value, index: int, arms, shared: dict) -> Value:
    """A tensor output whose shape the branches do not agree on gets a fresh
    dim for each axis where they differ; the dims both branches agree on
    (and that do not come from a branch's own ``match_cast``) stay. Axes
    whose pair of branch dims is the same share one fresh dim (``shared``,
    over the If's outputs): they are equal whichever branch runs."""
    sinfo = value.sinfo
    if not isinstance(sinfo, TensorStructInfo) or sinfo.shape is not None or sinfo.ndim < 0:
        return value
    if sinfo.dtype is None:
        raise unsupported(ctx, f"output {index} has different dtypes in the two branches")
    dims = []
    for agreed, pair in _agreed_dims(ctx, sinfo.ndim, arms):
        if agreed is None and pair in shared:
            agreed = shared[pair]
        elif agreed is None:
            (agreed,) = fresh_dims(ctx, 1, f"if_out{index}")
            if pair is not None:
                shared[pair] = agreed
        dims.append(agreed)
    cast = TensorStructInfo(tuple(dims), sinfo.dtype, vdevice=sinfo.vdevice)
    return Value(cast, expr=ctx.bb.match_cast(value.expr, cast, "if_out"))


def _agreed_dims(ctx, ndim: int, arms) -> list:
    """Per axis, (the dim both branches' outputs (struct infos ``arms``) have,
    or None where they differ or use a dim defined in a branch; the pair of
    branch dims, or None when a branch's shape is unknown)."""
    shapes = [a.shape if isinstance(a, TensorStructInfo) and a.ndim == ndim else None for a in arms]
    if any(shape is None for shape in shapes):
        return [(None, None)] * ndim
    outer, analyzer = ctx.bb.defined_dim_vars(), ctx.bb.analyzer
    return [(a if (a == b or analyzer.prove_equal(a, b)) and free_vars(a) <= outer else None, (a, b))
            for a, b in zip(*shapes)]

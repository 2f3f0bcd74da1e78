"""Control flow with iteration: Loop and Scan, as ``R.loop`` over a body function.

The body graph becomes a module function (see ``_body.py``) and the node one
``R.loop`` call (``relaxpack/ops/definitions/control.py``)::

    lv = R.loop(cls.loop_body3, max_trip, cond, x0, w, num_state=1,
                sinfo_args=R.Tuple(R.Tensor((n, 4), "float32"), R.Tensor("float32", ndim=3)))
    x_final = lv[0]
    scan = R.match_cast(lv[1], R.Tensor((loop_d1, n, 4), "float32"))

Loop-carried state keeps the shape of its initial value when the body
provably returns that shape again; otherwise the body is converted once more
with fresh dims for the state (shapes may change between iterations) and
the final state is ``match_cast`` to fresh dims. A sequence or optional state
is widened until the body's result fits it (its elements' shapes, then ranks,
forgotten; an optional state the body returns bare is wrapped). Stacked scan outputs always
get a fresh leading dim (the trip count may be known only at run time).

Scan slices its scanned inputs inside the body (``take`` at the iteration
number) after moving the scan axis first and reversing reversed inputs; its
scan outputs are reversed and moved to their axis after the loop.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from ....errors import RelaxpackError
from ....ir.expr import Constant, ShapeExpr, TupleGetItem, Var
from ....ir.struct_info import (
    OptionalStructInfo, SequenceStructInfo, StructInfo, TensorStructInfo, TupleStructInfo, is_base_of,
    unify_struct_info,
)
from ....ops.definitions.index import HUGE
from ....ops.registry import make_call
from ..registry import register_converter
from ..value import Value
from ._body import build_body, drop_functions_since, forget_dims, general_sinfo, renamed_sinfo
from ._shape_common import INT64_MAX, fresh_dims, norm_axis, shape_error, shaped, unsupported
from .sequence import optional

ITER_SINFO = TensorStructInfo((), "int64")
COND_SINFO = TensorStructInfo((), "bool")


# ---------------------------------------------------------------- Loop
@register_converter("", "Loop", since_opset=1)
def loop(ctx, max_trip=None, cond=None, *initial, body):
    n_state = len(initial)
    if any(v is None for v in initial):
        raise unsupported(ctx, "an omitted loop-carried value")
    if len(body.input) != 2 + n_state:
        raise shape_error(ctx, f"the body takes {len(body.input)} inputs, expected {2 + n_state} "
                               f"(iteration number, condition and {n_state} loop-carried values)")
    n_scan = len(body.output) - 1 - n_state
    if n_scan < 0:
        raise shape_error(ctx, f"the body returns {len(body.output)} outputs, fewer than the condition "
                               f"and {n_state} loop-carried values")
    trips = ctx.expr(max_trip) if max_trip is not None else Constant(np.array(INT64_MAX, np.int64))
    go = ctx.expr(cond) if cond is not None else Constant(np.array(True))
    names = [i.name for i in body.input]

    def bind(declared):
        values = {name: Value(p.struct_info, expr=p) for name, p in zip(names, declared)}
        if _declared_rank(body.input[0]) == 1:
            values[names[0]] = ctx.emit(make_call("reshape", ctx.expr(values[names[0]]), ShapeExpr((1,))), names[0])
        return values

    state = [ctx.expr(v) for v in initial]
    states, built = state_and_body(ctx, body, _typed_empty_sequences(ctx, body, initial, bind), 1, bind,
                                   hint="loop_body")
    return emit_loop(ctx, built, trips, go, state, states, n_scan)


def _typed_empty_sequences(ctx, body, initial: list[Value], bind) -> list[StructInfo]:
    """The initial states' struct info, where an empty sequence whose elements' rank is unknown
    (SequenceEmpty) takes the elements the body inserts into it in a first iteration: an empty
    sequence fits any, and :func:`state_and_body` still widens it if later iterations differ.
    Else the carried sequence never learns a rank its elements all have, and a ConcatFromSequence
    of it is refused (TorchScript's ``repeat_interleave`` by a tensor: FastSpeech2's lengths)."""
    sinfos = [v.sinfo for v in initial]
    empty = [k for k, v in enumerate(initial) if v.length == 0 and isinstance(v.sinfo, SequenceStructInfo)
             and isinstance(v.sinfo.elem, TensorStructInfo) and v.sinfo.elem.ndim < 0]
    if not empty:
        return sinfos
    names = [i.name for i in body.input]

    def bind_first(declared):
        values = bind(declared)
        for k in empty:
            values[names[2 + k]] = replace(values[names[2 + k]], length=0)
        return values
    before = ctx.bb.func_names()
    try:
        outs = build_body(ctx, body, "loop_body", _declared(sinfos, ()), bind_first).outputs
    except RelaxpackError:      # the body as it is will say what it refuses
        return sinfos
    finally:
        drop_functions_since(ctx, before)
    for k in empty:
        out = outs[1 + k]
        if isinstance(out, SequenceStructInfo) and isinstance(out.elem, TensorStructInfo) \
                and out.elem.ndim >= 0 and out.elem.dtype == sinfos[k].elem.dtype:
            sinfos[k] = SequenceStructInfo(forget_dims(out.elem))
    return sinfos


def _declared_rank(info) -> int | None:
    """The rank a body declares for its iteration number (None: undeclared). The spec says 0;
    tf2onnx declares it [1] (its CropAndResize loop slices with it), and onnxruntime gives the
    body what it declares, so relaxpack does too (a condition declared [1] onnxruntime refuses)."""
    tensor = info.type.tensor_type
    return len(tensor.shape.dim) if info.type.HasField("tensor_type") and tensor.HasField("shape") else None


def state_and_body(ctx, graph, initial: list[StructInfo], first_state: int, bind, hint: str, extra=(),
                    finish=None):
    """The body function, and the struct info of the final state as the caller sees it
    (``None`` where it must be match_cast to fresh dims: the state changes shape)."""
    before = ctx.bb.func_names()
    exact = [renamed_sinfo(ctx, s, "state") for s in initial]
    built = build_body(ctx, graph, hint, _declared(exact, extra), bind, finish)
    outs = built.outputs[first_state:first_state + len(initial)]
    if all(is_base_of(p, o, ctx.bb.analyzer) for p, o in zip(exact, outs)):
        return list(initial), built
    general = [general_sinfo(ctx, s, "state") for s in initial]
    for _ in range(_MAX_WIDENINGS):
        drop_functions_since(ctx, before)
        built = build_body(ctx, graph, hint, _declared(general, extra), bind,
                           _wrap_optionals(ctx, finish, first_state, general))
        outs = built.outputs[first_state:first_state + len(initial)]
        widened = _widened(ctx, general, outs)
        if all(w is g for w, g in zip(widened, general)):
            return [None if isinstance(s, TensorStructInfo) else s for s in general], built
        general = widened
    raise unsupported(ctx, f"the loop-carried values' struct info does not settle after {_MAX_WIDENINGS} "
                           f"widenings (last: {general})")


#: a widening only erases shapes and ranks, so a couple of rounds reach the fixed point
_MAX_WIDENINGS = 4


def _widened(ctx, general: list[StructInfo], outs: list[StructInfo]) -> list[StructInfo]:
    """``general`` with each sequence or optional state that the body's result does not
    fit widened to describe both (element shapes, then ranks, forgotten)."""
    result = []
    for k, (p, o) in enumerate(zip(general, outs)):
        if is_base_of(forget_dims(p), o, ctx.bb.analyzer):
            result.append(p)
            continue
        widened = _widen(ctx, p, o)
        if widened is None:
            raise unsupported(ctx, f"loop-carried value {k} changes from {forget_dims(p)} to {forget_dims(o)} "
                                   f"in the body (its rank or dtype changes)")
        result.append(widened)
    return result


def _widen(ctx, state: StructInfo, out: StructInfo) -> StructInfo | None:
    """The least struct info describing both a sequence or optional ``state`` and the body's
    result ``out`` (an optional state may come back as its bare element); ``None`` when
    there is none that keeps the dtypes (a tensor state must keep its rank: it is match_cast)."""
    if not isinstance(state, (SequenceStructInfo, OptionalStructInfo)):
        return None
    if isinstance(state, OptionalStructInfo) and not isinstance(out, OptionalStructInfo):
        out = OptionalStructInfo(out)
    joined = unify_struct_info(forget_dims(state), forget_dims(out), ctx.bb.analyzer)
    return joined if _typed(joined) else None


def _typed(sinfo: StructInfo) -> bool:
    """Whether every tensor in ``sinfo`` has a dtype (no ``Object`` from a failed join)."""
    if isinstance(sinfo, TensorStructInfo):
        return sinfo.dtype is not None
    if isinstance(sinfo, (SequenceStructInfo, OptionalStructInfo)):
        return _typed(sinfo.elem)
    return False


def _wrap_optionals(ctx, finish, first_state: int, state: list[StructInfo]):
    """``finish`` followed by wrapping each body result whose state is an optional but which
    is the bare value (ONNX lets a body return a sequence for an optional sequence state)."""
    def wrapped(outputs):
        outputs = list(finish(outputs) if finish is not None else outputs)
        for k, s in enumerate(state):
            value = outputs[first_state + k]
            if isinstance(s, OptionalStructInfo) and not isinstance(value.sinfo, OptionalStructInfo):
                outputs[first_state + k] = optional(ctx, value)
        return outputs
    return wrapped


def _declared(state: list[StructInfo], extra) -> list[Var]:
    params = [Var("iter_num", ITER_SINFO), Var("cond_in", COND_SINFO)]
    params += [Var(f"state{k}", s) for k, s in enumerate(state)]
    params += [Var(f"scan_in{k}", s) for k, s in enumerate(extra)]
    return params


def emit_loop(ctx, built, trips, go, state, states, n_scan, operands=()) -> list[Value]:
    """Emit ``R.loop`` and bind its outputs: state first, then the stacked scan outputs."""
    n_state = len(state)
    scan_elems = built.outputs[1 + n_state:1 + n_state + n_scan]
    for k, elem in enumerate(scan_elems):
        if not isinstance(elem, TensorStructInfo) or elem.ndim < 0 or elem.dtype is None:
            raise unsupported(ctx, f"scan output {k} is {elem}; scan outputs must be tensors of known rank")
    fields = [s if s is not None else forget_dims(o)
              for s, o in zip(states, built.outputs[1:1 + n_state])]
    fields += [TensorStructInfo(None, e.dtype, e.ndim + 1) for e in scan_elems]
    call = make_call("loop", built.gvar, trips, go, *state, *operands, *built.captured, num_state=n_state,
                     sinfo_args=(TupleStructInfo(tuple(fields)),))
    result = ctx.bb.emit(call, "loop")
    values = []
    for i, sinfo in enumerate(fields):
        item = ctx.bb.emit(TupleGetItem(result, i), "loop_out")
        known = None
        if i >= n_state:   # a stacked scan output: its static element dims are known
            elem = scan_elems[i - n_state]
            known = (None,) + (tuple(d if isinstance(d, int) else None for d in elem.shape)
                               if elem.shape is not None else (None,) * elem.ndim)
        elif states[i] is None:
            known = (None,) * sinfo.ndim if sinfo.ndim >= 0 else None
        values.append(_bind_dims(ctx, item, sinfo, known))
    return values


def _bind_dims(ctx, item, sinfo: StructInfo, known) -> Value:
    """``item`` match_cast to ``known`` dims (None: a fresh dim), or as it is when ``known`` is None."""
    if known is None or not isinstance(sinfo, TensorStructInfo):
        return Value(sinfo, expr=item)
    fresh = iter(fresh_dims(ctx, sum(d is None for d in known), "loop"))
    cast = TensorStructInfo(tuple(next(fresh) if d is None else d for d in known), sinfo.dtype)
    return Value(cast, expr=ctx.bb.match_cast(item, cast, "loop_out"))


# ---------------------------------------------------------------- Scan
def scan_counts(ctx, inputs, body, num_scan_inputs: int) -> tuple[int, int, int]:
    """(scanned inputs, state values, scan outputs) of a Scan node, checked
    against its inputs and its body's signature."""
    n_in = num_scan_inputs
    n_state = len(inputs) - n_in
    if n_in < 1 or n_state < 0 or any(v is None for v in inputs):
        raise shape_error(ctx, f"num_scan_inputs={n_in} does not fit the node's {len(inputs)} state and scan inputs")
    n_out = len(body.output) - n_state
    if len(body.input) != len(inputs) or n_out < 0:
        raise shape_error(ctx, f"the body takes {len(body.input)} inputs and returns {len(body.output)}, "
                               f"which does not fit {n_state} state values and {n_in} scanned inputs")
    return n_in, n_state, n_out


@register_converter("", "Scan", since_opset=9)
def scan(ctx, *inputs, body, num_scan_inputs, scan_input_axes=None, scan_input_directions=None,
         scan_output_axes=None, scan_output_directions=None):
    n_in, n_state, n_out = scan_counts(ctx, inputs, body, num_scan_inputs)
    in_axes = per_input(ctx, scan_input_axes, n_in, "scan_input_axes")
    in_dirs = per_input(ctx, scan_input_directions, n_in, "scan_input_directions")
    out_axes = per_input(ctx, scan_output_axes, n_out, "scan_output_axes")
    out_dirs = per_input(ctx, scan_output_directions, n_out, "scan_output_directions")
    states, scanned = inputs[:n_state], inputs[n_state:]
    prepared = [_scan_first(ctx, v, axis, direction) for v, axis, direction in zip(scanned, in_axes, in_dirs)]
    length = prepared[0].struct_info.shape[0]
    trips = ctx.expr(ctx.sym_value((length,), scalar=True))
    names = [i.name for i in body.input]

    def bind(declared):
        iteration, params = declared[0], declared[2:]
        values = {name: Value(p.struct_info, expr=p) for name, p in zip(names[:n_state], params[:n_state])}
        for name, full in zip(names[n_state:], params[n_state:]):
            values[name] = ctx.emit(make_call("take", full, iteration, axis=0), "scan_elem")
        return values

    def finish(outputs):
        return [ctx.const(np.array(True)), *outputs]

    state = [ctx.expr(v) for v in states]
    state_sinfo, built = state_and_body(ctx, body, [v.sinfo for v in states], 1, bind, "scan_body",
                                         extra=[renamed_sinfo(ctx, p.struct_info, "scan") for p in prepared],
                                         finish=finish)
    go = Constant(np.array(True))
    values = emit_loop(ctx, built, trips, go, state, state_sinfo, n_out, operands=prepared)
    outputs = values[:n_state]
    for value, axis, direction in zip(values[n_state:], out_axes, out_dirs):
        outputs.append(_scan_output(ctx, value, axis, direction))
    return tuple(outputs)


def per_input(ctx, values, count: int, name: str) -> tuple[int, ...]:
    values = tuple(values) if values is not None else (0,) * count
    if len(values) != count:
        raise shape_error(ctx, f"{name} has {len(values)} entries, expected {count}")
    return values


def _scan_first(ctx, value: Value, axis: int, direction: int):
    """A scanned input with its scan axis first, in the order of the iterations."""
    value = shaped(ctx, value, "scanned input")
    axis = norm_axis(ctx, axis, value.ndim, "scan_input_axes")
    expr = ctx.expr(value)
    if axis != 0:
        order = (axis, *(a for a in range(value.ndim) if a != axis))
        expr = ctx.bb.emit(make_call("permute_dims", expr, axes=order), "scan_in")
    if direction:
        expr = _reverse_first(ctx, expr)
    return expr


def _reverse_first(ctx, expr):
    call = make_call("strided_slice", expr, axes=(0,), begin=(-1,), end=(-HUGE,), strides=(-1,))
    return ctx.bb.emit(call, "reversed")


def _scan_output(ctx, value: Value, axis: int, direction: int) -> Value:
    """A stacked scan output reversed (if asked) and with its scan axis moved to ``axis``."""
    expr = ctx.expr(value)
    if direction:
        expr = _reverse_first(ctx, expr)
    axis = norm_axis(ctx, axis, value.ndim, "scan_output_axes")
    if axis != 0:
        order = list(range(1, value.ndim))
        order.insert(axis, 0)
        expr = ctx.bb.emit(make_call("permute_dims", expr, axes=tuple(order)), "scan_out")
    return Value(expr.struct_info, expr=expr)


__all__ = ["loop", "scan"]

"""Scan at opset 8: a batch of independent scans, as one ``R.loop`` over (batch, time).

Scan-8's inputs are ``sequence_lens`` (optional, one length per batch entry),
the initial states ``[batch, ...]`` and the scanned inputs ``[batch, time, ...]``;
each batch entry runs the body ``sequence_lens[b]`` times from its own initial
state, and its scan outputs are padded to the full time length (the spec leaves
the padding undefined; relaxpack writes zeros, as onnxruntime does).

The batch loop and the time loop become one loop of ``batch * time`` iterations
over the body (``state_and_body`` of ``loop.py``); iteration ``k`` is entry
``b = k // time`` at step ``t = k % time``::

    state_in = where(t == 0, init[b], state)        # each entry starts afresh
    elem     = scan[b][t]   (reversed: scan[b][max(len_b - 1 - t, 0)])
    ... body ...
    state    = where(t < len_b, body_state, state_in)   # steps past len_b change nothing
    scan_out = where(t < len_b, body_scan_out, 0)

The state is also a scan output; its final value for entry ``b`` is the last
of its row of ``time`` steps (the initial state when ``time`` is 0).
"""

from __future__ import annotations

import numpy as np

from ....ir.expr import Constant, ShapeExpr, Tuple
from ....ops.registry import make_call
from ..registry import register_converter
from ..value import Value
from ._body import renamed_sinfo
from ._math_common import scalar
from ._shape_common import shape_error, shaped, unsupported
from .loop import emit_loop, per_input, scan_counts, state_and_body


@register_converter("", "Scan", since_opset=8)
def scan_v8(ctx, sequence_lens=None, *inputs, body, num_scan_inputs, directions=None):
    n_in, n_state, n_out = scan_counts(ctx, inputs, body, num_scan_inputs)
    dirs = per_input(ctx, directions, n_in, "directions")
    states = [_batched(ctx, v, 1, "initial state") for v in inputs[:n_state]]
    scanned = [_batched(ctx, v, 2, "scanned input") for v in inputs[n_state:]]
    batch, length = scanned[0].shape[:2]
    lens = [] if sequence_lens is None else [_lengths(ctx, sequence_lens)]
    operands = [ctx.expr(v) for v in (*scanned, *states)] + lens
    step = _Step(ctx, [i.name for i in body.input], n_state, n_in, dirs, bool(lens))
    placeholders = [_placeholder(ctx, v) for v in states]
    state_sinfo, built = state_and_body(
        ctx, body, [p.struct_info for p in placeholders], 1, step.bind, "scan_body",
        extra=[renamed_sinfo(ctx, e.struct_info, "scan") for e in operands], finish=step.finish)
    trips = ctx.expr(ctx.sym_value((batch * length,), scalar=True))
    values = emit_loop(ctx, built, trips, Constant(np.array(True)), placeholders, state_sinfo,
                        n_state + n_out, operands=operands)
    stacked = values[n_state:]
    finals = [_final_state(ctx, s, init, batch, length) for s, init in zip(stacked[:n_state], states)]
    outputs = [_by_entry(ctx, s, batch, length) for s in stacked[n_state:]]
    return (*finals, *outputs)


def _batched(ctx, value: Value, min_rank: int, what: str) -> Value:
    value = shaped(ctx, value, what)
    if value.ndim < min_rank:
        axes = "a batch axis" if min_rank == 1 else "a batch and a time axis"
        raise shape_error(ctx, f"the {what} has rank {value.ndim}; it needs {axes}")
    return value


def _lengths(ctx, value: Value):
    if value.dtype != "int64" or value.ndim != 1:
        raise shape_error(ctx, f"sequence_lens must be a 1-D int64 tensor, got {value.sinfo}")
    return ctx.expr(value)


def _placeholder(ctx, init: Value):
    """A value shaped like one entry of ``init``: the state the loop starts with, replaced
    by ``init[b]`` at each entry's first step (``init[0]`` would fail on an empty batch)."""
    if init.dtype is None or np.dtype(init.dtype).kind not in "biuf":
        raise unsupported(ctx, f"a state of dtype {init.dtype} (numbers and bools only)")
    zero = scalar(ctx, 0, init.dtype)
    return ctx.bb.emit(make_call("broadcast_to", zero, ShapeExpr(tuple(init.shape[1:]))), "scan_state0")


class _Step:
    """The body's prologue (``bind``) and epilogue (``finish``) of one (batch, time) step;
    ``bind`` keeps the values ``finish`` needs, as both run in the same body function."""

    def __init__(self, ctx, names: list[str], n_state: int, n_in: int, dirs, has_lens: bool):
        self.ctx, self.names, self.n_state, self.n_in = ctx, names, n_state, n_in
        self.dirs, self.has_lens = dirs, has_lens
        self.valid, self.state_in = None, []

    def bind(self, declared):
        ctx, n_state, n_in = self.ctx, self.n_state, self.n_in
        k, carried = declared[0], declared[2:2 + n_state]
        extra = declared[2 + n_state:]
        scans, inits = extra[:n_in], extra[n_in:n_in + n_state]
        length = ctx.expr(ctx.sym_value((scans[0].struct_info.shape[1],), scalar=True))
        b = self._emit("floor_divide", k, length)
        t = self._emit("mod", k, length)
        entry_len = self._emit("take", extra[-1], b, axis=0) if self.has_lens else length
        self.valid = self._emit("less", t, entry_len)
        first = self._emit("equal", t, scalar(ctx, 0, "int64"))
        self.state_in = [self._emit("where", first, self._emit("take", init, b, axis=0), s)
                         for init, s in zip(inits, carried)]
        last = self._emit("subtract", self._emit("subtract", entry_len, scalar(ctx, 1, "int64")), t)
        back = self._emit("maximum", last, scalar(ctx, 0, "int64"))
        elems = [self._emit("take", self._emit("take", scan, b, axis=0), back if rev else t, axis=0)
                 for scan, rev in zip(scans, self.dirs)]
        return {name: Value(e.struct_info, expr=e) for name, e in zip(self.names, [*self.state_in, *elems])}

    def finish(self, outputs):
        ctx, n_state = self.ctx, self.n_state
        states = [self._emit("where", self.valid, ctx.expr(o), s)
                  for o, s in zip(outputs[:n_state], self.state_in)]
        scans = [self._emit("where", self.valid, ctx.expr(o), scalar(ctx, 0, o.dtype)) for o in outputs[n_state:]]
        as_values = [Value(e.struct_info, expr=e) for e in (*states, *states, *scans)]
        return [ctx.const(np.array(True)), *as_values]

    def _emit(self, op, *args, **attrs):
        args = [self.ctx.expr(a) if isinstance(a, Value) else a for a in args]
        return self.ctx.bb.emit(make_call(op, *args, **attrs), "scan_step")


def _by_entry(ctx, stacked: Value, batch, length) -> Value:
    """A ``[batch * time, ...]`` stacked output as ``[batch, time, ...]``."""
    shape = (batch, length, *stacked.shape[1:])
    expr = ctx.bb.emit(make_call("reshape", ctx.expr(stacked), ShapeExpr(shape)), "scan_out")
    return Value(expr.struct_info, expr=expr)


def _final_state(ctx, stacked: Value, init: Value, batch, length) -> Value:
    """Each entry's state after its last step: the row ``[init[b], step 0, ..., step time-1]``'s last."""
    rows = _by_entry(ctx, stacked, batch, length)
    first = ctx.bb.emit(make_call("expand_dims", ctx.expr(init), axis=(1,)), "scan_init")
    full = ctx.bb.emit(make_call("concat", Tuple([first, ctx.expr(rows)]), axis=1), "scan_states")
    last = ctx.expr(ctx.sym_value((length,), scalar=True))
    expr = ctx.bb.emit(make_call("take", full, last, axis=1), "scan_final")
    return Value(expr.struct_info, expr=expr)


__all__ = ["scan_v8"]

"""ConvertLayout: run the convolutional parts of a model channels last (NHWC).

Channels-last kernels are cheaper where the channels are the long,
contiguous dim: a depthwise conv becomes one einsum over strided tap views
(no per-layer transposes) and a 1x1 conv one plain ``(HW, C) @ (C, O)``
GEMM. As TVM's ConvertLayout, the pass rewrites maximal regions of rank-4
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

Conv weights are constants packed at convert time into HWIO (``W'``), the
layout the NHWC kernel reads. Rules (table :data:`RULES`, op name ->
:class:`LayoutRule`):

- layout-sensitive ops continue a region: ``nn.conv``,
  ``nn.conv_bias_act`` (a constant weight), ``nn.max_pool``,
  ``nn.avg_pool``, ``nn.global_avg_pool``, ``nn.global_max_pool``; a conv
  of at least ``THRESHOLDS.entry_min_channels`` input channels starts one
  (:class:`Thresholds`: when a conv joins a region or gains from one);
- a conv that stays channels first (a 3-channel stem, a shallow conv on a
  large plane) starts a region by writing its result channels last,
  ``out_layout="NHWC"``, when the channels-first engine ends it in a copy
  out of its GEMM result (:func:`.kernels.nn.copies_out`: the copy then
  transposes, at about the same cost) and it makes at least
  ``entry_min_channels`` channels: no transpose in after it, and what
  follows (ResNet's stem max pool) can join the region::

      lv0 = R.nn.conv_bias_act(x, W, b, activation="relu", out_layout="NHWC")   # (n, 112, 112, 64)
      lv1 = R.nn.max_pool(lv0, ..., data_layout="NHWC")

- elementwise ops continue one when an operand is already channels last and
  the others are too, or are scalars or constants (reordered: a bias
  ``(1, C, 1, 1)`` becomes ``(1, 1, 1, C)``), or channels-first values an
  earlier call of a region already transposes in (ResNet's residual add of
  the stem pool: it reads that transpose);
- ``nn.conv_transpose`` (a constant weight, packed to ``(C, kh, kw,
  O/groups)``) continues or starts a region as a conv does;
- ``image.resize`` of a channels-last value continues one: the same axes
  renumbered (2, 3 -> 1, 2), its scales, roi and size unchanged (they
  follow the axes' order);
- ``concat`` along the channels of channels-last operands concatenates
  along axis 3;
- ``flatten(axis=1)`` of a channels-last value whose spatial dims are all
  1 (after a global pool) reads it as it is: the same values in the same
  order, so the region ends without a transpose.

Each op's rules are tried in order (:data:`RULES`); anything else ends the region. A region is kept only when the calls
that run faster channels last (a rule's ``gains``: depthwise, strided or
deep KxK convs, 3x3 convs run by Winograd, transposed convs, resizes) are at least as many as its
transposes in and out. A region input that is itself a transpose
out of channels last (``permute_dims(v, (0, 3, 1, 2))``) is read through
(transposes that cancel are never made), and transposes out that nothing
reads are left to DeadCodeElimination. The pass works on each function's
top-level bindings; a value used in a nested scope is transposed back.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ir.block_builder import BlockBuilder
from ..ir.expr import (
    Call, Constant, DataflowBlock, DataflowVar, Expr, Function, MatchCast, Op, Tuple, Var, VarBinding,
)
from ..ir.struct_info import TensorStructInfo
from ..ir.visitor import ExprVisitor
from ..ir.well_formed import function_analyzer
from ..ops.definitions.fused_elementwise import fusible_kind
from ..ops.registry import make_call
from ..runtime.kernels.conv_winograd import prefers_winograd
from ..runtime.kernels.nn import copies_out
from .infra import function_pass

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)

@dataclass(frozen=True)
class Thresholds:
    """When a conv joins or gains from a channels-last region (measured, 1
    thread, on the benchmark CNNs; A/B runs in one process decide them).

    - ``entry_min_channels``: a conv starts a region only with this many
      input channels: with fewer (a 3-channel stem) channels last runs
      2-4x slower than the channels-first engine, more than transposing
      its output in costs;
    - ``shallow_depth`` / ``large_plane_pixels``: a stride-1 KxK conv of
      fewer products per output value (C_in * taps) on an output of at
      least that many pixels stays channels first. The per-tap GEMMs
      (``conv_nhwc`` "taps") run such convs at 0.9-1.2x the channels-first
      row-split GEMM's time. With Resize and ConvTranspose in regions,
      the bar made no difference beyond noise (A/B in one process, 21
      interleaved rounds, ratio to onnxruntime at 1024 / 512 / 256 / 0:
      UNet 1.79 / 1.85 / 1.80 / 1.82, YOLO 1.65 / 1.69 / 1.68 / 1.66),
      so it stays at 1024: the fewest transposes of large planes. A 3x3
      stride-1 conv the channels-last engine runs by Winograd (from 64
      channels, :func:`.conv_winograd.prefers_winograd`) is never shallow
      and always a gain (1.2-1.9x the channels-first time; UNet's 64x64
      level channels last: 51.5 -> 49.7 ms, A/B in one process);
    - ``gain_min_depth``: a stride-1 KxK conv counts as a gain (a reason to
      keep a region) from this depth on: 0.8-0.9x the channels-first time
      from 128 channels.
    """

    entry_min_channels: int = 16
    shallow_depth: int = 1024
    large_plane_pixels: int = 4096
    gain_min_depth: int = 1024


#: the thresholds the pass uses
THRESHOLDS = Thresholds()

#: ops whose data layout is an attribute (the channels-first ones become NHWC)
SENSITIVE = ("nn.conv", "nn.conv_bias_act", "nn.max_pool", "nn.avg_pool", "nn.global_avg_pool",
             "nn.global_max_pool")


# ---------------------------------------------------------------- rules


@dataclass(frozen=True)
class LayoutRule:
    """How one op joins a region: ``check(call, is_nhwc)`` returns None when
    it can (``is_nhwc(expr)``: that operand is channels last in the region)
    or why not; ``rewrite(call, nhwc)`` builds the channels-last call
    (``nhwc(expr)``: the operand channels last). ``output_nhwc``: the
    result stays in the region (False: the rule reads the region and ends it).
    ``gains(call)``: the call runs faster channels last, a reason to keep
    its region (:func:`_worth_it`). ``reads_nhwc``: False when the call reads
    its operands as they are, channels first (a conv writing its result
    channels last): none is transposed in or counts as a region read."""

    name: str
    check: Callable
    rewrite: Callable
    output_nhwc: bool = True
    gains: Callable | None = None
    reads_nhwc: bool = True


def _rank4(expr: Expr) -> bool:
    sinfo = expr.struct_info
    return isinstance(sinfo, TensorStructInfo) and sinfo.ndim == 4


def _starts_region(call: Call, is_nhwc) -> str | None:
    """None when ``call``'s data is channels last already, or has enough
    channels for a conv to start a region (``THRESHOLDS.entry_min_channels``):
    a region starts only where channels last pays for the transpose in."""
    if is_nhwc(call.args[0]):
        return None
    channels = call.args[0].struct_info.shape[1] if call.args[0].struct_info.shape else None
    least = THRESHOLDS.entry_min_channels
    if not (isinstance(channels, int) and channels >= least):
        return f"a conv of {channels} input channels does not start a region (< {least})"
    return None


def _check_sensitive(call: Call, is_nhwc) -> str | None:
    if call.attrs.get("data_layout") != "NCHW":
        return f"R.{call.op.name} is already {call.attrs.get('data_layout')}"
    if call.attrs.get("out_layout") not in (None, "NCHW"):
        return f"R.{call.op.name} already writes {call.attrs['out_layout']}"
    if not (_rank4(call.args[0]) and _rank4(call)):
        return f"R.{call.op.name} is not 2-d (rank 4)"
    is_conv = call.op.name.startswith("nn.conv")
    if is_conv and not isinstance(call.args[1], Constant):
        return "the conv weight is not a constant (it would be transposed on every call)"
    if is_conv and _prefers_channels_first(call):
        return "a stride-1 conv of few channels on a large plane runs faster channels first"
    if not is_conv and not is_nhwc(call.args[0]):
        return f"R.{call.op.name} does not start a region (its input is channels first)"
    return _starts_region(call, is_nhwc)


def _prefers_channels_first(call: Call) -> bool:
    """A stride-1, non-depthwise KxK conv shallow for its plane (see :class:`Thresholds`)."""
    weight, out = call.args[1].data.shape, call.struct_info.shape
    taps = weight[2] * weight[3]
    depthwise = weight[1] == 1 and call.attrs["groups"] > 1
    if taps == 1 or depthwise or any(s != 1 for s in _pair(call.attrs["strides"])) or out is None:
        return False
    if _runs_winograd(call):
        return False
    pixels = out[2] * out[3] if isinstance(out[2], int) and isinstance(out[3], int) else None
    return (weight[1] * taps < THRESHOLDS.shallow_depth
            and (pixels is None or pixels >= THRESHOLDS.large_plane_pixels))


def _runs_winograd(call: Call) -> bool:
    """A conv the channels-last engine runs by Winograd F(2x2, 3x3) (3x3,
    stride 1, many channels): 1.2-1.9x faster than the channels-first
    engine on UNet's and YOLO's planes (measured, 1 thread)."""
    weight, groups, out = call.args[1].data.shape, call.attrs["groups"], call.struct_info.shape
    return prefers_winograd(weight[2:], _pair(call.attrs["strides"]), _pair(call.attrs["dilation"]), groups,
                            weight[1] * groups, None if out is None else tuple(out)[2:])


def _pair(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


def _rewrite_sensitive(call: Call, nhwc) -> Call:
    args = [nhwc(call.args[0])]
    if call.op.name.startswith("nn.conv"):
        # OIHW -> HWIO, packed once here
        args.append(Constant(np.ascontiguousarray(call.args[1].data.transpose(2, 3, 1, 0))))
        args += call.args[2:]
    return make_call(call.op.name, *args, **{**call.attrs, "data_layout": "NHWC"})


def _check_entry(call: Call, is_nhwc) -> str | None:
    """A channels-first conv (one the sensitive rule leaves channels first)
    can write its result channels last, starting a region without a
    transpose in: when its engine ends in a copy out (which then transposes,
    at about the channels-first cost: ResNet's stem 2.80 -> 2.64 ms, YOLO's
    32-channel 160x160 conv 5.79 -> 5.84 ms, each without the transpose of
    0.3 / 0.75 ms after it; measured, 1 thread) and it makes at least
    ``entry_min_channels`` channels (so a conv reading the region would
    start one anyway)."""
    if call.attrs.get("data_layout") != "NCHW" or call.attrs.get("out_layout") not in (None, "NCHW"):
        return f"R.{call.op.name} is not channels first"
    data, weight = call.args[0].struct_info, call.args[1].struct_info
    if not (_rank4(call.args[0]) and _rank4(call) and isinstance(weight, TensorStructInfo)
            and data.shape is not None and weight.shape is not None):
        return f"R.{call.op.name} is not 2-d (rank 4) with known operand shapes"
    out_channels, least = weight.shape[0], THRESHOLDS.entry_min_channels
    if not (isinstance(out_channels, int) and out_channels >= least):
        return f"the conv makes {out_channels} channels (< {least})"
    attrs = {k: call.attrs[k] for k in ("strides", "padding", "dilation", "groups")}
    if not copies_out(tuple(data.shape), tuple(weight.shape), **attrs):
        return "the channels-first engine does not end this conv in a copy out (it would transpose once more)"
    return None


def _rewrite_entry(call: Call, nhwc) -> Call:
    return make_call(call.op.name, *call.args, **{**call.attrs, "out_layout": "NHWC"})


def _reordered_constant(c: Constant) -> Constant | None:
    """A constant operand of a rank-4 elementwise op, channels last."""
    data = c.data
    if data.ndim == 0:
        return c
    if data.ndim > 4:
        return None
    data = data.reshape((1,) * (4 - data.ndim) + data.shape)
    return Constant(np.ascontiguousarray(data.transpose(TO_NHWC)))


def _is_scalar(expr: Expr) -> bool:
    sinfo = expr.struct_info
    return not isinstance(sinfo, TensorStructInfo) or sinfo.ndim == 0


def _check_elementwise(call: Call, is_nhwc) -> str | None:
    if not _rank4(call):
        return "the result is not rank 4"
    if not any(is_nhwc(a) for a in call.args):
        return "no operand is channels last"
    for i, a in enumerate(call.args):
        if not (is_nhwc(a) or _is_scalar(a) or (isinstance(a, Constant) and a.data.ndim <= 4)
                or _transposed_in(is_nhwc, a)):
            return (f"operand {i} is neither channels last, a scalar, a constant nor a value "
                    f"a region transposes in")
    return None


def _transposed_in(is_nhwc, expr: Expr) -> bool:
    """``expr`` is a channels-first value that an earlier call of a region
    already reads through a transpose in (``is_nhwc.transposed_in``): reading
    it channels last costs nothing more, and keeps ResNet's residual adds
    (whose shortcut is the channels-first stem pool) in the region instead
    of transposing the conv's result out and back in."""
    check = getattr(is_nhwc, "transposed_in", None)
    return check is not None and _rank4(expr) and check(expr)


def _rewrite_elementwise(call: Call, nhwc) -> Call:
    args = []
    for a in call.args:
        if isinstance(a, Constant) and not _is_scalar(a):
            args.append(_reordered_constant(a))
        elif _is_scalar(a):
            args.append(a)
        else:
            args.append(nhwc(a))
    return make_call(call.op.name, *args, **call.attrs)


def _check_concat(call: Call, is_nhwc) -> str | None:
    fields = call.args[0]
    if not (isinstance(fields, Tuple) and _rank4(call) and call.attrs["axis"] in (1, -3)):
        return "not a concat of rank-4 tensors along the channels"
    if not all(is_nhwc(f) for f in fields.fields):
        return "an operand is not channels last"
    return None


def _rewrite_concat(call: Call, nhwc) -> Call:
    return make_call("concat", Tuple(tuple(nhwc(f) for f in call.args[0].fields)), axis=3)


def _check_flatten(call: Call, is_nhwc) -> str | None:
    data = call.args[0]
    if not (is_nhwc(data) and call.attrs["axis"] == 1):
        return "not a flatten(axis=1) of a channels-last value"
    shape = data.struct_info.shape
    if shape is None or any(d != 1 for d in shape[2:]):
        return "the spatial dims are not all 1"
    return None


def _rewrite_flatten(call: Call, nhwc) -> Call:
    return make_call("flatten", nhwc(call.args[0]), axis=1)


def _check_conv_transpose(call: Call, is_nhwc) -> str | None:
    if call.attrs.get("data_layout") != "NCHW":
        return f"R.nn.conv_transpose is already {call.attrs.get('data_layout')}"
    if not (_rank4(call.args[0]) and _rank4(call)):
        return "R.nn.conv_transpose is not 2-d (rank 4)"
    if not isinstance(call.args[1], Constant):
        return "the weight is not a constant (it would be transposed on every call)"
    return _starts_region(call, is_nhwc)


def _rewrite_conv_transpose(call: Call, nhwc) -> Call:
    # (C, O/groups, kh, kw) -> (C, kh, kw, O/groups): the GEMM's (C, taps * O), packed once here
    weight = Constant(np.ascontiguousarray(call.args[1].data.transpose(0, 2, 3, 1)))
    return make_call("nn.conv_transpose", nhwc(call.args[0]), weight, *call.args[2:],
                     **{**call.attrs, "data_layout": "NHWC"})


def _check_resize(call: Call, is_nhwc) -> str | None:
    if not (_rank4(call.args[0]) and is_nhwc(call.args[0])):
        return "the resized data is not channels last (a resize does not start a region)"
    return None


def _rewrite_resize(call: Call, nhwc) -> Call:
    # the same axes in the same order (scales, roi and size follow them unchanged)
    axes = tuple(TO_NHWC.index(a % 4) for a in call.attrs["axes"])
    return make_call("image.resize", nhwc(call.args[0]), *call.args[1:], **{**call.attrs, "axes": axes})


def _gains(call: Call) -> bool:
    """A conv that runs faster channels last (measured): depthwise, strided
    KxK, or deep enough (C_in * taps >= ``THRESHOLDS.gain_min_depth``). 1x1 convs and pools are
    about even, so a region of only those would only add its transposes."""
    if not call.op.name.startswith("nn.conv"):
        return False
    weight = call.args[1].data.shape
    taps = weight[2] * weight[3]
    if taps == 1:
        return False
    depthwise = weight[1] == 1 and call.attrs["groups"] > 1
    strided = any(s != 1 for s in _pair(call.attrs["strides"]))
    return depthwise or strided or weight[1] * taps >= THRESHOLDS.gain_min_depth or _runs_winograd(call)


_SENSITIVE_RULE = LayoutRule("sensitive", _check_sensitive, _rewrite_sensitive, gains=_gains)
_ENTRY_RULE = LayoutRule("conv_writes_nhwc", _check_entry, _rewrite_entry, reads_nhwc=False)
_ELEMENTWISE_RULE = LayoutRule("elementwise", _check_elementwise, _rewrite_elementwise)

#: op name -> its rules, tried in order (the first whose check passes is taken)
RULES: dict[str, tuple[LayoutRule, ...]] = {
    **{op: (_SENSITIVE_RULE,) for op in SENSITIVE},
    "nn.conv": (_SENSITIVE_RULE, _ENTRY_RULE),
    "nn.conv_bias_act": (_SENSITIVE_RULE, _ENTRY_RULE),
    # channels last: one GEMM with the weight as it is, and for kernel == stride no overlapping adds
    # (1.4-5x faster than channels first on UNet's decoder, measured)
    "nn.conv_transpose": (LayoutRule("conv_transpose", _check_conv_transpose, _rewrite_conv_transpose,
                                     gains=lambda call: True),),
    # gathers of contiguous channel runs: 2.5-4x faster than channels first (UNet, YOLO; measured)
    "image.resize": (LayoutRule("resize", _check_resize, _rewrite_resize, gains=lambda call: True),),
    "concat": (LayoutRule("concat_channels", _check_concat, _rewrite_concat),),
    "flatten": (LayoutRule("flatten_unit_spatial", _check_flatten, _rewrite_flatten, output_nhwc=False),),
}


def rules_for(call: Call) -> tuple[LayoutRule, ...]:
    """The rules for ``call``'s op, in the order they are tried (elementwise ops share one)."""
    if not isinstance(call.op, Op):
        return ()
    rules = RULES.get(call.op.name)
    if rules is None and fusible_kind(call.op.name) == "elementwise":
        return (_ELEMENTWISE_RULE,)
    return rules or ()


def rule_for(call: Call, is_nhwc) -> LayoutRule | None:
    """The first of ``call``'s rules whose check passes, or None."""
    return next((r for r in rules_for(call) if r.check(call, is_nhwc) is None), None)


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
    without it otherwise (it would move a transpose, not save one)."""
    uses = _Uses()
    uses.visit_expr(func.body)
    blocked: set[Var] = set()
    values = {b.var: b.value for block in func.body.blocks for b in block.bindings}
    while True:
        candidates, kept = _plan_regions(func, uses.count, blocked)
        reads = _region_reads(candidates, values)        # (an entry's readers are in its region)
        read_first = {v for v, rule in candidates.items()
                      if not rule.reads_nhwc and uses.count.get(v, 0) > reads.get(v, 0)}
        if not read_first:
            return kept
        blocked |= read_first


def _region_reads(chosen: dict, values: dict) -> dict[Var, int]:
    """How often the chosen calls that read the region read each var."""
    reads: dict[Var, int] = {}
    for v, rule in chosen.items():
        for a in _operands(values[v]) if rule.reads_nhwc else ():
            if isinstance(a, Var):
                reads[a] = reads.get(a, 0) + 1
    return reads


def _plan_regions(func: Function, uses: dict, blocked: set) -> tuple[dict, dict]:
    """One planning sweep (the convs in ``blocked`` do not write channels
    last): every call that can join a region, and those of the regions kept."""
    nhwc: set[Var] = set()
    entered: set[Var] = set()                     # channels-first vars a chosen call reads (transposed in)
    chosen: dict[Var, LayoutRule] = {}
    region: dict[Var, Var] = {}                   # union-find: var -> a var of its region
    is_nhwc = _RegionView(nhwc, entered)

    def root(v: Var) -> Var:
        while region[v] is not v:
            v = region[v]
        return v

    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b, MatchCast) or not isinstance(b.value, Call):
                continue
            rule = next((r for r in rules_for(b.value) if (r.reads_nhwc or b.var not in blocked)
                         and r.check(b.value, is_nhwc) is None), None)
            if rule is None:
                continue
            chosen[b.var] = rule
            region[b.var] = b.var
            if rule.output_nhwc:
                nhwc.add(b.var)
            for a in _operands(b.value) if rule.reads_nhwc else ():
                if is_nhwc(a):
                    region[root(a)] = root(b.var)
                elif isinstance(a, Var) and _rank4(a):
                    entered.add(a)
    return chosen, _worth_it(func, chosen, nhwc, root, uses)


class _RegionView:
    """The planner's view of the regions for the rules' checks: called with
    an expr, whether it is channels last in a region; ``transposed_in(expr)``:
    whether a chosen call already reads that channels-first var (through a
    transpose in)."""

    def __init__(self, nhwc: set, entered: set):
        self.nhwc, self.entered = nhwc, entered

    def __call__(self, expr: Expr) -> bool:
        return isinstance(expr, Var) and expr in self.nhwc

    def transposed_in(self, expr: Expr) -> bool:
        return isinstance(expr, Var) and expr in self.entered


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
        for a in _operands(values[v]) if rule.reads_nhwc else ():
            if isinstance(a, Var) and a in nhwc:
                reads[a] = reads.get(a, 0) + 1
            elif isinstance(a, Var) and not _is_scalar(a) and _transposed_from(values.get(a)) is None:
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
                if b.var not in self.chosen or not self.chosen[b.var].reads_nhwc:
                    continue
                for a in b.value.args:
                    for e in (a.fields if isinstance(a, Tuple) else (a,)):
                        if isinstance(e, Var):
                            self.nhwc_reads[e] = self.nhwc_reads.get(e, 0) + 1

    def _emit(self, var: Var | None, value: Expr, like: Var, span, var_type=None) -> Var:
        """Bind ``value`` to ``var``, or to a new ``<like>_nhwc`` var of
        ``var_type`` (default: like's own type, so it is visible where like is)."""
        value = self.builder.normalize(value)
        if var is None:
            var = (var_type or type(like))(like.name_hint + "_nhwc", struct_info=value.struct_info)
        self.bindings.append(VarBinding(var, value, span=span))
        return var

    def _nhwc(self, expr: Expr, span) -> Expr:
        """``expr`` (a channels-first rank-4 var) channels last."""
        if expr in self.nhwc_of:
            return self.nhwc_of[expr]
        source = _transposed_from(self.bound.get(expr)) if isinstance(expr, Var) else None
        if source is not None:
            return source
        if expr not in self.entry:
            value = make_call("permute_dims", expr, axes=TO_NHWC)
            self.entry[expr] = self._emit(None, value, expr, span, DataflowVar if self.dataflow else Var)
        return self.entry[expr]

    def _binding(self, b) -> None:
        rule = self.chosen.get(b.var)
        if rule is None:
            self.bindings.append(b)
            self.bound[b.var] = b.value
            return
        new = rule.rewrite(b.value, lambda e: self._nhwc(e, b.span))
        if not rule.output_nhwc:
            self._emit(b.var, new, b.var, b.span)
            return
        nhwc_var = self._emit(None, new, b.var, b.span)
        self.nhwc_of[b.var] = nhwc_var
        if self.uses.get(b.var, 0) > self.nhwc_reads.get(b.var, 0):
            # read channels first too (outside the region, in a nested scope or as the result)
            self._emit(b.var, make_call("permute_dims", nhwc_var, axes=TO_NCHW), b.var, b.span)


@function_pass(name="ConvertLayout", opt_level=2, requires=("import", "optimize"), produces="optimize")
def convert_layout(func, mod, ctx):
    """Rewrite the convolutional regions of ``func`` channels last (see the module docstring)."""
    chosen = _plan(func)
    if not chosen:      # (every region kept has a gaining call)
        return func
    return _Rewriter(func, chosen).run(func)


__all__ = ["convert_layout", "RULES", "LayoutRule", "Thresholds", "THRESHOLDS", "rule_for", "rules_for"]

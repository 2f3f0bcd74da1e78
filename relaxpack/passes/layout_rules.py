"""The layout rules of ConvertLayout (:mod:`.convert_layout`): for each op,
whether a call joins a channels-last region (``check``) and the call it
becomes there (``rewrite``), and the measured thresholds that decide when a
conv starts, joins or gains from a region (:class:`Thresholds`).

>>> sorted(RULES)[:3]
['concat', 'flatten', 'image.resize']
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..ir.expr import Call, Constant, Expr, Op, Tuple, TupleGetItem
from ..ir.struct_info import TensorStructInfo
from ..ops.definitions.fused_elementwise import fusible_kind
from ..ops.registry import make_call
from ..runtime.kernels.conv_winograd import prefers_winograd
from ..runtime.kernels.conv_wide import never_wide
from ..runtime.kernels.nn import copies_out
from .core.rules import Rule, first_applicable
from .layout_carry import (
    TO_NHWC, check_item, check_product_out, check_shuffle, check_slice, check_split, check_transpose_in,
    rank4, rewrite_item, rewrite_product_out, rewrite_shuffle, rewrite_slice, rewrite_split, rewrite_transpose_in,
    shuffle_absorbs, shuffle_operands,
)


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
      from 128 channels;
    - ``depthwise_entry_min_channels``: a depthwise conv starts a region from
      this many channels: channels last (one einsum per phase over whole
      rows) it runs at 0.59-0.69x the channels-first time (two passes a tap)
      at 8-32 channels, 56x56 to 112x112, 3x3 stride 1 and 2 (the
      0.5-width MobileNets' and LCNet's first blocks).
    """

    entry_min_channels: int = 16
    shallow_depth: int = 1024
    large_plane_pixels: int = 4096
    gain_min_depth: int = 1024
    depthwise_entry_min_channels: int = 8


#: the thresholds the pass uses
THRESHOLDS = Thresholds()

#: ops whose data layout is an attribute (the channels-first ones become NHWC)
SENSITIVE = ("nn.conv", "nn.conv_bias_act", "nn.max_pool", "nn.avg_pool", "nn.global_avg_pool",
             "nn.global_max_pool")


# ---------------------------------------------------------------- rules


@dataclass(frozen=True)
class LayoutRule(Rule):
    """How one op joins a region (a :class:`~.core.rules.Rule` without a
    pattern: :func:`rules_for` picks the rules by op). ``check(call,
    is_nhwc)`` returns None when it can (``is_nhwc(expr)``: that operand is
    channels last in the region) or why not; ``rewrite(call, nhwc)`` builds
    the channels-last call (``nhwc(expr)``: the operand channels last).
    ``output_nhwc``: the result stays in the region (False: the rule reads
    the region and ends it). ``gains(call)``: the call runs faster channels
    last, a reason to keep its region (:func:`.convert_layout._worth_it`).
    ``reads_nhwc``: False when the call reads its operands as they are,
    channels first (a conv writing its result channels last): none is
    transposed in or counts as a region read. ``operands(value, values)``:
    the values the rule reads channels last when they are not the call's
    own arguments (a rule that looks through bindings, ``values`` the
    function's var -> value); ``absorbs(value, values)``: the bindings it
    looked through, used only by it, which the rewrite drops. ``connects``:
    the call gains nothing and only carries channels last on (the planner
    leaves it channels first where its region is not kept)."""

    output_nhwc: bool = True
    gains: Callable | None = None
    reads_nhwc: bool = True
    operands: Callable | None = None
    absorbs: Callable | None = None
    connects: bool = False


def layout_rule(name: str, check: Callable, rewrite: Callable, **flags) -> LayoutRule:
    """A layout rule of ``name``; its op comes from the table (:data:`RULES`), not a pattern."""
    return LayoutRule(name, None, check, rewrite, **flags)


def _starts_region(call: Call, is_nhwc) -> str | None:
    """None when ``call``'s data is channels last already, or has enough
    channels for a conv to start a region (``THRESHOLDS.entry_min_channels``):
    a region starts only where channels last pays for the transpose in."""
    if is_nhwc(call.args[0]):
        return None
    channels = call.args[0].struct_info.shape[1] if call.args[0].struct_info.shape else None
    least = THRESHOLDS.depthwise_entry_min_channels if _is_depthwise(call) else THRESHOLDS.entry_min_channels
    if not (isinstance(channels, int) and channels >= least):
        return f"a conv of {channels} input channels does not start a region (< {least})"
    return None


def _is_depthwise(call: Call) -> bool:
    """A conv of one input channel per group, groups > 1 (pools: False)."""
    if not call.op.name.startswith("nn.conv") or len(call.args) < 2:
        return False
    weight = call.args[1].struct_info
    shape = getattr(weight, "shape", None)
    return shape is not None and len(shape) > 1 and shape[1] == 1 and call.attrs.get("groups", 1) > 1


def _check_sensitive(call: Call, is_nhwc) -> str | None:
    if call.attrs.get("data_layout") != "NCHW":
        return f"R.{call.op.name} is already {call.attrs.get('data_layout')}"
    if call.attrs.get("out_layout") not in (None, "NCHW"):
        return f"R.{call.op.name} already writes {call.attrs['out_layout']}"
    if not (rank4(call.args[0]) and rank4(call)):
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
    depthwise = _is_depthwise(call)
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
    engine on UNet's and YOLO's planes (measured, 1 thread); never an ``exact`` conv."""
    if call.attrs.get("exact"):
        return False
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
    if not (rank4(call.args[0]) and rank4(call) and isinstance(weight, TensorStructInfo)
            and data.shape is not None and weight.shape is not None):
        return f"R.{call.op.name} is not 2-d (rank 4) with known operand shapes"
    out_channels = weight.shape[0]
    least = min(THRESHOLDS.entry_min_channels, THRESHOLDS.depthwise_entry_min_channels)
    if not (isinstance(out_channels, int) and out_channels >= least):
        return f"the conv makes {out_channels} channels (< {least})"
    attrs = {k: call.attrs[k] for k in ("strides", "padding", "dilation", "groups")}
    if _symbolic_plane(data.shape, weight.shape, attrs):
        return None
    if not copies_out(tuple(data.shape), tuple(weight.shape), **attrs):
        return "the channels-first engine does not end this conv in a copy out (it would transpose once more)"
    return None


def _symbolic_plane(data_shape, weight_shape, attrs: dict) -> bool:
    """An ungrouped strided conv without wide rows at any size (:func:`.conv_wide.never_wide`: a
    MobileNet's 3x3/2 stem, not a ResNet's 7x7/2) of fewer input channels than start a region,
    whose channels and kernel are ints but whose plane is not (an image of any size): its method is
    picked per call. On small images (the strided method) its GEMM writes channels last at no cost
    (MobileNets, EfficientNet 0.93-0.97x); on large ones it copies out (a copy that transposes) or
    stages a channels-first result and transposes that, about the transpose after it that it
    replaces. (With wide rows, which stage, DB-det and DETR's stems ran 1.13-1.41x slower: their
    pools and adds then ran channels last too.)"""
    channels, kernel = data_shape[1], tuple(weight_shape[2:])
    if attrs["groups"] != 1 or not all(isinstance(d, int) for d in (channels, *weight_shape)) \
            or channels >= THRESHOLDS.entry_min_channels or all(isinstance(d, int) for d in data_shape[2:]):
        return False
    return never_wide(kernel, attrs["strides"], attrs["dilation"])


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


def is_scalar(expr: Expr) -> bool:
    sinfo = expr.struct_info
    return not isinstance(sinfo, TensorStructInfo) or sinfo.ndim == 0


def _check_elementwise(call: Call, is_nhwc) -> str | None:
    if not rank4(call):
        return "the result is not rank 4"
    if not any(is_nhwc(a) for a in call.args):
        return "no operand is channels last"
    for i, a in enumerate(call.args):
        if not (is_nhwc(a) or is_scalar(a) or (isinstance(a, Constant) and a.data.ndim <= 4)
                or _transposed_in(is_nhwc, a) or _from_channels_last(is_nhwc, a)):
            return (f"operand {i} is neither channels last, a scalar, a constant, a value "
                    f"a region transposes in nor a transpose out of channels last")
    return None


def _from_channels_last(is_nhwc, expr: Expr) -> bool:
    """``expr`` is a transpose out of a channels-last value (``is_nhwc.from_channels_last``), which
    the region reads as it is: ConvNeXt's residual add of its layer norm's transposed result."""
    check = getattr(is_nhwc, "from_channels_last", None)
    return check is not None and rank4(expr) and check(expr)


def _check_cast(call: Call, is_nhwc) -> str | None:
    """An elementwise cast joins a region as any elementwise op, and also when it casts a transpose
    out of a channels-last value: a float16 model's conv reads ``astype(permute_dims(ln, to
    NCHW), float32)`` (the importer computes it in float32), which channels last is
    ``astype(ln)`` with no transpose (ConvNeXt float16's depthwise convs, as its float32 twin's)."""
    reason = _check_elementwise(call, is_nhwc)
    from_channels_last = getattr(is_nhwc, "from_channels_last", None)
    if reason is None or not (rank4(call) and from_channels_last is not None
                              and from_channels_last(call.args[0])):
        return reason
    return None


def _transposed_in(is_nhwc, expr: Expr) -> bool:
    """``expr`` is a channels-first value that an earlier call of a region
    already reads through a transpose in (``is_nhwc.transposed_in``): reading
    it channels last costs nothing more, and keeps ResNet's residual adds
    (whose shortcut is the channels-first stem pool) in the region instead
    of transposing the conv's result out and back in."""
    check = getattr(is_nhwc, "transposed_in", None)
    return check is not None and rank4(expr) and check(expr)


def _rewrite_elementwise(call: Call, nhwc) -> Call:
    args = []
    for a in call.args:
        if isinstance(a, Constant) and not is_scalar(a):
            args.append(_reordered_constant(a))
        elif is_scalar(a):
            args.append(a)
        else:
            args.append(nhwc(a))
    return make_call(call.op.name, *args, **call.attrs)


def _concat_check(every: bool):
    """The check of a concat along the channels of rank-4 tensors: with ``every``, of channels-last
    operands only; without, of one channels-last operand or more, the others channels-first values
    transposed in (DenseNet's dense blocks concat the stem's pooled map, channels first, with each
    layer's output; GoogLeNet's inception branches). That rule ``connects``: where its region is
    not kept, the concat is planned again channels first, so a region that paid without it still
    forms."""
    def check(call: Call, is_nhwc) -> str | None:
        fields = call.args[0]
        if not (isinstance(fields, Tuple) and rank4(call) and call.attrs["axis"] in (1, -3)):
            return "not a concat of rank-4 tensors along the channels"
        if every and not all(is_nhwc(f) for f in fields.fields):
            return "an operand is not channels last"
        if not any(is_nhwc(f) for f in fields.fields):
            return "no operand is channels last"
        return None
    return check


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


def _spatial_mean(call: Call, is_nhwc, keepdims: bool) -> str | None:
    """None when ``call`` is a mean over the two spatial dims of a channels-last value (an SE
    block's squeeze, a head's global pool) with this ``keepdims``."""
    data = call.args[0]
    if not (rank4(data) and is_nhwc(data)):
        return "the data is not channels last (a mean does not start a region)"
    axis = call.attrs.get("axis")
    axes = (axis,) if isinstance(axis, int) else tuple(axis or ())
    if sorted(a % 4 for a in axes) != [2, 3]:
        return f"a mean over axes {axis}, not the spatial dims (2, 3)"
    if bool(call.attrs.get("keepdims")) != keepdims:
        return f"keepdims={bool(call.attrs.get('keepdims'))}"
    return None


def _rewrite_mean(call: Call, nhwc) -> Call:
    return make_call("mean", nhwc(call.args[0]), **{**call.attrs, "axis": (1, 2)})


def _check_table_lookup(call: Call, is_nhwc) -> str | None:
    """None when ``call`` is ``take(table, index)`` of a 1-d table along its axis with a
    channels-last index: elementwise in the index (a quantized model's QLinearSigmoid / LeakyRelu
    look-up, whose result has the index's shape; the table itself has no layout)."""
    table, index = call.args
    sinfo = table.struct_info
    if not (isinstance(sinfo, TensorStructInfo) and sinfo.ndim == 1 and call.attrs.get("axis") in (0, -1)):
        return "not a look-up in a 1-d table"
    if not (rank4(index) and rank4(call) and is_nhwc(index)):
        return "the index is not a channels-last rank-4 value"
    return None


def _rewrite_table_lookup(call: Call, nhwc) -> Call:
    return make_call("take", call.args[0], nhwc(call.args[1]), **call.attrs)


def _rewrite_sum(call: Call, nhwc) -> Call:
    return make_call("sum", nhwc(call.args[0]), **{**call.attrs, "axis": (1, 2)})


def _check_conv_transpose(call: Call, is_nhwc) -> str | None:
    if call.attrs.get("data_layout") != "NCHW":
        return f"R.nn.conv_transpose is already {call.attrs.get('data_layout')}"
    if not (rank4(call.args[0]) and rank4(call)):
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
    if not (rank4(call.args[0]) and is_nhwc(call.args[0])):
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
    depthwise = _is_depthwise(call)
    strided = any(s != 1 for s in _pair(call.attrs["strides"]))
    return depthwise or strided or weight[1] * taps >= THRESHOLDS.gain_min_depth or _runs_winograd(call)


_SENSITIVE_RULE = layout_rule("sensitive", _check_sensitive, _rewrite_sensitive, gains=_gains)
_ENTRY_RULE = layout_rule("conv_writes_nhwc", _check_entry, _rewrite_entry, reads_nhwc=False)
_ELEMENTWISE_RULE = layout_rule("elementwise", _check_elementwise, _rewrite_elementwise)
_CAST_RULE = layout_rule("cast", _check_cast, _rewrite_elementwise)
#: an item of a channels-last tuple (a split's piece) is channels last
ITEM_RULE = layout_rule("tuple_item", check_item, rewrite_item,
                        operands=lambda item, values: [item.tuple_value])

#: op name -> its rules, tried in order (the first whose check passes is taken)
RULES: dict[str, tuple[LayoutRule, ...]] = {
    **{op: (_SENSITIVE_RULE,) for op in SENSITIVE},
    "nn.conv": (_SENSITIVE_RULE, _ENTRY_RULE),
    "nn.conv_bias_act": (_SENSITIVE_RULE, _ENTRY_RULE),
    # channels last: one GEMM with the weight as it is, and for kernel == stride no overlapping adds
    # (1.4-5x faster than channels first on UNet's decoder, measured)
    "nn.conv_transpose": (layout_rule("conv_transpose", _check_conv_transpose, _rewrite_conv_transpose,
                                     gains=lambda call: True),),
    # gathers of contiguous channel runs: 2.5-4x faster than channels first (UNet, YOLO; measured)
    "image.resize": (layout_rule("resize", _check_resize, _rewrite_resize, gains=lambda call: True),),
    "astype": (_CAST_RULE,),
    "concat": (layout_rule("concat_channels", _concat_check(every=True), _rewrite_concat),
               layout_rule("concat_entering", _concat_check(every=False), _rewrite_concat, connects=True)),
    "flatten": (layout_rule("flatten_unit_spatial", _check_flatten, _rewrite_flatten, output_nhwc=False),),
    # an SE block's squeeze (N, 1, 1, C) stays in the region (its 1x1 convs and the scaling multiply
    # follow); a global pool's (N, C) is the same array in either layout: it ends the region as it is
    "mean": (layout_rule("mean_spatial_keepdims", lambda call, is_nhwc: _spatial_mean(call, is_nhwc, True),
                         _rewrite_mean),
             layout_rule("mean_spatial", lambda call, is_nhwc: _spatial_mean(call, is_nhwc, False), _rewrite_mean,
                         output_nhwc=False)),
    # a quantized model's integer global average pool sums over the spatial dims (as a mean)
    "sum": (layout_rule("sum_spatial_keepdims", lambda call, is_nhwc: _spatial_mean(call, is_nhwc, True),
                        _rewrite_sum),
            layout_rule("sum_spatial", lambda call, is_nhwc: _spatial_mean(call, is_nhwc, False), _rewrite_sum,
                        output_nhwc=False)),
    "take": (layout_rule("table_lookup", _check_table_lookup, _rewrite_table_lookup),),
    "strided_slice": (layout_rule("slice", check_slice, rewrite_slice, connects=True),),
    # the transpose it replaces is a copy saved: a gain (a stem writing channels last for it pays)
    "permute_dims": (layout_rule("transpose_in", check_transpose_in, rewrite_transpose_in, output_nhwc=False,
                                 gains=lambda call: True),),
    # a product transposed out: written channels last instead (its permuted writes gone)
    "permute_matmul": (layout_rule("product_out", check_product_out, rewrite_product_out, reads_nhwc=False,
                                   gains=lambda call: True),),
    "split": (layout_rule("split", check_split, rewrite_split, connects=True),),
    "reshape": (layout_rule("channel_shuffle", check_shuffle, rewrite_shuffle, connects=True,
                            operands=shuffle_operands, absorbs=shuffle_absorbs),),
}


def rules_for(call: Call) -> tuple[LayoutRule, ...]:
    """The rules for ``call``'s op, in the order they are tried (elementwise ops share one)."""
    if isinstance(call, TupleGetItem):
        return (ITEM_RULE,)
    if not isinstance(call.op, Op):
        return ()
    rules = RULES.get(call.op.name)
    if rules is None and fusible_kind(call.op.name) == "elementwise":
        return (_ELEMENTWISE_RULE,)
    return rules or ()


def rule_for(call: Call, is_nhwc) -> LayoutRule | None:
    """The first of ``call``'s rules whose check passes, or None."""
    return first_applicable(rules_for(call), call, is_nhwc)

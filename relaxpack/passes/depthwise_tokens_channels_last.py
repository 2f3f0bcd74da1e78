"""DepthwiseTokensChannelsLast: a depthwise conv between token-major transposes runs channels last.

A vision transformer's Mix-FFN (SegFormer, PVTv2) keeps its tokens ``(N, H*W, C)`` and runs a
depthwise 3x3 conv on them by a transpose to ``(N, C, H*W)``, a reshape to ``(N, C, H, W)``, the
conv, a reshape back to ``(N, C, H*W)`` and a transpose to ``(N, H*W, C)``. ``(N, H*W, C)`` reshaped
to ``(N, H, W, C)`` is the same image channels last, so the conv runs in NHWC on a reshape of the
tokens and its result reshaped is the tokens after: both transposes go (one a kernel call, the other
a strided write folded into the product before it), and the channels-first depthwise engine's own
transposes into and out of its channels-last einsum go with them::

    lv0 = R.permute_dims(t, axes=(0, 2, 1))                         # (n, 32, h*w)
    lv1 = R.reshape(lv0, R.shape([n, 32, h, w]))
    lv2 = R.nn.conv(lv1, W, groups=32, padding=(1, 1, 1, 1))        # W: (32, 1, 3, 3)
    lv3 = R.reshape(lv2, R.shape([n, 32, h * w]))
    lv4 = R.permute_dims(lv3, axes=(0, 2, 1))                       # (n, h*w, 32)
    ->
    lv1 = R.reshape(t, R.shape([n, h, w, 32]))
    lv2 = R.nn.conv(lv1, W', groups=32, padding=(1, 1, 1, 1), data_layout="NHWC")   # W': (3, 3, 1, 32)
    lv4 = R.reshape(lv2, R.shape([n, h * w, 32]))

Rule (table :data:`RULES`): ``depthwise_tokens_channels_last`` for a float32/float64, not ``exact``,
channels-first ``nn.conv`` / ``nn.conv_bias_act`` with one input channel per group and per output
channel (depthwise, multiplier 1) and a constant weight, each intermediate read only by the next.
Only depthwise convs: no GEMM changes orientation. The values move by the sums' rounding only: the
channels-first engine picks its method by plane (the channels-last einsum, the same bits, or wide
rows, another order of the taps' sums), so each result is within ``gamma_10 * sum |x w|`` of the
exact sum either way (docs/design-notes.md, "A depthwise conv between token-major transposes";
tested against float64).
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import Constant, ShapeExpr
from ..ir.struct_info import TensorStructInfo
from ..ops.definitions.nn import output_layout
from ..ops.registry import make_call
from .core.infra import function_pass
from .core.rules import Rule, RewriteTable, all_of, is_op, used_once, wildcard

_TOKENS_TO_CHANNELS = (0, 2, 1)


def _depthwise_channels_first(m) -> str | None:
    conv = m["conv"]
    if conv.attrs.get("exact"):
        return "the conv is exact (an integer product in float)"
    if conv.attrs["data_layout"] != "NCHW" or output_layout(conv) != "NCHW":
        return f"the conv is not channels first ({conv.attrs['data_layout']} -> {output_layout(conv)})"
    sinfo = conv.struct_info
    if not (isinstance(sinfo, TensorStructInfo) and sinfo.ndim == 4 and sinfo.dtype in ("float32", "float64")
            and sinfo.shape is not None):
        return "the conv's result is not a rank-4 float32/float64 tensor of known rank"
    weight = conv.args[1]
    if not isinstance(weight, Constant) or weight.data.ndim != 4:
        return "the conv's weight is not a rank-4 constant"
    out_channels, per_group = weight.data.shape[:2]
    if per_group != 1 or conv.attrs["groups"] != out_channels:
        return f"the conv is not depthwise (groups {conv.attrs['groups']}, weight {weight.data.shape})"
    return None


def _token_transposes(m) -> str | None:
    for name in ("perm_in", "perm_out"):
        axes = m[name].attrs.get("axes")
        if axes is None or tuple(axes) != _TOKENS_TO_CHANNELS:
            return f"the transpose {m.name_of(name)} has axes {axes}, not (0, 2, 1)"
    tokens = m["t"].struct_info
    if not (isinstance(tokens, TensorStructInfo) and tokens.ndim == 3 and tokens.shape is not None):
        return "the tokens are not a rank-3 tensor of known shape"
    return None


def _reshapes_keep_batch_and_channels(m) -> str | None:
    """The reshape in splits only the tokens' axis (its batch and channels are the transpose's), the
    reshape out joins only the spatial axes (its batch and channels are the conv's)."""
    image, tokens = m["reshape_in"].struct_info, m["perm_in"].struct_info
    result, flat = m["conv"].struct_info, m["reshape_out"].struct_info
    for what, a, b in (("reshape in", image, tokens), ("reshape out", flat, result)):
        if not (isinstance(a, TensorStructInfo) and a.shape is not None and b.shape is not None
                and a.ndim == 4 - (what == "reshape out") and b.ndim == 3 + (what == "reshape out")):
            return f"the {what} is not between rank 3 and rank 4 shapes"
        if not all(x == y or m.analyzer.prove_equal(x, y) for x, y in zip(a.shape[:2], b.shape[:2])):
            return f"the {what} moves values across the batch or channel axis"
    return None


def depthwise_tokens_channels_last(m):
    """permute(reshape(conv(reshape(permute(t))))) -> reshape(conv NHWC(reshape(t)))."""
    conv, image = m["conv"], m["reshape_in"].struct_info.shape
    n, c, h, w = image
    tokens_as_image = make_call("reshape", m["t"], ShapeExpr((n, h, w, c)))
    weight = Constant(np.ascontiguousarray(conv.args[1].data.transpose(2, 3, 1, 0)))     # OIHW -> HWIO
    nhwc = make_call(conv.op.name, tokens_as_image, weight, *conv.args[2:], **{**conv.attrs, "data_layout": "NHWC"})
    return make_call("reshape", nhwc, ShapeExpr(tuple(m.out_sinfo.shape)))


RULES = RewriteTable("DepthwiseTokensChannelsLast", [
    Rule("depthwise_tokens_channels_last",
         is_op("permute_dims")(
             is_op("reshape")(
                 is_op("nn.conv", "nn.conv_bias_act")(
                     is_op("reshape")(is_op("permute_dims")(wildcard("t"), name="perm_in"), wildcard(),
                                      name="reshape_in"),
                     ..., name="conv"),
                 wildcard(), name="reshape_out"),
             name="perm_out"),
         all_of(used_once("perm_in", "the transposed tokens"), used_once("reshape_in", "the image"),
                used_once("conv", "the conv's result"), used_once("reshape_out", "the flattened result"),
                _depthwise_channels_first, _token_transposes, _reshapes_keep_batch_and_channels),
         depthwise_tokens_channels_last),
])


@function_pass(name="DepthwiseTokensChannelsLast", opt_level=2, requires=("import", "optimize"),
               produces="optimize")
def depthwise_tokens_channels_last_pass(func, mod, ctx):
    """Depthwise convs between token-major transposes run channels last (module docstring)."""
    return RULES.apply(func)


__all__ = ["depthwise_tokens_channels_last_pass", "RULES"]

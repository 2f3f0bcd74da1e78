"""Conv1dChannelsLast: a 1-d conv whose result is only transposed to ``(N, L, C)`` writes it so.

Speech front ends (Whisper's encoder, wav2vec2's feature extractor) run their Conv1d stack on
``(N, C, L)`` and then transpose to ``(N, L, C)`` for the transformer. A channels-first conv may
write its result channels last (``out_layout="NHWC"``, :mod:`..ops.definitions.nn`): the small-conv
runner then makes its GEMM ``cols^T @ W^T`` straight into the ``(L, O)`` result
(``conv_small._prepare_channels_last_out``), and the transpose, one kernel call with its arena
tensor, goes::

    lv = R.nn.conv_bias_act(x, W, b, strides=(2,), padding=(1, 1), activation="gelu")   # (n, 32, l)
    lv1 = R.permute_dims(lv, axes=(0, 2, 1))                                              # (n, l, 32)
    ->
    lv1 = R.nn.conv_bias_act(x, W, b, strides=(2,), padding=(1, 1), activation="gelu", out_layout="NHWC")

Rule (table :data:`RULES`): ``conv1d_writes_channels_last`` when the conv (``nn.conv`` or
``nn.conv_bias_act``, not ``exact``) is channels first with a rank-3 float32/float64 result (the
small-conv runner's; a float16 conv would run the generic kernel every call) read only by the
transpose. 2-d convs are ConvertLayout's (its entry rule weighs the region after them). The
GEMM sums in the other orientation: results change by rounding only.
"""

from __future__ import annotations

from ..ir.struct_info import TensorStructInfo
from ..ops.definitions.nn import output_layout
from ..ops.registry import make_call
from .core.infra import function_pass
from .core.rules import Rule, RewriteTable, all_of, is_op, used_once, wildcard


def _channels_first_conv1d(m) -> str | None:
    conv = m["conv"]
    if conv.attrs.get("exact"):
        return "the conv is exact (an integer product in float)"
    if conv.attrs["data_layout"] != "NCHW" or output_layout(conv) != "NCHW":
        return f"the conv is not channels first ({conv.attrs['data_layout']} -> {output_layout(conv)})"
    sinfo = conv.struct_info
    if not (isinstance(sinfo, TensorStructInfo) and sinfo.ndim == 3 and sinfo.dtype in ("float32", "float64")):
        return "the conv's result is not a rank-3 float32/float64 tensor (the channels-last runner's dtypes)"
    return None


def _to_channels_last(m) -> str | None:
    axes = m["perm"].attrs.get("axes")
    if axes is None or tuple(axes) != (0, 2, 1):
        return f"the transpose's axes {axes} do not move the channels last"
    return None


def conv1d_writes_channels_last(m):
    """permute_dims(conv1d(x), (0, 2, 1)) -> conv1d(x, out_layout="NHWC")."""
    conv = m["conv"]
    return make_call(conv.op.name, *conv.args, **{**conv.attrs, "out_layout": "NHWC"})


RULES = RewriteTable("Conv1dChannelsLast", [
    Rule("conv1d_writes_channels_last",
         is_op("permute_dims")(is_op("nn.conv", "nn.conv_bias_act")(wildcard("x"), ..., name="conv"), name="perm"),
         all_of(used_once("conv", "the conv's result"), _channels_first_conv1d, _to_channels_last),
         conv1d_writes_channels_last),
])


@function_pass(name="Conv1dChannelsLast", opt_level=2, requires=("import", "optimize"), produces="optimize")
def conv1d_channels_last(func, mod, ctx):
    """1-d convs write their result channels last where only its transpose is read (module docstring)."""
    return RULES.apply(func)


__all__ = ["conv1d_channels_last", "RULES"]

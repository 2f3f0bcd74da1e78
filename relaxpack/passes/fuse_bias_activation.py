"""FuseBiasActivation: a product, its bias and its activation in one kernel call.

Makes the fused ops of ``ops/definitions/fused.py``: ``nn.gemm`` (matmul +
bias + activation) and ``nn.conv_bias_act`` (conv + per-channel bias +
activation). Their kernels run the unfused kernels in place on one output,
so the results do not change; the backend only makes fewer calls.

Rules (table :data:`RULES`):

- ``fuse_matmul_bias``: ``matmul(x, W) + b`` (either operand order) ->
  ``nn.gemm(x, W, b)`` when ``b`` broadcasts into the product's shape.
- ``fuse_conv_bias``: ``nn.conv(x, W) + b`` -> ``nn.conv_bias_act(x, W, b')``
  for a constant ``b`` with one value per output channel (``b'`` is it as
  a ``(C,)`` vector, e.g. from the importer's ``(1, C, 1, 1)`` conv bias).
- ``fuse_activation``: ``act(p)`` for ``p`` an ``nn.gemm`` or
  ``nn.conv_bias_act`` without activation, a ``matmul`` or an ``nn.conv``
  -> the fused op with ``activation=act``. ``act`` is ``nn.relu``,
  ``nn.leakyrelu``, ``sigmoid``, ``tanh``, ``nn.silu``, ``nn.gelu`` or ``clip``.

Each needs the fused-away value (the product, or the biased product) used
only by the op it is fused into.
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import Call, Constant
from ..ops.definitions.fused import INTEGER_ACTIVATIONS
from ..ops.definitions.common import dtype_kind
from ..ops.definitions.nn import CONV_ATTRS, output_layout
from ..ops.registry import make_call
from .fold_batch_norm import per_channel
from .core.infra import function_pass
from .core.rules import Match, Rule, RewriteTable, all_of, const, is_op, same_type_as_output, used_once, wildcard

# ---------------------------------------------------------------- bias


def _matmul_plain(m: Match) -> str | None:
    out_dtype = m["mm"].attrs["out_dtype"]
    return None if out_dtype is None else f"the R.matmul has out_dtype={out_dtype!r}"


def fuse_matmul_bias(m: Match):
    """matmul(x, W) + b -> nn.gemm(x, W, b) when b broadcasts into the product."""
    return make_call("nn.gemm", m["x"], m["w"], m["b"])


def _channel_axis(m: Match) -> int:
    return 1 if output_layout(m["conv"]) == "NCHW" else m.out_sinfo.ndim - 1


def _conv_channels(m: Match) -> int | None:
    shape = m.sinfo("conv").shape
    axis = _channel_axis(m)
    return shape[axis] if shape is not None and isinstance(shape[axis], int) else None


def _bias_per_channel(m: Match) -> str | None:
    channels = _conv_channels(m)
    if channels is None:
        return "the number of output channels of the R.nn.conv is not static"
    if per_channel(m.data("b"), m.out_sinfo.ndim, _channel_axis(m), channels) is None:
        return (f"the bias of shape {m.data('b').shape} is not one value per output channel "
                f"({channels}) of the R.nn.conv")
    return None


def fuse_conv_bias(m: Match):
    """nn.conv(x, W) + b -> nn.conv_bias_act(x, W, b as a (C,) vector) for a per-channel constant b."""
    data = m.data("b")
    vector = per_channel(data, m.out_sinfo.ndim, _channel_axis(m), _conv_channels(m)).astype(data.dtype)
    conv = m["conv"]
    return make_call("nn.conv_bias_act", m["x"], m["w"], Constant(np.ascontiguousarray(vector)),
                     **{k: conv.attrs[k] for k in CONV_ATTRS})


# ---------------------------------------------------------------- activation

ACTIVATION_OPS = ("nn.relu", "nn.leakyrelu", "sigmoid", "tanh", "nn.silu", "nn.gelu", "clip", "nn.hard_swish",
                  "nn.hard_sigmoid")


def activation_of(call: Call):
    """The fused ops' ``activation`` attribute for an activation call."""
    name = call.op.name
    if name == "nn.leakyrelu":
        return ("leakyrelu", call.attrs["alpha"])
    if name == "clip":
        return ("clip", call.attrs["min"], call.attrs["max"])
    if name == "nn.hard_sigmoid":
        return ("hard_sigmoid", call.attrs["alpha"], call.attrs["beta"])
    if name == "nn.gelu":
        return "gelu" if call.attrs["approximate"] == "none" else "gelu_tanh"
    return name.removeprefix("nn.")


def _fusable_producer(m: Match) -> str | None:
    producer = m["producer"]
    op = producer.op.name
    if op in ("nn.gemm", "nn.conv_bias_act") and producer.attrs["activation"] is not None:
        return f"the R.{op} already applies {producer.attrs['activation']!r}"
    if op == "matmul" and producer.attrs["out_dtype"] is not None:
        return f"the R.matmul has out_dtype={producer.attrs['out_dtype']!r}"
    if op in ("matmul", "nn.conv") and len(producer.args) != 2:
        return f"the R.{op} has {len(producer.args)} arguments"
    if m["act"].op.name == "clip" and m["act"].attrs["saturate_nan"]:
        return "the clip saturates NaN; a fused clip propagates it"
    activation = activation_of(m["act"])
    name = activation if isinstance(activation, str) else activation[0]
    dtype = m.out_sinfo.dtype
    if name not in INTEGER_ACTIVATIONS and dtype_kind(dtype) != "float":
        return f"activation {name} of a {dtype} tensor has no fused form"
    return None


def fuse_activation(m: Match):
    """act(p) -> p with activation=act, p an nn.gemm / nn.conv_bias_act without one, a matmul or an nn.conv."""
    producer, activation = m["producer"], activation_of(m["act"])
    op = producer.op.name
    if op == "matmul":
        return make_call("nn.gemm", *producer.args, activation=activation)
    if op == "nn.conv":
        return make_call("nn.conv_bias_act", *producer.args, activation=activation,
                         **{k: producer.attrs[k] for k in CONV_ATTRS})
    return make_call(op, *producer.args, **{**producer.attrs, "activation": activation})


# ---------------------------------------------------------------- the table

RULES = RewriteTable("FuseBiasActivation", [
    Rule("fuse_matmul_bias",
         is_op("add")(is_op("matmul")(wildcard("x"), wildcard("w"), name="mm", what="operand"),
                      wildcard("b"), commutative=True),
         all_of(used_once("mm", "the matmul output"), _matmul_plain, same_type_as_output("mm")),
         fuse_matmul_bias),
    Rule("fuse_conv_bias",
         is_op("add")(is_op("nn.conv")(wildcard("x"), wildcard("w"), name="conv", what="operand"),
                      const("b", "the bias"), commutative=True),
         all_of(used_once("conv", "the conv output"), same_type_as_output("conv"), _bias_per_channel),
         fuse_conv_bias),
    Rule("fuse_activation",
         is_op(*ACTIVATION_OPS)(
             is_op("nn.gemm", "nn.conv_bias_act", "matmul", "nn.conv")(..., name="producer", what="input"),
             name="act"),
         all_of(used_once("producer", "the input"), _fusable_producer),
         fuse_activation),
])


@function_pass(name="FuseBiasActivation", opt_level=2, requires=("import", "optimize"),
               produces="optimize")
def fuse_bias_activation(func, mod, ctx):
    """Fuse bias adds and activations into nn.gemm / nn.conv_bias_act: rules
    fuse_matmul_bias, fuse_conv_bias, fuse_activation (see the module docstring)."""
    return RULES.apply(func)

"""Fused ops the optimizer makes: fewer, larger kernel calls.

``nn.gemm(x, w, bias)`` is ``matmul(x, w) + bias`` (numpy matmul semantics;
the bias broadcasts *into* the product's shape, it never widens it) and
``nn.conv_bias_act(data, weight, bias)`` is ``nn.conv`` plus a per-channel
bias of shape ``(out_channels,)``. The bias is optional in both. Either may
then apply an activation, given by the ``activation`` attribute::

    None | "relu" | "sigmoid" | "tanh" | "silu" | "gelu" | "gelu_tanh" | "hard_swish"
         | "hard_swish6"                                # x * relu6(x + 3): 6 * hard_swish(x)
         | ("leakyrelu", alpha) | ("clip", min, max)     # min/max may be None
         | ("hard_sigmoid", alpha, beta)

No importer emits these ops: FuseBiasActivation makes them from their
unfused forms (``passes/fuse_bias_activation.py``).

>>> make_call("nn.gemm", x, w, b, activation="relu")                  # doctest: +SKIP
>>> make_call("nn.conv_bias_act", x, w, b, padding=1, activation=("clip", 0.0, 6.0))   # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo
from ..registry import register_op
from .common import (
    attr_error, check_broadcastable_to, check_dims_equal, dtype_kind, fmt_sinfo, is_real_value,
    same_dtype, shape_error, tensor_arg,
)
from .linalg import _infer_matmul
from .nn import output_layout
from .nn import CONV, CONV_ATTRS, conv_workspace
from .nn import infer_conv as _infer_conv

#: activation name -> its parameters (after the name, in the attribute's tuple)
ACTIVATIONS: dict[str, tuple[str, ...]] = {
    "relu": (), "sigmoid": (), "tanh": (), "silu": (), "gelu": (), "gelu_tanh": (),
    "hard_swish": (), "hard_swish6": (), "leakyrelu": ("alpha",), "clip": ("min", "max"),
    "hard_sigmoid": ("alpha", "beta"),
}
#: activations that also apply to integer tensors (the rest need floats)
INTEGER_ACTIVATIONS = frozenset({"relu", "clip"})


def activation_parts(activation) -> tuple[str | None, tuple]:
    """``("clip", 0.0, 6.0)`` -> ``("clip", (0.0, 6.0))``; ``"relu"`` -> ``("relu", ())``."""
    if activation is None:
        return None, ()
    if isinstance(activation, str):
        return activation, ()
    return activation[0], tuple(activation[1:])


def check_activation(call: Call, data: TensorStructInfo) -> None:
    """The ``activation`` attribute names a known activation with its parameters."""
    value = call.attrs["activation"]
    if value is None:
        return
    if not (isinstance(value, str) or (isinstance(value, tuple) and value and isinstance(value[0], str))):
        raise attr_error(call, f"attribute activation must be None, a name or (name, *params), got {value!r}")
    name, params = activation_parts(value)
    if name not in ACTIVATIONS:
        raise attr_error(call, f"unknown activation {name!r}; known: {sorted(ACTIVATIONS)}")
    want = ACTIVATIONS[name]
    if len(params) != len(want):
        spelled = f'("{name}", {", ".join(want)})' if want else f'"{name}"'
        raise attr_error(call, f"activation {name!r} is written {spelled}, got {value!r}")
    for pname, v in zip(want, params):
        if not (is_real_value(v) or (name == "clip" and v is None)):
            raise attr_error(call, f"activation {name!r}: parameter {pname} must be a number, got {v!r}")
    if name not in INTEGER_ACTIVATIONS and data.dtype is not None and dtype_kind(data.dtype) != "float":
        raise shape_error(call, f"activation {name!r} needs a float tensor, got {fmt_sinfo(data)} "
                                f"of {data.dtype}")


def _bias(call: Call) -> TensorStructInfo | None:
    """The optional third argument, of the data's dtype."""
    if len(call.args) < 3:
        return None
    bias = tensor_arg(call, 2, "bias")
    same_dtype(call, (tensor_arg(call, 0), bias), ("data", "bias"))
    return bias


def _infer_gemm(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    out = _infer_matmul(call.replace(args=call.args[:2], attrs={"out_dtype": None}), analyzer)
    bias = _bias(call)
    if bias is not None and bias.shape is not None and out.shape is not None:
        check_broadcastable_to(call, bias.shape, out.shape, analyzer, "bias")
    elif bias is not None and bias.ndim > out.ndim >= 0:
        raise shape_error(call, f"bias {fmt_sinfo(bias)} has a higher rank than the product {fmt_sinfo(out)}")
    check_activation(call, out)
    return out


register_op("nn.gemm", infer=_infer_gemm, attrs={"activation": None}, num_args=(2, 3),
            doc="matmul(x, w) + bias (bias broadcasts into the product), then an optional activation.")


def _infer_conv_bias_act(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    conv = call.replace(args=call.args[:2], attrs={k: call.attrs[k] for k in CONV_ATTRS if k in call.attrs})
    out = _infer_conv(conv, analyzer)
    channels = 1 if output_layout(call) == "NCHW" else -1
    bias = _bias(call)
    if bias is not None:
        if bias.ndim >= 0 and bias.ndim != 1:
            raise shape_error(call, f"bias must be 1-D (one value per output channel), got {fmt_sinfo(bias)}")
        if bias.shape is not None and out.shape is not None:
            check_dims_equal(call, bias.shape[0], out.shape[channels], analyzer,
                             f"bias {fmt_sinfo(bias)} must have one value per output channel of "
                             f"{fmt_sinfo(out)}")
    check_activation(call, out)
    return out


def _conv_attrs_and_activation() -> dict:
    """nn.conv's attributes plus ``activation``, before the layouts (the order
    kernel calls have always listed them in, which archives keep)."""
    window = {k: v for k, v in CONV.attrs.items() if not k.endswith("_layout")}
    layouts = {k: v for k, v in CONV.attrs.items() if k.endswith("_layout")}
    return {**window, "activation": None, **layouts}


register_op("nn.conv_bias_act", infer=_infer_conv_bias_act, attrs=_conv_attrs_and_activation(),
            num_args=(2, 3), workspace=conv_workspace,
            doc="nn.conv plus a per-output-channel bias (C_out,), then an optional activation.")

"""FoldActivationScales: the constant factors of HardSigmoid and HardSwish move into weights.

MobileNetV3 applies ``hard_sigmoid(z) = clip(alpha * z + beta, 0, 1)`` to each SE block's gate
and ``hard_swish(z) = z * clip(z / 6 + 1/2, 0, 1)`` after most convs; each factor is one pass
over the activation's values (a numpy call), and each can ride on a constant weight instead:

- ``hard_sigmoid_into_weights``: an ``nn.conv_bias_act`` / ``nn.gemm`` with a HardSigmoid, or an
  ``nn.squeeze_excite`` with one as ``act1`` / ``act2``, whose weight and bias are constants,
  computes ``z' = x @ (W * alpha) + (b * alpha + beta)`` and clips it to ``[0, 1]``: one pass
  instead of three.
- ``hard_swish_sixth_into_conv``: a conv with a HardSwish whose result is read only by a conv
  or gemm (its data operand) with a constant weight becomes ``"hard_swish6"``, ``z * clip(z + 3,
  0, 6)`` (six times the HardSwish, three passes instead of four), and the reader's weight ``W /
  6``; ``hard_swish_sixth_through_squeeze_excite`` does it across an ``nn.squeeze_excite``
  between them (the SE's first weight ``w1 / 6``: its pool of the sixfold values then gives the
  same gate, and its sixfold result reaches the reader, whose weight takes the 1/6).

New weights are computed in float64 and rounded once. These are float rewrites: the values
change by rounding (float32 ulps of the terms; the bound and its test against float64 are in
docs/design-notes.md, "FoldActivationScales"), as a different summation order would; float16
and exact (integer) products are left alone. Runs after FuseSqueezeExcite, whose op it reads.
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import Constant
from ..ops.registry import make_call
from .core.infra import function_pass
from .core.rules import Match, Rule, RewriteTable, all_of, const, is_op, used_once, wildcard
from .scales_into_conv import _scaled, _stays_normal

_FLOATS = ("float32", "float64")
#: an SE block's activations and the (weight, bias) operands each one follows
_SE_ACTS = (("act1", 1, 2), ("act2", 3, 4))
#: the readers whose weight (operand 1) takes the 1/6 of a HardSwish they read as operand 0
_READERS = ("nn.conv_bias_act", "nn.conv", "nn.gemm")


# ---------------------------------------------------------------- HardSigmoid


def _hard_sigmoid(act) -> tuple | None:
    """``(alpha, beta)`` of a ``("hard_sigmoid", alpha, beta)`` activation (tuple or list), else None."""
    if isinstance(act, (tuple, list)) and len(act) == 3 and act[0] == "hard_sigmoid":
        return float(act[1]), float(act[2])
    return None


def _sigmoid_slots(call) -> list:
    """``(attribute, weight index, bias index)`` of each HardSigmoid of ``call`` that could fold."""
    if call.op.name == "nn.squeeze_excite":
        return [slot for slot in _SE_ACTS if _hard_sigmoid(call.attrs[slot[0]]) is not None]
    return [("activation", 1, 2)] if _hard_sigmoid(call.attrs["activation"]) is not None else []


def _affine(weight: np.ndarray, bias: np.ndarray, alpha: float, beta: float) -> tuple:
    """``(W * alpha, b * alpha + beta)`` in float64, each rounded once to its operand's dtype."""
    w = _scaled(weight, np.multiply, alpha)
    b = np.ascontiguousarray((bias.astype(np.float64) * alpha + beta).astype(bias.dtype))
    return w, b


def check_hard_sigmoid(m: Match) -> str | None:
    """None when a HardSigmoid of the op folds: a float32/float64 result, not exact, a constant
    weight and bias of that dtype per folded activation whose scaled values stay finite and normal."""
    call = m["op"]
    dtype = str(getattr(m.out_sinfo, "dtype", None))
    if dtype not in _FLOATS:
        return f"the result is {dtype}, not float32/float64"
    if call.attrs.get("exact"):
        return "the product is exact (integer sums)"
    slots = _sigmoid_slots(call)
    if not slots:
        return "no HardSigmoid activation"
    for attr, wi, bi in slots:
        if len(call.args) <= bi:
            return f"the {attr} HardSigmoid has no bias to take its beta"
        weight, bias = m.constant_of(call.args[wi]), m.constant_of(call.args[bi])
        if weight is None or bias is None:
            return f"the weight or bias before {attr} is not a constant"
        if str(weight.dtype) != dtype or str(bias.dtype) != dtype:
            return f"the weight or bias before {attr} is not {dtype}"
        alpha, beta = _hard_sigmoid(call.attrs[attr])
        w, b = _affine(weight, bias, alpha, beta)
        if not (np.isfinite(alpha) and np.isfinite(beta) and _stays_normal(weight, w) and np.all(np.isfinite(b))):
            return f"the weight or bias before {attr} times {alpha} overflows or turns subnormal"
    return None


def fold_hard_sigmoid(m: Match):
    """op(x, W, b, act=("hard_sigmoid", a, c)) -> op(x, W * a, b * a + c, act=("clip", 0.0, 1.0))."""
    call = m["op"]
    args, attrs = list(call.args), dict(call.attrs)
    for attr, wi, bi in _sigmoid_slots(call):
        alpha, beta = _hard_sigmoid(attrs[attr])
        w, b = _affine(m.constant_of(args[wi]), m.constant_of(args[bi]), alpha, beta)
        args[wi], args[bi], attrs[attr] = Constant(w), Constant(b), ("clip", 0.0, 1.0)
    return make_call(call.op.name, *args, **attrs)


# ---------------------------------------------------------------- HardSwish's 1/6


def _producer_swishes(m: Match) -> str | None:
    """The producer is a float32/float64 conv with a HardSwish, read by the chain alone."""
    producer = m["producer"]
    if producer.attrs["activation"] != "hard_swish":
        return f"the producer's activation is {producer.attrs['activation']!r}, not a HardSwish"
    if producer.attrs.get("exact") or str(getattr(producer.struct_info, "dtype", None)) not in _FLOATS:
        return "the producer is exact or not float32/float64"
    return None


def _sixth_folds(name: str, what: str):
    """A check: the constant ``name`` (operand of the float reader ``m[reader]``) over 6 stays normal."""
    def check(m: Match) -> str | None:
        data = m.data(name)
        if str(data.dtype) != str(getattr(m["producer"].struct_info, "dtype", None)):
            return f"{what} is {data.dtype}, not the producer's dtype"
        if not _stays_normal(data, _scaled(data, np.divide, 6.0)):
            return f"{what} over 6 turns subnormal"
        return None
    check.__name__ = f"sixth_folds_{name}"
    return check


def _reader_inexact(m: Match) -> str | None:
    """The reader's sums are float ones (an exact integer product keeps its weight)."""
    return "the reader is exact (integer sums)" if m["reader"].attrs.get("exact") else None


def _swish6(m: Match):
    """The producer with ``"hard_swish6"``: six times its HardSwish."""
    producer = m["producer"]
    return make_call(producer.op.name, *producer.args, **{**producer.attrs, "activation": "hard_swish6"})


def _reader(m: Match, data):
    """The reader of ``data`` (six times what it read) with its weight over 6."""
    reader = m["reader"]
    weight = Constant(_scaled(m.data("w"), np.divide, 6.0))
    return make_call(reader.op.name, data, weight, *reader.args[2:], **dict(reader.attrs))


def fold_sixth_into_reader(m: Match):
    """reader(conv(x, act="hard_swish"), W) -> reader(conv(x, act="hard_swish6"), W / 6)."""
    return _reader(m, _swish6(m))


def fold_sixth_through_squeeze_excite(m: Match):
    """reader(se(conv(x, act="hard_swish"), w1, ...), W) -> reader(se(conv(x, act="hard_swish6"),
    w1 / 6, ...), W / 6)."""
    se = m["se"]
    w1 = Constant(_scaled(m.data("w1"), np.divide, 6.0))
    squeezed = make_call(se.op.name, _swish6(m), w1, *se.args[2:], **dict(se.attrs))
    return _reader(m, squeezed)


_PRODUCER = is_op("nn.conv_bias_act")(..., name="producer", what="the data")

RULES = RewriteTable("FoldActivationScales", [
    Rule("hard_sigmoid_into_weights",
         is_op("nn.conv_bias_act", "nn.gemm", "nn.squeeze_excite")(..., name="op"),
         check_hard_sigmoid, fold_hard_sigmoid),
    Rule("hard_swish_sixth_into_conv",
         is_op(*_READERS)(_PRODUCER, const("w", "the weight"), ..., name="reader"),
         all_of(used_once("producer", "the HardSwish's result"), _producer_swishes, _reader_inexact,
                _sixth_folds("w", "the reader's weight")),
         fold_sixth_into_reader),
    Rule("hard_swish_sixth_through_squeeze_excite",
         is_op(*_READERS)(is_op("nn.squeeze_excite")(_PRODUCER, const("w1", "the SE's first weight"), wildcard(),
                                                    wildcard(), wildcard(), name="se", what="the data"),
                          const("w", "the weight"), ..., name="reader"),
         all_of(used_once("producer", "the HardSwish's result"), used_once("se", "the SE block's result"),
                _producer_swishes, _reader_inexact, _sixth_folds("w1", "the SE's first weight"),
                _sixth_folds("w", "the reader's weight")),
         fold_sixth_through_squeeze_excite),
])


@function_pass(name="FoldActivationScales", opt_level=2, requires=("import", "optimize"), produces="optimize")
def fold_activation_scales(func, mod, ctx):
    """HardSigmoid's and HardSwish's constant factors into constant weights (module docstring)."""
    return RULES.apply(func)


__all__ = ["fold_activation_scales", "RULES"]

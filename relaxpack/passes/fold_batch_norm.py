"""FoldBatchNorm: inference batch norms and per-channel scales go into weights.

A *producer* here is ``nn.conv``, ``nn.conv_transpose`` or ``matmul`` with
a constant weight; its output channels lie along axis 1 (convolutions) or
the last axis (matmul). Each output channel is linear in its weights, so a
per-channel affine map ``y * s + t`` after a producer folds into it: the
weights are scaled by ``s`` at compile time (numpy, float64, rounded once to
the weight's dtype) and ``t`` becomes a bias ``add`` that
FuseBiasActivation later fuses into the producer.

Rules (table :data:`RULES`):

- ``fold_bn_bias``: ``batch_norm(y + b)`` -> ``batch_norm(y)`` with
  ``moving_mean - b``, for a per-channel constant ``b`` (so a producer's
  bias ``add`` does not stand between it and the batch norm).
- ``fold_bn_weight``: ``batch_norm(producer(x, W))`` ->
  ``producer(x, W * s) + t`` with ``s = gamma / sqrt(var + eps)``,
  ``t = beta - mean * s``.
- ``fold_scale_weight``: ``producer(x, W) * s`` -> ``producer(x, W * s)``
  for a per-channel constant ``s`` (the "scale" of an exporter's
  scale/shift form).
- ``fold_scale_through_bias``: ``(producer(x, W) + b) * s`` ->
  ``producer(x, W * s) + b * s``.
- ``merge_bias_adds``: ``(producer(x, W) + b1) + b2`` ->
  ``producer(x, W) + (b1 + b2)`` (the "shift" after a biased producer).

ScaleShiftBatchNorm (:func:`scale_shift_batch_norm`, right after) turns
each batch norm left (DenseNet's pre-activation ``concat -> batch_norm ->
relu``) into ``x * s + t`` (rule ``bn_scale_shift``, float32 and float64
only): two elementwise ops FuseOps fuses with the activation after them
(one kernel call instead of a batch norm that works out its scale per
call, then a relu), and the form onnxruntime computes.

Every rule needs float tensors, constants for everything it folds, and the
producer's (and any intermediate ``add``'s) output used only by the folded
op: folding into a value used elsewhere would compute the producer twice.
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import Call, Constant, Op
from ..ops.definitions.nn import output_layout
from ..ops.registry import make_call
from .core.infra import function_pass
from .core.rules import (
    Match, Rule, RewriteTable, all_of, const, float_output, is_op, same_type_as_output, used_once,
    wildcard,
)

PRODUCERS = ("nn.conv", "nn.conv_transpose", "matmul")


# ---------------------------------------------------------------- channel layout


def channel_layout(producer: Call, weight: np.ndarray) -> tuple[int, int] | str:
    """``(axis, channels)`` of the producer's output channels, or why there are none."""
    op, ndim = producer.op.name, producer.struct_info.ndim
    if ndim < 0:
        return f"the rank of the R.{op} output is not known"
    if op == "nn.conv":
        if producer.attrs["data_layout"] != "NCHW":
            return f"the R.nn.conv is {producer.attrs['data_layout']} (folding runs before ConvertLayout)"
        if output_layout(producer) != "NCHW":
            return f"the R.nn.conv writes {output_layout(producer)} (folding runs before ConvertLayout)"
        return 1, weight.shape[0]
    if op == "nn.conv_transpose":
        return 1, weight.shape[1] * producer.attrs["groups"]
    if producer.attrs["out_dtype"] is not None:
        return "the R.matmul has an out_dtype"
    if weight.ndim < 2:
        return "the R.matmul weight is 1-D: its output has no channel axis"
    return ndim - 1, weight.shape[-1]


def per_channel(data: np.ndarray, ndim: int, axis: int, channels: int) -> np.ndarray | None:
    """``data``, broadcast against a rank-``ndim`` tensor, as one float64
    value per channel along ``axis``; None if it varies along another axis
    (or would widen the tensor)."""
    if data.ndim > ndim:
        return None
    shape = (1,) * (ndim - data.ndim) + data.shape
    if any(d != 1 for i, d in enumerate(shape) if i != axis) or shape[axis] not in (1, channels):
        return None
    return np.broadcast_to(data.astype(np.float64).reshape(shape[axis]), (channels,))


def bias_constant(vector: np.ndarray, producer: Call, dtype) -> Constant:
    """A per-channel vector shaped to broadcast along the producer's channel
    axis: ``(1, C, 1, ...)`` for convolutions (as the importer writes conv
    biases), ``(C,)`` for matmul."""
    ndim = producer.struct_info.ndim
    if producer.op.name == "matmul":
        shape = (len(vector),)
    else:
        shape = (1, len(vector)) + (1,) * (ndim - 2)
    return Constant(np.asarray(vector, np.float64).astype(dtype).reshape(shape))


def scaled_weight(producer: Call, weight: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """The producer's weight with output channel ``c`` multiplied by ``scale[c]``
    (each product in float64, rounded once to the weight's dtype)."""
    op = producer.op.name
    scale = np.asarray(scale, np.float64)
    if op == "nn.conv":                 # (O, C/groups, *kernel)
        factor, shape = scale.reshape((-1,) + (1,) * (weight.ndim - 1)), weight.shape
    elif op == "nn.conv_transpose":     # (C, O/groups, *kernel): channel g*O/g + j is w[group g, :, j]
        groups = producer.attrs["groups"]
        shape = (groups, weight.shape[0] // groups) + weight.shape[1:]
        factor = scale.reshape((groups, 1, -1) + (1,) * (weight.ndim - 2))
    else:                               # matmul: (..., K, N), channels are the columns
        factor, shape = scale, weight.shape
    out = np.empty(shape, weight.dtype)
    # the ufunc casts chunk by chunk: no float64 copy of the whole weight
    np.multiply(weight.reshape(shape), factor, out=out, dtype=np.float64, casting="unsafe")
    return out.reshape(weight.shape)


def _rebuilt(producer: Call, x, weight: np.ndarray) -> Call:
    return make_call(producer.op.name, x, Constant(weight), **producer.attrs)


# ---------------------------------------------------------------- checks


def _layout_of(m: Match) -> tuple[int, int] | str:
    return channel_layout(m["producer"], m.data("w"))


def _per_channel_vector(m: Match, name: str, axis: int, channels: int) -> np.ndarray | None:
    return per_channel(m.data(name), m.out_sinfo.ndim, axis, channels)


def _constants_per_channel(*names: str):
    """A check: the constants ``names`` are per output channel of the producer."""
    def check(m: Match) -> str | None:
        layout = _layout_of(m)
        if isinstance(layout, str):
            return layout
        axis, channels = layout
        for name in names:
            if _per_channel_vector(m, name, axis, channels) is None:
                return (f"constant {name} of shape {m.data(name).shape} is not one value per channel "
                        f"along axis {axis} ({channels} channels) of the R.{m['producer'].op.name} output")
        return None
    return check


def _bn_axis(m: Match) -> int:
    return m["bn"].attrs["axis"] % m.out_sinfo.ndim


def _bn_on_channel_axis(m: Match) -> str | None:
    layout = _layout_of(m)
    if isinstance(layout, str):
        return layout
    axis, channels = layout
    if _bn_axis(m) != axis:
        return (f"batch_norm normalizes axis {_bn_axis(m)}, the R.{m['producer'].op.name} output's "
                f"channels are axis {axis}")
    if m.data("gamma").shape != (channels,):
        return f"batch_norm has {m.data('gamma').shape[0]} channels, the producer {channels}"
    return None


def _bias_along_bn_axis(m: Match) -> str | None:
    axis, channels = _bn_axis(m), m.data("gamma").shape[0]
    if per_channel(m.data("b"), m.out_sinfo.ndim, axis, channels) is None:
        return (f"the added constant of shape {m.data('b').shape} is not one value per channel along "
                f"the batch_norm axis {axis}")
    return None


def _bn_affine(m: Match) -> tuple[np.ndarray, np.ndarray]:
    """batch_norm as ``y * scale + shift`` (float64 vectors)."""
    gamma, beta, mean, var = (m.data(n).astype(np.float64) for n in ("gamma", "beta", "mean", "var"))
    scale = gamma / np.sqrt(var + m["bn"].attrs["epsilon"])
    return scale, beta - mean * scale


# ---------------------------------------------------------------- rewrites


def fold_bn_bias(m: Match):
    """batch_norm(y + b) -> batch_norm(y) with moving_mean - b, b a per-channel constant."""
    bn, mean = m["bn"], m.data("mean")
    b = per_channel(m.data("b"), m.out_sinfo.ndim, _bn_axis(m), mean.shape[0])
    new_mean = Constant((mean.astype(np.float64) - b).astype(mean.dtype))
    return make_call("nn.batch_norm", m["y"], m["gamma"], m["beta"], new_mean, m["var"], **bn.attrs)


def fold_bn_weight(m: Match):
    """batch_norm(producer(x, W)) -> producer(x, W * s) + t, s = gamma / sqrt(var + eps), t = beta - mean * s."""
    producer, w = m["producer"], m.data("w")
    scale, shift = _bn_affine(m)
    return make_call("add", _rebuilt(producer, m["x"], scaled_weight(producer, w, scale)),
                     bias_constant(shift, producer, w.dtype))


def fold_scale_weight(m: Match):
    """producer(x, W) * s -> producer(x, W * s) for a per-channel constant s."""
    producer, w = m["producer"], m.data("w")
    axis, channels = _layout_of(m)
    scale = _per_channel_vector(m, "s", axis, channels)
    return _rebuilt(producer, m["x"], scaled_weight(producer, w, scale))


def fold_scale_through_bias(m: Match):
    """(producer(x, W) + b) * s -> producer(x, W * s) + b * s for per-channel constants."""
    producer, w = m["producer"], m.data("w")
    axis, channels = _layout_of(m)
    scale = _per_channel_vector(m, "s", axis, channels)
    bias = _per_channel_vector(m, "b", axis, channels)
    return make_call("add", _rebuilt(producer, m["x"], scaled_weight(producer, w, scale)),
                     bias_constant(bias * scale, producer, w.dtype))


def merge_bias_adds(m: Match):
    """(producer(x, W) + b1) + b2 -> producer(x, W) + (b1 + b2) for per-channel constants."""
    producer, w = m["producer"], m.data("w")
    axis, channels = _layout_of(m)
    total = _per_channel_vector(m, "b1", axis, channels) + _per_channel_vector(m, "b2", axis, channels)
    return make_call("add", m.var("producer"), bias_constant(total, producer, w.dtype))


def bn_scale_shift(m: Match):
    """batch_norm(x) -> x * s + t, s and t one value per channel along its axis (x's rank)."""
    scale, shift = _bn_affine(m)
    ndim, axis, dtype = m.out_sinfo.ndim, _bn_axis(m), m.out_sinfo.dtype
    shape = tuple(len(scale) if i == axis else 1 for i in range(ndim))
    return make_call("add", make_call("multiply", m["x"], Constant(scale.astype(dtype).reshape(shape))),
                     Constant(shift.astype(dtype).reshape(shape)))


def _float32_or_64_known_rank(m: Match) -> str | None:
    dtype, ndim = getattr(m.out_sinfo, "dtype", None), getattr(m.out_sinfo, "ndim", -1)
    if dtype not in ("float32", "float64"):
        return f"the result is {dtype}: its batch norm computes in float32 and rounds once"
    return None if ndim > 0 else "the rank of the batch_norm result is not known"


def _not_after_a_producer(m: Match) -> str | None:
    """A producer's batch norm is FoldBatchNorm's; one it could not fold (a weight computed at run
    time) stays one call."""
    x = m.bound_value("x")
    if isinstance(x, Call) and isinstance(x.op, Op) and x.op.name in PRODUCERS:
        return f"its input is an R.{x.op.name}"
    return None


# ---------------------------------------------------------------- the table


def _producer():
    return is_op(*PRODUCERS)(wildcard("x"), const("w", "the weight"), name="producer", what="input")


def _bn(data):
    return is_op("nn.batch_norm")(data, const("gamma", "gamma"), const("beta", "beta"),
                                  const("mean", "moving_mean"), const("var", "moving_var"), name="bn")


def _not_exact(m: Match) -> str | None:
    """An ``exact`` conv is an integer product in float (QLinearConv): its weight stays as it is."""
    return "the R.nn.conv is exact (an integer product in float)" if m["producer"].attrs.get("exact") else None


_PRODUCER_ONCE = all_of(used_once("producer", "the producer's output"), _not_exact)

RULES = RewriteTable("FoldBatchNorm", [
    Rule("fold_bn_bias",
         _bn(is_op("add")(wildcard("y"), const("b", "the added operand"), name="add", what="input",
                          commutative=True)),
         all_of(float_output, used_once("add", "the add's output"), same_type_as_output("y"),
                _bias_along_bn_axis),
         fold_bn_bias),
    Rule("fold_bn_weight",
         _bn(_producer()),
         all_of(float_output, _PRODUCER_ONCE, _bn_on_channel_axis),
         fold_bn_weight),
    Rule("fold_scale_weight",
         is_op("multiply")(_producer(), const("s", "the scale"), commutative=True),
         all_of(float_output, _PRODUCER_ONCE, same_type_as_output("producer"),
                _constants_per_channel("s")),
         fold_scale_weight),
    Rule("fold_scale_through_bias",
         is_op("multiply")(is_op("add")(_producer(), const("b", "the bias"), name="add",
                                        what="input", commutative=True),
                           const("s", "the scale"), commutative=True),
         all_of(float_output, _PRODUCER_ONCE, used_once("add", "the bias add's output"),
                same_type_as_output("producer"), _constants_per_channel("b", "s")),
         fold_scale_through_bias),
    Rule("merge_bias_adds",
         is_op("add")(is_op("add")(_producer(), const("b1", "the first bias"), name="add",
                                   what="input", commutative=True),
                      const("b2", "the second bias"), commutative=True),
         all_of(float_output, used_once("add", "the first add's output"),
                same_type_as_output("producer"), _constants_per_channel("b1", "b2")),
         merge_bias_adds),
])

SCALE_SHIFT = RewriteTable("ScaleShiftBatchNorm", [
    Rule("bn_scale_shift",
         _bn(wildcard("x")),
         all_of(_float32_or_64_known_rank, same_type_as_output("x"), _not_after_a_producer),
         bn_scale_shift),
])


@function_pass(name="FoldBatchNorm", opt_level=2, requires=("import", "optimize"), produces="optimize")
def fold_batch_norm(func, mod, ctx):
    """Fold batch norms and per-channel scale/shift into constant weights:
    rules fold_bn_bias, fold_bn_weight, fold_scale_weight,
    fold_scale_through_bias, merge_bias_adds (see the module docstring)."""
    return RULES.apply(func)


@function_pass(name="ScaleShiftBatchNorm", opt_level=2, requires=("import", "optimize"), produces="optimize")
def scale_shift_batch_norm(func, mod, ctx):
    """A float32/float64 batch norm with constant parameters becomes ``x * s + t`` (rule
    bn_scale_shift; run after FoldBatchNorm, on the batch norms it did not fold)."""
    return SCALE_SHIFT.apply(func)

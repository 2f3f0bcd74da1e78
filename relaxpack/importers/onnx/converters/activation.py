"""Activations, Softmax/LogSoftmax/Hardmax and Dropout.

Most activations map to one IR op; Celu, ThresholdedRelu and Shrink are
compositions. Before opset 13 the softmax family works on the input
"coerced to 2-D at axis": flattened to ``(prod(shape[:axis]), prod(shape[axis:]))``,
normalized along the last axis and reshaped back.
"""

from __future__ import annotations

import math

import numpy as np

from ....ir.expr import ShapeExpr
from ....ops.definitions.elementwise import SELU_ALPHA, SELU_GAMMA
from ....ops.registry import make_call
from ..registry import register_converter
from .random import dropout_training
from ._dynamic import aligned_for_broadcast
from ._math_common import call, const_scalar, is_int, known_rank, known_shape, malformed, scalar, unsupported

# ---------------------------------------------------------------- one IR op each

#: ONNX op -> (IR op, first opset); these had ``consumed_inputs`` in opset 1.
_SIMPLE = {"Relu": "nn.relu", "Sigmoid": "sigmoid", "Tanh": "tanh"}


def _simple(op_type: str, ir_op: str, legacy: bool):
    if legacy:
        def convert(ctx, x, *, consumed_inputs=()):
            return make_call(ir_op, ctx.expr(x))
    else:
        def convert(ctx, x):
            return make_call(ir_op, ctx.expr(x))
    convert.__name__ = convert.__qualname__ = f"convert_{op_type.lower()}"
    convert.__doc__ = f"ONNX {op_type} -> R.{ir_op}."
    return convert


for _op, _ir in _SIMPLE.items():
    register_converter("", _op, 1, _simple(_op, _ir, legacy=True))
    register_converter("", _op, 6, _simple(_op, _ir, legacy=False))
for _op, _ir, _since in (("Softplus", "nn.softplus", 1), ("Softsign", "nn.softsign", 1),
                         ("HardSwish", "nn.hard_swish", 14), ("Mish", "nn.mish", 18)):
    register_converter("", _op, _since, _simple(_op, _ir, legacy=False))


@register_converter("", "LeakyRelu", since_opset=1)
def leaky_relu(ctx, x, *, alpha=0.01, consumed_inputs=()):
    return make_call("nn.leakyrelu", ctx.expr(x), alpha=float(alpha))


@register_converter("", "Elu", since_opset=1)
def elu(ctx, x, *, alpha=1.0, consumed_inputs=()):
    return make_call("nn.elu", ctx.expr(x), alpha=float(alpha))


@register_converter("", "Selu", since_opset=1)
def selu(ctx, x, *, alpha=SELU_ALPHA, gamma=SELU_GAMMA, consumed_inputs=()):
    return make_call("nn.selu", ctx.expr(x), alpha=float(alpha), gamma=float(gamma))


@register_converter("", "HardSigmoid", since_opset=1)
def hard_sigmoid(ctx, x, *, alpha=0.2, beta=0.5, consumed_inputs=()):
    return make_call("nn.hard_sigmoid", ctx.expr(x), alpha=float(alpha), beta=float(beta))


@register_converter("", "Gelu", since_opset=20)
def gelu(ctx, x, *, approximate="none"):
    if approximate not in ("none", "tanh"):
        raise unsupported(ctx, f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return make_call("nn.gelu", ctx.expr(x), approximate=approximate)


@register_converter("", "PRelu", since_opset=1)
def prelu_legacy(ctx, x, slope, *, consumed_inputs=()):
    """Before opset 7 a 1-D slope holds one value per channel (axis 1)."""
    slope_expr = ctx.expr(slope)
    if slope.ndim == 1 and x.ndim > 2 and slope.shape[0] != 1:
        slope_expr = call(ctx, "expand_dims", slope_expr, axis=tuple(range(1, x.ndim - 1)))
    return make_call("nn.prelu", ctx.expr(x), slope_expr)


@register_converter("", "PRelu", since_opset=7)
def prelu(ctx, x, slope):
    """Parametric ReLU; the slope broadcasts to ``x`` (unidirectionally; dims only the run can
    relate are broadcast then, both ways, as onnxruntime does)."""
    x, slope = aligned_for_broadcast(ctx, x, slope)
    return make_call("nn.prelu", ctx.expr(x), ctx.expr(slope))


# ---------------------------------------------------------------- compositions

@register_converter("", "Celu", since_opset=12)
def celu(ctx, x, *, alpha=1.0):
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))`` = ``alpha * elu(x / alpha)``."""
    if alpha == 1.0:
        return make_call("nn.elu", ctx.expr(x), alpha=1.0)
    scaled = call(ctx, "divide", ctx.expr(x), scalar(ctx, alpha, x.dtype))
    return make_call("multiply", call(ctx, "nn.elu", scaled, alpha=1.0), scalar(ctx, alpha, x.dtype))


@register_converter("", "ThresholdedRelu", since_opset=10)
def thresholded_relu(ctx, x, *, alpha=1.0):
    """``x if x > alpha else 0``."""
    keep = call(ctx, "greater", ctx.expr(x), scalar(ctx, alpha, x.dtype))
    return make_call("where", keep, ctx.expr(x), scalar(ctx, 0, x.dtype))


@register_converter("", "Shrink", since_opset=9)
def shrink(ctx, x, *, bias=0.0, lambd=0.5):
    """``x + bias if x < -lambd``, ``x - bias if x > lambd``, else 0."""
    data, dtype = ctx.expr(x), x.dtype
    low, high = -lambd, lambd
    if is_int(x):
        # integer x: x < t <=> x < ceil(t), x > t <=> x > floor(t)
        low, high = math.ceil(low), math.floor(high)
        if bias != int(bias):
            raise unsupported(ctx, f"a fractional bias {bias} with integer input {dtype}")
    below = call(ctx, "less", data, scalar(ctx, low, dtype))
    above = call(ctx, "greater", data, scalar(ctx, high, dtype))
    raised = call(ctx, "add", data, scalar(ctx, bias, dtype))
    lowered = call(ctx, "subtract", data, scalar(ctx, bias, dtype))
    inner = call(ctx, "where", above, lowered, scalar(ctx, 0, dtype))
    return make_call("where", below, raised, inner)


# ---------------------------------------------------------------- softmax family

def _coerced(ctx, x, axis: int, fn):
    """Opsets < 13: apply ``fn`` (on the last axis) to ``x`` flattened to 2-D at ``axis``."""
    ndim = known_rank(ctx, x)
    if not -ndim <= axis < ndim:
        raise malformed(ctx, f"axis {axis} is out of range for rank {ndim}")
    axis = axis + ndim if axis < 0 else axis
    if axis == ndim - 1:
        return fn(ctx.expr(x), -1, x.shape[-1] if x.shape is not None else None)
    shape = known_shape(ctx, x)
    flat = call(ctx, "flatten", ctx.expr(x), axis=axis)
    inner = flat.struct_info.shape[1]
    return make_call("reshape", ctx.expr(ctx.emit(fn(flat, -1, inner))), ShapeExpr(shape))


def _softmax(op: str):
    return lambda expr, axis, length: make_call(op, expr, axis=axis)


@register_converter("", "Softmax", since_opset=1)
def softmax_2d(ctx, x, *, axis=1):
    return _coerced(ctx, x, axis, _softmax("nn.softmax"))


@register_converter("", "Softmax", since_opset=13)
def softmax(ctx, x, *, axis=-1):
    return make_call("nn.softmax", ctx.expr(x), axis=axis)


@register_converter("", "LogSoftmax", since_opset=1)
def log_softmax_2d(ctx, x, *, axis=1):
    return _coerced(ctx, x, axis, _softmax("nn.log_softmax"))


@register_converter("", "LogSoftmax", since_opset=13)
def log_softmax(ctx, x, *, axis=-1):
    return make_call("nn.log_softmax", ctx.expr(x), axis=axis)


def _hardmax(ctx, dtype: str):
    """1 at the first maximum along ``axis``, 0 elsewhere: argmax compared
    with the positions along a static axis; along a symbolic one, the
    maxima whose running count (cumsum) is 1."""
    def build(expr, axis, length):
        ndim = expr.struct_info.ndim
        axis = axis + ndim if axis < 0 <= ndim else axis
        if isinstance(length, int):
            index = call(ctx, "argmax", expr, axis=axis, keepdims=True)
            positions = np.arange(length, dtype=np.int64).reshape([length if i == axis else 1 for i in range(ndim)])
            hit = call(ctx, "equal", index, ctx.expr(ctx.const(positions)))
        else:
            peak = call(ctx, "max", expr, axis=axis, keepdims=True)
            is_max = call(ctx, "equal", expr, peak)
            count = call(ctx, "cumsum", call(ctx, "astype", is_max, dtype="int32"), axis=axis)
            hit = call(ctx, "logical_and", is_max, call(ctx, "equal", count, scalar(ctx, 1, "int32")))
        return make_call("astype", hit, dtype=dtype)
    return build


@register_converter("", "Hardmax", since_opset=1)
def hardmax_2d(ctx, x, *, axis=1):
    return _coerced(ctx, x, axis, _hardmax(ctx, x.dtype))


@register_converter("", "Hardmax", since_opset=13)
def hardmax(ctx, x, *, axis=-1):
    if x.ndim < 0:      # the axis counts in the rank the run meets
        return _hardmax(ctx, x.dtype)(ctx.expr(x), axis, None)
    ndim = known_rank(ctx, x)
    if not -ndim <= axis < ndim:
        raise malformed(ctx, f"axis {axis} is out of range for rank {ndim}")
    length = x.shape[axis] if x.shape is not None else None
    return _hardmax(ctx, x.dtype)(ctx.expr(x), axis, length)


# ---------------------------------------------------------------- dropout

def _dropout(ctx, x, mask_dtype: str):
    """Inference dropout: the input, and an all-true mask when one is requested."""
    outputs = list(ctx.node.output) if ctx.node is not None else []
    if len(outputs) < 2 or not outputs[1]:
        return x
    shape = known_shape(ctx, x, "the input (to shape the mask)")
    return x, make_call("broadcast_to", scalar(ctx, 1, mask_dtype), ShapeExpr(shape))


@register_converter("", "Dropout", since_opset=1)
def dropout_legacy(ctx, x, *, ratio=0.5, is_test=0, consumed_inputs=()):
    """Before opset 10 the mask has the input's dtype. ``is_test`` is
    ignored: relaxpack compiles for inference."""
    return _dropout(ctx, x, x.dtype)


@register_converter("", "Dropout", since_opset=10)
def dropout(ctx, x, *, ratio=0.5):
    return _dropout(ctx, x, "bool")


@register_converter("", "Dropout", since_opset=12)
def dropout_training_input(ctx, x, ratio=None, training_mode=None, *, seed=None):
    """Without ``training_mode`` or with a constant false one, inference
    dropout; otherwise the seeded random mask (``random.py``)."""
    training = const_scalar(ctx, training_mode, "training_mode")
    if training is NotImplemented or training:
        return dropout_training(ctx, x, ratio, training_mode, seed)
    return _dropout(ctx, x, "bool")

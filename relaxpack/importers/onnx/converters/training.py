"""Optimizers of ai.onnx.preview.training: Adagrad, Adam, Momentum; and Gradient. An optimizer node
updating n tensors (inputs ``r, t, x1..xn, g1..gn, state1..staten``) becomes
n calls, one per tensor; the outputs are all new tensors, then each state::

    Adagrad(R, T, X1, X2, G1, G2, H1, H2)  ->  a = R.adagrad(R, T, X1, G1, H1, ...)
                                               b = R.adagrad(R, T, X2, G2, H2, ...)
                                               outputs a[0], b[0], a[1], b[1]

Gradient is reverse-mode differentiation of the forward nodes, done at
import time by ``importers/onnx/gradient.py``.
"""

from __future__ import annotations

from ....ir.expr import TupleGetItem
from ....ops.registry import make_call
from ..gradient import differentiate
from ..registry import register_converter
from ._shape_common import shape_error, unsupported

DOMAIN = "ai.onnx.preview.training"


def _per_tensor(ctx, op: str, inputs, n_state: int, **attrs):
    """One ``op`` call per optimized tensor; the outputs grouped as ONNX orders them."""
    if len(inputs) < 2 or any(v is None for v in inputs):
        raise shape_error(ctx, "needs every input (R, T and the tensors with their gradients and states)")
    groups = 2 + n_state        # x, g and the state tensors
    n, rest = divmod(len(inputs) - 2, groups)
    if rest or n == 0:
        raise shape_error(ctx, f"needs R, T and {groups} inputs per optimized tensor, got {len(inputs)} inputs")
    r, t = ctx.expr(inputs[0]), ctx.expr(inputs[1])
    results = []
    for i in range(n):
        tensors = [ctx.expr(inputs[2 + k * n + i]) for k in range(groups)]
        results.append(ctx.bb.emit(make_call(op, r, t, *tensors, **attrs), op))
    return tuple(TupleGetItem(res, j) for j in range(1 + n_state) for res in results)


@register_converter(DOMAIN, "Adagrad", since_opset=1)
def adagrad(ctx, *inputs, decay_factor=0.0, epsilon=0.0, norm_coefficient=0.0):
    return _per_tensor(ctx, "adagrad", inputs, 1, decay_factor=float(decay_factor), epsilon=float(epsilon),
                       norm_coefficient=float(norm_coefficient))


@register_converter(DOMAIN, "Adam", since_opset=1)
def adam(ctx, *inputs, alpha=0.9, beta=0.999, epsilon=0.0, norm_coefficient=0.0, norm_coefficient_post=0.0):
    return _per_tensor(ctx, "adam", inputs, 2, alpha=float(alpha), beta=float(beta), epsilon=float(epsilon),
                       norm_coefficient=float(norm_coefficient), norm_coefficient_post=float(norm_coefficient_post))


@register_converter(DOMAIN, "Momentum", since_opset=1)
def momentum(ctx, *inputs, alpha, beta, mode, norm_coefficient):
    if mode not in ("standard", "nesterov"):
        raise unsupported(ctx, f"mode must be 'standard' or 'nesterov', got {mode!r}")
    return _per_tensor(ctx, "momentum", inputs, 1, alpha=float(alpha), beta=float(beta), mode=mode,
                       norm_coefficient=float(norm_coefficient))


@register_converter(DOMAIN, "Gradient", since_opset=1)
def gradient(ctx, *inputs, xs=(), zs=(), y=""):
    """Reverse-mode differentiation of the forward nodes computing ``y``
    (``importers/onnx/gradient.py``); the inputs are the xs then the zs."""
    if not xs or not y:
        raise shape_error(ctx, "needs the attributes xs (the tensors to differentiate with respect to) and y")
    if len(inputs) != len(xs) + len(zs):
        raise shape_error(ctx, f"has {len(inputs)} inputs but xs and zs name {len(xs) + len(zs)}")
    return tuple(differentiate(ctx, ctx.node, list(xs), list(zs), y))

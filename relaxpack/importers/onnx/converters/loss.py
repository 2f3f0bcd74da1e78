"""Loss ops: NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss, composed
from log_softmax, gather_elements, take, where and reductions.

Both take scores of shape (N, C, d1, ...) and int targets (N, d1, ...).
A target equal to ``ignore_index`` contributes 0 to the loss and 0 to the
weights; ``mean`` divides the (weighted) sum by the sum of the weights that
apply, so ignored targets are not counted::

    picked[n, d] = -x[n, target[n, d], d]          (gather_elements on axis 1)
    w[n, d]      = weight[target[n, d]] or 1, 0 where ignored
    mean         = sum(w * picked) / sum(w)
"""

from __future__ import annotations

from ....errors import ShapeError
from ....ir.expr import Expr
from ....ops.registry import make_call
from ..registry import register_converter
from ._composite_common import outputs_used, require_float
from ._math_common import astype, call, scalar, unsupported
from ._shape_common import shaped

_REDUCTIONS = ("none", "sum", "mean")


def _check(ctx, scores, target, reduction: str) -> None:
    if reduction not in _REDUCTIONS:
        raise unsupported(ctx, f"reduction={reduction!r} (none, sum or mean)")
    require_float(ctx, scores, "the scores")
    if not (target.dtype or "").startswith(("int", "uint")):
        raise ShapeError(f"{ctx.node_label()}: the target must be integers, got {target.dtype}")
    rank = shaped(ctx, scores, "the scores").ndim
    if rank < 2:
        raise ShapeError(f"{ctx.node_label()}: the scores must be (N, C, ...), got rank {rank}")
    if target.ndim >= 0 and target.ndim != rank - 1:
        raise ShapeError(f"{ctx.node_label()}: the target must have rank {rank - 1} for scores of rank "
                         f"{rank}, got {target.ndim}")


def _nll(ctx, log_probs: Expr, target, weight, reduction: str, ignore_index: int | None) -> Expr:
    """The negative log-likelihood of ``log_probs`` (N, C, ...) at ``target``."""
    dtype = log_probs.struct_info.dtype
    labels = astype(ctx, target, "int64")
    ignored = None
    if ignore_index is not None:
        ignored = call(ctx, "equal", labels, scalar(ctx, int(ignore_index), "int64"), name="ignored")
        # ignored labels may lie outside [0, C): read class 0 there instead
        labels = call(ctx, "where", ignored, scalar(ctx, 0, "int64"), labels, name="labels")
    picked = call(ctx, "gather_elements", log_probs, call(ctx, "expand_dims", labels, axis=(1,)), axis=1)
    loss = call(ctx, "negative", call(ctx, "squeeze", picked, axis=(1,)), name="loss")
    zero = scalar(ctx, 0, dtype)
    if ignored is not None:
        loss = call(ctx, "where", ignored, zero, loss, name="loss")
    weights = None
    if weight is not None:
        weights = call(ctx, "take", astype(ctx, weight, dtype), labels, axis=0, name="weights")
        if ignored is not None:
            weights = call(ctx, "where", ignored, zero, weights, name="weights")
        loss = call(ctx, "multiply", weights, loss, name="loss")
    elif ignored is not None:
        weights = call(ctx, "where", ignored, zero, scalar(ctx, 1, dtype), name="weights")
    if reduction == "none":
        return loss
    total = call(ctx, "sum", loss)
    if reduction == "sum":
        return total
    if weights is None:
        return make_call("mean", loss)
    return make_call("divide", total, call(ctx, "sum", weights))


@register_converter("", "NegativeLogLikelihoodLoss", since_opset=12)
def negative_log_likelihood_loss(ctx, x, target, weight=None, *, ignore_index=None, reduction="mean"):
    """``-x[n, target[n, ...], ...]``, weighted per class and reduced."""
    _check(ctx, x, target, reduction)
    return _nll(ctx, ctx.expr(x), target, weight, reduction, ignore_index)


@register_converter("", "SoftmaxCrossEntropyLoss", since_opset=12)
def softmax_cross_entropy_loss(ctx, scores, labels, weights=None, *, ignore_index=None, reduction="mean"):
    """The negative log-likelihood of ``log_softmax(scores)`` over the class
    axis 1; the optional second output is that log-probability tensor."""
    _check(ctx, scores, labels, reduction)
    log_probs = call(ctx, "nn.log_softmax", ctx.expr(scores), axis=1, name="log_prob")
    loss = _nll(ctx, log_probs, labels, weights, reduction, ignore_index)
    if outputs_used(ctx, 2)[1]:
        return loss, log_probs
    return loss

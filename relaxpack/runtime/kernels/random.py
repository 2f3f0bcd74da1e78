"""Random kernels, seeded as onnx's reference evaluator does: a ``seed``
starts numpy's legacy ``RandomState(seed)`` afresh at every call, so a
seeded op gives the same numbers on every run (and the same as the
reference); ``seed=None`` draws from fresh OS entropy each call. Each
kernel draws the same numbers from the stream, in the same order, as onnx's
reference evaluator does for its op, and computes in the output's dtype
as it does (e.g. ``random_sample(shape).astype(dtype) * (high - low) + low``).

>>> y, keep = np.empty(4, np.float32), np.empty(4, bool)
>>> dropout_train(np.ones(4, np.float32), np.float32(0.5), np.bool_(True), out=(y, keep), seed=0)
>>> y, keep
(array([2., 2., 2., 2.], dtype=float32), array([ True,  True,  True,  True]))
"""

from __future__ import annotations

import numpy as np

from ...errors import ExecutionError, ShapeError
from ..fpstate import quiet
from ._registry import register_kernel


def random_state(seed) -> np.random.RandomState:
    """``RandomState(seed)``, or one seeded from OS entropy when ``seed`` is None."""
    return np.random.RandomState(None if seed is None else int(seed))


@register_kernel("dropout_train")
def dropout_train(x, ratio, training_mode, *, out, seed):
    """ONNX Dropout with a run-time ``training_mode``: when it is true and
    ``ratio`` > 0, ``keep = RandomState(seed).uniform(0, 1, x.shape) >= ratio``
    and ``y = x * keep * (1 / (1 - ratio))``; otherwise ``y = x`` and
    ``keep`` is all true. (For float16 onnx's reference returns float32;
    here ``y`` keeps x's dtype, as the spec says.)"""
    y, keep = out
    ratio = np.asarray(ratio).reshape(-1)[0]
    p = float(ratio)
    if not 0 <= p < 1:
        raise ShapeError(f"dropout_train: ratio must be in [0, 1), got {p}")
    if p == 0 or not bool(np.asarray(training_mode).reshape(-1)[0]):
        np.copyto(y, x)
        keep[...] = True
        return
    np.greater_equal(random_state(seed).uniform(0, 1.0, x.shape), ratio, out=keep)
    # the scale in ratio's dtype, multiplied in the wider of it and x's, rounded
    # once: as the reference computes it
    np.multiply(x * keep, 1 / (1 - ratio), out=y, casting="unsafe")


@register_kernel("random_uniform")
def random_uniform(shape, *, out, dtype, low, high, seed):
    """ONNX RandomUniform(Like): ``random_sample(shape)`` cast to ``out``'s
    dtype, scaled by ``high - low`` and shifted by ``low`` in that dtype (the
    reference's order of roundings; ``low``/``high`` are Python floats, so
    numpy keeps float16 arithmetic in float16)."""
    res = np.asarray(random_state(seed).random_sample(out.shape)).astype(out.dtype)
    res *= high - low
    res += low
    np.copyto(out, res)


@register_kernel("random_normal")
def random_normal(shape, *, out, dtype, mean, scale, seed):
    """ONNX RandomNormal(Like): ``standard_normal(shape)`` cast to ``out``'s
    dtype, times ``scale`` plus ``mean`` in that dtype (as the reference)."""
    res = np.asarray(random_state(seed).standard_normal(out.shape)).astype(out.dtype)
    res *= scale
    res += mean
    np.copyto(out, res)


@register_kernel("bernoulli")
def bernoulli(p, *, out, dtype, seed):
    """ONNX Bernoulli: ``binomial(1, p)`` elementwise (numpy's legacy
    binomial takes one uniform ``u`` per element: 1 when ``u > 1 - p`` for
    ``p <= 0.5``, when ``u <= p`` above), cast to ``out``'s dtype."""
    p64 = np.asarray(p, np.float64)
    if p64.size and not ((p64 >= 0) & (p64 <= 1)).all():
        raise ExecutionError(f"bernoulli: probabilities must be in [0, 1], got values from "
                             f"{np.nanmin(p64)} to {np.nanmax(p64)}" + (" and NaN" if np.isnan(p64).any() else ""))
    np.copyto(out, random_state(seed).binomial(1, p64), casting="unsafe")


@register_kernel("multinomial")
def multinomial(logits, *, out, dtype, sample_size, seed):
    """ONNX Multinomial: for row ``b`` of the unnormalized log-probabilities,
    sample ``s`` is the first class whose cumulative probability
    ``cumsum(exp(logits[b] - max))`` exceeds ``u[b, s] * total``, with
    ``u = RandomState(seed).random_sample((batch, sample_size))`` (in float64,
    whatever the input's dtype). (onnx's reference evaluator has no
    Multinomial and onnxruntime draws from its own generator, so the values
    are relaxpack's own; their distribution is the spec's.)"""
    x = np.asarray(logits, np.float64)
    u = random_state(seed).random_sample(out.shape)
    if x.shape[0] == 0:
        return
    with quiet():    # rows of NaN or all -inf are reported below
        weights = np.exp(x - x.max(axis=1, keepdims=True))
    cdf = np.cumsum(weights, axis=1)
    total = cdf[:, -1]
    bad = ~(np.isfinite(total) & (total > 0))
    if bad.any():
        raise ExecutionError(f"multinomial: row {int(np.argmax(bad))} of the logits has no finite "
                             f"positive probability (all -inf, +inf or NaN)")
    # the last class with weight: u * total can round up to total, and searching
    # then runs past it (onto trailing classes of weight 0, or off the end)
    last = x.shape[1] - 1 - np.argmax(weights[:, ::-1] > 0, axis=1)
    for b in range(x.shape[0]):
        picks = np.searchsorted(cdf[b], u[b] * total[b], side="right")
        np.copyto(out[b], np.minimum(picks, last[b]), casting="unsafe")

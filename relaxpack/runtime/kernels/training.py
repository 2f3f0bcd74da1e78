"""Optimizer steps (ai.onnx.preview.training): adagrad, adam, momentum.

Each computes in float64 (the reference's scalars ``r / (1 + t * decay)``
and ``beta ** t`` are float64 there too) and rounds once into its outputs.

>>> x, h = np.empty(1, np.float32), np.empty(1, np.float32)
>>> adagrad(np.float32(0.1), np.int64(0), np.ones(1, np.float32), np.ones(1, np.float32),
...         np.zeros(1, np.float32), out=(x, h)); x, h
(array([0.9], dtype=float32), array([1.], dtype=float32))
"""

from __future__ import annotations

import numpy as np

from ._registry import register_kernel


def _f64(*arrays):
    return [np.asarray(a, np.float64) for a in arrays]


def _scalar(a) -> float:
    return float(np.asarray(a).reshape(-1)[0])


def _store(out, *values) -> None:
    for dst, value in zip(out, values):
        np.copyto(dst, value, casting="unsafe")


@register_kernel("adagrad")
def adagrad(r, t, x, g, h, *, out, decay_factor, epsilon, norm_coefficient):
    """``g' = norm * x + g``, ``h' = h + g'^2``,
    ``x' = x - r / (1 + t * decay) * g' / (sqrt(h') + epsilon)``."""
    x, g, h = _f64(x, g, h)
    rate = _scalar(r) / (1 + _scalar(t) * decay_factor)
    grad = norm_coefficient * x + g
    h_new = h + grad * grad
    _store(out, x - rate * grad / (np.sqrt(h_new) + epsilon), h_new)


@register_kernel("adam")
def adam(r, t, x, g, v, h, *, out, alpha, beta, epsilon, norm_coefficient,
         norm_coefficient_post):
    """``g' = norm * x + g``, ``v' = alpha v + (1 - alpha) g'``,
    ``h' = beta h + (1 - beta) g'^2``; from step 1 on the rate is bias-corrected,
    ``r sqrt(1 - beta^t) / (1 - alpha^t)``;
    ``x' = (1 - norm_post) (x - rate * v' / (sqrt(h') + epsilon))``."""
    x, g, v, h = _f64(x, g, v, h)
    steps = _scalar(t)
    rate = _scalar(r)
    if steps > 0:
        rate = rate * np.sqrt(1 - beta ** steps) / (1 - alpha ** steps)
    grad = norm_coefficient * x + g
    v_new = alpha * v + (1 - alpha) * grad
    h_new = beta * h + (1 - beta) * grad * grad
    x_new = (1 - norm_coefficient_post) * (x - rate * (v_new / (np.sqrt(h_new) + epsilon)))
    _store(out, x_new, v_new, h_new)


@register_kernel("momentum")
def momentum(r, t, x, g, v, *, out, alpha, beta, norm_coefficient, mode):
    """``g' = norm * x + g``, ``v' = alpha v + beta g'`` (beta is 1 at step 0);
    ``x' = x - r v'`` (standard) or ``x - r (g' + alpha v')`` (nesterov)."""
    x, g, v = _f64(x, g, v)
    grad = norm_coefficient * x + g
    v_new = alpha * v + (beta if _scalar(t) > 0 else 1.0) * grad
    step = v_new if mode == "standard" else grad + alpha * v_new
    _store(out, x - _scalar(r) * step, v_new)

"""The activations of the recurrent layers (``nn.rnn``, ``nn.gru``, ``nn.lstm``) and their clip.

Each takes the pre-activation (a scratch array it may overwrite) and returns the result; alpha
and beta as the ONNX operator of the same name takes them.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..fpstate import quiet
from .recurrent_weights import DEFAULT_ACTIVATIONS

Activation = Callable[[np.ndarray], np.ndarray]


def _sigmoid(a, alpha, beta):
    # 0.5 * (1 + tanh(x / 2)): the logistic function without exp overflow
    a *= 0.5
    np.tanh(a, out=a)
    a += 1
    a *= 0.5
    return a


def _tanh(a, alpha, beta):
    return np.tanh(a, out=a)


def _relu(a, alpha, beta):
    return np.maximum(a, 0, out=a)


def _affine(a, alpha, beta):
    a *= alpha
    a += beta
    return a


def _leaky_relu(a, alpha, beta):
    return np.where(a >= 0, a, a * a.dtype.type(alpha))


def _thresholded_relu(a, alpha, beta):
    a[a <= alpha] = 0
    return a


def _scaled_tanh(a, alpha, beta):
    a *= beta
    np.tanh(a, out=a)
    a *= alpha
    return a


def _hard_sigmoid(a, alpha, beta):
    a *= alpha
    a += beta
    return np.clip(a, 0, 1, out=a)


def _elu(a, alpha, beta):
    with quiet():
        return np.where(a >= 0, a, np.expm1(np.minimum(a, 0)) * a.dtype.type(alpha))


def _softsign(a, alpha, beta):
    return np.divide(a, np.abs(a) + 1, out=a)


def _softplus(a, alpha, beta):
    # max(x, 0) + log1p(exp(-|x|)): no overflow for large x
    t = np.log1p(np.exp(-np.abs(a)))
    np.maximum(a, 0, out=a)
    a += t
    return a


#: activation name -> (function, default alpha, default beta, how many of alpha/beta it takes);
#: the defaults are those of the ONNX operator of the same name, as the spec says
#: (onnxruntime uses 0 where Affine, ScaledTanh and ThresholdedRelu get no value)
ACTIVATIONS = {
    "Relu": (_relu, 0.0, 0.0, 0), "Tanh": (_tanh, 0.0, 0.0, 0), "Sigmoid": (_sigmoid, 0.0, 0.0, 0),
    "Affine": (_affine, 1.0, 0.0, 2), "LeakyRelu": (_leaky_relu, 0.01, 0.0, 1),
    "ThresholdedRelu": (_thresholded_relu, 1.0, 0.0, 1), "ScaledTanh": (_scaled_tanh, 1.0, 1.0, 2),
    "HardSigmoid": (_hard_sigmoid, 0.2, 0.5, 2), "Elu": (_elu, 1.0, 0.0, 1),
    "Softsign": (_softsign, 0.0, 0.0, 0), "Softplus": (_softplus, 0.0, 0.0, 0),
}


def bind_activations(kind: str, dirs: int, names, alphas, betas) -> list[list[Activation]]:
    """One list of activation callables (alpha and beta bound) per direction."""
    names = names or DEFAULT_ACTIVATIONS[kind] * dirs
    fns = []
    for i, name in enumerate(names):
        fn, alpha, beta, _ = ACTIVATIONS[name]
        alpha = alpha if alphas is None else alphas[i]
        beta = beta if betas is None else betas[i]
        fns.append(lambda a, fn=fn, alpha=alpha, beta=beta: fn(a, alpha, beta))
    per = len(names) // dirs
    return [fns[d * per:(d + 1) * per] for d in range(dirs)]


def clipper(clip) -> Callable[[np.ndarray], np.ndarray]:
    if clip is None:
        return lambda a: a
    return lambda a: np.clip(a, -clip, clip, out=a)

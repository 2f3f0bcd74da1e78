"""Random kernels, seeded as onnx's reference evaluator does: a ``seed``
starts numpy's legacy ``RandomState(seed)`` afresh at every call, so a
seeded op gives the same numbers on every run (and the same as the
reference); ``seed=None`` draws from fresh OS entropy each call.

>>> y, keep = np.empty(4, np.float32), np.empty(4, bool)
>>> dropout_train(np.ones(4, np.float32), np.float32(0.5), np.bool_(True), out=(y, keep), seed=0)
>>> y, keep
(array([2., 2., 2., 2.], dtype=float32), array([ True,  True,  True,  True]))
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ._registry import register_kernel


def random_state(seed) -> np.random.RandomState:
    """``RandomState(seed)``, or one seeded from OS entropy when ``seed`` is None."""
    return np.random.RandomState(None if seed is None else int(seed))


@register_kernel("dropout_train")
def dropout_train(x, ratio, training_mode, *, out, seed=None):
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

"""SiLU and sigmoid of a product computed negated: one pass over the data less, the same bits.

A conv's (or an SE block's 1-pixel conv's) SiLU is ``y / (1 + exp(-y))`` in four numpy calls
after the bias: ``s = -y``, ``exp(s)``, ``s + 1``, ``y / s``; its sigmoid ``1 / (1 + exp(-y))``
the same less the last product. With bound weights and bias the runner can multiply by their
negations once made (``-W``, ``-b``) and so hold ``z = -y`` after the bias add, bit for bit (IEEE
rounding is symmetric: every product and sum of the negated operands is the negation of the
original's). Then SiLU is ``t = exp(z)``, ``t = -1 - t`` (that is ``-(1 + exp(-y))``, exactly),
``z / t`` (``(-y) / -(1 + exp(-y))``, the same quotient), and sigmoid ``exp(z)``, ``+ 1``,
``1 / ...``: the negation pass gone (71k float32 values: 35.3 -> 31.6 us; 6.9k 4.5 -> 4.0).
Values are the activation's bit for bit, NaNs included; a zero's sign may differ where ``y``
is a +0 from an exact cancellation (``-y`` is then +0 too), which compares equal.
"""

from __future__ import annotations

import numpy as np

from ..fpstate import IGNORING, quiet, state_now
from ._constants import ONE, per_float_dtype
from .elementwise import _reciprocal_of_one_plus_exp

#: the activations that read their input negated
NEGATABLE = frozenset({"silu", "sigmoid"})

_MINUS_ONE = per_float_dtype(-1)


def _silu_of_negated_fn(dtype: np.dtype):
    """:func:`silu_of_negated` for buffers of ``dtype`` (float32/float64), its constant and ufuncs
    bound, without :func:`~relaxpack.runtime.fpstate.quiet`'s ``with`` inside a VM run (numpy
    ignores floating-point errors there already)."""
    minus_one, exp, subtract, divide = _MINUS_ONE[dtype], np.exp, np.subtract, np.divide

    def silu(buf):
        if state_now() is IGNORING:
            t = exp(buf)
        else:
            with quiet():
                t = exp(buf)
        subtract(minus_one, t, t)
        divide(buf, t, buf)
    return silu


def silu_of_negated(buf: np.ndarray) -> None:
    """``buf = silu(-buf)`` for a float32/float64 ``buf`` that holds ``-y``: SiLU's values of
    ``y`` in three numpy calls (see the module docstring)."""
    with quiet():
        t = np.exp(buf)
    np.subtract(_MINUS_ONE[buf.dtype], t, out=t)
    np.divide(buf, t, out=buf)


def _sigmoid_of_negated_fn(dtype: np.dtype):
    """:func:`sigmoid_of_negated` for buffers of ``dtype``, bound as :func:`_silu_of_negated_fn`."""
    one, exp, add, divide = ONE[dtype], np.exp, np.add, np.divide

    def sigmoid(buf):
        if state_now() is IGNORING:
            exp(buf, buf)
        else:
            with quiet():
                exp(buf, buf)
        add(buf, one, buf)
        divide(one, buf, buf)
    return sigmoid


def sigmoid_of_negated(buf: np.ndarray) -> None:
    """``buf = sigmoid(-buf)`` for a float32/float64 ``buf`` that holds ``-y``: the sigmoid
    kernel's calls after its negation."""
    _reciprocal_of_one_plus_exp(buf)


def of_negated(activation: str, dtype=None):
    """The in-place activation of a buffer holding the negated input, for one of :data:`NEGATABLE`
    (of a float32/float64 ``dtype`` given: bound to it)."""
    if dtype is None:
        return silu_of_negated if activation == "silu" else sigmoid_of_negated
    return (_silu_of_negated_fn if activation == "silu" else _sigmoid_of_negated_fn)(np.dtype(dtype))


def negated(*operands):
    """Each operand negated (a new array; None stays None)."""
    return tuple(None if a is None else np.negative(a) for a in operands)


def negatable(activation, *operands) -> bool:
    """Whether a product of these bound ``operands`` (None: absent) may be computed negated for
    ``activation``: SiLU or sigmoid, every operand float32 or float64."""
    return isinstance(activation, str) and activation in NEGATABLE and all(
        a is None or (isinstance(a, np.ndarray) and a.dtype in (np.float32, np.float64)) for a in operands)

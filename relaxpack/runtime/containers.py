"""Sequences and optionals at run time: their representation and checks.

An ONNX sequence is a Python ``tuple`` of numpy arrays (sequence ops never
mutate one: each makes a new tuple); an optional is ``None`` (empty) or its
value. The entry function's signature records such an input or output by
kind: ``"sequence"``, ``"optional"`` (of a tensor) or ``"optional_sequence"``,
with the element's dtype and rank.

>>> as_input([np.zeros(2, np.float32)], "xs", "sequence", "float32", 1)    # doctest: +SKIP
(array([0., 0.], dtype=float32),)
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from .builtins import input_or_shape_error, builtin, check_tensor as _check_array
from .maps import MAP_KINDS, as_map_output

CONTAINER_KINDS = ("sequence", "optional", "optional_sequence")


def _check_sequence(value, dtype, ndim: int, ctx: str):
    if not isinstance(value, tuple):
        raise input_or_shape_error(ctx, f"expected a sequence (a tuple of arrays), got {type(value).__name__}")
    for i, item in enumerate(value):
        _check_array(item, dtype, ndim, f"{ctx} element {i}")


@builtin("vm.builtin.check_container")
def check_container(value, kind: str, dtype, ndim: int, ctx: str):
    """Check a sequence or optional value against its declared kind and element type."""
    if kind == "sequence":
        _check_sequence(value, dtype, ndim, ctx)
    elif kind in ("optional", "optional_sequence"):
        if value is not None:
            (_check_sequence if kind == "optional_sequence" else _check_array)(value, dtype, ndim, ctx)
    else:
        raise input_or_shape_error(ctx, f"unknown container kind {kind!r}")
    return value


def as_input(value, name: str, kind: str, dtype, ndim: int):
    """A user's input of a container kind as the VM holds it (lists become tuples), checked."""
    ctx = f"input {name!r}"
    if kind == "optional_sequence" or kind == "optional":
        if value is None:
            return None
        inner = "sequence" if kind == "optional_sequence" else "tensor"
        return as_input(value, name, inner, dtype, ndim) if inner == "sequence" else _array(value, ctx)
    if kind == "sequence":
        if isinstance(value, np.ndarray) or not isinstance(value, (list, tuple)):
            raise InputError(f"{ctx} is a sequence: pass a list of arrays, got {type(value).__name__}")
        return tuple(_array(v, f"{ctx} element {i}") for i, v in enumerate(value))
    raise InputError(f"{ctx}: unknown container kind {kind!r}")


def _array(value, ctx: str) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    try:
        return np.asarray(value)
    except Exception as err:
        raise InputError(f"{ctx}: cannot be read as an array ({err})") from None


def as_output(value, kind: str):
    """An output as the user gets it: a sequence as a list of arrays, an empty optional as None,
    maps as dicts of Python scalars (runtime/maps.py)."""
    if kind in MAP_KINDS:
        return as_map_output(value, kind)
    if kind in ("sequence", "optional_sequence") and value is not None:
        return list(value)
    return value


def as_output_is_identity(kind) -> bool:
    """Whether :func:`as_output` hands every value of ``kind`` back unchanged."""
    return kind not in ("sequence", "optional_sequence") and kind not in MAP_KINDS

"""``vm.builtin.loop``: run a loop body function until its trip count or condition stops it.

The compiler lowers ``R.loop`` (see ``relaxpack/ops/definitions/control.py``)
to one call of this builtin. The body is a bytecode function passed as a
function operand; the builtin calls it once per iteration from a plain
Python ``while``, so a loop of any length runs in constant stack depth, and
the body's arena (its own memory plan) is reused from one iteration to the
next. What the body returns never lives in its arena (returned values are
not planned), so state may be carried over safely.

>>> loop(1, (("float32", (2,)),))(body, np.array(3), np.array(True), x)   # doctest: +SKIP
(x_after_3_iterations, stacked_scan_output)
"""

from __future__ import annotations

import numpy as np

from ..errors import ArchiveError, ShapeError
from .builtins import builtin, specializable
from .dtypes import numpy_dtype


def _one(value, what: str):
    if type(value) is np.ndarray and value.size == 1:      # the common case, without a reshape
        return value.item()
    array = np.asarray(value)
    if array.size != 1:
        raise ShapeError(f"Loop: the {what} must hold one value, got shape {array.shape}")
    return array.reshape(()).item()


def _stack(items: list, spec) -> np.ndarray:
    """The scan output of all iterations stacked on a new axis 0; empty when there were none."""
    if items:
        first = items[0]
        for k, item in enumerate(items[1:], 1):
            if item.shape != first.shape:
                raise ShapeError(f"Loop: scan output of iteration {k} has shape {item.shape}, "
                                 f"the first iteration's {first.shape}")
        return np.stack(items)
    dtype, shape = spec
    return np.zeros((0,) + tuple(d if d is not None else 0 for d in shape), numpy_dtype(dtype))


def _check_specs(num_state, scans) -> None:
    if isinstance(num_state, bool) or not isinstance(num_state, int) or num_state < 0:
        raise ArchiveError(f"loop: bad state count {num_state!r}")
    if not isinstance(scans, (list, tuple)) or not all(
            isinstance(s, (list, tuple)) and len(s) == 2 and isinstance(s[0], str)
            and isinstance(s[1], (list, tuple)) for s in scans):
        raise ArchiveError("loop: scan outputs must be [dtype, element shape] pairs")
    for dtype, _ in scans:
        numpy_dtype(dtype)


@builtin("vm.builtin.loop")
def loop(num_state: int, scans, body, max_trip, cond, *operands):
    """Run ``body`` as ONNX's Loop does; returns the final state and the stacked scan outputs."""
    return _loop_specialize(num_state, scans)(body, max_trip, cond, *operands)


def _loop_specialize(num_state: int, scans):
    _check_specs(num_state, scans)
    num_scan = len(scans)

    def run(body, max_trip, cond, *operands):
        trips = _one(max_trip, "trip count")
        keep_going = bool(_one(cond, "condition"))
        state, captured = tuple(operands[:num_state]), tuple(operands[num_state:])
        collected: list[list] = [[] for _ in range(num_scan)]
        i = 0
        while i < trips and keep_going:
            out = body(np.array(i, np.int64), np.array(keep_going), *state, *captured)
            if not isinstance(out, tuple) or len(out) != 1 + num_state + num_scan:
                raise ShapeError(f"Loop: the body returned {len(out) if isinstance(out, tuple) else 1} "
                                 f"values, expected {1 + num_state + num_scan}")
            keep_going = bool(_one(out[0], "condition"))
            state = out[1:1 + num_state]
            for items, value in zip(collected, out[1 + num_state:]):
                items.append(value)
            i += 1
        return state + tuple(_stack(items, spec) for items, spec in zip(collected, scans))
    return run


specializable(loop, 2, _loop_specialize)

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
from .func_ref import FunctionRef


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
    width = 1 + num_state + num_scan

    last: list = [None, None, ()]     # the body last run: (compiled, its warm variant, the unsure state)

    def run(body, max_trip, cond, *operands):
        trips = _one(max_trip, "trip count")
        keep_going = bool(_one(cond, "condition"))
        state, captured = tuple(operands[:num_state]), tuple(operands[num_state:])
        collected: list[list] = [[] for _ in range(num_scan)]
        if trips <= 0 or not keep_going:
            return state + tuple(_stack([], spec) for spec in scans)
        direct = body.direct(2 + len(operands)) if type(body) is FunctionRef else None
        compiled, name_error = direct if direct is not None else (None, None)
        call = compiled.run if compiled is not None else body
        if compiled is not last[0] and trips > 1:
            warm = compiled.warm_variant() if compiled is not None else None
            last[:] = compiled, warm, _unsure(compiled, num_state, width) if warm is not None else ()
        warm, unsure = (last[1], last[2]) if compiled is last[0] else (None, ())
        w = kept = None         # the warm state, and the shapes and dtypes of the state it is for
        trusted = False         # the state passed _kept once since w was taken: check the unsure only
        used = False            # w served a trip (else the state changed shape right after it was taken)
        unused = 0              # warm states in a row that served no trip: at WARM_TRIES, take no more
        going = _TRUE           # the condition a body sees: only ever True (else it is not called)
        counters = _counters(min(trips, COUNTERS))
        shared = len(counters)
        warm_run = warm.run if warm is not None else None
        i = 0
        while i < trips and keep_going:
            counter = counters[i] if i < shared else np.array(i, np.int64)
            try:
                if trusted and (not unsure or _kept(state, kept, unsure)):
                    out = warm_run(w, counter, going, *state, *captured)
                elif w is not None and _kept(state, kept, range(num_state)):
                    out = warm_run(w, counter, going, *state, *captured)
                    trusted = used = True
                else:
                    out = call(counter, going, *state, *captured)
                    if warm is not None and 0 < i < trips - 1 and unused < WARM_TRIES:     # (on the second
                        # trip: short loops pay nothing, and the first trip's state may be a shape the
                        # body never returns; a state that grows every trip stops taking them)
                        unused = 0 if w is None or used else unused + 1
                        w = compiled.warm_state((counter, going, *state, *captured))
                        kept = _shapes(state) if w is not None else None
                        trusted = used = False
            except Exception as err:  # noqa: BLE001 - named as the VM names a call's errors
                if name_error is None:
                    raise
                name_error(err)
            if type(out) is not tuple or len(out) != width:
                raise ShapeError(f"Loop: the body returned {len(out) if isinstance(out, tuple) else 1} "
                                 f"values, expected {width}")
            c = out[0]
            keep_going = bool(c.item() if type(c) is np.ndarray and c.size == 1 else _one(c, "condition"))
            state = out[1:1 + num_state]
            if num_scan:
                for items, value in zip(collected, out[1 + num_state:]):
                    items.append(value)
            i += 1
        return tuple(_own(v) for v in state) + tuple(_stack(items, spec) for items, spec in zip(collected, scans))
    return run


def _unsure(compiled, num_state: int, width: int) -> tuple[int, ...]:
    """The state values whose shape or dtype may change from one trip to the next, as far as the
    body's bytecode shows (``Compiled.steady``): the others are the same array passed through,
    or a new array of one fixed shape and dtype on every trip."""
    steady = compiled.steady
    if len(steady) != width:
        return tuple(range(num_state))
    return tuple(k for k in range(num_state) if not steady[1 + k])


def _shapes(state) -> tuple:
    return tuple((v.shape, v.dtype) for v in state)


def _kept(state, kept, which) -> bool:
    """State values ``which`` numpy arrays of the shapes and dtypes (the same dtype objects) in
    ``kept``: the body's input checks would pass as they did and leave the same heap.

    Why the warm state may stand for the checks: it was taken on a call whose inputs were
    ``kept``; the counter (a 0-d int64), the condition (the same True) and the captured values
    (the same objects) keep their shapes and dtypes by construction. Once the whole state
    matched ``kept`` on a trip after the first (its values then came from the body), the
    steady values (:func:`_unsure`'s others) match on every later trip without a look."""
    for k in which:
        v = state[k]
        shape, dtype = kept[k]
        if type(v) is not np.ndarray or v.shape != shape or v.dtype is not dtype:
            return False
    return True


def _counters(n: int) -> tuple:
    """The trip counters 0 .. ``n - 1`` (at least; ``n`` at most :data:`COUNTERS`) as 0-d int64
    arrays shared by every loop: read-only, made once per process, so a body that keeps one
    keeps a value that never changes. Counts past them get a new array each."""
    global _COUNTERS
    counters = _COUNTERS
    if n <= len(counters):
        return counters
    # grown by a new tuple, each counter made from its own index: threads racing here agree
    grown = counters + tuple(_read_only(np.array(k, np.int64))
                             for k in range(len(counters), min(COUNTERS, max(64, n, 2 * len(counters)))))
    _COUNTERS = grown
    return grown


def _read_only(array: np.ndarray) -> np.ndarray:
    array.flags.writeable = False
    return array


def _own(value):
    """A read-only final state value copied: what the loop made (a counter or its True, or a
    view of one, kept by the body), so the caller gets a writable array of its own as from
    any other output."""
    if type(value) is np.ndarray and not value.flags.writeable:
        return value.copy()
    return value


#: the condition every body call sees (read-only, shared: a body may keep it)
_TRUE = _read_only(np.array(True))
#: trip counts below this get shared read-only counters
COUNTERS = 4096
#: warm states in a row that no trip used (the state changed shape each time) before a loop
#: call takes no more: a state that grows every trip (Mask R-CNN's pasted masks) paid one a trip
WARM_TRIES = 2
_COUNTERS: tuple = ()


specializable(loop, 2, _loop_specialize)

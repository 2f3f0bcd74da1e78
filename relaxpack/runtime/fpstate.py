"""numpy's floating-point warnings off, cheaply.

Kernels compute IEEE results on purpose (``log(0) = -inf``, ``exp(1000) =
inf``, an all ``-inf`` softmax row is NaN) and must not warn about them, as
onnxruntime does not. ``np.errstate(all="ignore")`` costs about 1.4 µs per
``with`` (it parses its keywords and builds numpy's error state each time):
on a tensor of a few hundred values that is more than the ufunc call it
guards. numpy 2 keeps that state in a context variable; :func:`quiet` sets it
to a state made once, and does nothing when it is already set (the VM sets it
once for a whole run), at 0.05-0.3 µs. Where numpy lacks the variable it
falls back to ``np.errstate``.

>>> with quiet():
...     np.log(np.zeros(2))
array([-inf, -inf])
"""

from __future__ import annotations

from functools import partial

import numpy as np

try:
    from numpy._core._ufunc_config import _extobj_contextvar as _STATE
except ImportError:  # pragma: no cover - an older or newer numpy without it
    _STATE = None

if _STATE is not None:
    with np.errstate(all="ignore"):
        _IGNORE = _STATE.get()


class _Set:
    """Sets the ignoring state on entry and puts back the previous one on exit."""

    __slots__ = ("token",)

    def __enter__(self):
        self.token = _STATE.set(_IGNORE)

    def __exit__(self, *exc):
        _STATE.reset(self.token)


class _Nothing:
    __slots__ = ()

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        pass


_NOTHING = _Nothing()


def quiet():
    """A context manager under which numpy ignores floating-point errors (no warnings)."""
    if _STATE is None:
        return np.errstate(all="ignore")
    if _STATE.get() is _IGNORE:
        return _NOTHING
    return _Set()


#: ``state_now() is IGNORING`` when numpy ignores floating-point errors already (a VM run):
#: a hot caller may then skip even :func:`quiet`'s ``with`` (generated code, fused_specialized.py)
state_now = _STATE.get if _STATE is not None else (lambda: None)
IGNORING = _IGNORE if _STATE is not None else object()


if _STATE is not None:
    #: Ignore floating-point errors until :func:`restore` is called with what this returns. Both
    #: are C calls, without a Python frame each: the VM makes them on every run, where a function
    #: around them was about 4% of a one-op model's call (design-notes "Speed on small models").
    silence = partial(_STATE.set, _IGNORE)
    #: Undo the matching :func:`silence`.
    restore = _STATE.reset
else:  # pragma: no cover - an older or newer numpy without the context variable
    def silence():
        """Ignore floating-point errors until :func:`restore` is called with what this returns."""
        state = np.errstate(all="ignore")
        state.__enter__()
        return state

    def restore(token) -> None:
        """Undo the matching :func:`silence`."""
        token.__exit__(None, None, None)

"""Kernels of control flow: a branch that cannot run.

The importer keeps an If branch that the dims known at conversion prove
cannot run (silero VAD's 8 kHz branch at the 16 kHz input length) as a
call of :func:`branch_error`, so that the error comes when the branch is
taken, as onnxruntime gives it, and not for every model that never takes
it.
"""

from __future__ import annotations

from ...errors import ShapeError
from ._registry import register_packed


@register_packed("control.branch_error")
def branch_error(*, message):
    """Raise the error the branch's conversion met (the VM adds the If node's name)."""
    raise ShapeError(message)

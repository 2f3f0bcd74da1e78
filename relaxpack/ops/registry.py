"""The op library's registry: the protocol (:class:`OpDef`, ``register_op``,
``get_op_def``, ``make_call``) lives in :mod:`relaxpack.ir.op`, re-exported
here for the op definitions and their users. The definitions (``definitions/``)
register themselves on the first look-up (``relaxpack.OP_LIBRARIES``).

>>> from relaxpack.ops import make_call                 # doctest: +SKIP
>>> make_call("nn.softmax", x, axis=-1)                  # doctest: +SKIP
"""

from __future__ import annotations

from ..ir.op import REQUIRED, InferFn, OpDef, WorkspaceFn, get_op_def, make_call, register_op, registered_ops

__all__ = ["REQUIRED", "InferFn", "OpDef", "WorkspaceFn", "get_op_def", "make_call", "register_op",
           "registered_ops"]

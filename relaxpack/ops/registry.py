"""The op library's registry: the protocol (:class:`OpDef`, ``register_op``,
``get_op_def``, ``make_call``) lives in :mod:`relaxpack.ir.op`, re-exported
here for the op definitions and their users. The definitions (``definitions/``)
register themselves on the first look-up (``relaxpack.OP_LIBRARIES``).
:func:`call_workspace` reads a call's kernel workspace off its op's record.

>>> from relaxpack.ops import make_call                 # doctest: +SKIP
>>> make_call("nn.softmax", x, axis=-1)                  # doctest: +SKIP
"""

from __future__ import annotations

from ..ir.dims import Dim
from ..ir.expr import Call, ExternFunc, Op, Tuple
from ..ir.op import (
    REQUIRED, InferFn, OpDef, WorkspaceFn, find_op_def, get_op_def, make_call, register_op, registered_ops,
)
from ..ir.struct_info import TupleStructInfo


def call_workspace(call: Call) -> Dim | None:
    """The scratch bytes (a dim) of a ``call_tir`` (codegen allocates them for
    its one instruction; the binding-order pass counts them) or of a graph
    op's call (what its kernel call will take), or None. Each op says its own
    (``register_op(..., workspace=fn)``, beside its inference function)."""
    if not isinstance(call.op, Op) or call.op.name in ("call_dps_packed", "call_packed", "call_pure_packed"):
        return None
    if call.op.name != "call_tir":
        return get_op_def(call.op).workspace_bytes(tuple(a.struct_info for a in call.args), call.attrs,
                                                   call.struct_info)
    if not isinstance(call.args[0], ExternFunc):
        return None
    opdef = find_op_def(call.args[0].global_symbol)     # None: a custom kernel, not an op
    if opdef is None:
        return None
    args = call.args[1]
    sinfo = args.struct_info
    if isinstance(args, Tuple):
        inputs = tuple(f.struct_info for f in args.fields)
    else:
        inputs = tuple(sinfo.fields) if isinstance(sinfo, TupleStructInfo) else (sinfo,)
    return opdef.workspace_bytes(inputs, dict(call.attrs.get("kernel_attrs") or ()), call.sinfo_args[0])


__all__ = ["REQUIRED", "InferFn", "OpDef", "WorkspaceFn", "call_workspace", "find_op_def", "get_op_def",
           "make_call", "register_op", "registered_ops"]

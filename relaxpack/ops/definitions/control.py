"""Structured control flow beyond ``If``: a loop over a module function, and a branch that fails.

``R.loop(body, max_trip, cond, *state, *captured, num_state=n, sinfo_args=R.Tuple(...))``
runs the module function ``body`` (a :class:`GlobalVar`) while the trip
count is below ``max_trip`` (an int64 tensor of one value) and the
condition holds (``cond``: a bool tensor of one value), as ONNX's Loop does::

    i, c, v = 0, cond, state
    while i < max_trip and c:
        c, *v, *scan_i = body(i, c, *v, *captured)    # i: int64 (), c: bool ()
        i += 1
    result = (*v, *stack(scan_0...), ...)              # scans stacked on a new axis 0

``num_state`` of the operands after ``cond`` are loop-carried state; the rest
are values the body reads unchanged (the outer scope of an ONNX subgraph).
``sinfo_args[0]`` is the result's struct info: a tuple of the final state
and the stacked scan outputs. The VM runs it with the builtin
``vm.builtin.loop``, which calls the body function once per iteration
without growing the Python stack; the body has its own memory plan.

Scan (ONNX) is a loop whose body slices the scanned inputs by the trip count.
"""

from __future__ import annotations

from ...errors import IRError
from ...ir.dims import DimAnalyzer
from ...ir.expr import Call, GlobalVar
from ...ir.struct_info import ObjectStructInfo, StructInfo, TupleStructInfo
from ..registry import REQUIRED, register_op
from .common import op_label


def _infer_loop(call: Call, analyzer: DimAnalyzer) -> StructInfo:
    body = call.args[0]
    if not isinstance(body, GlobalVar):
        raise IRError(f"{op_label(call)}: the body must be a module function (a GlobalVar), "
                      f"got {type(body).__name__}")
    num_state = call.attrs["num_state"]
    if not isinstance(num_state, int) or isinstance(num_state, bool) or not 0 <= num_state <= len(call.args) - 3:
        raise IRError(f"{op_label(call)}: num_state={num_state!r} must count operands after cond "
                      f"(there are {len(call.args) - 3})")
    if len(call.sinfo_args) != 1 or not isinstance(call.sinfo_args[0], TupleStructInfo):
        raise IRError(f"{op_label(call)}: sinfo_args must be one R.Tuple (final state and scan outputs)")
    result = call.sinfo_args[0]
    if len(result.fields) < num_state:
        raise IRError(f"{op_label(call)}: the result has {len(result.fields)} fields, fewer than the "
                      f"{num_state} state values")
    return result


register_op("loop", infer=_infer_loop, attrs={"num_state": REQUIRED}, num_args=(3, None),
            doc="run a module function while a trip count and a condition allow (ONNX Loop, Scan)")


def _infer_branch_error(call: Call, analyzer: DimAnalyzer) -> StructInfo:
    if not isinstance(call.attrs["message"], str):
        raise IRError(f"{op_label(call)}: message must be a string, got {call.attrs['message']!r}")
    return ObjectStructInfo()


register_op("control.branch_error", infer=_infer_branch_error, attrs={"message": REQUIRED}, num_args=0,
            pure=False, foldable=False, data_dependent=True,
            doc="raise ``message`` (an If branch that the dims known at conversion prove cannot run; "
                "called through R.call_packed with the branch's output struct info)")

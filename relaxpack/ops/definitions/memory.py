"""Explicit memory, as PlanMemory writes it into the lowered IR (Relax's
``R.memory`` ops after StaticPlanBlockMemory).

* ``memory.alloc_tensor(shape, dtype=, storage=, pool=, offset=)`` -- a
  tensor of ``shape``: in arena buffer ``storage`` of ``pool`` (at byte
  ``offset`` when every dim has an upper bound: the plan at the bounds, in
  the default pool if a bounded ``pool`` spilled it there; the runtime
  re-plans each concrete shape), or, with ``storage=None``, an allocation
  of its own (an output, or a size only known later).
* ``memory.kill_tensor(x)`` -- ``x``'s buffer is not read after this point
  (its last use is the binding right before; at the head of an ``If``'s
  branch, the condition). Codegen emits nothing for it: it ends the
  buffer's lifetime in the archive's plan.

``call_tir`` / ``call_dps_packed`` then take the allocated output (and a
kernel's workspace) as arguments: ``R.call_tir(k, (x,), out, workspace)``.

>>> make_call("memory.alloc_tensor", ShapeExpr((n, 4)), dtype="float32", storage=0, offset=64)  # doctest: +SKIP
"""

from __future__ import annotations

from ...errors import IRError
from ...ir.dims import DimAnalyzer
from ...ir.expr import Call, Constant, ExternFunc, ShapeExpr, Tuple
from ...ir.op import REQUIRED
from ...ir.struct_info import GLOBAL_SCOPE, StructInfo, TensorStructInfo, TupleStructInfo
from ..registry import register_op
from .common import op_label

#: kernels that only copy their operand into another shape: on memory the function allocated
#: (an intermediate, never an input or a constant the result could then alias) codegen makes
#: them ``vm.builtin.reshape_view``, an alias of the operand, not an allocation
RESHAPES = frozenset({"reshape", "expand_dims", "squeeze", "flatten"})


def index_view_of(call: Call) -> int | None:
    """The index ``i`` when ``call`` is a lowered ``take(x, i, axis=0)`` of one constant
    non-negative index below ``x``'s static first dim, else None: ``x[i]``, contiguous in a
    contiguous ``x``, which codegen makes ``vm.builtin.index_view`` on memory the function
    allocated (MergeProjections' parts of one batched product)."""
    if not (isinstance(call.args[0], ExternFunc) and call.args[0].global_symbol == "take" and len(call.args) == 2
            and isinstance(call.args[1], Tuple) and len(call.args[1].fields) == 2):
        return None
    if dict(call.attrs.get("kernel_attrs") or ()).get("axis") != 0:
        return None
    data, index = call.args[1].fields
    sinfo = data.struct_info
    if not (isinstance(index, Constant) and index.data.ndim == 0 and index.data.dtype.kind in "iu"
            and isinstance(sinfo, TensorStructInfo) and sinfo.shape and isinstance(sinfo.shape[0], int)):
        return None
    i = int(index.data)
    return i if 0 <= i < sinfo.shape[0] else None


def _infer_alloc(call: Call, analyzer: DimAnalyzer) -> StructInfo:
    shape = call.args[0]
    if not isinstance(shape, ShapeExpr):
        raise IRError(f"{op_label(call)}: the shape must be an R.shape([...]), got {type(shape).__name__}")
    storage, offset = call.attrs["storage"], call.attrs["offset"]
    if storage is not None and (isinstance(storage, bool) or not isinstance(storage, int) or storage < 0):
        raise IRError(f"{op_label(call)}: storage must be an arena buffer index or None, got {storage!r}")
    if offset is not None and (storage is None or isinstance(offset, bool) or not isinstance(offset, int)
                               or offset < 0):
        raise IRError(f"{op_label(call)}: offset must be a byte offset in an arena buffer, got {offset!r}")
    return TensorStructInfo(shape.values, call.attrs["dtype"], vdevice=call.attrs["vdevice"])


def _infer_kill(call: Call, analyzer: DimAnalyzer) -> StructInfo:
    if not isinstance(call.args[0].struct_info, TensorStructInfo):
        raise IRError(f"{op_label(call)}: kills a tensor")
    return TupleStructInfo(())


register_op("memory.alloc_tensor", infer=_infer_alloc, num_args=1, foldable=False,
            attrs={"dtype": REQUIRED, "storage": None, "pool": GLOBAL_SCOPE, "offset": None,
                   "vdevice": GLOBAL_SCOPE},
            doc="A tensor in an arena buffer (storage) at an offset, or an allocation of its own.")
register_op("memory.kill_tensor", infer=_infer_kill, num_args=1, foldable=False,
            doc="The tensor's buffer is not read after this point (a plan's kill point).")

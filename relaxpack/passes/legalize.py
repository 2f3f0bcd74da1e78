"""Legalize: graph ops become kernel calls in destination-passing style.

``lv = R.nn.softmax(x, axis=-1)`` becomes
``lv = R.call_tir("nn.softmax", (x,), out_sinfo=..., kernel_attrs=(("axis", -1),))``:
the kernel of the same name (runtime/kernels) writes into an output the
caller allocates, so every graph op must have an output shape the compiler
knows (symbolic dims are fine). Ops whose output shape depends on data are
not graph ops here: the importer calls their packed kernels with
``call_packed`` and binds the result with a ``match_cast`` to fresh dims.
"""

from __future__ import annotations

from ..errors import PassError
from ..ir.block_builder import BlockBuilder
from ..ir.expr import Call, ExternFunc, Op, Tuple
from ..ir.struct_info import TensorStructInfo, TupleStructInfo
from ..ir.visitor import ExprMutator
from ..ir.well_formed import function_analyzer
from ..ops.registry import make_call
from .infra import function_pass

INTRINSICS = frozenset({"call_tir", "call_dps_packed", "call_packed"})
#: structured control flow the VM runs itself (its body is a module function, legalized on its own)
CONTROL_FLOW = frozenset({"loop"})


def _allocatable(sinfo) -> bool:
    if isinstance(sinfo, TupleStructInfo):
        return all(_allocatable(f) for f in sinfo.fields)
    return isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None and sinfo.dtype is not None


class _Legalizer(ExprMutator):
    def visit_call_(self, call: Call):
        call = super().visit_call_(call)
        if not isinstance(call.op, Op) or call.op.name in INTRINSICS or call.op.name in CONTROL_FLOW:
            return call
        if call.struct_info is None:   # an argument was rewritten: infer the output again
            call = self.builder.normalize(call)
        return legalize_call(call)


def legalize_call(call: Call) -> Call:
    """The kernel call that computes ``call``."""
    name = call.op.name
    kernel_attrs = tuple(call.attrs.items()) or None
    out = call.struct_info
    if not _allocatable(out):
        raise PassError(f"cannot legalize R.{name}: its output {out} has no known shape to allocate "
                        f"(call a data-dependent op's packed kernel with call_packed and match_cast it)")
    return make_call("call_tir", ExternFunc(name), Tuple(call.args), sinfo_args=(out,),
                     kernel_attrs=kernel_attrs)


@function_pass(name="Legalize", requires=("import", "optimize"), produces="lower")
def legalize(func, mod, ctx):
    # the function's dim ranges: re-normalizing an If joins its branches' shapes, which may be
    # equal only within them (3 * n == n for n in [0, 0])
    return _Legalizer(BlockBuilder(analyzer=function_analyzer(func))).visit_expr(func)

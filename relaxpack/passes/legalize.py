"""Legalize: graph ops become kernel calls in destination-passing style.

``lv = R.nn.softmax(x, axis=-1)`` becomes
``lv = R.call_tir("nn.softmax", (x,), out_sinfo=..., kernel_attrs=(("axis", -1),))``:
the kernel of the same name (runtime/kernels) writes into an output the
caller allocates, so every graph op must have an output shape the compiler
knows (symbolic dims are fine). Ops whose output shape depends on data are
not graph ops here: the importer calls their packed kernels with
``call_packed`` and binds the result with a ``match_cast`` to fresh dims.
An op whose output shape only the run can tell (an operand of unknown rank)
becomes ``R.call_pure_packed("dyn.apply", ...)`` when the runtime can shape
it: its output is its operands' broadcast shape (elementwise, softmax,
cumsum, ...) or the op has a rule in ``runtime/kernels/output_shapes.py``
(concat, reductions, matmul, take, strided_slice, split, ...). The run
allocates its output.
"""

from __future__ import annotations

from ..errors import PassError
from ..ir.block_builder import BlockBuilder
from ..ir.expr import Call, ExternFunc, Op, Tuple, VarBinding
from ..ir.rank_origin import rank_origin, unknown_rank_operand
from ..ir.struct_info import TensorStructInfo, TupleStructInfo
from ..ir.visitor import ExprMutator
from ..ir.well_formed import function_analyzer
from ..ops.definitions.common import fmt_sinfo
from ..ops.registry import get_op_def, make_call
from ..runtime.kernels.output_shapes import OUTPUT_SHAPES
from .core.infra import function_pass

INTRINSICS = frozenset({"call_tir", "call_dps_packed", "call_packed", "call_pure_packed"})
#: structured control flow the VM runs itself (its body is a module function, legalized on its own)
CONTROL_FLOW = frozenset({"loop"})


def _allocatable(sinfo) -> bool:
    if isinstance(sinfo, TupleStructInfo):
        return all(_allocatable(f) for f in sinfo.fields)
    return isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None and sinfo.dtype is not None


class _Legalizer(ExprMutator):
    def visit_var_binding_(self, binding: VarBinding) -> None:
        try:
            super().visit_var_binding_(binding)
        except PassError as err:
            if binding.span is None or str(err).startswith("ONNX node"):
                raise
            raise PassError(f"ONNX node {str(binding.span)!r}: {err}") from None

    def visit_call_(self, call: Call):
        call = super().visit_call_(call)
        if not isinstance(call.op, Op) or call.op.name in INTRINSICS or call.op.name in CONTROL_FLOW:
            return call
        if call.struct_info is None:   # an argument was rewritten: infer the output again
            call = self.builder.normalize(call)
        return legalize_call(call, self.builder.lookup_binding)


def legalize_call(call: Call, lookup=lambda var: None) -> Call:
    """The kernel call that computes ``call``; ``lookup`` finds the bindings
    of its operands, for an error that says where an unknown rank came from."""
    name = call.op.name
    kernel_attrs = tuple(call.attrs.items()) or None
    out = call.struct_info
    if not _allocatable(out):
        if _shaped_at_run_time(call):
            dtype = tuple(f.dtype for f in out.fields) if isinstance(out, TupleStructInfo) else out.dtype
            return make_call("call_pure_packed", ExternFunc("dyn.apply"), *call.args, sinfo_args=(out,),
                             kernel_attrs=(("kernel", name), ("dtype", dtype), ("attrs", kernel_attrs or ())))
        raise PassError(_unallocatable(call, lookup))
    return make_call("call_tir", ExternFunc(name), Tuple(call.args), sinfo_args=(out,),
                     kernel_attrs=kernel_attrs)


def _unallocatable(call: Call, lookup) -> str:
    """Why ``call``'s output cannot be allocated: the operand of unknown rank
    and where that rank was lost, or the unknown shape."""
    operand = unknown_rank_operand(call)
    if operand is None:
        return f"R.{call.op.name} needs its operands' shape to allocate its output {fmt_sinfo(call.struct_info)}"
    return (f"R.{call.op.name} needs the rank of its operand, unknown here: "
            f"{rank_origin(operand, lookup)}")


#: ops whose output has the broadcast shape of their tensor operands, besides the elementwise ones
#: (softmax, cumsum and trilu keep their input's shape; an axis or k operand broadcasts into it)
_BROADCAST_SHAPED = frozenset({"where", "nn.prelu", "astype", "nn.softmax", "nn.safe_softmax", "nn.log_softmax", "cumsum",
                               "cumprod", "trilu"})


def _shaped_at_run_time(call: Call) -> bool:
    """Whether ``call``'s output of unknown shape can be allocated at run time
    (``dyn.apply``): tensors of known dtypes whose shapes the run works out,
    by the op's rule or as its tensor operands' broadcast shape."""
    out = call.struct_info
    fields = out.fields if isinstance(out, TupleStructInfo) else (out,)
    if not all(isinstance(f, TensorStructInfo) and f.dtype is not None for f in fields):
        return False
    if call.op.name in OUTPUT_SHAPES:
        return True
    if isinstance(out, TupleStructInfo):
        return False
    if not all(isinstance(a.struct_info, TensorStructInfo) for a in call.args):
        return False
    return call.op.name in _BROADCAST_SHAPED or get_op_def(call.op.name).elementwise


@function_pass(name="Legalize", requires=("import", "optimize"), produces="lower")
def legalize(func, mod, ctx):
    # the function's dim ranges: re-normalizing an If joins its branches' shapes, which may be
    # equal only within them (3 * n == n for n in [0, 0])
    return _Legalizer(BlockBuilder(analyzer=function_analyzer(func))).visit_expr(func)

"""Calls into kernels and runtime functions, with the Relax conventions.

* ``call_tir(kernel, (args...))`` -- destination-passing: the caller
  allocates the outputs described by ``sinfo_args[0]`` and the kernel
  writes into them. Pure. After PlanMemory the call takes them explicitly:
  ``call_tir(kernel, (args...), out[, workspace])`` (ops/definitions/memory.py).
* ``call_dps_packed(func, (args...))`` -- the same convention for a
  registered function. Pure.
* ``call_packed(func, *args)`` -- a registered function that returns new
  values (e.g. data-dependent shapes). Impure; its result is
  ``sinfo_args[0]`` or ``R.Object``. A ``dyn.*`` callee is a data-dependent
  op (``definitions/dynamic.py``): its ``kernel_attrs`` follow its schema.
* ``call_pure_packed(func, *args)`` -- the same for a function without side
  effects (Relax's ``R.call_pure_packed``): Legalize uses it where a graph
  op's output can only be allocated at run time (``dyn.apply``), so the
  function stays pure and the call may sit in a dataflow block.

Each takes one optional attribute, ``kernel_attrs``: ``None`` or a tuple of
``(name, value)`` pairs passed to the kernel, with immutable values.

>>> make_call("call_tir", ExternFunc("matmul_f32"), Tuple((x, w)),         # doctest: +SKIP
...           sinfo_args=(TensorStructInfo((n, 128), "float32"),))
"""

from __future__ import annotations

from ...errors import IRError
from ...ir.dims import DimAnalyzer, DimExpr
from ...ir.expr import Call, ExternFunc
from ...ir.struct_info import ObjectStructInfo, StructInfo, TensorStructInfo, TupleStructInfo
from ..registry import find_op_def, register_op
from .common import attr_error, fmt_sinfo, op_label, tuple_arg

_IMMUTABLE = (int, float, bool, str, type(None), DimExpr)


def _check_callee(call: Call) -> None:
    if not isinstance(call.args[0], ExternFunc):
        raise IRError(f"{op_label(call)}: the callee must be an ExternFunc (a kernel or registered "
                      f"function name), got {type(call.args[0]).__name__}")


def _check_kernel_attrs(call: Call) -> None:
    value = call.attrs["kernel_attrs"]
    if value is None:
        return
    ok = isinstance(value, tuple) and all(
        isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str) and _immutable(p[1])
        for p in value)
    if not ok:
        raise attr_error(call, f"kernel_attrs must be a tuple of (name, value) pairs with immutable "
                               f"values, got {value!r}")


def _immutable(v) -> bool:
    if isinstance(v, tuple):
        return all(_immutable(x) for x in v)
    return isinstance(v, _IMMUTABLE)


def _is_tensors(sinfo: StructInfo) -> bool:
    if isinstance(sinfo, TensorStructInfo):
        return True
    return isinstance(sinfo, TupleStructInfo) and all(_is_tensors(f) for f in sinfo.fields)


def _infer_dps(call: Call, analyzer: DimAnalyzer) -> StructInfo:
    _check_callee(call)
    _check_kernel_attrs(call)
    args = tuple_arg(call, 1, "args")
    if call.op.name == "call_tir":
        _check_op_kernel(call, len(args.fields), packed=False)
    if not call.sinfo_args:
        raise IRError(f"{op_label(call)}({call.args[0].global_symbol}) needs the output struct info "
                      f"in sinfo_args")
    out = call.sinfo_args[0]
    if not _is_tensors(out):
        raise IRError(f"{op_label(call)}({call.args[0].global_symbol}): destination-passing outputs must "
                      f"be tensors or a tuple of tensors, got {fmt_sinfo(out)}")
    return out


register_op("call_tir", infer=_infer_dps, attrs={"kernel_attrs": None}, num_args=(2, 4),
            doc="Call a kernel in destination-passing style; outputs are sinfo_args[0].")
register_op("call_dps_packed", infer=_infer_dps, attrs={"kernel_attrs": None}, num_args=(2, 3),
            doc="Call a registered function in destination-passing style; outputs are sinfo_args[0].")


def _check_op_kernel(call: Call, n_operands: int, packed: bool) -> None:
    """A call of an op's kernel passes every attribute of the op's schema (the
    kernel takes them all as required keywords: defaults are the op record's,
    filled in when the call is made) and the op's operand count; a packed call
    (``call_packed``) is one of a data-dependent op, a destination-passing one
    (``call_tir``) of a graph op. A callee that is no op (a registered
    function, a custom kernel) takes what it likes."""
    opdef = find_op_def(call.args[0].global_symbol)
    if opdef is None:
        return
    if opdef.data_dependent != packed:
        how = "R.call_packed" if opdef.data_dependent else f"R.{opdef.name}(...) or R.call_tir"
        raise IRError(f"{op_label(call)}({opdef.name}): R.{opdef.name} is "
                      f"{'' if opdef.data_dependent else 'not '}data-dependent; call it through {how}")
    given = dict(call.attrs["kernel_attrs"] or ())
    opdef.check_attrs(given)
    missing = [k for k in opdef.attrs if k not in given]
    if missing:
        raise IRError(f"{op_label(call)}({opdef.name}) needs every attribute of R.{opdef.name} in "
                      f"kernel_attrs; missing {missing}")
    if n_operands < opdef.min_args or (opdef.max_args is not None and n_operands > opdef.max_args):
        raise IRError(f"{op_label(call)}({opdef.name}) takes {opdef.min_args}.."
                      f"{'' if opdef.max_args is None else opdef.max_args} operands, got {n_operands}")


def _infer_call_packed(call: Call, analyzer: DimAnalyzer) -> StructInfo:
    _check_callee(call)
    _check_kernel_attrs(call)
    _check_op_kernel(call, len(call.args) - 1, packed=True)
    return call.sinfo_args[0] if call.sinfo_args else ObjectStructInfo()


register_op("call_packed", infer=_infer_call_packed, attrs={"kernel_attrs": None}, num_args=(1, None),
            pure=False, doc="Call a registered function that returns new values (impure).")
register_op("call_pure_packed", infer=_infer_call_packed, attrs={"kernel_attrs": None}, num_args=(1, None),
            doc="Call a registered function without side effects that returns new values.")

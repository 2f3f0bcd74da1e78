"""``fused_elementwise``: a chain or tree of elementwise ops run as one kernel.

FuseOps groups elementwise ops into a ``Primitive`` function and
LowerFusedFunctions turns each call of one into a single
``call_tir("fused_elementwise", (args...), kernel_attrs=(("recipe", RECIPE),))``.
The recipe is plain data, the steps of the fused function in order::

    RECIPE = (step, ...)            # the last step's output is the result
    step   = (op, inputs, attrs, dtype, full, inplace)
      op      "exp", "add", "nn.gelu", ... or a producer: "matmul", "nn.gemm", ...
      inputs  (("p", i) | ("s", j), ...)   parameter i of the call / the output of step j < this one
      attrs   (("name", value), ...)      every attribute of the op, defaults filled in
      dtype   the step's output dtype
      full    True: the output has the result's shape; False: the broadcast shape
              of its inputs (smaller, it broadcasts into a later step)
      inplace (bool, ...) per input: the step may write its output over that input
              (an elementwise op, and the input has the output's shape and dtype)

e.g. ``exp(x) + y`` with ``y`` of shape ``(4,)`` and ``x`` of ``(n, 4)``::

    (("exp", (("p", 0),), (), "float32", True, (True,)),
     ("add", (("s", 0), ("p", 1)), (), "float32", True, (True, False)))

A recipe holds elementwise ops (:func:`fusible_kind` says which) and at most
one producer (``matmul``, ``nn.conv``, ``nn.gemm``, ``nn.conv_bias_act``),
first, reading only parameters, with the result's shape: its elementwise
tail then runs in place on its output. The op is a graph op like any other:
its struct info is the recipe replayed through each step's own inference,
which also checks every claim the recipe makes (dtypes, ``full``,
``inplace``), so a recipe that type-checks is one the kernel may trust.
The op is ``elementwise`` for the memory planner: the kernel reads its
inputs correctly when the output reuses one of them.
"""

from __future__ import annotations

import math

from ...errors import IRError
from ...ir.dims import Dim, DimAnalyzer, dim_max
from ...ir.expr import Call, Constant, Op, Var
from ...ir.struct_info import StructInfo, TensorStructInfo
from ..registry import REQUIRED, get_op_def, register_op
from .common import attr_error, fmt_sinfo, shape_error, tensor_arg

#: ops that fuse like elementwise ones though their OpDef does not say so
#: (their output is the broadcast of their inputs, or a cast)
ELEMENTWISE_EXTRAS = frozenset({"where", "nn.prelu", "astype"})
#: ops that may start a fused group: the elementwise tail runs on their output
PRODUCERS = frozenset({"matmul", "permute_matmul", "nn.gemm", "nn.conv", "nn.conv_bias_act"})
#: look-ups that fuse as a step when their table is a constant vector (:func:`is_table_lookup`):
#: each output value is one input value mapped through the table, like an elementwise op's; always
#: of the result's shape, never in place (numpy's take buffers an ``out`` that is its index)
LOOKUPS = frozenset({"take"})
#: inputs an elementwise kernel must not write over although shape and dtype
#: match (``where`` reads its condition after writing ``out``)
_NO_IN_PLACE = {"where": frozenset({0})}

NAME = "fused_elementwise"


def fusible_kind(op_name: str) -> str | None:
    """``"elementwise"``, ``"producer"`` or None: how ``op_name`` may join a fused group."""
    if op_name == NAME:
        return None
    if op_name in PRODUCERS:
        return "producer"
    if op_name in LOOKUPS:
        return "lookup"
    if op_name in ELEMENTWISE_EXTRAS or get_op_def(op_name).elementwise:
        return "elementwise"
    return None


def is_table_lookup(call: Call) -> bool:
    """``take(table, index, axis=0)`` with ``table`` a 1-D constant: a quantized model's look-up
    (QLinearSigmoid and such map the 256 values through a table), which FuseOps puts at the end of
    the elementwise chain that makes its index instead of running it as one more kernel call."""
    table = call.args[0] if len(call.args) == 2 else None
    return (isinstance(call.op, Op) and call.op.name in LOOKUPS and isinstance(table, Constant)
            and table.data.ndim == 1 and call.attrs.get("axis") in (0, -1))


def may_write_over(op_name: str, index: int, arg: TensorStructInfo, out: TensorStructInfo) -> bool:
    """True when a step of ``op_name`` may write its output ``out`` over its input
    ``index`` (of struct info ``arg``): an elementwise op, the same shape and dtype."""
    return (fusible_kind(op_name) == "elementwise" and index not in _NO_IN_PLACE.get(op_name, ())
            and same_layout(arg, out))


def same_shape(a: TensorStructInfo, b: TensorStructInfo) -> bool:
    """Provably the same shape (canonical dims compare equal)."""
    return a.shape is not None and b.shape is not None and a.shape == b.shape


def same_layout(a: TensorStructInfo, b: TensorStructInfo) -> bool:
    """Provably the same shape and dtype."""
    return same_shape(a, b) and a.dtype is not None and a.dtype == b.dtype


def _ref_error(call: Call, i: int, message: str) -> IRError:
    return attr_error(call, f"recipe step {i}: {message}")


def _step_fields(call: Call, i: int, step):
    if not (isinstance(step, tuple) and len(step) == 6):
        raise _ref_error(call, i, f"must be (op, inputs, attrs, dtype, full, inplace), got {step!r}")
    op, inputs, attrs, dtype, full, inplace = step
    if not isinstance(op, str):
        raise _ref_error(call, i, f"the op must be a name, got {op!r}")
    if not (isinstance(inputs, tuple) and isinstance(inplace, tuple) and len(inplace) == len(inputs)
            and all(isinstance(f, bool) for f in inplace) and isinstance(full, bool)):
        raise _ref_error(call, i, "inputs and inplace must be tuples of the same length, full a bool")
    if not (isinstance(attrs, tuple) and all(isinstance(p, tuple) and len(p) == 2 and isinstance(p[0], str)
                                             for p in attrs)):
        raise _ref_error(call, i, f"attrs must be (name, value) pairs, got {attrs!r}")
    if not isinstance(dtype, str):
        raise _ref_error(call, i, f"the dtype must be a name, got {dtype!r}")
    return op, inputs, dict(attrs), dtype, full, inplace


def _infer_fused_elementwise(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    recipe = call.attrs["recipe"]
    if not isinstance(recipe, tuple) or not recipe:
        raise attr_error(call, f"attribute recipe must be a non-empty tuple of steps, got {recipe!r}")
    params = [tensor_arg(call, i, f"parameter {i}") for i in range(len(call.args))]
    values: list[TensorStructInfo] = []
    used = set()
    for i, step in enumerate(recipe):
        op, inputs, attrs, dtype, full, inplace = _step_fields(call, i, step)
        kind = fusible_kind(op)
        if kind is None:
            raise _ref_error(call, i, f"R.{op} cannot be fused (neither elementwise nor a producer)")
        args = []
        for ref in inputs:
            if ref in (("p", k) for k in range(len(params))):
                args.append(Var(f"p{ref[1]}", params[ref[1]]))
            elif ref in (("s", k) for k in range(i)):
                args.append(Var(f"s{ref[1]}", values[ref[1]]))
            else:
                raise _ref_error(call, i, f"input {ref!r} names neither a parameter (0..{len(params) - 1}) "
                                          f"nor an earlier step")
            used.add(ref)
        if kind == "lookup" and not full:
            raise _ref_error(call, i, f"a look-up (R.{op}) must have the result's shape (full)")
        if kind == "producer" and (i != 0 or not full or any(r[0] != "p" for r in inputs)):
            raise _ref_error(call, i, f"a producer (R.{op}) must be the first step, read only parameters "
                                      f"and have the result's shape (full)")
        opdef = get_op_def(op)
        if set(attrs) != set(opdef.attrs):
            raise _ref_error(call, i, f"R.{op} takes the attributes {sorted(opdef.attrs)}, all given; "
                                      f"the recipe has {sorted(attrs)}")
        step_call = Call(Op.get(op), tuple(args), attrs)
        opdef.check_call(step_call)
        out = opdef.infer(step_call, analyzer)
        if not isinstance(out, TensorStructInfo) or out.dtype != dtype:
            raise _ref_error(call, i, f"R.{op} gives {fmt_sinfo(out)} of {getattr(out, 'dtype', None)}, "
                                      f"the recipe says {dtype}")
        for k, (arg, claimed) in enumerate(zip(args, inplace)):
            if claimed and not may_write_over(op, k, arg.struct_info, out):
                raise _ref_error(call, i, f"R.{op} may not write over its input {k} "
                                          f"({fmt_sinfo(arg.struct_info)} of {arg.struct_info.dtype})")
        values.append(out)
    result = values[-1]
    for i, (step, value) in enumerate(zip(recipe, values)):
        if step[4] and not same_shape(value, result):
            raise _ref_error(call, i, f"marked full, but its output {fmt_sinfo(value)} does not have the "
                                      f"result's shape {fmt_sinfo(result)}")
    unused = ({("s", i) for i in range(len(recipe) - 1)} | {("p", k) for k in range(len(params))}) - used
    if unused:
        raise shape_error(call, f"the recipe never reads {sorted(unused)}")
    return result


def fused_elementwise_workspace(inputs: tuple, attrs, out: StructInfo) -> Dim | None:
    """Its temporaries (a bound over the in-place choices the memory plan may
    make, runtime/kernels/fused_elementwise.py), then the largest workspace of
    a step -- in practice the producer, a conv; the steps run one after
    another. Steps reading earlier steps' results take none (their inputs'
    shapes are not at hand here; they fall back to thread-local scratch)."""
    from ...runtime.kernels.fused_elementwise import workspace_bound   # loads the kernels: build time only
    if not (isinstance(out, TensorStructInfo) and out.shape is not None):
        return None
    recipe = attrs["recipe"]
    aliasable = [i for i, x in enumerate(inputs) if isinstance(x, TensorStructInfo) and x.dtype == out.dtype
                 and (x.shape is None or x.shape == out.shape)]
    total = workspace_bound(recipe, math.prod(out.shape), aliasable)
    largest = None
    for op, refs, step_attrs, dtype, full, _ in recipe:
        if not full or any(kind != "p" for kind, _ in refs):
            continue
        step_out = TensorStructInfo(out.shape, dtype, vdevice=out.vdevice)
        size = get_op_def(op).workspace_bytes(tuple(inputs[i] for _, i in refs), dict(step_attrs), step_out)
        if size is not None:
            largest = size if largest is None else dim_max(largest, size)
    return total if largest is None else total + largest


register_op(NAME, infer=_infer_fused_elementwise, attrs={"recipe": REQUIRED}, num_args=(1, None),
            elementwise=True, workspace=fused_elementwise_workspace,
            doc="Elementwise ops (and an optional matmul/conv producer) run as one kernel; "
                "see the recipe format in ops/definitions/fused_elementwise.py.")

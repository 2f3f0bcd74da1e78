"""Kernel workspace: the scratch memory an op's kernel takes, planned like a tensor.

An op declares ``register_op(..., workspace=fn)``; ``fn(inputs, attrs, out)``
gets the struct infos of the call's inputs, its attributes (defaults filled
in) and its output's struct info, and returns the scratch bytes the kernel
takes: an int or a symbolic dim over those shapes, or None when it takes
none or the size cannot be said at build time (a symbolic spatial dim:
that kernel keeps the thread-local scratch it uses outside the VM).

Codegen allocates that many bytes (a uint8 tensor) next to the output and
hands them to the kernel as ``workspace=``; the memory planner gives the
buffer a lifetime of the kernel's one instruction ("lifted" allocations, as
in TVM's unified static memory planning), so it counts in the lower bound
and shares the arena with every tensor not live there. Sizes come from the
kernels' own layout functions evaluated with symbolic dims, so the build
and the run agree by construction.

>>> workspace_bytes("nn.conv", (data, weight), {"padding": 1, ...}, out)   # doctest: +SKIP
84096 * batch
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from ..errors import RelaxpackError
from ..ir.dims import Dim, dim_max
from ..ir.expr import Call, ExternFunc, Op, Tuple
from ..ir.struct_info import StructInfo, TensorStructInfo, TupleStructInfo
from .registry import get_op_def

_CONV_ATTRS = ("strides", "padding", "dilation", "groups", "data_layout", "out_layout")


def workspace_bytes(op_name: str, inputs: tuple, attrs: Mapping[str, Any], out: StructInfo) -> Dim | None:
    """The workspace bytes of a kernel call of ``op_name``, or None (no op of
    that name, no hook, or nothing to plan)."""
    try:
        hook = get_op_def(op_name).workspace
    except RelaxpackError:          # a kernel name that is not an op (call_tir of a custom kernel)
        return None
    if hook is None:
        return None
    size = hook(tuple(inputs), attrs, out)
    if size is None or (isinstance(size, int) and size <= 0):
        return None
    return size


def call_workspace(call: Call) -> Dim | None:
    """The workspace bytes of a ``call_tir`` (codegen allocates them; the
    binding-order pass counts them) or of a graph op's call (what its kernel
    call will take), or None."""
    if not isinstance(call.op, Op) or call.op.name in ("call_dps_packed", "call_packed", "call_pure_packed"):
        return None
    if call.op.name != "call_tir":
        return workspace_bytes(call.op.name, tuple(a.struct_info for a in call.args), call.attrs,
                               call.struct_info)
    if not isinstance(call.args[0], ExternFunc):
        return None
    args = call.args[1]
    sinfo = args.struct_info
    if isinstance(args, Tuple):
        inputs = tuple(f.struct_info for f in args.fields)
    else:
        inputs = tuple(sinfo.fields) if isinstance(sinfo, TupleStructInfo) else (sinfo,)
    attrs = dict(call.attrs.get("kernel_attrs") or ())
    return workspace_bytes(call.args[0].global_symbol, inputs, attrs, call.sinfo_args[0])


def conv_workspace(inputs: tuple, attrs: Mapping[str, Any], out: StructInfo) -> Dim | None:
    """``nn.conv`` and ``nn.conv_bias_act``: the padded copy, the im2col
    columns and the GEMM result of the conv engine (runtime/kernels/conv_direct.py),
    linear in the batch; None unless every other dim is static."""
    from ..runtime.kernels.nn import conv_workspace as kernel_workspace   # loads the kernels: build time only
    data, weight = inputs[:2]
    if not (_shaped(data) and _shaped(weight) and isinstance(out, TensorStructInfo) and out.dtype):
        return None
    return kernel_workspace(data.shape, weight.shape, out.dtype, **{k: attrs[k] for k in _CONV_ATTRS if k in attrs})


def fused_elementwise_workspace(inputs: tuple, attrs: Mapping[str, Any], out: StructInfo) -> Dim | None:
    """``fused_elementwise``: its temporaries (a bound over the in-place choices
    the memory plan may make, runtime/kernels/fused_elementwise.py), then the
    largest workspace of a step -- in practice the producer, a conv; the steps
    run one after another. Steps reading earlier steps' results take none
    (their inputs' shapes are not at hand here; they fall back to
    thread-local scratch)."""
    from ..runtime.kernels.fused_elementwise import workspace_bound
    if not _shaped(out):
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
        size = workspace_bytes(op, tuple(inputs[i] for _, i in refs), dict(step_attrs), step_out)
        if size is not None:
            largest = size if largest is None else dim_max(largest, size)
    return total if largest is None else total + largest


def _shaped(sinfo) -> bool:
    return isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None


__all__ = ["call_workspace", "conv_workspace", "fused_elementwise_workspace", "workspace_bytes"]

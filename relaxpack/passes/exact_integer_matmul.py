"""ExactIntegerMatmul: an integer matmul whose sums stay within float32's exact integers, in float32.

numpy multiplies integer matrices without BLAS, and the runtime's exact path for them
(``kernels/integer_exact.py``) checks a bound per call and converts both operands and the result.
The importer emits a QLinearMatMul / MatMulInteger of run-time operands in float32 when its
reduced dim ``K`` is static (``converters/quantize.py: _exact_float_product``); BERT's
``softmax @ v`` reduces over the sequence, bounded only by an assumption the importer records
(``sequence <= 64``, :func:`.analysis.dim_bounds.function_dims`). Here, for::

    c = matmul(a, b)            # a, b, c int32 (or int64)

with ``|a| <= A`` and ``|b| <= B`` (:func:`.analysis.float_values.value_range`; a constant ``b``
by its largest column sum) and ``K``'s upper bound, when ``A * B * K <= 2**24`` every partial sum
in any order is an integer of magnitude at most ``2**24``, exact in float32, and the integer loops
cannot wrap; so ``c`` becomes::

    c = astype(matmul(astype(a, float32), astype(b, float32)), int32)

(an ``nn.gemm`` of the float32 constant for a 2-D constant ``b``: FoldBatchNorm folds a scale
after a ``matmul`` into a constant weight, which would make the sums inexact; nothing folds into
an ``nn.gemm``). The rules after it drop the casts where they round-trip: the requantization's
``astype(c, float32)`` (DropZeroSignRoundTrips' exact product), a quantizer's ``astype(q, int32)``.
Runs first at -O2, before those rules.
"""

from __future__ import annotations

import numpy as np

from ..ir.block_builder import BlockBuilder
from ..ir.expr import Constant, DataflowBlock, DataflowVar, SeqExpr, Var, VarBinding
from ..ir.op import make_call
from .analysis.float_values import FLOAT_EXACT, Definitions, value_range
from .core.infra import function_pass

_INTEGER = ("int32", "int64")
_LIMIT = FLOAT_EXACT["float32"]


def _dtype(expr):
    return getattr(expr.struct_info, "dtype", None)


def _magnitude(expr, defs: Definitions) -> float | None:
    bounds = value_range(expr, defs)
    return None if bounds is None else max(abs(bounds[0]), abs(bounds[1]))


def _column_sums(b: Constant) -> float | None:
    """``max_j sum_k |b[k, j]|`` of a 2-D integer constant, else None."""
    data = b.data
    if data.ndim != 2 or data.dtype.kind not in "iu":
        return None
    return float(np.abs(data.astype(np.float64)).sum(axis=0).max(initial=0.0))


def exact_bound(call, defs: Definitions) -> tuple[float, bool] | None:
    """``(bound, gemm)``: a bound of every partial sum of the integer ``matmul`` ``call`` and
    whether its right operand is a 2-D constant (an ``nn.gemm``), or None when unbounded."""
    a, b = call.args
    shape = getattr(a.struct_info, "shape", None)
    if not shape or getattr(b.struct_info, "ndim", 0) < 1:
        return None
    k = defs.dim_upper_bound(shape[-1])
    x = _magnitude(a, defs)
    if k is None or x is None:
        return None
    gemm = isinstance(b, Constant)
    if gemm and (len(shape) < 2 or _column_sums(b) is None):     # no nn.gemm for it: left alone
        return None
    y = _column_sums(b) if gemm else (k * m if (m := _magnitude(b, defs)) is not None else None)
    return None if y is None else (x * y, gemm)


def _float_product(binding: VarBinding, defs: Definitions, dataflow: bool) -> list[VarBinding] | None:
    """The bindings computing ``binding``'s integer matmul in float32 (module docstring), or None."""
    call = defs.calls.get(binding.var)
    dtype = _dtype(binding.var)
    if call is None or call.op.name != "matmul" or dtype not in _INTEGER or len(call.args) != 2 \
            or call.attrs.get("out_dtype") not in (None, dtype) or any(_dtype(x) != dtype for x in call.args):
        return None
    found = exact_bound(call, defs)
    if found is None or found[0] > _LIMIT:
        return None
    gemm = found[1]
    builder, kind, out = BlockBuilder(), DataflowVar if dataflow else Var, []

    def bind(expr, hint: str) -> Var:
        value = builder.normalize(expr)
        var = kind(f"{binding.var.name_hint}_{hint}", value.struct_info)
        out.append(VarBinding(var, value, span=binding.span))
        return var

    a, b = call.args
    lhs = bind(make_call("astype", a, dtype="float32"), "lhs")
    if gemm:
        product = bind(make_call("nn.gemm", lhs, Constant(b.data.astype(np.float32))), "float")
    else:
        product = bind(make_call("matmul", lhs, bind(make_call("astype", b, dtype="float32"), "rhs")), "float")
    out.append(VarBinding(binding.var, builder.normalize(make_call("astype", product, dtype=dtype)),
                          span=binding.span))
    return out


@function_pass(name="ExactIntegerMatmul", opt_level=2, requires=("import", "optimize"), produces="optimize")
def exact_integer_matmul(func, mod, ctx):
    """Integer matmuls bounded within float32's exact integers as float32 products (module docstring)."""
    if not isinstance(func.body, SeqExpr):
        return func
    defs = Definitions(func)
    blocks, changed = [], False
    for block in func.body.blocks:
        bindings = []
        for b in block.bindings:
            new = _float_product(b, defs, isinstance(block, DataflowBlock)) if isinstance(b, VarBinding) else None
            changed |= new is not None
            bindings.extend([b] if new is None else new)
        blocks.append(type(block)(tuple(bindings)))
    if not changed:
        return func
    return func.replace(body=func.body.replace(blocks=tuple(blocks)))


__all__ = ["exact_bound", "exact_integer_matmul"]

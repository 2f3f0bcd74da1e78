"""MergeProjections: sibling products of one input by constant weights in one batched matmul.

Attention projects its input three times, ``q = x @ Wq (+ bq)``, ``k = x @ Wk (+ bk)``,
``v = x @ Wv (+ bv)``: three kernel calls on a few rows each, where one numpy call does the
three BLAS products (measured on (5, 32) x (32, 32): 1.5 us for one batched call against
3.2 us for three, before the kernels' own overheads)::

    q = R.matmul(x, Wq)                    # x: (b, s, K), W*: (K, N) constants
    k = R.matmul(x, Wk)
    ->
    qk = R.matmul(x, stack(Wq, Wk))         # (2, 1, K, N): batch dims (b,) and (2, 1) -> (2, b, s, N)
    q = R.take(qk, R.const(0), axis=0)
    k = R.take(qk, R.const(1), axis=0)

A ``take`` of one constant index along axis 0 of an intermediate is a view (codegen's
``vm.builtin.index_view``; ``ops.definitions.memory.index_view_of``), contiguous, so the
head split and FoldPermuteMatmul's strided products read it as they read the product before.
When every member's product is used only by an ``add`` of a constant ``(N,)`` bias of its
dtype, the biases stack too (``(n, 1, .., 1, N)``) and FuseBiasActivation makes the merged
product and bias one ``nn.gemm``.

Members: bindings ``matmul(x, W)`` of one block with the same ``x`` (a tensor of known rank
>= 2), ``W`` a 2-D float constant of ``x``'s dtype, the same weight shape and attributes.
Each product is the same BLAS call on the same matrices as before: results do not change.
Runs at -O2 after the first SimplifyAlgebra (attention scales fold into each weight first)
and before FuseBiasActivation.
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import Call, Constant, Function, Op, Var, VarBinding
from ..ir.struct_info import TensorStructInfo
from ..ir.visitor import ExprMutator
from ..ops.registry import make_call
from .core.infra import function_pass
from .core.patterns import live_use_counts

_FLOATS = ("float16", "float32", "float64")


class _Member:
    """One projection: its matmul binding, and its bias add's binding (or None)."""

    def __init__(self, product: VarBinding):
        self.product, self.add, self.bias = product, None, None

    @property
    def result(self) -> Var:
        return (self.add or self.product).var


def _call(value, name: str) -> Call | None:
    return value if isinstance(value, Call) and isinstance(value.op, Op) and value.op.name == name else None


def _projection_key(binding) -> tuple | None:
    """``(x, weight shape, dtype, attrs)`` of a ``matmul(x, W)`` by a 2-D float constant, else None."""
    call = _call(binding.value, "matmul") if isinstance(binding, VarBinding) else None
    if call is None:
        return None
    x, w = call.args
    sinfo = x.struct_info
    if not (isinstance(x, Var) and isinstance(w, Constant) and isinstance(sinfo, TensorStructInfo)):
        return None
    if sinfo.shape is None or len(sinfo.shape) < 2 or sinfo.dtype not in _FLOATS:
        return None
    if w.data.ndim != 2 or str(w.data.dtype) != sinfo.dtype or 0 in w.data.shape:
        return None
    return x, w.data.shape, sinfo.dtype, tuple(sorted(call.attrs.items()))


def _bias_of(add: VarBinding, product: Var, n: int, dtype: str) -> np.ndarray | None:
    """The ``(N,)`` constant bias of ``add(product, b)`` (either order), else None."""
    call = _call(add.value, "add")
    if call is None or product not in call.args:
        return None
    other = call.args[1] if call.args[0] is product else call.args[0]
    if not isinstance(other, Constant) or other.data.shape != (n,) or str(other.data.dtype) != dtype:
        return None
    if add.var.struct_info != product.struct_info:
        return None
    return other.data


def _groups(block, uses: dict) -> list[list[_Member]]:
    """The block's groups of two or more merge-able projections, each in binding order."""
    by_key: dict[tuple, list[_Member]] = {}
    readers: dict[Var, list[VarBinding]] = {}
    for b in block.bindings:
        key = _projection_key(b)
        if key is not None:
            by_key.setdefault(key, []).append(_Member(b))
        if isinstance(b, VarBinding) and isinstance(b.value, Call):
            for arg in b.value.args:
                if isinstance(arg, Var):
                    readers.setdefault(arg, []).append(b)
    groups = []
    for (_, shape, dtype, _), members in by_key.items():
        if len(members) < 2:
            continue
        for m in members:
            reader = readers.get(m.product.var, ())
            if uses.get(m.product.var) == 1 and len(reader) == 1:
                m.bias = _bias_of(reader[0], m.product.var, shape[1], dtype)
                m.add = reader[0] if m.bias is not None else None
        if not all(m.bias is not None for m in members):
            for m in members:
                m.add = m.bias = None
        groups.append(members)
    return groups


class _Merger(ExprMutator):
    """Emits each group's batched product at its first member and ``take`` views for the members."""

    def __init__(self, groups: list[list[_Member]]):
        super().__init__()
        self.first, self.role = {}, {}          # binding -> its group; binding -> (group, index, kind)
        for group in groups:
            self.first[group[0].product] = group
            for i, m in enumerate(group):
                self.role[m.product] = (group, i, "product")
                if m.add is not None:
                    self.role[m.add] = (group, i, "add")
        self.merged: dict[int, Var] = {}

    def visit_var_binding_(self, binding: VarBinding) -> None:
        role = self.role.get(binding)
        if role is None:
            super().visit_var_binding_(binding)
            return
        group, index, kind = role
        if binding in self.first:
            self.merged[id(group)] = self._emit_merged(group, binding)
        if kind == "product" and group[index].add is not None:
            return          # the member's add is its result: the product itself is not needed
        index_const = Constant(np.array(index, dtype=np.int64))
        value = self.builder.normalize(make_call("take", self.merged[id(group)], index_const, axis=0))
        self.builder.emit_binding(VarBinding(binding.var, value, span=binding.span))

    def _emit_merged(self, group: list[_Member], binding: VarBinding) -> Var:
        call = binding.value
        x = self.visit_expr(call.args[0])
        rank = len(x.struct_info.shape)
        weights = np.stack([m.product.value.args[1].data for m in group])
        weights = weights.reshape((len(group),) + (1,) * (rank - 2) + weights.shape[1:])
        merged = make_call("matmul", x, Constant(weights), **call.attrs)     # batch dims broadcast
        if group[0].bias is not None:
            product = self.builder.emit(merged, "projections", span=binding.span)
            biases = np.stack([m.bias for m in group])
            biases = biases.reshape((len(group),) + (1,) * (rank - 1) + biases.shape[1:])
            merged = make_call("add", product, Constant(biases))
        return self.builder.emit(merged, "projections", span=binding.span)


@function_pass(name="MergeProjections", opt_level=2, requires=("import", "optimize"), produces="optimize")
def merge_projections(func: Function, mod, ctx) -> Function:
    """Sibling products of one input by constant weights in one batched matmul (module docstring)."""
    uses = live_use_counts(func)
    groups = [g for block in func.body.blocks for g in _groups(block, uses)]
    if not groups:
        return func
    return _Merger(groups).visit_expr(func)


__all__ = ["merge_projections"]

"""MergeQuantizedProducts: a dynamic quantizer's sibling integer products in one batched product.

A dynamically quantized attention quantizes its input once and multiplies it by the q, k and v
weights, each product scaled by its own ``y_scale * w_scale`` (an item of ``dynamic_quantize``,
FuseDynamicQuantize): three kernel calls of a GEMM on a few rows and a multiply each. As
MergeProjections does for float products, one batched product and one scaling serve the three::

    y = dq[2]                                  # dq = R.dynamic_quantize(x, scales=(cq, ck, cv))
    q = R.multiply(R.nn.gemm(y, Wq), dq[3])
    k = R.multiply(R.nn.gemm(y, Wk), dq[4])
    ->
    s = R.multiply(dq[0], R.const([[[cq]], [[ck]]]))       # (2, 1, 1): y_scale * c, each a float32 product
    qk = R.multiply(R.matmul(y, stack(Wq, Wk)), s)           # (2, b, s, N)
    q = R.take(qk, R.const(0), axis=0)
    k = R.take(qk, R.const(1), axis=0)

Members: ``nn.gemm(y, W)`` without bias or activation of one block, ``y`` item 2 of one
``dynamic_quantize`` (its quantized values less the zero point: integers in [-255, 255]), ``W`` a
2-D float32 constant of integers of one shape, each product read only by ``multiply(product,
dq[3 + i])``. Every product is exact: each column's ``255 * sum |W|`` is at most ``2^24``, so all
partial sums are float32 integers whatever the order BLAS sums them in, and the batched product
holds the same values; ``dq[0] * c`` is the float32 product the kernel's item holds (its tests
check that, bit for bit), and the scaling multiplies the same pairs. The results are the same bits.
Runs after FuseDynamicQuantize (which makes the items) and DeadCodeElimination, before FuseOps
(which fuses the scaling into the product's kernel).
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import Call, Constant, Function, Op, TupleGetItem, Var, VarBinding
from ..ir.struct_info import TensorStructInfo
from ..ir.visitor import ExprMutator
from ..ops.registry import make_call
from .core.infra import function_pass
from .core.patterns import live_use_counts, vars_of

#: the largest sum of products every partial sum of which float32 holds exactly
EXACT_LIMIT = 2 ** 24
#: the largest magnitude of a dynamic quantizer's value less its zero point
QUANTIZED_MAX = 255


def _call(value, name: str) -> Call | None:
    return value if isinstance(value, Call) and isinstance(value.op, Op) and value.op.name == name else None


def _exact_weight(w) -> bool:
    """A 2-D float32 constant of integers whose products with values in [-255, 255] sum exactly."""
    if not (isinstance(w, Constant) and w.data.ndim == 2 and w.data.dtype == np.float32 and w.data.size):
        return False
    data = w.data.astype(np.float64)
    return bool(np.all(np.isfinite(data)) and np.all(data == np.round(data))
                and QUANTIZED_MAX * np.abs(data).sum(axis=0).max() <= EXACT_LIMIT)


class _Member:
    """One product ``g = nn.gemm(y, W)`` and its scaling ``multiply(g, dq[3 + i])``."""

    def __init__(self, product: VarBinding, scaling: VarBinding, scale: float):
        self.product, self.scaling, self.scale = product, scaling, scale


def _quantized_source(y, values: dict) -> tuple[Var, Call] | None:
    """``(dq, its call)`` when ``y`` is item 2 of a ``dynamic_quantize`` bound in the function."""
    item = values.get(y)
    if not (isinstance(item, TupleGetItem) and item.index == 2 and isinstance(item.tuple_value, Var)):
        return None
    call = _call(values.get(item.tuple_value), "dynamic_quantize")
    return None if call is None else (item.tuple_value, call)


def _scale_of(s, dq: Var, call: Call, values: dict) -> float | None:
    """``c`` when ``s`` is the item ``dq[3 + i]``, ``dq[0] * c`` (``c`` = ``scales[i]``)."""
    item = values.get(s)
    if not (isinstance(item, TupleGetItem) and item.tuple_value is dq and item.index >= 3):
        return None
    scales = tuple(call.attrs.get("scales", ()))
    if item.index - 3 >= len(scales):
        return None
    c = float(scales[item.index - 3])
    return c if float(np.float32(c)) == c else None          # (the item's factor is a float32 value)


def _groups(block, values: dict, uses: dict) -> list[list[_Member]]:
    """The block's groups of two or more merge-able scaled products, each in binding order."""
    readers: dict[Var, list[VarBinding]] = {}
    for b in block.bindings:
        if isinstance(b, VarBinding) and isinstance(b.value, Call):
            for arg in b.value.args:
                if isinstance(arg, Var):
                    readers.setdefault(arg, []).append(b)
    by_key: dict[tuple, list[_Member]] = {}
    for b in block.bindings:
        gemm = _call(b.value, "nn.gemm") if isinstance(b, VarBinding) else None
        if gemm is None or len(gemm.args) != 2 or gemm.attrs.get("activation") is not None:
            continue
        y, w = gemm.args
        source = _quantized_source(y, values) if isinstance(y, Var) else None
        sinfo = y.struct_info
        if source is None or not _exact_weight(w) or not (isinstance(sinfo, TensorStructInfo)
                                                          and sinfo.shape is not None and sinfo.ndim >= 2):
            continue
        reader = readers.get(b.var, ())
        if uses.get(b.var) != 1 or len(reader) != 1:
            continue
        scaling = _call(reader[0].value, "multiply")
        if scaling is None or scaling.args[0] is not b.var or not isinstance(scaling.args[1], Var):
            continue
        scale = _scale_of(scaling.args[1], *source, values)
        if scale is not None:
            by_key.setdefault((y, w.data.shape), []).append(_Member(b, reader[0], scale))
    return [members for members in by_key.values() if len(members) >= 2]


def _spent_scales(func: Function, groups: list[list[_Member]], values: dict, uses: dict) -> dict:
    """``{dq: its scale items' bindings}`` for each quantizer whose scale items (``dq[3:]``) only the
    merged scalings read (and dead bindings): they go, and the quantizer's ``scales`` with them (it
    fills one product a scale on every call). Only where the quantizer is read through its items alone,
    all bound in its block."""
    readers: dict[Var, int] = {}
    for group in groups:
        for m in group:
            readers[m.scaling.value.args[1]] = readers.get(m.scaling.value.args[1], 0) + 1
    quantizers = {values[group[0].product.value.args[0]].tuple_value for group in groups}
    spent = {}
    for block in func.body.blocks:
        bound = {b.var for b in block.bindings}
        for dq in quantizers:
            if dq not in bound:
                continue
            items = [b for b in block.bindings if isinstance(b, VarBinding) and isinstance(b.value, TupleGetItem)
                     and b.value.tuple_value is dq]
            read = sum(1 for other in func.body.blocks for b in other.bindings for v in vars_of(b.value) if v is dq)
            scales = [b for b in items if b.value.index >= 3]
            if read == len(items) and dq not in vars_of(func.body.body) \
                    and all(uses.get(b.var, 0) == readers.get(b.var, 0) for b in scales):
                spent[dq] = {b.var for b in scales}
    return spent


class _Merger(ExprMutator):
    """Emits each group's batched product and scaling at its first member's product, and ``take``
    views for the members' scalings (their products go: nothing else reads them); a quantizer whose
    scale items are spent (:func:`_spent_scales`) is made again without them."""

    def __init__(self, groups: list[list[_Member]], values: dict, spent: dict):
        super().__init__()
        self.values, self.spent = values, spent
        self.dropped = {v for items in spent.values() for v in items}
        self.first = {group[0].product: group for group in groups}
        self.role = {}
        for group in groups:
            for i, m in enumerate(group):
                self.role[m.product] = (group, i, "product")
                self.role[m.scaling] = (group, i, "scaling")
        self.merged: dict[int, Var] = {}

    def visit_var_binding_(self, binding: VarBinding) -> None:
        if binding.var in self.dropped:
            return
        if binding.var in self.spent:
            call = binding.value
            again = make_call(call.op.name, *(self.visit_expr(a) for a in call.args), **{**call.attrs, "scales": ()})
            self.var_remap[binding.var] = self.builder.emit(again, "dq", span=binding.span)
            return
        role = self.role.get(binding)
        if role is None:
            super().visit_var_binding_(binding)
            return
        group, index, kind = role
        if binding in self.first:
            self.merged[id(group)] = self._emit_merged(group, binding)
        if kind == "product":
            return
        value = self.builder.normalize(make_call("take", self.merged[id(group)],
                                                 Constant(np.array(index, dtype=np.int64)), axis=0))
        self.builder.emit_binding(VarBinding(binding.var, value, span=binding.span))

    def _emit_merged(self, group: list[_Member], binding: VarBinding) -> Var:
        y = self.visit_expr(binding.value.args[0])
        rank = y.struct_info.ndim
        weights = np.stack([m.product.value.args[1].data for m in group])
        weights = weights.reshape((len(group),) + (1,) * (rank - 2) + weights.shape[1:])
        product = self.builder.emit(make_call("matmul", y, Constant(weights)), "products", span=binding.span)
        dq = self.values[y].tuple_value
        factors = np.array([m.scale for m in group], np.float32).reshape((len(group),) + (1,) * rank)
        y_scale = self.builder.emit(TupleGetItem(self.visit_expr(dq), 0), "y_scale", span=binding.span)
        scale = self.builder.emit(make_call("multiply", y_scale, Constant(factors)), "scales", span=binding.span)
        return self.builder.emit(make_call("multiply", product, scale), "products", span=binding.span)


@function_pass(name="MergeQuantizedProducts", opt_level=2, requires=("import", "optimize"), produces="optimize")
def merge_quantized_products(func: Function, mod, ctx) -> Function:
    """A dynamic quantizer's sibling integer products in one batched product (module docstring)."""
    values = {b.var: b.value for block in func.body.blocks for b in block.bindings if isinstance(b, VarBinding)}
    uses = live_use_counts(func)
    groups = [g for block in func.body.blocks for g in _groups(block, values, uses)]
    if not groups:
        return func
    return _Merger(groups, values, _spent_scales(func, groups, values, uses)).visit_expr(func)


__all__ = ["merge_quantized_products"]

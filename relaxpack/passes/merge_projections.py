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

GPT-2 projects q, k and v as one product split in three (``split_into_products``, run first):
``split([reshape]([astype](matmul(x, W) [+ b])), n)`` into ``n`` equal parts along the last axis
(``W`` a 2-D float constant, each step used once, the reshape keeping the last dim; the cast is the
importer's float16 product computed in float32; a float16 product writing float32, ``out_dtype``, as
WidenFloat16Regions leaves one read by float32 ops, with its float32 bias, too) becomes the ``n`` products of ``W``'s column blocks,
which then merge as above: the split's copies and the head reshapes' copies of its strided parts
go. A narrower product may be blocked differently by BLAS: those results are the split product's
within float32 rounding (1e-6 relative in the tests), not bit for bit.

When every member's result is read only by an ``astype`` to one dtype (GPT-2 float16's q, k and v,
each rounded from its float32 part), the merged result is cast once and the casts become the
``take`` views (one cast call, fused into the product's kernel, instead of one a member).

Members: bindings ``matmul(x, W)`` of one block with the same ``x`` (a tensor of known rank
>= 2), ``W`` a 2-D float constant of ``x``'s dtype, the same weight shape and attributes.
Each product is the same BLAS call on the same matrices as before: results do not change.
Runs at -O2 after the first SimplifyAlgebra (attention scales fold into each weight first)
and before FuseBiasActivation.
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import Call, Constant, Function, Op, ShapeExpr, Tuple, Var, VarBinding
from ..ir.struct_info import TensorStructInfo
from ..ir.visitor import ExprMutator
from ..ops.registry import make_call
from .core.infra import function_pass
from .core.patterns import live_use_counts
from .core.rules import Match, Rule, RewriteTable, is_op, wildcard

_FLOATS = ("float16", "float32", "float64")


class _Member:
    """One projection: its matmul binding, and its bias add's binding (or None)."""

    def __init__(self, product: VarBinding):
        self.product, self.add, self.bias, self.cast = product, None, None, None

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
        # a dead product (an attention scale folded into a copy of its weight left the original
        # behind until DeadCodeElimination) joins no group: it would be computed for nothing
        members = [m for m in members if uses.get(m.product.var, 0)]
        if len(members) < 2:
            continue
        for m in members:
            reader = readers.get(m.product.var, ())
            if uses.get(m.product.var) == 1 and len(reader) == 1:
                m.bias = _bias_of(reader[0], m.product.var, shape[1], m.product.var.struct_info.dtype)
                m.add = reader[0] if m.bias is not None else None
        if not all(m.bias is not None for m in members):
            for m in members:
                m.add = m.bias = None
        _cast_together(members, uses, readers)
        groups.append(members)
    return groups


def _cast_together(members: list[_Member], uses: dict, readers: dict) -> None:
    """Sets each member's ``cast`` when every member's result is read only by an ``astype`` to one
    dtype (GPT-2 float16's q, k and v, each rounded from the float32 product): the merged product
    is then cast once and the casts become ``take`` views of it (one call instead of one a member)."""
    casts = []
    for m in members:
        reader = readers.get(m.result, ())
        cast = _call(reader[0].value, "astype") if uses.get(m.result) == 1 and len(reader) == 1 else None
        casts.append(reader[0] if cast is not None else None)
    dtypes = {c.value.attrs["dtype"] if c is not None else None for c in casts}
    if None in dtypes or len(dtypes) != 1:
        return
    for m, cast in zip(members, casts):
        m.cast = cast


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
                if m.cast is not None:
                    self.role[m.cast] = (group, i, "cast")
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
        if kind != "cast" and group[index].cast is not None:
            return          # its cast is: a view of the merged cast
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
        if group[0].cast is not None:
            product = self.builder.emit(merged, "projections", span=binding.span)
            merged = make_call("astype", product, dtype=group[0].cast.value.attrs["dtype"])
        return self.builder.emit(merged, "projections", span=binding.span)


# ---------------------------------------------------------------- one product split in parts


def _split_product(m: Match):
    """``(x, W, b or None, reshape or None, cast dtype or None, n, the product's out_dtype)`` when the
    split's operand is ``[reshape]([astype](matmul(x, W) [+ b]))`` (each used once; the product
    float16 writing float32 or of its operands' dtype), split in ``n`` equal parts along the last
    axis, ``W`` a 2-D float constant, ``b`` a constant of its ``N`` values, the reshape keeping the
    last dim; else the reason there is none."""
    split = m["split"]
    sections, sinfo = split.attrs["indices_or_sections"], m.sinfo("y")
    if not isinstance(sinfo, TensorStructInfo) or sinfo.shape is None or not isinstance(sinfo.shape[-1], int) \
            or split.attrs["axis"] not in (-1, len(sinfo.shape) - 1):
        return "the split is not along the static last axis of a tensor of known rank"
    n = _equal_parts(sections, sinfo.shape[-1])
    if n is None:
        return f"the split {sections!r} is not into two or more equal parts"
    value, uses = m.producer(m["y"])
    reshape = None
    if _call(value, "reshape") is not None and uses == 1:
        reshape, (value, uses) = value, m.producer(value.args[0])
        inner = reshape.args[0].struct_info
        if not (isinstance(inner, TensorStructInfo) and inner.shape and inner.shape[-1] == sinfo.shape[-1]):
            return "the reshape changes the last dim"
    cast = None
    if _call(value, "astype") is not None and uses == 1:       # a float16 product computed in float32
        cast, (value, uses) = value.attrs["dtype"], m.producer(value.args[0])
    bias = None
    if _call(value, "add") is not None and uses == 1:
        for a, c in (value.args, value.args[::-1]):
            if isinstance(c, Constant) and isinstance(a, Var):
                bias, (value, uses) = c.data, m.producer(a)
                break
    product = _call(value, "matmul")
    if product is None or uses != 1 or product.attrs.get("out_dtype") not in (None, "float32"):
        return "the split part is not a product used only here"
    x, w = product.args
    xs = x.struct_info
    if not (isinstance(w, Constant) and w.data.ndim == 2 and isinstance(xs, TensorStructInfo)
            and xs.dtype == str(w.data.dtype) and xs.dtype in _FLOATS and xs.shape is not None and len(xs.shape) >= 2):
        return "the product is not by a 2-D float constant weight of the input's dtype"
    total = w.data.shape[1]
    if total % n or sinfo.shape[-1] != total:
        return f"{total} columns do not split in {n} parts"
    out_dtype = product.attrs.get("out_dtype")    # a float16 product writing float32 (WidenFloat16Regions)
    if bias is not None and (bias.size != total or bias.shape[-1] != total
                             or str(bias.dtype) != (out_dtype or xs.dtype)):
        return "the bias is not one value per column"
    return x, w.data, bias, reshape, cast, n, out_dtype


def _equal_parts(sections, total: int) -> int | None:
    """How many equal parts a split of ``total`` values makes: ``sections`` a count, or the
    ascending split points ``(w, 2w, ..)``; None for unequal or empty parts (or fewer than two)."""
    if total <= 0:
        return None
    if isinstance(sections, int) and not isinstance(sections, bool):
        n = sections
    elif isinstance(sections, (tuple, list)) and all(isinstance(p, int) for p in sections):
        n = len(sections) + 1
        if total % n or tuple(sections) != tuple(range(total // n, total, total // n)):
            return None
    else:
        return None
    return n if n >= 2 and total % n == 0 else None


def _splits(m: Match) -> str | None:
    found = _split_product(m)
    return found if isinstance(found, str) else None


def split_into_products(m: Match):
    """split([reshape]([astype](x @ W [+ b])), n, last axis) -> ([reshape]([astype](x @ W_i [+ b_i])), ...):
    the products of the weight's column blocks, which MergeProjections then makes one batched product."""
    x, w, bias, reshape, cast, n, out_dtype = _split_product(m)
    width = w.shape[1] // n
    parts = []
    for i in range(n):
        cols = slice(i * width, (i + 1) * width)
        part = make_call("matmul", x, Constant(np.ascontiguousarray(w[:, cols])), out_dtype=out_dtype)
        if bias is not None:
            part = make_call("add", part, Constant(np.ascontiguousarray(bias.reshape(-1)[cols])))
        if cast is not None:
            part = make_call("astype", part, dtype=cast)
        if reshape is not None:
            shape = reshape.args[1]
            part = make_call("reshape", part, ShapeExpr(tuple(shape.values[:-1]) + (width,)))
        parts.append(part)
    return Tuple(tuple(parts))


SPLITS = RewriteTable("MergeProjections", [
    Rule("split_into_products", is_op("split")(wildcard("y"), name="split"), _splits, split_into_products),
])


@function_pass(name="MergeProjections", opt_level=2, requires=("import", "optimize"), produces="optimize")
def merge_projections(func: Function, mod, ctx) -> Function:
    """Sibling products of one input by constant weights in one batched matmul (module docstring)."""
    func = SPLITS.apply(func)
    uses = live_use_counts(func)
    groups = [g for block in func.body.blocks for g in _groups(block, uses)]
    if not groups:
        return func
    return _Merger(groups).visit_expr(func)


__all__ = ["merge_projections"]

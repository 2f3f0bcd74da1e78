"""WidenFloat16Regions: float16 values between two ops that compute in float32 stay float32, as
onnxruntime's CPU provider keeps them.

The importer computes a float16 Conv, Gemm or reduction in float32 and rounds its result
(``astype(v, float16)``, bound with the same span as ``v``: the same ONNX node made both); every
float16 op in :data:`OPS` is, by its kernel, the float32 op rounded once. onnxruntime's CPU
provider (x86-64) has no float16 kernel for these ops: it casts around each and removes the
float32 -> float16 -> float32 pair between two of them, so ``Conv -> Relu -> MaxPool -> Conv`` or
``MatMul -> Add -> Div -> Erf -> Mul`` in float16 runs in float32 and rounds where the value
leaves the region (a move such as Reshape or Transpose, LayerNormalization, a graph output), and
numpy's float16 loops and casts cost 5-30x their float32 ones. The rules, to a fixed point
(producers first):

- ``compute_in_float32``: a float16 op of :data:`OPS` that reads an importer rounding
  ``astype(v, float16)`` -> ``astype(op(.., v, ..), float16)``, its other float16 operands widened
  (exact; a float16 constant becomes a float32 one). The same value; bound with the op's span, the
  new rounding is again an importer rounding. A product (:data:`PRODUCTS`) whose result leaves the
  region (a reader is no float32 computation, e.g. attention's ``probs @ v`` before its transpose)
  instead reads ``v`` and its other operand as they are and rounds in its kernel
  (``out_dtype=float16``): no cast call for a float16 operand, none for the result, and the
  transpose still folds into the product.
- ``widen_product``: a float16 product whose readers all compute in float32 (directly or through
  an isolated move: attention's ``q @ k^T`` read by its softmax, ``o_proj`` read by the residual
  add) -> ``astype(product(.., out_dtype=float32), float16)``, a rounding its readers do not read
  (onnxruntime has no float16 MatMul: it keeps the product float32 for them). A product read by
  anything else keeps its kernel's rounding: starting regions at every float16 product made ViT's
  tiny blocks 50 kernel calls instead of 40 (the casts are calls of their own).
- ``product_reads_float32``: ``product(astype(v, float16), w, out_dtype=float32)`` -> ``product(v,
  w, ..)`` (a float16 constant ``w`` widened): the round trip onnxruntime drops too.
- ``norm_in_float32``: a float16 layer norm of an importer rounding whose readers all compute in
  float32 -> ``astype(layer_norm(v, gamma32, beta32), float16)``: onnxruntime runs such an
  "isolated" float16 LayerNormalization in float32 (ViT's layernorm_after); one read by a move or
  an op outside :data:`OPS` it runs in float16 (its input and its result rounded).
- ``move_rounding_after``: ``move(astype(v, float16))`` of an importer rounding whose every
  reader will compute in float32 -> ``astype(move(v), float16)`` (the same values). onnxruntime
  runs such an "isolated" float16 Reshape, Transpose or Flatten in float32 (resnet's Flatten
  between its pool and Gemm, GPT-2's views around its MLP's GELU); a move read by anything else (a
  Transpose, a LayerNormalization) it runs in float16, rounding before it.
- ``drop_float16_round_trip``: ``astype(astype(v, float16), float32)`` of an importer rounding ->
  ``v``: the rounding onnxruntime does not do either.

A model's own Cast keeps its rounding (its binding's span is the Cast node, not the producer's):
onnxruntime rounds at an explicit Cast pair too. Where onnxruntime drops a rounding that relaxpack
keeps (an explicit Cast next to a float32 op, a move whose neighbours it judges over a longer
chain) relaxpack is the model's rounding. docs/design-notes.md, "float16 regions in float32";
tests/runtime/test_float16_contract.py checks each op against onnxruntime.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..ir.expr import Call, Constant, Expr, Function, If, Op, SeqExpr, Var
from ..ir.struct_info import TensorStructInfo
from ..ops.registry import make_call
from .core.infra import function_pass
from .core.patterns import vars_of
from .core.rules import Match, Rule, RewriteTable, is_op, wildcard
from .widen_float16 import WIDENED

F16, F32 = "float16", "float32"

#: float16 ops whose kernel computes in float32 and rounds once, and which onnxruntime's CPU provider
#: (x86-64) runs in float32 (or which are exact on widened data: max pool, max, min, relu, where, abs)
OPS = WIDENED | frozenset({"matmul", "permute_matmul", "nn.softmax", "nn.safe_softmax", "sum", "max", "min",
                           "nn.max_pool", "nn.avg_pool", "nn.global_avg_pool", "nn.global_max_pool"})
#: products that may read one float32 and one float16 operand (``out_dtype`` named)
PRODUCTS = frozenset({"matmul", "permute_matmul"})
#: moves onnxruntime runs in float32 between two float32 ops (an "isolated" float16 node: two casts
#: saved); between other ops it rounds before them
MOVES = frozenset({"reshape", "permute_dims", "expand_dims", "squeeze", "flatten"})


def _dtype(expr: Expr) -> str | None:
    sinfo = expr.struct_info
    return sinfo.dtype if isinstance(sinfo, TensorStructInfo) else None


def importer_rounding(m: Match, expr: Expr) -> Expr | None:
    """``v`` when ``expr`` is a var bound to ``astype(v, float16)`` of a float32 ``v`` bound with
    the same span (the op that computed ``v`` rounds its own result), else ``None``."""
    if not isinstance(expr, Var):
        return None
    value, _ = m.producer(expr)
    if not (isinstance(value, Call) and isinstance(value.op, Op) and value.op.name == "astype"
            and _dtype(value) == F16 and _dtype(value.args[0]) == F32):
        return None
    inner = value.args[0]
    mine, theirs = m.span_of(expr), m.span_of(inner)
    if mine is None or theirs is None or not mine.sources or mine.sources != theirs.sources:
        return None
    return inner


def _reads_a_rounding(m: Match) -> str | None:
    call = m["op"]
    if _dtype(call) != F16:
        return f"the result is {_dtype(call)}, not float16"
    if any(importer_rounding(m, a) is not None for a in call.args):
        return None
    return "no operand is the float16 rounding of an op computed in float32"


def _in_float32(m: Match, arg: Expr) -> Expr:
    """``arg`` widened to float32 (the value it rounds, when it is an importer rounding)."""
    if _dtype(arg) != F16:
        return arg
    inner = importer_rounding(m, arg)
    if inner is not None:
        return inner
    if isinstance(arg, Constant):
        return Constant(np.asarray(arg.data).astype(np.float32))
    return make_call("astype", arg, dtype=F32)


def _compute_in_float32(readers: Readers):
    def rewrite(m: Match):
        """op(.., astype(v, float16), ..) -> astype(op(.., v, ..), float16); a product by a float16
        operand whose result leaves the region -> product(v, x16, out_dtype=float16)."""
        call = m["op"]
        if _mixed_product(m, readers):
            args = [importer_rounding(m, a) or (_in_float32(m, a) if isinstance(a, Constant) else a)
                    for a in call.args]
            return make_call(call.op.name, *args, **{**call.attrs, "out_dtype": F16})
        wide = make_call(call.op.name, *(_in_float32(m, a) for a in call.args), **call.attrs)
        return make_call("astype", wide, dtype=F16)
    return rewrite


def _mixed_product(m: Match, readers: Readers) -> bool:
    """A product of a rounding by a float16 value (not a constant, not a rounding) whose result
    some reader reads as float16: it reads the two as they are and rounds its own result (no cast
    call for the float16 operand, none for the result: attention's ``probs @ v`` before its
    transpose, which then folds into the product)."""
    call = m["op"]
    if call.op.name not in PRODUCTS:
        return False
    plain = [a for a in call.args if importer_rounding(m, a) is None]
    if len(plain) != 1 or _dtype(plain[0]) != F16:
        return False
    return not readers.float32(m.binding.var)


def _norm_reads_a_rounding(readers: Readers):
    def check(m: Match) -> str | None:
        call = m["norm"]
        if _dtype(call) != F16:
            return "not a float16 layer norm"
        if importer_rounding(m, call.args[0]) is None:
            return "its data is no float16 rounding of an op computed in float32"
        if not readers.directly_float32(m.binding.var):     # a move after it is no float32 op either
            return "a reader of the layer norm is no float32 computation (onnxruntime runs it in float16)"
        return None
    return check


def norm_in_float32(m: Match):
    """layer_norm(astype(v, float16), g, b) -> astype(layer_norm(v, g32, b32), float16)."""
    call = m["norm"]
    wide = make_call(call.op.name, *(_in_float32(m, a) for a in call.args), **call.attrs)
    return make_call("astype", wide, dtype=F16)


def _product_to_float32(m: Match) -> str | None:
    call = m["product"]
    if call.attrs["out_dtype"] != F32:
        return "it does not write float32"
    if not any(importer_rounding(m, a) is not None for a in call.args):
        return "no operand is the float16 rounding of an op computed in float32"
    return None


def product_reads_float32(m: Match):
    """product(astype(v, float16), w, out_dtype=float32) -> product(v, w32, out_dtype=float32): the
    round trip onnxruntime drops too (``drop_float16_round_trip``)."""
    call = m["product"]
    args = [importer_rounding(m, a) or (_in_float32(m, a) if isinstance(a, Constant) else a) for a in call.args]
    mixed = any(_dtype(a) != F32 for a in args)      # else a plain float32 product
    return make_call(call.op.name, *args, **{**call.attrs, "out_dtype": F32 if mixed else None})


def _product_read_in_float32(readers: Readers):
    def check(m: Match) -> str | None:
        call = m["product"]
        if _dtype(call) != F16 or call.attrs["out_dtype"] is not None:
            return "not a float16 product"
        if not readers.float32(m.binding.var):
            return "a reader of the product is no float32 computation"
        return None
    return check


def widen_product(m: Match):
    """product(a, b) -> astype(product(a, b, out_dtype=float32), float16): a rounding its readers
    will not read (its float32 value goes on, as onnxruntime's)."""
    call = m["product"]
    return make_call("astype", make_call(call.op.name, *call.args, **{**call.attrs, "out_dtype": F32}), dtype=F16)


def _round_trip(m: Match) -> str | None:
    if _dtype(m["widen"]) != F32:
        return f"the cast is to {_dtype(m['widen'])}, not float32"
    if importer_rounding(m, m["r"]) is None:
        return "its operand is not the float16 rounding of an op computed in float32"
    return None


def drop_float16_round_trip(m: Match):
    """astype(astype(v, float16), float32) -> v."""
    return importer_rounding(m, m["r"])


@dataclass
class Readers:
    """What reads each var: the values of the bindings that use it (``None`` for the function's
    result and anything not a binding's value, e.g. an If's condition), and each binding value's var."""

    of: dict[Var, list[Expr | None]] = field(default_factory=dict)
    var_of: dict[int, Var] = field(default_factory=dict)

    def directly_float32(self, var: Var) -> bool:
        """Every reader of ``var`` computes in float32 (:func:`_widened_reader`)."""
        return all(_widened_reader(r) for r in self.of.get(var, [None]))

    def float32(self, var: Var) -> bool:
        """Every reader of ``var`` computes in float32, directly or through a move whose readers all
        do (a move ``move_rounding_after`` will move the rounding past)."""
        return all(_widened_reader(r) or (_is_move(r) and id(r) in self.var_of
                                          and self.directly_float32(self.var_of[id(r)]))
                   for r in self.of.get(var, [None]))


def _is_move(value: Expr | None) -> bool:
    return isinstance(value, Call) and isinstance(value.op, Op) and value.op.name in MOVES


def _readers(func: Function) -> Readers:
    """The function's :class:`Readers`."""
    readers = Readers()

    def seq(body: SeqExpr) -> None:
        for v in vars_of(body.body):
            readers.of.setdefault(v, []).append(None)
        for block in body.blocks:
            for b in block.bindings:
                if isinstance(b.value, If):
                    for v in vars_of(b.value.cond):
                        readers.of.setdefault(v, []).append(None)
                    seq(b.value.true_branch)
                    seq(b.value.false_branch)
                    continue
                readers.var_of[id(b.value)] = b.var
                for v in vars_of(b.value):
                    readers.of.setdefault(v, []).append(b.value)
    seq(func.body)
    return readers


def _widened_reader(value: Expr | None) -> bool:
    """Whether ``value``, reading a rounding, will read the float32 value instead: a float16 op of
    :data:`OPS` (compute_in_float32) or a widening cast (drop_float16_round_trip)."""
    if not (isinstance(value, Call) and isinstance(value.op, Op)):
        return False
    if value.op.name == "astype":
        return _dtype(value) == F32
    if value.op.name in PRODUCTS and value.attrs["out_dtype"] == F32:
        return True
    return value.op.name in OPS and _dtype(value) == F16


def _isolated_move(readers: Readers):
    def check(m: Match) -> str | None:
        if importer_rounding(m, m["move"].args[0]) is None:
            return "it moves no float16 rounding of an op computed in float32"
        if not readers.directly_float32(m.binding.var):
            return "a reader of the moved value is no float32 computation (onnxruntime rounds before the move)"
        return None
    return check


def move_rounding_after(m: Match):
    """move(astype(v, float16)) -> astype(move(v), float16): the same values (a move commutes with
    rounding)."""
    call = m["move"]
    inner = importer_rounding(m, call.args[0])
    return make_call("astype", make_call(call.op.name, inner, *call.args[1:], **call.attrs), dtype=F16)


def _table(readers: Readers) -> RewriteTable:
    return RewriteTable("WidenFloat16Regions", [
        Rule("move_rounding_after", is_op(*sorted(MOVES))(..., name="move"), _isolated_move(readers),
             move_rounding_after),
        Rule("widen_product", is_op(*sorted(PRODUCTS))(..., name="product"), _product_read_in_float32(readers),
             widen_product),
        Rule("product_reads_float32", is_op(*sorted(PRODUCTS))(..., name="product"), _product_to_float32,
             product_reads_float32),
        Rule("norm_in_float32", is_op("nn.layer_norm")(..., name="norm"), _norm_reads_a_rounding(readers),
             norm_in_float32),
        Rule("compute_in_float32", is_op(*sorted(OPS))(..., name="op"), _reads_a_rounding,
             _compute_in_float32(readers)),
        Rule("drop_float16_round_trip", is_op("astype")(wildcard("r"), name="widen"), _round_trip,
             drop_float16_round_trip),
    ])


#: the rules as data (``relaxpack explain``): the move rule's readers are the function's
RULES = _table(Readers())


@function_pass(name="WidenFloat16Regions", opt_level=2, requires=("import", "optimize"), produces="optimize")
def widen_float16_regions(func, mod, ctx):
    """Keep float16 values float32 between ops computed in float32 (see the module docstring)."""
    return _table(_readers(func)).apply(func)


__all__ = ["widen_float16_regions", "RULES", "OPS", "MOVES", "importer_rounding"]

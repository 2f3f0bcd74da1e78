"""RoundFloat16InFloat32: a float16 rounding that every reader widens again is kept in float32.

A float16 model computed in float32 regions (WidenFloat16Regions) still rounds where the model
does: ``r = astype(v, float16)`` of a float32 ``v``, read by ops that widen ``r`` again (a cast to
float32 before a conv, a product writing float32, a float16 layer norm, whose kernel is the
float32 one on widened values, rounded). numpy converts float16 one value at a time (~2.5 ns a
value narrowing, ~1.4 widening), so at ConvNeXt float16's sizes the roundings and their widenings
cost more than the float32 arithmetic around them. ``astype(astype(v, float16), float32)`` is a
function of ``v``, ``round_to_float16(v)``, which the kernel computes in float32 by whole-array
ufuncs (``runtime/kernels/half_cast.py``, numpy's values bit for bit). Where every reader of ``r``
widens it:

- ``widen_rounding``: ``astype(r, float32) -> round_to_float16(v)``;
- ``product_reads_rounding``: ``product(.., r, .., out_dtype=float32) -> product(..,
  round_to_float16(v), .., out_dtype=float32)`` (the kernel widens ``r`` to the same float32
  values and makes the same product);
- ``norm_reads_rounding``: a float16 ``layer_norm(r, gamma, beta)`` whose own readers all widen
  -> ``astype(layer_norm(round_to_float16(v), gamma32, beta32), float16)`` (the float16 kernel
  widens its rows, runs the float32 rows and rounds: the same values); its rounding is then one
  for these rules too;
- ``move_reads_rounding``: a move (reshape, transpose, a take, ...) of ``r`` whose readers all
  widen -> ``astype(move(v), float16)`` (GPT-2's ``layer_norm -> view -> Gemm``, attention's
  ``projections -> take -> reshape -> product``): moves commute with rounding, and the moved
  rounding is one for these rules;
- ``product_writes_rounding``: a product writing float16 whose readers all widen ->
  ``astype(product(.., out_dtype=float32), float16)``: its kernel widens float16 operands, makes
  the float32 product and rounds it once, so this is the same value, and the rounding is one for
  these rules (a float16 attention's projections and its second product, whose operands are then
  float32 and FuseAttention fuses).

The same values everywhere (the model's roundings all kept), so no numerical contract changes.
FuseOps fuses ``round_to_float16`` into the recipe of the conv or product that computes ``v``.
docs/design-notes.md, "float16 roundings kept in float32".
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import Call, Constant, Expr, Function, If, Op, SeqExpr, Var
from ..ir.struct_info import TensorStructInfo
from ..ops.registry import make_call
from .core.infra import function_pass
from .core.patterns import vars_of
from .core.rules import Match, Rule, RewriteTable, is_op, wildcard

F16, F32 = "float16", "float32"
#: products that widen a float16 operand when they write float32
PRODUCTS = ("matmul", "permute_matmul")
#: moves of a rounding that commute with it (``move_reads_rounding``; a take gathers its values)
MOVES = ("reshape", "permute_dims", "expand_dims", "squeeze", "flatten", "take")
#: levels of moves between a rounding and the readers that widen it (attention's ``projections ->
#: take -> reshape -> reshape -> product``: three)
MOVE_DEPTH = 4
#: most rounds of the rules (each round reads the function's readers anew)
MAX_ROUNDS = 8


def _dtype(expr: Expr) -> str | None:
    sinfo = expr.struct_info
    return sinfo.dtype if isinstance(sinfo, TensorStructInfo) else None


def _call(value, *names: str) -> bool:
    return isinstance(value, Call) and isinstance(value.op, Op) and value.op.name in names


def _rounded(value) -> Expr | None:
    """``v`` for ``value = astype(v, float16)`` of a float32 ``v``, else None."""
    if _call(value, "astype") and _dtype(value) == F16 and _dtype(value.args[0]) == F32:
        return value.args[0]
    return None


class Readers:
    """What reads each var of a function: the binding values that use it, ``None`` for anything
    else (the function's result, an If's condition)."""

    def __init__(self, func: Function | None = None):
        self.of: dict[Var, list] = {}
        self.var_of: dict[int, Var] = {}
        self.bound: dict[Var, Expr] = {}
        if func is not None:
            self._seq(func.body)

    def _seq(self, body: SeqExpr) -> None:
        for v in vars_of(body.body):
            self.of.setdefault(v, []).append(None)
        for block in body.blocks:
            for b in block.bindings:
                if isinstance(b.value, If):
                    for v in vars_of(b.value.cond):
                        self.of.setdefault(v, []).append(None)
                    self._seq(b.value.true_branch)
                    self._seq(b.value.false_branch)
                    continue
                self.var_of[id(b.value)] = b.var
                self.bound[b.var] = b.value
                for v in vars_of(b.value):
                    self.of.setdefault(v, []).append(b.value)

    def widens(self, value, var: Var, depth: int = MOVE_DEPTH) -> bool:
        """Whether ``value`` reads ``var`` only as float32 values: a cast to float32, a product
        writing float32, or (``depth`` levels of) a float16 layer norm of ``var`` with constant
        gamma and beta, or a move of ``var``, whose own readers all widen it."""
        if _call(value, "astype"):
            return _dtype(value) == F32
        if _call(value, *PRODUCTS):
            return value.attrs.get("out_dtype") == F32
        if depth == 0 or not (isinstance(value, Call) and value.args and value.args[0] is var
                              and var not in value.args[1:]):
            return False
        norm = _call(value, "nn.layer_norm") and _dtype(value) == F16 and \
            all(isinstance(a, Constant) for a in value.args[1:])
        out = self.var_of.get(id(value))
        return (norm or _call(value, *MOVES)) and out is not None and \
            all(self.widens(r, out, depth - 1) for r in self.of.get(out, [None]))

    def rounded(self, v: Expr, depth: int = MOVE_DEPTH) -> bool:
        """Whether ``v`` holds float16 values already: a ``round_to_float16`` or a move of one."""
        value = self.bound.get(v) if isinstance(v, Var) else None
        if _call(value, "round_to_float16"):
            return True
        return depth > 0 and _call(value, *MOVES) and self.rounded(value.args[0], depth - 1)

    def rounding(self, v: Expr) -> Expr:
        """``v`` rounded to float16 in float32: ``v`` itself when it is rounded already."""
        return v if self.rounded(v) else make_call("round_to_float16", v)

    def kept(self, r: Expr) -> Expr | None:
        """``v`` when ``r`` is a var bound to ``astype(v, float16)`` of a float32 ``v`` and every
        reader of ``r`` widens it, else None."""
        if not isinstance(r, Var):
            return None
        v = _rounded(self.bound.get(r))
        if v is None or not all(self.widens(reader, r) for reader in self.of.get(r, [None])):
            return None
        return v


def _writes_float16(value) -> bool:
    """Whether ``value`` is a product writing float16 from float16 or float32 operands."""
    return _call(value, *PRODUCTS) and _dtype(value) == F16 and all(_dtype(a) in (F16, F32) for a in value.args)


def _widen_checked(readers: Readers):
    def check(m: Match) -> str | None:
        if _dtype(m["widen"]) != F32:
            return "not a cast to float32"
        return None if readers.kept(m["r"]) is not None else "no float16 rounding all of whose readers widen it"
    return check


def _widen_rounding(readers: Readers):
    def rewrite(m: Match):
        """astype(astype(v, float16), float32) -> round_to_float16(v)."""
        return readers.rounding(readers.kept(m["r"]))
    return rewrite


def _product_checked(readers: Readers):
    def check(m: Match) -> str | None:
        call = m["product"]
        if call.attrs.get("out_dtype") != F32:
            return "it does not write float32"
        if not any(readers.kept(a) is not None for a in call.args):
            return "no operand is a float16 rounding all of whose readers widen it"
        return None
    return check


def _product_reads_rounding(readers: Readers):
    def rewrite(m: Match):
        """product(.., astype(v, float16), .., out_dtype=float32) -> product(.., round_to_float16(v),
        ..)."""
        call = m["product"]
        args = [readers.rounding(readers.kept(a)) if readers.kept(a) is not None
                else _widened_constant(a) for a in call.args]
        mixed = any(readers.kept(a) is None and _dtype(w) != F32      # else a plain float32 product
                    for a, w in zip(call.args, args))
        return make_call(call.op.name, *args, **{**call.attrs, "out_dtype": F32 if mixed else None})
    return rewrite


def _widened_constant(arg: Expr) -> Expr:
    """A float16 constant as a float32 one (exact), anything else as it is."""
    if isinstance(arg, Constant) and _dtype(arg) == F16:
        return Constant(np.asarray(arg.data).astype(np.float32))
    return arg


def _writing_checked(readers: Readers):
    def check(m: Match) -> str | None:
        if not _writes_float16(m["product"]):
            return "it does not write float16 from float16 or float32 operands"
        var = m.binding.var
        if not all(readers.widens(r, var) for r in readers.of.get(var, [None])):
            return "a reader does not widen its float16 result"
        return None
    return check


def _product_writes_rounding(readers: Readers):
    def rewrite(m: Match):
        """product(a, b) writing float16 -> astype(product(a, b, out_dtype=float32), float16)."""
        call = m["product"]
        mixed = any(_dtype(a) != F32 for a in call.args)
        wide = make_call(call.op.name, *call.args, **{**call.attrs, "out_dtype": F32 if mixed else None})
        return make_call("astype", wide, dtype=F16)
    return rewrite


def _norm_checked(readers: Readers):
    def check(m: Match) -> str | None:
        call = m["norm"]
        if _dtype(call) != F16:
            return "not a float16 layer norm"
        if readers.kept(call.args[0]) is None:
            return "its data is no float16 rounding all of whose readers widen it"
        return None     # (kept() asked widens() of this norm: its readers widen too)
    return check


def _norm_reads_rounding(readers: Readers):
    def rewrite(m: Match):
        """layer_norm(astype(v, float16), g, b) -> astype(layer_norm(round_to_float16(v), g32, b32),
        float16)."""
        call = m["norm"]
        constants = [_widened_constant(a) for a in call.args[1:]]
        wide = make_call(call.op.name, readers.rounding(readers.kept(call.args[0])), *constants,
                         **call.attrs)
        return make_call("astype", wide, dtype=F16)
    return rewrite


def _move_checked(readers: Readers):
    def check(m: Match) -> str | None:
        call = m["move"]
        if readers.kept(call.args[0]) is None or call.args[0] in call.args[1:]:
            return "it moves no float16 rounding all of whose readers widen it"
        return None
    return check


def _move_reads_rounding(readers: Readers):
    def rewrite(m: Match):
        """move(astype(v, float16)) -> astype(move(round_to_float16(v)), float16): the same values
        (a move commutes with rounding), a rounding again whose readers widen it, of a value
        already rounded: its readers read the move, and ``v`` is rounded once above all its moves
        (three takes of attention's projections: one rounding, fused into their product)."""
        call = m["move"]
        moved = make_call(call.op.name, readers.rounding(readers.kept(call.args[0])), *call.args[1:], **call.attrs)
        return make_call("astype", moved, dtype=F16)
    return rewrite


def _table(readers: Readers) -> RewriteTable:
    return RewriteTable("RoundFloat16InFloat32", [
        Rule("widen_rounding", is_op("astype")(wildcard("r"), name="widen"), _widen_checked(readers),
             _widen_rounding(readers)),
        Rule("product_reads_rounding", is_op(*PRODUCTS)(..., name="product"), _product_checked(readers),
             _product_reads_rounding(readers)),
        Rule("product_writes_rounding", is_op(*PRODUCTS)(..., name="product"), _writing_checked(readers),
             _product_writes_rounding(readers)),
        Rule("norm_reads_rounding", is_op("nn.layer_norm")(..., name="norm"), _norm_checked(readers),
             _norm_reads_rounding(readers)),
        Rule("move_reads_rounding", is_op(*MOVES)(..., name="move"), _move_checked(readers),
             _move_reads_rounding(readers)),
    ], max_iterations=2)     # (the second sweep, on the first's readers, fires nothing: the caller reads them anew)


#: the rules as data (``relaxpack explain``): their readers are the function's
RULES = _table(Readers())


@function_pass(name="RoundFloat16InFloat32", opt_level=2, requires=("import", "optimize"), produces="optimize")
def round_float16_in_float32(func, mod, ctx):
    """Keep float16 roundings that every reader widens in float32 (see the module docstring)."""
    for _ in range(MAX_ROUNDS):
        readers = Readers(func)
        if not any(_rounded(value) is not None or _writes_float16(value) for value in readers.bound.values()):
            return func                 # no float16 rounding: nothing to sweep (float32 models)
        new = _table(readers).apply(func)
        if new is func:
            return func
        func = new
    return func


__all__ = ["round_float16_in_float32", "RULES"]

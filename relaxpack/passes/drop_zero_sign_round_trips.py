"""DropZeroSignRoundTrips: a float's round trip through an integer type, where only a zero's sign changes and nothing reads it.

A quantized model casts a quantized value to its integer type and back to float
(QuantizeLinear then DequantizeLinear, a QOperator op's requantized output read
by the next op's dequantization)::

    q = clip(round(x / s), lo, hi)          # float32, integer-valued, NaN saturated
    y = astype(astype(q, uint8), float32)   # two casts

For such a ``q`` (integer values in ``[lo, hi]``, which the integer type holds)
the two casts change one thing: a ``-0.0`` (``round(-0.3)``) becomes ``+0.0``.
``SimplifyAlgebra`` keeps them for that reason (``quantize_rules.py``). This
pass finds where no zero's sign can reach anything that tells the two apart,
and there reads ``q`` itself (two elementwise passes fewer per tensor).

Whether a value's zero sign matters is worked out backwards over the
function's bindings (:func:`sign_readers`): it matters for a function output,
and for a value read by an op that tells ``-0.0`` from ``+0.0`` (a divisor,
``power``, ``reciprocal``, anything not listed here). It stops at ops whose
result is the same for either sign (a cast to an integer or bool, a
comparison, an add of a constant with no ``-0.0`` or a subtract of a nonzero
constant: ``-0.0 + c == +0.0 + c`` then), and passes through ops that, given
operands equal up to the sign of zero, give results equal up to the sign of
zero (sums, products, quotients' numerators, rounding, clips, pools, convs,
reshapes, ...: IEEE ``a + b`` with a zero operand is the other operand unless
both are zeros, ``±0 * b`` is a zero or NaN for either sign). A value only
such ops lead from to such stops is free to carry the other zero.

A dropped round trip leaves the alias ``y = q``. Runs at -O2 after the
algebraic rewrites (whose round trips it finishes) and before the last core
round, which resolves the aliases and drops the unused casts.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.block_builder import BlockBuilder
from ..ir.expr import Call, Constant, DataflowVar, Function, SeqExpr, Var, VarBinding
from ..ir.op import make_call
from ..ir.visitor import ExprVisitor
from .canonicalize_bindings import function_outputs
from .core.infra import function_pass

_INT_TYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
_FLOAT_TYPES = ("float16", "bfloat16", "float32", "float64")
#: the largest integer magnitude up to which each float type holds every integer
_FLOAT_EXACT = {"float16": 2 ** 11, "bfloat16": 2 ** 8, "float32": 2 ** 24, "float64": 2 ** 53}

#: ops whose result, for operands equal up to the sign of zero, is equal up to the sign of zero
#: (any operand; ``divide``'s numerator only, below)
_PASSES_ZERO = frozenset({
    "add", "subtract", "multiply", "negative", "round", "clip", "floor", "ceil", "abs", "maximum", "minimum",
    "nn.relu", "sigmoid", "tanh", "erf", "exp", "sqrt", "nn.gelu", "nn.silu",
    "reshape", "permute_dims", "expand_dims", "squeeze", "flatten", "broadcast_to", "concat", "split",
    "strided_slice", "dynamic_strided_slice", "take", "tile",
    "nn.conv", "nn.gemm", "matmul", "nn.max_pool", "nn.avg_pool", "nn.global_avg_pool", "nn.global_max_pool",
    "sum", "mean", "max", "min", "nn.layer_norm", "nn.softmax",
})
#: ops whose result is the same for either sign of a zero operand
_READS_NO_SIGN = frozenset({
    "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "isnan", "isinf", "isfinite",
    "argmax", "argmin",
})


def _no_zero_of_sign(expr, negative: bool) -> bool:
    """Whether ``expr`` is a float constant with no -0.0 (``negative``) or no +0.0 (not)."""
    if not isinstance(expr, Constant) or expr.data.dtype.kind != "f":
        return False
    data = expr.data
    return not ((data == 0) & (np.signbit(data) == negative)).any()


def _reads_sign(call: Call, index: int) -> str:
    """How ``call`` treats the sign of a zero in operand ``index``: "no" (its result is the same
    for either sign), "passes" (its result changes by a zero's sign at most) or "reads"."""
    name = getattr(call.op, "name", None)
    if name == "astype":
        return "no" if call.attrs["dtype"] in _INT_TYPES + ("bool",) else \
            "passes" if call.attrs["dtype"] in _FLOAT_TYPES else "reads"
    if name in _READS_NO_SIGN:
        return "no"
    if name in ("add", "subtract") and len(call.args) == 2:
        # -0.0 + c == +0.0 + c and c - -0.0 == c - +0.0 unless c is -0.0; x - c unless c is +0.0
        minuend = name == "subtract" and index == 0
        return "no" if _no_zero_of_sign(call.args[1 - index], negative=not minuend) else "passes"
    if name == "divide":
        return "passes" if index == 0 else "reads"
    if name == "nn.conv_bias_act":
        return "passes" if call.attrs.get("activation") in (None, "relu") else "reads"
    return "passes" if name in _PASSES_ZERO else "reads"


class _OtherUses(ExprVisitor):
    """The vars used anywhere but as a direct operand of a call bound at the top level."""

    def __init__(self):
        self.found: set[Var] = set()

    def visit_var_(self, var: Var) -> None:
        self.found.add(var)


def sign_readers(func: Function) -> set[Var]:
    """The vars of ``func`` whose zero sign something may tell (see the module docstring); a var
    not in the set may hold -0.0 for +0.0 with the function's results unchanged."""
    bindings = [b for block in func.body.blocks for b in block.bindings]
    other = _OtherUses()
    other.visit_expr(func.body.body)
    users: dict[Var, list[tuple[Var, Call, int]]] = {}
    for b in bindings:
        if isinstance(b, VarBinding) and isinstance(b.value, Call) and hasattr(b.value.op, "name"):
            for i, arg in enumerate(b.value.args):
                if isinstance(arg, Var):
                    users.setdefault(arg, []).append((b.var, b.value, i))
                else:
                    other.visit_expr(arg)
        else:
            other.visit_expr(b.value)
    reading = set(other.found) | function_outputs(func)
    for b in reversed(bindings):
        if b.var in reading:
            continue
        for user, call, i in users.get(b.var, ()):
            how = _reads_sign(call, i)
            if how == "reads" or (how == "passes" and user in reading):
                reading.add(b.var)
                break
    return reading


def _integer_valued(expr, defs: "_Defs", depth: int = 8) -> bool:
    """Whether every value of ``expr`` is an integer, an infinity or NaN (a round, an integral
    clip of such a value, sums and products of such values and integral constants)."""
    if isinstance(expr, Constant):
        data = expr.data
        return data.dtype.kind in "iub" or bool(np.all(~np.isfinite(data) | (np.floor(data) == data)))
    call = defs.get(expr)
    if call is None or depth == 0:
        return False
    name = call.op.name
    if name in ("round", "floor", "ceil"):
        return True
    if name == "astype":
        return _integer_valued(call.args[0], defs, depth - 1) or \
            getattr(call.args[0].struct_info, "dtype", None) in _INT_TYPES + ("bool",)
    if name in ("add", "subtract", "multiply", "negative", "clip", "abs"):
        if name == "clip" and not all(_integral(call.attrs[k]) for k in ("min", "max")):
            return False
        return all(_integer_valued(a, defs, depth - 1) for a in call.args)
    return False


def _integral(value) -> bool:
    return value is None or (math.isfinite(value) and float(value).is_integer())


class _Defs:
    """The calls bound at the function's top level, through the aliases this pass makes, and the
    block each var is bound in (a DataflowVar may be read in its own block only)."""

    def __init__(self, func: Function):
        self.calls: dict[Var, Call] = {}
        self.block: dict[Var, int] = {}
        self.alias: dict[Var, Var] = {}
        for k, block in enumerate(func.body.blocks):
            for b in block.bindings:
                self.block[b.var] = k
                if isinstance(b, VarBinding) and isinstance(b.value, Call) and hasattr(b.value.op, "name"):
                    self.calls[b.var] = b.value

    def get(self, expr) -> Call | None:
        while expr in self.alias:
            expr = self.alias[expr]
        return self.calls.get(expr) if isinstance(expr, Var) else None

    def resolve(self, expr):
        while expr in self.alias:
            expr = self.alias[expr]
        return expr

    def visible(self, expr, at: Var) -> bool:
        """Whether ``expr`` may be read in ``at``'s binding."""
        return not isinstance(expr, DataflowVar) or self.block.get(expr) == self.block[at]


def _round_trip(var: Var, call: Call, defs: _Defs):
    """``q`` for ``var = astype(astype(q, I), F)`` when the casts change no value of ``q`` but a
    zero's sign (see the module docstring), else None."""
    if call.op.name != "astype" or call.attrs["dtype"] not in _FLOAT_TYPES:
        return None
    inner = defs.get(call.args[0])
    if inner is None or inner.op.name != "astype" or inner.attrs["dtype"] not in _INT_TYPES:
        return None
    q = defs.resolve(inner.args[0])
    clip = defs.get(q)
    if clip is None or clip.op.name != "clip" or not clip.attrs["saturate_nan"]:
        return None
    lo, hi = clip.attrs["min"], clip.attrs["max"]
    info = np.iinfo(inner.attrs["dtype"])
    if lo is None or hi is None or not (_integral(lo) and _integral(hi)) or not info.min <= lo <= hi <= info.max:
        return None
    if getattr(q.struct_info, "dtype", None) != call.attrs["dtype"] or \
            getattr(q.struct_info, "ndim", None) != getattr(var.struct_info, "ndim", -1):
        return None
    return q if _integer_valued(clip.args[0], defs) and defs.visible(q, var) else None


def _one_integral(expr) -> float | None:
    """The value of a one-element float constant that is an integer, else None."""
    if not isinstance(expr, Constant) or expr.data.size != 1 or expr.data.dtype.kind != "f":
        return None
    value = float(expr.data.reshape(-1)[0])
    return value if math.isfinite(value) and value.is_integer() else None


def _shifted_clip(var: Var, call: Call, defs: _Defs):
    """``clip(r, lo - z, hi - z)`` for ``var = clip(r + z, lo, hi) - z`` of an integer-valued ``r``
    and one integral float constant ``z``, where the float type holds the bounds and shifted
    bounds exactly, else None. Equal but for a zero's sign: ``r + z`` is exact below the float's
    integer limit and past both bounds on the same side beyond it; NaN gives ``lo - z`` (or NaN)
    both ways; ``r = -0.0`` at ``z`` inside the bounds gives +0.0 one way, -0.0 the other."""
    if call.op.name != "subtract" or (z := _one_integral(call.args[1])) is None:
        return None
    clip = defs.get(call.args[0])
    if clip is None or clip.op.name != "clip":
        return None
    add = defs.get(clip.args[0])
    if add is None or add.op.name != "add":
        return None
    r = next((defs.resolve(a) for a, b in (add.args, add.args[::-1]) if _one_integral(b) == z), None)
    lo, hi = clip.attrs["min"], clip.attrs["max"]
    dtype = getattr(var.struct_info, "dtype", None)
    limit = _FLOAT_EXACT.get(dtype)
    if r is None or lo is None or hi is None or limit is None or not (_integral(lo) and _integral(hi)):
        return None
    if max(abs(lo), abs(hi), abs(lo - z), abs(hi - z)) > limit or lo > hi:
        return None
    if getattr(r.struct_info, "dtype", None) != dtype or \
            getattr(r.struct_info, "ndim", None) != getattr(var.struct_info, "ndim", -1):
        return None
    if not (_integer_valued(r, defs) and defs.visible(r, var)):
        return None
    return BlockBuilder().normalize(make_call("clip", r, min=lo - z, max=hi - z,
                                              saturate_nan=clip.attrs["saturate_nan"]))


@function_pass(name="DropZeroSignRoundTrips", opt_level=2, requires=("import", "optimize"), produces="optimize")
def drop_zero_sign_round_trips(func, mod, ctx):
    """Read the clipped float itself where its round trip through an integer type only fixes a
    zero's sign that nothing reads, and clip once where a zero point is added and taken off
    (see the module docstring)."""
    if not isinstance(func.body, SeqExpr):
        return func
    reading = sign_readers(func)
    defs = _Defs(func)
    changed = False
    blocks = []
    for block in func.body.blocks:
        bindings = []
        for b in block.bindings:
            call = defs.calls.get(b.var)
            new = None
            if call is not None and b.var not in reading:
                new = _round_trip(b.var, call, defs)
                if new is not None:
                    defs.alias[b.var] = new
                else:
                    new = _shifted_clip(b.var, call, defs)
                    if new is not None:
                        defs.calls[b.var] = new
            changed |= new is not None
            bindings.append(b if new is None else VarBinding(b.var, new, span=b.span))
        blocks.append(type(block)(tuple(bindings)))
    if not changed:
        return func
    body = SeqExpr(tuple(blocks), func.body.body, struct_info=func.body.struct_info)
    return Function(func.params, body, func.ret_struct_info, func.is_pure, func.attrs)


__all__ = ["drop_zero_sign_round_trips", "sign_readers"]

"""What a function's float values are known to be: integers, within bounds, free of -0.0, or
free to be either zero (nobody downstream tells -0.0 from +0.0).

Quantized models compute on integer-valued floats (``round(x / s)`` clipped to the integer
type's range, plus or minus a zero point); these facts let DropZeroSignRoundTrips drop the casts,
clips and roundings that change nothing on such values. All are worked out over the bindings at
the function's top level (:class:`Definitions`), through the aliases a pass makes as it goes.
"""

from __future__ import annotations

import math

import numpy as np

from ...ir.expr import Call, Constant, DataflowVar, Function, TupleGetItem, Var, VarBinding
from ...ir.visitor import ExprVisitor
from ..canonicalize_bindings import function_outputs
from .dim_bounds import function_dims

INT_TYPES = ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")
FLOAT_TYPES = ("float16", "bfloat16", "float32", "float64")
#: the largest integer magnitude up to which each float type holds every integer
FLOAT_EXACT = {"float16": 2 ** 11, "bfloat16": 2 ** 8, "float32": 2 ** 24, "float64": 2 ** 53}

#: ops whose result, for operands equal up to the sign of zero, is equal up to the sign of zero
#: (any operand; ``divide``'s numerator only, below)
_PASSES_ZERO = frozenset({
    "add", "subtract", "multiply", "negative", "round", "clip", "floor", "ceil", "abs", "maximum", "minimum",
    "nn.relu", "sigmoid", "tanh", "erf", "exp", "sqrt", "nn.gelu", "nn.silu",
    "reshape", "permute_dims", "expand_dims", "squeeze", "flatten", "broadcast_to", "concat", "split",
    "strided_slice", "dynamic_strided_slice", "take", "tile",
    "nn.conv", "nn.gemm", "matmul", "permute_matmul", "nn.max_pool", "nn.avg_pool", "nn.global_avg_pool",
    "nn.global_max_pool", "sum", "mean", "max", "min", "nn.layer_norm", "nn.softmax", "nn.safe_softmax",
    "dynamic_quantize_params",      # the same scale; a zero point of 0 may change sign
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
        return "no" if call.attrs["dtype"] in INT_TYPES + ("bool",) else \
            "passes" if call.attrs["dtype"] in FLOAT_TYPES else "reads"
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
    producers = {b.var: b.value.op.name for b in bindings
                 if isinstance(b, VarBinding) and isinstance(b.value, Call) and hasattr(b.value.op, "name")}
    for b in bindings:
        if isinstance(b, VarBinding) and isinstance(b.value, Call) and hasattr(b.value.op, "name"):
            for i, arg in enumerate(b.value.args):
                if isinstance(arg, Var):
                    users.setdefault(arg, []).append((b.var, b.value, i))
                else:
                    other.visit_expr(arg)
        elif isinstance(b, VarBinding) and isinstance(b.value, TupleGetItem) and isinstance(b.value.tuple_value, Var):
            item = b.value
            if (producers.get(item.tuple_value), item.index) not in _ITEMS_SIGN_FREE:
                users.setdefault(item.tuple_value, []).append((b.var, None, 0))    # an item passes it on
        else:
            other.visit_expr(b.value)
    reading = set(other.found) | function_outputs(func)
    for b in reversed(bindings):
        if b.var in reading:
            continue
        for user, call, i in users.get(b.var, ()):
            how = "passes" if call is None else _reads_sign(call, i)
            if how == "reads" or (how == "passes" and user in reading):
                reading.add(b.var)
                break
    return reading


#: tuple items whose value is the same for operands equal up to the sign of zero: DynamicQuantizeLinear's
#: scale (its zero point of 0 may change sign: ``dynamic_quantize_params`` passes zero signs)
_ITEMS_SIGN_FREE = frozenset({("dynamic_quantize_params", 0)})
#: tuple items that are integer-valued floats: DynamicQuantizeLinear's rounded zero point
_INTEGER_ITEMS = frozenset({("dynamic_quantize_params", 1)})


class Definitions:
    """The calls bound at the function's top level, through aliases (the function's and those a
    pass makes), and the block each var is bound in (a DataflowVar may be read in its own block
    only)."""

    def __init__(self, func: Function):
        self.func = func
        self._dims = None
        self.calls: dict[Var, Call] = {}
        self.items: dict[Var, tuple[Var, int]] = {}
        self.block: dict[Var, int] = {}
        self.alias: dict[Var, Var] = {}
        for k, block in enumerate(func.body.blocks):
            for b in block.bindings:
                self.block[b.var] = k
                if isinstance(b, VarBinding) and isinstance(b.value, Call) and hasattr(b.value.op, "name"):
                    self.calls[b.var] = b.value
                elif isinstance(b, VarBinding) and isinstance(b.value, Var):
                    self.alias[b.var] = b.value
                elif isinstance(b, VarBinding) and isinstance(b.value, TupleGetItem) \
                        and isinstance(b.value.tuple_value, Var):
                    self.items[b.var] = (b.value.tuple_value, b.value.index)

    def dim_upper_bound(self, dim) -> int | None:
        """An upper bound of ``dim`` from the function's ranges and top-level assumptions
        (:func:`.dim_bounds.function_dims`), None if unbounded."""
        if self._dims is None:
            self._dims = function_dims(self.func)
        return self._dims.upper_bound(dim)

    def item_of(self, expr) -> tuple[str, int] | None:
        """(the op, the index) when ``expr`` is an item of a call's tuple result, else None."""
        item = self.items.get(self.resolve(expr)) if isinstance(expr, Var) else None
        call = None if item is None else self.calls.get(item[0])
        return None if call is None else (call.op.name, item[1])

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


def rewrite_calls(func: Function, defs: Definitions, rewrite) -> Function:
    """``func`` with each top-level call bound to a var replaced by ``rewrite(var, call)`` where
    that returns an expression (None keeps the call), in binding order, so that ``rewrite`` may
    record in ``defs`` what later bindings should see; ``func`` itself when nothing changed."""
    changed = False
    blocks = []
    for block in func.body.blocks:
        bindings = []
        for b in block.bindings:
            call = defs.calls.get(b.var)
            new = None if call is None else rewrite(b.var, call)
            changed |= new is not None
            bindings.append(b if new is None else VarBinding(b.var, new, span=b.span))
        blocks.append(type(block)(tuple(bindings)))
    return func.replace(body=func.body.replace(blocks=tuple(blocks))) if changed else func


def integer_valued(expr, defs: Definitions, depth: int = 8) -> bool:
    """Whether every value of ``expr`` is an integer, an infinity or NaN (a round, an integral
    clip of such a value, sums and products of such values and integral constants, matrix
    products of such values)."""
    if isinstance(expr, Constant):
        data = expr.data
        return data.dtype.kind in "iub" or bool(np.all(~np.isfinite(data) | (np.floor(data) == data)))
    call = defs.get(expr)
    if call is None or depth == 0:
        return defs.item_of(expr) in _INTEGER_ITEMS
    name = call.op.name
    if name in ("round", "floor", "ceil"):
        return True
    if name == "astype":
        return integer_valued(call.args[0], defs, depth - 1) or \
            getattr(call.args[0].struct_info, "dtype", None) in INT_TYPES + ("bool",)
    if name in ("add", "subtract", "multiply", "negative", "clip", "abs"):
        if name == "clip" and not all(integral(call.attrs[k]) for k in ("min", "max")):
            return False
        return all(integer_valued(a, defs, depth - 1) for a in call.args)
    if (name == "nn.gemm" and call.attrs.get("activation") is None) or name == "matmul":
        # sums of products of integers, each rounded to an integer: past the float type's exact
        # integers every float is one, and below them the sums are exact
        return all(integer_valued(a, defs, depth - 1) for a in call.args)
    return False


def integral(value) -> bool:
    """Whether a clip bound is None (none) or a finite integer."""
    return value is None or (math.isfinite(value) and float(value).is_integer())


def one_value(expr) -> float | None:
    """The value of a one-element finite numeric constant, else None."""
    if not isinstance(expr, Constant) or expr.data.size != 1 or expr.data.dtype.kind not in "fiu":
        return None
    value = float(expr.data.reshape(-1)[0])
    return value if math.isfinite(value) else None


def value_range(expr, defs: Definitions, depth: int = 8) -> tuple[float, float] | None:
    """Bounds ``(lo, hi)`` of every value of ``expr``, which is then never NaN, or None.

    A NaN-saturating clip's bounds; a cast from an integer type, the type's range; a sum,
    difference or rounding of such a value and a one-element constant, the bounds moved the same
    way, where the type holds every integer between them (the sums are exact)."""
    if depth == 0:
        return None
    call = defs.get(expr)
    if call is None:
        value = one_value(expr)
        return None if value is None else (value, value)
    name, dtype = call.op.name, getattr(expr.struct_info, "dtype", None)
    if name == "clip":
        lo, hi = call.attrs["min"], call.attrs["max"]
        inner = value_range(call.args[0], defs, depth - 1)
        if inner is None and not (call.attrs["saturate_nan"] and lo is not None and hi is not None):
            return None
        if inner is not None:
            lo = inner[0] if lo is None else max(lo, inner[0])
            hi = inner[1] if hi is None else min(hi, inner[1])
        return (float(lo), float(hi)) if lo is not None and hi is not None and lo <= hi else None
    if name == "astype" and getattr(call.args[0].struct_info, "dtype", None) in INT_TYPES + ("bool",):
        source = call.args[0].struct_info.dtype
        inner = value_range(call.args[0], defs, depth - 1) or \
            ((0.0, 1.0) if source == "bool" else (float(np.iinfo(source).min), float(np.iinfo(source).max)))
        return _in_type(inner, dtype)
    if name == "round" and dtype in FLOAT_TYPES:
        inner = value_range(call.args[0], defs, depth - 1)
        return None if inner is None else (float(np.round(inner[0])), float(np.round(inner[1])))
    if name in ("add", "subtract") and len(call.args) == 2:
        k = one_value(call.args[1])
        if k is None and name == "add":
            k, operand = one_value(call.args[0]), call.args[1]
        else:
            operand = call.args[0]
        inner = None if k is None else value_range(operand, defs, depth - 1)
        if inner is None:
            return None
        k = -k if name == "subtract" else k
        return _in_type((inner[0] + k, inner[1] + k), dtype)
    return None


def _in_type(bounds: tuple[float, float], dtype) -> tuple[float, float] | None:
    """``bounds`` when ``dtype`` holds every integer between them and they are integers (a sum
    of such values in the type is then exact: it neither wraps nor rounds), else None."""
    lo, hi = bounds
    if dtype in INT_TYPES:
        info = np.iinfo(dtype)
        return (lo, hi) if info.min <= lo <= hi <= info.max and float(lo).is_integer() else None
    limit = FLOAT_EXACT.get(dtype)
    if limit is not None and float(lo).is_integer() and float(hi).is_integer() and max(-lo, hi) <= limit:
        return lo, hi   # integers the float type holds: its sums of them are exact
    return None


def never_negative_zero(expr, defs: Definitions) -> bool:
    """Whether ``expr`` is never -0.0: a sum with a nonzero one-element constant (an exact
    cancellation is +0.0 when rounding to nearest), a difference with one, or a value of an
    integer type."""
    if getattr(expr.struct_info, "dtype", None) in INT_TYPES + ("bool",):
        return True
    call = defs.get(expr)
    if call is None or call.op.name not in ("add", "subtract") or len(call.args) != 2:
        return False
    return any(one_value(a) not in (None, 0.0) for a in call.args)

"""A scalar factor on a matmul's operand moves to its product.

torch.onnx scales attention's query and key each by ``sqrt(1 / sqrt(d))``
after splitting heads; where the scale cannot reach a projection weight
(GPT-2's fused QKV split, a key concatenated with the cache, llama's rotary
query) it stays a multiply of its own on each operand, and the one on the key
sits between the key's transpose and the product, so the transpose stays a
copy too. ``matmul(a * c, b) = matmul(a, b) * c`` for a one-element ``c``:
the two factors end up in one multiply after the product, which FuseOps fuses
with the mask add, and the transposes fold into the product's strides.

Rounding: the factor multiplies the sums instead of the terms, a
reassociation (bit for bit when ``c`` is a power of two, as for ``d = 16``;
otherwise within a rounding or two, like ``fold_scale_into_weight``). Such a
factor stays where it is on integers (a quantized tensor less its zero point:
DequantizeLinear's ``(q - z) * s``), since a QuantizeLinear after the product
turns a last bit that rounds otherwise into a whole step, and onnxruntime (its
optimizer off, the reference for QDQ models) scales before the product. A float16
product moves power-of-two factors only (GPT-2 float16's 0.5 on q and k): the
same values but where ``a * c`` would have been a float16 subnormal (or past
65504), which the product now sums unrounded, as onnxruntime (its Mul and
MatMul run in float32); WidenFloat16Regions then keeps the product and the
multiplies float32.
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import Call, Constant
from ..ir.struct_info import TensorStructInfo
from ..ops.registry import make_call
from .core.rules import Match

_FLOATS = ("float32", "float64")


def _power_of_two(c) -> bool:
    value = float(c.data.reshape(-1)[0])
    return value != 0 and np.isfinite(value) and np.frexp(value)[0] in (0.5, -0.5)


#: ops whose result holds integers whatever their operands hold; ops that keep integers integers
_ROUNDING = ("round", "floor", "ceil")
_KEEPING_INTEGERS = ("add", "subtract", "negative", "maximum", "minimum", "clip", "astype")


def _integer_valued(m: Match, value, depth: int = 8) -> bool:
    """Whether ``value`` provably holds integers: an integer dtype, whole-number constants, a
    round/floor/ceil, or sums, differences, clips (at whole bounds) and casts of such values."""
    info = getattr(value, "struct_info", None)
    if isinstance(info, TensorStructInfo) and info.dtype.startswith(("int", "uint")):
        return True
    producer = m.producer(value)[0]
    if isinstance(producer, Constant):
        data = producer.data
        return data.dtype.kind in "iub" or bool(np.all(np.isfinite(data) & (np.floor(data) == data)))
    if depth == 0 or not isinstance(producer, Call):
        return False
    name = getattr(producer.op, "name", None)
    if name in _ROUNDING:
        return True
    if name == "clip" and any(b is not None and float(b) != np.floor(float(b))
                              for b in (producer.attrs.get("min"), producer.attrs.get("max"))):
        return False
    return name in _KEEPING_INTEGERS and all(_integer_valued(m, arg, depth - 1) for arg in producer.args)


def _movable(m: Match, a, c: Constant) -> bool:
    """Whether ``c`` may leave ``a`` for the product: a power of two always, another factor
    unless ``a`` holds integers (the module docstring)."""
    return _power_of_two(c) or not _integer_valued(m, a)


def _scale(m: Match, operand) -> tuple[object, Constant] | None:
    """``(a, c)`` when ``operand`` is ``a * c`` (either order), used only here, ``c`` a
    one-element float constant of the product's dtype that does not broadcast ``a``."""
    value, uses = m.producer(operand)
    if uses != 1 or not (isinstance(value, Call) and getattr(value.op, "name", None) == "multiply"):
        return None
    for a, c in (value.args, reversed(value.args)):
        c_value = m.producer(c)[0]
        if not isinstance(c_value, Constant) or c_value.data.size != 1:
            continue
        if str(c_value.data.dtype) not in _FLOATS and not (str(c_value.data.dtype) == "float16"
                                                          and _power_of_two(c_value)):
            continue
        src, out = a.struct_info, value.struct_info
        if not (isinstance(src, TensorStructInfo) and isinstance(out, TensorStructInfo)) \
                or src.shape is None or out.shape is None or len(src.shape) != len(out.shape) \
                or src.dtype != out.dtype or c_value.data.dtype != out.dtype \
                or not all(x == y or m.analyzer.prove_equal(x, y) for x, y in zip(src.shape, out.shape)):
            continue
        if c_value.data.ndim > len(src.shape):
            continue
        return a, c_value
    return None


def _moving(m: Match, operand) -> tuple[object, Constant] | None:
    """:func:`_scale`'s ``(a, c)`` when ``c`` may move (:func:`_movable`), else None."""
    found = _scale(m, operand)
    return found if found is not None and _movable(m, *found) else None


def check(m: Match) -> str | None:
    mm = m["mm"]
    if mm.attrs.get("out_dtype") is not None:
        return "the matmul has an output dtype of its own"
    out = m.out_sinfo
    if not isinstance(out, TensorStructInfo) or out.dtype not in _FLOATS + ("float16",):
        return "the product is not float16/32/64"
    if _scale(m, m["a"]) is None and _scale(m, m["b"]) is None:
        return "neither operand is a scalar multiple used only here" + (
            " (a power of two in float16)" if out.dtype == "float16" else "")
    if _moving(m, m["a"]) is None and _moving(m, m["b"]) is None:
        return "the factors scale integers (dequantized operands) and are not powers of two"
    return None


def rewrite(m: Match):
    """matmul(a * c1, b * c2) -> matmul(a, b) * c1 * c2 (either factor may be absent)."""
    operands, factors = [], []
    for name in ("a", "b"):
        found = _moving(m, m[name])
        operands.append(m[name] if found is None else found[0])
        if found is not None:
            factors.append(found[1])
    y = make_call("matmul", *operands, **dict(m["mm"].attrs))
    for c in factors:
        y = make_call("multiply", y, c)
    return y

"""SimplifyAlgebra: chains of layout ops collapse, identities disappear,
activations exporters spell out become one op::

    permute_dims(permute_dims(x, (0, 2, 1)), (0, 2, 1))   ->   x

The rules, in the order they are tried, are the table :data:`RULES`
(``RULES.describe()`` prints each one's rewrite); what
each matches and why it is exact: docs/design-notes.md, "SimplifyAlgebra's
rules". Bindings left unused are for DeadCodeElimination.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.expr import Call, Constant, ShapeExpr
from ..ops.registry import make_call
from .core.infra import function_pass
from .iota_gather import gather_as_reshape, gather_check
from . import (
    broadcast_constant, permute_broadcast_constant, scales_into_conv, gather_nd_take, iota_label, offset_range,
    reshape_permute_reshape, row_major_take, scale_after_matmul, scaled_gelu,
)
from .quantize_rules import RULES as QUANTIZE_RULES
from .reduce_of_concat import reduce_of_concat, reduce_of_concat_check
from .core.rules import (
    Match, Rule, RewriteTable, all_of, any_of, const, float_output, is_op, same_type_as_output,
    used_once, wildcard,
)

# ---------------------------------------------------------------- layout chains


def _axes(axes, ndim: int) -> tuple[int, ...]:
    """``permute_dims``'s axes attribute as a full permutation (None reverses)."""
    if axes is None:
        return tuple(reversed(range(ndim)))
    return tuple(a % ndim for a in axes)


def _known_rank(name: str):
    def check(m: Match) -> str | None:
        ndim = getattr(m.sinfo(name), "ndim", -1)
        return None if ndim >= 0 else f"the rank of {m.name_of(name)} is not known"
    return check


def merge_permute_dims(m: Match):
    """permute_dims(permute_dims(x, p1), p2) -> permute_dims(x, p1 o p2), or x if that is the identity."""
    ndim = m.sinfo("x").ndim
    inner = _axes(m["inner"].attrs["axes"], ndim)
    outer = _axes(m["outer"].attrs["axes"], ndim)
    axes = tuple(inner[a] for a in outer)
    if axes == tuple(range(ndim)):
        return m["x"]
    return make_call("permute_dims", m["x"], axes=axes)


def _is_identity_permute(m: Match) -> str | None:
    axes = _axes(m["outer"].attrs["axes"], m.sinfo("x").ndim)
    return None if axes == tuple(range(len(axes))) else f"axes {axes} are not the identity"


def remove_identity(m: Match):
    """op(x) -> x: the op leaves x as it is."""
    return m["x"]


def merge_reshapes(m: Match):
    """reshape(reshape(x, s1), s2) -> reshape(x, s2)."""
    return make_call("reshape", m["x"], m["shape"])


def _reshape_atoms(before: tuple, after: tuple):
    """How a reshape from ``before`` to ``after`` regroups axes: per axis of
    each side, the sizes of the finest axes ("atoms") it is made of, with
    atom ids shared by both sides; None unless every group of axes is one
    axis split into several or several merged into one (static sizes, or
    a dim equal on both sides)."""
    atoms_before, atoms_after, i, j, next_id = [], [], 0, 0, 0
    while i < len(before) and j < len(after):
        if before[i] == after[j]:
            atoms_before.append([(next_id, before[i])])
            atoms_after.append([(next_id, after[j])])
            next_id, i, j = next_id + 1, i + 1, j + 1
            continue
        if not (isinstance(before[i], int) and isinstance(after[j], int)):
            grouped = _symbolic_group(before, after, i, j, next_id)
            if grouped is None:
                return None
            parts_before, parts_after = grouped
            atoms_before.extend(parts_before)
            atoms_after.extend(parts_after)
            next_id += max(len(parts_before), len(parts_after))
            i, j = i + len(parts_before), j + len(parts_after)
            continue
        if before[i] > after[j]:          # one axis of before split into several
            size, parts = before[i], []
            while size > 1 and j < len(after) and isinstance(after[j], int) and size % after[j] == 0:
                parts.append((next_id, after[j]))
                atoms_after.append([(next_id, after[j])])
                size, next_id, j = size // after[j], next_id + 1, j + 1
            if size != 1:
                return None
            atoms_before.append(parts)
            i += 1
        else:                             # several axes of before merged into one
            size, parts = after[j], []
            while size > 1 and i < len(before) and isinstance(before[i], int) and size % before[i] == 0:
                parts.append((next_id, before[i]))
                atoms_before.append([(next_id, before[i])])
                size, next_id, i = size // before[i], next_id + 1, i + 1
            if size != 1:
                return None
            atoms_after.append(parts)
            j += 1
    if i != len(before) or j != len(after):
        return None
    return atoms_before, atoms_after


def _symbolic_group(before: tuple, after: tuple, i: int, j: int, next_id: int):
    """Where a symbolic dim meets: ``after[j]`` as the product of ``before[i:i + k]`` (axes
    merged, e.g. ``(n, 2) -> 2 * n``) or ``before[i]`` as that of ``after[j:j + k]`` (split),
    for the smallest ``k >= 2``, equal in the dim algebra: the atoms of each side
    (``_reshape_atoms``' form), or None."""
    for merged, parts, start in ((after[j], before, i), (before[i], after, j)):
        product = parts[start]
        for k in range(2, len(parts) - start + 1):
            product = product * parts[start + k - 1]
            if product == merged:
                atoms = [(next_id + t, parts[start + t]) for t in range(k)]
                singles, group = [[a] for a in atoms], [atoms]
                return (singles, group) if parts is before else (group, singles)
    return None


def _permute_reshape_permute(m: Match):
    """The folded form's pieces: (x's shape split into atoms, the permutation
    of the atoms), or the reason it does not fold."""
    x_shape, mid, out = m.sinfo("x").shape, m.sinfo("mid").shape, m["outer"].struct_info.shape
    if x_shape is None or mid is None or out is None:
        return "a shape is not known"
    p1 = _axes(m["p1"].attrs["axes"], len(x_shape))
    p2 = _axes(m["outer"].attrs["axes"], len(mid))
    atoms = _reshape_atoms(tuple(x_shape[a] for a in p1), tuple(mid))
    if atoms is None:
        return "the reshape does not only split or merge axes"
    by_axis, after = atoms
    # x's axis k is axis p1.index(k) of the reshape's input
    x_atoms = [atom for k in range(len(x_shape)) for atom in by_axis[p1.index(k)]]
    order = [a for d in p2 for a, _ in after[d]]
    position = {a: i for i, (a, _) in enumerate(x_atoms)}
    return tuple(size for _, size in x_atoms), tuple(position[a] for a in order)


def _folds(m: Match) -> str | None:
    result = _permute_reshape_permute(m)
    return result if isinstance(result, str) else None


def fold_permute_reshape_permute(m: Match):
    """permute_dims(reshape(permute_dims(x, p1), s), p2) -> reshape(permute_dims(reshape(x, s'), p), s'')."""
    split, perm = _permute_reshape_permute(m)
    x = m["x"]
    if tuple(split) != tuple(m.sinfo("x").shape):
        x = make_call("reshape", x, ShapeExpr(split))
    y = make_call("permute_dims", x, axes=perm)
    out = tuple(m["outer"].struct_info.shape)
    return y if len(perm) == len(out) and tuple(split[p] for p in perm) == out else \
        make_call("reshape", y, ShapeExpr(out))


def _same_dtype_cast(m: Match) -> str | None:
    have, want = m.sinfo("x").dtype, m["outer"].attrs["dtype"]
    return None if have == want else f"it casts {have} to {want}"


# ---------------------------------------------------------------- constants


def _all_equal(name: str, value: float, what: str):
    def check(m: Match) -> str | None:
        data = m.data(name)
        if data.size and np.all(data == value):
            return None
        return f"{what} {_show(data)} is not all {value:g}"
    return check


def _show(data: np.ndarray) -> str:
    return repr(data.reshape(-1)[0].item()) if data.size == 1 else f"of shape {data.shape}"


def _scalars(*names: str):
    def check(m: Match) -> str | None:
        for name in names:
            data = m.data(name)
            if data.size != 1:
                return f"constant {name} has {data.size} elements, not one"
        return None
    return check


def merge_scalar_multiplies(m: Match):
    """(x * c1) * c2 -> x * (c1 * c2) for one-element constants."""
    c1, c2 = m.data("c1"), m.data("c2")
    wide = np.float64 if c1.dtype.kind == "f" else c1.dtype
    product = np.multiply(c1.astype(wide), c2.astype(wide)).astype(c1.dtype)
    return make_call("multiply", m["x"], Constant(product))


# ---------------------------------------------------------------- GELU


def _near(name: str, value: float, what: str):
    def check(m: Match) -> str | None:
        data = m.data(name)
        if data.size == 1 and math.isclose(float(data.reshape(-1)[0]), value, rel_tol=1e-6):
            return None
        return f"{what} {_show(data)} is not {value:.7g}"
    return check


def _erf_scale_check(m: Match) -> str | None:
    if "sqrt2" in m:
        return _near("sqrt2", math.sqrt(2), "the divisor")(m)
    return _near("rsqrt2", 1 / math.sqrt(2), "the factor")(m)


def compose_gelu(m: Match):
    """x * (erf(x / sqrt(2)) + 1) * 0.5 -> nn.gelu(x) (exact, erf form)."""
    return make_call("nn.gelu", m["x"], approximate="none")


def compose_gelu_tanh(m: Match):
    """x * (tanh(sqrt(2/pi) * (x + 0.044715 * x^3)) + 1) * 0.5 -> nn.gelu(x, approximate="tanh")."""
    return make_call("nn.gelu", m["x"], approximate="tanh")


def compose_silu(m: Match):
    """x * sigmoid(x) -> nn.silu(x)."""
    return make_call("nn.silu", m["x"])


def relu_before_rounding(m: Match):
    """relu(astype(x, float16)) -> astype(relu(x), float16)."""
    return make_call("astype", make_call("nn.relu", m["x"]), dtype=m["cast"].attrs["dtype"])


def _rounds_to_low_float(m: Match) -> str | None:
    have, want = m.sinfo("x").dtype, m["cast"].attrs["dtype"]
    if have in ("float32", "float64") and want in ("float16", "bfloat16"):
        return None
    return f"the cast is {have} to {want}, not float32/float64 to float16/bfloat16"


def _cube_check(m: Match) -> str | None:
    return _near("three", 3.0, "the exponent")(m) if "three" in m else None


def _half_x_times(one_plus):
    """The three groupings of ``x * one_plus * 0.5`` exporters write (the
    multiply by 0.5 outermost, on x first, or on ``one_plus`` first)."""
    return (
        is_op("multiply")(is_op("multiply")(_X, one_plus, name="inner", what="operand", commutative=True),
                          const("half", "the factor"), commutative=True),
        is_op("multiply")(is_op("multiply")(_X, const("half", "the factor"), name="inner", what="operand",
                                            commutative=True),
                          one_plus, commutative=True),
        is_op("multiply")(_X, is_op("multiply")(one_plus, const("half", "the factor"), name="inner",
                                                what="operand", commutative=True),
                          commutative=True),
    )


_ERF = is_op("erf")(
    any_of(is_op("divide")(wildcard("x"), const("sqrt2"), name="scaled", what="erf input"),
           is_op("multiply")(wildcard("x"), const("rsqrt2"), name="scaled", what="erf input",
                             commutative=True)),
    name="erf", what="operand")
_ONE_PLUS_ERF = is_op("add")(_ERF, const("one"), name="one_plus", what="operand", commutative=True)
_GELU_CHECK = all_of(
    float_output, _erf_scale_check, _near("one", 1.0, "the added constant"),
    _near("half", 0.5, "the factor"),
    used_once("scaled", "the erf input"), used_once("erf", "the erf"),
    used_once("one_plus", "erf + 1"), used_once("inner", "the inner product"))

_SCALED_GELU_CHECK = all_of(
    scaled_gelu.divisor_check, _near("one", 1.0, "the added constant"), _near("half", 0.5, "the factor"),
    used_once("scaled", "the erf input"), used_once("erf", "the erf"),
    used_once("one_plus", "erf + 1"), used_once("inner", "the inner product"))

_X = wildcard("x")
_CUBE = any_of(
    is_op("power")(_X, const("three", "the exponent"), name="cube", what="operand"),
    is_op("multiply")(is_op("multiply")(_X, _X, name="square", what="operand"), _X, name="cube",
                      what="operand", commutative=True))
_TANH = is_op("tanh")(
    is_op("multiply")(
        is_op("add")(_X, is_op("multiply")(_CUBE, const("kappa", "the cube's factor"), name="scaled_cube",
                                           what="operand", commutative=True),
                     name="poly", what="operand", commutative=True),
        const("beta", "the factor"), name="scaled", what="tanh input", commutative=True),
    name="tanh", what="operand")
_ONE_PLUS_TANH = is_op("add")(_TANH, const("one"), name="one_plus", what="operand", commutative=True)
_GELU_TANH_CHECK = all_of(
    float_output, _cube_check, _near("kappa", 0.044715, "the cube's factor"),
    _near("beta", math.sqrt(2 / math.pi), "the factor"), _near("one", 1.0, "the added constant"),
    _near("half", 0.5, "the factor"),
    *(used_once(name, what) for name, what in (
        ("square", "x * x"), ("cube", "the cube"), ("scaled_cube", "the scaled cube"),
        ("poly", "x + 0.044715 * x^3"), ("scaled", "the tanh input"), ("tanh", "the tanh"),
        ("one_plus", "tanh + 1"), ("inner", "the inner product"))))
_SILU = is_op("multiply")(_X, is_op("sigmoid")(_X, name="sigmoid", what="operand"), commutative=True)
_GELU_ERF_GROUPINGS = _half_x_times(_ONE_PLUS_ERF)
_GELU_TANH_GROUPINGS = _half_x_times(_ONE_PLUS_TANH)

# ---------------------------------------------------------------- scales folded into weights

#: ops a scale passes through on its way to a product: they move values, never combine them
_LAYOUT_OPS = ("reshape", "permute_dims")
_SCALED_FLOATS = ("float32", "float64")


def _scaled_product(m: Match):
    """Walk from the scaled value through layout ops used once to ``matmul(x, W)`` or
    ``matmul(x, W) + b`` (used once, ``W`` and ``b`` constants): ``(layout calls outermost first,
    the matmul call, the add call or None)``, or the reason there is none."""
    layout, expr = [], m["y"]
    value, uses = m.producer(expr)
    while isinstance(value, Call) and getattr(value.op, "name", None) in _LAYOUT_OPS:
        if uses != 1:
            return f"the {value.op.name} before the scale is used {uses} times"
        layout.append(value)
        value, uses = m.producer(value.args[0])
    if uses != 1:
        return "the product before the scale is used elsewhere (or is not a bound value)"
    add = None
    if isinstance(value, Call) and getattr(value.op, "name", None) == "add":
        if m.constant_of(value.args[0]) is not None:     # bias + matmul(x, W): the importer keeps ONNX's order
            value = make_call("add", value.args[1], value.args[0])
        mm_value, mm_uses = m.producer(value.args[0])
        bias = m.constant_of(value.args[1])
        if not (isinstance(mm_value, Call) and getattr(mm_value.op, "name", None) == "matmul") or bias is None:
            return "the add before the scale is not matmul + constant"
        if mm_uses != 1:
            return "the matmul before the bias is used elsewhere"
        add, value = value, mm_value
    if not (isinstance(value, Call) and getattr(value.op, "name", None) == "matmul"):
        return "no matmul under the layout ops before the scale"
    if value.attrs.get("out_dtype") is not None:
        return "the matmul has an output dtype of its own"
    weight = m.constant_of(value.args[1])
    if weight is None or weight.ndim != 2:
        return "the matmul's weight is not a constant matrix"
    return tuple(layout), value, add


def _scale_folds(m: Match) -> str | None:
    c = m.data("c")
    if c.size != 1 or c.ndim > len(m.sinfo("y").shape or ()):
        return f"the factor has {c.size} elements or more dims than the scaled value"
    if str(c.dtype) not in _SCALED_FLOATS + ("float16",):
        return f"the factor is {c.dtype}, not float16/float32/float64"
    found = _scaled_product(m)
    if isinstance(found, str):
        return found
    if c.dtype == np.float16:
        return _exact_float16_scale(m, c, found)
    return None


def _exact_float16_scale(m: Match, c: np.ndarray, found) -> str | None:
    """None when a float16 ``c`` is a power of two that scales the weight (and bias) without
    overflow. The float16 product rounds once from float32 (the matmul kernel) and rounding
    commutes with a power-of-two scale, so ``round(x @ W) * c`` is ``round(x @ (W * c))``, except
    in float16's subnormal range: a subnormal weight entry may lose its last bit (2**-25, far
    below the float32 accumulation's own noise on the product) and a subnormal result may differ
    by one subnormal ulp (2**-24)."""
    factor = float(c.reshape(-1)[0])
    if not (math.isfinite(factor) and factor != 0 and math.frexp(abs(factor))[0] == 0.5):
        return f"the float16 factor {factor} is not a power of two"
    _, mm, add = found
    for bound in (m.constant_of(mm.args[1]), None if add is None else m.constant_of(add.args[1])):
        if bound is not None and np.any(np.isfinite(bound) & (np.abs(bound.astype(np.float64) * factor) >= 65520)):
            return "the float16 weight or bias times the factor overflows"    # 65520 rounds to inf
    return None


def _times(data: np.ndarray, c: np.ndarray) -> Constant:
    """``data * c`` computed in float64 and rounded once to ``data``'s dtype."""
    return Constant((data.astype(np.float64) * float(c.reshape(-1)[0])).astype(data.dtype))


def fold_scale_into_weight(m: Match):
    """layout(matmul(x, W) [+ b]) * c -> layout(matmul(x, W * c) [+ b * c]) for a one-element c:
    attention's query and key scales (torch.onnx writes sqrt(1 / sqrt(d)) on both) become part of
    the projection weights, two kernel calls fewer per attention."""
    layout, mm, add = _scaled_product(m)
    c = m.data("c")
    y = make_call("matmul", mm.args[0], _times(m.constant_of(mm.args[1]), c), **dict(mm.attrs))
    if add is not None:
        y = make_call("add", y, _times(m.constant_of(add.args[1]), c))
    for op in reversed(layout):
        y = make_call(op.op.name, y, *op.args[1:], **dict(op.attrs))
    return y


# ---------------------------------------------------------------- softmax with its NaN guard


def compose_safe_softmax(m: Match):
    """where(isnan(softmax(x)), 0, softmax(x)) -> nn.safe_softmax(x): one kernel call, which
    checks for NaN only where the softmax can make one (an all -inf row)."""
    return make_call("nn.safe_softmax", m["x"], axis=m["sm"].attrs["axis"])


def _tests_itself(m: Match) -> str | None:
    tested = m["tested"]
    return None if tested is m.var("sm") else f"the NaN test reads {m.name_of('tested')}, not the softmax"


_SAFE_SOFTMAX = is_op("where")(
    is_op("isnan")(wildcard("tested"), name="isnan", what="condition"),
    const("zero", "the value for NaN"), is_op("nn.softmax")(_X, name="sm", what="value"))

# ---------------------------------------------------------------- the table

RULES = RewriteTable("SimplifyAlgebra", [
    Rule("merge_permute_dims",
         is_op("permute_dims")(is_op("permute_dims")(_X, name="inner", what="operand"), name="outer"),
         _known_rank("x"), merge_permute_dims),
    Rule("remove_identity_permute",
         is_op("permute_dims")(_X, name="outer"),
         all_of(_known_rank("x"), _is_identity_permute, same_type_as_output("x")),
         remove_identity, doc="permute_dims(x, (0, 1, ...)) -> x."),
    Rule("merge_reshapes",
         is_op("reshape")(is_op("reshape")(_X, wildcard(), name="inner", what="operand"),
                          wildcard("shape"), name="outer"),
         None, merge_reshapes),
    Rule("fold_permute_reshape_permute",
         is_op("permute_dims")(is_op("reshape")(is_op("permute_dims")(_X, name="p1", what="operand"),
                                                wildcard(), name="mid", what="operand"), name="outer"),
         all_of(used_once("p1", "the inner transpose"), used_once("mid", "the reshape"), _folds),
         fold_permute_reshape_permute),
    Rule("fold_reshape_permute_reshape",
         is_op("reshape")(is_op("permute_dims")(is_op("reshape")(_X, wildcard(), name="first", what="operand"),
                                                name="perm", what="operand"), wildcard(), name="outer"),
         all_of(used_once("first", "the first reshape"), used_once("perm", "the transpose"),
                reshape_permute_reshape.check),
         reshape_permute_reshape.rewrite),
    Rule("remove_identity_reshape",
         is_op("reshape")(_X, wildcard(), name="outer"),
         same_type_as_output("x"),
         remove_identity, doc="reshape(x, s) -> x when s is provably x's shape."),
    Rule("remove_identity_astype",
         is_op("astype")(_X, name="outer"),
         _same_dtype_cast,
         remove_identity, doc="astype(x, dtype) -> x when x is already of dtype."),
    Rule("remove_identity_broadcast",
         is_op("broadcast_to")(_X, wildcard(), name="outer"),
         same_type_as_output("x"),
         remove_identity, doc="broadcast_to(x, s) -> x when s is provably x's shape."),
    Rule("constant_not_broadcast",
         is_op(*broadcast_constant.OPS)(
             _X, is_op("broadcast_to")(const("c", "the broadcast value"), wildcard(), name="b",
                                       what="the other operand"),
             name="op", commutative=True),
         broadcast_constant.check, broadcast_constant.rewrite),
    Rule("transpose_of_broadcast_constant",
         is_op("permute_dims")(is_op("broadcast_to")(const("c", "the broadcast value"), wildcard(), name="b",
                                                     what="operand"), name="perm"),
         all_of(used_once("b", "the broadcast"), permute_broadcast_constant.check_broadcast),
         permute_broadcast_constant.rewrite_broadcast),
    Rule("transpose_of_reshaped_broadcast_constant",
         is_op("permute_dims")(is_op("reshape")(is_op("broadcast_to")(const("c", "the broadcast value"), wildcard(),
                                                                      name="b", what="operand"),
                                                wildcard(), name="mid", what="operand"), name="perm"),
         all_of(used_once("b", "the broadcast"), used_once("mid", "the reshape"),
                permute_broadcast_constant.check_reshaped),
         permute_broadcast_constant.rewrite_reshaped),
    Rule("remove_add_zero",
         is_op("add")(_X, const("c", "the other operand"), commutative=True),
         all_of(_all_equal("c", 0, "constant"), same_type_as_output("x")),
         remove_identity, doc="x + 0 -> x, 0 + x -> x (when 0 does not broadcast x)."),
    Rule("remove_subtract_zero",
         is_op("subtract")(_X, const("c", "the subtrahend")),
         all_of(_all_equal("c", 0, "constant"), same_type_as_output("x")),
         remove_identity, doc="x - 0 -> x (when 0 does not broadcast x)."),
    Rule("remove_multiply_one",
         is_op("multiply")(_X, const("c", "the other operand"), commutative=True),
         all_of(_all_equal("c", 1, "constant"), same_type_as_output("x")),
         remove_identity, doc="x * 1 -> x, 1 * x -> x (when 1 does not broadcast x)."),
    Rule("remove_divide_one",
         is_op("divide")(_X, const("c", "the divisor")),
         all_of(_all_equal("c", 1, "constant"), same_type_as_output("x")),
         remove_identity, doc="x / 1 -> x (when 1 does not broadcast x)."),
    Rule("remove_double_negation",
         is_op("negative")(is_op("negative")(_X, what="operand")),
         same_type_as_output("x"),
         remove_identity, doc="negative(negative(x)) -> x."),
    Rule("merge_scalar_multiplies",
         is_op("multiply")(is_op("multiply")(_X, const("c1", "the inner factor"), name="inner",
                                             what="operand", commutative=True),
                           const("c2", "the outer factor"), commutative=True),
         all_of(_scalars("c1", "c2"), same_type_as_output("x")),
         merge_scalar_multiplies),
    Rule("fold_scale_into_weight",
         is_op("multiply")(wildcard("y"), const("c", "the factor"), commutative=True),
         all_of(_scale_folds, same_type_as_output("y")),
         fold_scale_into_weight),
    Rule("fold_scales_into_conv",
         is_op("divide")(is_op("nn.conv_bias_act")(..., name="conv", what="the dividend"), const("c", "the divisor")),
         all_of(used_once("conv", "the conv output"), same_type_as_output("conv"), scales_into_conv.check),
         scales_into_conv.rewrite,
         doc="divide(nn.conv_bias_act(x, W, b), c) -> nn.conv_bias_act(x, W / c, b / c) (scales_into_conv.py)."),
    Rule("fold_input_scale_into_conv",
         is_op("nn.conv_bias_act")(is_op("multiply")(wildcard("q"), const("c", "the factor"), name="scale",
                                                     what="the data", commutative=True), ..., name="conv"),
         all_of(used_once("scale", "the scaled input"), scales_into_conv.check_input),
         scales_into_conv.rewrite_input,
         doc="nn.conv_bias_act(q * c, W, b) -> nn.conv_bias_act(q, W * c, b) (scales_into_conv.py)."),
    Rule("offset_range",
         is_op("add")(is_op("range")(wildcard(), wildcard(), wildcard(), name="range", what="an operand"),
                      is_op("shape_to_tensor")(wildcard(), name="offset", what="the other operand"),
                      commutative=True),
         offset_range.check, offset_range.rewrite),
    Rule("scale_after_matmul",
         is_op("matmul")(wildcard("a"), wildcard("b"), name="mm"),
         scale_after_matmul.check, scale_after_matmul.rewrite),
    Rule("gather_nd_of_iotas",
         is_op("gather_nd")(wildcard("data"), is_op("concat")(wildcard("parts"), name="concat", what="indices"),
                            name="gather"),
         gather_check, gather_as_reshape,
         doc="gather_nd(data, concat(iotas along output axes)) -> reshape(data) (iota_gather.py)."),
    Rule("take_of_row_major_iotas",
         is_op("take")(wildcard("data"), is_op("add")(wildcard(), wildcard(), name="index", what="the indices"),
                       name="take"),
         row_major_take.check, row_major_take.rewrite,
         doc="take(data, iota_b * S + iota_s, axis=0) of B * S rows -> reshape(data) (row_major_take.py)."),
    Rule("label_of_iota_table",
         is_op("astype")(_X, name="outer"),
         iota_label.check, iota_label.rewrite,
         doc="astype(take(arange(n), argmax(p)) reshaped, int64) -> argmax(p) reshaped (iota_label.py)."),
    Rule("take_of_iota_table",
         is_op("take")(wildcard(), wildcard(), name="outer"),
         iota_label.check, iota_label.rewrite,
         doc="take(arange(n) of the index's dtype, argmax(p)) -> argmax(p) (iota_label.py)."),
    Rule("reduce_of_one_element_concat",
         is_op("max", "min")(is_op("concat")(wildcard("parts"), name="concat", what="operand"), name="reduce"),
         reduce_of_concat_check, reduce_of_concat,
         doc="max(concat((a, b))) of (1,) tensors -> maximum(a, b) (min too; reduce_of_concat.py)."),
    Rule("gather_nd_of_one_component",
         is_op("gather_nd")(wildcard("data"), wildcard("indices"), name="gather"),
         gather_nd_take.check, gather_nd_take.rewrite),
    Rule("compose_gelu", _GELU_ERF_GROUPINGS[0], _GELU_CHECK, compose_gelu),
    Rule("compose_gelu_half_first", _GELU_ERF_GROUPINGS[1],
         _GELU_CHECK, compose_gelu, doc="(x * 0.5) * (erf(x / sqrt(2)) + 1) -> nn.gelu(x)."),
    Rule("compose_gelu_half_inside", _GELU_ERF_GROUPINGS[2],
         _GELU_CHECK, compose_gelu, doc="x * ((erf(x / sqrt(2)) + 1) * 0.5) -> nn.gelu(x)."),
    *(Rule(f"compose_scaled_gelu{suffix}", grouping, _SCALED_GELU_CHECK, scaled_gelu.rewrite,
           doc="x * (erf(x / c) + 1) * 0.5, c sqrt(2) rounded to float16 -> nn.gelu(x * s) / s in float32 "
               "(scaled_gelu.py).")
      for suffix, grouping in zip(("", "_half_first", "_half_inside"), _GELU_ERF_GROUPINGS)),
    Rule("compose_gelu_tanh", _GELU_TANH_GROUPINGS[0], _GELU_TANH_CHECK, compose_gelu_tanh),
    Rule("compose_gelu_tanh_half_first", _GELU_TANH_GROUPINGS[1], _GELU_TANH_CHECK, compose_gelu_tanh,
         doc="(x * 0.5) * (tanh(sqrt(2/pi) * (x + 0.044715 x^3)) + 1) -> nn.gelu(x, approximate=\"tanh\")."),
    Rule("compose_gelu_tanh_half_inside", _GELU_TANH_GROUPINGS[2], _GELU_TANH_CHECK, compose_gelu_tanh,
         doc="x * ((tanh(sqrt(2/pi) * (x + 0.044715 x^3)) + 1) * 0.5) -> nn.gelu(x, approximate=\"tanh\")."),
    Rule("compose_silu", _SILU, float_output, compose_silu),
    Rule("compose_safe_softmax", _SAFE_SOFTMAX,
         all_of(_tests_itself, _all_equal("zero", 0, "the value for NaN"), used_once("isnan", "the NaN test"),
                same_type_as_output("sm")),
         compose_safe_softmax),
    Rule("relu_before_rounding",
         is_op("nn.relu")(is_op("astype")(_X, name="cast", what="operand")),
         all_of(used_once("cast", "the cast"), _rounds_to_low_float),
         relu_before_rounding),
    *QUANTIZE_RULES,
])


@function_pass(name="SimplifyAlgebra", opt_level=2, requires=("import", "optimize"), produces="optimize")
def simplify_algebra(func, mod, ctx):
    """Collapse permute/reshape chains, remove identities, merge scalar
    multiplies, recognize GELU (erf and tanh forms) and SiLU, drop quantized values' round trips
    through their integer types (:mod:`.quantize_rules`); the rules are listed in the module
    docstring and by ``RULES.describe()``."""
    return RULES.apply(func)

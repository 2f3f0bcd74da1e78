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

from ..ir.expr import Constant, ShapeExpr
from ..ops.registry import make_call
from .core.infra import function_pass
from .quantize_rules import RULES as QUANTIZE_RULES
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
            return None
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
    Rule("compose_gelu", _GELU_ERF_GROUPINGS[0], _GELU_CHECK, compose_gelu),
    Rule("compose_gelu_half_first", _GELU_ERF_GROUPINGS[1],
         _GELU_CHECK, compose_gelu, doc="(x * 0.5) * (erf(x / sqrt(2)) + 1) -> nn.gelu(x)."),
    Rule("compose_gelu_half_inside", _GELU_ERF_GROUPINGS[2],
         _GELU_CHECK, compose_gelu, doc="x * ((erf(x / sqrt(2)) + 1) * 0.5) -> nn.gelu(x)."),
    Rule("compose_gelu_tanh", _GELU_TANH_GROUPINGS[0], _GELU_TANH_CHECK, compose_gelu_tanh),
    Rule("compose_gelu_tanh_half_first", _GELU_TANH_GROUPINGS[1], _GELU_TANH_CHECK, compose_gelu_tanh,
         doc="(x * 0.5) * (tanh(sqrt(2/pi) * (x + 0.044715 x^3)) + 1) -> nn.gelu(x, approximate=\"tanh\")."),
    Rule("compose_gelu_tanh_half_inside", _GELU_TANH_GROUPINGS[2], _GELU_TANH_CHECK, compose_gelu_tanh,
         doc="x * ((tanh(sqrt(2/pi) * (x + 0.044715 x^3)) + 1) * 0.5) -> nn.gelu(x, approximate=\"tanh\")."),
    Rule("compose_silu", _SILU, float_output, compose_silu),
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

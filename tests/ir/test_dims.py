"""The symbolic dim algebra: canonical forms, text, evaluation, range analysis."""

import ast
import copy
import operator
import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from relaxpack.errors import DimError
from relaxpack.ir.dims import (
    DimAnalyzer, DimExpr, dim_max, dim_min, evaluate, format_dim, free_vars, from_ast, is_static,
    normalize, parse_dim, substitute, sym,
)

n, m, k = sym("n"), sym("m"), sym("k")


# --- canonical forms ------------------------------------------------------------

@pytest.mark.parametrize("a, b", [
    (2 * n + n, 3 * n),
    (n * m, m * n),
    ((n + 1) * (n + 1), n * n + 2 * n + 1),
    ((n + m) - m, n),
    (n * (m + k), n * m + n * k),
    ((n + m) * (n - m), n ** 2 - m ** 2),
    (1 + n, n + 1),
    (-(-n), n),
    (n + n + n - 3 * n + m, m),
    (n * 2 * m, 2 * (m * n)),
    ((n + 1) ** 3, n ** 3 + 3 * n ** 2 + 3 * n + 1),
    (dim_min(n, m), dim_min(m, n)),
    (dim_max(n + 1, 2 * m), dim_max(2 * m, 1 + n)),
    ((n + 3) // 2, (n + 1) // 2 + 1),
    ((n - 3) // 2 + 1, (n - 1) // 2),
])
def test_canonical_equality(a, b):
    assert a == b
    assert hash(a) == hash(b)
    assert format_dim(a) == format_dim(b)


def test_distinct_expressions_differ():
    assert n != m and n + 1 != n and n * n != 2 * n and n // 2 != n % 2
    assert dim_min(n, m) != dim_max(n, m)
    assert len({n, m, n + 0, 1 * m, n * m, m * n}) == 3


@pytest.mark.parametrize("expr, value", [
    (n - n, 0), ((n + 1) - n, 1), (n * 0, 0), (0 * n + 5, 5), ((n + 2) * 3 - 3 * n, 6),
    (n ** 0, 1), (n % 1, 0), ((6 * n) % 3, 0), ((4 * n + 8) % 4, 0),
])
def test_constants_normalize_to_int(expr, value):
    assert type(expr) is int and expr == value


def test_dimexpr_never_equals_int_and_is_not_an_int():
    assert sym("n") != 3 and (n - n + 3) == 3
    with pytest.raises(TypeError):
        int(n)
    with pytest.raises(TypeError):
        operator.index(n)
    with pytest.raises(TypeError):
        range(n)


def test_pickle_and_copy_keep_equality():
    e = dim_min(n, 4) * (m + 1) // 3
    for back in (pickle.loads(pickle.dumps(e)), copy.deepcopy(e)):
        assert back == e and hash(back) == hash(e)


def test_numpy_integers_mix_with_dims():
    assert np.int64(2) * n == 2 * n and type(np.int64(2) * n) is DimExpr
    assert n + np.int32(1) == n + 1
    assert normalize(np.int64(7)) == 7 and type(normalize(np.int64(7))) is int


@pytest.mark.parametrize("bad", [True, 1.0, "n", None, [1]])
def test_normalize_rejects_non_dims(bad):
    with pytest.raises(DimError):
        normalize(bad)


@pytest.mark.parametrize("name", ["1n", "a b", "if", "", "n-1", 3])
def test_sym_rejects_bad_names(name):
    with pytest.raises(DimError):
        sym(name)


def test_free_vars_and_is_static():
    assert free_vars(n * m + 1) == {"n", "m"}
    assert free_vars(dim_min(n, 4) + (k + 1) // 2) == {"n", "k"}
    assert free_vars(7) == frozenset()
    assert is_static(3) and is_static(np.int64(3)) and not is_static(n) and not is_static(True)


# --- division, modulo, min, max ----------------------------------------------------

@pytest.mark.parametrize("expr, expected", [
    ((4 * n + 2) // 2, 2 * n + 1),
    ((2 * n) // 2, n),
    ((2 * n + 1) // 2, n),
    ((6 * n + m) // 3, 2 * n + m // 3),
    (n // 1, n),
    ((n // 2) // 3, n // 6),
    ((2 * n + 2) // 4, (n + 1) // 2),
    ((n % 4) // 4, 0),
    ((n % 4 + 3) // 7, 0),
    ((2 * n + 1) % 2, 1),
    ((3 * n) % 2, n % 2),
    ((n % 8) % 4, n % 4),
    ((n % 2) % 4, n % 2),
    ((2 * n + 2) % 4, 2 * ((n + 1) % 2)),
    ((6 * n * m) % 3, 0),
    ((n + 7) % 5, (n + 2) % 5),
])
def test_division_rules(expr, expected):
    assert expr == expected


@pytest.mark.parametrize("env", [{"n": v, "m": w} for v in range(-9, 10) for w in (-4, 0, 3)])
def test_division_rules_hold_for_negative_values(env):
    # the rules must hold for every integer, not only for dims >= 0
    for expr, direct in [
        ((2 * n + 1) // 2, lambda v, w: (2 * v + 1) // 2),
        ((n - 3) // 2 + 1, lambda v, w: (v - 3) // 2 + 1),
        ((n // 2) // 3, lambda v, w: (v // 2) // 3),
        ((6 * n + m) // 4, lambda v, w: (6 * v + w) // 4),
        ((-n) // 2, lambda v, w: (-v) // 2),
        ((-n) % 3, lambda v, w: (-v) % 3),
        ((2 * n + 2) % 4, lambda v, w: (2 * v + 2) % 4),
        ((n % 8) % 4, lambda v, w: (v % 8) % 4),
    ]:
        assert evaluate(expr, env) == direct(env["n"], env["m"]), format_dim(expr)


@pytest.mark.parametrize("op", [
    lambda: n // m, lambda: n % m, lambda: n // 0, lambda: n % 0, lambda: n // -2,
    lambda: n % -3, lambda: 6 // n, lambda: 6 % n, lambda: n ** -1, lambda: n ** m,
])
def test_division_errors(op):
    with pytest.raises(DimError):
        op()


def test_min_max_folding():
    assert dim_min(3, 5) == 3 and dim_max(3, 5) == 5
    assert dim_min(n, n) == n and dim_max(n * m, m * n) == n * m
    assert dim_min(n, n + 1) == n and dim_max(n, n + 1) == n + 1
    assert dim_min(n - 2, n) == n - 2
    assert dim_max(n % 3, 2) == 2 and dim_min(n % 3, 5) == n % 3
    assert isinstance(dim_min(n, 16), DimExpr)  # n may exceed 16: no ranges here
    assert dim_min(n, 16) == dim_min(16, n) and hash(dim_min(n, 16)) == hash(dim_min(16, n))


# --- evaluation and substitution -----------------------------------------------------

def test_evaluate_and_substitute():
    e = dim_min(n, 16) * m + (n + 1) // 2
    assert evaluate(e, {"n": 5, "m": 3}) == 5 * 3 + 3
    assert evaluate(e, {"n": 40, "m": 3}) == 16 * 3 + 20
    assert substitute(e, {"n": 5, "m": 3}) == 18
    assert substitute(e, {"m": k + 1}) == dim_min(n, 16) * k + dim_min(n, 16) + (n + 1) // 2
    assert substitute(n * m, {"n": m}) == m * m
    assert substitute(7, {"n": 1}) == 7


def test_evaluate_missing_var_names_it():
    with pytest.raises(DimError, match="'m'"):
        evaluate(n + m, {"n": 1})


# --- text -----------------------------------------------------------------------------

@pytest.mark.parametrize("expr, text", [
    (2 * n + 1, "2 * n + 1"),
    (sym("batch") * sym("seq"), "batch * seq"),
    (n // 2, "n // 2"),
    ((n + 1) // 2, "(n + 1) // 2"),
    (dim_min(n, 16), "min(n, 16)"),
    (dim_max(n, m), "max(m, n)"),
    (n * n, "n ** 2"),
    (n - 1, "n - 1"),
    (4 - n, "-n + 4"),
    (-(n // 2), "-(n // 2)"),
    (m - n // 2, "m - n // 2"),
    (2 * (n % 3), "2 * (n % 3)"),
    (m * (n // 2) ** 2, "m * (n // 2) ** 2"),
    (n * n * m - 3 * m + 2, "m * n ** 2 - 3 * m + 2"),
    ((-n) // 2, "(-n) // 2"),
    (dim_min(n, 16) // 4, "min(n, 16) // 4"),
    (-7, "-7"),
])
def test_format(expr, text):
    assert format_dim(expr) == text
    assert str(expr) == text
    assert parse_dim(text) == expr


def test_repr():
    assert repr(2 * n + 1) == "DimExpr('2 * n + 1')"


@pytest.mark.parametrize("text, expected", [
    ("n*2+n", 3 * n),
    ("  (n + 1) * (n - 1) ", n * n - 1),
    ("T.min(n, 4) + T.max(m, 2)", dim_min(n, 4) + dim_max(m, 2)),
    ("min(n, m, 3)", dim_min(dim_min(n, m), 3)),
    ("2 ** 3 * -n + +m", -8 * n + m),
    ("n % 4 // 3", (n % 4) // 3),
    ("12", 12),
])
def test_parse(text, expected):
    assert parse_dim(text) == expected


@pytest.mark.parametrize("text", [
    "1.5", "n / 2", "foo(n)", "a.b", "'n'", "n ** 1.0", "n ** -1", "n // m", "n +", "min(n)",
    "min(n, m, key=3)", "n < 3", "[n]", "True", "n ** m", "abs(n)", "T.foo(n, 1)", "n\x00",
])
def test_parse_errors_quote_the_text(text):
    with pytest.raises(DimError) as info:
        parse_dim(text)
    assert repr(text) in str(info.value)


def test_from_ast_with_lookup():
    node = ast.parse("x * 2 + y", mode="eval").body
    assert from_ast(node) == sym("x") * 2 + sym("y")
    assert from_ast(node, {"x": n, "y": 3}.__getitem__) == 2 * n + 3


# --- properties ---------------------------------------------------------------------------

NAMES = ("a", "b", "c")
_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "//": operator.floordiv,
        "%": operator.mod}

trees = st.recursive(
    st.integers(-6, 6) | st.sampled_from(NAMES),
    lambda kids: st.tuples(st.sampled_from(["+", "-", "*", "min", "max"]), kids, kids)
    | st.tuples(st.sampled_from(["//", "%"]), kids, st.integers(1, 5)),
    max_leaves=10,
)
envs = st.fixed_dictionaries({name: st.integers(-20, 20) for name in NAMES})


def run(tree, leaf, minimum, maximum):
    """Evaluate a tree with the given leaf function and min/max."""
    if not isinstance(tree, tuple):
        return leaf(tree)
    op, x, y = tree
    x = run(x, leaf, minimum, maximum)
    y = y if op in ("//", "%") else run(y, leaf, minimum, maximum)
    if op == "min":
        return minimum(x, y)
    if op == "max":
        return maximum(x, y)
    return _OPS[op](x, y)


def build(tree):
    return run(tree, lambda t: t if isinstance(t, int) else sym(t), dim_min, dim_max)


def direct(tree, env):
    return run(tree, lambda t: t if isinstance(t, int) else env[t], min, max)


@settings(max_examples=300, deadline=None)
@given(trees, envs)
def test_built_expressions_evaluate_like_python(tree, env):
    e = build(tree)
    assert evaluate(e, env) == direct(tree, env)


@settings(max_examples=300, deadline=None)
@given(trees, envs)
def test_format_parse_round_trip(tree, env):
    e = build(tree)
    back = parse_dim(format_dim(e))
    assert back == e and hash(back) == hash(e)
    assert evaluate(back, env) == evaluate(e, env)


@settings(max_examples=200, deadline=None)
@given(trees, trees, st.sampled_from(NAMES), envs)
def test_substitute_is_evaluation_with_substituted_value(tree, tree2, name, env):
    e, e2 = build(tree), build(tree2)
    expected = evaluate(e, {**env, name: evaluate(e2, env)})
    assert evaluate(substitute(e, {name: e2}), env) == expected


# --- range analysis ---------------------------------------------------------------------------

def test_analyzer_ranges():
    ana = DimAnalyzer({"seq": (1, 512)})
    assert ana.range_of("seq") == (1, 512) and ana.range_of("other") == (0, None)
    ana.set_range("n", 2, None)
    assert ana.range_of("n") == (2, None)
    ana.set_range("k", np.int64(1), np.int32(4))
    assert ana.range_of("k") == (1, 4) and type(ana.range_of("k")[0]) is int
    for bad in [(5, 4), (1.0, 2), (0, "8"), (True, 3)]:
        with pytest.raises(DimError):
            ana.set_range("n", *bad)
    with pytest.raises(DimError):
        DimAnalyzer({"bad name": (0, 1)})


def test_analyzer_bounds():
    seq = sym("seq")
    ana = DimAnalyzer({"seq": (1, 512), "n": (2, 8)})
    assert (ana.lower_bound(seq), ana.upper_bound(seq)) == (1, 512)
    assert (ana.lower_bound(2 * seq - 1), ana.upper_bound(2 * seq - 1)) == (1, 1023)
    assert (ana.lower_bound(seq * n), ana.upper_bound(seq * n)) == (2, 4096)
    assert (ana.lower_bound(-seq), ana.upper_bound(-seq)) == (-512, -1)
    assert (ana.lower_bound(seq // 2), ana.upper_bound(seq // 2)) == (0, 256)
    assert (ana.lower_bound(n % 16), ana.upper_bound(n % 16)) == (2, 8)
    assert (ana.lower_bound(seq % 16), ana.upper_bound(seq % 16)) == (0, 15)
    assert (ana.lower_bound(dim_min(seq, n)), ana.upper_bound(dim_min(seq, n))) == (1, 8)
    assert (ana.lower_bound(dim_max(seq, n)), ana.upper_bound(dim_max(seq, n))) == (2, 512)
    assert (ana.lower_bound(m), ana.upper_bound(m)) == (0, None)      # default range
    assert (ana.lower_bound(n - m), ana.upper_bound(n - m)) == (None, 8)
    assert ana.lower_bound(m * m - 3) == -3


def test_analyzer_bounds_with_negative_ranges():
    ana = DimAnalyzer({"n": (-3, 2), "m": (-5, -2)})
    assert (ana.lower_bound(n * n), ana.upper_bound(n * n)) == (0, 9)
    assert (ana.lower_bound(m ** 2), ana.upper_bound(m ** 2)) == (4, 25)
    assert (ana.lower_bound(n ** 3), ana.upper_bound(n ** 3)) == (-27, 8)
    assert (ana.lower_bound(n * m), ana.upper_bound(n * m)) == (-10, 15)
    assert (ana.lower_bound(n % 5), ana.upper_bound(n % 5)) == (0, 4)   # -1 % 5 == 4
    assert (ana.lower_bound(m % 8), ana.upper_bound(m % 8)) == (3, 6)
    assert (ana.lower_bound(n // 2), ana.upper_bound(n // 2)) == (-2, 1)


def test_analyzer_proofs():
    seq = sym("seq")
    ana = DimAnalyzer({"seq": (1, 512), "n": (2, 8)})
    assert ana.prove_le(seq, 512) and ana.prove_lt(seq, 513) and not ana.prove_lt(seq, 512)
    assert ana.prove_ge(seq, 1) and ana.prove_gt(seq, 0) and not ana.prove_gt(seq, 1)
    assert ana.prove_nonneg(m) and not ana.prove_nonneg(m - 1)
    assert ana.prove_ge(seq * n, 2) and not ana.prove_ge(seq * m, 1)
    assert ana.prove_gt(seq + 600 + seq % 4, n * 64) and ana.prove_ge(2 * seq, seq)
    assert not ana.prove_gt(seq, seq // 2 + 1)                # seq == 1 is a counterexample
    assert ana.prove_equal(2 * n + n, 3 * n) and ana.prove_equal(dim_min(seq, 512), seq)
    assert ana.prove_equal(n // 16, 0) and ana.prove_equal(seq % 1024, seq)
    assert not ana.prove_equal(seq, n) and not ana.prove_equal(seq // 2, 0)
    assert ana.prove_equal(3, 3) and not ana.prove_equal(3, 4)
    assert not DimAnalyzer().prove_le(seq, 512)


def test_analyzer_simplify():
    seq = sym("seq")
    ana = DimAnalyzer({"seq": (1, 512), "n": (2, 8)})
    assert ana.simplify(dim_min(seq, 512)) == seq
    assert ana.simplify(dim_max(seq, 1024)) == 1024
    assert ana.simplify(dim_min(seq, n)) == dim_min(seq, n)
    assert ana.simplify(n // 16 + n % 16) == n
    assert ana.simplify((n + 7) // 8) == 1 and ana.simplify((n + 7) % 16) == n + 7
    assert ana.simplify((n + 8) // 8) == n // 8 + 1          # n == 8 reaches the next block
    assert ana.simplify(m * dim_min(n, 9)) == m * n
    assert ana.simplify(7) == 7


@settings(max_examples=300, deadline=None)
@given(trees, trees, st.data())
def test_analyzer_is_sound(tree, tree2, data):
    ranges, env = {}, {}
    for name in NAMES:
        lo = data.draw(st.integers(-6, 6))
        hi = data.draw(st.none() | st.integers(lo, lo + 8))
        if data.draw(st.booleans()):
            ranges[name] = (lo, hi)
        else:
            lo, hi = 0, None                       # undeclared: a dim >= 0
        env[name] = data.draw(st.integers(lo, lo + 30 if hi is None else hi))
    ana = DimAnalyzer(ranges)
    e, f = build(tree), build(tree2)
    v, w = evaluate(e, env), evaluate(f, env)
    lo, hi = ana.lower_bound(e), ana.upper_bound(e)
    assert lo is None or lo <= v
    assert hi is None or v <= hi
    assert evaluate(ana.simplify(e), env) == v
    assert not ana.prove_nonneg(e) or v >= 0
    assert not ana.prove_le(e, f) or v <= w
    assert not ana.prove_lt(e, f) or v < w
    assert not ana.prove_equal(e, f) or v == w

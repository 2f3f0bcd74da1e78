"""SimplifyAlgebra's fold_reshape_permute_reshape and gather_nd_of_one_component: the dynamo
exporter's spellings of a key transpose and of an embedding lookup become the TorchScript ones."""

from __future__ import annotations

from relaxpack.ir import parse
from relaxpack.passes.core.rules import explain
from relaxpack.passes.simplify_algebra import simplify_algebra

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, program, with_dce

KEY = 'k: R.Tensor(("b", 2, "s", 16), "float32")'


def _key_transpose(first: str = "R.shape([-1, s, 16])", axes: str = "(0, 2, 1)",
                   last: str = "R.shape([b, 2, 16, s])") -> str:
    return f"""
r = R.reshape(k, {first})
t = R.permute_dims(r, axes={axes})
out = R.reshape(t, {last})
return out
"""


def test_the_dynamo_key_transpose_is_one_transpose():
    """reshape(k, (2b, s, 16)) -> (0, 2, 1) -> reshape(b, 2, 16, s): k's last two axes swapped."""
    before = program(KEY, '("b", 2, 16, "s")', _key_transpose(), dims=("b", "s"))
    expected = program(KEY, '("b", 2, 16, "s")', """
out = R.permute_dims(k, axes=(0, 1, 3, 2))
return out
""", dims=("b", "s"))
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, [{"b": 1, "s": 5}, {"b": 3, "s": 1}, {"b": 2, "s": 0}])


def test_static_groups_fold_and_a_whole_merge_round_trip_is_the_identity():
    """Static (2, 3) merged, the merged axis moved last, split again; a transpose that keeps
    the merged axis first is no transpose at all."""
    params = 'x: R.Tensor((2, 3, 4), "float32")'
    before = program(params, "(4, 2, 3)", """
r = R.reshape(x, R.shape([6, 4]))
t = R.permute_dims(r, axes=(1, 0))
out = R.reshape(t, R.shape([4, 2, 3]))
return out
""", dims=())
    expected = program(params, "(4, 2, 3)", """
out = R.permute_dims(x, axes=(2, 0, 1))
return out
""", dims=())
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, [{}])
    same = program(params, "(2, 3, 4)", """
r = R.reshape(x, R.shape([6, 4]))
t = R.permute_dims(r, axes=(0, 1))
out = R.reshape(t, R.shape([2, 3, 4]))
return out
""", dims=())
    identity = program(params, "(2, 3, 4)", "out = x\nreturn out", dims=())
    assert_rewrites(with_dce(simplify_algebra), same, identity)


def test_chains_that_are_not_one_transpose_stay():
    """An axis split by the first reshape and its parts moved apart; a last reshape that merges
    axes (the result is not x's shape permuted); the transpose used twice: unchanged, and why."""
    params = 'x: R.Tensor((4, 6), "float32")'
    split_apart = program(params, "(3, 8)", """
r = R.reshape(x, R.shape([4, 2, 3]))
t = R.permute_dims(r, axes=(2, 0, 1))
out = R.reshape(t, R.shape([3, 8]))
return out
""", dims=())
    assert_unchanged(simplify_algebra, split_apart)
    assert dict(explain(parse(split_apart), "fold_reshape_permute_reshape"))["out"] == \
        "axis 1 of x does not stay one run of its parts"
    merged = program(KEY, '("b", 32, "s")', _key_transpose(last="R.shape([b, 32, s])"), dims=("b", "s"))
    assert_unchanged(simplify_algebra, merged)
    assert "permuted by (0, 1, 3, 2)" in dict(explain(parse(merged), "fold_reshape_permute_reshape"))["out"]
    twice = program(KEY, '("b", 2, 16, "s")', """
r = R.reshape(k, R.shape([-1, s, 16]))
t = R.permute_dims(r, axes=(0, 2, 1))
o = R.reshape(t, R.shape([b, 2, 16, s]))
u = R.add(t, t)
v = R.reshape(u, R.shape([b, 2, 16, s]))
out = R.add(o, v)
return out
""", dims=("b", "s"))
    assert dict(explain(parse(twice), "fold_reshape_permute_reshape"))["o"] == "the transpose t is used 3 times"


TABLE = 'table: R.Tensor((10, 4), "float32"), ids: R.Tensor(("b", "s"), "int64")'


def test_a_gather_nd_of_one_component_is_a_take():
    """gather_nd(table, expand_dims(ids, -1)) -> take(table, ids, axis=0); negative ids count
    from the end in both."""
    before = program(TABLE, '("b", "s", 4)', """
i = R.expand_dims(ids, axis=(2,))
out = R.gather_nd(table, i, batch_dims=0)
return out
""", dims=("b", "s"))
    expected = program(TABLE, '("b", "s", 4)', """
out = R.take(table, ids, axis=0)
return out
""", dims=("b", "s"))
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, [{"b": 2, "s": 3}, {"b": 1, "s": 1}, {"b": 0, "s": 2}])


def test_other_unit_index_tuples_take_a_reshaped_index():
    params = 'table: R.Tensor((10, 4), "float32"), idx: R.Tensor(("n", 1), "int64")'
    before = program(params, '("n", 4)', """
out = R.gather_nd(table, idx)
return out
""")
    expected = program(params, '("n", 4)', """
lv = R.reshape(idx, R.shape([n]))
out = R.take(table, lv, axis=0)
return out
""")
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, [{"n": 3}, {"n": 1}])


def test_gathers_of_pairs_or_with_batch_dims_stay():
    pairs = program('table: R.Tensor((10, 4), "float32"), idx: R.Tensor(("n", 2), "int64")', '("n",)', """
out = R.gather_nd(table, idx)
return out
""")
    assert_unchanged(simplify_algebra, pairs)
    assert dict(explain(parse(pairs), "gather_nd_of_one_component")) == {
        "out": "the index tuples do not have one component"}
    batched = program('table: R.Tensor((3, 10), "float32"), idx: R.Tensor((3, "n", 1), "int64")', '(3, "n")', """
out = R.gather_nd(table, idx, batch_dims=1)
return out
""")
    assert_unchanged(simplify_algebra, batched)
    assert dict(explain(parse(batched), "gather_nd_of_one_component")) == {"out": "the gather has batch dims"}

"""SimplifyAlgebra's transpose_of_broadcast_constant and transpose_of_reshaped_broadcast_constant:
a transpose of a constant broadcast over the batch (DeBERTa's relative-position keys, repeated,
heads merged with the batch, then transposed for the product) is a broadcast of the constant
transposed once, so the product reads a contiguous operand."""

from __future__ import annotations

import numpy as np

import relaxpack
from relaxpack.ir import parse
from relaxpack.passes.core.rules import explain
from relaxpack.passes.pipeline import optimize_pipeline
from relaxpack.passes.simplify_algebra import simplify_algebra
from relaxpack.runtime import VirtualMachine

from .helpers import assert_rewrites, assert_same_results, assert_unchanged, ops_of, program, run_pass, with_dce

# a (1, 2, 3, 2) constant: two heads of three positions by two features
KEYS = np.arange(12, dtype=np.float32).reshape(1, 2, 3, 2) - 5.5
KEYS_TEXT = f'R.const({KEYS.tolist()}, "float32")'
KEYS_T_TEXT = f'R.const({np.swapaxes(KEYS, -1, -2).tolist()}, "float32")'
Q = 'q: R.Tensor(("n", 2, 4, 2), "float32")'
#: the keys repeated over the batch, heads merged with it, transposed; the queries as matrices
KEYS_T_BODY = f"""
tile = R.broadcast_to({KEYS_TEXT}, R.shape([n, 2, 3, 2]))
keys = R.reshape(tile, R.shape([2 * n, 3, 2]))
keys_t = R.permute_dims(keys, axes=[0, 2, 1])
qm = R.reshape(q, R.shape([2 * n, 4, 2]))
"""
#: each query by the transposed repeated keys
DEBERTA_LIKE = program(Q, '("2 * n", 4, 3)', KEYS_T_BODY + "out = R.matmul(qm, keys_t)\nreturn out")


def test_the_reshaped_broadcast_is_transposed_once_and_the_product_reads_it_as_it_is():
    before = DEBERTA_LIKE
    expected = program(Q, '("2 * n", 4, 3)', f"""
tile = R.broadcast_to({KEYS_T_TEXT}, R.shape([n, 2, 2, 3]))
keys_t = R.reshape(tile, R.shape([2 * n, 2, 3]))
qm = R.reshape(q, R.shape([2 * n, 4, 2]))
out = R.matmul(qm, keys_t)
return out
""")
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, [{"n": 1}, {"n": 3}, {"n": 0}], rtol=0, atol=0)


def test_a_broadcast_constant_transposed_by_any_permutation():
    """The transposed constant keeps a size-one axis where the broadcast grows it."""
    params = 'x: R.Tensor(("n", 3, 2), "float32")'
    before = program(params, '(2, 3, "n")', """
b = R.broadcast_to(R.const([[1.0, -2.0], [0.5, 3.0], [4.0, 0.25]], "float32"), R.shape([n, 3, 2]))
t = R.permute_dims(b, axes=[2, 1, 0])
u = R.permute_dims(x, axes=[2, 1, 0])
out = R.add(t, u)
return out
""")
    expected = program(params, '(2, 3, "n")', """
u = R.permute_dims(x, axes=[2, 1, 0])
out = R.add(R.const([[[1.0], [0.5], [4.0]], [[-2.0], [3.0], [0.25]]], "float32"), u)
return out
""")                                    # then constant_not_broadcast: numpy broadcasts the constant
    mod, out = assert_rewrites(with_dce(simplify_algebra), before, expected)
    assert_same_results(mod, out, [{"n": 1}, {"n": 4}], rtol=0, atol=0)


def test_transposes_the_reshape_moves_or_a_shared_broadcast_stay():
    reshape_moves = program(Q, '("2 * n", 3, 2)', f"""
tile = R.broadcast_to({KEYS_TEXT}, R.shape([n, 2, 3, 2]))
keys = R.reshape(tile, R.shape([2 * n, 2, 3]))
keys_t = R.permute_dims(keys, axes=[0, 2, 1])
return keys_t
""")
    mod = assert_unchanged(simplify_algebra, reshape_moves)
    assert dict(explain(mod, "transpose_of_reshaped_broadcast_constant")) == {
        "keys_t": "the reshape does not keep the last two axes"}
    shared = program(Q, '("2 * n", 4, 3)', KEYS_T_BODY + """
m = R.matmul(qm, keys_t)
again = R.permute_dims(keys, axes=[0, 2, 1])
m2 = R.matmul(qm, again)
out = R.add(m, m2)
return out
""")
    reasons = dict(explain(parse(shared), "transpose_of_reshaped_broadcast_constant"))
    assert set(reasons.values()) == {"the reshape keys is used twice"}, reasons


def test_deberta_like_relative_keys_run_the_same_at_o2():
    """Through the whole -O2 pipeline no transpose is left, and the values are -O0's."""
    text = DEBERTA_LIKE
    optimized = run_pass(optimize_pipeline(), parse(text))
    assert "permute_dims" not in ops_of(optimized) and "permute_matmul" not in ops_of(optimized)
    rng = np.random.default_rng(0)
    for n in (1, 2):
        q = rng.standard_normal((n, 2, 4, 2)).astype(np.float32)
        expected = q.reshape(2 * n, 4, 2) @ np.swapaxes(np.broadcast_to(KEYS, (n, 2, 3, 2)).reshape(2 * n, 3, 2), -1, -2)
        for level in (0, 2):
            got = VirtualMachine(relaxpack.build(parse(text), opt_level=level))["main"](q)
            np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-6)

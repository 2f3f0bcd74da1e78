"""The ai.onnx.ml kernels on cases the converted models do not reach: the
post transforms (PROBIT's inverse erf included), float keys with NaN, zero
rows in the normalizer, and the MIN/MAX/AVERAGE tree aggregates."""

import math

import numpy as np
import pytest

from relaxpack.errors import ExecutionError
from relaxpack.runtime.kernels.ml import label_encoder, ml_normalizer, transform_scores
from relaxpack.runtime.kernels.tree_ensemble import pack_trees, tree_ensemble


def test_probit_inverts_the_normal_cdf():
    p = np.array([1e-6, 0.01, 0.3, 0.5, 0.77, 0.999999])
    z = transform_scores(p, "PROBIT")
    cdf = np.array([0.5 * (1 + math.erf(v / math.sqrt(2))) for v in z])
    np.testing.assert_allclose(cdf, p, rtol=1e-9)


def test_softmax_zero_keeps_zeros():
    got = transform_scores(np.array([[0.0, 1.0, 2.0]]), "SOFTMAX_ZERO")
    e = np.exp([1.0, 2.0])
    np.testing.assert_allclose(got, [[0.0, *(e / e.sum())]])
    with pytest.raises(ExecutionError, match="unknown post_transform 'CUBE'"):
        transform_scores(np.zeros(2), "CUBE")


def test_label_encoder_float_keys_match_nan():
    out = np.empty(4, np.int64)
    label_encoder(np.array([1.5, np.nan, 2.0, 7.0], np.float32), np.array([2.0, np.nan, 1.5], np.float32),
                  np.array([20, 99, 15]), np.array(-1), out=out)
    assert out.tolist() == [15, 99, 20, -1]


def test_normalizer_leaves_zero_rows():
    out = np.empty((2, 2), np.float32)
    ml_normalizer(np.array([[0.0, 0.0], [3.0, -4.0]], np.float32), out=out, norm="L2")
    np.testing.assert_allclose(out, [[0, 0], [0.6, -0.8]])


@pytest.mark.parametrize("aggregate,expected", [("SUM", [3.0, 5.0]), ("AVERAGE", [1.5, 2.5]),
                                                ("MIN", [1.0, 2.0]), ("MAX", [2.0, 3.0])])
def test_tree_aggregates(aggregate, expected):
    # two one-split trees on feature 0 (x <= 0 goes left); node 3 and 4 form the second tree
    nodes = np.array([[0, 0, 1, 2, 0], [0, -1, 1, 1, 0], [0, -1, 2, 2, 0],
                      [0, 0, 4, 5, 0], [0, -1, 4, 4, 0], [0, -1, 5, 5, 0]])
    leaves = np.array([[np.nan], [1.0], [2.0], [np.nan], [2.0], [3.0]])
    # sample 0 reaches leaves 1 and 4 (weights 1, 2), sample 1 leaves 2 and 5 (weights 2, 3)
    out = np.empty((2, 1), np.float32)
    tree_ensemble(np.array([[-1.0], [1.0]], np.float32), *pack_trees(nodes, np.zeros(6), np.array([0, 3])), leaves,
                  np.empty((0, 2)), out=out, aggregate=aggregate, base_values=(), post_transform="NONE", max_depth=1)
    np.testing.assert_allclose(out.ravel(), expected)


def test_a_tree_deeper_than_declared_is_an_error():
    nodes = np.array([[0, 0, 1, 1, 0], [0, 0, 2, 2, 0], [0, -1, 2, 2, 0]])
    out = np.empty((1, 1), np.float32)
    with pytest.raises(ExecutionError, match="deeper than its declared depth 1"):
        tree_ensemble(np.zeros((1, 1), np.float32), *pack_trees(nodes, np.zeros(3), np.array([0])), np.ones((3, 1)),
                      np.empty((0, 2)), out=out, aggregate="SUM", base_values=(), post_transform="NONE", max_depth=1)

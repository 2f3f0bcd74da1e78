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


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.int64])
def test_l1_normalizer_is_the_float64_quotient_and_keeps_zero_rows(dtype):
    """L1 raises the norm to the least subnormal instead of testing it for zero: zero rows
    (signed zeros included) stay, NaN rows stay NaN, subnormal and huge rows divide as in
    float64, every dtype as the float64 quotient rounded once."""
    x = np.array([[0.0, -0.0, 0.0], [1.0, -2.0, 5.0], [np.nan, 1.0, 0.0], [5e-324, 0.0, -5e-324],
                  [1e308, 1e308, -1.0], [-3.0, 0.0, 0.0]])
    if dtype == np.int64:
        x = np.array([[0, 0, 0], [1, -2, 5], [-3, 0, 0], [7, 7, 0]])
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    x64 = x.astype(np.float64)
    norm = np.abs(x64).sum(axis=1, keepdims=True)
    want = np.where(norm == 0, x64, x64 / np.where(norm == 0, 1.0, norm)).astype(np.float32)
    per_instruction = ml_normalizer.specialize_attrs({"norm": "L1"}, (False,))
    for call in (lambda x, out: ml_normalizer(x, out=out, norm="L1"), per_instruction):
        out = np.empty(x.shape, np.float32)
        call(x, out=out)
        np.testing.assert_array_equal(out.view(np.uint32), want.view(np.uint32))
        for i in range(x.shape[0]):          # one row at a time: Python's sum where it is finite
            one = np.empty((1, x.shape[1]), np.float32)
            call(x[i:i + 1], out=one)
            np.testing.assert_array_equal(one.view(np.uint32), want[i:i + 1].view(np.uint32))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("absolute", [False, True])
def test_one_row_divided_by_its_sum_in_python_is_numpys_float64_bit_for_bit(dtype, absolute):
    """divide_row_by_sum: the float64 sum in np.add.reduce's order and the quotients, written
    into a float64 ``out`` (where a sum in another order would show), on rows of 1 to 7 values
    spread over 16 decades (subnormals and signed zeros among them); rows it does not take
    (8 values, two rows, other dtypes, sums that are 0, negative, inf or NaN) write nothing."""
    from relaxpack.runtime.kernels.ml import SEQUENTIAL_SUM_MAX, divide_row_by_sum
    rng = np.random.default_rng(7)
    taken = 0
    for k in range(1, SEQUENTIAL_SUM_MAX + 1):
        for _ in range(400):
            row = (rng.standard_normal((1, k)) * 10.0 ** rng.uniform(-8, 8, (1, k))).astype(dtype)
            row = row if absolute else np.abs(row)      # (a softmax's exponentials: a negative sum is refused)
            row[0, rng.integers(k)] = rng.choice([-0.0, 0.0, 5e-324 if dtype == np.float64 else 1e-45, row[0, 0]])
            values = np.abs(row).astype(np.float64) if absolute else row.astype(np.float64)
            total = np.add.reduce(values, -1, None, None, True)
            got = np.full(row.shape, -7.0)
            if divide_row_by_sum(row, got, absolute=absolute):
                taken += 1
                np.testing.assert_array_equal(got.view(np.uint64), (row.astype(np.float64) / total).view(np.uint64))
            else:
                assert not (0 < total[0, 0] < np.inf) and (got == -7.0).all()
    assert taken > 2000
    refused = [np.ones((1, SEQUENTIAL_SUM_MAX + 1), dtype), np.ones((2, 3), dtype), np.ones(3, dtype),
               np.ones((1, 3), np.float16), np.ones((1, 3), np.int64), np.ones((1, 3), np.longdouble),
               np.zeros((1, 3), dtype), np.array([[1.0, np.nan]], dtype), np.array([[np.inf, 1.0]], dtype),
               np.zeros((1, 0), dtype)]
    if not absolute:
        refused.append(np.array([[1.0, -3.0]], dtype))
    for values in refused:
        out = np.full(values.shape, -7.0)
        assert not divide_row_by_sum(values, out, absolute=absolute)
        assert (out == -7.0).all()


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
                  np.empty((0, 2)), out=out, aggregate=aggregate, base_values=(), post_transform="NONE", max_depth=1, dtype="float32")
    np.testing.assert_allclose(out.ravel(), expected)


def test_a_tree_deeper_than_declared_is_an_error():
    nodes = np.array([[0, 0, 1, 1, 0], [0, 0, 2, 2, 0], [0, -1, 2, 2, 0]])
    out = np.empty((1, 1), np.float32)
    with pytest.raises(ExecutionError, match="deeper than its declared depth 1"):
        tree_ensemble(np.zeros((1, 1), np.float32), *pack_trees(nodes, np.zeros(3), np.array([0])), np.ones((3, 1)),
                      np.empty((0, 2)), out=out, aggregate="SUM", base_values=(), post_transform="NONE", max_depth=1, dtype="float32")


@pytest.mark.parametrize("classes", [1, 3, 5])
@pytest.mark.parametrize("post_transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("specialized", [False, True])
def test_linear_classifier_labels_and_scores_as_the_plain_formula(classes, post_transform, specialized):
    """The in-place softmax and the argmax written into ``out`` give the plain formula's bits:
    random rows, rows with NaN and infinities, batches 0-7 and 8193, the binary (one-row) model."""
    from relaxpack.runtime.kernels.ml import linear_classifier
    rng = np.random.default_rng(classes)
    coef = rng.normal(size=(classes, 4)).astype(np.float32)
    bias = rng.normal(size=classes).astype(np.float32)
    attrs = {"post_transform": post_transform, "norm": "NONE"}
    call = (linear_classifier.specialize_attrs(attrs, (False, True, True))
            if specialized else lambda x, c, i, out: linear_classifier(x, c, i, out=out, **attrs))
    for n in (0, 1, 2, 7, 8193):         # (8193: past RowTiles' largest tile, the bias broadcasts)
        x = rng.normal(0, 20, (n, 4)).astype(np.float32)
        if n == 7:
            x[2, 1], x[3, 0], x[4, :] = np.nan, np.inf, -np.inf
        width = max(classes, 2)
        got = (np.empty(n, np.int64), np.empty((n, width), np.float32))
        with np.errstate(all="ignore"):         # as the VM runs kernels (inf - inf is NaN here)
            call(x, coef, bias, out=got)
            scores = x.astype(np.float64) @ coef.astype(np.float64).T + bias.astype(np.float64)
            if classes == 1:
                labels = scores[:, 0] > 0
                scores = np.stack([-scores[:, 0], scores[:, 0]], axis=1)
            else:
                labels = np.argmax(scores, axis=1) if n else np.zeros(0, np.int64)
            probs = transform_scores(scores, post_transform).astype(np.float32)
        np.testing.assert_array_equal(got[0], labels)
        np.testing.assert_array_equal(got[1].view(np.uint32), probs.view(np.uint32))


def test_row_tiles_are_the_row_repeated_read_only_within_their_limits():
    """RowTiles gives the row for 0 and 1 rows, a kept read-only (n, K) copy up to TILE_MAX_VALUES
    values and TILE_KEEP sizes, the row beyond; a tile added gives the broadcast sum's bits; with
    axis=1 a column's (K, n) copies."""
    from relaxpack.runtime.kernels.ml import TILE_KEEP, TILE_MAX_VALUES, RowTiles
    row = np.array([[1e-300, -0.0, np.nan, 3.5]])
    most = TILE_MAX_VALUES // 4
    tiles = RowTiles(row)
    assert tiles(0) is row and tiles(1) is row and tiles(most + 1) is row
    tile = tiles(most)
    assert tile.shape == (most, 4) and not tile.flags.writeable and tiles(most) is tile
    np.testing.assert_array_equal(tile.view(np.uint64), np.repeat(row, most, 0).view(np.uint64))
    scores = np.random.default_rng(0).standard_normal((7, 4))
    np.testing.assert_array_equal((scores + tiles(7)).view(np.uint64), (scores + row).view(np.uint64))
    for n in range(2, 2 + TILE_KEEP):
        tiles(n)
    assert len(tiles.tiles) == TILE_KEEP and tiles(2 + TILE_KEEP) is row
    column = np.array([[0], [100], [7]], np.intp)          # axis=1: a column repeated along the rows
    columns = RowTiles(column, axis=1)
    assert columns(1) is column and columns(TILE_MAX_VALUES // 3 + 1) is column
    np.testing.assert_array_equal(columns(5), np.repeat(column, 5, 1))
    assert columns(5).shape == (3, 5) and not columns(5).flags.writeable


@pytest.mark.parametrize("row", [[-0.0, 0.0, -1.0], [0.0, -0.0, -0.0], [1e308, 1e308, 0.0], [np.nan, 1.0, 2.0],
                                 [np.inf, -np.inf, 0.0], [-np.inf, -np.inf, -np.inf], [5.0, 5.0, 5.0],
                                 [-745.5, 0.0, 709.0], [1.0]])
def test_one_row_softmax_is_the_transform_bit_for_bit(row):
    """One row takes Python's max of its values where they are finite: the transform's bits
    (signed zeros as the max, a sum that overflows, NaN and infinities through the reduction)."""
    from relaxpack.runtime.kernels.ml import softmax_into
    scores = np.array([row])
    got = np.empty(scores.shape, np.float32)
    with np.errstate(all="ignore"):
        want = transform_scores(scores, "SOFTMAX").astype(np.float32)
        softmax_into(scores.copy(), got)
    np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("classes", [1, 2, 3, 7, 8])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_row_softmax_in_python_floats_is_the_transform_bit_for_bit(classes, dtype, monkeypatch):
    """One finite row of at most 7 scores takes Python floats but for numpy's exp: the transform's
    bits over 16 decades and near exp's overflow and underflow, into float32 and float64; 8
    scores keep the arrays."""
    from relaxpack.runtime.kernels import ml
    taken = []
    one_row = ml._softmax_one_row
    monkeypatch.setattr(ml, "_softmax_one_row", lambda *a: taken.append(one_row(*a)) or taken[-1])
    rng = np.random.default_rng(classes)
    for scale in (1e-8, 1.0, 30.0, 300.0, 1e4):
        scores = rng.standard_normal((1, classes)) * scale
        got = np.empty(scores.shape, dtype)
        with np.errstate(all="ignore"):
            want = transform_scores(scores, "SOFTMAX").astype(dtype)
            ml.softmax_into(scores.copy(), got)
        np.testing.assert_array_equal(got.view(f"u{got.itemsize}"), want.view(f"u{got.itemsize}"))
    assert taken == ([True] * 5 if classes <= 7 else [])


@pytest.mark.parametrize("classes", [2, 3, 7, 8])
@pytest.mark.parametrize("rows", [15, 16, 17, 64])
@pytest.mark.parametrize("special", [False, True], ids=["finite", "nan_inf_zeros"])
def test_softmax_of_many_rows_by_columns_is_the_transform_bit_for_bit(classes, rows, special, monkeypatch):
    """From 16 rows of at most 7 classes the softmax runs on a (K, N) copy (reductions down
    contiguous rows): the transform's bits, with rows of NaN (the rows' own NaN: a fallback),
    infinities (inf - inf), signed zeros and overflowing sums; 8 classes and 15 rows keep the rows."""
    from relaxpack.runtime.kernels import ml
    taken = []
    by_columns = ml._softmax_by_columns
    monkeypatch.setattr(ml, "_softmax_by_columns", lambda *a: taken.append(by_columns(*a)) or taken[-1])
    rng = np.random.default_rng(rows * classes)
    scores = rng.standard_normal((rows, classes)) * 10.0 ** rng.integers(-3, 3, (rows, 1))
    if special:
        pick = rng.random(scores.shape)
        scores[pick < 0.1] = np.inf
        scores[(pick >= 0.1) & (pick < 0.15)] = -np.inf
        scores[(pick >= 0.15) & (pick < 0.25)] = -0.0
        scores[(pick >= 0.25) & (pick < 0.3)] = 0.0
        scores[(pick >= 0.3) & (pick < 0.33)] = 1e308
    for nan in ([], [3]) if special else ([],):
        given = scores.copy()
        given[nan, 1] = np.nan
        got = np.empty(given.shape, np.float32)
        taken.clear()
        with np.errstate(all="ignore"):
            want = transform_scores(given, "SOFTMAX").astype(np.float32)
            ml.softmax_into(given.copy(), got)
        np.testing.assert_array_equal(got.view(np.uint32), want.view(np.uint32))
        assert taken == ([] if rows < 16 or classes > 7 else [not nan])

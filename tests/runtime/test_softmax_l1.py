"""A classifier's softmax and the L1 normalizer after it in one pass (runtime/kernels/softmax_l1.py)
and the linear classifier's ``norm`` (FuseClassifierNormalizer): the bits of the softmax rounded to
float32 and then normalized by ``ml_normalizer``, and the labels of the plain argmax."""

from __future__ import annotations

import numpy as np
import pytest

from relaxpack.runtime.kernels import ml
from relaxpack.runtime.kernels.ml import linear_classifier, ml_normalizer, transform_scores
from relaxpack.runtime.kernels.softmax_l1 import softmax_l1_columns, softmax_l1_row


def _two_kernels(scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(labels, probabilities) as the softmax and the separate L1 normalizer give them."""
    with np.errstate(all="ignore"):
        probs = transform_scores(scores, "SOFTMAX").astype(np.float32)
        out = np.empty_like(probs)
        ml_normalizer(probs, out=out, norm="L1")
    labels = np.argmax(scores, axis=1) if scores.shape[0] else np.zeros(0, np.int64)
    return labels, out


def _rows(rng, n: int, classes: int) -> np.ndarray:
    """Rows over 16 decades, near exp's overflow and underflow, with ties and signed zeros."""
    scores = rng.standard_normal((n, classes)) * 10.0 ** rng.integers(-8, 8, (n, 1))
    scores[::5] = np.round(scores[::5])                 # ties
    scores[1::7, 0] = -0.0
    scores[2::7] = rng.uniform(-745.0, 709.0, scores[2::7].shape)
    return scores


@pytest.mark.parametrize("classes", [2, 3, 5, 7])
def test_one_row_is_the_two_kernels_bit_for_bit(classes):
    rng = np.random.default_rng(classes)
    for scores in _rows(rng, 200, classes):
        labels, probs = np.empty(1, np.int64), np.empty((1, classes), np.float32)
        assert softmax_l1_row(scores.tolist(), labels, probs)
        want_labels, want = _two_kernels(scores[None])
        assert labels.tolist() == want_labels.tolist()
        assert probs.tobytes() == want.tobytes()


@pytest.mark.parametrize("row", [[np.nan, 1.0, 2.0], [np.inf, 0.0, 1.0], [-np.inf, -np.inf, 0.0], [1e308, 1e308, 0.0]])
def test_one_row_of_an_inf_or_nan_or_an_overflowing_sum_is_refused(row):
    labels, probs = np.full(1, 7, np.int64), np.full((1, 3), 9.0, np.float32)
    assert not softmax_l1_row(row, labels, probs)
    assert labels.tolist() == [7] and (probs == 9.0).all()


@pytest.mark.parametrize("classes", [2, 3, 7])
@pytest.mark.parametrize("rows", [2, 7, 16, 64])
def test_columns_are_the_two_kernels_bit_for_bit(classes, rows):
    """Many rows on a (K, N) copy, -inf scores among finite ones too (their exp is 0)."""
    rng = np.random.default_rng(rows * classes)
    scores = _rows(rng, rows, classes)
    scores[rng.random(scores.shape) < 0.1] = -np.inf
    scores[:, 0] = np.where(np.isinf(scores).all(axis=1), 0.0, scores[:, 0])     # a finite max per row
    probs = np.empty(scores.shape, np.float32)
    given = scores.copy()
    assert softmax_l1_columns(given, probs)
    assert given.tobytes() == scores.tobytes()          # the scores stay
    assert probs.tobytes() == _two_kernels(scores)[1].tobytes()


@pytest.mark.parametrize("special", [np.nan, np.inf, -np.inf, 1e200])
def test_columns_with_a_row_whose_max_is_not_finite_are_refused(special):
    """NaN, +inf, a row all -inf, or maxima whose squares overflow: nothing written."""
    scores = np.random.default_rng(0).standard_normal((5, 3))
    scores[3] = [special] * 3 if special == -np.inf else [special, 0.0, 1.0]
    probs = np.full(scores.shape, 9.0, np.float32)
    with np.errstate(all="ignore"):         # as the VM runs kernels (the square overflows)
        assert not softmax_l1_columns(scores, probs)
    assert (probs == 9.0).all()


@pytest.mark.parametrize("classes", [1, 3, 7, 8])
@pytest.mark.parametrize("post_transform, norm", [("SOFTMAX", "L1"), ("SOFTMAX", "L2"), ("LOGISTIC", "L1"),
                                                  ("NONE", "MAX"), ("SOFTMAX", "NONE")])
@pytest.mark.parametrize("intercepts", [True, False, "one"])
def test_the_classifier_with_a_norm_is_the_classifier_then_the_normalizer(classes, post_transform, norm, intercepts,
                                                                         monkeypatch):
    """The kernel with ``norm``, specialized or not, gives the plain kernel's labels and the
    normalizer of its scores, bit for bit: batches 0-2, 7, 64 and 8193, rows with NaN and infinities (the fallback),
    the binary (one-row) model, 8 classes (past the fused pass), no intercepts, one intercept for
    every class (broadcast: the arrays' path); the fused pass runs exactly where it applies."""
    taken = []
    for name in ("softmax_l1_row", "softmax_l1_columns"):
        fn = getattr(ml, name)
        monkeypatch.setattr(ml, name, lambda *a, fn=fn: taken.append(fn(*a)) or taken[-1])
    rng = np.random.default_rng(classes)
    coef = rng.normal(size=(classes, 4)).astype(np.float32)
    bias = rng.normal(size=1 if intercepts == "one" else classes if intercepts else 0).astype(np.float32)
    call = linear_classifier.specialize_attrs({"post_transform": post_transform, "norm": norm}, (False, True, True))
    fuses = post_transform == "SOFTMAX" and norm == "L1" and 1 < classes <= 7
    width = max(classes, 2)
    for n in (0, 1, 2, 7, 64, 8193):
        for special in (False, True) if n in (1, 7) else (False,):
            x = rng.normal(0, 20, (n, 4)).astype(np.float32)
            if special:
                x[0, 1] = np.nan
                if n == 7:
                    x[3, 0], x[4, :] = np.inf, -np.inf
            got = (np.empty(n, np.int64), np.empty((n, width), np.float32))
            generic = (np.empty(n, np.int64), np.empty((n, width), np.float32))
            want = (np.empty(n, np.int64), np.empty((n, width), np.float32))
            with np.errstate(all="ignore"):
                linear_classifier(x, coef, bias, out=generic, post_transform=post_transform, norm=norm)
            taken.clear()
            with np.errstate(all="ignore"):
                call(x, coef, bias, out=got)
                linear_classifier(x, coef, bias, out=want, post_transform=post_transform, norm="NONE")
                if norm != "NONE":
                    ml_normalizer(want[1].copy(), out=want[1], norm=norm)
            assert got[0].tobytes() == want[0].tobytes(), (n, special)
            assert got[1].tobytes() == want[1].tobytes(), (n, special)
            assert generic[0].tobytes() == want[0].tobytes() and generic[1].tobytes() == want[1].tobytes()
            row_refused = n == 1 and intercepts == "one" and classes > 1
            assert taken == ([not special] if fuses and n and not row_refused else []), (n, special)

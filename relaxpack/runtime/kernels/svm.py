"""Support vector machine kernels (ONNX's ai.onnx.ml SVMClassifier and
SVMRegressor) as onnxruntime computes them, so that labels and scores of
scikit-learn models converted by skl2onnx agree with it:

- the kernel (LINEAR ``x.v``, POLY ``(gamma x.v + coef0)^degree``, RBF
  ``exp(-gamma |x - v|^2)``, SIGMOID ``tanh(gamma x.v + coef0)``) in float32;
- one-vs-one: the decision value of each pair of classes ``(i, j)`` from the
  dual coefficients of both classes' support vectors plus ``rho``; it votes
  for ``i`` when positive; the label is the class with most votes (the first
  on a tie), as libsvm decides;
- probabilities: Platt's sigmoid of each pair's decision value (``prob_a``,
  ``prob_b``) coupled into class probabilities by libsvm's iterative method
  (Wu, Lin and Weng 2004), in float32 like onnxruntime;
- liblinear mode (no support vectors): ``x @ weights.T + rho[0]``.

>>> out = np.empty((2, 1), np.float32)
>>> svm_regressor(np.array([[1.0, 2.0], [0.0, 0.0]], np.float32), np.array([[1.0, 1.0]], np.float32),
...               np.array([2.0], np.float32), np.array([0.5], np.float32), out=out, kernel="LINEAR",
...               kernel_params=(0.0, 0.0, 0.0))
>>> out.ravel().tolist()
[6.5, 0.5]
"""

from __future__ import annotations

import numpy as np

from ...errors import ExecutionError
from ._registry import register_kernel
from .ml import transform_scores

_F32 = np.float32
#: rows of x per chunk of the RBF kernel, so that the (rows, vectors, features) differences stay small
_RBF_ELEMENTS = 1 << 20


def kernel_matrix(x: np.ndarray, vectors: np.ndarray, kernel: str, kernel_params) -> np.ndarray:
    """The (N, V) kernel values of the rows of ``x`` against ``vectors``, in float32."""
    gamma, coef0, degree = (_F32(p) for p in kernel_params)
    x = np.asarray(x, dtype=_F32).reshape(-1, vectors.shape[1])
    vectors = vectors.astype(_F32, copy=False)
    if kernel == "RBF":
        step = max(1, _RBF_ELEMENTS // max(1, vectors.size))
        out = np.empty((x.shape[0], vectors.shape[0]), dtype=_F32)
        for start in range(0, x.shape[0], step):
            diff = x[start:start + step, None, :] - vectors[None, :, :]
            out[start:start + step] = np.exp(-gamma * (diff * diff).sum(axis=-1, dtype=_F32))
        return out
    dot = x @ vectors.T
    if kernel == "LINEAR":
        return dot
    scaled = gamma * dot + coef0
    if kernel == "POLY":
        return scaled ** degree
    if kernel == "SIGMOID":
        return np.tanh(scaled)
    raise ExecutionError(f"svm: unknown kernel {kernel!r} (LINEAR, POLY, RBF or SIGMOID)")


# ---------------------------------------------------------------- classifier


def pairwise_decisions(kernels: np.ndarray, coefficients: np.ndarray, rho: np.ndarray,
                       vectors_per_class) -> tuple[np.ndarray, np.ndarray]:
    """One-vs-one: the (N, pairs) decision values in float32 and the (N,
    classes) votes. ``coefficients`` is (classes - 1, V): libsvm's dual
    coefficients, class ``i``'s vectors against class ``j`` in row ``j - 1``
    and class ``j``'s against ``i`` in row ``i``."""
    n_classes = len(vectors_per_class)
    starts = np.concatenate([[0], np.cumsum(vectors_per_class)]).astype(np.int64)
    scores = np.empty((kernels.shape[0], n_classes * (n_classes - 1) // 2), dtype=_F32)
    votes = np.zeros((kernels.shape[0], n_classes), dtype=np.int64)
    pair = 0
    for i in range(n_classes - 1):
        vi = slice(starts[i], starts[i + 1])
        for j in range(i + 1, n_classes):
            vj = slice(starts[j], starts[j + 1])
            # products in float32 summed in float64, as onnxruntime does
            total = (coefficients[j - 1, vi] * kernels[:, vi]).sum(axis=1, dtype=np.float64)
            total += (coefficients[i, vj] * kernels[:, vj]).sum(axis=1, dtype=np.float64)
            total += np.float64(rho[pair])
            scores[:, pair] = total
            winner = np.where(total > 0, i, j)
            votes[np.arange(len(winner)), winner] += 1
            pair += 1
    return scores, votes


def _logistic(v: np.ndarray) -> np.ndarray:
    p = _F32(1) / (_F32(1) + np.exp(-np.abs(v)))
    return np.where(v < 0, _F32(1) - p, p)


def pairwise_probabilities(scores: np.ndarray, prob_a: np.ndarray, prob_b: np.ndarray, n_classes: int) -> np.ndarray:
    """The (N, C, C) matrix ``r[i, j]``: Platt's estimate that a sample of
    class i or j is of class i, kept within [1e-7, 1 - 1e-7]."""
    r = np.zeros((scores.shape[0], n_classes, n_classes), dtype=_F32)
    pair = 0
    for i in range(n_classes - 1):
        for j in range(i + 1, n_classes):
            p = _F32(1) - _logistic(scores[:, pair] * _F32(prob_a[pair]) + _F32(prob_b[pair]))
            p = np.minimum(np.maximum(p, _F32(1e-7)), _F32(1) - _F32(1e-7))
            r[:, i, j], r[:, j, i] = p, _F32(1) - p
            pair += 1
    return r


def couple_probabilities(r: np.ndarray) -> np.ndarray:
    """Class probabilities (N, C) from pairwise ones: the fixed point
    iteration of libsvm's ``multiclass_probability`` (at most 100 rounds,
    stopping per sample), in float32 and in onnxruntime's order of updates."""
    n, k = r.shape[:2]
    q = np.zeros((n, k, k), dtype=_F32)
    for i in range(k):
        for j in range(k):
            if j != i:
                q[:, i, i] += r[:, j, i] * r[:, j, i]
        for j in range(k):
            if j < i:
                q[:, i, j] = q[:, j, i]
            elif j > i:
                q[:, i, j] = -r[:, j, i] * r[:, i, j]
    p = np.full((n, k), _F32(1) / _F32(k), dtype=_F32)
    eps = _F32(0.005) / _F32(k)
    active = np.ones(n, dtype=bool)
    for _ in range(100):
        qp = np.zeros((n, k), dtype=_F32)
        for j in range(k):
            qp += q[:, :, j] * p[:, j:j + 1]
        pqp = np.zeros(n, dtype=_F32)
        for i in range(k):
            pqp += p[:, i] * qp[:, i]
        active &= np.abs(qp - pqp[:, None]).max(axis=1) >= eps
        if not active.any():
            break
        a = active
        for i in range(k):
            diff = (-qp[a, i] + pqp[a]) / q[a, i, i]
            p[a, i] += diff
            pqp[a] = (pqp[a] + diff * (diff * q[a, i, i] + _F32(2) * qp[a, i])) / (_F32(1) + diff) / (_F32(1) + diff)
            qp[a] = (qp[a] + diff[:, None] * q[a, i, :]) / (_F32(1) + diff[:, None])
            p[a] /= (_F32(1) + diff[:, None])
    return p


def _binary_scores(s: np.ndarray, post_transform: str) -> np.ndarray:
    """onnxruntime's two columns for the one decision value of a binary SVC:
    ``(-s, s)``, ``(logistic(-s), logistic(s))`` under LOGISTIC, and
    ``(1 - s, s)`` (untransformed) under SOFTMAX and SOFTMAX_ZERO."""
    if post_transform == "NONE":
        return np.stack([-s, s], axis=1)
    if post_transform == "LOGISTIC":
        return np.stack([_logistic(-s), _logistic(s)], axis=1)
    return np.stack([_F32(1) - s, s], axis=1)


def _linear_labels(scores: np.ndarray, coefficients: np.ndarray) -> np.ndarray:
    """liblinear mode: the best score's class; for two classes onnxruntime
    picks class 1 when the best score passes 0.5 (all weights >= 0) or 0."""
    index = np.argmax(scores, axis=1) if scores.shape[1] else np.zeros(scores.shape[0], np.int64)
    if scores.shape[1] == 2:
        best = scores.max(axis=1)
        positive = best >= 0.5 if (coefficients >= 0).all() else best > 0
        index = np.where(positive, 1, index)
    return index


@register_kernel("svm_classifier")
def svm_classifier(x, support_vectors, coefficients, rho, prob_a, prob_b, *, out, kernel, kernel_params,
                   vectors_per_class, n_classes, post_transform):
    """SVMClassifier: ``out`` is (class index (N,), scores (N, K)); see the module docstring."""
    labels, scores_out = out
    if not vectors_per_class:
        scores = kernel_matrix(x, support_vectors, "LINEAR", kernel_params) + _F32(rho[0])
        labels[...] = _linear_labels(scores, coefficients)
        scores_out[...] = transform_scores(scores, post_transform) if n_classes > 1 else \
            transform_scores(scores, "PROBIT" if post_transform == "PROBIT" else "NONE")
        return
    kernels = kernel_matrix(x, support_vectors, kernel, kernel_params)
    decisions, votes = pairwise_decisions(kernels, coefficients, rho, vectors_per_class)
    labels[...] = np.argmax(votes, axis=1)
    if prob_a.size:
        probabilities = couple_probabilities(pairwise_probabilities(decisions, prob_a, prob_b, n_classes))
        scores_out[...] = transform_scores(probabilities, post_transform)
    elif n_classes == 2:
        scores_out[...] = _binary_scores(decisions[:, 0], post_transform)
    else:
        scores_out[...] = transform_scores(decisions, post_transform)


# ---------------------------------------------------------------- regressor


@register_kernel("svm_regressor")
def svm_regressor(x, support_vectors, coefficients, rho, *, out, kernel, kernel_params, one_class):
    """SVMRegressor: ``kernels @ coefficients + rho[0]``, (N, 1); with
    ``one_class`` the sign (+1 when positive, else -1)."""
    kernels = kernel_matrix(x, support_vectors, kernel, kernel_params)
    values = kernels @ coefficients.astype(_F32).reshape(-1, 1) + _F32(rho[0])
    if one_class:
        values = np.where(values > 0, _F32(1), _F32(-1))
    out[...] = values

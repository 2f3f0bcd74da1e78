"""Support vector machines: ai.onnx.ml SVMClassifier and SVMRegressor (as
skl2onnx emits them for scikit-learn's SVC, NuSVC, SVR, NuSVR and
OneClassSVM).

The flat attribute lists become constant matrices, checked here once
against the class layout; the kernel computes as onnxruntime does (see
``runtime/kernels/svm.py``)::

    SVMClassifier(x)  ->  lv = R.svm_classifier(x, vectors, coefficients, rho, prob_a, prob_b, kernel="RBF",
                                                kernel_params=(0.2, 0.0, 3.0), vectors_per_class=(24, 24),
                                                n_classes=2, post_transform="NONE")
                          label = R.take(metadata["labels"], lv[0], axis=0); probabilities = lv[1]
"""

from __future__ import annotations

import numpy as np

from ....ir.expr import TupleGetItem
from ....ops.definitions.svm import KERNELS
from ....ops.registry import make_call
from ..registry import register_converter
from ._shape_common import shape_error
from .ml import ML, class_labels, label_output, ml_unsupported, required

_POST = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")


def _floats(values) -> np.ndarray:
    return np.asarray(values if values is not None else (), dtype=np.float32).reshape(-1)


def _kernel(ctx, kernel_type: str, kernel_params) -> tuple[str, tuple[float, float, float]]:
    if kernel_type not in KERNELS:
        raise shape_error(ctx, f"kernel_type must be one of {', '.join(KERNELS)}, got {kernel_type!r}")
    params = [float(p) for p in (kernel_params or ())]
    if params and len(params) != 3:
        raise shape_error(ctx, f"kernel_params must be (gamma, coef0, degree), got {len(params)} values")
    return kernel_type, tuple(params) if params else (0.0, 0.0, 0.0)


def _check_post(ctx, post_transform: str) -> None:
    if post_transform not in _POST:
        raise shape_error(ctx, f"unknown post_transform {post_transform!r}")


def _vectors(ctx, support_vectors, count: int) -> np.ndarray:
    """The (count, features) support vector matrix."""
    flat = _floats(support_vectors)
    if count <= 0 or flat.size % count or flat.size == 0:
        raise shape_error(ctx, f"{flat.size} support_vectors values do not make {count} vectors")
    return flat.reshape(count, -1)


def _at_least(ctx, name: str, values: np.ndarray, n: int) -> np.ndarray:
    if values.size < n:
        raise shape_error(ctx, f"{name} has {values.size} values, needs {n}")
    return values[:n]


def _svc_arrays(ctx, labels, coefficients, rho, support_vectors, vectors_per_class, prob_a, prob_b):
    """libsvm's layout: vectors grouped by class, dual coefficients (C - 1, V),
    one rho (and one prob_a/prob_b) per pair of classes."""
    n_classes, counts = labels.size, [int(v) for v in vectors_per_class]
    if len(counts) != n_classes or min(counts) < 0:
        raise shape_error(ctx, f"vectors_per_class has {len(counts)} entries for {n_classes} classes")
    if n_classes < 2:
        raise ml_unsupported(ctx, f"a support vector classifier with {n_classes} class (needs at least 2)")
    n_vectors, pairs = sum(counts), n_classes * (n_classes - 1) // 2
    vectors = _vectors(ctx, support_vectors, n_vectors)
    coef = _at_least(ctx, "coefficients", _floats(coefficients), (n_classes - 1) * n_vectors)
    rho = _at_least(ctx, "rho", _floats(rho), pairs)
    if prob_a.size:
        prob_a, prob_b = _at_least(ctx, "prob_a", prob_a, pairs), _at_least(ctx, "prob_b", prob_b, pairs)
    return vectors, coef.reshape(n_classes - 1, n_vectors), rho, prob_a, prob_b, tuple(counts)


@register_converter(ML, "SVMClassifier", since_opset=1)
def svm_classifier(ctx, x, *, coefficients=None, rho=None, support_vectors=None, vectors_per_class=None,
                   kernel_type="LINEAR", kernel_params=None, prob_a=None, prob_b=None, classlabels_ints=None,
                   classlabels_strings=None, post_transform="NONE"):
    labels = class_labels(ctx, classlabels_ints, classlabels_strings)
    kernel, params = _kernel(ctx, kernel_type, kernel_params)
    _check_post(ctx, post_transform)
    prob_a, prob_b = _floats(prob_a), _floats(prob_b)
    if prob_a.size != prob_b.size:
        raise shape_error(ctx, f"prob_a has {prob_a.size} values and prob_b {prob_b.size}")
    if sum(vectors_per_class or ()) > 0:
        vectors, coef, rho, prob_a, prob_b, counts = _svc_arrays(
            ctx, labels, coefficients, rho, support_vectors, vectors_per_class, prob_a, prob_b)
        if labels.size == 2 and not prob_a.size and post_transform == "PROBIT":
            # onnxruntime writes only the first of the two score columns then
            raise ml_unsupported(ctx, "post_transform PROBIT of a binary model without probabilities")
    else:                                       # liblinear mode: one weight row per class, no voting
        weights = _floats(coefficients)
        if weights.size == 0 or weights.size % labels.size:
            raise shape_error(ctx, f"{weights.size} coefficients do not split into {labels.size} rows")
        vectors, coef, counts = weights.reshape(labels.size, -1), weights, ()
        rho = _at_least(ctx, "rho", _floats(rho), 1)
        kernel, prob_a, prob_b = "LINEAR", np.empty(0, np.float32), np.empty(0, np.float32)
    args = [ctx.expr(required(ctx, x))] + [ctx.expr(ctx.const(a)) for a in (vectors, coef, rho, prob_a, prob_b)]
    found = ctx.bb.emit(make_call("svm_classifier", *args, kernel=kernel, kernel_params=params,
                                  vectors_per_class=counts, n_classes=int(labels.size),
                                  post_transform=post_transform), "svm")
    index = ctx.bb.emit(TupleGetItem(found, 0), "class_index")
    return label_output(ctx, index, labels), TupleGetItem(found, 1)


@register_converter(ML, "SVMRegressor", since_opset=1)
def svm_regressor(ctx, x, *, coefficients=None, rho=None, support_vectors=None, n_supports=0, one_class=0,
                  kernel_type="LINEAR", kernel_params=None, post_transform="NONE"):
    kernel, params = _kernel(ctx, kernel_type, kernel_params)
    _check_post(ctx, post_transform)
    if post_transform != "NONE":
        # onnxruntime ignores it and the spec does not say how one regression value is transformed
        raise ml_unsupported(ctx, f"post_transform {post_transform!r} of a regressor")
    weights, rho = _floats(coefficients), _at_least(ctx, "rho", _floats(rho), 1)
    if n_supports > 0:
        vectors = _vectors(ctx, support_vectors, int(n_supports))
        weights = _at_least(ctx, "coefficients", weights, int(n_supports))
    else:                                       # liblinear mode: the coefficients are the weights
        if weights.size == 0:
            raise shape_error(ctx, "coefficients are empty")
        vectors, weights, kernel = weights.reshape(1, -1), np.ones(1, np.float32), "LINEAR"
    args = [ctx.expr(required(ctx, x))] + [ctx.expr(ctx.const(a)) for a in (vectors, weights, rho)]
    return make_call("svm_regressor", *args, kernel=kernel, kernel_params=params, one_class=int(bool(one_class)))

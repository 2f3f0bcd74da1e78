"""Support vector machines (ONNX's ai.onnx.ml SVMClassifier and
SVMRegressor): svm_classifier and svm_regressor.

The support vectors, coefficients and intercepts (``rho``) are constant
tensor arguments; the kernel and the class layout are attributes. An empty
``vectors_per_class`` is liblinear's mode: the "support vectors" are then
the (classes, features) weight rows. See ``runtime/kernels/svm.py``.

>>> make_call("svm_classifier", x, vectors, coefficients, rho, prob_a, prob_b, kernel="RBF",
...           kernel_params=(0.2, 0.0, 3.0), vectors_per_class=(24, 24), n_classes=2,
...           post_transform="NONE")                                     # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo, TupleStructInfo
from ..registry import REQUIRED, register_op
from .common import attr_error, shape_error, tensor_arg, with_shape
from .ml import _features, _matrix, _rows

KERNELS = ("LINEAR", "POLY", "RBF", "SIGMOID")
_KERNEL_ATTRS = {"kernel": "LINEAR", "kernel_params": (0.0, 0.0, 0.0)}


def score_columns(n_classes: int, svc: bool, probability: bool) -> int:
    """The width of SVMClassifier's score output, as onnxruntime writes it:
    one score per pair of classes for one-vs-one voting without
    probabilities (two for a binary model), else one per class."""
    if svc and not probability:
        return n_classes * (n_classes - 1) // 2 if n_classes > 2 else 2
    return n_classes


def _check_kernel(call: Call) -> None:
    if call.attrs["kernel"] not in KERNELS:
        raise attr_error(call, f"kernel must be one of {', '.join(KERNELS)}, got {call.attrs['kernel']!r}")
    if len(call.attrs["kernel_params"]) != 3:
        raise attr_error(call, "kernel_params must be (gamma, coef0, degree)")


def _vector_args(call: Call) -> None:
    for i, what in enumerate(("support_vectors", "coefficients", "rho"), start=1):
        if tensor_arg(call, i, what).ndim not in (-1, 1, 2):
            raise shape_error(call, f"{what} must be a vector or a matrix")


def _infer_svm_classifier(call: Call, analyzer: DimAnalyzer) -> TupleStructInfo:
    x = _features(call)
    _check_kernel(call)
    _vector_args(call)
    prob_a, columns = tensor_arg(call, 4, "prob_a"), None
    tensor_arg(call, 5, "prob_b")
    if prob_a.shape is not None and prob_a.ndim == 1:   # empty prob_a: no probability estimates
        columns = score_columns(call.attrs["n_classes"], bool(call.attrs["vectors_per_class"]), prob_a.shape[0] != 0)
    rows = _rows(x)
    labels = with_shape(x, None if rows is None else (rows,), "int64", ndim=1)
    return TupleStructInfo((labels, _matrix(x, columns, "float32")))


register_op("svm_classifier", infer=_infer_svm_classifier, num_args=6,
            attrs={**_KERNEL_ATTRS, "vectors_per_class": (), "n_classes": REQUIRED, "post_transform": "NONE"},
            doc="ai.onnx.ml SVMClassifier(x, support_vectors, coefficients, rho, prob_a, prob_b): "
                "(class index (N,), scores (N, K)) as onnxruntime computes them.")


def _infer_svm_regressor(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    x = _features(call)
    _check_kernel(call)
    _vector_args(call)
    return _matrix(x, 1, "float32")


register_op("svm_regressor", infer=_infer_svm_regressor, num_args=4, attrs={**_KERNEL_ATTRS, "one_class": 0},
            doc="ai.onnx.ml SVMRegressor(x, support_vectors, coefficients, rho): (N, 1) scores; "
                "one_class maps them to +1/-1.")

"""Classic machine-learning ops (ONNX's ai.onnx.ml domain): label_encoder,
ml_linear, linear_classifier, ml_normalizer, tree_ensemble and
tree_ensemble_classifier.

Model parameters are constant tensor arguments (stored in the archive's
data section), not attributes. Classifiers return ``(class index, scores)``;
the importer maps the index to the class label.

>>> make_call("label_encoder", x, keys, values, default)                      # doctest: +SKIP
>>> make_call("tree_ensemble", x, walk, thresholds, roots, leaves, members,
...           aggregate="SUM", base_values=(), post_transform="NONE", max_depth=6)  # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo, TupleStructInfo
from ..registry import REQUIRED, register_op
from .dynamic import register_data_dependent
from .common import NUMERIC, check_dtype_kind, shape_error, tensor_arg, with_shape


def _infer_label_encoder(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    x, keys = tensor_arg(call, 0, "x"), tensor_arg(call, 1, "keys")
    values, default = tensor_arg(call, 2, "values"), tensor_arg(call, 3, "default")
    if None not in (x.dtype, keys.dtype) and (x.dtype == "string") != (keys.dtype == "string"):
        raise shape_error(call, f"x ({x.dtype}) and keys ({keys.dtype}) must both be strings or both numbers")
    if None not in (values.dtype, default.dtype) and values.dtype != default.dtype:
        raise shape_error(call, f"default ({default.dtype}) must have the values' dtype {values.dtype}")
    return with_shape(x, x.shape, values.dtype, x.ndim)


register_op("label_encoder", infer=_infer_label_encoder, num_args=4,
            doc="ai.onnx.ml LabelEncoder(x, keys, values, default): each element mapped keys -> values.")


def _features(call: Call, what: str = "x") -> TensorStructInfo:
    x = tensor_arg(call, 0, what)
    check_dtype_kind(call, x, NUMERIC, what)
    if x.ndim not in (-1, 1, 2):
        raise shape_error(call, f"{what} must be (F,) or (N, F), got rank {x.ndim}")
    return x


def _rows(x: TensorStructInfo):
    """The sample count of a (F,) or (N, F) input: 1 or N (None when unknown)."""
    if x.shape is None:
        return None
    return 1 if x.ndim == 1 else x.shape[0]


def _matrix(x: TensorStructInfo, cols, dtype: str) -> TensorStructInfo:
    rows = _rows(x)
    if rows is None or cols is None:
        return with_shape(x, None, dtype, ndim=2)
    return with_shape(x, (rows, cols), dtype)


def _weighed_features(call: Call) -> TensorStructInfo:
    """The input of a linear model, whose width must be the coefficients' (a model that says
    otherwise is malformed: skl2onnx drops SimpleImputer's indicator columns, and onnxruntime
    then reads the coefficients misaligned)."""
    x, coef = _features(call), tensor_arg(call, 1, "coefficients")
    width = x.shape[-1] if x.shape is not None and x.ndim >= 1 else None
    per_row = coef.shape[1] if coef.shape is not None and coef.ndim == 2 else None
    if isinstance(width, int) and isinstance(per_row, int) and width != per_row:
        raise shape_error(call, f"x has {width} features but the coefficients are {coef.shape[0]} rows of "
                                f"{per_row}")
    return x


def _infer_linear(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    coef = tensor_arg(call, 1, "coefficients")
    targets = coef.shape[0] if coef.shape is not None and coef.ndim == 2 else None
    return _matrix(_weighed_features(call), targets, "float32")


register_op("ml_linear", infer=_infer_linear, num_args=3, attrs={"post_transform": "NONE"},
            doc="ai.onnx.ml LinearRegressor(x, coefficients (T, F), intercepts): x @ coef.T + intercepts.")


def _infer_linear_classifier(call: Call, analyzer: DimAnalyzer) -> TupleStructInfo:
    x = _weighed_features(call)
    coef = tensor_arg(call, 1, "coefficients")
    classes = None
    if coef.shape is not None and coef.ndim == 2 and isinstance(coef.shape[0], int):
        classes = max(coef.shape[0], 2)           # one row of coefficients: a binary model
    rows = _rows(x)
    labels = with_shape(x, None if rows is None else (rows,), "int64", ndim=1)
    return TupleStructInfo((labels, _matrix(x, classes, "float32")))


register_op("linear_classifier", infer=_infer_linear_classifier, num_args=3,
            attrs={"post_transform": "NONE", "norm": "NONE"},
            doc="ai.onnx.ml LinearClassifier(x, coefficients (C, F), intercepts): (class index, scores); "
                "norm MAX, L1 or L2: the scores then normalized as ml_normalizer does (a Normalizer after it).")


def _infer_normalizer(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    x = _features(call)
    return with_shape(x, x.shape, "float32", x.ndim)


register_op("ml_normalizer", infer=_infer_normalizer, num_args=1, attrs={"norm": REQUIRED},
            doc="ai.onnx.ml Normalizer: rows divided by their MAX, L1 or L2 norm (float32).")

_TREE_ATTRS = {"aggregate": "SUM", "base_values": (), "post_transform": "NONE", "max_depth": REQUIRED}


def _tree_targets(call: Call):
    for i, what in enumerate(("walk", "thresholds", "roots", "leaves", "members"), start=1):
        tensor_arg(call, i, what)
    leaves = call.args[4].struct_info
    return leaves.shape[1] if leaves.shape is not None and leaves.ndim == 2 else None


def _infer_tree_ensemble(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    x = _features(call)
    return _matrix(x, _tree_targets(call), call.attrs["dtype"])


register_op("tree_ensemble", infer=_infer_tree_ensemble, num_args=6, attrs={**_TREE_ATTRS, "dtype": "float32"},
            doc="A tree ensemble regressor (x, walk, thresholds, roots, leaves, members) in the walk "
                "form of runtime/kernels/tree_ensemble.py: scores (N, targets).")


def _infer_tree_ensemble_classifier(call: Call, analyzer: DimAnalyzer) -> TupleStructInfo:
    x = _features(call)
    rows = _rows(x)
    labels = with_shape(x, None if rows is None else (rows,), "int64", ndim=1)
    return TupleStructInfo((labels, _matrix(x, _tree_targets(call), "float32")))


register_op("tree_ensemble_classifier", infer=_infer_tree_ensemble_classifier, num_args=6, attrs=_TREE_ATTRS,
            doc="A tree ensemble classifier in the walk form: (class index (N,), scores (N, classes)).")


register_data_dependent("ml.one_hot_known", 2, {"what": REQUIRED},
                        "ai.onnx.ml OneHotEncoder with zeros=0: its one-hot rows as float32, failing on an "
                        "element that is no category.")

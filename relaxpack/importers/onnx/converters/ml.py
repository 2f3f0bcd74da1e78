"""ai.onnx.ml ops (as scikit-learn models converted by skl2onnx use them):
LabelEncoder, CategoryMapper, LinearClassifier, LinearRegressor,
Normalizer, Scaler, Binarizer, Imputer, ArrayFeatureExtractor,
FeatureVectorizer. The map ops ZipMap, CastMap and DictVectorizer are in
``ml_maps.py``, tree ensembles in ``ml_trees.py``.

Classifiers compute a class index; the label output is a ``take`` on the
labels constant, so int and string labels work alike::

    LinearClassifier(x)  ->  lv = R.linear_classifier(x, coef, intercepts, post_transform="LOGISTIC")
                             label = R.take(metadata["labels"], lv[0], axis=0); probabilities = lv[1]

skl2onnx's default ZipMap then turns the probabilities into a list of
``{label: probability}`` dicts (``ml_maps.py``).
"""

from __future__ import annotations

import math

import numpy as np

from ....errors import UnsupportedOpError
from ....ir.expr import Tuple, TupleGetItem
from ....ops.registry import make_call
from ..registry import register_converter
from ..value import Value
from ._dynamic import packed_call
from ._shape_common import emit, shape_error, shaped, shape_expr

ML = "ai.onnx.ml"


def ml_unsupported(ctx, message: str) -> UnsupportedOpError:
    """An UnsupportedOpError naming the node and its ai.onnx.ml opset."""
    return UnsupportedOpError(f"{ctx.node_label()} (domain {ML}, opset {ctx.opsets.get(ML, 1)}): {message}")


def required(ctx, x: Value | None, what: str = "X") -> Value:
    if x is None:
        raise shape_error(ctx, f"input {what} is required")
    return x


def string_const(items) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = list(items)
    return out


def class_labels(ctx, ints, strings) -> np.ndarray:
    """The classifier's labels (int64 or string), exactly one of the two given."""
    if (ints is None) == (strings is None):
        raise shape_error(ctx, "needs exactly one of classlabels_ints/int64s and classlabels_strings")
    return np.array(ints, dtype=np.int64) if ints is not None else string_const(strings)


def label_output(ctx, index, labels: np.ndarray, indices: int | None = None):
    """The label tensor: ``labels[index]``. ``indices``: how many class indices the kernel
    can write (``0 .. indices - 1``), where the caller knows it; when they all fall in
    ``labels`` and the labels are ``0, 1, ...`` (int64, as scikit-learn's are), the index
    is the label and no ``take`` runs (a kernel call and an output copy per call saved)."""
    if indices is not None and indices <= labels.size and labels.dtype == np.int64 \
            and np.array_equal(labels, np.arange(labels.size)):
        return index
    return make_call("take", ctx.expr(ctx.const(labels)), index, axis=0)


def as_float32(ctx, x: Value):
    data = ctx.expr(x)
    return data if x.dtype == "float32" else emit(ctx, make_call("astype", data, dtype="float32"), "as_f32")


# ---------------------------------------------------------------- LabelEncoder, CategoryMapper


@register_converter(ML, "LabelEncoder", since_opset=1)
def label_encoder_v1(ctx, x, *, classes_strings=(), default_int64=-1, default_string="_Unused"):
    classes = string_const(classes_strings)
    indices = np.arange(len(classes), dtype=np.int64)
    if required(ctx, x).dtype == "string":
        return _encode(ctx, x, classes, indices, np.array(default_int64, np.int64))
    return _encode(ctx, x, indices, classes, string_const([default_string]).reshape(()))


@register_converter(ML, "LabelEncoder", since_opset=2)
def label_encoder_v2(ctx, x, *, keys_strings=None, keys_int64s=None, keys_floats=None, values_strings=None,
                     values_int64s=None, values_floats=None, default_string="_Unused", default_int64=-1,
                     default_float=-0.0, keys_tensor=None, values_tensor=None, default_tensor=None):
    keys = _one_of(ctx, "keys", keys_strings, keys_int64s, keys_floats, keys_tensor)
    values = _one_of(ctx, "values", values_strings, values_int64s, values_floats, values_tensor)
    if keys.size != values.size:
        raise shape_error(ctx, f"{keys.size} keys but {values.size} values")
    if default_tensor is not None:
        default = np.asarray(default_tensor).reshape(-1)
        if default.size != 1:
            raise shape_error(ctx, f"default_tensor must hold one value, got {default.size}")
        default = default.astype(values.dtype).reshape(())
    elif values.dtype == object:
        default = string_const([default_string]).reshape(())
    elif values.dtype.kind == "f":
        default = np.array(default_float, dtype=values.dtype)
    else:
        default = np.array(default_int64, dtype=values.dtype)
    return _encode(ctx, required(ctx, x), keys, values, default)


def _one_of(ctx, what: str, strings, int64s, floats, tensor) -> np.ndarray:
    given = [(k, v) for k, v in (("strings", strings), ("int64s", int64s), ("floats", floats),
                                 ("tensor", tensor)) if v is not None]
    if len(given) != 1:
        raise shape_error(ctx, f"needs exactly one {what} attribute, got {[f'{what}_{k}' for k, _ in given]}")
    kind, v = given[0]
    if kind == "strings":
        return string_const(v)
    if kind == "tensor":
        return np.asarray(v).reshape(-1)
    return np.array(v, dtype=np.int64 if kind == "int64s" else np.float32)


def _encode(ctx, x: Value, keys: np.ndarray, values: np.ndarray, default: np.ndarray):
    if x.dtype is not None and (x.dtype == "string") != (keys.dtype == object):
        raise shape_error(ctx, f"input X ({x.dtype}) and the keys ({'string' if keys.dtype == object else keys.dtype})"
                               f" must both be strings or both numbers")
    if keys.dtype != object and x.dtype not in (None, "string") and np.dtype(x.dtype) != keys.dtype:
        keys = keys.astype(x.dtype)      # float keys with a double input (opset 4 tensors keep theirs)
    return make_call("label_encoder", ctx.expr(x), *(ctx.expr(ctx.const(a)) for a in (keys, values, default)))


@register_converter(ML, "CategoryMapper", since_opset=1)
def category_mapper(ctx, x, *, cats_int64s=(), cats_strings=(), default_int64=-1, default_string="_Unused"):
    if len(cats_int64s) != len(cats_strings):
        raise shape_error(ctx, f"{len(cats_int64s)} cats_int64s but {len(cats_strings)} cats_strings")
    ints, strings = np.array(cats_int64s, dtype=np.int64), string_const(cats_strings)
    if required(ctx, x).dtype == "string":
        return _encode(ctx, x, strings, ints, np.array(default_int64, np.int64))
    return _encode(ctx, x, ints, strings, string_const([default_string]).reshape(()))


# ---------------------------------------------------------------- linear models, Normalizer


def _coefficients(ctx, coefficients, intercepts, rows: int | None = None):
    coef = np.asarray(coefficients, dtype=np.float32)
    inter = np.asarray(intercepts if intercepts is not None else (), dtype=np.float32)
    rows = rows or max(inter.size, 1)
    if coef.size % rows:
        raise shape_error(ctx, f"{coef.size} coefficients do not split into {rows} rows")
    return coef.reshape(rows, -1), inter


@register_converter(ML, "LinearClassifier", since_opset=1)
def linear_classifier(ctx, x, *, coefficients, intercepts=None, classlabels_ints=None, classlabels_strings=None,
                      multi_class=0, post_transform="NONE"):
    labels = class_labels(ctx, classlabels_ints, classlabels_strings)
    coef, inter = _coefficients(ctx, coefficients, intercepts, labels.size if labels.size > 2 else None)
    if coef.shape[0] == 1 and labels.size != 2:
        raise ml_unsupported(ctx, f"one row of coefficients (a binary model) needs 2 class labels, got {labels.size}")
    found = ctx.bb.emit(make_call("linear_classifier", ctx.expr(required(ctx, x)), ctx.expr(ctx.const(coef)),
                                  ctx.expr(ctx.const(inter)), post_transform=post_transform), "linear")
    index = ctx.bb.emit(TupleGetItem(found, 0), "class_index")
    # one row: index s > 0 (0 or 1, two labels checked above); else the argmax over the rows
    return label_output(ctx, index, labels, max(coef.shape[0], 2)), TupleGetItem(found, 1)


@register_converter(ML, "LinearRegressor", since_opset=1)
def linear_regressor(ctx, x, *, coefficients, intercepts=None, targets=1, post_transform="NONE"):
    coef, inter = _coefficients(ctx, coefficients, intercepts, targets)
    return make_call("ml_linear", ctx.expr(required(ctx, x)), ctx.expr(ctx.const(coef)),
                     ctx.expr(ctx.const(inter)), post_transform=post_transform)


@register_converter(ML, "Normalizer", since_opset=1)
def normalizer(ctx, x, *, norm="MAX"):
    if norm not in ("MAX", "L1", "L2"):
        raise shape_error(ctx, f"norm must be MAX, L1 or L2, got {norm!r}")
    return make_call("ml_normalizer", ctx.expr(required(ctx, x)), norm=norm)


# ---------------------------------------------------------------- elementwise preprocessing


@register_converter(ML, "Scaler", since_opset=1)
def scaler(ctx, x, *, offset=(0.0,), scale=(1.0,)):
    data = as_float32(ctx, required(ctx, x))
    data = emit(ctx, make_call("subtract", data, ctx.expr(ctx.const(np.array(offset, np.float32)))), "scaler")
    return make_call("multiply", data, ctx.expr(ctx.const(np.array(scale, np.float32))))


@register_converter(ML, "Binarizer", since_opset=1)
def binarizer(ctx, x, *, threshold=0.0):
    x = required(ctx, x)
    above = emit(ctx, make_call("greater", ctx.expr(x), ctx.expr(ctx.const(np.array(threshold, x.dtype)))),
                 "binarizer")
    return make_call("astype", above, dtype=x.dtype)


@register_converter(ML, "Imputer", since_opset=1)
def imputer(ctx, x, *, imputed_value_floats=None, imputed_value_int64s=None, replaced_value_float=0.0,
            replaced_value_int64=0):
    x = required(ctx, x)
    if x.dtype in ("int32", "int64"):
        imputed, missing = np.array(imputed_value_int64s or (), x.dtype), replaced_value_int64
    else:
        imputed, missing = np.array(imputed_value_floats or (), x.dtype), replaced_value_float
    if imputed.size == 0:
        raise shape_error(ctx, "needs imputed values")
    data = ctx.expr(x)
    if isinstance(missing, float) and math.isnan(missing):
        where = emit(ctx, make_call("isnan", data), "missing")
    else:
        where = emit(ctx, make_call("equal", data, ctx.expr(ctx.const(np.array(missing, x.dtype)))), "missing")
    return make_call("where", where, ctx.expr(ctx.const(imputed)), data)


@register_converter(ML, "ArrayFeatureExtractor", since_opset=1)
def array_feature_extractor(ctx, x, indices):
    x, indices = shaped(ctx, required(ctx, x)), required(ctx, indices, "Y")
    flat = ctx.expr(indices)
    if indices.ndim != 1:
        flat = emit(ctx, make_call("reshape", flat, shape_expr((_count(ctx, indices),))), "indices")
    taken = emit(ctx, make_call("take", ctx.expr(x), flat, axis=x.ndim - 1), "features")
    if x.ndim == 1:   # onnxruntime returns a (1, k) row for a 1-D input
        return make_call("expand_dims", taken, axis=(0,))
    return taken


def _count(ctx, value: Value):
    count = 1
    for d in shaped(ctx, value).shape:
        count = count * d
    return count


@register_converter(ML, "FeatureVectorizer", since_opset=1)
def feature_vectorizer(ctx, *inputs, inputdimensions=()):
    if not inputs or len(inputs) != len(inputdimensions):
        raise shape_error(ctx, f"{len(inputs)} inputs but {len(inputdimensions)} inputdimensions")
    parts = []
    for x, width in zip(inputs, inputdimensions):
        x = shaped(ctx, required(ctx, x))
        rows = 1 if x.ndim <= 1 else x.shape[0]
        if x.ndim == 2 and x.shape[1] != width:
            raise ml_unsupported(ctx, f"an input of shape {x.shape} with inputdimension {width} (padding or "
                                      f"truncating features)")
        parts.append(emit(ctx, make_call("reshape", as_float32(ctx, x), shape_expr((rows, int(width)))), "feature"))
    return make_call("concat", Tuple(parts), axis=1)


@register_converter(ML, "OneHotEncoder", since_opset=1)
def one_hot_encoder(ctx, x, *, cats_int64s=None, cats_strings=None, zeros=1):
    """``x[..., None] == cats`` as float32: one column per category. With ``zeros=0``
    (scikit-learn's default ``handle_unknown="error"``) an element that is no category fails
    the run, naming the node, as in onnxruntime (``ml.one_hot_known``)."""
    cats = class_labels(ctx, cats_int64s, cats_strings)
    x = required(ctx, x)
    data = ctx.expr(x)
    if x.dtype not in (None, "string", "int64"):
        if cats.dtype == object:
            raise shape_error(ctx, f"input X ({x.dtype}) must be strings for cats_strings")
        cats = cats.astype(x.dtype)
    expanded = emit(ctx, make_call("expand_dims", data, axis=(-1,)), "one_hot")
    hot = ctx.emit(make_call("equal", expanded, ctx.expr(ctx.const(cats))), "one_hot")
    if zeros:
        return make_call("astype", ctx.expr(hot), dtype="float32")
    return packed_call(ctx, "ml.one_hot_known", [x, hot], [(hot.shape, "float32")], "one_hot",
                       what=ctx.node_label())

"""Random ops. Their seed semantics follow onnx's reference evaluator, so a
seeded model gives the same numbers here as there: a ``seed`` attribute
starts numpy's legacy ``RandomState(seed)`` afresh at every call (the same
draw on every run, and two calls with one seed draw the same numbers);
without a seed each call draws from fresh OS entropy. So the ops are
impure: never folded, merged, dropped or reordered by the passes.

    y = R.random_uniform(R.shape([n, 4]), dtype="float32", low=0.0, high=1.0, seed=None)
    y = R.random_normal(R.shape([n, 4]), dtype="float64", mean=0.0, scale=1.0, seed=3)
    y = R.bernoulli(p, dtype="float32", seed=None)                 # p: probabilities
    y = R.multinomial(logits, dtype="int32", sample_size=5, seed=0)  # (batch, classes) -> (batch, 5)

>>> make_call("dropout_train", x, ratio, training_mode, seed=0)    # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo, TupleStructInfo, check_dtype
from ..registry import register_op
from .common import (
    BOOL, FLOAT, INT, NUMERIC, attr_error, check_dtype_kind, dtype_kind, float_attrs, fmt_sinfo, int_attr,
    shape_arg, shape_error, tensor_arg, with_shape,
)


def _seed_attr(call: Call) -> None:
    seed = call.attrs["seed"]
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise attr_error(call, f"attribute seed must be an int or None, got {seed!r}")
    if seed is not None and not 0 <= seed < 2 ** 32:
        raise attr_error(call, f"attribute seed must be in [0, 2**32) (numpy's RandomState), got {seed}")


def _dtype_attr(call: Call, kinds: frozenset[str], default: str | None = None) -> str | None:
    """The ``dtype`` attribute (``default`` when None), checked to be of ``kinds``."""
    dtype = call.attrs["dtype"]
    if dtype is None:
        return default
    if not isinstance(dtype, str):
        raise attr_error(call, f"attribute dtype must be a dtype name, got {dtype!r}")
    check_dtype(dtype)
    if dtype_kind(dtype) not in kinds:
        raise attr_error(call, f"attribute dtype must be {'/'.join(sorted(kinds))}, got {dtype}")
    return dtype


# ---------------------------------------------------------------- dropout_train


def _infer_dropout_train(call: Call, analyzer: DimAnalyzer) -> TupleStructInfo:
    data, ratio, training = tensor_arg(call, 0), tensor_arg(call, 1, "ratio"), tensor_arg(call, 2, "training_mode")
    check_dtype_kind(call, data, FLOAT)
    check_dtype_kind(call, ratio, FLOAT, "ratio")
    check_dtype_kind(call, training, BOOL, "training_mode")
    for sinfo, what in ((ratio, "ratio"), (training, "training_mode")):
        if sinfo.shape is not None and any(d != 1 for d in sinfo.shape):
            raise shape_error(call, f"{what} must hold one value, got {fmt_sinfo(sinfo)}")
    _seed_attr(call)
    return TupleStructInfo((data, with_shape(data, data.shape, "bool", data.ndim)))


register_op("dropout_train", infer=_infer_dropout_train, attrs={"seed": None}, num_args=3, pure=False,
            doc="ONNX Dropout with a run-time training_mode: when it is true and ratio > 0, keep = "
                "RandomState(seed).uniform(0, 1, shape) >= ratio and y = x * keep / (1 - ratio); else y = x "
                "and keep is all true. Returns (y, keep).")


# ---------------------------------------------------------------- random_uniform, random_normal


def _infer_random_fill(*params: str):
    """Inference of an op drawing a tensor of the shape argument's shape."""
    def infer(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
        shape = shape_arg(call, 0)
        dtype = _dtype_attr(call, FLOAT, "float32")
        float_attrs(call, *params)
        _seed_attr(call)
        if shape.values is None:
            return TensorStructInfo(None, dtype, shape.ndim)
        return TensorStructInfo(shape.values, dtype)
    return infer


register_op("random_uniform", infer=_infer_random_fill("low", "high"), num_args=1, pure=False,
            attrs={"dtype": "float32", "low": 0.0, "high": 1.0, "seed": None},
            doc="ONNX RandomUniform(Like): u = RandomState(seed).random_sample(shape) cast to dtype, "
                "then u * (high - low) + low in dtype (as onnx's reference evaluator computes it).")
register_op("random_normal", infer=_infer_random_fill("mean", "scale"), num_args=1, pure=False,
            attrs={"dtype": "float32", "mean": 0.0, "scale": 1.0, "seed": None},
            doc="ONNX RandomNormal(Like): z = RandomState(seed).standard_normal(shape) cast to dtype, "
                "then z * scale + mean in dtype (as onnx's reference evaluator computes it).")


# ---------------------------------------------------------------- bernoulli, multinomial


def _infer_bernoulli(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    probs = tensor_arg(call, 0, "probabilities")
    check_dtype_kind(call, probs, FLOAT, "probabilities")
    dtype = _dtype_attr(call, NUMERIC | BOOL, probs.dtype)
    _seed_attr(call)
    return with_shape(probs, probs.shape, dtype, probs.ndim)


register_op("bernoulli", infer=_infer_bernoulli, num_args=1, pure=False, attrs={"dtype": None, "seed": None},
            doc="ONNX Bernoulli: RandomState(seed).binomial(1, p) cast to dtype (the input's when None), "
                "as onnx's reference evaluator draws it.")


def _infer_multinomial(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    logits = tensor_arg(call, 0, "logits")
    check_dtype_kind(call, logits, FLOAT, "logits")
    dtype = _dtype_attr(call, INT, "int32")
    if dtype not in ("int32", "int64"):
        raise attr_error(call, f"attribute dtype must be int32 or int64, got {dtype}")
    samples = int_attr(call, "sample_size")
    if samples < 1:
        raise attr_error(call, f"attribute sample_size must be at least 1, got {samples}")
    _seed_attr(call)
    if logits.ndim >= 0 and logits.ndim != 2:
        raise shape_error(call, f"logits must be 2-D (batch, classes), got {fmt_sinfo(logits)}")
    if logits.shape is None:
        return with_shape(logits, None, dtype, 2)
    if logits.shape[1] == 0:
        raise shape_error(call, f"logits {fmt_sinfo(logits)} have no classes to draw from")
    return with_shape(logits, (logits.shape[0], samples), dtype)


register_op("multinomial", infer=_infer_multinomial, num_args=1, pure=False,
            attrs={"dtype": "int32", "sample_size": 1, "seed": None},
            doc="ONNX Multinomial: sample_size class indices per row of unnormalized log-probabilities, "
                "by inverse CDF of u = RandomState(seed).random_sample((batch, sample_size)).")

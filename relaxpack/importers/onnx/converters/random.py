"""Random ops, seeded as onnx's reference evaluator does (see
``ops/definitions/random.py``): a ``seed`` attribute (a float in ONNX,
truncated to an int as the reference does; NaN counts as none) starts
numpy's ``RandomState(seed)`` afresh at every run, so a seeded model gives
the same numbers on every run and the reference's numbers; without a seed
each run draws afresh from OS entropy.

    RandomUniform(shape=[2, 3], seed=0)   ->  R.random_uniform(R.shape([2, 3]), dtype="float32", seed=0)
    RandomNormalLike(x: (n, 4))           ->  R.random_normal(R.shape([n, 4]), dtype=<x's dtype>)
    Bernoulli(p, dtype=DOUBLE)            ->  R.bernoulli(p, dtype="float64")
    Multinomial(logits, sample_size=5)    ->  R.multinomial(logits, dtype="int32", sample_size=5)
    Dropout(x, ratio, training_mode: input, seed=0)  ->  R.dropout_train(x, ratio, training_mode, seed=0)

The calls are impure, so ``ImportContext.emit`` never folds them at import
time, and no pass folds, merges or drops them.
"""

from __future__ import annotations

import math

import numpy as np

from ....ir.expr import TupleGetItem
from ....ops.registry import make_call
from ..registry import register_converter
from ..tensors import onnx_dtype_name
from ._shape_common import fmt_dims, shape_error, shape_expr, shaped, unsupported


def seed_attr(ctx, seed) -> int | None:
    """ONNX's float ``seed`` as the reference evaluator reads it: None or NaN
    for none, else ``int(seed)``, which numpy's RandomState takes in [0, 2**32)."""
    if seed is None or (isinstance(seed, float) and math.isnan(seed)):
        return None
    value = int(seed)
    if not 0 <= value < 2 ** 32:
        raise unsupported(ctx, f"seed {seed} (numpy's RandomState takes seeds in [0, 2**32))")
    return value


def _float_dtype(ctx, dtype, default: str | None) -> str:
    """The output dtype of a uniform or normal draw: attribute ``dtype`` (an
    ONNX element type), else ``default``; it must be a float type."""
    out = default if dtype is None else onnx_dtype_name(int(dtype), f"{ctx.node_label()}'s dtype")
    if out is None or not out.startswith(("float", "bfloat")) or out.startswith("float8") \
            or out in ("float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"):
        raise unsupported(ctx, f"random values of dtype {out} (float16, float32, float64 or bfloat16)")
    return out


def _like_shape(ctx, x):
    return shape_expr(shaped(ctx, x).shape)


def _static_shape(ctx, shape):
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise shape_error(ctx, f"negative dim in attribute shape {fmt_dims(dims)}")
    return shape_expr(dims)


@register_converter("", "RandomUniform", since_opset=1)
def random_uniform(ctx, *, shape, dtype=1, high=1.0, low=0.0, seed=None):
    return make_call("random_uniform", _static_shape(ctx, shape), dtype=_float_dtype(ctx, dtype, None),
                     low=float(low), high=float(high), seed=seed_attr(ctx, seed))


@register_converter("", "RandomUniformLike", since_opset=1)
def random_uniform_like(ctx, x, *, dtype=None, high=1.0, low=0.0, seed=None):
    return make_call("random_uniform", _like_shape(ctx, x), dtype=_float_dtype(ctx, dtype, x.dtype),
                     low=float(low), high=float(high), seed=seed_attr(ctx, seed))


@register_converter("", "RandomNormal", since_opset=1)
def random_normal(ctx, *, shape, dtype=1, mean=0.0, scale=1.0, seed=None):
    return make_call("random_normal", _static_shape(ctx, shape), dtype=_float_dtype(ctx, dtype, None),
                     mean=float(mean), scale=float(scale), seed=seed_attr(ctx, seed))


@register_converter("", "RandomNormalLike", since_opset=1)
def random_normal_like(ctx, x, *, dtype=None, mean=0.0, scale=1.0, seed=None):
    return make_call("random_normal", _like_shape(ctx, x), dtype=_float_dtype(ctx, dtype, x.dtype),
                     mean=float(mean), scale=float(scale), seed=seed_attr(ctx, seed))


@register_converter("", "Bernoulli", since_opset=15)
def bernoulli(ctx, x, *, dtype=None, seed=None):
    """Direct, rather than the function body (RandomUniformLike < x), so the
    draw is the reference evaluator's ``binomial(1, x)``."""
    out = None if dtype is None else onnx_dtype_name(int(dtype), f"{ctx.node_label()}'s dtype")
    return make_call("bernoulli", ctx.expr(x), dtype=out, seed=seed_attr(ctx, seed))


@register_converter("", "Multinomial", since_opset=7)
def multinomial(ctx, x, *, dtype=6, sample_size=1, seed=None):
    out = onnx_dtype_name(int(dtype), f"{ctx.node_label()}'s dtype")
    if out not in ("int32", "int64"):
        raise unsupported(ctx, f"dtype {out} (Multinomial draws int32 or int64 indices)")
    return make_call("multinomial", ctx.expr(x), dtype=out, sample_size=int(sample_size), seed=seed_attr(ctx, seed))


def dropout_training(ctx, x, ratio, training_mode, seed):
    """Dropout (opset 12+) whose training_mode is true or known only at run
    time: the random mask of ``dropout_train`` (ratio 0.5 when omitted)."""
    if x.dtype is not None and not x.dtype.startswith(("float", "bfloat")):
        raise unsupported(ctx, f"training-mode Dropout of {x.dtype}")
    if ratio is None:
        ratio = ctx.const(np.array(0.5, np.float32))
    call = make_call("dropout_train", ctx.expr(x), ctx.expr(ratio), ctx.expr(training_mode),
                     seed=seed_attr(ctx, seed))
    found = ctx.emit(call, "dropout").expr    # impure: emitted, never folded at import time
    return TupleGetItem(found, 0), TupleGetItem(found, 1)

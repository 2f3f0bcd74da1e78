"""Neural-network ONNX ops: MatMul, Gemm, Conv, ConvTranspose, pooling.

Window attributes resolve to the IR ops' canonical form here: the kernel
shape comes from the weight when not given, ``auto_pad`` becomes explicit
``padding`` (all begins, then all ends), and ConvTranspose's
``output_shape`` becomes padding too. SAME padding of a symbolic spatial dim
depends on its value modulo the stride; it is static when the stride is 1
(or the analyzer knows the remainder), and otherwise a symbolic pad done
explicitly before the window op (``_same_padding.py``).
"""

from __future__ import annotations

import math

import numpy as np

from ....ir.dims import Dim, format_dim
from ....ir.expr import Expr, TupleGetItem
from ....runtime.dtypes import numpy_dtype
from ....ops.registry import make_call
from ..registry import register_converter
from ..value import Value
from ._composite_common import reshape
from ._dynamic import aligned_for_broadcast, batch_aligned_for_matmul
from ._math_common import (
    astype, call, is_low_float, known_rank, malformed, rounded, scalar, spatial_attr, unsupported, working,
)
from ._same_padding import needs_explicit_pad, mask_like_spatial, pad_explicitly, same_padding
from ._shape_common import of_rank, rank_unknown

# ---------------------------------------------------------------- matmul, gemm


@register_converter("", "MatMul", since_opset=1)
def matmul(ctx, a, b):
    """numpy matmul (1-D operands, broadcast batch dims; batch dims only the run relates are
    broadcast then)."""
    a, b = batch_aligned_for_matmul(ctx, a, b)
    return make_call("matmul", ctx.expr(a), ctx.expr(b))


def _gemm(ctx, a, b, c, alpha, beta, trans_a, trans_b):
    """``alpha * A' @ B' + beta * C``; a low float in float32, rounded once
    (``A @ B`` may overflow float16 where the result does not)."""
    a, b = (of_rank(ctx, v, 2, name) if v.ndim < 0 else v for v, name in ((a, "A"), (b, "B")))
    lhs, rhs = working(ctx, a), working(ctx, b)
    dtype = lhs.struct_info.dtype
    if trans_a:
        lhs = call(ctx, "permute_dims", lhs, axes=(1, 0))
    if trans_b:
        rhs = call(ctx, "permute_dims", rhs, axes=(1, 0))
    product = call(ctx, "matmul", lhs, rhs)
    if alpha != 1.0:
        product = call(ctx, "multiply", product, scalar(ctx, alpha, dtype))
    if c is None or beta == 0.0:
        return rounded(ctx, product, a.dtype)
    bias = working(ctx, c)
    if beta != 1.0:
        bias = call(ctx, "multiply", bias, scalar(ctx, beta, bias.struct_info.dtype))
    # C's dims that only the run relates to the product's (a (k, N) C against M rows) broadcast then
    product, bias = (ctx.expr(v) for v in aligned_for_broadcast(ctx, ctx.emit(product), ctx.emit(bias)))
    return rounded(ctx, make_call("add", product, bias), a.dtype)


@register_converter("", "Gemm", since_opset=1)
def gemm_legacy(ctx, a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0, broadcast=0):  # noqa: N803
    """Gemm before opset 7 (``broadcast`` attr; numpy broadcasting covers both settings)."""
    return _gemm(ctx, a, b, c, alpha, beta, transA, transB)


@register_converter("", "Gemm", since_opset=7)
def gemm(ctx, a, b, c=None, *, alpha=1.0, beta=1.0, transA=0, transB=0):  # noqa: N803
    """``alpha * A' @ B' + beta * C`` composed from permute_dims, matmul, multiply, add."""
    return _gemm(ctx, a, b, c, alpha, beta, transA, transB)


# ---------------------------------------------------------------- window geometry


def _spatial_rank(ctx, x: Value, w: Value | None = None, kernel_shape=None) -> int:
    ndim = x.ndim if x.ndim >= 0 else (w.ndim if w is not None else len(kernel_shape) + 2 if kernel_shape else -1)
    if ndim < 0:
        raise unsupported(ctx, rank_unknown(ctx, x))
    if ndim < 3:
        raise malformed(ctx, f"the input must be (N, C, *spatial), got rank {ndim}")
    if x.ndim < 0:      # the weight's (kernel's) rank is the input's: cast to it, checked at run time
        of_rank(ctx, x, ndim)
    return ndim - 2


def _kernel(ctx, kernel_shape, w: Value | None, n: int) -> tuple[Dim, ...]:
    if kernel_shape:
        kernel = spatial_attr(ctx, kernel_shape, n, 1, "kernel_shape")
        if w is not None and w.shape is not None:
            for k, wk in zip(kernel, w.shape[2:]):
                if isinstance(wk, int) and wk != k:
                    raise malformed(ctx, f"kernel_shape {list(kernel)} does not match the "
                                     f"weight's shape {tuple(w.shape)}")
        return kernel
    if w is None or w.shape is None:
        raise unsupported(ctx, "kernel_shape is not given and the weight's shape is unknown")
    return tuple(w.shape[2:])


def _pads(ctx, pads, n: int) -> tuple[int, ...]:
    if not pads:
        return (0,) * (2 * n)
    pads = tuple(int(p) for p in pads)
    if len(pads) != 2 * n:
        raise malformed(ctx, f"pads={list(pads)} needs {2 * n} values")
    if any(p < 0 for p in pads):
        raise unsupported(ctx, f"negative pads {list(pads)}")
    return pads


def _split_total(total: int, upper: bool) -> tuple[int, int]:
    """(begin, end) of a total padding: SAME_UPPER puts the odd one at the end."""
    small, big = total // 2, total - total // 2
    return (small, big) if upper else (big, small)


def _window_padding(ctx, auto_pad: str, pads, x: Value, kernel, strides, dilations, n: int,
                    pool: bool = False) -> tuple[Dim, ...]:
    """Explicit (begins..., ends...) padding for Conv and the pools;
    symbolic for SAME over a symbolic dim with a stride (see _same_padding)."""
    if auto_pad in ("NOTSET", ""):
        return _pads(ctx, pads, n)
    if auto_pad == "VALID":
        return (0,) * (2 * n)
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        raise unsupported(ctx, f"auto_pad={auto_pad!r}")
    if x.shape is None:
        raise unsupported(ctx, f"auto_pad={auto_pad} needs the input's spatial dims")
    begins, ends = [], []
    for size, k, s, d in zip(x.shape[2:], kernel, strides, dilations):
        b, e = same_padding(ctx, size, k, s, d, auto_pad == "SAME_UPPER", pool)
        begins.append(b)
        ends.append(e)
    return tuple(begins + ends)


def _add_bias(ctx, out, bias: Value | None, ndim: int, in_float32: bool = False):
    """``out + bias`` with the per-channel bias laid out as (1, C, 1, ...); ``in_float32``: the
    bias in float32 (:func:`working`), as ``out`` is."""
    if bias is None:
        return out
    out = ctx.expr(ctx.emit(out))
    laid_out = call(ctx, "expand_dims", working(ctx, bias) if in_float32 else ctx.expr(bias),
                    axis=(0, *range(2, ndim)))
    return make_call("add", out, laid_out)


def _float32_expr(ctx, expr):
    """``expr`` (an input's expression, possibly padded) cast to float32 (see :func:`working`)."""
    return ctx.expr(ctx.emit(make_call("astype", expr, dtype="float32")))


# ---------------------------------------------------------------- conv


@register_converter("", "Conv", since_opset=1)
def conv(ctx, x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
         strides=None):
    """N-d convolution, then the bias added per channel."""
    return conv_call(ctx, x, w, b, auto_pad=auto_pad, dilations=dilations, group=group,
                     kernel_shape=kernel_shape, pads=pads, strides=strides)


def conv_call(ctx, x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None, pads=None,
              strides=None, exact=False):
    """:func:`conv`; ``exact``: the IR conv's attribute (an integer product in float, QLinearConv)."""
    n = _spatial_rank(ctx, x, w)
    kernel = _kernel(ctx, kernel_shape, w, n)
    strides = spatial_attr(ctx, strides, n, 1, "strides")
    dilations = spatial_attr(ctx, dilations, n, 1, "dilations")
    padding = _window_padding(ctx, auto_pad, pads, x, kernel, strides, dilations, n)
    data = ctx.expr(x)
    if needs_explicit_pad(padding):
        data, padding = pad_explicitly(ctx, x, padding, 0)
    # with a bias, a low float convolves and adds in float32 and rounds once: the node's one result
    low = b is not None and is_low_float(x.dtype)
    weight = working(ctx, w) if low else ctx.expr(w)
    out = make_call("nn.conv", _float32_expr(ctx, data) if low else data, weight, strides=strides,
                    padding=padding, dilation=dilations, groups=group, exact=exact)
    return rounded(ctx, _add_bias(ctx, out, b, n + 2, low), x.dtype) if low else _add_bias(ctx, out, b, n + 2)


@register_converter("", "ConvTranspose", since_opset=1)
def conv_transpose(ctx, x, w, b=None, *, auto_pad="NOTSET", dilations=None, group=1, kernel_shape=None,
                   output_padding=None, output_shape=None, pads=None, strides=None):
    """N-d transposed convolution. ``output_shape`` (or SAME auto_pad) fixes
    the output's spatial dims; the padding that gives them is computed as
    the ONNX spec says (SAME_UPPER puts the odd one at the end)."""
    n = _spatial_rank(ctx, x, w)
    kernel = _kernel(ctx, kernel_shape, w, n)
    strides = spatial_attr(ctx, strides, n, 1, "strides")
    dilations = spatial_attr(ctx, dilations, n, 1, "dilations")
    extra = spatial_attr(ctx, output_padding, n, 0, "output_padding")
    if output_shape and len(output_shape) == n + 2:
        output_shape = output_shape[2:]
    grow = (0,) * (2 * n)
    if output_shape or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        padding, grow = _transpose_padding(ctx, x, kernel, strides, dilations, extra, output_shape, auto_pad, n)
    elif auto_pad in ("NOTSET", "", "VALID"):
        padding = _pads(ctx, pads, n) if auto_pad != "VALID" else (0,) * (2 * n)
    else:
        raise unsupported(ctx, f"auto_pad={auto_pad!r}")
    low = b is not None and is_low_float(x.dtype)       # as Conv: float32, rounded once
    out = make_call("nn.conv_transpose", working(ctx, x) if low else ctx.expr(x),
                    working(ctx, w) if low else ctx.expr(w), strides=strides, padding=padding,
                    output_padding=extra, dilation=dilations, groups=group)
    if any(grow):   # cells no input reaches: zeros, then the bias
        out = make_call("pad", ctx.expr(ctx.emit(out)), pads=(0, 0, *grow[:n], 0, 0, *grow[n:]))
    return rounded(ctx, _add_bias(ctx, out, b, n + 2, low), x.dtype) if low else _add_bias(ctx, out, b, n + 2)


def _transpose_padding(ctx, x, kernel, strides, dilations, extra, output_shape, auto_pad, n):
    """(padding, growth) giving ``output_shape`` (or ``size * stride`` for
    SAME), as the spec's formula says. A negative padding (a kernel smaller
    than the stride, or an output_shape beyond the last input's reach)
    extends the output with zeros: the growth, padded on explicitly."""
    if x.shape is None:
        raise unsupported(ctx, "output_shape / SAME auto_pad need the input's spatial dims")
    if output_shape and len(output_shape) != n:
        raise malformed(ctx, f"output_shape={list(output_shape)} needs {n} values")
    begins, ends, grow_begins, grow_ends = [], [], [], []
    for i, (size, k, s, d, p) in enumerate(zip(x.shape[2:], kernel, strides, dilations, extra)):
        target = output_shape[i] if output_shape else size * s
        if not isinstance(k, int):
            raise unsupported(ctx, f"a symbolic kernel dim {k} with output_shape / SAME auto_pad")
        total = ctx.bb.analyzer.simplify(s * (size - 1) + p + d * (k - 1) + 1 - target)
        if not isinstance(total, int):
            raise unsupported(ctx, f"output_shape {list(output_shape)} with the symbolic input dim "
                                   f"{format_dim(size)}: the padding would depend on it")
        b, e = _split_total(total, auto_pad == "SAME_UPPER")
        begins.append(max(b, 0))
        ends.append(max(e, 0))
        grow_begins.append(max(-b, 0))
        grow_ends.append(max(-e, 0))
    return tuple(begins + ends), tuple(grow_begins + grow_ends)


# ---------------------------------------------------------------- pooling


def _pool_attrs(ctx, x, auto_pad, kernel_shape, pads, strides, dilations, ceil_mode):
    n = _spatial_rank(ctx, x, kernel_shape=kernel_shape)
    if not kernel_shape:
        raise malformed(ctx, "attribute kernel_shape is required")
    kernel = spatial_attr(ctx, kernel_shape, n, 1, "kernel_shape")
    strides = spatial_attr(ctx, strides, n, 1, "strides")
    dilations = spatial_attr(ctx, dilations, n, 1, "dilations")
    padding = _window_padding(ctx, auto_pad, pads, x, kernel, strides, dilations, n, pool=True)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        ceil_mode = 0  # the explicit SAME padding already gives ceil(size / stride)
    return dict(pool_size=kernel, strides=strides, padding=padding, dilation=dilations,
                ceil_mode=bool(ceil_mode))


def _pool_input(ctx, x: Value, attrs: dict, fill):
    """The pool's data and attrs: symbolic SAME padding is done first,
    explicitly with ``fill`` (see _same_padding)."""
    if not needs_explicit_pad(attrs["padding"]):
        return ctx.expr(x), attrs
    data, padding = pad_explicitly(ctx, x, attrs["padding"], fill)
    return data, {**attrs, "padding": padding}


def _lowest(dtype: str):
    """What max pooling pads with: no cell of the data is below it."""
    numpy = numpy_dtype(dtype)
    return int(np.iinfo(numpy).min) if numpy.kind in "iu" else float("-inf")


@register_converter("", "MaxPool", since_opset=1)
def max_pool(ctx, x, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, pads=None,
             storage_order=0, strides=None):
    """N-d max pooling; when the node asks for Indices, ``nn.max_pool_argmax``
    (``storage_order`` 1: column-major indices)."""
    outputs = list(ctx.node.output) if ctx.node is not None else []
    attrs = _pool_attrs(ctx, x, auto_pad, kernel_shape, pads, strides, dilations, ceil_mode)
    if len(outputs) > 1 and outputs[1]:
        if needs_explicit_pad(attrs["padding"]):
            raise unsupported(ctx, f"the Indices output with auto_pad {auto_pad} on a symbolic spatial dim "
                                   f"with a stride (the padding is only known at run time); bind the dim "
                                   f"(from_onnx dims=...) or export with explicit pads")
        out = ctx.emit(make_call("nn.max_pool_argmax", ctx.expr(x), storage_order=int(storage_order), **attrs),
                       "max_pool")
        return TupleGetItem(out.expr, 0), TupleGetItem(out.expr, 1)
    data, attrs = _pool_input(ctx, x, attrs, _lowest(x.dtype))
    return make_call("nn.max_pool", data, **attrs)


@register_converter("", "AveragePool", since_opset=1)
def avg_pool(ctx, x, *, auto_pad="NOTSET", ceil_mode=0, count_include_pad=0, dilations=None,
             kernel_shape=None, pads=None, strides=None):
    """N-d average pooling; ``count_include_pad`` counts padded cells."""
    attrs = _pool_attrs(ctx, x, auto_pad, kernel_shape, pads, strides, dilations, ceil_mode)
    if not needs_explicit_pad(attrs["padding"]) or count_include_pad:
        data, attrs = _pool_input(ctx, x, attrs, 0)
        return make_call("nn.avg_pool", data, count_include_pad=bool(count_include_pad), **attrs)
    # symbolic pads not counted: the mean over every tap of the zero-padded data, divided by the
    # share of real cells (the same mean over a padded mask of ones)
    data, padding = pad_explicitly(ctx, x, attrs["padding"], 0, axes_all=True)
    mask, _ = pad_explicitly(ctx, ctx.emit(mask_like_spatial(ctx, x)), attrs["padding"], 0, axes_all=True)
    attrs = {**attrs, "padding": padding, "count_include_pad": True}
    return make_call("divide", call(ctx, "nn.avg_pool", data, **attrs), call(ctx, "nn.avg_pool", mask, **attrs))


@register_converter("", "GlobalAveragePool", since_opset=1)
def global_avg_pool(ctx, x):
    return make_call("nn.global_avg_pool", ctx.expr(x))


@register_converter("", "GlobalMaxPool", since_opset=1)
def global_max_pool(ctx, x):
    return make_call("nn.global_max_pool", ctx.expr(x))


def _abs_pow(ctx, x, p: float):
    """``|x| ** p`` (square for 2, abs for 1)."""
    if p == 2:
        return call(ctx, "square", ctx.expr(x))
    magnitude = call(ctx, "abs", ctx.expr(x))
    return magnitude if p == 1 else call(ctx, "power", magnitude, scalar(ctx, p, x.dtype))


def _root(ctx, total, p: float, dtype: str):
    if p == 1:
        return total
    if p == 2:
        return make_call("sqrt", total)
    return make_call("power", total, scalar(ctx, 1.0 / p, dtype))


def _cover_overhang(x: Value, attrs: dict) -> dict:
    """Attrs whose end padding also covers a window that overhangs a static
    input shorter than it (onnxruntime's one partial window, see
    ops/definitions/nn.py), so that the mean counts every tap of the window."""
    padding = list(attrs["padding"])
    n = len(attrs["pool_size"])
    if x.shape is None or not all(isinstance(v, int) for v in padding):
        return attrs
    for i, (dim, k, d) in enumerate(zip(x.shape[2:], attrs["pool_size"], attrs["dilation"])):
        if isinstance(dim, int):
            span = dim + padding[i] + padding[n + i] - d * (k - 1) - 1
            if -attrs["strides"][i] < span < 0:
                padding[n + i] -= span
    return {**attrs, "padding": tuple(padding)}


def _lp_pool(ctx, x, p, auto_pad, ceil_mode, dilations, kernel_shape, pads, strides):
    if p <= 0:
        raise unsupported(ctx, f"p={p} (must be positive)")
    if ceil_mode:
        raise unsupported(ctx, "ceil_mode=1 for LpPool (the window sums are composed from average "
                               "pooling, which cannot count the partial last window)")
    attrs = _pool_attrs(ctx, x, auto_pad, kernel_shape, pads, strides, dilations, 0)
    # sum over the window = mean counting every tap (padding included) * window size
    data, attrs = _pool_input(ctx, ctx.emit(_abs_pow(ctx, x, p)), attrs, 0)
    attrs = _cover_overhang(x, attrs)
    mean = call(ctx, "nn.avg_pool", data, count_include_pad=True, **attrs)
    total = call(ctx, "multiply", mean, scalar(ctx, math.prod(attrs["pool_size"]), x.dtype))
    return _root(ctx, total, p, x.dtype)


@register_converter("", "LpPool", since_opset=1)
def lp_pool_legacy(ctx, x, *, auto_pad="NOTSET", kernel_shape=None, p=2.0, pads=None, strides=None):
    return _lp_pool(ctx, x, float(p), auto_pad, 0, None, kernel_shape, pads, strides)


@register_converter("", "LpPool", since_opset=2)
def lp_pool(ctx, x, *, auto_pad="NOTSET", ceil_mode=0, dilations=None, kernel_shape=None, p=2, pads=None,
            strides=None):
    """``(sum over the window of |x|**p) ** (1/p)``, composed from average pooling."""
    return _lp_pool(ctx, x, float(p), auto_pad, ceil_mode, dilations, kernel_shape, pads, strides)


@register_converter("", "GlobalLpPool", since_opset=1)
def global_lp_pool(ctx, x, *, p=2):
    """``(sum over the spatial dims of |x|**p) ** (1/p)``, kept as 1s."""
    ndim = known_rank(ctx, x)
    total = call(ctx, "sum", _abs_pow(ctx, x, float(p)), axis=tuple(range(2, ndim)), keepdims=True)
    return _root(ctx, total, float(p), x.dtype)


# ---------------------------------------------------------------- normalization


def _single_output(ctx, what: str) -> None:
    outputs = list(ctx.node.output) if ctx.node is not None else []
    if any(outputs[1:]):
        raise unsupported(ctx, what)


def _batch_norm(ctx, x, scale, bias, mean, var, epsilon, spatial=1):
    _single_output(ctx, "the training outputs of BatchNormalization (running / saved mean and variance)")
    params = [astype(ctx, v, x.dtype) for v in (scale, bias, mean, var)]
    if spatial:
        return make_call("nn.batch_norm", ctx.expr(x), *params, axis=1, epsilon=float(epsilon))
    # spatial=0: one parameter per (channel, *spatial) position, shaped like x[1:]
    scale_, bias_, mean_, var_ = params
    std = call(ctx, "sqrt", call(ctx, "add", var_, scalar(ctx, epsilon, x.dtype)))
    centered = call(ctx, "subtract", ctx.expr(x), mean_)
    return make_call("add", call(ctx, "multiply", call(ctx, "divide", centered, std), scale_), bias_)


@register_converter("", "BatchNormalization", since_opset=1)
def batch_norm_legacy(ctx, x, scale, bias, mean, var, *, epsilon=1e-5, momentum=0.9, spatial=1, is_test=0,
                      consumed_inputs=()):
    """Opsets 1 and 6: ``is_test`` is ignored (relaxpack compiles for
    inference, with the given running statistics)."""
    return _batch_norm(ctx, x, scale, bias, mean, var, epsilon, spatial)


@register_converter("", "BatchNormalization", since_opset=7)
def batch_norm_spatial(ctx, x, scale, bias, mean, var, *, epsilon=1e-5, momentum=0.9, spatial=1):
    return _batch_norm(ctx, x, scale, bias, mean, var, epsilon, spatial)


@register_converter("", "BatchNormalization", since_opset=9)
def batch_norm_v9(ctx, x, scale, bias, mean, var, *, epsilon=1e-5, momentum=0.9):
    return _batch_norm(ctx, x, scale, bias, mean, var, epsilon)


@register_converter("", "BatchNormalization", since_opset=14)
def batch_norm(ctx, x, scale, bias, mean, var, *, epsilon=1e-5, momentum=0.9, training_mode=0):
    """Inference batch normalization, or with ``training_mode=1`` normalization
    by the batch statistics plus the updated running mean and variance."""
    if training_mode:
        return _batch_norm_training(ctx, x, scale, bias, mean, var, float(epsilon), float(momentum))
    return _batch_norm(ctx, x, scale, bias, mean, var, epsilon)


def _batch_norm_training(ctx, x, scale, bias, mean, var, epsilon: float, momentum: float):
    """Y normalized with the batch mean and the population (biased) variance
    over every axis but the channel axis 1; ``running = input * momentum +
    batch * (1 - momentum)`` in the statistics' dtype. The statistics are
    computed in float32 for 16-bit floats, as the spec asks."""
    ndim = known_rank(ctx, x)
    if ndim < 2:
        raise malformed(ctx, f"the input must have rank >= 2 (N, C, ...), got rank {ndim}")
    axes = tuple(i for i in range(ndim) if i != 1)
    stat_dtype = "float32" if x.dtype in ("float16", "bfloat16") else x.dtype
    data = astype(ctx, x, stat_dtype)
    batch_mean = call(ctx, "mean", data, axis=axes)
    centered = call(ctx, "subtract", data, call(ctx, "mean", data, axis=axes, keepdims=True))
    batch_var = call(ctx, "mean", call(ctx, "square", centered), axis=axes)
    params = [astype(ctx, v, x.dtype) for v in (scale, bias)]
    stats = [astype(ctx, v, x.dtype) for v in (batch_mean, batch_var)]
    y = make_call("nn.batch_norm", ctx.expr(x), *params, *stats, axis=1, epsilon=epsilon)
    running = [_running_stat(ctx, old, new, momentum) for old, new in ((mean, batch_mean), (var, batch_var))]
    return (y, *running)


def _running_stat(ctx, old: Value, batch, momentum: float):
    """``old * momentum + batch * (1 - momentum)`` in ``old``'s dtype."""
    dtype = old.dtype
    kept = call(ctx, "multiply", ctx.expr(old), scalar(ctx, momentum, dtype))
    added = call(ctx, "multiply", astype(ctx, batch, dtype), scalar(ctx, 1.0 - momentum, dtype))
    return ctx.emit(make_call("add", kept, added))


@register_converter("", "InstanceNormalization", since_opset=1)
def instance_norm(ctx, x, scale, bias, *, epsilon=1e-5, consumed_inputs=()):
    return make_call("nn.instance_norm", ctx.expr(x), ctx.expr(scale), ctx.expr(bias), epsilon=float(epsilon))


_FLOAT_TYPE = 1  # TensorProto.FLOAT


@register_converter("", "LayerNormalization", since_opset=17)
def layer_norm(ctx, x, scale, bias=None, *, axis=-1, epsilon=1e-5, stash_type=_FLOAT_TYPE):
    """Normalize over the dims from ``axis`` on. The optional Mean and
    InvStdDev outputs are computed in float32 (``stash_type`` 1)."""
    if x.ndim < 0 and axis >= 0 and scale.ndim >= 0:    # the scale's dims are the normalized ones
        x = of_rank(ctx, x, axis + scale.ndim)
    if x.ndim >= 0:
        if not -x.ndim <= axis < x.ndim:
            raise malformed(ctx, f"axis {axis} is out of range for rank {x.ndim}")
        axes = tuple(range(axis % x.ndim, x.ndim))
    elif axis < 0:      # the last -axis dims of whatever rank the run meets
        axes = tuple(range(axis, 0))
    else:
        known_rank(ctx, x)      # refuses, naming why the rank is unknown
    if stash_type != _FLOAT_TYPE:
        raise unsupported(ctx, f"stash_type={stash_type} (only 1, float32 statistics)")
    y = _layer_norm_affine(ctx, x, scale, bias, axes, float(epsilon))
    outputs = list(ctx.node.output) if ctx.node is not None else []
    if not any(outputs[1:]):
        return y
    data = astype(ctx, x, "float32")
    mean = call(ctx, "mean", data, axis=axes, keepdims=True)
    centered = call(ctx, "subtract", data, mean)
    var = call(ctx, "mean", call(ctx, "square", centered), axis=axes, keepdims=True)
    inv_std = call(ctx, "rsqrt", call(ctx, "add", var, scalar(ctx, epsilon, "float32")))
    return y, ctx.emit(mean), ctx.emit(inv_std)


def _layer_norm_affine(ctx, x, scale, bias, axes: tuple[int, ...], epsilon: float) -> Expr:
    """``nn.layer_norm`` with Scale and B; the function body multiplies and adds them with
    broadcasting against all of X, so onnxruntime takes a Scale of more dims than the normalized
    ones (``(1, C)``, ``(T, C)``): leading 1s are dropped, other leading dims scale and shift
    after a plain normalization."""
    n = len(axes)
    params = [v for v in (scale, bias) if v is not None]
    if all(v.ndim <= n for v in params):
        args = [ctx.expr(x), ctx.expr(scale)] + ([] if bias is None else [ctx.expr(bias)])
        return make_call("nn.layer_norm", *args, axes=axes, epsilon=epsilon)
    if all(v.ndim >= 0 and all(d == 1 for d in v.shape[:max(v.ndim - n, 0)]) for v in params):
        trimmed = [reshape(ctx, ctx.expr(v), v.shape[max(v.ndim - n, 0):]) for v in params]
        return make_call("nn.layer_norm", ctx.expr(x), *trimmed, axes=axes, epsilon=epsilon)
    one = ctx.const(np.ones((1,) * n, numpy_dtype(scale.dtype)))
    normalized = ctx.emit(make_call("nn.layer_norm", ctx.expr(x), ctx.expr(one), axes=axes, epsilon=epsilon))
    scaled = ctx.emit(make_call("multiply", *(ctx.expr(v) for v in aligned_for_broadcast(ctx, normalized, scale))))
    if bias is None:
        return ctx.expr(scaled)
    return make_call("add", *(ctx.expr(v) for v in aligned_for_broadcast(ctx, scaled, bias)))


@register_converter("", "LRN", since_opset=1)
def lrn(ctx, x, *, size, alpha=1e-4, beta=0.75, bias=1.0):
    return make_call("nn.lrn", ctx.expr(x), size=int(size), alpha=float(alpha), beta=float(beta),
                     bias=float(bias))


@register_converter("", "MeanVarianceNormalization", since_opset=9)
def mean_variance_norm(ctx, x, *, axes=(0, 2, 3)):
    """ONNX's function body: ``(x - E[x]) / (sqrt(E[x^2] - E[x]^2) + 1e-9)``."""
    axes = tuple(int(a) for a in axes)
    data = working(ctx, x)   # float32 for float16: the squares overflow where the result does not
    dtype = data.struct_info.dtype
    mean = call(ctx, "mean", data, axis=axes, keepdims=True)
    mean_sq = call(ctx, "mean", call(ctx, "square", data), axis=axes, keepdims=True)
    std = call(ctx, "sqrt", call(ctx, "subtract", mean_sq, call(ctx, "square", mean)))
    denom = call(ctx, "add", std, scalar(ctx, 1e-9, dtype))
    return rounded(ctx, make_call("divide", call(ctx, "subtract", data, mean), denom), x.dtype)

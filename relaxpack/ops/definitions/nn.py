"""Convolution and pooling over N spatial dims, channels first or channels last.

``data_layout`` says where the channels are: ``"NCHW"`` (the default, ONNX's
``(N, C, *spatial)``) or ``"NHWC"`` (``(N, *spatial, C)``, whatever the
number of spatial dims). A channels-last conv takes its weight as
``(*kernel, C/groups, O)`` ("HWIO", as TensorFlow), the layout its kernel
reads without a transpose; a channels-last conv_transpose takes
``(C, *kernel, O/groups)``, so its GEMM reads ``(C, taps * O)`` as it is.
ConvertLayout (``passes/convert_layout.py``) makes these forms; inference
works on the channels-first view of the operands and permutes the result
back. A conv's ``out_layout`` (None: its ``data_layout``) may be ``"NHWC"``
for NCHW data: the channels-first engine writes its result channels last
(a region's entry, without a transpose after the conv).

Window attributes (``strides``, ``dilation``, ``pool_size``) take one int for
every spatial dim or a tuple with one value per spatial dim; ``padding``
takes an int, one value per spatial dim (symmetric) or ONNX's ``pads``
order: all begins, then all ends. The output spatial dims follow ONNX, and
may be symbolic::

    out = (in + pad_begin + pad_end - dilation * (k - 1) - 1) // stride + 1

>>> make_call("nn.conv", x, w, strides=(2, 2), padding=(1, 1, 1, 1))   # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import Dim, DimAnalyzer, dim_min, format_dim
from ...ir.expr import Call, Var
from ...ir.struct_info import StructInfo, TensorStructInfo
from ..registry import REQUIRED, register_op
from .common import (
    FLOAT, NUMERIC, attr_error, bool_attr, check_dtype_kind, fmt_shape, int_attr, pads_attr,
    per_spatial, provably_different, result_vdevice, same_dtype, shape_error, tensor_arg, unproven_error,
    with_shape,
)


LAYOUTS = ("NCHW", "NHWC")


def data_layout(call: Call) -> str:
    """The call's ``data_layout`` attribute, checked."""
    layout = call.attrs.get("data_layout", "NCHW")
    if layout not in LAYOUTS:
        raise attr_error(call, f"attribute data_layout must be one of {LAYOUTS}, got {layout!r}")
    return layout


def output_layout(call: Call) -> str:
    """The layout of the call's result: its ``out_layout`` attribute (a conv's;
    None or absent: the ``data_layout``), checked. Only NCHW data may give an
    NHWC result."""
    layout, out = data_layout(call), call.attrs.get("out_layout")
    if out is None or out == layout:
        return layout
    if out not in LAYOUTS:
        raise attr_error(call, f"attribute out_layout must be None or one of {LAYOUTS}, got {out!r}")
    if layout != "NCHW":
        raise attr_error(call, f"out_layout {out!r} with data_layout {layout!r} is not supported "
                               f"(only NCHW data to an NHWC result)")
    return out


def to_channels_first(shape: tuple) -> tuple:
    """``(N, *spatial, C)`` -> ``(N, C, *spatial)``."""
    return (shape[0], shape[-1], *shape[1:-1])


def to_channels_last(shape: tuple) -> tuple:
    """``(N, C, *spatial)`` -> ``(N, *spatial, C)``."""
    return (shape[0], *shape[2:], shape[1])


def _permuted(sinfo: TensorStructInfo, fn) -> TensorStructInfo:
    if not isinstance(sinfo, TensorStructInfo) or sinfo.shape is None or sinfo.ndim < 3:
        return sinfo
    return with_shape(sinfo, fn(sinfo.shape))


def _hwio_to_oihw(shape: tuple) -> tuple:
    return (shape[-1], shape[-2], *shape[:-2])


def _iohw_last_to_first(shape: tuple) -> tuple:
    """A channels-last conv_transpose weight ``(C, *kernel, O/groups)`` -> ``(C, O/groups, *kernel)``."""
    return (shape[0], shape[-1], *shape[1:-1])


def channels_first_infer(infer, with_weight: bool, weight_to_first=_hwio_to_oihw):
    """Inference for an op with ``data_layout``: a channels-last call is
    inferred on channels-first placeholders of its data (and weight, whose
    channels-last shape ``weight_to_first`` maps back: HWIO by default), and
    the result is permuted back (also for NCHW data with an NHWC ``out_layout``)."""
    def wrapped(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
        if output_layout(call) != data_layout(call):       # NCHW data, an NHWC result
            return _permuted(infer(call, analyzer), to_channels_last)
        if data_layout(call) == "NCHW":
            return infer(call, analyzer)
        args = list(call.args)
        args[0] = Var("data", _permuted(args[0].struct_info, to_channels_first))
        if with_weight:
            args[1] = Var("weight", _permuted(args[1].struct_info, weight_to_first))
        out = infer(call.replace(args=tuple(args)), analyzer)
        return _permuted(out, to_channels_last)
    return wrapped


def _window_rank(call: Call, sinfos: tuple[TensorStructInfo, ...]) -> int:
    """The common rank of data (and weight) with >= 1 spatial dim; -1 if unknown."""
    ranks = {s.ndim for s in sinfos if s.ndim >= 0}
    if len(ranks) > 1:
        shapes = " and ".join(fmt_shape(s.shape) if s.shape is not None else f"rank {s.ndim}"
                              for s in sinfos)
        raise shape_error(call, f"data and weight must have the same rank, got {shapes}")
    ndim = ranks.pop() if ranks else -1
    if 0 <= ndim < 3:
        raise shape_error(call, f"data must be (N, C, *spatial) with at least one spatial dim, "
                                f"got rank {ndim}")
    return ndim


def _check_positive(call: Call, dims: list[Dim], data: TensorStructInfo, analyzer: DimAnalyzer) -> None:
    for d in dims:
        if (isinstance(d, int) and d <= 0) or (not isinstance(d, int) and analyzer.prove_le(d, 0)):
            raise shape_error(call, f"the window does not fit: input {fmt_shape(data.shape)} gives "
                                    f"output spatial dims ({', '.join(map(format_dim, dims))})")


def _groups(call: Call) -> int:
    groups = int_attr(call, "groups")
    if groups < 1:
        raise attr_error(call, f"attribute groups must be >= 1, got {groups}")
    return groups


def _check_channels(call: Call, have: Dim, want: Dim, analyzer: DimAnalyzer, what: str,
                    data: TensorStructInfo, weight: TensorStructInfo) -> None:
    if have == want or analyzer.prove_equal(have, want):
        return
    message = (f"{what}: data {fmt_shape(data.shape)} has {format_dim(have)} channels "
               f"but weight {fmt_shape(weight.shape)} expects {format_dim(want)}")
    if (isinstance(have, int) and isinstance(want, int)) or provably_different(analyzer, have, want):
        raise shape_error(call, message)
    # not provable either way: the importer assumes it (a run-time check), a strict build refuses
    raise unproven_error(call, f"{message}, which are not provably equal (use R.match_cast)", have, want)


def _conv_operands(call: Call):
    """What conv and conv_transpose check alike: operands, dtype, device, groups,
    rank (-1: unknown), and per spatial dim the strides, dilation and pads."""
    data, weight = tensor_arg(call, 0, "data"), tensor_arg(call, 1, "weight")
    dtype = same_dtype(call, (data, weight), ("data", "weight"))
    check_dtype_kind(call, data, NUMERIC)
    vdevice = result_vdevice(call, (data, weight))
    groups = _groups(call)
    ndim = _window_rank(call, (data, weight))
    if ndim < 0:
        return data, weight, dtype, vdevice, groups, ndim, None
    n = ndim - 2
    window = (per_spatial(call, "strides", n, minimum=1), per_spatial(call, "dilation", n, minimum=1),
              *pads_attr(call, "padding", n))
    return data, weight, dtype, vdevice, groups, ndim, window


def _infer_conv(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, weight, dtype, vdevice, groups, ndim, window = _conv_operands(call)
    if ndim < 0:
        return TensorStructInfo(None, dtype, -1, vdevice)
    strides, dilation, pad_b, pad_e = window
    if data.shape is None or weight.shape is None:
        return TensorStructInfo(None, dtype, ndim, vdevice)
    batch, channels, *spatial = data.shape
    out_channels, in_per_group, *kernel = weight.shape
    _check_channels(call, channels, groups * in_per_group, analyzer,
                    f"channels must equal groups ({groups}) * weight dim 1", data, weight)
    if isinstance(out_channels, int) and out_channels % groups:
        raise shape_error(call, f"weight {fmt_shape(weight.shape)} has {out_channels} output channels, "
                                f"not a multiple of groups ({groups})")
    out = [(x + b + e - d * (k - 1) - 1) // s + 1
           for x, k, s, d, b, e in zip(spatial, kernel, strides, dilation, pad_b, pad_e)]
    _check_positive(call, out, data, analyzer)
    return TensorStructInfo((batch, out_channels, *out), dtype, vdevice=vdevice)


#: conv inference in either layout (nn.conv_bias_act shares it)
infer_conv = channels_first_infer(_infer_conv, True)



def conv_workspace(inputs: tuple, attrs, out: StructInfo) -> Dim | None:
    """The conv engine's scratch bytes (runtime/kernels/conv_direct.py: the
    padded copy, the im2col columns, the GEMM result), linear in the batch;
    None unless every other dim is static. ``nn.conv_bias_act`` shares it."""
    from ...runtime.kernels.nn import conv_workspace as kernel_workspace   # loads the kernels: build time only
    data, weight = inputs[:2]
    if not (_shaped(data) and _shaped(weight) and _shaped(out) and out.dtype):
        return None
    return kernel_workspace(data.shape, weight.shape, out.dtype, **{k: attrs[k] for k in CONV_ATTRS})


def _shaped(sinfo) -> bool:
    return isinstance(sinfo, TensorStructInfo) and sinfo.shape is not None


CONV = register_op("nn.conv", infer=infer_conv,
            attrs={"strides": 1, "padding": 0, "dilation": 1, "groups": 1, "exact": False, "data_layout": "NCHW",
                   "out_layout": None},
            num_args=2, workspace=conv_workspace,
            doc="N-d convolution: data (N, C, *spatial), weight (O, C/groups, *kernel); "
                "NHWC: data (N, *spatial, C), weight (*kernel, C/groups, O); "
                "out_layout NHWC (NCHW data): the result (N, *spatial, O). exact: an integer "
                "product in float (QLinearConv): only sums of products (no Winograd), and no "
                "pass folds anything into the weight.")
#: a conv's attributes, in its schema's order (conv_bias_act takes them too)
CONV_ATTRS = tuple(CONV.attrs)


def _infer_conv_transpose(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, weight, dtype, vdevice, groups, ndim, window = _conv_operands(call)
    if ndim < 0:
        return TensorStructInfo(None, dtype, -1, vdevice)
    strides, dilation, pad_b, pad_e = window
    out_pad = per_spatial(call, "output_padding", ndim - 2, minimum=0)
    for p, s, d in zip(out_pad, strides, dilation):
        if p >= max(s, d):
            raise attr_error(call, f"output_padding {out_pad} must be smaller than the stride "
                                   f"or the dilation")
    if data.shape is None or weight.shape is None:
        return TensorStructInfo(None, dtype, ndim, vdevice)
    batch, channels, *spatial = data.shape
    in_channels, out_per_group, *kernel = weight.shape
    _check_channels(call, channels, in_channels, analyzer, "channels must equal weight dim 0",
                    data, weight)
    out = [s * (x - 1) + p + d * (k - 1) + 1 - b - e
           for x, k, s, d, p, b, e in zip(spatial, kernel, strides, dilation, out_pad, pad_b, pad_e)]
    _check_positive(call, out, data, analyzer)
    return TensorStructInfo((batch, out_per_group * groups, *out), dtype, vdevice=vdevice)


register_op("nn.conv_transpose", infer=channels_first_infer(_infer_conv_transpose, True, _iohw_last_to_first),
            attrs={"strides": 1, "padding": 0, "output_padding": 0, "dilation": 1, "groups": 1,
                   "data_layout": "NCHW"},
            num_args=2,
            doc="N-d transposed convolution: data (N, C, *spatial), weight (C, O/groups, *kernel); "
                "NHWC: data (N, *spatial, C), weight (C, *kernel, O/groups).")


# ---------------------------------------------------------------- pooling

def _pool_dim(x: Dim, k: int, s: int, d: int, b: int, e: int, ceil_mode: bool,
              analyzer: DimAnalyzer) -> Dim:
    """One pooled dim (an expression with ``min`` when ceil mode's last-window
    rule depends on a symbolic dim's value)."""
    span = x + b + e - d * (k - 1) - 1
    if not ceil_mode:
        return _floor_mode_dim(span, s)
    out = (span + s - 1) // s + 1
    # ONNX/PyTorch drop a last window that would start inside the end
    # padding: when (out - 1) * s >= x + b. Since (out - 1) * s < span + s,
    # that cannot happen when s <= d * (k - 1) + 1 - e.
    if s <= d * (k - 1) + 1 - e:
        return out
    last_start = (out - 1) * s
    if isinstance(x, int):
        return out - 1 if last_start >= x + b else out
    if analyzer.prove_lt(last_start, x + b):
        return out
    if analyzer.prove_ge(last_start, x + b):
        return out - 1
    # the windows start at i * s for i < out, and (the rule) at i * s <= x + b - 1
    return analyzer.simplify(dim_min(out, (x + b - 1) // s + 1))


def _floor_mode_dim(span: Dim, s: int) -> Dim:
    """``span / s + 1``. A static span is divided truncating toward zero, as
    onnxruntime (and Paddle, PyTorch) size a pool whose window overhangs a
    short input: one partial window, where the ONNX formula's floor gives
    none (they differ only for ``-s < span < 0``). A symbolic span keeps the
    floor, whose expressions simplify and read well (``h // 2``); the kernel
    refuses, in one line, an input that short (design notes: "Pools over
    inputs shorter than the window")."""
    if isinstance(span, int):
        return (-(-span // s) if span < 0 else span // s) + 1
    return span // s + 1


def _pool(with_count_include_pad: bool):
    def infer(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
        data = tensor_arg(call, 0, "data")
        check_dtype_kind(call, data, NUMERIC)
        ceil_mode = bool_attr(call, "ceil_mode")
        if with_count_include_pad:
            bool_attr(call, "count_include_pad")
        ndim = _window_rank(call, (data,))
        if ndim < 0:
            return data
        n = ndim - 2
        pool = per_spatial(call, "pool_size", n, minimum=1)
        strides = per_spatial(call, "strides", n, minimum=1)
        dilation = per_spatial(call, "dilation", n, minimum=1)
        pad_b, pad_e = pads_attr(call, "padding", n)
        for k, d, b, e in zip(pool, dilation, pad_b, pad_e):
            if b >= d * (k - 1) + 1 or e >= d * (k - 1) + 1:
                raise attr_error(call, f"padding {call.attrs['padding']!r} must be smaller than the "
                                       f"window {pool} (dilated)")
        if data.shape is None:
            return data
        out = [_pool_dim(x, k, s, d, b, e, ceil_mode, analyzer)
               for x, k, s, d, b, e in zip(data.shape[2:], pool, strides, dilation, pad_b, pad_e)]
        _check_positive(call, out, data, analyzer)
        return with_shape(data, (*data.shape[:2], *out))
    return infer


_POOL_ATTRS = {"pool_size": REQUIRED, "strides": 1, "padding": 0, "dilation": 1, "ceil_mode": False,
               "data_layout": "NCHW"}

register_op("nn.max_pool", infer=channels_first_infer(_pool(False), False), attrs=_POOL_ATTRS, num_args=1,
            doc="N-d max pooling over the spatial dims of (N, C, *spatial) or (N, *spatial, C).")
register_op("nn.avg_pool", infer=channels_first_infer(_pool(True), False),
            attrs={**_POOL_ATTRS, "count_include_pad": False},
            num_args=1, doc="N-d average pooling; count_include_pad counts padded cells.")


def _infer_global_pool(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0, "data")
    check_dtype_kind(call, data, FLOAT)
    ndim = _window_rank(call, (data,))
    if data.shape is None:
        return data
    return with_shape(data, (*data.shape[:2], *([1] * (ndim - 2))))


_GLOBAL_POOL = channels_first_infer(_infer_global_pool, False)
register_op("nn.global_avg_pool", infer=_GLOBAL_POOL, attrs={"data_layout": "NCHW"}, num_args=1,
            doc="Mean over all spatial dims of (N, C, *spatial) or (N, *spatial, C), kept as 1s.")
register_op("nn.global_max_pool", infer=_GLOBAL_POOL, attrs={"data_layout": "NCHW"}, num_args=1,
            doc="Max over all spatial dims of (N, C, *spatial) or (N, *spatial, C), kept as 1s.")

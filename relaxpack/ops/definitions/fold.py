"""Windows that remember positions: nn.max_pool_argmax, nn.max_unpool, nn.col2im.

``nn.max_pool_argmax`` is ``nn.max_pool`` that also returns where each
maximum came from: an int64 index into the flattened input (batch and
channel included, padding not counted), row-major, or column-major over
the spatial dims when ``storage_order`` is 1 (ONNX MaxPool's Indices)::

    lv = R.nn.max_pool_argmax(x, pool_size=(2, 2), strides=(2, 2))   # (values, indices)

``nn.max_unpool`` scatters values back to those indices in a zero tensor of
the pooled input's shape, padded at the end to ``output_shape`` when given
(ONNX MaxUnpool). ``nn.col2im`` sums sliding blocks ``(N, C * prod(block),
L)`` back into an image ``(N, C, *image_shape)`` (ONNX Col2Im).
"""

from __future__ import annotations

import math

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo, TupleStructInfo
from ..registry import REQUIRED, register_op
from .common import (
    INT, NUMERIC, attr_error, check_dtype_kind, exact_div, fmt_sinfo, int_attr, int_tuple_attr, pads_attr,
    per_spatial, shape_error, tensor_arg, with_shape,
)
from .nn import _POOL_ATTRS, _pool

# ---------------------------------------------------------------- nn.max_pool_argmax

_infer_pool = _pool(False)


def _infer_max_pool_argmax(call: Call, analyzer: DimAnalyzer) -> TupleStructInfo:
    if int_attr(call, "storage_order") not in (0, 1):
        raise attr_error(call, f"attribute storage_order must be 0 or 1, got {call.attrs['storage_order']!r}")
    values = _infer_pool(call, analyzer)
    return TupleStructInfo((values, with_shape(values, values.shape, "int64", values.ndim)))


register_op("nn.max_pool_argmax", infer=_infer_max_pool_argmax, num_args=1,
            attrs={**{k: v for k, v in _POOL_ATTRS.items() if k != "data_layout"}, "storage_order": 0},
            doc="nn.max_pool plus the int64 flat input index of each maximum (ONNX MaxPool's Indices).")


# ---------------------------------------------------------------- nn.max_unpool


def unpooled_dims(spatial, kernel, strides, begins, ends) -> list:
    """MaxUnpool's default output dims: ``(x - 1) * s - pads + k``."""
    return [(x - 1) * s - b - e + k for x, k, s, b, e in zip(spatial, kernel, strides, begins, ends)]


def _infer_max_unpool(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data, indices = tensor_arg(call, 0), tensor_arg(call, 1, "indices")
    check_dtype_kind(call, data, NUMERIC)
    check_dtype_kind(call, indices, INT, "indices")
    if data.ndim >= 0 and data.ndim < 3:
        raise shape_error(call, f"data {fmt_sinfo(data)} must be (N, C, *spatial)")
    output_shape = int_tuple_attr(call, "output_shape", allow_none=True)
    if data.ndim < 0:
        return data
    n = data.ndim - 2
    kernel = per_spatial(call, "pool_size", n, minimum=1)
    strides = per_spatial(call, "strides", n, minimum=1)
    begins, ends = pads_attr(call, "padding", n)
    if output_shape is not None:
        if len(output_shape) != data.ndim:
            raise attr_error(call, f"output_shape {output_shape} must have {data.ndim} dims for data {fmt_sinfo(data)}")
        return with_shape(data, output_shape)
    if data.shape is None:
        return data
    return with_shape(data, (*data.shape[:2], *unpooled_dims(data.shape[2:], kernel, strides, begins, ends)))


register_op("nn.max_unpool", infer=_infer_max_unpool, num_args=2, attrs={
    "pool_size": REQUIRED, "strides": 1, "padding": 0, "output_shape": None,
}, doc="Scatter data to the flat indices of a max pooling, zeros elsewhere (ONNX MaxUnpool).")


# ---------------------------------------------------------------- nn.col2im


def _infer_col2im(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    check_dtype_kind(call, data, NUMERIC)
    image = int_tuple_attr(call, "image_shape")
    block = int_tuple_attr(call, "block_shape")
    n = len(image)
    if len(block) != n or n < 1 or min(block) < 1 or min(image) < 0:
        raise attr_error(call, f"image_shape {image} and block_shape {block} must give one size per spatial dim")
    strides = per_spatial(call, "strides", n, minimum=1)
    dilation = per_spatial(call, "dilation", n, minimum=1)
    begins, ends = pads_attr(call, "padding", n)
    if data.ndim >= 0 and data.ndim != 3:
        raise shape_error(call, f"data {fmt_sinfo(data)} must be (N, C * prod(block_shape), L)")
    if data.shape is None:
        return with_shape(data, None, ndim=n + 2)
    batch, columns, length = data.shape
    blocks = [(x + b + e - d * (k - 1) - 1) // s + 1
              for x, k, s, d, b, e in zip(image, block, strides, dilation, begins, ends)]
    if min(blocks) < 1 or (isinstance(length, int) and length != math.prod(blocks)):
        raise shape_error(call, f"data {fmt_sinfo(data)} needs L = {math.prod(blocks)} block positions "
                                f"({' * '.join(map(str, blocks))}) for image_shape {image} and block_shape {block}")
    channels = exact_div(columns, math.prod(block), analyzer)
    if channels is None:
        if isinstance(columns, int):
            raise shape_error(call, f"data {fmt_sinfo(data)}: dim 1 is not a multiple of prod(block_shape) "
                                    f"= {math.prod(block)}")
        channels = columns // math.prod(block)
    return with_shape(data, (batch, channels, *image))


register_op("nn.col2im", infer=_infer_col2im, num_args=1, attrs={
    "image_shape": REQUIRED, "block_shape": REQUIRED, "strides": 1, "padding": 0, "dilation": 1,
}, doc="Sum sliding blocks (N, C * prod(block), L) back into an image (N, C, *image_shape) (ONNX Col2Im).")

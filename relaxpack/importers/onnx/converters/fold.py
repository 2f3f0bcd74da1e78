"""MaxUnpool and Col2Im: windows scattered back into an image.

Their output shapes come from operands (MaxUnpool's ``output_shape``,
Col2Im's ``image_shape`` and ``block_shape``). Constants become the static
IR ops ``nn.max_unpool`` / ``nn.col2im``; operands only known at run time
call the packed kernels ``dyn.max_unpool`` / ``dyn.col2im`` and
``match_cast`` the result to fresh dims.

MaxUnpool follows onnx's reference (from which the backend tests come):
the indices address the unpooled shape ``(x - 1) * stride - pads + kernel``
and a larger ``output_shape`` pads its end with zeros. onnxruntime instead
reads the indices as positions in ``output_shape``; the two agree when
``output_shape`` is omitted or equals the unpooled shape.
"""

from __future__ import annotations

from ....ops.registry import make_call
from ..registry import register_converter
from ..value import Value
from ._dynamic import packed_call
from ._math_common import spatial_attr
from ._shape_common import rank_unknown, shape_error, static_ints, unsupported


def _pads(ctx, pads, n: int) -> tuple[int, ...]:
    pads = tuple(int(p) for p in pads) if pads else (0,) * (2 * n)
    if len(pads) != 2 * n or min(pads) < 0:
        raise shape_error(ctx, f"pads {list(pads)} need {2 * n} non-negative values")
    return pads


def _constant(ctx, value: Value | None, what: str) -> tuple[int, ...] | None:
    """The contents of a constant int input, None when only known at run time."""
    if value is None or value.const is None and value.sym is None:
        return None
    ints = static_ints(ctx, value, what)
    return ints if ints is not None and all(isinstance(i, int) for i in ints) else None


# ---------------------------------------------------------------- MaxUnpool


@register_converter("", "MaxUnpool", since_opset=9)
def max_unpool(ctx, x, indices, output_shape=None, *, kernel_shape, pads=None, strides=None):
    if x.ndim < 0:
        raise unsupported(ctx, rank_unknown(ctx, x))
    if x.ndim < 3:
        raise shape_error(ctx, f"the input must be (N, C, *spatial), got rank {x.ndim}")
    n = x.ndim - 2
    attrs = dict(pool_size=spatial_attr(ctx, kernel_shape, n, 1, "kernel_shape"),
                 strides=spatial_attr(ctx, strides, n, 1, "strides"), padding=_pads(ctx, pads, n))
    if output_shape is None:
        return make_call("nn.max_unpool", ctx.expr(x), ctx.expr(indices), **attrs)
    shape = _constant(ctx, output_shape, "output_shape")
    if shape is not None:
        return make_call("nn.max_unpool", ctx.expr(x), ctx.expr(indices), output_shape=shape, **attrs)
    return packed_call(ctx, "dyn.max_unpool", [x, indices, output_shape], [((None,) * x.ndim, x.dtype)],
                       "unpool", **attrs)


# ---------------------------------------------------------------- Col2Im


@register_converter("", "Col2Im", since_opset=18)
def col2im(ctx, x, image_shape, block_shape, *, dilations=None, pads=None, strides=None):
    image = _constant(ctx, image_shape, "image_shape")
    block = _constant(ctx, block_shape, "block_shape")
    n = image_shape.shape[0] if image_shape.shape is not None else None
    if not isinstance(n, int):
        raise unsupported(ctx, "image_shape of unknown length (the output rank)")
    attrs = dict(strides=spatial_attr(ctx, strides, n, 1, "strides"),
                 dilation=spatial_attr(ctx, dilations, n, 1, "dilations"), padding=_pads(ctx, pads, n))
    if image is not None and block is not None:
        return make_call("nn.col2im", ctx.expr(x), image_shape=image, block_shape=block, **attrs)
    batch = x.shape[0] if x.shape is not None else None
    dims = tuple(image) if image is not None else (None,) * n
    return packed_call(ctx, "dyn.col2im", [x, image_shape, block_shape], [((batch, None, *dims), x.dtype)],
                       "col2im", **attrs)

"""ImageDecoder: an encoded image file (1-D uint8) to (H, W, C) pixels.

The height and width are in the file, so the converter calls the packed
kernel ``dyn.image_decoder`` and binds its result to fresh dims; C is known
from ``pixel_format`` (3 for RGB and BGR, 1 for Grayscale)::

    ImageDecoder(data: (n,), pixel_format="RGB")
        ->  lv = R.call_packed("dyn.image_decoder", data, pixel_format="RGB")
            y = R.match_cast(lv, R.Tensor((image_d0, image_d1, 3), "uint8"))

A constant input is decoded at import time. Which formats and variants
decode is documented in :mod:`relaxpack.runtime.kernels.image_decode`.
"""

from __future__ import annotations

from ..registry import register_converter
from ._dynamic import packed_call
from ._shape_common import shape_error, unsupported

_CHANNELS = {"RGB": 3, "BGR": 3, "Grayscale": 1}


@register_converter("", "ImageDecoder", since_opset=20)
def image_decoder(ctx, encoded_stream, *, pixel_format="RGB"):
    if pixel_format not in _CHANNELS:
        raise unsupported(ctx, f"pixel_format {pixel_format!r} (expected one of {sorted(_CHANNELS)})")
    if encoded_stream.dtype not in (None, "uint8"):
        raise shape_error(ctx, f"the encoded stream must be uint8, got {encoded_stream.dtype}")
    if encoded_stream.ndim not in (-1, 1):
        raise shape_error(ctx, f"the encoded stream must be 1-D, got rank {encoded_stream.ndim}")
    return packed_call(ctx, "dyn.image_decoder", [encoded_stream],
                       [((None, None, _CHANNELS[pixel_format]), "uint8")], "image", pixel_format=pixel_format)

"""``dyn.image_decoder``: ONNX ImageDecoder, in numpy and the standard library.

The format is recognised by its magic bytes; each codec lives in its own
module and returns (H, W, C) uint8 with C = 1 (grey), 2 (grey + alpha),
3 (RGB) or 4 (RGBA). The result is then converted to the requested
``pixel_format`` as onnx's reference (Pillow) does: RGB drops alpha and
repeats grey, BGR reverses RGB, Grayscale is Pillow's ``convert("L")``,
``(299 R + 587 G + 114 B) / 1000`` in 16-bit fixed point.

Decoded: PNG, BMP, PNM (PBM/PGM/PPM), TIFF (see each module for the
variants). JPEG 2000 and WebP are recognised and refused with an
:class:`~relaxpack.errors.UnsupportedOpError`; malformed input raises an
:class:`~relaxpack.errors.ExecutionError` naming the problem. (The ONNX
spec lets a decoder return an empty tensor for undecodable input; failing
loudly is the clearer contract, and the one onnx's reference follows.)

    dyn.image_decoder(data(n,) uint8, pixel_format="RGB")  ->  (H, W, 3) uint8
"""

from __future__ import annotations

import numpy as np

from ....errors import ShapeError
from .._registry import register_packed
from ._common import corrupt, unsupported
from .bmp import decode_bmp
from .jpeg import decode_jpeg
from .png import decode_png
from .pnm import decode_pnm
from .tiff import decode_tiff

PIXEL_FORMATS = {"RGB": 3, "BGR": 3, "Grayscale": 1}


def detect_format(data: bytes) -> str:
    """The name of ``data``'s image format, from its first bytes."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "PNG"
    if data.startswith(b"\xff\xd8\xff"):
        return "JPEG"
    if data.startswith(b"BM"):
        return "BMP"
    if data.startswith((b"II*\x00", b"MM\x00*")):
        return "TIFF"
    if len(data) > 2 and data[0:1] == b"P" and data[1:2] in b"123456" and data[2:3] in b" \t\n\r\x0b\x0c#":
        return "PNM"
    if data.startswith((b"\x00\x00\x00\x0cjP  \r\n\x87\n", b"\xff\x4f\xff\x51")):
        return "JPEG 2000"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WebP"
    return "unknown"


_DECODERS = {"PNG": decode_png, "BMP": decode_bmp, "PNM": decode_pnm, "TIFF": decode_tiff,
             "JPEG": decode_jpeg}


def decode_image(data: bytes) -> np.ndarray:
    """The pixels of an encoded image, (H, W, C) uint8 with C in 1..4."""
    fmt = detect_format(data)
    decoder = _DECODERS.get(fmt)
    if decoder is not None:
        return decoder(data)
    if fmt == "unknown":
        raise corrupt("input", f"unrecognised image format (first bytes {data[:8].hex(' ')})")
    raise unsupported(fmt, "decoding")


def to_pixel_format(pixels: np.ndarray, pixel_format: str) -> np.ndarray:
    """(H, W, C) pixels converted to RGB, BGR or Grayscale, as Pillow converts."""
    channels = pixels.shape[2]
    if pixel_format == "Grayscale":
        if channels <= 2:
            return np.ascontiguousarray(pixels[:, :, :1])
        rgb = pixels[:, :, :3].astype(np.uint32)
        # Pillow's L24: the ITU-R 601-2 luma weights in 16-bit fixed point, rounded
        luma = (rgb[:, :, 0] * 19595 + rgb[:, :, 1] * 38470 + rgb[:, :, 2] * 7471 + 0x8000) >> 16
        return luma.astype(np.uint8)[:, :, None]
    rgb = np.repeat(pixels[:, :, :1], 3, axis=2) if channels <= 2 else pixels[:, :, :3]
    return np.ascontiguousarray(rgb[:, :, ::-1] if pixel_format == "BGR" else rgb)


@register_packed("dyn.image_decoder")
def image_decoder(encoded: np.ndarray, *, pixel_format: str) -> np.ndarray:
    """Decode the image file held in the 1-D uint8 tensor ``encoded``."""
    if pixel_format not in PIXEL_FORMATS:
        raise ShapeError(f"ImageDecoder: pixel_format {pixel_format!r} is not one of {sorted(PIXEL_FORMATS)}")
    encoded = np.asarray(encoded)
    if encoded.dtype != np.uint8 or encoded.ndim != 1:
        raise ShapeError(f"ImageDecoder: the encoded image must be a 1-D uint8 tensor, "
                         f"got {encoded.dtype} of shape {encoded.shape}")
    return to_pixel_format(decode_image(encoded.tobytes()), pixel_format)

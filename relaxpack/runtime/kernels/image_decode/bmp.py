"""BMP: uncompressed Windows and OS/2 bitmaps.

Bit depths 1, 4 and 8 (through the colour table), 16 (5-5-5, or bit fields
such as 5-6-5), 24 and 32 (BGRX, or byte-aligned bit fields, with alpha
when the header declares an alpha mask); rows bottom-up (positive height) or
top-down (negative height), each padded to 4 bytes. Run-length compressed
bitmaps (RLE4, RLE8) and embedded JPEG/PNG are unsupported.

    decode_bmp(b"BM...")  ->  (H, W, 3) uint8, or (H, W, 4) with an alpha mask
"""

from __future__ import annotations

import numpy as np

from ._common import Reader, check_size, corrupt, expand_bits, unsupported

SIGNATURE = b"BM"
FMT = "BMP"
_BI_RGB, _BI_BITFIELDS, _BI_ALPHABITFIELDS = 0, 3, 6
_COMPRESSION_NAMES = {1: "RLE8 compression", 2: "RLE4 compression", 4: "embedded JPEG", 5: "embedded PNG"}
#: the masks a bitmap without BI_BITFIELDS implies: 16 bits are 5-5-5, 32 bits BGRX
_DEFAULT_MASKS = {16: (0x7C00, 0x03E0, 0x001F, 0), 24: (0xFF0000, 0xFF00, 0xFF, 0), 32: (0xFF0000, 0xFF00, 0xFF, 0)}


def decode_bmp(data: bytes) -> np.ndarray:
    """The pixels of a BMP file, (H, W, 3 or 4) uint8."""
    reader = Reader(data, FMT, 10)
    (pixel_offset, header_size) = reader.unpack("<II", "file header")
    width, height, bpp, compression, colors_used, masks = _read_info(reader, header_size)
    top_down = height < 0
    height = abs(height)
    channels = 4 if masks and masks[3] else 3
    check_size(FMT, height, width, channels)
    stride = (bpp * width + 31) // 32 * 4
    palette = _read_palette(reader, header_size, bpp, colors_used) if bpp <= 8 else None
    reader.seek(pixel_offset, "pixel data")
    rows = np.frombuffer(reader.take(stride * height, "pixel data"), np.uint8).reshape(height, stride)
    if not top_down:
        rows = rows[::-1]
    if palette is not None:
        indices = expand_bits(rows, bpp, width)
        top = int(indices.max())
        if top >= len(palette):
            raise corrupt(FMT, f"colour index {top} is beyond the {len(palette)}-entry colour table")
        return palette[indices]
    return _unpack_masked(rows, width, bpp, masks or _DEFAULT_MASKS[bpp])


def _read_info(reader: Reader, header_size: int):
    """(width, height, bits per pixel, compression, colours used, masks or None)."""
    if header_size == 12:   # OS/2 BITMAPCOREHEADER
        width, height, _, bpp = reader.unpack("<HHHH", "BITMAPCOREHEADER")
        compression, colors_used = _BI_RGB, 0
    elif header_size in (40, 52, 56, 64, 108, 124):
        width, height, _, bpp, compression, _, _, _, colors_used, _ = reader.unpack(
            "<iiHHIIiiII", "BITMAPINFOHEADER")
    else:
        raise unsupported(FMT, f"an info header of {header_size} bytes")
    if compression in _COMPRESSION_NAMES:
        raise unsupported(FMT, _COMPRESSION_NAMES[compression])
    if compression not in (_BI_RGB, _BI_BITFIELDS, _BI_ALPHABITFIELDS):
        raise corrupt(FMT, f"unknown compression {compression}")
    if bpp not in (1, 4, 8, 16, 24, 32):
        raise corrupt(FMT, f"{bpp} bits per pixel is not a BMP bit depth")
    masks = None
    if compression != _BI_RGB:
        if bpp not in (16, 32):
            raise corrupt(FMT, f"bit-field masks with {bpp} bits per pixel")
        # the masks follow a 40-byte header and are part of any longer one
        reader.seek(14 + 40, "bit-field masks")
        count = 4 if header_size >= 56 or compression == _BI_ALPHABITFIELDS else 3
        masks = reader.unpack(f"<{count}I", "bit-field masks") + (0,) * (4 - count)
    if not 0 <= colors_used <= 1 << min(bpp, 24):
        raise corrupt(FMT, f"{colors_used} colours used with {bpp} bits per pixel")
    return width, height, bpp, compression, colors_used, masks


def _read_palette(reader: Reader, header_size: int, bpp: int, colors_used: int) -> np.ndarray:
    """The colour table as (entries, 3) RGB."""
    entry = 3 if header_size == 12 else 4
    count = colors_used or 1 << bpp
    reader.seek(14 + header_size, "colour table")
    table = np.frombuffer(reader.take(entry * count, "colour table"), np.uint8).reshape(count, entry)
    return np.ascontiguousarray(table[:, 2::-1])


def _unpack_masked(rows: np.ndarray, width: int, bpp: int, masks: tuple[int, ...]) -> np.ndarray:
    """Pixels of 16, 24 or 32 bits split by the R, G, B (and A) masks, each
    scaled to 8 bits (value * 255 // max, as Pillow's 5- and 6-bit unpackers)."""
    nbytes = bpp // 8
    raw = rows[:, :width * nbytes].reshape(rows.shape[0], width, nbytes).astype(np.uint32)
    pixels = np.zeros(raw.shape[:2], np.uint32)
    for i in range(nbytes):
        pixels |= raw[:, :, i] << np.uint32(8 * i)
    channels = list(masks) if masks[3] else list(masks[:3])
    out = np.empty(raw.shape[:2] + (len(channels),), np.uint8)
    for c, mask in enumerate(channels):
        if not mask:
            raise corrupt(FMT, f"the bit-field masks {[hex(m) for m in masks]} leave a colour channel empty")
        shift = (mask & -mask).bit_length() - 1
        top = mask >> shift
        if top & (top + 1):
            raise corrupt(FMT, f"bit-field mask {mask:#x} is not one run of bits")
        values = (pixels & np.uint32(mask)) >> np.uint32(shift)
        out[:, :, c] = values if top == 255 else values.astype(np.uint64) * 255 // top
    return out

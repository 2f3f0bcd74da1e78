"""TIFF: the first image of a baseline TIFF file, in strips.

Byte order II or MM; grey (BlackIsZero, WhiteIsZero), RGB and palette
images; 1, 2, 4, 8 or 16 bits per sample (16 keeps the high byte, fewer
than 8 bits of grey stretch to 0..255, as in PNG); chunky or planar
samples; uncompressed, LZW, Deflate or PackBits strips, with or without the
horizontal-differencing predictor. Tiled, BigTIFF, CMYK, YCbCr, float
samples and the other compressions are refused as unsupported.

    decode_tiff(b"II*\\x00...")  ->  (H, W, C) uint8, C = 1, 2, 3 or 4
"""

from __future__ import annotations

import numpy as np

from ._common import Reader, check_size, corrupt, expand_bits, scale_to_8_bits, unsupported
from .tiff_compression import DECOMPRESSORS, UNSUPPORTED

FMT = "TIFF"
#: field type -> (struct code, size)
_TYPES = {1: ("B", 1), 2: ("B", 1), 3: ("H", 2), 4: ("I", 4), 5: ("II", 8), 6: ("b", 1), 7: ("B", 1),
          8: ("h", 2), 9: ("i", 4), 10: ("ii", 8), 11: ("f", 4), 12: ("d", 8)}
_WIDTH, _HEIGHT, _BITS, _COMPRESSION, _PHOTOMETRIC, _FILL_ORDER = 256, 257, 258, 259, 262, 266
_STRIP_OFFSETS, _SAMPLES, _ROWS_PER_STRIP, _STRIP_BYTES, _PLANAR, _PREDICTOR = 273, 277, 278, 279, 284, 317
_COLOR_MAP, _TILE_WIDTH, _SAMPLE_FORMAT = 320, 322, 339
_PHOTOMETRIC_CHANNELS = {0: 1, 1: 1, 2: 3, 3: 1}
_PHOTOMETRIC_NAMES = {4: "transparency-mask", 5: "CMYK (separated)", 6: "YCbCr", 8: "CIE L*a*b*",
                      32844: "LogL", 32845: "LogLuv"}


def decode_tiff(data: bytes) -> np.ndarray:
    """The pixels of the first image of a TIFF file, (H, W, C) uint8."""
    order = "<" if data[:2] == b"II" else ">"
    reader = Reader(data, FMT, 2)
    (magic, ifd) = reader.unpack(order + "HI", "header")
    if magic == 43:
        raise unsupported(FMT, "BigTIFF")
    tags = _read_ifd(reader, order, ifd)
    layout = _layout(tags)
    width, height, spp, bits, planar = (layout[k] for k in ("width", "height", "spp", "bits", "planar"))
    check_size(FMT, height, width, spp)
    planes = spp if planar == 2 else 1
    per_plane = 1 if planar == 2 else spp
    samples = np.empty((planes, height, width * per_plane), np.uint8)
    row_bytes = -(-width * per_plane * bits // 8)
    rows = _read_strips(reader, tags, layout, planes, row_bytes)
    for p in range(planes):
        plane = rows[p]
        if bits == 16:
            plane = plane.view(order + "u2")
        if layout["predictor"] == 2:
            plane = _undo_predictor(plane, per_plane, bits)
        samples[p] = (plane >> 8).astype(np.uint8) if bits == 16 else expand_bits(plane, bits, width * per_plane)
    if planar == 2:
        image = np.moveaxis(samples, 0, 2)
    else:
        image = samples[0].reshape(height, width, spp)
    return _photometric(image, tags, layout, order)


def _read_ifd(reader: Reader, order: str, offset: int) -> dict[int, tuple]:
    """The tags of the IFD at ``offset``: tag -> tuple of values."""
    reader.seek(offset, "first IFD")
    (count,) = reader.unpack(order + "H", "IFD entry count")
    tags = {}
    for _ in range(count):
        tag, kind, n, inline = reader.unpack(order + "HHI4s", "IFD entry")
        if kind not in _TYPES:
            continue    # unknown field types are skipped, as TIFF 6.0 asks
        code, size = _TYPES[kind]
        if n * size <= 4:
            raw = inline[:n * size]
        else:
            at = Reader(reader.data, FMT)
            at.seek(int.from_bytes(inline, "little" if order == "<" else "big"), f"tag {tag} values")
            raw = at.take(n * size, f"tag {tag} values")
        tags[tag] = Reader(raw, FMT).unpack(order + code * n, f"tag {tag} values")
    return tags


def _one(tags: dict, tag: int, default: int | None = None) -> int:
    values = tags.get(tag)
    if values is None:
        if default is None:
            raise corrupt(FMT, f"the required tag {tag} is missing")
        return default
    if len(values) < 1:
        raise corrupt(FMT, f"tag {tag} has no value")
    return int(values[0])


def _layout(tags: dict) -> dict:
    """The image's geometry and encoding, every value checked."""
    if _TILE_WIDTH in tags:
        raise unsupported(FMT, "a tiled image")
    photometric = _one(tags, _PHOTOMETRIC, 1)
    if photometric in _PHOTOMETRIC_NAMES:
        raise unsupported(FMT, f"the {_PHOTOMETRIC_NAMES[photometric]} photometric interpretation")
    if photometric not in _PHOTOMETRIC_CHANNELS:
        raise corrupt(FMT, f"unknown photometric interpretation {photometric}")
    compression = _one(tags, _COMPRESSION, 1)
    if compression in UNSUPPORTED:
        raise unsupported(FMT, f"{UNSUPPORTED[compression]} compression")
    if compression not in DECOMPRESSORS:
        raise corrupt(FMT, f"unknown compression {compression}")
    spp = _one(tags, _SAMPLES, 1)
    bits_all = tags.get(_BITS, (1,))
    bits = int(bits_all[0])
    if any(int(b) != bits for b in bits_all):
        raise unsupported(FMT, f"mixed bits per sample {list(bits_all)}")
    if bits not in (1, 2, 4, 8, 16) or (bits != 8 and bits != 16 and photometric == 2):
        raise unsupported(FMT, f"{bits} bits per sample with photometric interpretation {photometric}")
    if any(int(f) != 1 for f in tags.get(_SAMPLE_FORMAT, (1,))):
        raise unsupported(FMT, f"sample format {list(tags[_SAMPLE_FORMAT])} (only unsigned integers)")
    if _one(tags, _FILL_ORDER, 1) != 1:
        raise unsupported(FMT, "fill order 2 (least significant bit first)")
    if not _PHOTOMETRIC_CHANNELS[photometric] <= spp <= 16:
        raise corrupt(FMT, f"{spp} samples per pixel with photometric interpretation {photometric}")
    planar = _one(tags, _PLANAR, 1)
    predictor = _one(tags, _PREDICTOR, 1)
    if planar not in (1, 2) or predictor not in (1, 2, 3):
        raise corrupt(FMT, f"unknown planar configuration {planar} or predictor {predictor}")
    if photometric == 3 and bits == 16:
        raise unsupported(FMT, "a 16-bit palette image")
    if predictor == 3 or (predictor == 2 and bits < 8):
        raise unsupported(FMT, f"predictor {predictor} with {bits}-bit samples")
    height = _one(tags, _HEIGHT)
    return {"width": _one(tags, _WIDTH), "height": height, "spp": spp, "bits": bits, "planar": planar,
            "predictor": predictor, "photometric": photometric, "compression": compression,
            "rows_per_strip": max(1, min(_one(tags, _ROWS_PER_STRIP, height), height))}


def _read_strips(reader: Reader, tags: dict, layout: dict, planes: int, row_bytes: int) -> np.ndarray:
    """(planes, height, row_bytes) uint8: every strip, decompressed."""
    height, per_strip = layout["height"], layout["rows_per_strip"]
    strips_per_plane = -(-height // per_strip)
    offsets, counts = tags.get(_STRIP_OFFSETS, ()), tags.get(_STRIP_BYTES, ())
    if len(offsets) != strips_per_plane * planes or len(counts) != len(offsets):
        raise corrupt(FMT, f"{len(offsets)} strip offsets and {len(counts)} byte counts for "
                           f"{strips_per_plane * planes} strips")
    _, decompress = DECOMPRESSORS[layout["compression"]]
    rows = np.empty((planes, height, row_bytes), np.uint8)
    for s, (offset, count) in enumerate(zip(offsets, counts)):
        plane, first = divmod(s, strips_per_plane)
        first *= per_strip
        nrows = min(per_strip, height - first)
        needed = nrows * row_bytes
        reader.seek(int(offset), f"strip {s}")
        raw = reader.take(int(count) if decompress else needed, f"strip {s}")
        if decompress:
            raw = decompress(raw, needed)
            if len(raw) < needed:
                raise corrupt(FMT, f"strip {s} decompresses to {len(raw)} bytes, the image needs {needed}")
        rows[plane, first:first + nrows] = np.frombuffer(raw, np.uint8, needed).reshape(nrows, row_bytes)
    return rows


def _undo_predictor(rows: np.ndarray, per_pixel: int, bits: int) -> np.ndarray:
    """Horizontal differencing undone: a running sum per sample along each row,
    modulo the sample size."""
    height = rows.shape[0]
    dtype = np.uint8 if bits == 8 else np.uint16
    samples = rows.astype(dtype).reshape(height, -1, per_pixel)
    return np.cumsum(samples, axis=1, dtype=dtype).reshape(height, -1)


def _photometric(image: np.ndarray, tags: dict, layout: dict, order: str) -> np.ndarray:
    """Samples to grey, RGB or their alpha forms: WhiteIsZero inverted,
    palette indices looked up, small grey samples stretched."""
    photometric, bits = layout["photometric"], layout["bits"]
    if photometric == 3:
        colors = tags.get(_COLOR_MAP, ())
        if len(colors) != 3 * (1 << bits):
            raise corrupt(FMT, f"the colour map has {len(colors)} values, not 3 * 2**{bits}")
        palette = (np.array(colors, np.uint32).reshape(3, -1).T >> 8).astype(np.uint8)
        return palette[image[:, :, 0]]
    base = _PHOTOMETRIC_CHANNELS[photometric]
    image = image[:, :, :base + 1] if image.shape[2] > base else image
    if base == 1:
        grey = image[:, :, :1]
        if bits < 8:
            grey = scale_to_8_bits(grey, bits)
        if photometric == 0:
            grey = 255 - grey
        image = np.concatenate([grey, image[:, :, 1:]], axis=2) if image.shape[2] > 1 else grey
    return np.ascontiguousarray(image)

"""PNG: chunks, zlib (the standard library's), unfiltering in numpy.

Every chunk's CRC is checked; IDAT data is inflated with a bounded output
size (a forged header cannot make it allocate more than the image needs).
All bit depths and colour types of the PNG spec decode, interlaced (Adam7)
or not. Samples of 16 bits keep their high byte, samples of 1, 2 or 4 bits
of grey are stretched to 0..255 (as Pillow does), palette images are
expanded through PLTE; transparency (tRNS) is ignored, as Pillow's RGB
conversion ignores it.

    decode_png(b"\\x89PNG...")  ->  (H, W, C) uint8, C = 1 (grey), 2 (grey+alpha), 3 (RGB) or 4 (RGBA)
"""

from __future__ import annotations

import zlib

import numpy as np

from ._common import Reader, check_size, corrupt, expand_bits, scale_to_8_bits, unsupported

SIGNATURE = b"\x89PNG\r\n\x1a\n"
FMT = "PNG"
#: colour type -> (channels, allowed bit depths)
_COLOR_TYPES = {0: (1, (1, 2, 4, 8, 16)), 2: (3, (8, 16)), 3: (1, (1, 2, 4, 8)),
                4: (2, (8, 16)), 6: (4, (8, 16))}
#: Adam7 passes: (x0, y0, dx, dy)
_ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))


def decode_png(data: bytes) -> np.ndarray:
    """The pixels of a PNG file, (H, W, C) uint8."""
    header, palette, idat = _read_chunks(data)
    width, height, depth, color_type, interlace = header
    channels, _ = _COLOR_TYPES[color_type]
    check_size(FMT, height, width, channels)
    if color_type == 3 and palette is None:
        raise corrupt(FMT, "a palette image (colour type 3) has no PLTE chunk")
    passes = _ADAM7 if interlace else ((0, 0, 1, 1),)
    sizes = [(-(-(height - y0) // dy), -(-(width - x0) // dx)) for x0, y0, dx, dy in passes]
    bits_per_pixel = depth * channels
    row_bytes = [-(-w * bits_per_pixel // 8) for _, w in sizes]
    needed = sum(h * (1 + rb) for (h, w), rb in zip(sizes, row_bytes) if h and w)
    raw = _inflate(idat, needed)
    image = np.empty((height, width, channels), np.uint8)
    offset = 0
    for (x0, y0, dx, dy), (h, w), rb in zip(passes, sizes, row_bytes):
        if not h or not w:
            continue     # an empty pass has no rows, not even filter bytes
        filtered = np.frombuffer(raw, np.uint8, h * (1 + rb), offset).reshape(h, 1 + rb)
        offset += h * (1 + rb)
        rows = unfilter(filtered, max(1, bits_per_pixel // 8))
        samples = expand_bits(rows, depth, w * channels).reshape(h, w, channels)
        image[y0::dy, x0::dx] = samples
    if color_type == 3:
        return _apply_palette(image[:, :, 0], palette)
    if depth < 8:
        return scale_to_8_bits(image, depth)
    return image


def _read_chunks(data: bytes):
    """(IHDR fields, PLTE entries or None, concatenated IDAT data)."""
    reader = Reader(data, FMT, len(SIGNATURE))
    header, palette, idat = None, None, []
    while True:
        length, kind = reader.unpack(">I4s", "chunk header")
        if length >= 1 << 31:
            raise corrupt(FMT, f"chunk {kind!r} claims {length} bytes (the limit is 2**31 - 1)")
        body = reader.take(length, f"{kind!r} chunk")
        (crc,) = reader.unpack(">I", f"{kind!r} chunk CRC")
        if zlib.crc32(kind + body) != crc:
            raise corrupt(FMT, f"chunk {kind!r} at offset {reader.pos - length - 12} fails its CRC check")
        if header is None and kind != b"IHDR":
            raise corrupt(FMT, f"the first chunk is {kind!r}, not IHDR")
        if kind == b"IHDR":
            header = _parse_header(body)
        elif kind == b"PLTE":
            if length % 3 or not 0 < length <= 768:
                raise corrupt(FMT, f"PLTE has {length} bytes, not 3 per entry for 1 to 256 entries")
            palette = np.frombuffer(body, np.uint8).reshape(-1, 3)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        elif not kind[0] & 0x20:
            raise unsupported(FMT, f"the unknown critical chunk {kind!r}")
    if not idat:
        raise corrupt(FMT, "no IDAT chunk")
    return header, palette, b"".join(idat)


def _parse_header(body: bytes) -> tuple[int, int, int, int, int]:
    if len(body) != 13:
        raise corrupt(FMT, f"IHDR has {len(body)} bytes, not 13")
    width, height, depth, color_type, compression, filtering, interlace = Reader(body, FMT).unpack(
        ">IIBBBBB", "IHDR")
    if color_type not in _COLOR_TYPES or depth not in _COLOR_TYPES[color_type][1]:
        raise corrupt(FMT, f"bit depth {depth} with colour type {color_type} is not a valid combination")
    if compression or filtering or interlace > 1:
        raise corrupt(FMT, f"unknown compression {compression}, filter method {filtering} "
                           f"or interlace method {interlace}")
    return width, height, depth, color_type, interlace


def _inflate(idat: bytes, needed: int) -> bytes:
    """The first ``needed`` bytes of the zlib stream ``idat``, never more
    (trailing data is ignored, as Pillow ignores it)."""
    inflater = zlib.decompressobj()
    try:
        raw = inflater.decompress(idat, needed)
    except zlib.error as exc:
        raise corrupt(FMT, f"the IDAT zlib stream is corrupt ({exc})") from None
    if len(raw) < needed:
        raise corrupt(FMT, f"the IDAT data inflates to {len(raw)} bytes, the image needs {needed}")
    return raw


def unfilter(filtered: np.ndarray, bpp: int) -> np.ndarray:
    """Undo PNG's per-row filters: ``filtered`` is (rows, 1 + row_bytes)
    with the filter type first; ``bpp`` is the bytes per complete pixel
    (at least 1). Returns (rows, row_bytes) uint8."""
    rows = np.empty((filtered.shape[0], filtered.shape[1] - 1), np.uint8)
    prior = np.zeros(rows.shape[1], np.uint8)
    for y in range(rows.shape[0]):
        kind, line = int(filtered[y, 0]), filtered[y, 1:]
        if kind == 0:
            rows[y] = line
        elif kind == 1:
            rows[y] = _sub(line, bpp)
        elif kind == 2:
            np.add(line, prior, out=rows[y])
        elif kind == 3:
            rows[y] = np.frombuffer(_average(line.tobytes(), prior.tobytes(), bpp), np.uint8)
        elif kind == 4:
            rows[y] = np.frombuffer(_paeth(line.tobytes(), prior.tobytes(), bpp), np.uint8)
        else:
            raise corrupt(FMT, f"row {y} has filter type {kind}; valid types are 0 to 4")
        prior = rows[y]
    return rows


def _sub(line: np.ndarray, bpp: int) -> np.ndarray:
    """Sub: each byte adds the byte one pixel left, a running sum mod 256 per channel."""
    padded = np.zeros(-(-line.size // bpp) * bpp, np.uint8)
    padded[:line.size] = line
    return np.cumsum(padded.reshape(-1, bpp), axis=0, dtype=np.uint8).reshape(-1)[:line.size]


def _average(line: bytes, prior: bytes, bpp: int) -> bytearray:
    """Average: each byte adds floor((left + up) / 2); sequential, so plain Python."""
    out = bytearray(len(line))
    for i in range(len(line)):
        left = out[i - bpp] if i >= bpp else 0
        out[i] = (line[i] + ((left + prior[i]) >> 1)) & 0xFF
    return out


def _paeth(line: bytes, prior: bytes, bpp: int) -> bytearray:
    """Paeth: each byte adds whichever of left, up, up-left is nearest left + up - up-left."""
    out = bytearray(len(line))
    for i in range(len(line)):
        if i >= bpp:
            a, c = out[i - bpp], prior[i - bpp]
        else:
            a = c = 0
        b = prior[i]
        pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
        predictor = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
        out[i] = (line[i] + predictor) & 0xFF
    return out


def _apply_palette(indices: np.ndarray, palette: np.ndarray) -> np.ndarray:
    top = int(indices.max())
    if top >= len(palette):
        raise corrupt(FMT, f"palette index {top} is beyond the {len(palette)}-entry PLTE")
    return palette[indices]

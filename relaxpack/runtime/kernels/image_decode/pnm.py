"""PNM (Netpbm): PBM, PGM and PPM, binary (P4, P5, P6) and plain (P1, P2, P3).

Bitmaps come out 0 (black, a set bit) or 255; samples of a maxval other
than 255 are rescaled to 0..255 as Pillow does (``round(v / maxval * 255)``,
values above maxval clamped in binary files and rejected in plain ones).

    decode_pnm(b"P6 2 1 255 ...")  ->  (H, W, 3) uint8 (P3, P6) or (H, W, 1) (the others)
"""

from __future__ import annotations

import re

import numpy as np

from ._common import check_size, corrupt

FMT = "PNM"
MAGICS = (b"P1", b"P2", b"P3", b"P4", b"P5", b"P6")
_WHITESPACE = b" \t\n\r\x0b\x0c"
_COMMENT = re.compile(rb"#[^\n\r]*")


def decode_pnm(data: bytes) -> np.ndarray:
    """The pixels of a PBM/PGM/PPM file, (H, W, 1 or 3) uint8."""
    kind = data[1] - ord("0")
    bitmap = kind in (1, 4)
    fields, pos = _header(data, 2 if bitmap else 3)
    width, height = fields[0], fields[1]
    maxval = 1 if bitmap else fields[2]
    if not 0 < maxval < 65536:
        raise corrupt(FMT, f"maxval {maxval} is outside 1..65535")
    channels = 3 if kind in (3, 6) else 1
    check_size(FMT, height, width, channels)
    count = height * width * channels
    if kind == 4:
        return _packed_bits(data, pos, height, width)
    if kind == 1:
        samples = _plain_bits(data[pos:], count)
    elif kind in (2, 3):
        samples = _plain_numbers(data[pos:], count, maxval)
    else:
        samples = _binary_samples(data, pos, count, maxval)
    if bitmap:
        image = np.where(samples == 0, 255, 0).astype(np.uint8)
    else:
        image = _rescale(samples, maxval)
    return image.reshape(height, width, channels)


def _header(data: bytes, count: int) -> tuple[list[int], int]:
    """The ``count`` decimal fields after the magic, and the offset of the
    pixel data: one whitespace byte after the last field."""
    pos, fields = 2, []
    while len(fields) < count:
        while pos < len(data) and (data[pos] in _WHITESPACE or data[pos] == ord("#")):
            if data[pos] == ord("#"):
                end = min((i for i in (data.find(b"\n", pos), data.find(b"\r", pos)) if i >= 0), default=len(data))
                pos = end
            else:
                pos += 1
        start = pos
        while pos < len(data) and 48 <= data[pos] <= 57:
            pos += 1
        if start == pos:
            what = "the end of the file" if pos >= len(data) else f"byte {data[pos]:#04x}"
            raise corrupt(FMT, f"header field {len(fields) + 1} expected a number at offset {pos}, found {what}")
        if pos - start > 9:
            raise corrupt(FMT, f"header field {len(fields) + 1} ({data[start:pos].decode()}) is too large")
        fields.append(int(data[start:pos]))
    if pos >= len(data) or data[pos] not in _WHITESPACE:
        raise corrupt(FMT, f"the header does not end with whitespace at offset {pos}")
    return fields, pos + 1


def _binary_samples(data: bytes, pos: int, count: int, maxval: int) -> np.ndarray:
    dtype = np.dtype(">u2") if maxval > 255 else np.dtype(np.uint8)
    needed = count * dtype.itemsize
    if len(data) - pos < needed:
        raise corrupt(FMT, f"truncated pixel data: needs {needed} bytes, {len(data) - pos} left")
    return np.minimum(np.frombuffer(data, dtype, count, pos), maxval)


def _packed_bits(data: bytes, pos: int, height: int, width: int) -> np.ndarray:
    stride = (width + 7) // 8
    if len(data) - pos < stride * height:
        raise corrupt(FMT, f"truncated bitmap: needs {stride * height} bytes, {len(data) - pos} left")
    rows = np.frombuffer(data, np.uint8, stride * height, pos).reshape(height, stride)
    bits = np.unpackbits(rows, axis=1)[:, :width]
    return np.where(bits == 0, 255, 0).astype(np.uint8).reshape(height, width, 1)


def _plain_bits(text: bytes, count: int) -> np.ndarray:
    digits = re.sub(rb"[ \t\n\r\x0b\x0c]", b"", _COMMENT.sub(b"", text))[:count]
    if len(digits) < count or digits.strip(b"01"):
        raise corrupt(FMT, f"a plain bitmap needs {count} digits 0 or 1, found {digits[:20]!r}...")
    return np.frombuffer(digits, np.uint8) - ord("0")


def _plain_numbers(text: bytes, count: int, maxval: int) -> np.ndarray:
    tokens = _COMMENT.sub(b"", text).split(None, count)[:count]
    if len(tokens) < count:
        raise corrupt(FMT, f"truncated pixel data: {len(tokens)} of {count} samples")
    if not all(t.isdigit() and len(t) <= 9 for t in tokens):
        raise corrupt(FMT, "plain pixel data holds something other than decimal samples")
    samples = np.array([int(t) for t in tokens], np.int64)
    if samples.max() > maxval:
        raise corrupt(FMT, f"sample {int(samples.max())} exceeds maxval {maxval}")
    return samples


def _rescale(samples: np.ndarray, maxval: int) -> np.ndarray:
    if maxval == 255:
        return samples.astype(np.uint8)
    table = np.array([min(255, round(v / maxval * 255)) for v in range(maxval + 1)], np.uint8)
    return table[samples]

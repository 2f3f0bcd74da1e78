"""TIFF strip decompressors: LZW, PackBits and Deflate.

Each returns at most ``limit`` bytes (the strip's size in the image), so a
forged stream cannot make it allocate more, and each loop is bounded by the
length of its input.
"""

from __future__ import annotations

import zlib

from ._common import corrupt

FMT = "TIFF"
_CLEAR, _EOI, _FIRST_FREE, _MAX_CODES = 256, 257, 258, 4096


def lzw(data: bytes, limit: int) -> bytes:
    """TIFF LZW: codes of 9 to 12 bits, most significant bit first, widened
    one code early (the "early change" of TIFF 6.0)."""
    if data[:2] == b"\x00\x01":
        raise corrupt(FMT, "old-style (pre-6.0, LSB-first) LZW data")
    padded = data + b"\x00\x00\x00"
    table: list[bytes] = [bytes([i]) for i in range(256)] + [b"", b""]
    out = bytearray()
    width, bit, prev = 9, 0, None
    total_bits = 8 * len(data)
    while bit + width <= total_bits and len(out) < limit:
        i, shift = bit >> 3, bit & 7
        code = ((padded[i] << 16 | padded[i + 1] << 8 | padded[i + 2]) >> (24 - shift - width)) & ((1 << width) - 1)
        bit += width
        if code == _EOI:
            break
        if code == _CLEAR:
            del table[_FIRST_FREE:]
            width, prev = 9, None
            continue
        if code < len(table) and code not in (_CLEAR, _EOI):
            entry = table[code]
            if prev is not None:
                _add(table, prev + entry[:1])
        elif code == len(table) and prev is not None:
            entry = prev + prev[:1]
            _add(table, entry)
        else:
            raise corrupt(FMT, f"LZW code {code} at bit {bit - width} is not in the {len(table)}-entry table")
        out += entry
        prev = entry
        if len(table) >= (1 << width) - 1 and width < 12:
            width += 1
    return bytes(out[:limit])


def _add(table: list[bytes], entry: bytes) -> None:
    if len(table) < _MAX_CODES:
        table.append(entry)


def packbits(data: bytes, limit: int) -> bytes:
    """PackBits: a header byte n, then n + 1 literal bytes (n < 128) or one
    byte repeated 257 - n times (n > 128); 128 is a no-op."""
    out = bytearray()
    pos = 0
    while pos < len(data) and len(out) < limit:
        n = data[pos]
        pos += 1
        if n < 128:
            out += data[pos:pos + n + 1]
            pos += n + 1
        elif n > 128:
            if pos >= len(data):
                break
            out += data[pos:pos + 1] * (257 - n)
            pos += 1
    return bytes(out[:limit])


def deflate(data: bytes, limit: int) -> bytes:
    """Adobe Deflate: a zlib stream."""
    try:
        return zlib.decompressobj().decompress(data, limit)
    except zlib.error as exc:
        raise corrupt(FMT, f"a Deflate strip is corrupt ({exc})") from None


#: TIFF Compression tag value -> (name, decompressor or None for raw strips)
DECOMPRESSORS = {1: ("none", None), 5: ("LZW", lzw), 8: ("Deflate", deflate), 32946: ("Deflate", deflate),
                 32773: ("PackBits", packbits)}
#: compressions that are valid TIFF but not decoded here
UNSUPPORTED = {2: "CCITT modified Huffman", 3: "CCITT Group 3 fax", 4: "CCITT Group 4 fax",
               6: "old-style JPEG", 7: "JPEG", 34712: "JPEG 2000", 50000: "Zstandard", 34925: "LZMA",
               50001: "WebP"}

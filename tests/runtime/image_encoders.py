"""Small image encoders for the decoder tests: PNG, BMP, PNM (and TIFF),
written from the format specs so the decoders are tested against files
whose pixels are known exactly."""

from __future__ import annotations

import struct
import zlib

import numpy as np

ADAM7 = ((0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2), (0, 1, 1, 2))

# ---------------------------------------------------------------- PNG


def chunk(kind: bytes, body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))


def fix_crcs(data: bytes) -> bytes:
    """``data`` with the CRC of every PNG chunk recomputed (as far as the
    chunk lengths hold), so a mutated body reaches the decoder's later stages."""
    out, pos = bytearray(data), 8
    while pos + 12 <= len(out):
        length = struct.unpack(">I", out[pos:pos + 4])[0]
        end = pos + 8 + length
        if end + 4 > len(out):
            break
        out[end:end + 4] = struct.pack(">I", zlib.crc32(bytes(out[pos + 4:end])))
        pos = end + 4
    return bytes(out)


def _paeth(a, b, c):
    p = a + b - c
    pa, pb, pc = np.abs(p - a), np.abs(p - b), np.abs(p - c)
    return np.where((pa <= pb) & (pa <= pc), a, np.where(pb <= pc, b, c))


def filter_row(row: np.ndarray, prior: np.ndarray, kind: int, bpp: int) -> np.ndarray:
    """PNG's forward filter ``kind`` of one row of bytes."""
    x, up = row.astype(np.int64), prior.astype(np.int64)
    left = np.concatenate([np.zeros(bpp, np.int64), x[:-bpp]])[:x.size]
    upleft = np.concatenate([np.zeros(bpp, np.int64), up[:-bpp]])[:x.size]
    predictor = {0: 0, 1: left, 2: up, 3: (left + up) // 2, 4: _paeth(left, up, upleft)}[kind]
    return ((x - predictor) % 256).astype(np.uint8)


def pack_samples(samples: np.ndarray, depth: int) -> np.ndarray:
    """(rows, count) samples of ``depth`` bits packed MSB first, rows padded to bytes."""
    if depth == 8:
        return samples.astype(np.uint8)
    if depth == 16:
        return samples.astype(">u2").view(np.uint8).reshape(samples.shape[0], -1)
    bits = ((samples[:, :, None] >> np.arange(depth - 1, -1, -1)) & 1).reshape(samples.shape[0], -1)
    return np.packbits(bits.astype(np.uint8), axis=1)


def encode_png(samples: np.ndarray, color_type: int, depth: int = 8, filters=(0,), interlace: bool = False,
               palette: np.ndarray | None = None, level: int = 6, chunk_size: int | None = None) -> bytes:
    """A PNG of ``samples`` (H, W, C) holding raw sample values; row ``y``
    uses filter ``filters[y % len(filters)]``."""
    height, width, channels = samples.shape
    bpp = max(1, depth * channels // 8)
    passes = ADAM7 if interlace else ((0, 0, 1, 1),)
    raw, y_all = bytearray(), 0
    for x0, y0, dx, dy in passes:
        sub = samples[y0::dy, x0::dx]
        if sub.size == 0:
            continue
        rows = pack_samples(sub.reshape(sub.shape[0], -1), depth)
        prior = np.zeros(rows.shape[1], np.uint8)
        for row in rows:
            kind = filters[y_all % len(filters)]
            y_all += 1
            raw += bytes([kind]) + filter_row(row, prior, kind, bpp).tobytes()
            prior = row
    compressed = zlib.compress(bytes(raw), level)
    chunk_size = chunk_size or max(1, len(compressed))
    idat = b"".join(chunk(b"IDAT", compressed[i:i + chunk_size]) for i in range(0, len(compressed), chunk_size))
    header = struct.pack(">IIBBBBB", width, height, depth, color_type, 0, 0, int(interlace))
    plte = chunk(b"PLTE", palette.astype(np.uint8).tobytes()) if palette is not None else b""
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"tEXt", b"Comment\x00test") + plte
            + idat + chunk(b"IEND", b""))

# ---------------------------------------------------------------- BMP


def encode_bmp(image: np.ndarray, bpp: int = 24, top_down: bool = False, palette: np.ndarray | None = None,
               masks: tuple[int, ...] | None = None, header_size: int = 40) -> bytes:
    """A BMP of ``image``: (H, W, 3) RGB for 24/32 bits, (H, W) indices with
    ``palette`` for 1/4/8 bits, (H, W) raw pixel values with ``masks`` for
    16/32-bit bit fields."""
    height, width = image.shape[:2]
    stride = (bpp * width + 31) // 32 * 4
    if palette is not None:
        rows = pack_samples(image, bpp) if bpp < 8 else image.astype(np.uint8)
        table = np.concatenate([palette[:, ::-1], np.zeros((len(palette), 1), np.uint8)], axis=1).tobytes()
    elif masks is not None:
        rows = image.astype("<u4").view(np.uint8).reshape(height, width, 4)[:, :, :bpp // 8].reshape(height, -1)
        table = b""
    else:
        bgr = image[:, :, ::-1]
        if bpp == 32:
            bgr = np.concatenate([bgr, np.full((height, width, 1), 7, np.uint8)], axis=2)
        rows, table = bgr.reshape(height, -1), b""
    padded = np.zeros((height, stride), np.uint8)
    padded[:, :rows.shape[1]] = rows
    if not top_down:
        padded = padded[::-1]
    compression = 0 if masks is None else 3
    mask_bytes = struct.pack(f"<{len(masks)}I", *masks) if masks is not None else b""
    info = struct.pack("<IiiHHIIiiII", header_size, width, -height if top_down else height, 1, bpp, compression,
                       padded.size, 2835, 2835, 0 if palette is None else len(palette), 0)
    if header_size > 40:
        info += (mask_bytes + bytes(header_size - 40))[:header_size - 40]
        mask_bytes = b""
    offset = 14 + len(info) + len(mask_bytes) + len(table)
    return (b"BM" + struct.pack("<IHHI", offset + padded.size, 0, 0, offset) + info + mask_bytes + table
            + padded.tobytes())

# ---------------------------------------------------------------- PNM


def encode_pnm(samples: np.ndarray, kind: int, maxval: int = 255, comment: bool = True) -> bytes:
    """A P1..P6 file of raw ``samples`` (H, W, C): bits for P1/P4 (1 = black)."""
    height, width = samples.shape[:2]
    head = f"P{kind}\n" + ("# a comment\n" if comment else "") + f"{width} {height}\n"
    if kind not in (1, 4):
        head += f"{maxval}\n"
    flat = samples.reshape(height, -1)
    if kind in (1, 2, 3):
        body = "\n".join(" ".join(str(int(v)) for v in row) for row in flat).encode() + b"\n"
    elif kind == 4:
        body = np.packbits(flat.astype(np.uint8), axis=1).tobytes()
    else:
        body = flat.astype(">u2" if maxval > 255 else np.uint8).tobytes()
    return head.encode() + body

# ---------------------------------------------------------------- TIFF


def lzw_encode(data: bytes) -> bytes:
    """TIFF LZW (MSB first, early change), with a Clear code when the table fills."""
    codes: list[tuple[int, int]] = []       # (code, width)
    table = {bytes([i]): i for i in range(256)}
    width, next_code = 9, 258
    codes.append((256, width))
    w = b""
    for byte in data:
        wc = w + bytes([byte])
        if wc in table:
            w = wc
            continue
        codes.append((table[w], width))
        table[wc] = next_code
        next_code += 1
        if next_code >= 4094:
            codes.append((256, width))
            table = {bytes([i]): i for i in range(256)}
            width, next_code = 9, 258
        elif next_code >= 1 << width:
            width += 1
        w = bytes([byte])
    if w:
        codes.append((table[w], width))
        next_code += 1      # the decoder adds an entry for the last code too
        if next_code >= 1 << width and width < 12:
            width += 1
    codes.append((257, width))
    bits = "".join(format(code, f"0{n}b") for code, n in codes)
    bits += "0" * (-len(bits) % 8)
    return int(bits, 2).to_bytes(len(bits) // 8, "big")


def packbits_encode(data: bytes) -> bytes:
    out, i = bytearray(), 0
    while i < len(data):
        run = 1
        while i + run < len(data) and run < 128 and data[i + run] == data[i]:
            run += 1
        if run >= 2:
            out += bytes([257 - run, data[i]])
            i += run
        else:
            j = i + 1
            while j < len(data) and j - i < 128 and (j + 1 >= len(data) or data[j + 1] != data[j]):
                j += 1
            out += bytes([j - i - 1]) + data[i:j]
            i = j
    return bytes(out)


def encode_tiff(samples: np.ndarray, photometric: int, bits: int = 8, compression: int = 1, predictor: int = 1,
                planar: int = 1, rows_per_strip: int = 3, order: str = "<", colormap: np.ndarray | None = None,
                extra_samples: tuple[int, ...] = ()) -> bytes:
    """A one-image TIFF of raw ``samples`` (H, W, C)."""
    height, width, spp = samples.shape
    planes = [samples[:, :, p:p + 1] for p in range(spp)] if planar == 2 else [samples]
    dtype = np.dtype(order + "u2") if bits == 16 else np.uint8
    strips = []
    for plane in planes:
        flat = plane.reshape(height, -1).astype(np.int64)
        if predictor == 2:
            per = plane.shape[2]
            diffs = flat.reshape(height, width, per).copy()
            diffs[:, 1:] -= flat.reshape(height, width, per)[:, :-1]
            flat = (diffs % (1 << bits)).reshape(height, -1)
        rows = flat.astype(dtype).view(np.uint8).reshape(height, -1) if bits >= 8 else pack_samples(flat, bits)
        for y in range(0, height, rows_per_strip):
            raw = rows[y:y + rows_per_strip].tobytes()
            strips.append({1: lambda r: r, 5: lzw_encode, 8: zlib.compress, 32773: packbits_encode}[compression](raw))
    tags = {256: (4, [width]), 257: (4, [height]), 258: (3, [bits] * spp), 259: (3, [compression]),
            262: (3, [photometric]), 277: (3, [spp]), 278: (4, [rows_per_strip]), 284: (3, [planar]),
            317: (3, [predictor])}
    if colormap is not None:
        tags[320] = (3, colormap.T.reshape(-1).tolist())
    if extra_samples:
        tags[338] = (3, list(extra_samples))
    data = bytearray(b"II*\x00" if order == "<" else b"MM\x00*") + bytes(4)
    offsets = []
    for strip in strips:
        offsets.append(len(data))
        data += strip
    tags[273] = (4, offsets)
    tags[279] = (4, [len(s) for s in strips])
    blobs = {}
    for tag, (kind, values) in tags.items():
        raw = struct.pack(order + ("H" if kind == 3 else "I") * len(values), *values)
        if len(raw) > 4:
            blobs[tag] = len(data)
            data += raw
    ifd = len(data)
    data[4:8] = struct.pack(order + "I", ifd)
    data += struct.pack(order + "H", len(tags))
    for tag in sorted(tags):
        kind, values = tags[tag]
        raw = struct.pack(order + ("H" if kind == 3 else "I") * len(values), *values)
        inline = struct.pack(order + "I", blobs[tag]) if tag in blobs else raw.ljust(4, b"\x00")
        data += struct.pack(order + "HHI", tag, kind, len(values)) + inline
    return bytes(data + bytes(4))

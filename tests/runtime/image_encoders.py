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

# ---------------------------------------------------------------- JPEG (baseline)

ZIGZAG = np.array([0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20,
                   13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59,
                   52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63])
_U = np.arange(8)
#: the orthonormal 8-point DCT-II matrix: frequency u (rows) by sample x (columns)
DCT = (np.where(_U[:, None] == 0, np.sqrt(1 / 8), np.sqrt(2 / 8))
       * np.cos((2 * _U[None, :] + 1) * _U[:, None] * np.pi / 16))


def huffman_spec(lengths: dict[int, int]) -> tuple[bytes, bytes, dict[int, str]]:
    """(DHT counts, DHT symbols, symbol -> code) of a canonical code with the
    given code length per symbol."""
    ordered = sorted(lengths, key=lambda s: (lengths[s], s))
    counts = bytes(sum(1 for s in ordered if lengths[s] == n) for n in range(1, 17))
    codes, code, prev = {}, 0, lengths[ordered[0]]
    for s in ordered:
        code <<= lengths[s] - prev
        prev = lengths[s]
        codes[s] = format(code, f"0{prev}b")
        code += 1
    return counts, bytes(ordered), codes


#: DC sizes 0..11 and every AC symbol, with code lengths from 2 to 12 bits
DC_LENGTHS = {s: 2 if s == 0 else 3 if s <= 3 else 5 for s in range(12)}
_AC_SYMBOLS = [0x00, 0xF0] + [r << 4 | s for r in range(16) for s in range(1, 11)]
AC_LENGTHS = {sym: (2 if sym == 0 else 3 if sym == 1 else 4 if sym in (2, 0x11) else 9 if i < 104 else 12)
              for i, sym in enumerate(_AC_SYMBOLS)}


def _category(v: int) -> tuple[int, str]:
    size = abs(v).bit_length()
    if not size:
        return 0, ""
    return size, format(v if v > 0 else v + (1 << size) - 1, f"0{size}b")


def _segment(code: str) -> bytes:
    code += "1" * (-len(code) % 8)
    raw = int(code, 2).to_bytes(len(code) // 8, "big") if code else b""
    return raw.replace(b"\xff", b"\xff\x00")


def _marker(code: int, body: bytes) -> bytes:
    return bytes([0xFF, code]) + struct.pack(">H", len(body) + 2) + body


def encode_jpeg(image: np.ndarray, sampling: tuple[int, int] = (1, 1), quality_scale: float = 1.0,
                restart: int = 0, interleaved: bool = True, ycc: bool = True, seed: int = 0):
    """A baseline JPEG of (H, W, 1 or 3) uint8 ``image`` (luma sampled
    ``sampling`` times the chroma); returns (file bytes, per component the
    quantised coefficients (blocks down, across, 8, 8) in natural order over
    the MCU-padded grid, quantisation tables)."""
    height, width, count = image.shape
    rng = np.random.default_rng(seed)
    quant = [np.clip(np.round(rng.integers(2, 30, 64) * quality_scale), 1, 255).astype(np.int64) for _ in range(2)]
    pixels = image.astype(np.float64)
    if count == 3 and ycc:
        r, g, b = pixels[:, :, 0], pixels[:, :, 1], pixels[:, :, 2]
        pixels = np.stack([0.299 * r + 0.587 * g + 0.114 * b, -0.168736 * r - 0.331264 * g + 0.5 * b + 128,
                           0.5 * r - 0.418688 * g - 0.081312 * b + 128], axis=2)
    hs, vs = sampling
    hmax, vmax = (hs, vs) if count == 3 else (1, 1)
    mcus_x, mcus_y = -(-width // (8 * hmax)), -(-height // (8 * vmax))
    factors = [(hs, vs), (1, 1), (1, 1)][:count] if count == 3 else [(1, 1)]
    coefs = []
    for c, (h, v) in enumerate(factors):
        plane = pixels[:, :, c]
        fy, fx = vmax // v, hmax // h
        rows, cols = -(-height // fy), -(-width // fx)
        padded = np.pad(plane, ((0, rows * fy - height), (0, cols * fx - width)), mode="edge")
        small = padded.reshape(rows, fy, cols, fx).mean(axis=(1, 3))
        grid = np.pad(small, ((0, mcus_y * v * 8 - rows), (0, mcus_x * h * 8 - cols)), mode="edge") - 128
        blocks = grid.reshape(mcus_y * v, 8, mcus_x * h, 8).transpose(0, 2, 1, 3)
        freq = DCT @ blocks @ DCT.T
        table = np.zeros(64, np.int64)
        table[ZIGZAG] = quant[0 if c == 0 else 1]
        coefs.append(np.round(freq / table.reshape(8, 8)).astype(np.int64))
    dc_counts, dc_symbols, dc_codes = huffman_spec(DC_LENGTHS)
    ac_counts, ac_symbols, ac_codes = huffman_spec(AC_LENGTHS)
    ids = [1, 2, 3][:count] if ycc or count == 1 else [82, 71, 66]
    out = bytearray(b"\xff\xd8")
    if ycc:
        out += _marker(0xE0, b"JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00")
    for t in range(2 if count == 3 else 1):
        out += _marker(0xDB, bytes([t]) + bytes(quant[t].tolist()))
    out += _marker(0xC0, struct.pack(">BHHB", 8, height, width, count) + b"".join(
        bytes([ids[c], h << 4 | v, 0 if c == 0 else 1]) for c, (h, v) in enumerate(factors)))
    out += _marker(0xC4, b"\x00" + dc_counts + dc_symbols) + _marker(0xC4, b"\x10" + ac_counts + ac_symbols)
    if restart:
        out += _marker(0xDD, struct.pack(">H", restart))
    scans = [list(range(count))] if interleaved else [[c] for c in range(count)]
    for members in scans:
        out += _marker(0xDA, bytes([len(members)]) + b"".join(bytes([ids[c], 0]) for c in members) + b"\x00\x3f\x00")
        units = _coding_units(members, factors, coefs, height, width, hmax, vmax, mcus_x, mcus_y)
        out += _entropy(units, restart, dc_codes, ac_codes)
    out += b"\xff\xd9"
    return bytes(out), coefs, quant


def _coding_units(members, factors, coefs, height, width, hmax, vmax, mcus_x, mcus_y):
    """Per MCU of a scan, its (component, block) pairs in coding order."""
    if len(members) == 1:
        c = members[0]
        h, v = factors[c]
        wide, high = -(-(-(-width * h // hmax)) // 8), -(-(-(-height * v // vmax)) // 8)
        return [[(c, coefs[c][r, k])] for r in range(high) for k in range(wide)]
    return [[(c, coefs[c][my * factors[c][1] + y, mx * factors[c][0] + x]) for c in members
             for y in range(factors[c][1]) for x in range(factors[c][0])]
            for my in range(mcus_y) for mx in range(mcus_x)]


def _entropy(units, restart, dc_codes, ac_codes) -> bytes:
    out, code, predictors = bytearray(), [], {}
    for i, mcu in enumerate(units):
        if restart and i and i % restart == 0:
            out += _segment("".join(code)) + bytes([0xFF, 0xD0 + (i // restart - 1) % 8])
            code, predictors = [], {}
        for c, block in mcu:
            zz = block.reshape(64)[ZIGZAG]
            size, bits = _category(int(zz[0]) - predictors.get(c, 0))
            predictors[c] = int(zz[0])
            code += [dc_codes[size], bits]
            run = 0
            last = max([k for k in range(1, 64) if zz[k]], default=0)
            for k in range(1, last + 1):
                if not zz[k]:
                    run += 1
                    continue
                while run > 15:
                    code.append(ac_codes[0xF0])
                    run -= 16
                size, bits = _category(int(zz[k]))
                code += [ac_codes[run << 4 | size], bits]
                run = 0
            if last < 63:
                code.append(ac_codes[0x00])
    return bytes(out + _segment("".join(code)))

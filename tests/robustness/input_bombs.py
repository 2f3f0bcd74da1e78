"""Hostile ``.npy`` / ``.npz`` input files, made cheaply.

>>> Path("big.npy").write_bytes(npy_claiming((1 << 40,)))           # 144 bytes, claims 4 TiB
>>> Path("bomb.npz").write_bytes(zip_bomb({"x": ((30000, 1024, 32), "<f4")}))   # ~4 MB, inflates to 3.9 GB

A zip bomb is built without compressing gigabytes: deflate output after a
full flush does not depend on what came before, so the compressed form of
16 MiB of zeros is computed once and repeated. Its CRC is left at zero (a
reader that checks the shape first never gets that far).
"""

from __future__ import annotations

import io
import struct
import zlib

import numpy as np

CHUNK = 16 << 20


def npy_header(shape: tuple, descr: str = "<f4", fortran: bool = False) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": fortran, "shape": tuple(shape)})
    return buf.getvalue()


def npy_claiming(shape: tuple, descr: str = "<f4", data: bytes = b"") -> bytes:
    """An .npy file whose header claims ``shape`` but holds only ``data``."""
    return npy_header(shape, descr) + data


def _deflated_zeros(header: bytes, nbytes: int) -> bytes:
    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    head = c.compress(header) + c.flush(zlib.Z_FULL_FLUSH)
    piece = c.compress(bytes(CHUNK)) + c.flush(zlib.Z_FULL_FLUSH)
    whole, rest = divmod(nbytes, CHUNK)
    tail = c.compress(bytes(rest)) + c.flush(zlib.Z_FINISH)
    return head + piece * whole + tail


def zip_bomb(arrays: dict, declared: dict | None = None) -> bytes:
    """An .npz of zero arrays ``{name: (shape, descr)}``, deflated; ``declared`` may give an
    entry's uncompressed size as the zip states it (default: the true size)."""
    out, central = io.BytesIO(), []
    for name, (shape, descr) in arrays.items():
        header = npy_header(shape, descr)
        size = len(header) + int(np.prod(shape, dtype=object)) * np.dtype(descr).itemsize
        data = _deflated_zeros(header, size - len(header))
        stated = (declared or {}).get(name, size)
        if stated >= 1 << 32 or len(data) >= 1 << 32:
            raise ValueError("keep bombs under 4 GiB (no zip64 here)")
        fname = f"{name}.npy".encode()
        offset = out.tell()
        out.write(struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, 8, 0, 0x21, 0, len(data), stated, len(fname), 0))
        out.write(fname)
        out.write(data)
        central.append(struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, 8, 0, 0x21, 0, len(data), stated,
                                   len(fname), 0, 0, 0, 0, 0, offset) + fname)
    start = out.tell()
    for entry in central:
        out.write(entry)
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(central), len(central), out.tell() - start, start, 0))
    return out.getvalue()


__all__ = ["npy_claiming", "npy_header", "zip_bomb"]

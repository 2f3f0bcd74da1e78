"""Inputs from ``.npy`` and ``.npz`` files, headers checked before any data is read.

>>> feeds = read_npz("inputs.npz", expect=signature_check(exe))       # doctest: +SKIP
>>> x = read_npy("x.npy", name="x", expect=signature_check(exe))      # doctest: +SKIP

A ``.npy`` header says the dtype, the shape and so the size of the data; a
``.npz`` is a zip of such files. A 144-byte file may claim 2**40 elements
and a 6 MB zip may inflate to gigabytes, so each array's header is read
first and checked: a plain dtype (never pickled objects), the byte count
against the file (a ``.npy``) or the zip entry's declared size (a
``.npz``), the total against :func:`input_byte_limit` (half the memory), and the name, dtype
and shape against the model's signature (``expect``). Only then is the
array allocated and filled, reading exactly its bytes. Every problem is an
:class:`~relaxpack.errors.InputError` naming the file (and the array).
"""

from __future__ import annotations

import os
import zipfile
import zlib
from math import prod
from typing import Callable, Mapping

import numpy as np

from ..errors import InputError, RelaxpackError
from .dtypes import numpy_dtype

NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"
MAX_ARRAYS = 4096              # arrays in one .npz (a model has far fewer inputs)
MAX_HEADER = 10_000            # numpy's own default bound on a .npy header
MAX_ELEMENTS = 1 << 48

#: ``expect(name, dtype, shape)`` raises an InputError when the array cannot be that input
Expect = Callable[[str, np.dtype, tuple], None]


def input_byte_limit() -> int:
    """The most input bytes worth reading: half the machine's memory, or of the process's
    address-space or data limit when lower (outputs and intermediates need the rest)."""
    limit = 1 << 62
    try:
        limit = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        pass
    try:
        import resource
        for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
            soft = resource.getrlimit(which)[0]
            if soft != resource.RLIM_INFINITY:
                limit = min(limit, soft)
    except (ImportError, ValueError, OSError):
        pass
    return limit // 2


def read_npy(path, name: str, expect: Expect | None = None, limit: int | None = None) -> np.ndarray:
    """The array in the ``.npy`` file ``path``, to be input ``name``."""
    where = os.fspath(path)
    with _open(where) as f:
        size = os.fstat(f.fileno()).st_size
        magic = f.read(len(NPY_MAGIC))
        if magic.startswith(ZIP_MAGIC[:2]):
            raise InputError(f"{where} is an .npz archive of arrays, not one .npy array "
                             f"(give it with --inputs)")
        f.seek(0)
        return _read_array(f, size, f"{where}", name, expect, input_byte_limit() if limit is None else limit)


def read_npz(path, expect: Expect | None = None, limit: int | None = None) -> dict[str, np.ndarray]:
    """The arrays in the ``.npz`` file ``path`` by name (a member ``x.npy`` is input ``x``)."""
    where = os.fspath(path)
    limit = input_byte_limit() if limit is None else limit
    with _open(where) as f:
        if f.read(len(NPY_MAGIC)) == NPY_MAGIC:
            raise InputError(f"{where} is one .npy array, not an .npz archive of arrays by name "
                             f"(give it with --input NAME={os.path.basename(where)})")
        f.seek(0)
        try:
            with zipfile.ZipFile(f) as archive:
                return _read_members(archive, where, expect, limit)
        except RelaxpackError:
            raise
        except MemoryError:
            raise InputError(f"{where}: not enough memory for its arrays") from None
        except (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, OSError, ValueError,
                NotImplementedError, RuntimeError) as err:
            raise InputError(f"cannot read {where} as .npz: {_one_line(err)}") from None


def _open(path: str):
    try:
        f = open(path, "rb")
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror or err}") from None
    if not os.path.isfile(path):
        f.close()
        raise InputError(f"cannot read {path}: not a regular file")
    return f


def _read_members(archive: zipfile.ZipFile, where: str, expect: Expect | None, limit: int) -> dict:
    members = archive.infolist()
    if len(members) > MAX_ARRAYS:
        raise InputError(f"{where}: {len(members)} arrays, more than {MAX_ARRAYS}")
    names = [m.filename for m in members]
    odd = [n for n in names if not n.endswith(".npy")]
    if odd:
        raise InputError(f"{where}: member {odd[0]!r} is not an .npy array")
    if len(set(names)) != len(names):
        raise InputError(f"{where}: holds an array name twice")
    arrays, total = {}, 0
    for member in members:
        name = member.filename[:-len(".npy")]
        with archive.open(member) as f:
            array = _read_array(f, member.file_size, f"{where}: array {name!r}", name, expect, limit - total)
            if f.read(1):
                raise InputError(f"{where}: array {name!r} has bytes after its data")
        total += array.nbytes
        arrays[name] = array
    return arrays


def _read_array(f, size: int, where: str, name: str, expect: Expect | None, limit: int) -> np.ndarray:
    """One array from ``f`` (``size`` bytes from its start): header first, then exactly its data."""
    try:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f, max_header_size=MAX_HEADER)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f, max_header_size=MAX_HEADER)
        else:
            raise InputError(f"{where}: .npy format {version[0]}.{version[1]} is not read (1.0 and 2.0 are)")
    except RelaxpackError:
        raise
    except Exception as err:   # numpy's header parser on hostile text: ValueError, SyntaxError, TokenError, ...
        raise InputError(f"{where}: not a valid .npy array ({_one_line(err)})") from None
    if dtype.hasobject or dtype.itemsize == 0:
        raise InputError(f"{where}: dtype {dtype} is not read (object arrays would need pickle)")
    count = prod(shape)
    if count > MAX_ELEMENTS:
        raise InputError(f"{where}: shape {shape} has {count} elements, more than any input can")
    nbytes = count * dtype.itemsize
    if expect is not None:
        expect(name, dtype, tuple(shape))
    if f.tell() + nbytes != size:
        raise InputError(f"{where}: the header says {nbytes} data bytes (shape {shape}, {dtype}), the file "
                         f"holds {max(size - f.tell(), 0)} (truncated or not an .npy file?)")
    if nbytes > limit:
        raise InputError(f"{where}: shape {shape} of {dtype} takes {nbytes} bytes, more than the "
                         f"{limit} inputs may take here (half the memory this process can have)")
    try:
        data = np.empty(nbytes, np.uint8)
    except MemoryError:
        raise InputError(f"{where}: cannot allocate {nbytes} bytes for shape {shape} of {dtype}") from None
    _fill(f, memoryview(data), where)
    return data.view(dtype).reshape(shape, order="F" if fortran else "C")


def _fill(f, view: memoryview, where: str) -> None:
    got = 0
    while got < len(view):
        n = f.readinto(view[got:got + (1 << 18)])
        if not n:
            raise InputError(f"{where}: the data ends after {got} of {len(view)} bytes")
        got += n


def signature_check(exe, function: str = "main") -> Expect:
    """``expect`` for the inputs of ``exe``'s ``function``: a known name, its dtype, its
    rank, its constant dims, and each dim named by a plain variable within its range."""
    fn = exe.function(function)
    params = {p.name: p for p in fn.params}
    ranges = {name: (lo, hi) for name, lo, hi in fn.dim_ranges}

    def expect(name: str, dtype: np.dtype, shape: tuple) -> None:
        p = params.get(name)
        if p is None:
            raise InputError(f"unknown input(s) {[name]}; the model's inputs are {list(params)}")
        if p.kind != "tensor":
            return
        ctx = f"input {name!r}"
        if p.dtype is not None and p.dtype != "string" and dtype != numpy_dtype(p.dtype):
            raise InputError(f"{ctx} has dtype {dtype}, expected {p.dtype}")
        if p.shape is None:
            return
        if len(shape) != len(p.shape):
            raise InputError(f"{ctx} has rank {len(shape)} (shape {shape}), expected rank {len(p.shape)}")
        for axis, (got, want) in enumerate(zip(shape, p.shape)):
            if isinstance(want, int) and got != want:
                raise InputError(f"{ctx} has shape {shape}, expected {want} at axis {axis}")
            lo, hi = ranges.get(want, (None, None)) if isinstance(want, str) else (None, None)
            if (lo is not None and got < lo) or (hi is not None and got > hi):
                raise InputError(f"{ctx}: dim {want} = {got} at axis {axis} is outside its range "
                                 f"{lo}..{'' if hi is None else hi}")
    return expect


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())[:200] or type(err).__name__


def read_inputs(named: Mapping[str, str] | None = None, npz=None, expect: Expect | None = None) -> dict:
    """Inputs from an ``.npz`` file and from ``.npy`` files by input name (these win), all
    together bounded by :func:`input_byte_limit`."""
    left = input_byte_limit()
    feeds = read_npz(npz, expect, left) if npz is not None else {}
    left -= sum(a.nbytes for a in feeds.values())
    for name, path in (named or {}).items():
        feeds[name] = read_npy(path, name, expect, left)
        left -= feeds[name].nbytes
    return feeds


__all__ = ["input_byte_limit", "read_inputs", "read_npy", "read_npz", "signature_check"]

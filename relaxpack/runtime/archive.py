"""The deployment archive (format 3): one versioned file, data only.

>>> exe.save("model.rpk")                                  # doctest: +SKIP
>>> exe = relaxpack.runtime.load("model.rpk")              # doctest: +SKIP

Layout, all integers little-endian::

    0    8   magic  b"\\x89RPK\\r\\n\\x1a\\n"
    8    4   format version (u32, 3; formats 1 and 2 still load)
    12   4   flags (u32; bit 0: constants in an external params file)
    16   8   manifest length in bytes (u64)
    24  32   sha256 of the manifest bytes
    56   8   data section offset (u64): the manifest's end, aligned to 64
    64   .   manifest: UTF-8 JSON, sorted keys, no whitespace
    .    .   zero padding to the data section offset
    .    .   data section: each distinct constant's bytes at a 64-aligned offset
             (relative to the section), zero padding between them

The manifest holds the format version, the producer, the source model's
sha256 (if known), the entry function's inputs/outputs/dim ranges, the
bytecode (each function with its outputs' signature and the ONNX nodes each
instruction came from), the function table, the kernel and builtin names it calls, the
constant table (dtype, shape, offset, nbytes, sha256; strings inline) and
the build metadata. With ``params="external"`` the data section moves to a
params file beside the archive, ``<name>.<first 16 hex digits of its
sha256>.params`` (``<name>.params`` before; both load): a 64-byte header
(magic ``b"\\x89RPP\\r\\n\\x1a\\n"``, version u32, zero u32, data length u64,
zero padding), then the data section; the manifest records its file name and
sha256. Naming it by content lets :func:`save_executable` replace an archive
and its params file as a pair (docs/design-notes.md, "Reliability").

Nothing in an archive is executed: :func:`load` checks every length, offset,
checksum, name and operand (:mod:`.archive_check`), what the program does
(:mod:`.program_check`, :mod:`.plan_check`), and then maps the file:
constants are read-only numpy views of the mapping, no weight is copied
(``mmap=False`` reads them into private memory instead), except those stored
narrower: each is widened once into private read-only memory. The same executable
always gives the same bytes.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import mmap
import os
import re
import stat
import sys
from math import prod

import numpy as np

from .. import __version__
from ..errors import ArchiveError, RelaxpackError
from . import archive_check as check
from . import constant_storage
from .added_attrs import fill_added_attrs
from .builtins import BUILTINS
from .bytecode import VMFunction
from .dtypes import numpy_dtype
from .executable import Executable, FuncEntry
from .kernels import KERNELS
from .metadata_check import check_metadata
from .plan_check import check_plans
from .program_check import check_allocations, check_calls
from .registry import check_registered
from .safe_write import check_destination, write_file

log = logging.getLogger(__name__)

PRODUCER = "relaxpack"
PARAMS_MODES = ("linked", "external")
CONSTANT_MODES = ("mapped", "compact")


# ---------------------------------------------------------------- writing
def save_executable(exe: Executable, path, params: str = "linked", sources=(), constants: str = "mapped") -> None:
    """Write ``exe`` as an archive at ``path`` (constants in a params file beside it when ``params="external"``).

    ``constants="compact"`` stores each constant in the narrowest dtype that holds its values
    exactly (format 3, :mod:`.constant_storage`): a smaller file whose constants the loader widens
    into private memory; ``"mapped"`` (the default) stores them as they are, to be read from the
    file's mapping (shared between processes, pages given back once packed).

    ``path`` must be absent or a regular file other than the ``sources`` the caller read
    (:mod:`.safe_write`). External params go to ``<name>.<digest>.params``, named by their
    content's sha256: the archive and its params are replaced as a pair, the new params file
    first, then the archive (each through a rename), and the params file the old archive
    used is removed only once the new archive is in place. An interruption leaves the old
    pair or the new one, both loadable.
    """
    if params not in PARAMS_MODES:
        raise ArchiveError(f"params must be one of {PARAMS_MODES}, got {params!r}")
    path = os.fspath(path)
    sources = list(sources)
    external = params == "external"
    entries, blobs, nbytes = _constant_table(exe.constants, _compact(constants))
    data = {"storage": params, "alignment": check.ALIGNMENT, "byte_order": "little", "nbytes": nbytes,
            "file": None, "sha256": None}
    params_path = None
    if external:
        head = check.PARAMS_HEADER.pack(check.PARAMS_MAGIC, _version(entries), 0, nbytes)
        data["sha256"] = _sha256(_padded(head, check.ALIGNMENT, blobs))
        data["file"] = params_file_name(os.path.basename(path), data["sha256"])
        params_path = os.path.join(os.path.dirname(path), data["file"])
    raw = _manifest_bytes(exe, entries, data)   # checked before anything is written
    check_destination(path, sources)
    stale = _params_in_use(path)
    if external:
        check_destination(params_path, sources)
        if not _holds(params_path, data["sha256"]):
            write_file(params_path, _padded(head, check.ALIGNMENT, blobs), sources)
    write_file(path, _archive_chunks(raw, [] if external else blobs, external, _version(entries)), sources)
    if stale is not None and stale != params_path:
        _remove(stale)
    log.debug("saved %s: %d-byte manifest, %d constants in %d data bytes (%s)",
              path, len(raw), len(entries), nbytes, params)


def params_file_name(archive_name: str, digest: str) -> str:
    """The params file of archive ``archive_name`` whose contents have sha256 ``digest``."""
    return f"{archive_name}.{digest[:16]}.params"


def _params_in_use(path: str) -> str | None:
    """The params file that the archive now at ``path`` uses, when it is one that saving
    an archive there made (``<name>.params`` of older versions, or ``<name>.<digest>.params``)
    and a regular file; else None. Anything unreadable is left alone."""
    try:
        with open(path, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            size = os.fstat(f.fileno()).st_size
            header = check.check_header(f.read(check.HEADER.size), size)
            if not header.flags & check.FLAG_EXTERNAL_PARAMS:
                return None
            name = check.decode_manifest(f.read(header.manifest_length), header)["data"]["file"]
    except (OSError, RelaxpackError, KeyError, TypeError, ValueError):
        return None
    base = re.escape(os.path.basename(path))
    if not isinstance(name, str) or not re.fullmatch(rf"{base}(\.[0-9a-f]{{16}})?\.params", name):
        return None
    found = os.path.join(os.path.dirname(path), name)
    try:
        with open(found, "rb") as f:
            if stat.S_ISREG(os.fstat(f.fileno()).st_mode) and f.read(8) == check.PARAMS_MAGIC \
                    and stat.S_ISREG(os.lstat(found).st_mode):
                return found
    except OSError:
        pass
    return None


def _holds(path: str, digest: str) -> bool:
    """Whether ``path`` is a regular file whose contents have sha256 ``digest`` (then it need not be written)."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        sha = hashlib.sha256()
        with open(path, "rb") as f:
            while chunk := f.read(1 << 20):
                sha.update(chunk)
        return sha.hexdigest() == digest
    except OSError:
        return False


def _compact(constants: str) -> bool:
    if constants not in CONSTANT_MODES:
        raise ArchiveError(f"constants must be one of {CONSTANT_MODES}, got {constants!r}")
    return constants == "compact"


def _version(entries: list) -> int:
    """The format an archive of these constant entries is written in: 3 where one is stored narrower
    (a reader of format 2 then says it is too old), else 2, which every reader since then loads."""
    return check.FORMAT_VERSION if any("stored" in e for e in entries) else 2


def archive_bytes(exe: Executable, constants: str = "mapped") -> bytes:
    """The archive of ``exe`` (constants linked) as bytes: what :func:`save_executable` would write
    and :func:`load_bytes` reads back."""
    entries, blobs, nbytes = _constant_table(exe.constants, _compact(constants))
    data = {"storage": "linked", "alignment": check.ALIGNMENT, "byte_order": "little", "nbytes": nbytes,
            "file": None, "sha256": None}
    return b"".join(_archive_chunks(_manifest_bytes(exe, entries, data), blobs, False, _version(entries)))


def _archive_chunks(raw: bytes, blobs, external: bool, version: int):
    """The archive file's bytes in chunks: header, the manifest ``raw``, then the constants ``blobs``."""
    header = check.HEADER.pack(check.MAGIC, version, check.FLAG_EXTERNAL_PARAMS if external else 0,
                               len(raw), hashlib.sha256(raw).digest(), check.align(check.HEADER.size + len(raw)))
    return _padded(header + raw, check.align(len(header) + len(raw)), blobs)


def _manifest_bytes(exe: Executable, constants: list, data: dict) -> bytes:
    functions = [fn.to_json() for fn in exe.functions.values()]
    entry = "main" if "main" in exe.functions else next(iter(exe.functions), None)
    main = next((f for f in functions if f["name"] == entry), None)
    source = exe.metadata.get("source_sha256")
    manifest = {
        "format_version": _version(constants),
        "producer": {"name": PRODUCER, "version": __version__},
        "source_sha256": source if isinstance(source, str) else None,
        "metadata": exe.metadata,
        "entry": entry,
        "inputs": main["params"] if main else [],
        "outputs": main["outputs"] if main else [],
        "dim_ranges": main["dim_ranges"] if main else [],
        "functions": functions,
        "func_table": [[f.kind, f.name] for f in exe.func_table],
        "kernels": sorted({f.name for f in exe.func_table if f.kind in ("kernel", "packed")}),
        "builtins": sorted({f.name for f in exe.func_table if f.kind == "builtin"}),
        "constants": constants,
        "data": data,
    }
    try:
        raw = json.dumps(manifest, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    except (TypeError, ValueError) as err:
        raise ArchiveError(f"cannot save: the executable holds something that is not plain JSON data ({err})") \
            from None
    # what cannot be loaded must not be saved: the writer runs the loader's checks
    try:
        decoded = json.loads(raw)
        check.check_manifest(decoded, _version(constants), data["storage"] == "external")
        check.check_ranges(decoded["constants"])
        check.check_bytecode(decoded)
        _check_program(decoded)
    except ArchiveError as err:
        raise ArchiveError(f"cannot save: {err}") from None
    if len(raw) > check.MAX_MANIFEST_BYTES:
        raise ArchiveError(f"cannot save: the manifest takes {len(raw)} bytes, more than {check.MAX_MANIFEST_BYTES}")
    return raw


def _constant_table(constants, compact: bool) -> tuple[list[dict], list[tuple[int, np.ndarray]], int]:
    """Constant entries, the distinct byte blobs as (offset, uint8 view), and the data length; ``compact``:
    each constant in the narrowest dtype that holds it exactly."""
    entries, blobs, where, end = [], [], {}, 0
    for i, value in enumerate(constants):
        array = np.asarray(value)
        if array.dtype.kind in "OSU":
            entries.append(_string_entry(array, i))
            continue
        name = _dtype_name(array.dtype, i)
        stored = constant_storage.narrowest(array) if compact else None
        if stored is not None:
            array = array.astype(stored)
        if array.dtype.byteorder == ">":
            array = array.astype(array.dtype.newbyteorder("<"))
        flat = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        digest = hashlib.sha256(flat).hexdigest()
        if not flat.size:
            offset = 0
        elif (digest, flat.size) in where:      # equal content: one range
            offset = where[digest, flat.size]
        else:
            offset = where[digest, flat.size] = check.align(end)
            blobs.append((offset, flat))
            end = offset + flat.size
        entries.append({"dtype": name, "shape": list(array.shape), "offset": offset, "nbytes": int(flat.size),
                        "sha256": digest, **({} if stored is None else {"stored": stored.name})})
    return entries, blobs, end


def _dtype_name(dtype: np.dtype, index: int) -> str:
    name, native = dtype.name, dtype.newbyteorder("=") if dtype.byteorder == ">" else dtype
    try:
        if numpy_dtype(name) == native:
            return name
    except RelaxpackError:
        pass
    raise ArchiveError(f"cannot save: constant {index} has dtype {dtype}, which archives do not store")


def _string_entry(array: np.ndarray, index: int) -> dict:
    items = array.reshape(-1).tolist()
    if all(isinstance(s, str) for s in items):
        encoding, strings = "utf-8", items
    elif all(isinstance(s, bytes) for s in items):
        encoding, strings = "base64", [base64.b64encode(s).decode("ascii") for s in items]
    else:
        raise ArchiveError(f"cannot save: constant {index} is an object array that does not hold only "
                           f"strings or only bytes")
    return {"dtype": "string", "shape": list(array.shape), "encoding": encoding, "strings": strings}


def _padded(head: bytes, start: int, blobs):
    """``head``, zeros up to ``start``, then each blob at ``start + offset``."""
    yield head + bytes(start - len(head))
    pos = 0
    for offset, blob in blobs:
        if offset > pos:
            yield bytes(offset - pos)
        yield blob
        pos = offset + blob.size


def _sha256(chunks) -> str:
    digest = hashlib.sha256()
    for chunk in chunks:
        digest.update(chunk)
    return digest.hexdigest()


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


# ---------------------------------------------------------------- loading
def load(path, *, mmap: bool = True, check_functions: bool = True) -> Executable:
    """Validate and memory-map the archive at ``path``; its constants are read-only views of the file.

    Every problem with the file is an :class:`~relaxpack.errors.ArchiveError` naming the file and
    the field at fault, raised before anything in the archive is used. Functions the archive calls
    by name must be registered first (:func:`~relaxpack.runtime.register_func`), else a
    :class:`~relaxpack.errors.MissingFunctionError` lists them all; ``check_functions=False``
    defers that to :class:`VirtualMachine` (for tools that only inspect the archive).

    ``mmap=True`` shares the constants with the page cache (and with every process that maps the
    same file) and loads in no time, but the file must not change while it is loaded: a file
    rewritten in place is detected at the start of each call (an ArchiveError), one truncated
    *during* a call can kill the process with SIGBUS. Replacing the file by a rename (as
    ``relaxpack convert`` does) is safe: the mapping keeps the old contents. ``mmap=False`` reads
    the constants into private memory (the archive's size in RAM, read at load): nothing that
    happens to the file afterwards affects the loaded executable. Files of at most
    :data:`PRIVATE_MAX_BYTES` (256 KiB) are always read so (``exe.archive["mmap"]`` says which).

    >>> exe = load("model.rpk")                                  # doctest: +SKIP
    >>> VirtualMachine(exe).run({"x": x})                        # doctest: +SKIP
    """
    where = os.fspath(path)
    try:
        exe = _load(where, mmap)
        exe.archive["path"] = os.path.abspath(where)   # what a pickled executable reopens (see Executable)
        if check_functions:
            check_registered(exe)
        return exe
    except ArchiveError as err:
        raise type(err)(f"{where}: {err}") from None


def load_bytes(data, *, check_functions: bool = True, name: str = "<archive in memory>") -> Executable:
    """Validate an archive held in memory (``bytes``, ``bytearray``, ``memoryview``), as :func:`load`
    does a file; its constants are read-only views of an immutable copy. Only archives that hold their
    constants (``params="linked"``, the default) can load this way."""
    try:
        raw = data if isinstance(data, bytes) else bytes(data)
        exe = _read(name, False, raw, len(raw), None, in_memory=True)
        if check_functions:
            check_registered(exe)
        return exe
    except ArchiveError as err:
        raise type(err)(f"{name}: {err}") from None
    except TypeError:
        raise ArchiveError(f"{name}: expected the archive's bytes, got {type(data).__name__}") from None


def _load(path: str, use_mmap: bool) -> Executable:
    mapped, size, source = _open(path, use_mmap)
    try:
        return _read(path, use_mmap, mapped, size, source)
    except BaseException:
        _close(mapped, source)
        raise


def _read(path: str, use_mmap: bool, mapped, size: int, source, in_memory: bool = False) -> Executable:
    """The executable in ``mapped`` (a file mapping, or bytes) of ``size`` bytes; ``path`` finds a params
    file, ``source`` is the mapped file to watch (None for bytes)."""
    header = check.check_header(mapped[:check.HEADER.size], size)
    raw = mapped[check.HEADER.size:check.HEADER.size + header.manifest_length]
    m = check.decode_manifest(raw, header)
    external = bool(header.flags & check.FLAG_EXTERNAL_PARAMS)
    check.check_manifest(m, header.version, external)
    check_metadata(m["metadata"])
    check.check_ranges(m["constants"])
    check.check_bytecode(m)
    producer = f"{m['producer']['name']} {m['producer']['version']}"
    check.check_names(m, KERNELS, BUILTINS, producer, __version__)
    check.check_workspaces(m, KERNELS)
    functions, table = _check_program(m)

    nbytes = m["data"]["nbytes"]
    if external:
        if size != header.data_offset:
            raise ArchiveError(f"{size - header.data_offset} bytes after the manifest, but the constants "
                               f"are in a params file")
        if in_memory:
            raise ArchiveError("its constants are in a params file; an archive in memory must hold them "
                               "(save it with params='linked')")
        _close(mapped, source)
        data, base, source = _open_params(os.path.join(os.path.dirname(path), m["data"]["file"]), m["data"],
                                          use_mmap)
    else:
        if size != header.data_offset + nbytes:
            raise ArchiveError(f"file is {size} bytes, its layout says {header.data_offset + nbytes} "
                               f"(a {nbytes}-byte data section at {header.data_offset}; truncated or padded?)")
        data, base = mapped, header.data_offset
    try:
        verified: set[tuple[int, int]] = set()
        widened: dict = {}
        constants = [_constant(c, i, data, base, verified, widened) for i, c in enumerate(m["constants"])]
    except BaseException:
        _close(data, source)
        raise
    log.debug("loaded %s: %d functions, %d constants", path, len(functions), len(constants))
    exe = Executable(functions, table, constants, m["metadata"])
    exe.archive = {"format_version": header.version, "params": "external" if external else "linked",
                   "params_file": m["data"]["file"], "manifest_sha256": header.manifest_sha256.hex(),
                   "stored_narrower": sum("stored" in c for c in m["constants"]),
                   "mmap": isinstance(data, mmap.mmap)}
    owned = {id(a) for a in widened.values()}
    if source is not None and any(c.dtype != object and c.base is not None and id(c.base) not in owned
                                  for c in constants):
        exe.source_check = source.check      # constants are views of a mapped file: watch it
    else:
        _close(data, source)
    return exe


def _check_program(m: dict) -> tuple[dict[str, VMFunction], list[FuncEntry]]:
    """The manifest's functions and function table, after the checks of what the
    program does: calls (a DAG of bounded cost), allocations from immediates, and
    memory plans against the bytecode's liveness."""
    functions = {fn["name"]: VMFunction.from_json(fn) for fn in m["functions"]}
    table = [FuncEntry(kind, name) for kind, name in m["func_table"]]
    functions = fill_added_attrs(functions, table)
    check_calls(functions, table)
    check_allocations(functions, table)
    check_plans(functions, table)
    return functions, table


_fstat = os.fstat


class _Mapped:
    """The open file behind a mapping: tells whether it changed since it was mapped."""

    def __init__(self, f, path: str):
        self.file, self.path = f, path
        self._fd = f.fileno()
        self.stamp = self._stamp()

    def _stamp(self) -> tuple[int, int]:
        st = os.fstat(self._fd)
        return st.st_size, st.st_mtime_ns

    def check(self) -> None:
        """Raise :class:`ArchiveError` if the mapped file was written to or resized since it was loaded.
        (On every call of a mapped archive: one ``fstat``, compared inline.)"""
        try:
            st = _fstat(self._fd)
            if st.st_size == self.stamp[0] and st.st_mtime_ns == self.stamp[1]:
                return
        except (OSError, ValueError):
            pass
        raise ArchiveError(f"{self.path}: the archive file changed after it was loaded (written in place or "
                           f"truncated); load it again, or load with mmap=False to keep a private copy")

    def close(self) -> None:
        self._fd = -1       # fstat(-1) fails: a closed file's descriptor number may be reused by another
        self.file.close()


#: files up to this size are read into private memory even when mapping is asked for: a mapping
#: shares nothing worth sharing there, and a mapped archive pays an ``fstat`` on every call (its
#: file must not have changed), ~0.8 us of a scikit-learn model's ~10 us call
PRIVATE_MAX_BYTES = 256 << 10


def _open(path: str, use_mmap: bool):
    """(contents: a read-only mapping or the bytes read, size, the open file behind a mapping or None).
    Files of at most :data:`PRIVATE_MAX_BYTES` are read, whatever ``use_mmap`` says."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device could block or never end
            raise ArchiveError("not a regular file")
        f = open(path, "rb")
        try:
            size = os.fstat(f.fileno()).st_size
            if size < check.HEADER.size:
                check.check_header(f.read(), size)  # raises: too short
            if not use_mmap or size <= PRIVATE_MAX_BYTES:
                data = f.read()
                if len(data) != size:
                    raise ArchiveError(f"the file changed size while it was read ({size} -> {len(data)} bytes)")
                f.close()
                return data, size, None
            source = _Mapped(f, path)
            return mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ), size, source
        except BaseException:
            f.close()
            raise
    except OSError as err:
        raise ArchiveError(f"cannot read the file: {err.strerror or err}") from None
    except (ValueError, OverflowError) as err:  # mmap refuses (e.g. the file shrank meanwhile)
        raise ArchiveError(f"cannot map the file: {err}") from None


def _close(data, source) -> None:
    if isinstance(data, mmap.mmap):
        data.close()
    if source is not None:
        source.close()


def _open_params(path: str, info: dict, use_mmap: bool):
    try:
        data, size, source = _open(path, use_mmap)
        check.check_params_header(data[:check.ALIGNMENT], size, info["nbytes"])
        with memoryview(data) as view:
            digest = hashlib.sha256(view).hexdigest()
        if digest != info["sha256"]:
            _close(data, source)
            raise ArchiveError("checksum mismatch: this params file does not belong to the archive (or is corrupt)")
    except ArchiveError as err:
        raise ArchiveError(f"params file {path}: {err}") from None
    return data, check.ALIGNMENT, source


def _constant(c: dict, index: int, data, base: int, verified: set, widened: dict) -> np.ndarray:
    """Constant ``index`` of entry ``c``: a view of ``data``, or, stored narrower, its widened copy
    (one per range, dtype and shape: ``widened``, whose arrays own their memory)."""
    shape = tuple(c["shape"])
    if c["dtype"] == "string":
        return _strings(c, index, shape)
    dtype = numpy_dtype(c["dtype"])
    narrow = "stored" in c
    stored = numpy_dtype(c["stored"]) if narrow else dtype
    if sys.byteorder != "little":
        dtype, stored = dtype.newbyteorder("<"), stored.newbyteorder("<")
    count = prod(shape)
    if count == 0:
        array = np.empty(shape, dtype)
        array.flags.writeable = False
        return array
    start = base + c["offset"]
    key = (start, c["nbytes"])
    if key not in verified:
        view = memoryview(data)[start:start + c["nbytes"]]
        try:
            if hashlib.sha256(view).hexdigest() != c["sha256"]:
                raise ArchiveError(f"constant {index}: checksum mismatch (the data section is corrupt)")
        finally:
            view.release()
        verified.add(key)
    if not narrow:
        return np.frombuffer(data, dtype, count, start).reshape(shape)
    kept = widened.get((key, stored, dtype))
    if kept is None:
        kept = widened[key, stored, dtype] = constant_storage.widened(data, stored, dtype, (count,), start)
    return kept.reshape(shape)


def _strings(c: dict, index: int, shape: tuple) -> np.ndarray:
    items = c["strings"]
    if c["encoding"] == "base64":
        try:
            items = [base64.b64decode(s, validate=True) for s in items]
        except ValueError:
            raise ArchiveError(f"constant {index}: a string is not valid base64") from None
    array = np.empty(len(items), dtype=object)
    array[:] = items
    array = array.reshape(shape)
    array.flags.writeable = False
    return array


__all__ = ["archive_bytes", "load", "load_bytes", "save_executable"]

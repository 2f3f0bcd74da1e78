"""Writing a file without ever losing what was there: checked destination, temporary file, rename.

>>> write_file("model.rpk", [header, data], sources=["model.onnx"])     # doctest: +SKIP

A destination must be absent or a regular file (never a symlink, device,
FIFO or directory: ``-o /dev/null`` run as root must not replace the
system's ``/dev/null``), and must not be one of the ``sources`` the command
reads (the same file, also through a hard link or a symlink: compared by
``st_dev``/``st_ino``). The bytes go to a new temporary file in the same
folder, are flushed to disk, and the temporary file is renamed over the
destination, so a full disk or a Ctrl-C leaves either the old file or the
new one, never a mix. Each refusal is an :class:`~relaxpack.errors.OutputError`.
"""

from __future__ import annotations

import os
import stat
import tempfile
from typing import BinaryIO, Callable, Iterable

from ..errors import OutputError

_KINDS = {stat.S_IFLNK: "a symbolic link", stat.S_IFDIR: "a directory", stat.S_IFCHR: "a character device",
          stat.S_IFBLK: "a block device", stat.S_IFIFO: "a FIFO", stat.S_IFSOCK: "a socket"}


def check_destination(path, sources: Iterable = ()) -> None:
    """Refuse ``path`` as an output when it exists and is not a regular file, or is one of ``sources``."""
    path = os.fspath(path)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as err:
        raise OutputError(f"cannot write {path}: {err.strerror or err}") from None
    if not stat.S_ISREG(st.st_mode):
        kind = _KINDS.get(stat.S_IFMT(st.st_mode), "not a regular file")
        raise OutputError(f"refusing to write {path}: it is {kind}, not a regular file")
    for source in sources:
        if source is not None and _same_file(st, source):
            raise OutputError(f"refusing to write {path}: it is the input {os.fspath(source)} "
                              f"(give another output path)")


def _same_file(st: os.stat_result, source) -> bool:
    try:
        other = os.stat(source)
    except (OSError, ValueError):
        return False
    return (st.st_dev, st.st_ino) == (other.st_dev, other.st_ino)


def write_file(path, chunks: Iterable[bytes], sources: Iterable = ()) -> None:
    """Write ``chunks`` to ``path`` through a temporary file in its folder and a rename."""
    def write(f: BinaryIO) -> None:
        for chunk in chunks:
            f.write(chunk)
    write_with(path, write, sources)


def write_with(path, write: Callable[[BinaryIO], None], sources: Iterable = ()) -> None:
    """Call ``write(f)`` on a temporary file in ``path``'s folder, then rename it to ``path``.

    A new file gets the usual permissions (``0o666`` less the umask), a
    replaced one keeps its own.
    """
    path = os.fspath(path)
    sources = list(sources)
    check_destination(path, sources)
    folder = os.path.dirname(path) or "."
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=folder)
    except OSError as err:
        raise OutputError(f"cannot write {path}: {err.strerror or err}") from None
    try:
        with os.fdopen(fd, "w+b") as f:
            write(f)
            f.flush()
            os.fchmod(f.fileno(), _mode_for(path))
            os.fsync(f.fileno())
        check_destination(path, sources)   # again: it may have changed while we wrote
        os.replace(tmp, path)
    except OSError as err:
        _remove(tmp)
        raise OutputError(f"cannot write {path}: {err.strerror or err}") from None
    except BaseException:
        _remove(tmp)
        raise


def _mode_for(path: str) -> int:
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except OSError:
        return 0o666 & ~_umask()


def _umask() -> int:
    """The process's umask, read without changing it where Linux allows."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


__all__ = ["check_destination", "write_file", "write_with"]

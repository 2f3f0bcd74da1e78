"""Give back the resident pages of a mapped constant that a private copy has replaced.

An archive loaded with ``mmap=True`` (the default) holds its constants as read-only views of the
file's mapping; the pages a run reads stay in the process's resident memory (its RSS). A kernel
that packs a bound weight once into a private layout (:mod:`.kernels.gemm_panels`' panels) then
holds the weight twice: BERT-base's 324 MiB of panels sat beside the 324 MiB of mapped weights
they were made from, never read again. :func:`release` drops the whole pages of such a view from
this process (``madvise(MADV_DONTNEED)``): the page cache keeps them, so the memory comes back to
the machine as the file's cached pages, and a later read of the view (another path that takes the
weight as it is) maps them in again from the cache with the file's bytes. Only the pages inside
the view are dropped; those it shares with a neighbouring constant stay. Private memory (an
archive read with ``mmap=False``, ``load_bytes``, a computed array) is left alone, as is every
platform without ``madvise`` (Windows). Measured in docs/design-notes.md ("Panels give back the
mapped weight").
"""

from __future__ import annotations

import mmap

import numpy as np

_DONTNEED = getattr(mmap, "MADV_DONTNEED", None)


def release(array: np.ndarray) -> int:
    """Drop from this process's resident memory the whole pages of ``array``'s bytes where they are
    part of a read-only file mapping (an archive's constant); returns the bytes given back (0 where
    nothing applies). The values stay readable: a later read maps the pages in again."""
    mapping, offset = _mapping_of(array)
    if mapping is None:
        return 0
    page = mmap.PAGESIZE
    lo = -(-offset // page) * page
    hi = (offset + array.nbytes) // page * page
    if hi <= lo:
        return 0
    try:
        mapping.madvise(_DONTNEED, lo, hi - lo)
    except (OSError, ValueError):       # a closed mapping, or a kernel that refuses: keep the pages
        return 0
    return hi - lo


def _mapping_of(array: np.ndarray) -> tuple:
    """``(mmap, byte offset of array's first value in it)`` where ``array`` is a C-contiguous view of
    an :class:`mmap.mmap` (through the memoryview numpy's ``frombuffer`` keeps); else ``(None, 0)``."""
    if _DONTNEED is None or not isinstance(array, np.ndarray) or not array.flags.c_contiguous \
            or array.flags.writeable or array.nbytes < mmap.PAGESIZE:
        return None, 0
    root = array
    while isinstance(root, np.ndarray) and root.base is not None:
        root = root.base
    mapping = root.obj if isinstance(root, memoryview) else root
    if not isinstance(mapping, mmap.mmap) or mapping.closed:
        return None, 0
    start = np.frombuffer(mapping, np.uint8, count=1).ctypes.data
    offset = array.ctypes.data - start
    if not 0 <= offset <= len(mapping) - array.nbytes:
        return None, 0
    return mapping, offset

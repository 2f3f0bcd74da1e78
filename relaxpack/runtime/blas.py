"""BLAS threads at run time, with ctypes and no third-party package.

numpy's matrix products run in the BLAS library it loaded (OpenBLAS in the
wheels, as ``libscipy_openblas64_``; MKL or BLIS in some builds). Their
thread count is a process-wide setting read at every call, so it can be
changed between calls: this module finds the loaded library (the shared
objects in ``/proc/self/maps`` on Linux, else the libraries numpy bundles)
and calls its ``*set_num_threads`` / ``*get_num_threads`` entry points, as
threadpoolctl does. Where no such library is found (a numpy linked
statically, or Accelerate on macOS) the functions do nothing and
:func:`get_blas_threads` returns None; a warning is logged once.

>>> with blas_threads(1):            # doctest: +SKIP
...     vm.run(feeds)                # BLAS on one thread, then as before

The setting is per process: two threads asking for different counts at the
same time get whichever was set last. So is the switch of weight panels
(:func:`set_weight_panels`), the speed-for-memory trade of the OpenBLAS
small-matrix products kept here so that importing the runtime loads no kernel.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import logging
import os
import re
import sys
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np

log = logging.getLogger(__name__)

#: (setter, getter) entry points, tried in order in each candidate library
_ENTRY_POINTS = (
    ("openblas", "openblas_set_num_threads", "openblas_get_num_threads"),
    ("openblas", "scipy_openblas_set_num_threads64_", "scipy_openblas_get_num_threads64_"),
    ("openblas", "scipy_openblas_set_num_threads", "scipy_openblas_get_num_threads"),
    ("openblas", "openblas_set_num_threads64_", "openblas_get_num_threads64_"),
    ("mkl", "MKL_Set_Num_Threads", "MKL_Get_Max_Threads"),
    ("blis", "bli_thread_set_num_threads", "bli_thread_get_num_threads"),
)
_NAME = re.compile(r"(openblas|mkl_rt|libmkl|blis)[^/]*\.(so[.\d]*|dylib|dll)$", re.IGNORECASE)


@dataclass(frozen=True)
class BlasLibrary:
    """A loaded BLAS whose thread count can be read and set."""

    kind: str          # "openblas", "mkl" or "blis"
    path: str
    get: Callable[[], int]
    set: Callable[[int], None]
    core: str | None = None     # OpenBLAS's kernel for this CPU ("SkylakeX", "Haswell", ...)


_found: list[BlasLibrary] | None = None
_lock = threading.Lock()


def blas_libraries() -> list[BlasLibrary]:
    """The BLAS libraries this process has loaded and can set threads of (found once)."""
    global _found
    with _lock:
        if _found is None:
            _found = _find()
            if not _found:
                log.warning("no BLAS library with a thread setting found; BLAS threads stay as they are")
            else:
                log.debug("BLAS thread control: %s", ", ".join(f"{b.kind} {b.path}" for b in _found))
        return list(_found)


def get_blas_threads() -> int | None:
    """The BLAS thread count (of the first library found), or None when it cannot be read."""
    libraries = blas_libraries()
    return libraries[0].get() if libraries else None


def blas_core() -> str | None:
    """The kernel family the first found BLAS picked for this CPU (OpenBLAS's ``get_corename``,
    lower case, e.g. ``"skylakex"``), or None (another BLAS, or none found)."""
    libraries = blas_libraries()
    return libraries[0].core.lower() if libraries and libraries[0].core else None


def set_blas_threads(n: int) -> int | None:
    """Set every found BLAS library to ``n`` threads; returns the previous count (None if none found)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"BLAS threads must be an int of at least 1, got {n!r}")
    previous = get_blas_threads()
    for library in blas_libraries():
        library.set(n)
    return previous


@contextlib.contextmanager
def blas_threads(n: int | None) -> Iterator[None]:
    """BLAS on ``n`` threads inside the block, the previous count after it; ``None`` changes nothing."""
    if not n:
        yield
        return
    previous = set_blas_threads(n)
    try:
        yield
    finally:
        if previous is not None:
            set_blas_threads(previous)


def _find() -> list[BlasLibrary]:
    found, seen = [], set()
    for path in _candidates():
        real = os.path.realpath(path)
        if real in seen:
            continue
        seen.add(real)
        library = _open(path)
        if library is not None:
            found.append(library)
    return found


def _candidates() -> list[str]:
    """Loaded shared objects that look like a BLAS, then the ones numpy bundles."""
    paths = []
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split(maxsplit=5)[-1].strip() for line in maps if "/" in line})
    except OSError:
        pass
    root = os.path.dirname(os.path.dirname(np.__file__))
    bundled = [os.path.join(root, "numpy.libs", "*"), os.path.join(os.path.dirname(np.__file__), ".dylibs", "*")]
    for pattern in bundled:
        paths += sorted(glob.glob(pattern))
    return [p for p in paths if _NAME.search(os.path.basename(p))]


def _open(path: str) -> BlasLibrary | None:
    try:
        # RTLD_NOLOAD where the platform has it: only a library already in the process counts
        mode = getattr(os, "RTLD_NOLOAD", 0) | getattr(os, "RTLD_GLOBAL", 0) if sys.platform != "win32" else 0
        lib = ctypes.CDLL(path, mode=mode)
    except OSError:
        return None
    for kind, setter, getter in _ENTRY_POINTS:
        set_fn, get_fn = getattr(lib, setter, None), getattr(lib, getter, None)
        if set_fn is None or get_fn is None:
            continue
        set_fn.argtypes, set_fn.restype = [ctypes.c_int], None
        get_fn.argtypes, get_fn.restype = [], ctypes.c_int
        return BlasLibrary(kind, path, lambda f=get_fn: int(f()), lambda n, f=set_fn: f(int(n)),
                           _core(lib, getter) if kind == "openblas" else None)
    return None


def _core(lib, getter: str) -> str | None:
    """OpenBLAS's core name, from the entry point named as the thread count's ``getter`` is."""
    core = getattr(lib, getter.replace("get_num_threads", "get_corename"), None)
    if core is None:
        return None
    core.argtypes, core.restype = [], ctypes.c_char_p
    name = core()
    return name.decode("ascii", "replace").strip() if name else None


#: the environment variable that turns weight panels off (``0``) for the process
PANELS_ENV = "RELAXPACK_WEIGHT_PANELS"
#: [whether products may take weight panels] (:mod:`.kernels.gemm_panels`), read at every product
PANELS_ON = [os.environ.get(PANELS_ENV, "1").strip() != "0"]


def set_weight_panels(enabled: bool) -> bool:
    """Let products of a few rows by a large float32 weight run as OpenBLAS's small products of
    its column panels (where numpy's OpenBLAS has those kernels), or not; returns the previous
    setting. Panels are faster (BERT-base at 16 tokens 1.19x -> 0.99x onnxruntime's time) and
    cost memory: each such bound weight is copied once into its panels (BERT-base: a 417 MiB
    archive peaks at 789 MiB of RSS; off, the mapped weights are read as they are). Process-wide;
    ``RELAXPACK_WEIGHT_PANELS=0`` starts with them off."""
    if not isinstance(enabled, bool):
        raise ValueError(f"set_weight_panels takes True or False, got {enabled!r}")
    previous, PANELS_ON[0] = PANELS_ON[0], enabled
    return previous


__all__ = ["BlasLibrary", "blas_core", "blas_libraries", "blas_threads", "get_blas_threads", "set_blas_threads",
           "set_weight_panels"]


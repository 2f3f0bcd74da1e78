"""A per-thread workspace for kernels' large scratch arrays.

A kernel that needs big temporaries (im2col columns, a padded input, the
passes of a resize) takes them from one byte buffer per thread that grows to
the largest request and is kept: mapping tens of MiB afresh on every call
costs page faults (milliseconds), and the allocator returns large blocks to
the system as soon as other work frees memory.

Inside the VM a kernel whose op declares its workspace (``OpDef.workspace``,
declared beside its inference function) is handed ``workspace=``, a flat uint8 view into
the memory plan's arena that lives for that one instruction; ``Scratch``
then carves the arrays from it. Called on its own (tests, constant folding)
or nested inside another kernel, a kernel gets none and ``Scratch`` falls
back to the thread's buffers. :func:`scratch_nbytes` is the size both sides
agree on: the build side evaluates it with a symbolic batch dim.

>>> with Scratch([((3, 4), np.float32), ((5,), np.int64)]) as (a, b):   # doctest: +SKIP
...     ...
"""

from __future__ import annotations

import math
import threading

import numpy as np

#: larger requests get memory of their own, freed after the call
WORKSPACE_MAX_BYTES = 1 << 30
#: kernels nest (fused_elementwise runs nn.conv_bias_act, which runs a conv):
#: each level of nesting has its own buffer, up to this depth
MAX_DEPTH = 4


class _Workspace(threading.local):
    """Growing byte buffers per thread, one per level of kernel nesting."""

    def __init__(self):
        self.buffers = [np.empty(0, np.uint8) for _ in range(MAX_DEPTH)]
        self.depth = 0


_WORKSPACE = _Workspace()


class Scratch:
    """Arrays of the given ``(shape, dtype)`` layouts carved out of
    ``workspace`` (a flat uint8 array of at least :func:`scratch_nbytes`
    bytes, from the memory plan) or else the thread's workspace, for the
    duration of a ``with`` block; a kernel called inside the block gets the
    next level's buffer (or, too deep, private memory). The arrays must not
    outlive the block."""

    def __init__(self, layouts, workspace: np.ndarray | None = None):
        sizes = [aligned(math.prod(shape) * np.dtype(dtype).itemsize) for shape, dtype in layouts]
        total = sum(sizes)
        ws = _WORKSPACE
        self.owner = None
        if workspace is not None and workspace.nbytes >= total:
            raw = workspace.reshape(-1).view(np.uint8)
        elif ws.depth < MAX_DEPTH and total <= WORKSPACE_MAX_BYTES:
            level = ws.depth
            if ws.buffers[level].nbytes < total:
                ws.buffers[level] = np.empty(total, np.uint8)
            ws.depth += 1
            self.owner, raw = ws, ws.buffers[level]
        else:
            raw = np.empty(total, np.uint8)
        self.arrays, start = [], 0
        for (shape, dtype), size in zip(layouts, sizes):
            self.arrays.append(np.ndarray(shape, dtype, raw, start))     # one call: a small kernel calls this often
            start += size

    def __enter__(self) -> list[np.ndarray]:
        return self.arrays

    def __exit__(self, *exc) -> None:
        if self.owner is not None:
            self.owner.depth -= 1
        self.arrays = None


def aligned(nbytes):
    """``nbytes`` rounded up to 64; for ints and the compiler's symbolic dims alike."""
    return (nbytes + 63) // 64 * 64


def scratch_nbytes(layouts) -> int:
    """The bytes ``Scratch(layouts)`` takes: each array 64-byte aligned.
    Dims may be symbolic on the build side (anything with ``+ * //``).

    >>> scratch_nbytes([((3, 4), np.float32), ((5,), np.int64)])
    128
    """
    return sum((aligned(math.prod(shape) * np.dtype(dtype).itemsize) for shape, dtype in layouts), 0)


def same_workspace(workspace, kept) -> bool:
    """Whether what a specialized kernel prepared with the planned workspace ``kept`` (views carved
    from it) serves a call handed ``workspace``: the same object (an arena view, run after run),
    or both arrays of their own of one size and dtype. A workspace whose size depends on the data
    (Mask R-CNN's mask head, sized by its count of detections) is a new ``alloc_tensor`` every
    run; preparing anew for each cost more than the work (a conv's runner ~80-150 us, a fused
    chain's plan). The kernel goes on with ``kept``, which it holds anyway."""
    return workspace is kept or (workspace is not None and kept is not None and workspace.base is None
                                 and kept.base is None and workspace.nbytes == kept.nbytes
                                 and workspace.dtype == kept.dtype)


def workspace_bytes() -> int:
    """The size of this thread's workspace."""
    return sum(b.nbytes for b in _WORKSPACE.buffers)


def release_workspace() -> None:
    """Free this thread's workspace (it is otherwise kept for reuse)."""
    _WORKSPACE.buffers = [np.empty(0, np.uint8) for _ in range(MAX_DEPTH)]

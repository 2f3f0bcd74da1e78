"""How the recurrent kernels read their weights: packed, and R in huge pages.

The kernels read each direction's weights as W^T (input, G*hidden) and R^T
(hidden, G*hidden), C-contiguous: the projection and the per-step product
are then BLAS calls on them as they are (a 1-row product against a
C-contiguous R^T is OpenBLAS's fastest form of it; against R's transposed
view it is 15-20% slower). The fast cells (default activations, no clip,
peepholes or input_forget; GRU with linear_before_reset) also put their
gates in the order their step reads them and halve the columns of the
sigmoid gates: sigmoid(x) = 0.5 * (1 + tanh(x / 2)), and halving is exact,
so one tanh call covers every gate and the pre-activations are bit for bit
those of the general cells. B keeps its shape (Wb then Rb), its columns
ordered and halved as W's and R's.

The ops' ``packed=True`` says W, R and B come in that form
(PackRecurrentWeights packs constant weights at build time with
:func:`pack_weights`); otherwise the kernel packs each direction on every
call with :func:`pack_direction`, the same way.

Every step reads all of R^T (1 MiB for a hidden-256 LSTM, about the size of
a core's L2). In 4 KiB pages, where its lines land in L2 depends on which
physical pages it got: some placements overfill sets and miss every step,
and each page is a TLB entry. The kernel reads a copy in 2 MiB transparent
huge pages instead (:func:`in_huge_pages`): on lstm_gru the per-step
product is 0.5-1.5 us faster (up to 3x under L3 contention), for a copy of
R per call (tens of us).

>>> w, r = np.ones((1, 8, 3), np.float32), np.ones((1, 8, 2), np.float32)
>>> wp, rp, _ = pack_weights("lstm", w, r, None, hidden_size=2)
>>> wp.shape, rp.shape, rp[0, 0].tolist()        # gates (o, i, f, c): o, i, f halved
((1, 3, 8), (1, 2, 8), [0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 1.0, 1.0])
"""

from __future__ import annotations

import mmap
import threading

import numpy as np

# ---------------------------------------------------------------- packing

#: gates of each cell, in ONNX order
GATES = {"rnn": 1, "gru": 3, "lstm": 4}

#: cell kind -> default activations of one direction
DEFAULT_ACTIVATIONS = {"rnn": ("Tanh",), "gru": ("Sigmoid", "Tanh"), "lstm": ("Sigmoid", "Tanh", "Tanh")}

#: fast cell -> (the ONNX gate of each packed gate, how many leading packed gates are sigmoids):
#: LSTM (o, i, f, c), so that (i, f) multiply (c~, C) in one call; GRU (z, r, h)
FAST_GATES = {"lstm": ((1, 0, 2, 3), 3), "gru": ((0, 1, 2), 2)}


def is_fast_cell(kind: str, d: int, dirs: int, *, activations=None, clip=None, peepholes: bool = False,
                 input_forget=False, linear_before_reset=False, quantize_inputs=False, **_) -> bool:
    """Whether direction ``d`` runs a fast cell (which packs its gates its own way)."""
    if clip is not None or quantize_inputs or not default_activations(kind, activations, d, dirs):
        return False
    if kind == "lstm":
        return not peepholes and not input_forget
    return kind == "gru" and bool(linear_before_reset)


def default_activations(kind: str, names, d: int, dirs: int) -> bool:
    """Whether direction ``d`` of ``dirs`` uses the cell's default activations."""
    if names is None:
        return True
    per = len(names) // dirs
    return tuple(names[d * per:(d + 1) * per]) == DEFAULT_ACTIVATIONS[kind]


def gate_layout(kind: str, fast: bool) -> tuple[tuple[int, ...], int]:
    """(the ONNX gate of each packed gate, how many leading packed gates are halved)."""
    return FAST_GATES[kind] if fast else (tuple(range(GATES[kind])), 0)


#: rows of a matrix copied per block by :func:`_transposed`
_BLOCK = 64


def _transposed(m: np.ndarray, order, hidden: int, dtype) -> np.ndarray:
    """``m`` (G*hidden, k) as a new C-contiguous (k, G*hidden) ``m^T`` whose
    column block j is gate ``order[j]``, copied in blocks of rows: a block's
    source and destination both stay in cache, where one strided copy of a
    (1024, 256) matrix takes about 3x as long."""
    out = np.empty((m.shape[1], m.shape[0]), dtype)
    for j, gate in enumerate(order):
        for i in range(0, hidden, _BLOCK):
            end = min(i + _BLOCK, hidden)
            np.copyto(out[:, j * hidden + i:j * hidden + end], m[gate * hidden + i:gate * hidden + end].T,
                      casting="unsafe")
    return out


def pack_direction(w, r, b, hidden: int, order, halved: int, dtype):
    """One direction's ``(W^T, R^T, B)`` in ``dtype``, gates in ``order``,
    the first ``halved`` gates' columns halved (B None stays None)."""
    wt, rt = _transposed(w, order, hidden, dtype), _transposed(r, order, hidden, dtype)
    if b is not None:
        b = b.reshape(2, len(order), hidden)[:, list(order)].astype(dtype).reshape(-1)
    if halved:
        k = halved * hidden
        wt[:, :k] *= 0.5
        rt[:, :k] *= 0.5
        if b is not None:
            b.reshape(2, -1)[:, :k] *= 0.5
    return wt, rt, b


def pack_weights(kind: str, w: np.ndarray, r: np.ndarray, b: np.ndarray | None, *, hidden_size: int,
                 direction: str = "forward", peepholes: bool = False, **attrs):
    """``(W', R', B')``: W (D, G*hidden, input), R (D, G*hidden, hidden) and B
    (D, 2*G*hidden) or None in the packed form ``packed=True`` reads, in
    their own dtype; ``attrs`` are the op's (activations, clip, ...).
    """
    dirs = w.shape[0]
    packed = [pack_direction(w[d], r[d], None if b is None else b[d], hidden_size,
                             *gate_layout(kind, is_fast_cell(kind, d, dirs, peepholes=peepholes, **attrs)),
                             w.dtype) for d in range(dirs)]
    return (np.stack([p[0] for p in packed]), np.stack([p[1] for p in packed]),
            None if b is None else np.stack([p[2] for p in packed]))


def projector(bias):
    """``project(xs, wt, out=None)``: ``xs @ W^T + bias``, the input projection of every step. np.dot (the
    operator's bits, ~0.3 us sooner on 2-d operands) and the bias as one row (a single step's
    row adds it without broadcasting, ~0.4 us sooner)."""
    row = None if bias is None else bias.reshape(1, -1)

    def project(xs, wt, out=None):
        proj = np.dot(xs, wt) if out is None else np.dot(xs, wt, out)
        if row is not None:
            np.add(proj, row, proj)
        return proj
    return project


# ---------------------------------------------------------------- R in huge pages

#: R^T of at least this many bytes is copied to huge pages (a smaller one
#: fits L2 with room to spare, and its copy would cost more than it saves)
HUGE_PAGE_MIN_BYTES = 256 << 10
_HUGE_PAGE = 2 << 20


class _HugePages(threading.local):
    """One buffer per thread, grown to the largest R^T and kept (mapping and
    faulting in 2 MiB pages on every call would cost more than the copy)."""
    buffer: np.ndarray | None = None


_HUGE = _HugePages()


def _has_huge_pages() -> bool:
    """Whether madvise can ask for transparent huge pages (Linux, THP not "never")."""
    if not (hasattr(mmap, "MADV_HUGEPAGE") and hasattr(mmap, "MAP_ANONYMOUS")):
        return False
    try:
        with open("/sys/kernel/mm/transparent_hugepage/enabled") as f:
            return "[never]" not in f.read()
    except OSError:
        return False


HAS_HUGE_PAGES = _has_huge_pages()


def in_huge_pages(m: np.ndarray) -> np.ndarray:
    """A copy of ``m`` in the thread's huge-page buffer (valid until the next
    call in this thread), or ``m`` itself when it is small or the system has
    no transparent huge pages."""
    if m.nbytes < HUGE_PAGE_MIN_BYTES or not HAS_HUGE_PAGES:
        return m
    if _HUGE.buffer is None or _HUGE.buffer.nbytes < m.nbytes:
        size = -(-m.nbytes // _HUGE_PAGE) * _HUGE_PAGE
        region = mmap.mmap(-1, size + _HUGE_PAGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        raw = np.frombuffer(region, np.uint8)
        start = -raw.ctypes.data % _HUGE_PAGE       # a huge page is 2 MiB aligned
        region.madvise(mmap.MADV_HUGEPAGE, start, size)     # before the first touch faults pages in
        _HUGE.buffer = raw[start:start + size]
    out = _HUGE.buffer[:m.nbytes].view(m.dtype).reshape(m.shape)
    np.copyto(out, m)
    return out



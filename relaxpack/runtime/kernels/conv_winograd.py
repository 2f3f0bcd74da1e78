"""Channels-last 3x3 stride-1 convolutions by Winograd's F(2x2, 3x3).

Each 2x2 block of output pixels ("tile") reads a 4x4 patch ``d`` of the
padded input; with the transformed weight ``U = G g G^T`` (16 values per
input and output channel, packed once per weight) the tile is
``A^T [(B^T d B) * U] A``, where the product is, for each of the 16
positions, a GEMM over the channels: ``(tiles, C) @ (C, O)``. That is 16
multiply-adds per tile and channel pair where the direct conv does 36: the
GEMMs do 2.25x fewer products, and the input and output transforms are
only adds and subtracts (``B`` and ``A`` hold 0 and +-1), so the result is
as accurate as the direct conv's (within a few float32 ulps of its sums;
``G`` holds 1/2, exact).

The transforms are numpy ops over strided views of the padded input, a
block of tile rows at a time (:func:`block_rows`) so that the transformed
input, the 16 GEMM results and the partial sums stay in the cache, and the
four output pixels of each tile are written straight into ``out`` (bias
added in that write). Measured (1 thread, float32) against the im2col GEMM
of :mod:`.conv_nhwc`: 1.4-2x faster from 64 input channels on YOLO's and
UNet's planes; on large planes of few channels (32 at 160x160) the
transforms cost more than the products saved (:func:`prefers_winograd`).
On small maps of many channels (ResNet's 7x7) the GEMMs have a few rows by
large matrices: there they run as :mod:`.gemm_panels`'s small products, and
only where those exist is such a conv Winograd (:func:`small_map_by_panels`,
:func:`panels_pay`).

Infinities do not survive the transforms the way they survive a direct
sum (``inf - inf`` is NaN where the direct conv gives ``+-inf``), nor do
values near the float range (a transform sums up to four). A call whose
result is not all finite (:func:`all_finite`, one BLAS pass) is redone by
the plan's direct method, so such inputs get the direct conv's answer.
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

import numpy as np

from . import gemm_panels

#: the transformed input and GEMM results of one block of tile rows take at most about this many bytes
BLOCK_BYTES = 1 << 20
#: but a block has at least this many tiles (the rows of its GEMMs)
BLOCK_MIN_TILES = 256
#: Winograd from this many input channels on (:func:`prefers_winograd`)
MIN_CHANNELS = 64
#: and from this many 2x2 tiles per image: 4x4 tiles are too few rows for
#: the 16 GEMMs (ResNet's 512 channels at 4x4: 1.8x the im2col GEMM's time;
#: at 8x8, 16 tiles: 0.84x)
MIN_TILES = 16
#: and when at least this share of the tiles' outputs is wanted: an odd
#: length computes a row or column of tiles half for nothing (7x7: 49 of 64,
#: 1.1-1.7x the GEMM's time; 9x9: 81 of 100, 0.92x)
MIN_USE = 0.8
#: transformed weights from this size (16 matrices of at least gemm_panels.MIN_RHS_BYTES) may
#: take panels: below it the check is skipped, so small convs pay nothing for it
PANELS_MIN_BYTES = 16 * gemm_panels.MIN_RHS_BYTES

#: ``G``: the weight transform, rows of the 4 positions from the 3 taps
_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


def prefers_winograd(kernel, strides, dilation, groups: int, channels: int, lengths=None) -> bool:
    """Whether a channels-last conv runs by F(2x2, 3x3): a 2-d 3x3 kernel,
    stride and dilation 1, one group, at least :data:`MIN_CHANNELS` input
    channels (fewer give GEMMs too shallow for the products saved); given
    the output ``lengths`` (ints; None or symbolic: taken as large), at
    least :data:`MIN_TILES` tiles of which :data:`MIN_USE` is wanted output."""
    if not (tuple(kernel) == (3, 3) and all(s == 1 for s in strides) and all(d == 1 for d in dilation)
            and groups == 1 and channels >= MIN_CHANNELS):
        return False
    if lengths is None or not all(isinstance(m, int) for m in lengths):
        return True
    tiles = math.prod((m + 1) // 2 for m in lengths)
    return tiles >= MIN_TILES and math.prod(lengths) >= MIN_USE * 4 * tiles


def small_map_by_panels(kernel, strides, dilation, groups: int, channels: int, out_channels: int,
                        lengths) -> bool:
    """Whether a 3x3 conv that :func:`prefers_winograd` leaves to the im2col GEMM runs by Winograd
    where its 16 GEMMs take :mod:`.gemm_panels` (:func:`panels_pay`): a map of at most
    ``THREADED_ROWS_MAX`` tiles (ResNet's last stage, 7x7) by matrices of at least
    ``MIN_RHS_BYTES``. There the im2col GEMM packs its large weight for a few rows each call and
    panels do not; by panels 0.46-0.88x its time at 2x2-7x7 maps of 128-512 channels, 1 thread
    (docs/design-notes.md, "Small-row products by panels")."""
    if not (tuple(kernel) == (3, 3) and all(s == 1 for s in strides) and all(d == 1 for d in dilation)
            and groups == 1 and channels >= MIN_CHANNELS and lengths is not None
            and all(isinstance(m, int) for m in lengths)):
        return False
    tiles = math.prod((m + 1) // 2 for m in lengths)
    return (not prefers_winograd(kernel, strides, dilation, groups, channels, lengths)
            and tiles <= gemm_panels.THREADED_ROWS_MAX
            and channels * out_channels * 4 >= gemm_panels.MIN_RHS_BYTES)


def panels_pay(dtype) -> bool:
    """Whether a :func:`small_map_by_panels` conv runs by Winograd here: float32, an OpenBLAS with
    the small-matrix sgemm and one BLAS thread (on two the threaded im2col GEMM is as fast)."""
    return dtype == np.float32 and gemm_panels.available() and gemm_panels.get_blas_threads() in (1, None)


@dataclass(frozen=True)
class WinogradPlan:
    """The tiling of one geometry: the output's ``lengths``, the tiles along
    each dim, the padded plane's extent (2 rows and columns more than the
    tiles cover) and where the input goes in it (``begins``)."""

    lengths: tuple[int, int]
    tiles: tuple[int, int]
    extent: tuple[int, int]
    begins: tuple[int, int]

    @staticmethod
    def make(lengths, begins) -> "WinogradPlan":
        tiles = tuple((m + 1) // 2 for m in lengths)
        return WinogradPlan(tuple(lengths), tiles, tuple(2 * t + 2 for t in tiles), tuple(begins))


def block_rows(plan: WinogradPlan, channels: int, out_channels: int, itemsize: int) -> int:
    """Tile rows per block: the block's transformed input (16 per channel
    and tile), GEMM results (16 per output channel) and row-transformed
    rows fit in :data:`BLOCK_BYTES`, at least one row."""
    tw = plan.tiles[1]
    per_row = itemsize * (16 * tw * (channels + out_channels) + 4 * plan.extent[1] * channels + 8 * tw * out_channels)
    least = -(-BLOCK_MIN_TILES // tw)
    return max(1, min(plan.tiles[0], max(least, BLOCK_BYTES // per_row)))


def scratch_layouts(plan: WinogradPlan, batch, channels: int, out_channels: int, dtype) -> list:
    """The scratch :func:`run_winograd` takes: the padded input, then per
    block the row-transformed rows, the transformed input, the GEMM results
    and the row sums of the output transform."""
    rows = block_rows(plan, channels, out_channels, np.dtype(dtype).itemsize)
    tiles = rows * plan.tiles[1]
    return [((batch, *plan.extent, channels), dtype),
            ((4, rows, plan.extent[1], channels), dtype),
            ((16, tiles, channels), dtype),
            ((16, tiles, out_channels), dtype),
            ((2, 4, tiles, out_channels), dtype)]


def transform_weight(weight: np.ndarray) -> np.ndarray:
    """``U = G g G^T``: the HWIO weight ``(3, 3, C, O)`` as ``(16, C, O)``
    (position ``4 * a + b``), computed in float64 and rounded once."""
    u = np.einsum("ai,ijco,bj->abco", _G, weight.astype(np.float64), _G)
    return np.ascontiguousarray(u.reshape(16, *weight.shape[2:]).astype(weight.dtype))


class _TransformedWeights:
    """Transformed weights of read-only arrays (the executable's constants),
    by identity: packed on the first call, as if at convert time (two
    threads may both pack one; either result is kept), each with the slot
    where :func:`.gemm_panels.matmul_into` keeps its panels of them. Once
    the panels are made, ``U`` itself is dropped (its holder set to None):
    the 16 GEMMs read the panels (:func:`.gemm_panels.kept_into`), and
    a call they do not take makes ``U`` again, kept from then on (:func:`_matrices`)."""

    def __init__(self):
        self.by_id: dict[int, tuple] = {}

    def get(self, weight: np.ndarray) -> tuple[list, list | None]:
        """``([U, keep], kept)``: the transformed weight's holder (``U`` None once its panels replace
        it, unless ``keep``: a call the panels did not take made it again) and its panels' slot
        (None: not kept)."""
        if weight.flags.writeable:          # may change between calls: transform every time
            return [transform_weight(weight), True], None
        entry = self.by_id.get(id(weight))
        if entry is not None and entry[0]() is weight:
            return entry[1], entry[2]
        holder, slot, key = [transform_weight(weight), False], [None], id(weight)
        self.by_id[key] = (weakref.ref(weight, lambda _, key=key: self.by_id.pop(key, None)), holder, slot)
        return holder, slot


_WEIGHTS = _TransformedWeights()


def run_winograd(plan: WinogradPlan, x: np.ndarray, weight: np.ndarray, out: np.ndarray, bias, arrays) -> None:
    """``out = conv(x, weight) (+ bias)``: ``x`` ``(N, H, W, C)`` and the HWIO
    ``weight`` in the working dtype, ``out`` ``(N, *plan.lengths, O)`` (maybe
    of a lower precision); ``arrays`` from :func:`scratch_layouts`."""
    padded, rows_t, v, m, sums = arrays
    _fill(plan, x, padded)
    holder, kept = _WEIGHTS.get(weight)
    rows = rows_t.shape[1]
    th, tw = plan.tiles
    for n in range(x.shape[0]):
        for r0 in range(0, th, rows):
            r1 = min(th, r0 + rows)
            _block(plan, padded[n], (holder, kept, weight), out[n], bias, r0, r1, rows_t, v, m, sums)


def all_finite(out: np.ndarray) -> bool:
    """Whether every value of ``out`` is finite, in one BLAS pass for float32
    and float64 (the dot product of the values with themselves is finite
    only if they all are; a huge but finite result, over ~1e19, also counts
    as not finite, which only costs a redo the direct way)."""
    flat = out.reshape(-1)
    if out.dtype in (np.float32, np.float64):
        return bool(np.isfinite(np.dot(flat, flat)))
    return bool(np.isfinite(flat).all())


def _fill(plan: WinogradPlan, x: np.ndarray, padded: np.ndarray) -> None:
    """``x`` at ``plan.begins`` in the zeroed plane (cropped to its extent)."""
    (eh, ew), (bh, bw) = plan.extent, plan.begins
    h, w = min(x.shape[1], eh - bh), min(x.shape[2], ew - bw)
    padded[:, :bh] = 0
    padded[:, bh + h:] = 0
    padded[:, bh:bh + h, :bw] = 0
    padded[:, bh:bh + h, bw + w:] = 0
    padded[:, bh:bh + h, bw:bw + w] = x[:, :h, :w]


def _bt(d, out) -> None:
    """``B^T`` along the first axis of ``out``: 4 positions from the 4 rows ``d``."""
    np.subtract(d[0], d[2], out=out[0])
    np.add(d[1], d[2], out=out[1])
    np.subtract(d[2], d[1], out=out[2])
    np.subtract(d[1], d[3], out=out[3])


def _block(plan: WinogradPlan, plane, weight: tuple, out, bias, r0: int, r1: int, rows_t, v, m, sums) -> None:
    """Tile rows ``r0:r1`` of one image: transform, 16 GEMMs (:func:`_matrices`), inverse
    transform into ``out``; ``weight`` is ``(U's holder, its panels' slot, the HWIO weight)``."""
    tw = plan.tiles[1]
    count = r1 - r0
    tiles = count * tw
    t = rows_t[:, :count]
    _bt([plane[2 * r0 + i:2 * r1 + i:2] for i in range(4)], t)
    vb = v[:, :tiles].reshape(4, 4, count, tw, -1)
    for a in range(4):
        _bt([t[a][:, j:j + 2 * tw:2] for j in range(4)], vb[a])
    mb = m[:, :tiles]
    _matrices(v[:, :tiles], weight, mb)
    # A^T = [[1, 1, 1, 0], [0, 1, -1, -1]], on the rows then the columns
    mb = mb.reshape(4, 4, tiles, -1)
    s = sums[:, :, :tiles]
    np.add(mb[0], mb[1], out=s[0])
    s[0] += mb[2]
    np.subtract(mb[1], mb[2], out=s[1])
    s[1] -= mb[3]
    h, out_channels = plan.lengths[0], out.shape[-1]
    for a in range(2):
        sa = s[a].reshape(4, count, tw, out_channels)
        rows = out[2 * r0 + a:min(h, 2 * r1):2]                    # this phase's output rows of the block
        if rows.shape[0]:
            _columns(sa[:, :rows.shape[0]], rows, bias)


def _matrices(v: np.ndarray, weight: tuple, m: np.ndarray) -> None:
    """``m = v @ U``, the 16 GEMMs: a few tiles by a large ``U`` by :mod:`.gemm_panels` (its panels
    kept in the slot, ``U`` then dropped from its holder), else ``np.matmul``; where ``U`` was
    dropped and the panels do not take a call (more BLAS threads, a block of one tile), ``U`` is
    made again and kept for good: at most one transform more per weight."""
    holder, kept, source = weight
    if kept is not None and gemm_panels.kept_into(v, m, kept, holder, (v.shape[0], v.shape[-1], m.shape[-1])):
        return
    u = holder[0]
    if u is None:                           # made again, and kept from now on (``holder[1]``)
        u = holder[0] = transform_weight(source)
        holder[1] = True
    if u.nbytes < PANELS_MIN_BYTES or not gemm_panels.matmul_into(v, u, m, kept, key=holder):
        np.matmul(v, u, out=m)
    elif kept is not None and not holder[1]:
        holder[0] = None                    # its panels are kept: U is not read again


def _columns(sa, rows, bias) -> None:
    """The column transform of one phase of rows (``sa``: its 4 column
    positions): output column ``2j`` is ``s0 + s1 + s2``, ``2j + 1`` is
    ``s1 - s2 - s3`` (+ bias)."""
    for target, (op, i, j, k) in ((rows[:, 0::2], (np.add, 0, 1, 2)), (rows[:, 1::2], (np.subtract, 1, 2, 3))):
        cols = target.shape[1]
        if not cols:
            continue
        acc = target if target.dtype == sa.dtype else np.empty(target.shape, sa.dtype)
        op(sa[i, :, :cols], sa[j, :, :cols], out=acc)
        op(acc, sa[k, :, :cols], out=acc)
        if bias is not None:
            acc += bias
        if acc is not target:
            np.copyto(target, acc, casting="unsafe")

"""The bound weight of a float16 or bfloat16 product, multiplied in float32 and kept only as panels.

A product whose rows or result are float16 or bfloat16 (``linalg.matmul``'s specialized call)
multiplies in float32 BLAS. Its bound weight is read as it is where it is float32 (a float16
model's weights widened at import by WidenFloat16Regions), else widened once, the constant's
mapped pages then given back (:func:`..mapped_pages.release`: a later read maps them in again).
Where :mod:`.gemm_panels` takes the product (a few rows by a large weight) its panels are packed
from that float32 weight and, as Winograd's transformed weight, the copy is then dropped: later
calls read the panels through :func:`.gemm_panels.kept_into`, which plans from the shapes alone
(the same bits). A call the panels do not take (one row; more rows under more BLAS threads)
widens the weight again and keeps it for good: at most one widening more per weight. Measured in
docs/design-notes.md ("A float16 weight kept only as panels").
"""

from __future__ import annotations

import numpy as np

from ..mapped_pages import release
from . import gemm_panels


class WidenedWeight:
    """One bound low-float weight (``source``) of a product instruction: its float32 copy while one
    is needed, and whether a call the panels did not take needed it (then it is kept)."""

    __slots__ = ("source", "wide", "needed", "nbytes", "columns")

    def __init__(self, source: np.ndarray):
        self.source, self.wide, self.needed = source, None, False
        # its float32 copy's bytes and columns (gemm_panels.considered_size)
        self.nbytes, self.columns = source.size * 4, source.shape[-1] if source.ndim else 1

    def considered(self, a: np.ndarray) -> bool:
        """Whether ``a @ source`` may take panels at all (:func:`.gemm_panels.considered`)."""
        return gemm_panels.considered_size(a.size, self.nbytes, self.columns)

    def by_panels(self, a: np.ndarray, out: np.ndarray | None, kept: list) -> np.ndarray | None:
        """``a @ source`` (``a`` float32, a product :meth:`considered`) into ``out`` (float32, or a
        new array when None) from the panels in ``kept`` (the instruction's
        :func:`.gemm_panels.matmul_into` slot, owned by ``source``), packing them from the float32
        copy on first use; None where the panels do not take the call (nothing done)."""
        source = self.source
        if a.ndim < 2 or source.ndim < 2 or a.size < 2 * a.shape[-1]:
            return None                     # (one row: a GEMV, never panels)
        entry = kept[0]
        if entry is not None and entry[0] is source:
            target = _target(a, source) if out is None else out
            if gemm_panels.kept_into(a, target, kept, source, source.shape):
                return target
        target = _target(a, source) if out is None else out
        if not gemm_panels.matmul_into(a, self._wide(), target, kept, key=source):
            return None
        if not self.needed:
            self.wide = None                # its panels are kept: the copy is not read again
        return target

    def widened(self) -> np.ndarray:
        """The float32 copy, kept from now on (a call the panels do not take needs it)."""
        self.needed = True
        return self._wide()

    def _wide(self) -> np.ndarray:
        wide = self.wide
        if wide is None:
            source = self.source
            wide = self.wide = source.astype(np.float32, copy=False)     # (a float32 weight as it is)
            if wide is not source:
                release(source)             # the copy replaces the mapped weight's pages
        return wide


def _target(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A new float32 result of ``np.matmul(a, b)`` (both at least 2-d)."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return np.empty(batch + (a.shape[-2], b.shape[-1]), np.float32)

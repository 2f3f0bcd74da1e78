"""A nearest resize's repeats along the innermost axis as integer lanes.

A nearest upsample by whole repeats (:func:`.image._repeat_plan`) gathered the innermost axis
(``take`` of ``0, 0, 1, 1, ..``: numpy copies each value on its own, ~1.5 ns a value) and then
copied that row broadcast over the repeats of the other axes. When the innermost axis repeats
each cell ``k`` times and ``k`` values fit one machine integer (``k * itemsize`` of 2, 4 or 8
bytes: a float32 2x upsample's pairs as uint64), the ``k`` copies of a cell are one integer of
``k`` equal lanes: the cell's bits, zero-extended, times ``1 + 2^b + .. + 2^((k-1) b)`` (``b``
its bits; no carry crosses a lane). So one integer multiply of the data viewed as unsigned
integers, broadcast over the other axes' repeats, writes ``out`` viewed as the wide integers:
the same bits in every cell (NaN payloads, signed zeros), whatever the dtype or byte order.
Channels first, 1 thread: 3x64x2x10 -> 4x20 12.4 -> 6.7 us, 1x16x8x12 5.8 -> 3.7, 1x128x20x20
117 -> 53 (docs/design-notes.md, "Nearest 2x upsamples as integer lanes").
"""

from __future__ import annotations

import numpy as np

#: the lane widths (bytes) a repeat may fill
_WIDE = (2, 4, 8)


def lanes(itemsize: int, k: int):
    """``(narrow, wide, factor)`` of a repeat of ``k`` cells of ``itemsize`` bytes as one integer:
    the unsigned dtypes of one cell and of ``k``, and the multiplier that fills every lane; None
    when ``k * itemsize`` is not 2, 4 or 8 bytes or ``k < 2``."""
    if k < 2 or k * itemsize not in _WIDE:
        return None
    wide = np.dtype(f"u{k * itemsize}")
    factor = sum(1 << (8 * itemsize * j) for j in range(k))
    return np.dtype(f"u{itemsize}"), wide, wide.type(factor)


def runner(src: tuple, dst: tuple, k: int, out: np.ndarray):
    """``run(data)`` writing C-contiguous ``out`` (viewed as ``dst``, whose last dim is the
    innermost axis repeated, ``src`` the data's view broadcast to it, as :func:`.image._repeat_plan`
    gives them) by lanes, or None where they do not apply (:func:`lanes`; numbers and booleans
    only)."""
    plan = lanes(out.itemsize, k)
    if plan is None or out.dtype.kind not in "biuf" or src[-1] % k or dst[-1] % k:
        return None
    narrow, wide, factor = plan
    target = out.view(wide).reshape(dst[:-1] + (dst[-1] // k,))
    shape = src[:-1] + (src[-1] // k,)
    multiply = np.multiply

    def run(data):
        multiply(data.view(narrow).reshape(shape), factor, out=target)
    return run

"""SAME padding of Conv and the pools, symbolic when the dim is.

``auto_pad`` SAME_UPPER / SAME_LOWER makes a strided window's output
``ceil(n / s)``; the total padding is ``(ceil(n / s) - 1) * s + reach - n``
(``reach = (k - 1) * d + 1``), clamped at 0, split begin/end with the odd
one at the end for SAME_UPPER. For a symbolic ``n`` and a stride > 1 the
total depends on ``n % s``, so it is a symbolic dim: the input is padded
explicitly by it (``dynamic_pad``, a shape value evaluated at run time) and
the window op then runs with no padding on that axis.

When the unclamped total is negative (only when ``reach < s``) the begin
padding is 0 and the end "padding" is that negative total: a crop of the
tail that no window reads. The padded length is then always
``(ceil(n / s) - 1) * s + reach``, so the window op's output dim simplifies
to exactly ``(n + s - 1) // s``, symbolic and provable downstream::

    Conv(x: (1, 1, n), k=3, s=2, SAME_UPPER)
      -> lv = R.dynamic_pad(x, R.shape([0, 0, t // 2, 0, 0, t - t // 2]))   # t = 2 * ((n + 1) // 2) + 1 - n
         y = R.nn.conv(lv, w, strides=(2,), padding=(0, 0))                 # (1, 1, (n + 1) // 2)
"""

from __future__ import annotations

import numpy as np

from ....ir.dims import Dim, dim_max
from ....ir.expr import ShapeExpr
from ....runtime.dtypes import numpy_dtype
from ..value import Value
from ._math_common import call, unsupported


def same_padding(ctx, size: Dim, k: Dim, s: int, d: int, upper: bool, pool: bool) -> tuple[Dim, Dim]:
    """(begin, end) SAME padding of one spatial dim: ints when the total is
    static (or the analyzer knows ``size % s``), else symbolic dims. Conv
    clamps a negative total at 0 (its end then crops the unread tail; see
    the module doc); the pools take it as it is, split toward zero, as
    their spec's formula and onnxruntime do (a window smaller than the
    stride skips ``-total / 2`` cells at the start)."""
    if not isinstance(k, int):
        raise unsupported(ctx, f"auto_pad SAME with a symbolic kernel dim {k}")
    reach = d * (k - 1) + 1
    total = ctx.bb.analyzer.simplify(((size + s - 1) // s - 1) * s + reach - size)
    if pool:
        begin = _half_toward_zero(total if upper else total + 1, reach - s + (0 if upper else 1))
        return begin, total - begin
    if isinstance(total, int):
        total = max(total, 0)
        begin = total // 2 if upper else total - total // 2
        return begin, total - begin
    clamped = total if reach >= s else dim_max(total, 0)   # total >= reach - s
    begin = clamped // 2 if upper else (clamped + 1) // 2
    return begin, total - begin


def _half_toward_zero(x: Dim, lowest: int) -> Dim:
    """``x / 2`` rounded toward zero (C's division), for ``x >= lowest``."""
    if isinstance(x, int):
        return x // 2 if x >= 0 else -(-x // 2)
    if lowest >= -1:
        return dim_max(x, 0) // 2 if lowest < 0 else x // 2
    return dim_max(x, 0) // 2 - dim_max(-x, 0) // 2


def needs_explicit_pad(padding) -> bool:
    """Whether a window op cannot take ``padding`` itself (symbolic or negative)."""
    return not all(isinstance(p, int) and p >= 0 for p in padding)


def pad_explicitly(ctx, x: Value, padding: tuple[Dim, ...], fill, axes_all: bool = False):
    """``x`` padded by the symbolic (or negative) entries of ``padding`` (begins, then
    ends, spatial axes only) with ``fill``, and the padding left for the
    window op: 0 on the axes padded here. ``axes_all`` moves every axis's
    padding here (average pooling that excludes the pads divides by a
    mask padded the same way)."""
    n = len(padding) // 2
    moved = [axes_all or needs_explicit_pad((padding[i], padding[i + n])) for i in range(n)]
    begins = [padding[i] if moved[i] else 0 for i in range(n)]
    ends = [padding[i + n] if moved[i] else 0 for i in range(n)]
    pads = (0, 0, *begins, 0, 0, *ends)
    if all(isinstance(p, int) for p in pads):
        padded = call(ctx, "pad", ctx.expr(x), name="same_pad", pads=pads, pad_value=fill)
    else:
        padded = call(ctx, "dynamic_pad", ctx.expr(x), ShapeExpr(pads), name="same_pad", pad_value=fill)
    left = tuple(0 if moved[i % n] else padding[i] for i in range(2 * n))
    return padded, left


def mask_like_spatial(ctx, x: Value):
    """Ones of shape ``(1, 1, *spatial)`` of ``x``'s dtype: what average
    pooling divides by to count only the real cells of a window."""
    one = ctx.expr(ctx.const(np.ones((1,) * len(x.shape), numpy_dtype(x.dtype))))
    return call(ctx, "broadcast_to", one, ShapeExpr((1, 1, *x.shape[2:])), name="mask")

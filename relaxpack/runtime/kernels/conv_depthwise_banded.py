"""A large-kernel depthwise conv (ConvNeXt's 7x7) as one banded matrix product per channel.

numpy's einsum of the channels-last depthwise method (:mod:`.conv_depthwise`) runs at ~0.15 ns a
multiply-add whatever the layout (its fused inner loop over whole rows): a 7x7 kernel's 49 taps on
15x24x16 values are 44 us. BLAS runs the same products faster even with zeros in them. Per channel
``c`` the output column ``out[n, :, w, c]`` is a product with a banded ``(kw * Hp, Ho)`` matrix
``B[c][(j, h'), h] = k[h' - h, j, c]`` (zero off the band) of the padded input's columns ``w .. w +
kw - 1`` side by side: ``A[c][(n, w), (j, h')] = xpad[n, h', w + j, c]``, a run of ``kw * Hp``
values of a channels-first, width-major padded copy. So the conv is a transposing copy in, the
im2col along the width (whole runs), ``C`` sgemm calls ``(N Wo, kw Hp) @ (kw Hp, Ho)`` and a
transposing copy out. The band wastes ``Hp / kh`` of the products, so it pays only where each
channel's product is large and the plane short (:func:`applies`; docs/design-notes.md, "A
large-kernel depthwise conv by banded products").

Not the einsum's summation order: within float32's rounding of the float64 sum (BLAS sums the
``kw * Hp`` products, the band's zeros exact). A zero of the band times an inf or NaN input is
NaN where the direct sum is finite, so a result that is not all finite is computed again by the
direct method (``fallback``).
"""

from __future__ import annotations

import math

import numpy as np

from ..fpstate import quiet
from ._math import pads

_as_strided = np.lib.stride_tricks.as_strided

#: the smallest kernel (rows x columns) taken: below it the einsum's taps are few
MIN_TAPS = 25
#: each channel's product must have at least this many multiply-adds (band zeros included): OpenBLAS's
#: ~0.4 us a call and the copies weigh more below (measured, 1 thread: 7x7 at 1x15x24x16 53k a
#: channel 0.65x the einsum's time; 1x7x12x32 7.6k 1.15x)
MIN_CHANNEL_PRODUCTS = 10000
#: the band's waste ``Hp / kh`` (padded rows per kernel row) may be at most this
MAX_WASTE = 4.0
#: the copies and the band matrices this runner keeps (its own memory) at most
MAX_BYTES = 2 << 20


def geometry(data_shape: tuple, weight_shape: tuple, strides, padding, dilation, groups: int):
    """``((kh, kw), (pt, pl), (Hp, Wp), (Ho, Wo))`` of a channels-last 2-d depthwise conv with stride and
    dilation 1 (``weight`` ``(kh, kw, 1, C)``, ``groups == C``), else None. The window attributes as
    the kernel takes them (an int or one value per dim; padding also ONNX's begins then ends)."""
    if len(data_shape) != 4 or len(weight_shape) != 4:
        return None
    n, h, w, c = data_shape
    kh, kw, per_group, out_channels = weight_shape
    (pt, pl), (pb, pr) = pads(padding, 2)
    if groups != c or per_group != 1 or out_channels != c or pads(strides, 2)[0] != (1, 1) \
            or pads(dilation, 2)[0] != (1, 1) or min(pt, pl, pb, pr) < 0:
        return None
    hp, wp = h + pt + pb, w + pl + pr
    ho, wo = hp - kh + 1, wp - kw + 1
    if min(n, c, ho, wo) < 1:
        return None
    return (kh, kw), (pt, pl), (hp, wp), (ho, wo)


def applies(data_shape: tuple, weight_shape: tuple, dtype, strides, padding, dilation, groups: int) -> bool:
    """Whether the banded products run this conv: float32/float64, a kernel of at least
    :data:`MIN_TAPS` taps, large products per channel and little waste (module docstring)."""
    if np.dtype(dtype) not in (np.dtype(np.float32), np.dtype(np.float64)):
        return False
    found = geometry(tuple(data_shape), tuple(weight_shape), strides, padding, dilation, groups)
    if found is None:
        return False
    (kh, kw), _, (hp, wp), (ho, wo) = found
    n, c = data_shape[0], data_shape[-1]
    products = n * wo * kw * hp * ho
    item = np.dtype(dtype).itemsize
    nbytes = c * item * (n * wp * hp + n * wo * kw * hp + kw * hp * ho + n * wo * ho)
    return kh * kw >= MIN_TAPS and products >= MIN_CHANNEL_PRODUCTS and hp <= MAX_WASTE * kh \
        and nbytes <= MAX_BYTES


def band_matrices(weight: np.ndarray, hp: int, ho: int) -> np.ndarray:
    """``(C, kw * hp, ho)``: ``B[c][(j, h'), h] = weight[h' - h, j, 0, c]`` on the band, 0 off it."""
    kh, kw, _, c = weight.shape
    band = np.zeros((c, kw, hp, ho), weight.dtype)
    taps = weight[:, :, 0, :].transpose(2, 1, 0)       # (c, j, i)
    for h in range(ho):
        band[:, :, h:h + kh, h] = taps
    return band.reshape(c, kw * hp, ho)


def prepare(data_shape: tuple, weight: np.ndarray, padding: tuple, finish, fallback):
    """``run(x, out)`` of the conv of a ``data_shape`` input by the bound ``weight`` (then
    ``finish(out)``: bias and activation); ``fallback(x, out)`` runs the direct method (with its
    own finish) when the products' result is not finite."""
    n, h, w, c = data_shape
    (kh, kw), (pt, pl), (hp, wp), (ho, wo) = geometry(data_shape, weight.shape, (1, 1), padding, (1, 1), c)
    dtype = weight.dtype
    band = band_matrices(weight, hp, ho)
    padded = np.zeros((c, n, wp, hp), dtype)        # zeroed once: the copy in writes the interior
    inner = padded[:, :, pl:pl + w, pt:pt + h]
    item = padded.itemsize
    windows = _as_strided(padded, (c, n, wo, kw * hp), (padded.strides[0], padded.strides[1], hp * item, item),
                          writeable=False)
    cols = np.empty((c, n * wo, kw * hp), dtype)
    cols_view = cols.reshape(c, n, wo, kw * hp)
    result = np.empty((c, n * wo, ho), dtype)
    result_nhwc = result.reshape(c, n, wo, ho).transpose(1, 3, 2, 0)
    copy, matmul, total, isfinite = np.copyto, np.matmul, np.add.reduce, math.isfinite
    flat = result.reshape(-1)

    def run(x, out):
        copy(inner, x.transpose(3, 0, 2, 1))
        copy(cols_view, windows)
        with quiet():                       # (a band zero times an inf: NaN on purpose, then redone)
            matmul(cols, band, out=result)
        if not isfinite(total(flat)):       # (that NaN, or a true inf or NaN: the direct method's result)
            fallback(x, out)
            return
        copy(out, result_nhwc)
        finish(out)
    return run

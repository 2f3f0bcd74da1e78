"""JPEG pixel reconstruction, bit-exact with libjpeg-turbo's defaults.

- Dequantisation and the "islow" integer IDCT of jidctint.c (13-bit
  constants, two passes, the 10-bit wrap-around range limit), vectorised
  over every block of a component.
- Chroma upsampling as jdsample.c with ``do_fancy_upsampling``: the
  triangle filter of the ONNX spec for 2x1, 1x2 and 2x2 (edges repeat the
  last real sample, rounding alternates between +1/+2 or +7/+8), plain
  replication for other integer factors and for components at most two
  samples wide.
- YCbCr -> RGB with jdcolor.c's 16-bit fixed-point tables.
"""

from __future__ import annotations

import numpy as np

_CONST_BITS, _PASS1_BITS = 13, 2


def _fix(x: float, bits: int = _CONST_BITS) -> int:
    return int(x * (1 << bits) + 0.5)


_F = {name: _fix(value) for name, value in (
    ("0_298631336", 0.298631336), ("0_390180644", 0.390180644), ("0_541196100", 0.541196100),
    ("0_765366865", 0.765366865), ("0_899976223", 0.899976223), ("1_175875602", 1.175875602),
    ("1_501321110", 1.501321110), ("1_847759065", 1.847759065), ("1_961570560", 1.961570560),
    ("2_053119869", 2.053119869), ("2_562915447", 2.562915447), ("3_072711026", 3.072711026))}


def reconstruct(frame, ycc: bool) -> np.ndarray:
    """The frame's pixels (H, W, 1 or 3) uint8 from its components' coefficients."""
    planes = []
    for comp in frame.components:
        samples = _component_samples(frame, comp)
        planes.append(upsample(samples, frame.hmax // comp.h, frame.vmax // comp.v)[:frame.height, :frame.width])
    if len(planes) == 1:
        return planes[0][:, :, None]
    if ycc:
        return _ycc_to_rgb(*planes)
    return np.stack(planes, axis=2)


def dense_coefficients(frame, comp) -> np.ndarray:
    """The component's quantised coefficients, (blocks down, blocks across, 8, 8)
    in natural order, over its MCU-padded block grid."""
    high, wide = frame.blocks_high(comp), frame.blocks_wide(comp)
    coefs = np.zeros((high * wide, 64), np.int64)
    if comp.blocks:
        coefs[np.asarray(comp.blocks), np.asarray(comp.positions)] = comp.values
    return coefs.reshape(high, wide, 8, 8)


def _component_samples(frame, comp) -> np.ndarray:
    """The component's decoded samples, cropped to its own (downsampled) size."""
    high, wide = frame.blocks_high(comp), frame.blocks_wide(comp)
    pixels = idct_islow(dense_coefficients(frame, comp).reshape(-1, 8, 8) * comp.quant.reshape(8, 8))
    plane = pixels.reshape(high, wide, 8, 8).transpose(0, 2, 1, 3).reshape(high * 8, wide * 8)
    rows = -(-frame.height * comp.v // frame.vmax)
    cols = -(-frame.width * comp.h // frame.hmax)
    return plane[:rows, :cols]


def _idct_1d(x: list[np.ndarray]) -> list[np.ndarray]:
    """jidctint.c's 1-D islow IDCT of the eight (dequantised) inputs ``x``;
    the outputs are not yet descaled."""
    z2, z3 = x[2], x[6]
    z1 = (z2 + z3) * _F["0_541196100"]
    tmp2 = z1 - z3 * _F["1_847759065"]
    tmp3 = z1 + z2 * _F["0_765366865"]
    tmp0 = (x[0] + x[4]) << _CONST_BITS
    tmp1 = (x[0] - x[4]) << _CONST_BITS
    tmp10, tmp13, tmp11, tmp12 = tmp0 + tmp3, tmp0 - tmp3, tmp1 + tmp2, tmp1 - tmp2
    t0, t1, t2, t3 = x[7], x[5], x[3], x[1]
    z1, z2, z3, z4 = t0 + t3, t1 + t2, t0 + t2, t1 + t3
    z5 = (z3 + z4) * _F["1_175875602"]
    t0 = t0 * _F["0_298631336"]
    t1 = t1 * _F["2_053119869"]
    t2 = t2 * _F["3_072711026"]
    t3 = t3 * _F["1_501321110"]
    z1 = z1 * -_F["0_899976223"]
    z2 = z2 * -_F["2_562915447"]
    z3 = z3 * -_F["1_961570560"] + z5
    z4 = z4 * -_F["0_390180644"] + z5
    t0 += z1 + z3
    t1 += z2 + z4
    t2 += z2 + z3
    t3 += z1 + z4
    return [tmp10 + t3, tmp11 + t2, tmp12 + t1, tmp13 + t0, tmp13 - t0, tmp12 - t1, tmp11 - t2, tmp10 - t3]


def _descale(x: np.ndarray, bits: int) -> np.ndarray:
    return (x + (1 << (bits - 1))) >> bits


def idct_islow(blocks: np.ndarray) -> np.ndarray:
    """libjpeg's islow IDCT of dequantised (N, 8, 8) int64 blocks (row =
    vertical frequency) to (N, 8, 8) uint8 samples."""
    columns = _idct_1d([blocks[:, k, :] for k in range(8)])           # pass 1: down each column
    work = np.stack([_descale(c, _CONST_BITS - _PASS1_BITS) for c in columns], axis=1)
    rows = _idct_1d([work[:, :, k] for k in range(8)])               # pass 2: along each row
    out = np.stack([_descale(r, _CONST_BITS + _PASS1_BITS + 3) for r in rows], axis=2)
    # the range-limit table: the value wraps to 10 bits (signed), then is centred and clamped
    wrapped = ((out + 512) & 1023) - 512
    return np.clip(wrapped + 128, 0, 255).astype(np.uint8)


def upsample(plane: np.ndarray, fx: int, fy: int) -> np.ndarray:
    """``plane`` enlarged ``fx`` times across and ``fy`` times down."""
    if fx == 1 and fy == 1:
        return plane
    rows, cols = plane.shape
    fancy_x = fx == 2 and cols > 2
    if (fx, fy) == (2, 2) and fancy_x:
        return _h2v2_fancy(plane.astype(np.int32))
    if (fx, fy) == (2, 1) and fancy_x:
        return _h2v1_fancy(plane.astype(np.int32))
    if (fx, fy) == (1, 2):
        return _h1v2_fancy(plane.astype(np.int32))
    return np.repeat(np.repeat(plane, fy, axis=0), fx, axis=1)


def _neighbours(x: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """(previous, next) sample along ``axis``, the edge sample repeated."""
    n = x.shape[axis]
    before = np.take(x, np.r_[0, 0:n - 1], axis=axis)
    after = np.take(x, np.r_[1:n, n - 1], axis=axis)
    return before, after


def _interleave(even: np.ndarray, odd: np.ndarray, axis: int) -> np.ndarray:
    return np.stack([even, odd], axis=axis + 1).reshape(
        even.shape[:axis] + (2 * even.shape[axis],) + even.shape[axis + 1:])


def _h2v1_fancy(x: np.ndarray) -> np.ndarray:
    left, right = _neighbours(x, 1)
    return _interleave((3 * x + left + 1) >> 2, (3 * x + right + 2) >> 2, 1).astype(np.uint8)


def _h1v2_fancy(x: np.ndarray) -> np.ndarray:
    above, below = _neighbours(x, 0)
    return _interleave((3 * x + above + 1) >> 2, (3 * x + below + 2) >> 2, 0).astype(np.uint8)


def _h2v2_fancy(x: np.ndarray) -> np.ndarray:
    above, below = _neighbours(x, 0)
    sums = _interleave(3 * x + above, 3 * x + below, 0)      # column sums, 16 times the sample
    left, right = _neighbours(sums, 1)
    return _interleave((3 * sums + left + 8) >> 4, (3 * sums + right + 7) >> 4, 1).astype(np.uint8)


_SCALE = 16
_HALF = 1 << (_SCALE - 1)


def _ycc_to_rgb(y: np.ndarray, cb: np.ndarray, cr: np.ndarray) -> np.ndarray:
    """jdcolor.c's ycc_rgb_convert: per-channel tables in 16-bit fixed point."""
    y = y.astype(np.int64)
    cb = cb.astype(np.int64) - 128
    cr = cr.astype(np.int64) - 128
    r = y + ((_fix(1.40200, _SCALE) * cr + _HALF) >> _SCALE)
    g = y + ((-_fix(0.34414, _SCALE) * cb + _HALF - _fix(0.71414, _SCALE) * cr) >> _SCALE)
    b = y + ((_fix(1.77200, _SCALE) * cb + _HALF) >> _SCALE)
    return np.clip(np.stack([r, g, b], axis=2), 0, 255).astype(np.uint8)

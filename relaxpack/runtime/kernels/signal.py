"""Signal kernels: signal.dft, signal.stft, and their packed forms for
operands known only at run time (``dyn.dft``, ``dyn.stft``), plus
``dyn.mel_weight_matrix`` (ONNX MelWeightMatrix, whose shape comes from
its input values).

Complex tensors are real arrays ending in a dim of 2 (real, imaginary); a
real signal ends in 1. The transforms are ``numpy.fft`` (float32 data
stays float32, float64 stays float64; float16 and bfloat16 compute in
float32 and round once).

>>> dft(np.ones((4, 1), np.float32), axis=0, length=None, inverse=False, onesided=True)[..., 0]
array([4., 0., 0.], dtype=float32)
"""

from __future__ import annotations

import numpy as np

from ...errors import ShapeError
from ..dtypes import numpy_dtype
from ..fpstate import quiet
from ._math import is_low_float
from ._registry import register_kernel, register_packed

# ---------------------------------------------------------------- DFT


def _as_complex(x: np.ndarray) -> np.ndarray:
    """The signal of ``(..., 1)`` (real) or ``(..., 2)`` (complex) data, without the trailing dim."""
    if x.shape[-1] == 1:
        return x[..., 0]
    if x.shape[-1] == 2:
        return x[..., 0] + 1j * x[..., 1]
    raise ShapeError(f"signal data {x.shape} must end in a dim of 1 (real) or 2 (complex)")


def _interleave(y: np.ndarray) -> np.ndarray:
    return np.stack([y.real, y.imag], axis=-1)


def dft(x: np.ndarray, *, axis: int, length: int | None, inverse: bool, onesided: bool) -> np.ndarray:
    """ONNX DFT of ``x`` along ``axis``, in ``x``'s working precision.

    ``length`` (``None``: the axis's size, or ``2 * (size - 1)`` for the
    inverse one-sided transform) zero-pads or truncates the signal. The
    inverse divides by ``length``; the inverse one-sided transform returns
    a real ``(..., 1)`` signal, the forward one the first ``length // 2 + 1``
    frequencies.
    """
    if not 0 <= axis < x.ndim - 1:
        raise ShapeError(f"signal.dft: axis {axis} must name a signal dim of data {x.shape}")
    if is_low_float(x.dtype):
        x = x.astype(np.float32)
    size = x.shape[axis]
    n = length if length is not None else (2 * (size - 1) if inverse and onesided else size)
    if n < 1:
        raise ShapeError(f"signal.dft: the transform length must be positive, got {n} for data {x.shape}")
    signal = _as_complex(x)
    if inverse and onesided:
        return np.fft.irfft(signal, n=n, axis=axis)[..., None]
    if inverse:
        return _interleave(np.fft.ifft(signal, n=n, axis=axis))
    if onesided and x.shape[-1] == 1:
        return _interleave(np.fft.rfft(signal, n=n, axis=axis))
    full = np.fft.fft(signal, n=n, axis=axis)
    if onesided:
        full = np.take(full, np.arange(n // 2 + 1), axis=axis)
    return _interleave(full)


def _store(name: str, result: np.ndarray, out: np.ndarray) -> None:
    if result.shape != out.shape:
        raise ShapeError(f"{name}: output buffer has shape {out.shape}, the transform gives {result.shape}")
    np.copyto(out, result, casting="unsafe")


@register_kernel("signal.dft")
def dft_kernel(data, *, out, axis, length, inverse, onesided):
    """``signal.dft`` into ``out`` (see :func:`dft`)."""
    _store("signal.dft", dft(data, axis=axis, length=length, inverse=inverse, onesided=onesided), out)


def _scalar_int(value: np.ndarray, what: str) -> int:
    value = np.asarray(value)
    if value.size != 1 or value.dtype.kind not in "iu":
        raise ShapeError(f"{what} must be an integer scalar, got {value.dtype} of shape {value.shape}")
    return int(value.reshape(()))


@register_packed("dyn.dft")
def dyn_dft(data, *operands, runtime, axis, length, inverse, onesided):
    """``signal.dft`` whose ``length`` and/or ``axis`` arrive as tensors:
    ``runtime`` names the operands that follow ``data``, in order."""
    values = dict(zip(runtime, operands))
    if "length" in values:
        length = _scalar_int(values["length"], "DFT's dft_length")
    if "axis" in values:
        axis = _scalar_int(values["axis"], "DFT's axis")
        rank = data.ndim
        if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
            raise ShapeError(f"DFT's axis {axis} is out of range for data of rank {rank} (the last dim "
                             f"holds real/imaginary parts)")
        axis %= rank
    return dft(data, axis=axis, length=length, inverse=inverse, onesided=onesided).astype(data.dtype)


# ---------------------------------------------------------------- STFT


def stft(signal: np.ndarray, window: np.ndarray | None, *, frame_step: int, frame_length: int | None,
         onesided: bool) -> np.ndarray:
    """ONNX STFT: ``(batch, frames, bins, 2)`` for ``signal (batch, length, 1 or 2)``."""
    if signal.ndim != 3:
        raise ShapeError(f"STFT: the signal {signal.shape} must be (batch, length, 1 or 2)")
    if is_low_float(signal.dtype):
        signal = signal.astype(np.float32)
    if frame_length is None:
        frame_length = signal.shape[1] if window is None else window.shape[0]
    if window is not None and window.shape != (frame_length,):
        raise ShapeError(f"STFT: the window {window.shape} must have frame_length {frame_length} points")
    if frame_step < 1 or not 1 <= frame_length <= signal.shape[1]:
        raise ShapeError(f"STFT: frame_step {frame_step} and frame_length {frame_length} do not fit the "
                         f"signal {signal.shape}")
    # (batch, frames, 1 or 2, frame_length): views, no copy until the window multiplies
    frames = np.lib.stride_tricks.sliding_window_view(signal, frame_length, axis=1)[:, ::frame_step]
    frames = np.moveaxis(frames, -1, 2)                     # (batch, frames, frame_length, 1 or 2)
    if window is not None:
        frames = frames * window.astype(frames.dtype)[:, None]
    return dft(frames, axis=2, length=frame_length, inverse=False, onesided=onesided)


@register_kernel("signal.stft")
def stft_kernel(signal, window=None, *, out, frame_step, frame_length, onesided):
    """``signal.stft`` into ``out`` (see :func:`stft`)."""
    _store("signal.stft", stft(signal, window, frame_step=frame_step, frame_length=frame_length,
                               onesided=onesided), out)


@register_packed("dyn.stft")
def dyn_stft(signal, *operands, runtime, frame_step, frame_length, onesided):
    """``signal.stft`` whose window, frame_step and/or frame_length arrive as
    tensors: ``runtime`` names the operands that follow ``signal``."""
    values = dict(zip(runtime, operands))
    if "frame_step" in values:
        frame_step = _scalar_int(values["frame_step"], "STFT's frame_step")
    if "frame_length" in values:
        frame_length = _scalar_int(values["frame_length"], "STFT's frame_length")
    result = stft(signal, values.get("window"), frame_step=frame_step, frame_length=frame_length,
                  onesided=onesided)
    return result.astype(signal.dtype)


# ---------------------------------------------------------------- MelWeightMatrix


def _mel_edges(num_mel_bins: int, dft_length: int, sample_rate, lower_edge_hertz, upper_edge_hertz):
    """The FFT bins of the ``num_mel_bins + 2`` triangle corners, equally
    spaced on the mel scale ``2595 * log10(1 + f / 700)``. The edges keep
    their input dtype until the corner positions (float64), as onnx's
    reference computes them, so that both round every bin alike."""
    low = 2595 * np.log1p(lower_edge_hertz / 700) / np.log(10)
    high = 2595 * np.log1p(upper_edge_hertz / 700) / np.log(10)
    corners = np.arange(num_mel_bins + 2)
    step = (high - low) / corners.shape[0]
    hertz = 700 * np.expm1((corners * step + low) / 2595 * np.log(10))
    return (((dft_length + 1) * hertz) // sample_rate).astype(np.int64)


@register_packed("dyn.mel_weight_matrix")
def mel_weight_matrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz, *,
                      dtype):
    """``(dft_length // 2 + 1, num_mel_bins)`` triangular filters with peaks of 1
    (ONNX MelWeightMatrix), in ``dtype``."""
    mels = _scalar_int(num_mel_bins, "MelWeightMatrix's num_mel_bins")
    points = _scalar_int(dft_length, "MelWeightMatrix's dft_length")
    if mels < 0 or points < 0 or _scalar_int(sample_rate, "MelWeightMatrix's sample_rate") <= 0:
        raise ShapeError(f"MelWeightMatrix: num_mel_bins {mels}, dft_length {points} and sample_rate "
                         f"{int(sample_rate)} must be non-negative (the rate positive)")
    edges = _mel_edges(mels, points, np.asarray(sample_rate), np.asarray(lower_edge_hertz),
                       np.asarray(upper_edge_hertz))
    left, center, right = edges[:-2], edges[1:-1], edges[2:]
    j = np.arange(points // 2 + 1)[:, None]
    rising = (j >= left) & (j <= center)
    with quiet():
        # a triangle whose left corner is its center has the value 1 there
        up = np.where(center > left, (j - left) / (center - left), 1.0)
        down = (right - j) / (right - center)
    falling = (j >= center) & (j < right)
    result = np.where(falling, down, np.where(rising, up, 0.0))
    return result.astype(numpy_dtype(dtype))

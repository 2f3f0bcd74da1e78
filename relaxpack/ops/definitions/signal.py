"""Signal ops: signal.dft and signal.stft (ONNX DFT, STFT).

Complex values are real tensors with a trailing dim of 2 (real, imaginary);
a real signal may end in a dim of 1. ``signal.dft`` transforms along
``axis`` (never the trailing dim) with ``length`` points (``None``: the
axis's size, or ``2 * (size - 1)`` for the inverse one-sided transform)::

    y = R.signal.dft(x, axis=1, length=None, inverse=False, onesided=True)
    # x: (b, n, 1) -> y: (b, n // 2 + 1, 2)

``signal.stft`` slides a window of ``frame_length`` by ``frame_step`` over a
signal ``(batch, length, 1 or 2)`` and transforms each frame; the window is
an optional second argument::

    y = R.signal.stft(x, w, frame_step=8, frame_length=16, onesided=True)
    # x: (1, 128, 1), w: (16,) -> y: (1, 15, 9, 2)

Operands only known at run time (an axis input, a computed length) go
through packed kernels instead (``dyn.dft``, ``dyn.stft``; see the
converters).
"""

from __future__ import annotations

from ...ir.dims import Dim, DimAnalyzer, format_dim
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo
from ..registry import REQUIRED, register_op
from .common import (
    FLOAT, attr_error, bool_attr, check_dtype_kind, fmt_sinfo, int_attr, provably_different, result_vdevice,
    shape_error, tensor_arg, with_shape,
)


def _check_complex_dim(call: Call, data: TensorStructInfo, what: str = "data") -> None:
    last = data.shape[-1] if data.shape else None
    if isinstance(last, int) and last not in (1, 2):
        raise shape_error(call, f"{what} {fmt_sinfo(data)} must end in a dim of 1 (real) or 2 (complex)")


def _positive(call: Call, name: str) -> int | None:
    value = int_attr(call, name, allow_none=True)
    if value is not None and value < 1:
        raise attr_error(call, f"attribute {name} must be positive, got {value}")
    return value


# ---------------------------------------------------------------- signal.dft


def dft_points(size: Dim, length: int | None, inverse: bool, onesided: bool) -> tuple[Dim, Dim]:
    """(transform length, output dim along the axis) for an axis of ``size``."""
    n = length if length is not None else (2 * (size - 1) if inverse and onesided else size)
    return n, (n // 2 + 1 if onesided and not inverse else n)


def _infer_dft(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    check_dtype_kind(call, data, FLOAT)
    inverse, onesided = bool_attr(call, "inverse"), bool_attr(call, "onesided")
    length = _positive(call, "length")
    axis = int_attr(call, "axis")
    if data.ndim < 0:
        return data
    if data.ndim < 2 or not 0 <= axis < data.ndim - 1:
        raise shape_error(call, f"axis {axis} must name a signal dim of {fmt_sinfo(data)} (not the "
                                f"trailing real/imaginary dim)")
    if data.shape is None:
        return data
    _check_complex_dim(call, data)
    _, dim = dft_points(data.shape[axis], length, inverse, onesided)
    shape = list(data.shape)
    shape[axis] = dim
    shape[-1] = 1 if inverse and onesided else 2
    return with_shape(data, shape)


register_op("signal.dft", infer=_infer_dft, num_args=1, attrs={
    "axis": REQUIRED, "length": None, "inverse": False, "onesided": False,
}, doc="Discrete Fourier transform along axis of a real (..., 1) or complex (..., 2) tensor (ONNX DFT).")


# ---------------------------------------------------------------- signal.stft


def _infer_stft(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0, "signal")
    check_dtype_kind(call, data, FLOAT, "signal")
    onesided = bool_attr(call, "onesided")
    step, frame = _positive(call, "frame_step"), _positive(call, "frame_length")
    if step is None:
        raise attr_error(call, "attribute frame_step is required")
    window = tensor_arg(call, 1, "window") if len(call.args) > 1 else None
    vdevice = data.vdevice
    if window is not None:
        vdevice = result_vdevice(call, (data, window))
        if window.dtype is not None and window.dtype != data.dtype:
            raise shape_error(call, f"window dtype {window.dtype} differs from the signal's {data.dtype}")
        if window.ndim >= 0 and window.ndim != 1:
            raise shape_error(call, f"window {fmt_sinfo(window)} must be 1-D")
    if data.ndim >= 0 and data.ndim != 3:
        raise shape_error(call, f"signal {fmt_sinfo(data)} must be (batch, length, 1 or 2)")
    result = TensorStructInfo(None, data.dtype, 4, vdevice)
    if data.shape is None:
        return result
    _check_complex_dim(call, data, "signal")
    batch, size, _ = data.shape
    if window is not None and window.shape is not None:
        if frame is not None and provably_different(analyzer, window.shape[0], frame):
            raise shape_error(call, f"window {fmt_sinfo(window)} does not have frame_length {frame} points")
        frame = window.shape[0] if frame is None else frame
    elif window is not None and frame is None:
        return result
    frame = size if frame is None else frame
    if (isinstance(size, int) and isinstance(frame, int) and frame > size) or analyzer.prove_lt(size, frame):
        raise shape_error(call, f"frame_length {format_dim(frame)} is longer than the signal {fmt_sinfo(data)}")
    frames = (size - frame) // step + 1
    return with_shape(result, (batch, frames, frame // 2 + 1 if onesided else frame, 2))


register_op("signal.stft", infer=_infer_stft, num_args=(1, 2), attrs={
    "frame_step": REQUIRED, "frame_length": None, "onesided": True,
}, doc="Short-time Fourier transform of a (batch, length, 1 or 2) signal, optionally windowed (ONNX STFT).")

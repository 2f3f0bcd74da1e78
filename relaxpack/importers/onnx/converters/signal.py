"""DFT, STFT and MelWeightMatrix.

When the operands that fix the output's shape (DFT's ``dft_length`` and
``axis``, STFT's ``frame_step`` and ``frame_length``) are constants, DFT and
STFT become the IR ops ``signal.dft`` / ``signal.stft`` with static
attributes. When one is only known at run time (a graph input, a computed
value) the converter calls the packed kernel ``dyn.dft`` / ``dyn.stft``
with those operands and ``match_cast``\\ s the result to fresh dims, keeping
the dims it can still tell::

    DFT-20(x: (1, n, 10, 1), axis)  ->  lv = R.call_packed("dyn.dft", x, axis, runtime=("axis",), ...)
                                        y = R.match_cast(lv, R.Tensor((1, n, 10, 2), "float32"))

MelWeightMatrix's shape is its inputs' values: it is always the packed
kernel ``dyn.mel_weight_matrix``, folded at import time when its inputs are
constants (as they usually are).
"""

from __future__ import annotations

from ....ir.dims import Dim
from ....ops.registry import make_call
from ..registry import register_converter
from ..tensors import onnx_dtype_name
from ..value import Value
from ._dynamic import packed_call
from ._shape_common import rank_unknown, shape_error, unsupported

_FLOATS = ("float16", "bfloat16", "float32", "float64")


def _float_input(ctx, value: Value, what: str) -> None:
    if value.dtype is not None and value.dtype not in _FLOATS:
        raise unsupported(ctx, f"{what} of dtype {value.dtype} (expected a float tensor)")


def _static_int(value: Value | None) -> int | None:
    """The value of a constant integer scalar input; None when omitted or
    only known at run time."""
    if value is None:
        return None
    ints = value.int_values()
    if ints is None or len(ints) != 1 or not isinstance(ints[0], int):
        return None
    return ints[0]


def _given(value: Value | None) -> bool:
    """An optional input that is present (ONNX omits one by an empty name)."""
    return value is not None


# ---------------------------------------------------------------- DFT


@register_converter("", "DFT", since_opset=17)
def dft_v17(ctx, x, dft_length=None, *, axis=1, inverse=0, onesided=0):
    return _dft(ctx, x, dft_length, None, axis, bool(inverse), bool(onesided))


@register_converter("", "DFT", since_opset=20)
def dft_v20(ctx, x, dft_length=None, axis=None, *, inverse=0, onesided=0):
    """Opset 20 moves ``axis`` to an input (default -2, the last signal dim)."""
    static_axis = -2 if axis is None else _static_int(axis)
    return _dft(ctx, x, dft_length, axis if static_axis is None else None,
                static_axis, bool(inverse), bool(onesided))


def _dft(ctx, x: Value, length_in: Value | None, axis_in: Value | None, axis: int | None,
         inverse: bool, onesided: bool):
    _float_input(ctx, x, "input")
    rank = x.ndim
    if rank < 0:
        raise unsupported(ctx, rank_unknown(ctx, x))
    if axis is not None:
        if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
            raise shape_error(ctx, f"axis {axis} is out of range for an input of rank {rank} (the last "
                                   f"dim holds the real/imaginary parts)")
        axis %= rank
    length = _static_int(length_in)
    if _given(length_in) and length is None or axis is None:
        return _dft_at_run_time(ctx, x, length_in if length is None else None, axis_in, axis, length,
                                inverse, onesided)
    if length is not None and length < 1:
        raise shape_error(ctx, f"dft_length must be positive, got {length}")
    return make_call("signal.dft", ctx.expr(x), axis=axis, length=length, inverse=inverse, onesided=onesided)


def _dft_at_run_time(ctx, x: Value, length_in, axis_in, axis, length, inverse, onesided):
    """``dyn.dft`` with the runtime operands; the output keeps the dims
    that do not depend on them."""
    runtime = tuple(name for name, v in (("length", length_in), ("axis", axis_in)) if v is not None)
    shape: list[Dim | None] = list(x.shape) if x.shape is not None else [None] * x.ndim
    last = 1 if inverse and onesided else 2
    if axis is not None:
        shape[axis] = None
    elif length_in is not None or length is not None or onesided:
        shape = [None] * x.ndim      # which dim changes is only known at run time
    shape[-1] = last
    operands = [v for v in (length_in, axis_in) if v is not None]
    return packed_call(ctx, "dyn.dft", [x, *operands], [(shape, x.dtype)], "dft", runtime=runtime,
                       axis=axis, length=length, inverse=inverse, onesided=onesided)


# ---------------------------------------------------------------- STFT


@register_converter("", "STFT", since_opset=17)
def stft(ctx, signal, frame_step, window=None, frame_length=None, *, onesided=1):
    _float_input(ctx, signal, "signal")
    if signal.ndim == 2:        # (batch, length): a real signal, as onnxruntime reads it
        signal = ctx.emit(make_call("expand_dims", ctx.expr(signal), axis=(2,)), "signal")
    if signal.ndim >= 0 and signal.ndim != 3:
        raise shape_error(ctx, f"the signal must be (batch, length), (batch, length, 1) or "
                               f"(batch, length, 2), got rank {signal.ndim}")
    step, length = _static_int(frame_step), _static_int(frame_length)
    if step is not None and step < 1 or length is not None and length < 1:
        raise shape_error(ctx, f"frame_step ({step}) and frame_length ({length}) must be positive")
    dynamic = step is None or (_given(frame_length) and length is None)
    if not dynamic:
        args = [ctx.expr(signal)] + ([ctx.expr(window)] if _given(window) else [])
        return make_call("signal.stft", *args, frame_step=step, frame_length=length, onesided=bool(onesided))
    named = [("frame_step", frame_step if step is None else None), ("window", window),
             ("frame_length", frame_length if length is None and _given(frame_length) else None)]
    runtime = tuple(name for name, v in named if v is not None)
    operands = [v for _, v in named if v is not None]
    batch = signal.shape[0] if signal.shape is not None else None
    bins = None if length is None else (length // 2 + 1 if onesided else length)
    return packed_call(ctx, "dyn.stft", [signal, *operands], [((batch, None, bins, 2), signal.dtype)], "stft",
                       runtime=runtime, frame_step=step, frame_length=length, onesided=bool(onesided))


# ---------------------------------------------------------------- MelWeightMatrix

_FLOAT32 = 1  # TensorProto.FLOAT


@register_converter("", "MelWeightMatrix", since_opset=17)
def mel_weight_matrix(ctx, num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz, *,
                      output_datatype=_FLOAT32):
    dtype = onnx_dtype_name(output_datatype, "MelWeightMatrix's output_datatype")
    mels, points = _static_int(num_mel_bins), _static_int(dft_length)
    shape = (None if points is None else points // 2 + 1, mels)
    return packed_call(ctx, "dyn.mel_weight_matrix",
                       [num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz],
                       [(shape, dtype)], "mel", dtype=dtype)

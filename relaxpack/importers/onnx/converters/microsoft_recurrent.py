"""com.microsoft DynamicQuantizeLSTM: what onnxruntime.quantization.quantize_dynamic makes of an LSTM.

Its inputs are the LSTM's, with W (D, input, 4*hidden) and R (D, hidden,
4*hidden) int8 or uint8 and transposed against LSTM's, plus their scales and
zero points (per direction, or per direction and column) after P. onnxruntime
quantizes the left operand of each product to uint8 on the fly (X per
direction, H per step) and multiplies integers. The converter dequantizes
the weights, ``(W - zero_point) * scale`` transposed to LSTM's layout (a
constant, folded at build time), and emits ``nn.lstm`` with
``quantize_inputs=True``, whose kernel quantizes X and H as onnxruntime does
and multiplies in float: the same products up to float rounding.

    DynamicQuantizeLSTM(X, W, R, B, "", h0, c0, "", Ws, Wzp, Rs, Rzp)
        ->  w = permute_dims((astype(W) - Wzp) * Ws, (0, 2, 1)); r = ...
            R.nn.lstm(x, w, r, b, h0, c0, quantize_inputs=True, ...)
"""

from __future__ import annotations

from ....ir.expr import Expr
from ..registry import register_converter
from ..value import Value
from . import quantize as q
from ._math_common import astype, call
from .microsoft import MS, ms_unsupported
from .recurrent import _layer


def _dequantized_weights(ctx, weights: Value, scale: Value, zero_point: Value | None, what: str) -> Value:
    """``(weights - zero_point) * scale`` in float32, laid out (D, 4*hidden, k) as LSTM's W and R."""
    q._check_int8(ctx, weights)
    if weights.ndim != 3:
        raise ms_unsupported(ctx, f"{what} must be 3-D (directions, k, 4*hidden), got rank {weights.ndim}")
    if scale.ndim not in (1, 2) or (zero_point is not None and zero_point.ndim != scale.ndim):
        raise ms_unsupported(ctx, f"{what}_scale and {what}_zero_point must be 1-D (per direction) or 2-D "
                                  f"(per direction and column) alike")
    axes = (1, 2) if scale.ndim == 1 else (1,)   # per direction: (D, 1, 1); per column: (D, 1, 4*hidden)

    def laid_out(param: Value) -> Expr:
        return call(ctx, "expand_dims", ctx.expr(param), axis=axes)

    shifted = astype(ctx, weights, "float32")
    if not q._is_zero(zero_point):
        shifted = call(ctx, "subtract", shifted, astype(ctx, laid_out(zero_point), "float32"))
    scaled = call(ctx, "multiply", shifted, astype(ctx, laid_out(scale), "float32"))
    return ctx.emit(call(ctx, "permute_dims", scaled, axes=(0, 2, 1)), what.lower())


@register_converter(MS, "DynamicQuantizeLSTM", since_opset=1)
def dynamic_quantize_lstm(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None,
                          w_scale=None, w_zero_point=None, r_scale=None, r_zero_point=None, *, hidden_size=None,
                          activations=None, activation_alpha=None, activation_beta=None, clip=None,
                          direction="forward", input_forget=0):
    if w_scale is None or r_scale is None:
        raise ms_unsupported(ctx, "needs W_scale and R_scale")
    if x.dtype != "float32":
        raise ms_unsupported(ctx, f"X of type {x.dtype} (float32 only)")
    if sequence_lens is not None:
        # rows past their length would change the range that quantizes H at each step
        raise ms_unsupported(ctx, "sequence_lens is not supported (every row must run the whole sequence)")
    inputs = {"X": x, "W": _dequantized_weights(ctx, w, w_scale, w_zero_point, "W"),
              "R": _dequantized_weights(ctx, r, r_scale, r_zero_point, "R"), "B": b, "sequence_lens": None,
              "initial_h": initial_h, "initial_c": initial_c, "P": p}
    return _layer(ctx, "nn.lstm", inputs, hidden_size=hidden_size, activations=activations,
                  activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
                  direction=direction, layout=0, input_forget=input_forget, quantize_inputs=True)

"""Recurrent layers: ``nn.rnn``, ``nn.gru`` and ``nn.lstm`` (ONNX's RNN, GRU, LSTM).

The arguments are ``X, W, R`` and then the optional inputs the layer has, in
ONNX order (``B, sequence_lens, initial_h, initial_c, P``); the attribute
``optional_inputs`` names those present, so an omitted ``initial_h`` needs
no zero tensor of a symbolic batch. The result is the tuple ``(Y, Y_h)``, or
``(Y, Y_h, Y_c)`` for ``nn.lstm``. With ``G`` gates (1, 3, 4) and ``D``
directions (2 when bidirectional)::

    layout 0: X (seq, batch, input)   Y (seq, D, batch, hidden)   Y_h, Y_c (D, batch, hidden)
    layout 1: X (batch, seq, input)   Y (batch, seq, D, hidden)   Y_h, Y_c (batch, D, hidden)
    W (D, G*hidden, input)   R (D, G*hidden, hidden)   B (D, 2*G*hidden)   P (D, 3*hidden)
    sequence_lens (batch,) int32; initial_h / initial_c laid out like Y_h

With ``packed=True`` (PackRecurrentWeights: constant weights packed at
build time) W is ``(D, input, G*hidden)`` and R ``(D, hidden, G*hidden)``,
each direction's W^T and R^T with its gates in the kernel's order and
sigmoid gates' columns halved, B ordered and halved alike
(``runtime/kernels/recurrent_weights.py: pack_weights``).

``quantize_inputs`` (nn.lstm) quantizes the left operand of each product,
X and then H at each step, to uint8 with a scale from its range and back, as
onnxruntime's DynamicQuantizeLSTM computes (its weights come dequantized).

``activations`` is ``None`` (the cell's defaults) or one name per activation
slot and direction (``f`` for nn.rnn; ``f, g`` for nn.gru; ``f, g, h`` for
nn.lstm; forward first); ``activation_alpha`` / ``activation_beta`` give
one value per activation (``None``: each activation's default; ONNX's
shorter lists are resolved by the importer).

>>> make_call("nn.lstm", x, w, r, b, hidden_size=20, direction="bidirectional",
...           optional_inputs=("B",))                                  # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import Dim, DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo, TupleStructInfo
from ..registry import REQUIRED, register_op
from .common import (
    FLOAT, INT, attr_error, bool_attr, check_dims_equal, check_dtype_kind, fmt_sinfo, int_attr,
    is_real_value, result_vdevice, same_dtype, shape_error, tensor_arg, with_shape,
)

#: the activations a recurrent op may use (the kernel implements each, with
#: the ONNX operator's alpha/beta defaults)
ACTIVATIONS = ("Relu", "Tanh", "Sigmoid", "Affine", "LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid",
               "Elu", "Softsign", "Softplus")

#: op name -> (gates, default activations of one direction, outputs)
CELLS: dict[str, tuple[int, tuple[str, ...], int]] = {
    "nn.rnn": (1, ("Tanh",), 2),
    "nn.gru": (3, ("Sigmoid", "Tanh"), 2),
    "nn.lstm": (4, ("Sigmoid", "Tanh", "Tanh"), 3),
}

OPTIONAL_INPUTS = ("B", "sequence_lens", "initial_h", "initial_c", "P")
DIRECTIONS = {"forward": 1, "reverse": 1, "bidirectional": 2}


def num_directions(direction: str) -> int:
    return DIRECTIONS[direction]


def _optional_inputs(call: Call) -> dict[str, int]:
    """Optional input name -> argument index, checked against the op."""
    names = call.attrs["optional_inputs"]
    allowed = OPTIONAL_INPUTS if call.op.name == "nn.lstm" else ("B", "sequence_lens", "initial_h")
    if not isinstance(names, tuple) or any(n not in allowed for n in names):
        raise attr_error(call, f"attribute optional_inputs must name some of {allowed}, got {names!r}")
    if list(names) != sorted(names, key=allowed.index):
        raise attr_error(call, f"attribute optional_inputs must keep the order {allowed}, got {names!r}")
    if len(call.args) != 3 + len(names):
        raise shape_error(call, f"takes X, W, R and the {len(names)} optional input(s) {names}, "
                                f"got {len(call.args)} arguments")
    return {n: 3 + i for i, n in enumerate(names)}


def _check_activations(call: Call, directions: int) -> None:
    slots = len(CELLS[call.op.name][1]) * directions
    acts = call.attrs["activations"]
    if acts is not None:
        if not isinstance(acts, tuple) or len(acts) != slots or any(a not in ACTIVATIONS for a in acts):
            raise attr_error(call, f"attribute activations must be None or {slots} names of "
                                   f"{ACTIVATIONS}, got {acts!r}")
    for name in ("activation_alpha", "activation_beta"):
        values = call.attrs[name]
        if values is None:
            continue
        if not isinstance(values, tuple) or len(values) != slots or not all(map(is_real_value, values)):
            raise attr_error(call, f"attribute {name} must be None or {slots} numbers "
                                   f"(one per activation), got {values!r}")
    clip = call.attrs["clip"]
    if clip is not None and not (is_real_value(clip) and clip >= 0):
        raise attr_error(call, f"attribute clip must be None or a non-negative number, got {clip!r}")


def _expect(call: Call, sinfo: TensorStructInfo, what: str, dims: tuple[Dim | None, ...],
            analyzer: DimAnalyzer) -> None:
    """Check the rank of ``sinfo`` and each of its dims that ``dims`` gives (None: any)."""
    if sinfo.ndim >= 0 and sinfo.ndim != len(dims):
        raise shape_error(call, f"{what} must have rank {len(dims)}, got {fmt_sinfo(sinfo)}")
    if sinfo.shape is None:
        return
    for axis, (got, want) in enumerate(zip(sinfo.shape, dims)):
        if want is not None:
            check_dims_equal(call, got, want, analyzer, f"{what} {fmt_sinfo(sinfo)}: dim {axis}")


def _infer_recurrent(call: Call, analyzer: DimAnalyzer) -> TupleStructInfo:
    gates, _, outputs = CELLS[call.op.name]
    hidden, layout = int_attr(call, "hidden_size"), int_attr(call, "layout")
    direction = call.attrs["direction"]
    if direction not in DIRECTIONS:
        raise attr_error(call, f"attribute direction must be one of {sorted(DIRECTIONS)}, got {direction!r}")
    if hidden < 1 or layout not in (0, 1):
        raise attr_error(call, f"needs hidden_size >= 1 and layout 0 or 1, got {hidden} and {layout}")
    for name in ("linear_before_reset", "input_forget", "quantize_inputs"):
        if name in call.attrs:
            bool_attr(call, name)
    dirs = num_directions(direction)
    _check_activations(call, dirs)
    index = _optional_inputs(call)
    x = tensor_arg(call, 0, "X")
    w, r = tensor_arg(call, 1, "W"), tensor_arg(call, 2, "R")
    check_dtype_kind(call, x, FLOAT, "X")
    floats = [("X", x), ("W", w), ("R", r)] + [(n, tensor_arg(call, i, n)) for n, i in index.items()
                                                if n != "sequence_lens"]
    dtype = same_dtype(call, [s for _, s in floats], [n for n, _ in floats])
    vdevice = result_vdevice(call, [s for _, s in floats])
    _expect(call, x, "X", (None, None, None), analyzer)
    seq, batch, size = (None, None, None) if x.shape is None else x.shape
    if layout == 1 and x.shape is not None:
        seq, batch = batch, seq
    if bool_attr(call, "packed"):
        _expect(call, w, "W", (dirs, size, gates * hidden), analyzer)
        _expect(call, r, "R", (dirs, hidden, gates * hidden), analyzer)
    else:
        _expect(call, w, "W", (dirs, gates * hidden, size), analyzer)
        _expect(call, r, "R", (dirs, gates * hidden, hidden), analyzer)
    if "B" in index:
        _expect(call, tensor_arg(call, index["B"], "B"), "B", (dirs, 2 * gates * hidden), analyzer)
    if "sequence_lens" in index:
        lens = tensor_arg(call, index["sequence_lens"], "sequence_lens")
        check_dtype_kind(call, lens, INT, "sequence_lens")
        _expect(call, lens, "sequence_lens", (batch,), analyzer)
    state = (dirs, batch, hidden) if layout == 0 else (batch, dirs, hidden)
    for name in ("initial_h", "initial_c"):
        if name in index:
            _expect(call, tensor_arg(call, index[name], name), name, state, analyzer)
    if "P" in index:
        _expect(call, tensor_arg(call, index["P"], "P"), "P", (dirs, 3 * hidden), analyzer)
    like = TensorStructInfo(None, dtype, -1, vdevice)
    if x.shape is None:
        y, h = with_shape(like, None, ndim=4), with_shape(like, None, ndim=3)
    else:
        y = with_shape(like, (seq, dirs, batch, hidden) if layout == 0 else (batch, seq, dirs, hidden))
        h = with_shape(like, state)
    return TupleStructInfo((y,) + (h,) * (outputs - 1))


_COMMON = {"hidden_size": REQUIRED, "direction": "forward", "layout": 0, "optional_inputs": (),
           "activations": None, "activation_alpha": None, "activation_beta": None, "clip": None,
           "packed": False}

register_op("nn.rnn", infer=_infer_recurrent, attrs=_COMMON, num_args=(3, 6),
            doc="A simple RNN layer (ONNX RNN): H = f(X W^T + H R^T + Wb + Rb); returns (Y, Y_h).")
register_op("nn.gru", infer=_infer_recurrent, attrs={**_COMMON, "linear_before_reset": False},
            num_args=(3, 6), doc="A GRU layer (ONNX GRU, gates z, r, h); returns (Y, Y_h).")
register_op("nn.lstm", infer=_infer_recurrent,
            attrs={**_COMMON, "input_forget": False, "quantize_inputs": False},
            num_args=(3, 8), doc="An LSTM layer (ONNX LSTM, gates i, o, f, c; peepholes P); "
                                 "returns (Y, Y_h, Y_c).")

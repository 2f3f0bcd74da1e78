"""Recurrent layers: RNN, GRU, LSTM (opsets 1, 3 for GRU's
``linear_before_reset``, 7, 14 with ``layout``, 22).

Each node becomes one ``nn.rnn`` / ``nn.gru`` / ``nn.lstm`` call whose
arguments are ``X, W, R`` and the optional inputs the node has; the
node's outputs are the items of the result tuple::

    LSTM(X, W, R, B, "", h0)  ->  lv = R.nn.lstm(x, w, r, b, h0, hidden_size=20,
                                                 optional_inputs=("B", "initial_h"))
                                  Y, Y_h, Y_c = lv[0], lv[1], lv[2]

Activation names are matched case-insensitively (as onnxruntime does) and
spelled as in the spec. ``activation_alpha`` / ``activation_beta`` are
consumed in order by the activations that take an alpha (a beta), as
onnxruntime does; an activation left without one takes the default of the
ONNX operator of its name (the spec's rule; onnxruntime takes 0 instead for
Affine, ScaledTanh and ThresholdedRelu).
"""

from __future__ import annotations

from ....ir.expr import TupleGetItem
from ....ops.definitions.recurrent import CELLS, DIRECTIONS, OPTIONAL_INPUTS
from ....ops.registry import make_call
from ....runtime.kernels.recurrent_activations import ACTIVATIONS
from ..registry import register_converter
from ..value import Value
from ._shape_common import of_rank, shape_error, unsupported

_BY_LOWER = {name.lower(): name for name in ACTIVATIONS}

#: the rank the spec fixes for each input (a value of unknown rank, e.g. out of an If whose branches
#: differ in rank, is cast to it and checked at run time)
RANKS = {"X": 3, "W": 3, "R": 3, "B": 2, "sequence_lens": 1, "initial_h": 3, "initial_c": 3, "P": 2}


def _activations(ctx, op: str, dirs: int, activations, alphas, betas):
    """The IR attributes (activations, activation_alpha, activation_beta):
    one name, alpha and beta per activation slot, or None for the defaults."""
    if activations is None:     # the default activations take no alpha or beta
        return None, None, None
    slots = len(CELLS[op][1]) * dirs
    names = []
    for act in activations:
        name = _BY_LOWER.get(str(act).lower())
        if name is None:
            raise unsupported(ctx, f"activation {act!r} is not supported (supported: {', '.join(ACTIVATIONS)})")
        names.append(name)
    if len(names) == slots // dirs and dirs == 2:   # one set given for both directions
        names = names * 2
    if len(names) != slots:
        raise shape_error(ctx, f"needs {slots} activations ({len(CELLS[op][1])} per direction), "
                               f"got {len(names)}: {list(activations)}")
    if not alphas and not betas:
        return tuple(names), None, None
    alpha_iter, beta_iter = iter(alphas or ()), iter(betas or ())
    out_alpha, out_beta = [], []
    for name in names:
        _, alpha, beta, takes = ACTIVATIONS[name]
        out_alpha.append(float(next(alpha_iter, alpha)) if takes >= 1 else alpha)
        out_beta.append(float(next(beta_iter, beta)) if takes >= 2 else beta)
    return tuple(names), tuple(out_alpha), tuple(out_beta)


def _hidden_size(ctx, hidden_size, r: Value) -> int:
    if hidden_size is not None:
        if int(hidden_size) < 1:
            raise shape_error(ctx, f"hidden_size must be positive, got {hidden_size}")
        return int(hidden_size)
    if r.shape is not None and isinstance(r.shape[-1], int):
        return r.shape[-1]
    raise unsupported(ctx, "without hidden_size, R must have a static last dim (the hidden size)")


def _layer(ctx, op: str, inputs: dict[str, Value | None], *, hidden_size, activations, activation_alpha,
           activation_beta, clip, direction, layout, **cell_attrs):
    """Emit one recurrent op and return its outputs (Y, Y_h[, Y_c])."""
    for name in ("X", "W", "R"):
        if inputs[name] is None:
            raise shape_error(ctx, f"needs the input {name}")
    for name, value in inputs.items():    # each input has the rank the spec fixes: take it when unknown
        if value is not None and value.ndim < 0:
            of_rank(ctx, value, RANKS[name], name)
    if direction not in DIRECTIONS:
        raise shape_error(ctx, f"direction must be one of {sorted(DIRECTIONS)}, got {direction!r}")
    if layout not in (0, 1):
        raise shape_error(ctx, f"layout must be 0 or 1, got {layout}")
    present = tuple(n for n in OPTIONAL_INPUTS if inputs.get(n) is not None)
    acts, alphas, betas = _activations(ctx, op, DIRECTIONS[direction], activations, activation_alpha,
                                       activation_beta)
    args = [ctx.expr(inputs[n]) for n in ("X", "W", "R", *present)]
    call = make_call(op, *args, hidden_size=_hidden_size(ctx, hidden_size, inputs["R"]),
                     direction=direction, layout=int(layout), optional_inputs=present, activations=acts,
                     activation_alpha=alphas, activation_beta=betas,
                     clip=None if clip is None else float(clip),
                     **{k: bool(v) for k, v in cell_attrs.items()})
    out = ctx.emit(call, op.split(".")[1])
    return tuple(TupleGetItem(out.expr, i) for i in range(CELLS[op][2]))


# ---------------------------------------------------------------- RNN

# Opsets 1-6 compute what opset 7 computes; their ``output_sequence`` only
# said whether the node must name the optional output Y. Y is computed when
# the node names it, whatever output_sequence says (onnx's reference reads
# it the same way).


@register_converter("", "RNN", since_opset=1)
def rnn_v1(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None, *, hidden_size=None,
           activations=None, activation_alpha=None, activation_beta=None, clip=None, direction="forward",
           output_sequence=0):
    return rnn_v14(ctx, x, w, r, b, sequence_lens, initial_h, hidden_size=hidden_size, activations=activations,
                   activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
                   direction=direction)



@register_converter("", "RNN", since_opset=7)
def rnn_v7(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None, *, hidden_size=None,
           activations=None, activation_alpha=None, activation_beta=None, clip=None, direction="forward"):
    return rnn_v14(ctx, x, w, r, b, sequence_lens, initial_h, hidden_size=hidden_size, activations=activations,
                   activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
                   direction=direction)


@register_converter("", "RNN", since_opset=14)
def rnn_v14(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None, *, hidden_size=None,
            activations=None, activation_alpha=None, activation_beta=None, clip=None, direction="forward",
            layout=0):
    inputs = {"X": x, "W": w, "R": r, "B": b, "sequence_lens": sequence_lens, "initial_h": initial_h}
    return _layer(ctx, "nn.rnn", inputs, hidden_size=hidden_size, activations=activations,
                  activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
                  direction=direction, layout=layout)


# ---------------------------------------------------------------- GRU


@register_converter("", "GRU", since_opset=1)
def gru_v1(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None, *, hidden_size=None,
           activations=None, activation_alpha=None, activation_beta=None, clip=None, direction="forward",
           output_sequence=0):
    return gru_v14(ctx, x, w, r, b, sequence_lens, initial_h, hidden_size=hidden_size, activations=activations,
                   activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
                   direction=direction)


@register_converter("", "GRU", since_opset=3)
def gru_v3(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None, *, hidden_size=None,
           activations=None, activation_alpha=None, activation_beta=None, clip=None, direction="forward",
           linear_before_reset=0, output_sequence=0):
    return gru_v14(ctx, x, w, r, b, sequence_lens, initial_h, hidden_size=hidden_size, activations=activations,
                   activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
                   direction=direction, linear_before_reset=linear_before_reset)



@register_converter("", "GRU", since_opset=7)
def gru_v7(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None, *, hidden_size=None,
           activations=None, activation_alpha=None, activation_beta=None, clip=None, direction="forward",
           linear_before_reset=0):
    return gru_v14(ctx, x, w, r, b, sequence_lens, initial_h, hidden_size=hidden_size, activations=activations,
                   activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
                   direction=direction, linear_before_reset=linear_before_reset)


@register_converter("", "GRU", since_opset=14)
def gru_v14(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None, *, hidden_size=None,
            activations=None, activation_alpha=None, activation_beta=None, clip=None, direction="forward",
            layout=0, linear_before_reset=0):
    inputs = {"X": x, "W": w, "R": r, "B": b, "sequence_lens": sequence_lens, "initial_h": initial_h}
    return _layer(ctx, "nn.gru", inputs, hidden_size=hidden_size, activations=activations,
                  activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
                  direction=direction, layout=layout, linear_before_reset=linear_before_reset)


# ---------------------------------------------------------------- LSTM


@register_converter("", "LSTM", since_opset=1)
def lstm_v1(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, *,
            hidden_size=None, activations=None, activation_alpha=None, activation_beta=None, clip=None,
            direction="forward", input_forget=0, output_sequence=0):
    return lstm_v14(ctx, x, w, r, b, sequence_lens, initial_h, initial_c, p, hidden_size=hidden_size,
                    activations=activations, activation_alpha=activation_alpha,
                    activation_beta=activation_beta, clip=clip, direction=direction, input_forget=input_forget)



@register_converter("", "LSTM", since_opset=7)
def lstm_v7(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, *,
            hidden_size=None, activations=None, activation_alpha=None, activation_beta=None, clip=None,
            direction="forward", input_forget=0):
    return lstm_v14(ctx, x, w, r, b, sequence_lens, initial_h, initial_c, p, hidden_size=hidden_size,
                    activations=activations, activation_alpha=activation_alpha,
                    activation_beta=activation_beta, clip=clip, direction=direction, input_forget=input_forget)


@register_converter("", "LSTM", since_opset=14)
def lstm_v14(ctx, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None, *,
             hidden_size=None, activations=None, activation_alpha=None, activation_beta=None, clip=None,
             direction="forward", layout=0, input_forget=0):
    inputs = {"X": x, "W": w, "R": r, "B": b, "sequence_lens": sequence_lens, "initial_h": initial_h,
              "initial_c": initial_c, "P": p}
    return _layer(ctx, "nn.lstm", inputs, hidden_size=hidden_size, activations=activations,
                  activation_alpha=activation_alpha, activation_beta=activation_beta, clip=clip,
                  direction=direction, layout=layout, input_forget=input_forget)

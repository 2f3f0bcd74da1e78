"""PackRecurrentWeights: constant LSTM / GRU / RNN weights packed at build time.

The recurrent kernels read each direction's W and R as C-contiguous W^T
and R^T, a fast cell's gates in the order its step reads them and its
sigmoid gates' columns halved (``runtime/kernels/recurrent_weights.py:
pack_weights``). Given the weights as ONNX lays them out, a kernel packs
them on every call (for a hidden-256 LSTM that is 1 MiB of R transposed,
about 0.1 ms); this pass packs constant weights once and says so::

    lv = R.nn.lstm(x, W, R, B, hidden_size=256, optional_inputs=("B",))
    ->
    lv = R.nn.lstm(x, W', R', B', hidden_size=256, optional_inputs=("B",), packed=True)

Rule (table :data:`RULES`):

- ``pack_recurrent_weights``: an ``nn.rnn``, ``nn.gru`` or ``nn.lstm``
  not packed yet whose W, R and B (when it has one) are float32 or
  float64 constants. Lower floats stay as they are: the kernel computes
  in float32 and converts them on every call anyway, and halving a
  float16 subnormal would round it.
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import Constant
from ..ops.registry import make_call
from ..runtime.kernels.recurrent_weights import pack_weights
from .core.infra import function_pass
from .core.rules import Match, Rule, RewriteTable, all_of, const, is_op, wildcard

LAYERS = ("nn.rnn", "nn.gru", "nn.lstm")
PACKABLE_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def _has_bias(m: Match) -> bool:
    return "B" in m["layer"].attrs["optional_inputs"]


def _unpacked(m: Match) -> str | None:
    return "its weights are packed already" if m["layer"].attrs["packed"] else None


def _constant_bias(m: Match) -> str | None:
    # B, when present, is the fourth argument (optional_inputs keep ONNX order)
    if _has_bias(m) and not isinstance(m["layer"].args[3], Constant):
        return "B is not a constant"
    return None


def _packable_dtype(m: Match) -> str | None:
    dtype = m.data("w").dtype
    if dtype not in PACKABLE_DTYPES:
        return f"its weights are {dtype}: the kernel converts them to float32 on every call anyway"
    return None


def pack(m: Match):
    """The layer with W, R and B packed and ``packed=True``."""
    call = m["layer"]
    attrs = dict(call.attrs)
    has_b = _has_bias(m)
    w, r, b = pack_weights(call.op.name.removeprefix("nn."), m.data("w"), m.data("r"),
                           call.args[3].data if has_b else None,
                           peepholes="P" in attrs["optional_inputs"], **attrs)
    args = [m["x"], Constant(w), Constant(r)]
    args += [Constant(b), *call.args[4:]] if has_b else call.args[3:]
    return make_call(call.op.name, *args, **{**attrs, "packed": True})


RULES = RewriteTable("PackRecurrentWeights", [
    Rule("pack_recurrent_weights",
         is_op(*LAYERS)(wildcard("x"), const("w", "W"), const("r", "R"), ..., name="layer"),
         all_of(_unpacked, _constant_bias, _packable_dtype),
         pack),
])


@function_pass(name="PackRecurrentWeights", opt_level=2, requires=("import", "optimize"),
               produces="optimize")
def pack_recurrent_weights(func, mod, ctx):
    """Pack the constant weights of recurrent layers (rule pack_recurrent_weights)."""
    return RULES.apply(func)

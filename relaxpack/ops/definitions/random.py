"""Random ops. Their seed semantics follow onnx's reference evaluator, so a
seeded model gives the same numbers here as there: a ``seed`` attribute
starts numpy's legacy ``RandomState(seed)`` afresh at every call (the same
draw on every run); without a seed each call draws from fresh OS entropy.
So the ops are impure: never folded, merged or dropped by the passes.

>>> make_call("dropout_train", x, ratio, training_mode, seed=0)    # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TupleStructInfo
from ..registry import register_op
from .common import BOOL, FLOAT, attr_error, check_dtype_kind, fmt_sinfo, shape_error, tensor_arg, with_shape


def _seed_attr(call: Call) -> None:
    seed = call.attrs["seed"]
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise attr_error(call, f"attribute seed must be an int or None, got {seed!r}")


def _infer_dropout_train(call: Call, analyzer: DimAnalyzer) -> TupleStructInfo:
    data, ratio, training = tensor_arg(call, 0), tensor_arg(call, 1, "ratio"), tensor_arg(call, 2, "training_mode")
    check_dtype_kind(call, data, FLOAT)
    check_dtype_kind(call, ratio, FLOAT, "ratio")
    check_dtype_kind(call, training, BOOL, "training_mode")
    for sinfo, what in ((ratio, "ratio"), (training, "training_mode")):
        if sinfo.shape is not None and any(d != 1 for d in sinfo.shape):
            raise shape_error(call, f"{what} must hold one value, got {fmt_sinfo(sinfo)}")
    _seed_attr(call)
    return TupleStructInfo((data, with_shape(data, data.shape, "bool", data.ndim)))


register_op("dropout_train", infer=_infer_dropout_train, attrs={"seed": None}, num_args=3, pure=False,
            doc="ONNX Dropout with a run-time training_mode: when it is true and ratio > 0, keep = "
                "RandomState(seed).uniform(0, 1, shape) >= ratio and y = x * keep / (1 - ratio); else y = x "
                "and keep is all true. Returns (y, keep).")

"""Optimizer steps of ONNX's ai.onnx.preview.training domain, one tensor at a
time: adagrad, adam, momentum. Each takes the learning rate ``r`` and the
step count ``t`` (scalars), the tensor ``x``, its gradient ``g`` and its
optimizer state, and returns the new tensor and the new state.

>>> make_call("adagrad", r, t, x, g, h, decay_factor=0.1, epsilon=1e-5, norm_coefficient=1e-3)  # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TupleStructInfo
from ..registry import REQUIRED, register_op
from .common import (
    FLOAT, INT, attr_error, check_dims_equal, check_dtype_kind, float_attrs, fmt_sinfo, shape_error, tensor_arg,
)


def _optimizer(names: tuple[str, ...], floats: tuple[str, ...], check=None):
    """The inference of an op taking (r, t, x, g, *state): every tensor after
    t has x's shape; the result is (x, *state) alike."""
    def infer(call: Call, analyzer: DimAnalyzer) -> TupleStructInfo:
        r, t = tensor_arg(call, 0, "r"), tensor_arg(call, 1, "t")
        check_dtype_kind(call, r, FLOAT, "r")
        check_dtype_kind(call, t, INT, "t")
        tensors = [tensor_arg(call, i, name) for i, name in enumerate(names, start=2)]
        x = tensors[0]
        for sinfo, name in zip(tensors, names):
            check_dtype_kind(call, sinfo, FLOAT, name)
            if x.shape is not None and sinfo.shape is not None:
                if len(x.shape) != len(sinfo.shape):
                    raise shape_error(call, f"{name} {fmt_sinfo(sinfo)} must have x's shape {fmt_sinfo(x)}")
                for a, b in zip(x.shape, sinfo.shape):
                    check_dims_equal(call, a, b, analyzer, f"{name} {fmt_sinfo(sinfo)} and x {fmt_sinfo(x)}")
        float_attrs(call, *floats)
        if check is not None:
            check(call)
        return TupleStructInfo((x, *(tensors[2:])))
    return infer


def _check_mode(call: Call) -> None:
    if call.attrs["mode"] not in ("standard", "nesterov"):
        raise attr_error(call, f"mode must be 'standard' or 'nesterov', got {call.attrs['mode']!r}")


register_op("adagrad", infer=_optimizer(("x", "g", "h"), ("decay_factor", "epsilon", "norm_coefficient")),
            attrs={"decay_factor": 0.0, "epsilon": 0.0, "norm_coefficient": 0.0}, num_args=5,
            doc="One Adagrad step: (r, t, x, g, h) -> (x_new, h_new).")
register_op("adam", infer=_optimizer(("x", "g", "v", "h"),
                                     ("alpha", "beta", "epsilon", "norm_coefficient", "norm_coefficient_post")),
            attrs={"alpha": 0.9, "beta": 0.999, "epsilon": 0.0, "norm_coefficient": 0.0,
                   "norm_coefficient_post": 0.0}, num_args=6,
            doc="One Adam step: (r, t, x, g, v, h) -> (x_new, v_new, h_new).")
register_op("momentum", infer=_optimizer(("x", "g", "v"), ("alpha", "beta", "norm_coefficient"), _check_mode),
            attrs={"alpha": REQUIRED, "beta": REQUIRED, "norm_coefficient": REQUIRED, "mode": "standard"},
            num_args=5,
            doc="One SGD-with-momentum step (mode standard or nesterov): (r, t, x, g, v) -> (x_new, v_new).")

"""``nn.squeeze_excite``: a squeeze-and-excitation block in one call.

``nn.squeeze_excite(data, w1, b1, w2, b2, act1=..., act2=..., data_layout="NHWC")`` is::

    s = mean of data over its spatial dims           # (N, C): the squeeze (a global average pool)
    h = act1(s @ w1 + b1)                            # w1 (C, R), b1 (R,): the first 1x1 conv
    g = act2(h @ w2 + b2)                            # w2 (R, C), b2 (C,): the second
    out = data * g                                   # g broadcast over the spatial dims

as MobileNetV3 (ReLU, HardSigmoid) and EfficientNet (SiLU, sigmoid) write it; the activations
take ``nn.conv_bias_act``'s values. No importer emits it: FuseSqueezeExcite makes it from the
four ops (``passes/fuse_squeeze_excite.py``), whose results the kernel gives bit for bit.

>>> make_call("nn.squeeze_excite", x, w1, b1, w2, b2, act1="relu", act2=("hard_sigmoid", 0.2, 0.5))  # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo
from ..registry import register_op
from .common import FLOAT, attr_error, check_dims_equal, check_dtype_kind, fmt_sinfo, same_dtype, shape_error, \
    tensor_arg
from .fused import check_activation


def _infer_squeeze_excite(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    data = tensor_arg(call, 0)
    check_dtype_kind(call, data, FLOAT)
    layout = call.attrs["data_layout"]
    if layout not in ("NHWC", "NCHW"):
        raise attr_error(call, f"data_layout must be 'NHWC' or 'NCHW', got {layout!r}")
    params = [tensor_arg(call, i, what) for i, what in enumerate(("w1", "b1", "w2", "b2"), start=1)]
    same_dtype(call, (data, *params), ("data", "w1", "b1", "w2", "b2"))
    if 0 <= data.ndim < 3:
        raise shape_error(call, f"data must have spatial dims (rank >= 3), got {fmt_sinfo(data)}")
    for act in ("act1", "act2"):
        check_activation(call.replace(attrs={"activation": call.attrs[act]}), data)
    w1, b1, w2, b2 = params
    for sinfo, ndim, what in ((w1, 2, "w1"), (b1, 1, "b1"), (w2, 2, "w2"), (b2, 1, "b2")):
        if sinfo.ndim >= 0 and sinfo.ndim != ndim:
            raise shape_error(call, f"{what} must be {ndim}-D, got {fmt_sinfo(sinfo)}")
    if data.shape is not None and all(p.shape is not None for p in params):
        channels = data.shape[-1 if layout == "NHWC" else 1]
        reduced = w1.shape[1]
        for dim, want, what in ((w1.shape[0], channels, "w1's rows"), (b1.shape[0], reduced, "b1"),
                                (w2.shape[0], reduced, "w2's rows"), (w2.shape[1], channels, "w2's columns"),
                                (b2.shape[0], channels, "b2")):
            check_dims_equal(call, dim, want, analyzer,
                             f"{what} ({dim}) do not fit data {fmt_sinfo(data)} and w1 {fmt_sinfo(w1)}")
    return data


register_op("nn.squeeze_excite", infer=_infer_squeeze_excite,
            attrs={"act1": None, "act2": None, "data_layout": "NHWC"}, num_args=5,
            doc="data * act2(act1(mean over spatial dims @ w1 + b1) @ w2 + b2): a squeeze-and-excitation "
                "block (the chain FuseSqueezeExcite recognises).")

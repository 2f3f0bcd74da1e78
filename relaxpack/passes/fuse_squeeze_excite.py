"""FuseSqueezeExcite: a channels-last squeeze-and-excitation block in one kernel call.

After ConvertLayout, MobileNetV3's and EfficientNet's SE blocks read::

    p = R.nn.global_avg_pool(x, data_layout="NHWC")        # or R.mean(x, axis=(1, 2), keepdims=True)
    h = R.nn.conv_bias_act(p, W1, b1, activation=a1, data_layout="NHWC")     # 1x1, (1, 1, C, R)
    g = R.nn.conv_bias_act(h, W2, b2, activation=a2, data_layout="NHWC")     # 1x1, (1, 1, R, C)
    y = R.multiply(x, g)                                   # either operand order

Rule ``fuse_squeeze_excite`` makes that ``R.nn.squeeze_excite(x, W1', b1, W2', b2, act1=a1,
act2=a2)`` (the weights as the (C, R) and (R, C) matrices the convs' GEMMs read) when the pool,
``h`` and ``g`` are used only by the next op, the convs are plain 1x1 convs (stride, dilation and
groups 1, no padding) with constant weights and biases, and ``x`` is a rank-4 float32/float64
tensor of the result's type. The kernel makes the four kernels' numpy calls (bit for bit their
result, ``runtime/kernels/squeeze_excite.py``) in one instruction instead of four: at the zoo's
61x96 images ~12 us an SE block in four instructions of Python around ten numpy calls.
"""

from __future__ import annotations

import numpy as np

from ..ir.expr import Constant
from ..ops.registry import make_call
from .core.infra import function_pass
from .core.rules import Match, Rule, RewriteTable, all_of, any_of, const, is_op, same_type_as_output, used_once, \
    wildcard

_DTYPES = ("float32", "float64")

_X = wildcard("x")
_POOL = any_of(is_op("nn.global_avg_pool")(_X, name="pool", what="operand"),
               is_op("mean")(_X, name="pool", what="operand"))
_FC1 = is_op("nn.conv_bias_act")(_POOL, const("w1", "the first weight"), const("b1", "the first bias"),
                                 name="fc1", what="operand")
_GATE = is_op("nn.conv_bias_act")(_FC1, const("w2", "the second weight"), const("b2", "the second bias"),
                                  name="fc2", what="operand")


def _pool_is_spatial(m: Match) -> str | None:
    """The squeeze is a channels-last mean over H and W (kept as 1s) of a rank-4 float tensor."""
    x, pool = m.sinfo("x"), m["pool"]
    if x.dtype not in _DTYPES or x.ndim != 4:
        return f"x is {x.dtype} of rank {x.ndim}, not a rank-4 {' or '.join(_DTYPES)} tensor"
    if pool.op.name == "nn.global_avg_pool":
        return None if pool.attrs["data_layout"] == "NHWC" else "the pool is not channels last"
    axis = pool.attrs["axis"]
    axes = (axis,) if isinstance(axis, int) else tuple(axis or ())
    if sorted(a % 4 for a in axes) != [1, 2] or not pool.attrs["keepdims"]:
        return f"the mean is over axes {axis} (keepdims={pool.attrs['keepdims']}), not H and W kept"
    return None


def _plain_pointwise(name: str):
    def check(m: Match) -> str | None:
        conv, weight = m[name], m.data("w1" if name == "fc1" else "w2")
        attrs = conv.attrs
        if attrs["data_layout"] != "NHWC" or attrs["out_layout"] not in (None, "NHWC"):
            return f"{name} is not channels last"
        if weight.ndim != 4 or weight.shape[:2] != (1, 1):
            return f"{name} is not a 1x1 conv (weight {weight.shape})"
        if attrs["groups"] != 1 or attrs.get("exact"):
            return f"{name} is grouped or exact"
        if any(v != 1 for v in _ints(attrs["strides"])) or any(v != 1 for v in _ints(attrs["dilation"])) \
                or any(v != 0 for v in _ints(attrs["padding"])):
            return f"{name} has a stride, dilation or padding"
        return None
    check.__name__ = f"plain_{name}"
    return check


def _ints(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def squeeze_excite_call(m: Match):
    """x * conv(conv(pool(x))) -> nn.squeeze_excite(x, W1, b1, W2, b2)."""
    w1, w2 = m.data("w1"), m.data("w2")
    return make_call("nn.squeeze_excite", m["x"],
                     Constant(np.ascontiguousarray(w1.reshape(w1.shape[2], w1.shape[3]))), m["b1"],
                     Constant(np.ascontiguousarray(w2.reshape(w2.shape[2], w2.shape[3]))), m["b2"],
                     act1=m["fc1"].attrs["activation"], act2=m["fc2"].attrs["activation"], data_layout="NHWC")


RULES = RewriteTable("FuseSqueezeExcite", [
    Rule("fuse_squeeze_excite",
         is_op("multiply")(_X, _GATE, commutative=True),
         all_of(_pool_is_spatial, _plain_pointwise("fc1"), _plain_pointwise("fc2"),
                *(used_once(name, what) for name, what in (
                    ("pool", "the pooled value"), ("fc1", "the first conv's result"), ("fc2", "the gate"))),
                same_type_as_output("x")),
         squeeze_excite_call),
])


@function_pass(name="FuseSqueezeExcite", opt_level=2, requires=("import", "optimize"), produces="optimize")
def fuse_squeeze_excite(func, mod, ctx):
    """Fuse channels-last SE blocks into nn.squeeze_excite: rule fuse_squeeze_excite (see the module docstring)."""
    return RULES.apply(func)

"""FuseRMSNorm: the RMS normalization chain of llama, qwen2, mistral and T5 in one kernel call.

Exporters write ``RMSNorm(x) = x * rsqrt(mean(x ** 2, -1) + eps) * w`` as seven ops::

    sq = R.power(x, 2.0)           # or R.square(x), R.multiply(x, x)
    ms = R.mean(sq, axis=(-1,), keepdims=True)
    v = R.add(ms, eps)
    s = R.sqrt(v)
    r = R.reciprocal(s)            # or R.divide(1.0, s); or r = R.rsqrt(v)
    y = R.multiply(x, r)
    out = R.multiply(w, y)         # either operand order

(onnxruntime's SimplifiedLayerNormalization imports as the ``square`` /
``rsqrt`` form; ONNX's RMSNormalization divides by the root, another
rounding, and stays as it is.)

Rule ``fuse_rms_norm`` (table :data:`RULES`) makes that ``R.nn.rms_norm(x, w,
epsilon=eps)`` when every intermediate is used only by the next op, ``x`` is
float32 or float64 and the result has ``x``'s shape (``w`` broadcasts into it).
The kernel runs the same steps with the same roundings (bit for bit the chain;
``runtime/kernels/normalization.py``), in one instruction instead of three to
seven (power, mean and a fused elementwise kernel at -O2).
"""

from __future__ import annotations

import numpy as np

from ..ops.registry import make_call
from .core.infra import function_pass
from .core.rules import Match, Rule, RewriteTable, all_of, any_of, const, is_op, same_type_as_output, used_once, \
    wildcard

#: the dtypes whose chain the kernel computes step for step (low floats round per op when unfused)
_DTYPES = ("float32", "float64")

_X = wildcard("x")
_SQUARE = any_of(is_op("power")(_X, const("two", "the exponent"), name="square", what="operand"),
                 is_op("square")(_X, name="square", what="operand"),
                 is_op("multiply")(_X, _X, name="square", what="operand"))
_MEAN_EPS = is_op("add")(is_op("mean")(_SQUARE, name="mean", what="operand"),
                         const("eps", "epsilon"), commutative=True, name="add_eps", what="operand")
_SQRT = is_op("sqrt")(_MEAN_EPS, name="sqrt", what="operand")
_INVERSE = any_of(is_op("reciprocal")(_SQRT, name="inverse", what="operand"),
                  is_op("divide")(const("one", "the dividend"), _SQRT, name="inverse", what="operand"),
                  is_op("rsqrt")(_MEAN_EPS, name="inverse", what="operand"))
_NORMED = is_op("multiply")(_X, _INVERSE, commutative=True, name="normed", what="operand")


def _scalar_is(name: str, value: float | None, what: str):
    """A check: the constant ``name`` holds one value (``value`` when given)."""
    def check(m: Match) -> str | None:
        data = m.data(name)
        if data.size != 1 or data.dtype.kind != "f":
            return f"{what} is not one float value (shape {data.shape}, {data.dtype})"
        if value is not None and float(data.reshape(-1)[0]) != value:
            return f"{what} is {float(data.reshape(-1)[0])}, not {value}"
        return None
    check.__name__ = f"scalar_{name}"
    return check


def _last_axis_mean(m: Match) -> str | None:
    mean, x = m["mean"], m.sinfo("x")
    if x.dtype not in _DTYPES:
        return f"x is {x.dtype}, not one of {', '.join(_DTYPES)}"
    if x.ndim < 1:
        return "the rank of x is not known"
    axis = mean.attrs["axis"]
    axes = (axis,) if isinstance(axis, int) else tuple(axis or ())
    if axes not in ((-1,), (x.ndim - 1,)):
        return f"the mean is over axes {axis}, not the last axis alone"
    if not mean.attrs["keepdims"]:
        return "the mean drops the reduced axis"
    return None


def _one(m: Match) -> str | None:
    return _scalar_is("one", 1.0, "the dividend")(m) if "one" in m else None


def _two(m: Match) -> str | None:
    return _scalar_is("two", 2.0, "the exponent")(m) if "two" in m else None


def rms_norm_call(m: Match):
    """x * (1 / sqrt(mean(x ** 2, -1) + eps)) * w -> nn.rms_norm(x, w, epsilon=eps)."""
    return make_call("nn.rms_norm", m["x"], m["scale"], epsilon=float(np.reshape(m.data("eps"), -1)[0]))


RULES = RewriteTable("FuseRMSNorm", [
    Rule("fuse_rms_norm",
         is_op("multiply")(_NORMED, wildcard("scale"), commutative=True),
         all_of(_two, _scalar_is("eps", None, "epsilon"), _one, _last_axis_mean,
                *(used_once(name, what) for name, what in (
                    ("square", "the square"), ("mean", "the mean"), ("add_eps", "the mean plus epsilon"),
                    ("sqrt", "the root"), ("inverse", "the inverse root"), ("normed", "the normalized value"))),
                same_type_as_output("x")),
         rms_norm_call),
])


@function_pass(name="FuseRMSNorm", opt_level=2, requires=("import", "optimize"), produces="optimize")
def fuse_rms_norm(func, mod, ctx):
    """Fuse the RMS normalization chain into nn.rms_norm: rule fuse_rms_norm (see the module docstring)."""
    return RULES.apply(func)

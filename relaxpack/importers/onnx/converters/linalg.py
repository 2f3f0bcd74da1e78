"""Linear algebra beyond matmul (which is in nn.py): Det.

    Det(x: (b, 3, 3))  ->  R.det(x): (b,)
"""

from __future__ import annotations

from ....ops.registry import make_call
from ..registry import register_converter
from ._shape_common import shape_error


@register_converter("", "Det", since_opset=11)
def det(ctx, x):
    if x is None:
        raise shape_error(ctx, "needs the input X")
    return make_call("det", ctx.expr(x))

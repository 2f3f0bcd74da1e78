"""Random ops, seeded as onnx's reference evaluator does (see
``ops/definitions/random.py``): a seed attribute gives the same numbers on
every run; without one each run draws afresh.

    Dropout(x, ratio, training_mode: input, seed=0)  ->  R.dropout_train(x, ratio, training_mode, seed=0)
"""

from __future__ import annotations

import numpy as np

from ....ir.expr import TupleGetItem
from ....ops.registry import make_call
from ._shape_common import unsupported


def dropout_training(ctx, x, ratio, training_mode, seed):
    """Dropout (opset 12+) whose training_mode is true or known only at run
    time: the random mask of ``dropout_train`` (ratio 0.5 when omitted)."""
    if x.dtype is not None and not x.dtype.startswith(("float", "bfloat")):
        raise unsupported(ctx, f"training-mode Dropout of {x.dtype}")
    if ratio is None:
        ratio = ctx.const(np.array(0.5, np.float32))
    if isinstance(seed, float):
        seed = int(seed)
    call = make_call("dropout_train", ctx.expr(x), ctx.expr(ratio), ctx.expr(training_mode), seed=seed)
    found = ctx.bb.emit(call, "dropout")     # not ctx.emit: an unseeded draw must not fold at import time
    return TupleGetItem(found, 0), TupleGetItem(found, 1)

"""FuseClassifierNormalizer: a linear classifier's scores and the Normalizer after them in one call.

scikit-learn's LogisticRegression converts (skl2onnx) to a LinearClassifier and an L1 Normalizer of
its probabilities::

    lv = R.linear_classifier(x, coef, intercepts, post_transform="SOFTMAX")
    p = lv[1]
    y = R.ml_normalizer(p, norm="L1")

Where ``p`` is read only by the normalizer and is ``lv``'s only item 1 (``lv`` read only through its
items, in the normalizer's block), the classifier takes the normalizer as its ``norm`` attribute and
``y`` becomes its item::

    lv = R.linear_classifier(x, coef, intercepts, post_transform="SOFTMAX", norm="L1")
    y = lv[1]

The kernel normalizes the float32 scores it wrote as ``ml_normalizer`` would (the same values bit
for bit; a softmax and L1 in one pass, ``runtime/kernels/softmax_l1.py``): one kernel call, one
output allocation and a tuple item fewer a run, on a model of two calls. The core round after it
drops ``p``.
"""

from __future__ import annotations

from collections import Counter

from ..ir.block_builder import BlockBuilder
from ..ir.expr import Function, SeqExpr, TupleGetItem, Var, VarBinding
from ..ops.registry import make_call
from .analysis.float_values import Definitions
from .core.infra import function_pass
from .dead_code_elimination import count_uses


def _classifier_of(y: Var, defs: Definitions, uses: Counter, items: Counter) -> Var | None:
    """The ``linear_classifier`` var ``lv`` when ``y`` is ``ml_normalizer(lv[1])`` as the module
    docstring says it fuses, else None."""
    call = defs.calls.get(y)
    if call is None or call.op.name != "ml_normalizer":
        return None
    p = call.args[0]
    item = defs.items.get(p) if isinstance(p, Var) else None
    if item is None or item[1] != 1 or uses[p] != 1:
        return None
    lv = item[0]
    classifier = defs.calls.get(lv)
    if classifier is None or classifier.op.name != "linear_classifier" or classifier.attrs["norm"] != "NONE":
        return None
    if items[lv] != uses[lv] or items[lv, 1] != 1 or defs.block.get(lv) != defs.block[y]:
        return None         # lv read as a whole or its scores read again (they would change), or elsewhere
    return lv


def _item_reads(func: Function) -> Counter:
    """Per var, how many top-level bindings read it as ``v = var[i]`` (key ``var``), and per
    ``(var, i)`` how many read that item."""
    found: Counter = Counter()
    for block in func.body.blocks:
        for b in block.bindings:
            if isinstance(b, VarBinding) and isinstance(b.value, TupleGetItem) and isinstance(b.value.tuple_value, Var):
                found[b.value.tuple_value] += 1
                found[b.value.tuple_value, b.value.index] += 1
    return found


@function_pass(name="FuseClassifierNormalizer", opt_level=2, requires=("import", "optimize"), produces="optimize")
def fuse_classifier_normalizer(func, mod, ctx):
    """A Normalizer of a linear classifier's scores as the classifier's ``norm`` (module docstring)."""
    if not isinstance(func.body, SeqExpr):
        return func
    defs, uses = Definitions(func), count_uses(func.body)
    items = _item_reads(func)
    fused: dict[Var, Var] = {}      # y -> lv
    for block in func.body.blocks:
        for b in block.bindings:
            lv = _classifier_of(b.var, defs, uses, items) if isinstance(b, VarBinding) else None
            if lv is not None and lv not in fused.values():
                fused[b.var] = lv
    if not fused:
        return func
    norms = {lv: defs.calls[y].attrs["norm"] for y, lv in fused.items()}
    blocks = []
    for block in func.body.blocks:
        bindings = []
        for b in block.bindings:
            if b.var in norms:
                classifier = defs.calls[b.var]
                call = BlockBuilder().normalize(make_call("linear_classifier", *classifier.args,
                                                          **{**classifier.attrs, "norm": norms[b.var]}))
                bindings.append(VarBinding(b.var, call, span=b.span))
            elif b.var in fused:
                bindings.append(VarBinding(b.var, TupleGetItem(fused[b.var], 1), span=b.span))
            else:
                bindings.append(b)
        blocks.append(type(block)(tuple(bindings)))
    return func.replace(body=func.body.replace(blocks=tuple(blocks)))


__all__ = ["fuse_classifier_normalizer"]

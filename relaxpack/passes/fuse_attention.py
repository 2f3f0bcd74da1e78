"""FuseAttention: attention's scores, softmax and second product in one ``nn.attention`` call.

Exporters write scaled dot-product attention as a product, a few elementwise steps on its scores,
a softmax and a second product (after FoldPermuteMatmul has taken the head split's and merge's
transposes into the products)::

    s = R.permute_matmul(q, k, lhs_axes=.., rhs_axes=..)     # or R.matmul(q, k)
    s = R.multiply(s, c)            # steps, any of, in any order (up to MAX_STEPS):
    s = R.add(s, mask)              #   a scale (c one float: either operand order; or s / c),
    s = R.where(causal, s, fill)    #   a mask or bias added, a causal select (s either branch)
    p = R.nn.softmax(s, axis=-1)    # or R.nn.safe_softmax (torch's, dynamo's exports)
    out = R.permute_matmul(p, v, rhs_axes=.., out_axes=..)   # or R.matmul(p, v)

Rule ``fuse_attention`` (table :data:`RULES`) makes that ``R.nn.attention(q, k, v, *operands,
steps=...)`` when every intermediate is used only by the next op, the products take no
``out_dtype``, the scores are float32 or float64 and the softmax is over their last axis. The
kernel (``runtime/kernels/attention.py``) runs the same calls on small scores and blocks of query
rows on large ones, so a long sequence's scores are never held whole (docs/design-notes.md,
"Attention by blocks of query rows").
"""

from __future__ import annotations

from ..ir.expr import Call, Expr, Op
from ..ops.registry import make_call
from .core.infra import function_pass
from .core.rules import Match, Rule, RewriteTable, all_of, is_op, used_once, wildcard

#: the dtypes the kernel computes in
_DTYPES = ("float32", "float64")
_PRODUCTS = ("matmul", "permute_matmul")
#: the most elementwise steps between the scores and the softmax (exports write one to three)
MAX_STEPS = 6

_PROBS = is_op("nn.softmax", "nn.safe_softmax")(wildcard("scores"), name="probs", what="the second product's operand")


def _axes_of(call, name: str):
    """A product's permutation attribute (a plain matmul has none)."""
    return call.attrs.get(name) if call.op.name == "permute_matmul" else None


def _one_float(m: Match, expr: Expr):
    """The value of ``expr`` when it is a constant of one float, else None."""
    data = m.constant_of(expr)
    return float(data.reshape(-1)[0]) if data is not None and data.size == 1 and data.dtype.kind == "f" else None


def _step_of(m: Match, call: Call, chain: Expr, other: Expr, scores_first: bool):
    """The step ``call`` makes of the scores ``chain`` with its other operand(s), or None."""
    name = call.op.name
    if name in ("multiply", "divide"):
        factor = _one_float(m, other)
        return None if factor is None else ("scale", factor, name == "divide")
    if name == "add":
        return ("add", other)
    return ("where", call.args[0], other, scores_first)


def _walk(m: Match, expr: Expr, depth: int):
    """``(product, steps, vars)`` from the softmax's operand ``expr`` back to the scores' product,
    each step ``("scale", c, divide)``, ``("add", operand)`` or ``("where", cond, fill,
    scores_first)`` in the order they run, and the vars of the chain, the product's first; or
    the reason there is none."""
    value, uses = m.producer(expr)
    if not (isinstance(value, Call) and isinstance(value.op, Op)):
        return f"the scores {m.scope_name(expr)} are not computed by an op"
    if uses != 1:
        return f"the scores {m.scope_name(expr)} are used {'twice' if uses == 2 else f'{uses} times'}"
    if m.block_of(expr) != m.block_of(m.var("probs")):
        return f"the scores {m.scope_name(expr)} are bound in another block"
    name = value.op.name
    if name in _PRODUCTS:
        return value, [], [expr]
    if depth == MAX_STEPS:
        return f"more than {MAX_STEPS} steps lie between the scores' product and the softmax"
    args = value.args
    if name in ("multiply", "add"):
        orders = [(args[0], args[1], True), (args[1], args[0], True)]
    elif name == "divide":
        orders = [(args[0], args[1], True)]
    elif name == "where":
        orders = [(args[1], args[2], True), (args[2], args[1], False)]
    else:
        return f"the scores {m.scope_name(expr)} are R.{name}, not a product, a scale, an add or a where"
    reasons = []
    for chain, other, scores_first in orders:
        step = _step_of(m, value, chain, other, scores_first)
        if step is None:
            reasons.append(f"the scores {m.scope_name(expr)} are R.{name} by a value that is not one float constant")
            continue
        found = _walk(m, chain, depth + 1)
        if not isinstance(found, str):
            return found[0], [*found[1], step], [*found[2], expr]
        reasons.append(found)
    return "; or ".join(dict.fromkeys(reasons))


def _fusable(m: Match) -> str | None:
    """The chain reaches a product; float32/float64 operands of known rank >= 2, one dtype,
    products without out_dtype, the first's result and the second's left operand not permuted."""
    found = _walk(m, m["scores"], 0)
    if isinstance(found, str):
        return found
    scores, result = found[0], m.binding.value
    q, k, v = (x.struct_info for x in (*scores.args, m["v"]))
    dtypes = {x.dtype for x in (q, k, v)}
    if len(dtypes) != 1 or next(iter(dtypes)) not in _DTYPES or m.out_sinfo.dtype not in _DTYPES:
        return f"the operands are {', '.join(sorted(map(str, dtypes)))}, not one of {', '.join(_DTYPES)}"
    if any(x.ndim < 2 for x in (q, k, v)):
        return "an operand's rank is not known to be 2 or more"
    if scores.attrs.get("out_dtype") is not None or result.attrs.get("out_dtype") is not None:
        return "a product names its out_dtype"
    if _axes_of(scores, "out_axes") is not None:
        return "the scores are permuted"
    if _axes_of(result, "lhs_axes") is not None:
        return "the softmax is permuted before the second product"
    return None


def _last_axis(m: Match) -> str | None:
    ndim, axis = m.sinfo("probs").ndim, m["probs"].attrs["axis"]
    if ndim < 0 or axis not in (-1, ndim - 1):
        return f"the softmax is over axis {axis}, not the last"
    return None


def attention_call(m: Match):
    """The chain -> nn.attention(q, k, v, *operands, steps=...): each distinct operand once; the
    chain's bindings named among its sources."""
    scores, steps, chain = _walk(m, m["scores"], 0)
    for var in reversed(chain):
        m.consume(var)
    result = m.binding.value
    operands: list[Expr] = []

    def index(expr: Expr) -> int:
        for i, known in enumerate(operands):
            if known is expr:
                return 3 + i
        operands.append(expr)
        return 2 + len(operands)

    written = []
    for step in steps:
        if step[0] == "add":
            written.append(("add", index(step[1])))
        elif step[0] == "where":
            written.append(("where", index(step[1]), index(step[2]), step[3]))
        else:
            written.append(step)
    return make_call("nn.attention", *scores.args, m["v"], *operands, lhs_axes=_axes_of(scores, "lhs_axes"),
                     rhs_axes=_axes_of(scores, "rhs_axes"), v_axes=_axes_of(result, "rhs_axes"),
                     out_axes=_axes_of(result, "out_axes"), steps=tuple(written),
                     softmax=m["probs"].op.name.removeprefix("nn."))


RULES = RewriteTable("FuseAttention", [
    Rule("fuse_attention",
         is_op(*_PRODUCTS)(_PROBS, wildcard("v")),
         all_of(_last_axis, used_once("probs", "the softmax"), _fusable),
         attention_call),
])


@function_pass(name="FuseAttention", opt_level=2, requires=("import", "optimize"), produces="optimize")
def fuse_attention(func, mod, ctx):
    """Fuse attention's products and softmax into nn.attention: rule fuse_attention (see the module
    docstring)."""
    return RULES.apply(func)

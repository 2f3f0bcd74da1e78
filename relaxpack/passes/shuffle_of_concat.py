"""A channel shuffle of a concat is one interleaving concat.

ShuffleNet V2 joins its two branches and shuffles the channels: ``x = concat((a, b), axis=k)``,
then ``reshape(permute_dims(reshape(x, (.., g, C / g, ..)), swap of axes k, k + 1), x's shape)``
(channels last after ConvertLayout, ``k`` the last axis). With ``g`` parts of ``C / g`` each, the
shuffled channel ``j * g + i`` is ``part_i``'s channel ``j``: the concat of the parts with a
unit axis after ``k`` (``expand_dims``, a view), along that axis, reshaped to ``x``'s shape::

    cat = concat((a, b), axis=3)                                      # (n, h, w, 2c)
    s = reshape(permute_dims(reshape(cat, (n, h, w, 2, c)), (0, 1, 2, 4, 3)), (n, h, w, 2c))
    ->
    s = reshape(concat((expand_dims(a, 4), expand_dims(b, 4)), axis=4), (n, h, w, 2c))

One copy of the channels (strided by ``g``) instead of the concat's and the shuffle's (ShuffleNet's
16x24x24 pair 10.0 -> 6.0 us). The same values at the same positions (copies only). The dims before
``k`` of the first reshape need not be proved ``x``'s (the dynamo export's ``max(h0 - 1, 0) // 8 +
1`` for a conv's ``h``): the dims after ``k`` being ``x``'s, it keeps the flat index of the dims
before ``k`` (as the one reshape to the result's shape does), and that shape, its dims before ``k``
the first reshape's, holds as many values, so both fail together.
"""

from __future__ import annotations

from ..ir.expr import Tuple
from ..ops.registry import make_call
from .core.rules import Match, Rule, all_of, is_op, used_once, wildcard


def _parts(m: Match) -> tuple | str:
    """``(k, parts)``: the concat's axis and parts when the chain is a shuffle of it, or why not."""
    concat, first, swap = m["concat"], m["first"], m["swap"]
    parts = concat.args[0]
    x, mid, out = concat.struct_info.shape, first.struct_info.shape, m.out_sinfo.shape
    if not isinstance(parts, Tuple) or x is None or mid is None or out is None or len(mid) != len(x) + 1:
        return "the shapes are not known, or the first reshape does not split one axis"
    k = concat.attrs["axis"] % len(x)
    g, per = mid[k], mid[k + 1]
    same = lambda a, b: a == b or m.analyzer.prove_equal(a, b)      # noqa: E731
    if not (isinstance(g, int) and isinstance(per, int) and g * per == x[k] and len(parts.fields) == g):
        return f"the first reshape does not split the concat's axis into its {len(parts.fields)} parts"
    if not all(same(a, b) for a, b in zip(mid[k + 2:], x[k + 1:])) or len(out) != len(x) \
            or not all(same(a, b) for a, b in zip(out, mid[:k] + (x[k],) + mid[k + 2:])):
        return "the reshapes do not split the concat's axis and merge it back"
    axes = tuple(swap.attrs["axes"] or ())
    if axes != tuple(range(k)) + (k + 1, k) + tuple(range(k + 2, len(mid))):
        return f"the transpose does not swap the group axes {k} and {k + 1}"
    for part in parts.fields:
        shape = part.struct_info.shape
        if shape is None or shape[k] != per:
            return f"a part does not have {per} along the concat's axis"
    return k, parts.fields


def check(m: Match) -> str | None:
    result = _parts(m)
    return result if isinstance(result, str) else None


def rewrite(m: Match):
    k, parts = _parts(m)
    units = Tuple(tuple(make_call("expand_dims", p, axis=k + 1) for p in parts))
    return make_call("reshape", make_call("concat", units, axis=k + 1), m["shape"])


RULE = Rule(
    "shuffle_of_concat",
    is_op("reshape")(is_op("permute_dims")(is_op("reshape")(is_op("concat")(wildcard("parts"), name="concat",
                                                                            what="operand"),
                                                            wildcard(), name="first", what="operand"),
                                           name="swap", what="operand"), wildcard("shape"), name="outer"),
    all_of(used_once("concat", "the concat"), used_once("first", "the first reshape"),
           used_once("swap", "the transpose"), check),
    rewrite)

__all__ = ["RULE", "check", "rewrite"]

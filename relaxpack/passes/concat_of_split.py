"""ConcatOfSplit: a concat of all of a split's pieces in order reads the split tensor; a split
whose pieces but one go unread is a slice.

YOLOv8's C2f block splits a conv's output in two halves, runs a bottleneck on the second and
joins both halves and the bottleneck's result::

    s = split(x, 2, axis=1)
    y = bottleneck(s[1])
    cat = concat((s[0], s[1], y), axis=1)
    ->
    b = strided_slice(x, axes=(1,), begin=(c,), end=(2c,))
    y = bottleneck(b)
    cat = concat((x, y), axis=1)

The split copied both halves and the concat read three parts; now one half is copied and the
concat reads two (yolo_neck's eight C2f blocks: ~1.5 us each). The values are the same
(copies only).

Rules: ``concat_of_split_pieces`` (table :data:`RULES`) replaces a run of parts that are
``s[0], s[1], ..., s[k-1]`` of one ``split`` along the concat's axis (all of its pieces, in
order) by the split's input; then :func:`split_as_slice` makes a split that is read only
through ``s[i]`` of one ``i`` (its other pieces dead) a ``strided_slice`` of that piece, when
the split axis's length is known. Runs after ConvertLayout (a split is a layout region's
boundary either way). The table also makes a channel shuffle of a concat one interleaving concat
(:mod:`.shuffle_of_concat`).
"""

from __future__ import annotations

from collections import Counter

from ..ir.block_builder import BlockBuilder
from ..ir.expr import Call, SeqExpr, Tuple, TupleGetItem, Var, VarBinding
from ..ir.struct_info import TensorStructInfo, TupleStructInfo
from ..ir.well_formed import function_analyzer
from ..ops.registry import make_call
from ..runtime.kernels.manipulate import split_points
from .core.infra import function_pass
from .core.rules import Match, Rule, RewriteTable, is_op, wildcard
from . import shuffle_of_concat
from .dead_code_elimination import count_uses, eliminate_dead_bindings


def _rank(expr) -> int | None:
    sinfo = expr.struct_info
    return sinfo.ndim if isinstance(sinfo, TensorStructInfo) and sinfo.ndim is not None and sinfo.ndim >= 0 else None


def _piece(m: Match, part):
    """``(split call, its tuple var, index)`` when ``part`` is bound to an item of a split's result."""
    item, _ = m.producer(part)
    if not isinstance(item, TupleGetItem) or not isinstance(item.tuple_value, Var):
        return None
    split, _ = m.producer(item.tuple_value)
    if not isinstance(split, Call) or getattr(split.op, "name", None) != "split":
        return None
    return split, item.tuple_value, item.index


def _run_of_pieces(m: Match):
    """``(start, count, split)``: the first run of the concat's parts that are all of one split's
    pieces in order, along the concat's axis; None when there is none."""
    parts = m["parts"]
    if not isinstance(parts, Tuple):
        return None
    rank = _rank(m["concat"])
    if rank is None:
        return None
    axis = m["concat"].attrs["axis"] % rank
    pieces = [_piece(m, p) for p in parts.fields]
    for start, first in enumerate(pieces):
        if first is None or first[2] != 0:
            continue
        split, var, _ = first
        sinfo = var.struct_info
        count = len(sinfo.fields) if isinstance(sinfo, TupleStructInfo) else 0
        if count == 0 or start + count > len(pieces) or _rank(split.args[0]) != rank \
                or split.attrs["axis"] % rank != axis:
            continue
        if all(pieces[start + i] is not None and pieces[start + i][1] is var and pieces[start + i][2] == i
               for i in range(count)):
            return start, count, split
    return None


def concat_of_split_check(m: Match) -> str | None:
    found = _run_of_pieces(m)
    if found is None:
        return "no run of the concat's parts is all of one split's pieces in order along its axis"
    if found[1] == len(m["parts"].fields):
        return "the concat joins the split's pieces alone (it is the split's input)"
    return None


def concat_of_split(m: Match):
    """concat((..., s[0], ..., s[k-1], ...)) of s = split(x) along the concat's axis -> concat((..., x, ...))."""
    start, count, split = _run_of_pieces(m)
    fields = m["parts"].fields
    joined = Tuple(fields[:start] + (split.args[0],) + fields[start + count:])
    return make_call("concat", joined, **m["concat"].attrs)


RULES = RewriteTable("ConcatOfSplit", [
    Rule("concat_of_split_pieces", is_op("concat")(wildcard("parts"), name="concat"),
         concat_of_split_check, concat_of_split),
    shuffle_of_concat.RULE,
])


def _slice_of_piece(split: Call, index: int, builder: BlockBuilder):
    """``strided_slice`` of piece ``index`` of ``split`` (its struct info inferred by ``builder``),
    or None when the axis's length is unknown."""
    data = split.args[0]
    rank = _rank(data)
    sinfo = data.struct_info
    if rank is None or sinfo.shape is None:
        return None
    axis = split.attrs["axis"] % rank
    length = sinfo.shape[axis]
    if not isinstance(length, int):
        return None
    points = split_points(length, split.attrs["indices_or_sections"])
    return builder.normalize(make_call("strided_slice", data, axes=(axis,), begin=(points[index],),
                                       end=(points[index + 1],)))


def split_as_slice(func):
    """``func`` with each split read only through items of one index (and no other way) replaced
    by a strided_slice of that piece at those items' bindings."""
    uses = count_uses(func)
    items: dict = {}            # split var -> [item bindings]
    splits: dict = {}           # split var -> split call
    for binding in _bindings(func.body):
        value = binding.value
        if isinstance(value, Call) and getattr(value.op, "name", None) == "split":
            splits[binding.var] = value
        elif isinstance(value, TupleGetItem) and value.tuple_value in splits:
            items.setdefault(value.tuple_value, []).append(binding)
    replaced: dict = {}         # item binding var -> its new value
    builder = BlockBuilder(analyzer=function_analyzer(func))
    for var, bindings in items.items():
        read = Counter(b.value.index for b in bindings if uses[b.var])
        if len(read) != 1 or uses[var] != len(bindings) or len(splits[var].struct_info.fields) < 2:
            continue
        (index,) = read
        value = _slice_of_piece(splits[var], index, builder)
        if value is not None:
            replaced.update((b.var, value) for b in bindings if b.value.index == index)
    if not replaced:
        return func
    blocks = tuple(block.replace(bindings=tuple(
        b.replace(value=replaced[b.var]) if isinstance(b, VarBinding) and b.var in replaced else b
        for b in block.bindings)) for block in func.body.blocks)
    return eliminate_dead_bindings(func.replace(body=func.body.replace(blocks=blocks)))


def _bindings(seq: SeqExpr):
    for block in seq.blocks:
        for binding in block.bindings:
            if isinstance(binding, VarBinding):
                yield binding


@function_pass(name="ConcatOfSplit", opt_level=2, requires=("import", "optimize"), produces="optimize")
def concat_of_split_pass(func, mod, ctx):
    """Concats of all of a split's pieces read its input; splits read through one piece are slices."""
    return split_as_slice(eliminate_dead_bindings(RULES.apply(func)))


__all__ = ["RULES", "concat_of_split", "concat_of_split_check", "concat_of_split_pass", "split_as_slice"]

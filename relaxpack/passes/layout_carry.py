"""The layout rules that carry a channels-last region through ops that only move values (used by
:mod:`.layout_rules`' table): a split's pieces and a slice renumbered, ShuffleNet's channel
shuffle (looking through its two intermediates), a transpose to channels last of a region value
(the value itself), and a product transposed to channels first written channels last instead
(docs/design-notes.md, "The channel shuffle channels last" and "ConvNeXt's blocks channels last")."""

from __future__ import annotations

from ..ir.expr import Call, Expr, Op, ShapeExpr, TupleGetItem
from ..ir.struct_info import TensorStructInfo
from ..ops.registry import make_call

TO_NHWC = (0, 2, 3, 1)
TO_NCHW = (0, 3, 1, 2)


def rank4(expr: Expr) -> bool:
    sinfo = expr.struct_info
    return isinstance(sinfo, TensorStructInfo) and sinfo.ndim == 4


def _renumbered(axis: int) -> int:
    """A rank-4 axis of the channels-first value, numbered in the channels-last one."""
    return TO_NHWC.index(axis % 4)


def check_slice(call: Call, is_nhwc) -> str | None:
    """A ``strided_slice`` of a channels-last value slices the same axes renumbered (the
    TorchScript export of ShuffleNet's ``chunk`` after the channel shuffle)."""
    if not (rank4(call) and rank4(call.args[0]) and is_nhwc(call.args[0])):
        return "not a slice of a channels-last rank-4 value"
    return None


def rewrite_slice(call: Call, nhwc) -> Call:
    axes = call.attrs["axes"]
    axes = tuple(_renumbered(a) for a in ((axes,) if isinstance(axes, int) else axes))
    return make_call("strided_slice", nhwc(call.args[0]), **{**call.attrs, "axes": axes})


def check_split(call: Call, is_nhwc) -> str | None:
    """A ``split`` of a channels-last value splits along the renumbered axis when every use of its
    pieces' tuple is an item of it (``is_nhwc.items_only``: the items join the region; a tuple
    cannot be transposed out)."""
    data = call.args[0]
    if not (rank4(data) and is_nhwc(data)):
        return "the split data is not channels last (a split does not start a region)"
    items_only = getattr(is_nhwc, "items_only", None)
    if items_only is None or not items_only(call):
        return "the pieces' tuple is used other than by its items"
    return None


def rewrite_split(call: Call, nhwc) -> Call:
    return make_call("split", nhwc(call.args[0]), **{**call.attrs, "axis": _renumbered(call.attrs["axis"])})


def check_item(item: TupleGetItem, is_nhwc) -> str | None:
    return None if is_nhwc(item.tuple_value) else "not an item of a channels-last tuple"


def rewrite_item(item: TupleGetItem, nhwc) -> TupleGetItem:
    return TupleGetItem(nhwc(item.tuple_value), item.index)


def shuffle_parts(call: Call, values: dict, equal=None) -> tuple | None:
    """``(x, first, swap)`` when ``call`` is a channel shuffle of a rank-4 ``x`` of shape ``(N, C,
    h, w)``, ``reshape(swap := permute_dims(first := reshape(x, (N, g, C / g, H, W)), (0, 2, 1, 3,
    4)), (N, C, H, W))`` (dims ``equal(a, b)``: the same, or proved equal) with int channel counts;
    None otherwise. ``H, W`` need not be proved ``h, w``: with ``N`` and ``C`` kept, the first
    reshape keeps each pixel's flat index, channels first or last, and fails where the channels-last
    one fails (the dynamo export writes ``H`` as ``max(h0 - 1, 0) // 8 + 1`` of the input's ``h0``,
    equal to the convs' ``h`` only for ``h0 >= 1``)."""
    same = equal or (lambda a, b: a == b)
    if not (isinstance(call.op, Op) and call.op.name == "reshape" and rank4(call)):
        return None
    swap, first = call.args[0], None
    swap_value = values.get(swap)
    if _is_call(swap_value, "permute_dims") and tuple(swap_value.attrs["axes"] or ()) == (0, 2, 1, 3, 4):
        first = swap_value.args[0]
    first_value = values.get(first)
    if not _is_call(first_value, "reshape") or not rank4(first_value.args[0]):
        return None
    x = first_value.args[0]
    shape, mid, out = x.struct_info.shape, first.struct_info.shape, call.struct_info.shape
    if shape is None or mid is None or out is None or len(mid) != 5:
        return None
    n, c = shape[:2]
    g, per = mid[1], mid[2]
    if not all(isinstance(d, int) for d in (c, g, per)) or g * per != c:
        return None
    if not all(same(a, b) for a, b in zip((mid[0], *out), (n, n, c, mid[3], mid[4]))):
        return None
    return x, first, swap


def _is_call(value, name: str) -> bool:
    return isinstance(value, Call) and isinstance(value.op, Op) and value.op.name == name


def check_shuffle(call: Call, is_nhwc) -> str | None:
    """A channel shuffle (:func:`shuffle_parts`) of a channels-last value shuffles channels last:
    ``reshape -> (N, H, W, g, C / g)``, swap the last two axes, reshape back: one copy whose output
    ends in a short axis, where channels first the region transposed out and back in around it
    (ShuffleNet). Its two intermediates must be used only by the shuffle (they are dropped)."""
    parts = shuffle_parts(call, getattr(is_nhwc, "values", {}), getattr(is_nhwc, "equal", None))
    if parts is None:
        return "not a channel shuffle (reshape, swap of the group axes, reshape back)"
    x, first, swap = parts
    used_once = getattr(is_nhwc, "used_once", None)
    if used_once is None or not (used_once(first) and used_once(swap)):
        return "the shuffle's intermediates are used elsewhere"
    if not is_nhwc(x):
        return "the shuffled value is not channels last (a shuffle does not start a region)"
    return None


def rewrite_shuffle(call: Call, nhwc) -> Call:
    x, first, _ = shuffle_parts(call, nhwc.values, lambda a, b: True)   # (checked when planned)
    n, g, per, h, w = first.struct_info.shape
    grouped = make_call("reshape", nhwc(x), ShapeExpr((n, h, w, g, per)))
    swapped = make_call("permute_dims", grouped, axes=(0, 1, 2, 4, 3))
    n, c, h, w = call.struct_info.shape
    return make_call("reshape", swapped, ShapeExpr((n, h, w, c)))


def shuffle_operands(call: Call, values: dict) -> list:
    return [shuffle_parts(call, values, lambda a, b: True)[0]]     # (a chosen call: checked)


def shuffle_absorbs(call: Call, values: dict) -> tuple:
    return shuffle_parts(call, values, lambda a, b: True)[1:]


def check_transpose_in(call: Call, is_nhwc) -> str | None:
    """``permute_dims(v, (0, 2, 3, 1))`` of a channels-last ``v`` is ``v``'s channels-last value: it
    reads the region and ends it without a copy (ConvNeXt's transpose before its layer norm)."""
    if tuple(call.attrs.get("axes") or ()) != TO_NHWC or not is_nhwc(call.args[0]):
        return "not a transpose to channels last of a channels-last value"
    return None


def rewrite_transpose_in(call: Call, nhwc) -> Expr:
    return nhwc(call.args[0])


def check_product_out(call: Call, is_nhwc) -> str | None:
    """``permute_matmul(a, b, out_axes=(0, 3, 1, 2))`` of rank 4 multiplies channels last and
    transposes its result to channels first: without ``out_axes`` its result is the region's
    channels-last value, written contiguously (ConvNeXt's second pointwise Linear before its
    residual add). It reads its operands as they are (``reads_nhwc`` False)."""
    if tuple(call.attrs.get("out_axes") or ()) != TO_NCHW or not rank4(call):
        return "not a product whose result is transposed to channels first"
    return None


def rewrite_product_out(call: Call, nhwc) -> Call:
    return make_call("permute_matmul", *call.args, **{**call.attrs, "out_axes": None})

"""A GatherND whose indices are iotas (``range(0, n)`` along output axes) is a reshape.

torch.onnx exports the attention mask of transformers' SDPA path as
``mask[arange(batch)[:, None, None, None], arange(seq)[None, None, None, :]]``:
each index component is a ``range(0, D_k, 1)`` moved to an output axis by
``expand_dims`` and ``broadcast_to``, the components joined by ``concat`` on a
new last axis, then ``gather_nd``. ``out[i_0, ..., i_q-1] = data[i_a0, i_a1, ...]``
where component ``k`` varies along output axis ``a_k``: with ``a_0 < a_1 < ...``
that is ``data`` reshaped to ``out``'s rank (its dims at the ``a_k``, ones
elsewhere) and broadcast to ``out``'s shape. Six kernel calls (two ranges, two
broadcasts, a concat, the gather) become a view. A component whose range is not
provably as long as its data axis (llama's mask: ``range(0, past + seq)`` over an
``attention_mask`` of ``total_sequence`` columns) first takes that prefix of the
axis (``take(data, range, axis=k)``, which fails on an index past the end as
the gather does): one kernel call instead of six.

:func:`iota_axis` follows a value back to its range; :func:`gather_as_reshape`
is the check and the rewrite of SimplifyAlgebra's rule ``gather_nd_of_iotas``.
"""

from __future__ import annotations

from ..ir.expr import Call, PrimValue, ShapeExpr, Tuple
from ..ir.struct_info import TensorStructInfo
from ..ops.registry import make_call
from .core.rules import Match


def op_name(value) -> str | None:
    """The op name of a call (None for anything else)."""
    return getattr(value.op, "name", None) if isinstance(value, Call) else None


def _int(expr) -> object:
    return expr.value if isinstance(expr, PrimValue) and expr.dtype.startswith("int") else None


def iota_axis(m: Match, expr) -> tuple[int, object, object] | None:
    """``(axis, length, iota)`` when ``expr`` is ``range(0, length, 1)`` (the value ``iota``)
    with unit axes inserted (``expand_dims``) and broadcast along other axes (``broadcast_to``):
    the values vary along ``axis`` only and equal the index there; None otherwise."""
    value = m.producer(expr)[0]
    op = op_name(value)
    if op == "range":
        start, stop, step = (_int(a) for a in value.args)
        return (0, stop, expr) if start == 0 and step == 1 and stop is not None else None
    if op not in ("expand_dims", "broadcast_to"):
        return None
    inner = iota_axis(m, value.args[0])
    src, out = value.args[0].struct_info, value.struct_info
    if inner is None or not isinstance(src, TensorStructInfo) or not isinstance(out, TensorStructInfo) \
            or src.ndim < 0 or out.ndim < 0:
        return None
    axis, length, iota = inner
    if op == "expand_dims":
        axes = value.attrs["axis"]
        inserted = {a % out.ndim for a in ((axes,) if isinstance(axes, int) else axes)}
        kept = [a for a in range(out.ndim) if a not in inserted]
        return kept[axis], length, iota
    # broadcast_to aligns on the right; the iota's own axis must not be broadcast
    axis += out.ndim - src.ndim
    if out.shape is None or src.shape is None or not m.analyzer.prove_equal(out.shape[axis], length):
        return None
    return axis, length, iota


def _components(m: Match) -> list | str:
    """The index components: the concat's parts, each ``expand_dims(t, last axis)``."""
    parts = m.producer(m["parts"])[0]
    if not isinstance(parts, Tuple):
        return "the concat's operand is not a tuple"
    out = []
    for part in parts.fields:
        value = m.producer(part)[0]
        sinfo = part.struct_info
        if op_name(value) != "expand_dims" or not isinstance(sinfo, TensorStructInfo) or sinfo.ndim < 1:
            return "an index component is not expand_dims on the last axis"
        axes = value.attrs["axis"]
        axes = (axes,) if isinstance(axes, int) else tuple(axes)
        if tuple(a % sinfo.ndim for a in axes) != (sinfo.ndim - 1,):
            return "an index component is not expand_dims on the last axis"
        out.append(value.args[0])
    return out


def _plan(m: Match):
    """The data's axes' output axes, or why the gather is not one of iotas."""
    if m["gather"].attrs.get("batch_dims", 0) != 0:
        return "the gather has batch dims"
    if m["concat"].attrs.get("axis") not in (-1, m["concat"].struct_info.ndim - 1):
        return "the concat is not on the last axis"
    data, out = m.sinfo("data"), m.out_sinfo
    if not isinstance(data, TensorStructInfo) or data.shape is None or out.shape is None:
        return "the data's or the result's shape is not known"
    components = _components(m)
    if isinstance(components, str):
        return components
    if len(components) != data.ndim:
        return f"{len(components)} index components for data of rank {data.ndim}"
    axes, prefixes = [], []
    for k, component in enumerate(components):
        found = iota_axis(m, component)
        if found is None:
            return f"index component {k} is not a range(0, n) along one axis"
        axis, length, iota = found
        if not m.analyzer.prove_equal(out.shape[axis], length):
            return f"index component {k} does not run over data axis {k}"
        if not m.analyzer.prove_equal(length, data.shape[k]):
            prefixes.append((k, iota))      # the first `length` entries of axis k
        axes.append(axis)
    if axes != sorted(set(axes)):
        return f"the components vary along output axes {axes}, not increasing"
    return tuple(axes), prefixes


def gather_check(m: Match) -> str | None:
    plan = _plan(m)
    return plan if isinstance(plan, str) else None


def gather_as_reshape(m: Match):
    """gather_nd(data, concat(iotas)) -> broadcast_to(reshape(data, ...), out_shape), the data
    first cut to the iotas' lengths (``take`` of the range) where they may be shorter."""
    (axes, prefixes), out = _plan(m), m.out_sinfo
    data = m["data"]
    for k, iota in prefixes:
        data = make_call("take", data, iota, axis=k)
    shape = [1] * out.ndim
    for axis in axes:
        shape[axis] = out.shape[axis]
    y = make_call("reshape", data, ShapeExpr(tuple(shape)))
    if all(isinstance(a, int) and a == b or m.analyzer.prove_equal(a, b) for a, b in zip(shape, out.shape)):
        return y
    return make_call("broadcast_to", y, ShapeExpr(tuple(out.shape)))

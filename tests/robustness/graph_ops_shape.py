"""Generator emitters for reductions, data movement and shape arithmetic.

Reshape targets, slice ends, expand shapes and range limits are often
computed from ``Shape`` of a tensor at run time (Shape -> Gather -> Mul ->
Concat), the way exported models carry symbolic dims.
"""

from __future__ import annotations

import numpy as np

from .graph_ops import INT64_MAX, INT64_MIN, supported
from .strategies import AVOID, BOOL, ELEM, F32, I32, I64, Dim, GraphBuilder, Val, broadcast, derive, product

REDUCE = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
          "ReduceLogSumExp", "ReduceSumSquare")
INT_AMBIGUOUS = ("ReduceL2", "ReduceLogSumExp", "ReduceMean", "ReduceProd")   # rounding, overflow
EMPTY_OK = ("ReduceSum", "ReduceProd", "ReduceSumSquare", "ReduceL1", "ReduceL2")


def axes_as_input(b: GraphBuilder, op: str) -> bool:
    return b.opset >= 18 or (op == "ReduceSum" and b.opset >= 13)


def reduce(b: GraphBuilder) -> bool:
    op = b.draw.choice(REDUCE)
    # onnxruntime reduces a zero-sized input to a wrong shape (axes and keepdims ignored)
    # integer L2 / LogSumExp / Mean round differently in every implementation; NaN in Max / Min too
    v = b.pick(lambda v: (v.kind == "f" or op not in INT_AMBIGUOUS) and not v.has_zero()
               and not (v.special and op in ("ReduceMax", "ReduceMin"))
               and not (v.special and op == "ReduceLogSumExp")   # LSE([inf, nan]): NaN here, inf in onnxruntime
               and supported(b, op, v.dtype))
    if v is None:
        return False
    axes = b.draw.subset(range(v.rank))
    noop = not axes and axes_as_input(b, op) and b.draw.chance(0.3)
    reduced = [] if noop else (axes or list(range(v.rank)))
    if op not in EMPTY_OK and any(v.dims[a].lo == 0 for a in reduced):
        return False
    keep = b.draw.choice((1, 0))
    signed = [a - v.rank if b.draw.chance(0.3) else a for a in axes]
    args, attrs = [v.name], {"keepdims": keep}
    if axes_as_input(b, op):
        if signed or b.draw.chance(0.3):
            args.append(b.shape_array(signed))
        if noop:
            attrs["noop_with_empty_axes"] = 1
    elif signed:
        attrs["axes"] = signed
    dims = [Dim.of(1) if i in reduced else d for i, d in enumerate(v.dims) if keep or i not in reduced]
    exact = v.exact and (op in ("ReduceMax", "ReduceMin") or (v.kind == "i" and op in ("ReduceSum", "ReduceProd"))
                         or noop)
    b.emit(op, args, v.dtype, dims, exact, v.kind == "f" and (v.special or not exact), **attrs)
    return True


def argmax(b: GraphBuilder) -> bool:
    op = b.draw.choice(("ArgMax", "ArgMin"))
    v = b.pick(lambda v: v.kind in "fi" and v.rank >= 1 and v.exact and not v.special and not v.has_zero()
               and supported(b, op, v.dtype))
    if v is None:
        return False
    axis = b.draw.integer(-v.rank, v.rank - 1)
    if v.dims[axis].lo == 0:
        return False
    keep = b.draw.choice((1, 0))
    attrs = {"axis": axis, "keepdims": keep}
    if b.draw.chance(0.5):
        attrs["select_last_index"] = 1
    a = axis % v.rank
    dims = [Dim.of(1) if i == a else d for i, d in enumerate(v.dims) if keep or i != a]
    b.emit(op, [v.name], I64, dims, True, False, **attrs)
    return True


# ---------------------------------------------------------------- shape arithmetic
def dim_tensor(b: GraphBuilder, v: Val, index: int, shape_name: str | None = None) -> str:
    """A 1-element int64 tensor holding dim ``index`` of v, computed at run time."""
    if b.opset >= 15 and b.draw.chance(0.3):
        (out,) = b.node("Shape", [v.name], start=index, end=index + 1)
        return out
    shape_name = shape_name or b.node("Shape", [v.name])[0]
    if b.draw.chance(0.5):
        (out,) = b.node("Gather", [shape_name, b.shape_array([index])], axis=0)
        return out
    (out,) = b.node("Slice", [shape_name, b.shape_array([index]), b.shape_array([index + 1])])
    return out


def reshape(b: GraphBuilder) -> bool:
    v = b.pick()
    if v is None:
        return False
    # each target dim: (Dim, source dims of v it is the product of, constant factor)
    target = [(d, (i,), 1) for i, d in enumerate(v.dims)]
    for _ in range(b.draw.integer(1, 3)):
        move = b.draw.choice(("merge", "split", "insert", "drop"))
        if move == "merge" and len(target) >= 2:
            i = b.draw.integer(0, len(target) - 2)
            (d0, s0, c0), (d1, s1, c1) = target[i:i + 2]
            target[i:i + 2] = [(product([d0, d1]), s0 + s1, c0 * c1)]
        elif move == "split":
            cands = [i for i, (d, _, _) in enumerate(target) if d.static and d.label in (4, 6, 8, 9, 10, 12)]
            if cands:
                i = b.draw.choice(cands)
                n = target[i][0].label
                f = b.draw.choice([f for f in (2, 3) if n % f == 0])
                target[i:i + 1] = [(Dim.of(f), (), f), (Dim.of(n // f), (), n // f)]
        elif move == "insert":
            target.insert(b.draw.integer(0, len(target)), (Dim.of(1), (), 1))
        elif move == "drop":
            ones = [i for i, (d, _, _) in enumerate(target) if d.label == 1]
            if ones:
                del target[b.draw.choice(ones)]
    if b.draw.chance(0.15):
        target = [(product(v.dims), tuple(range(v.rank)), 1)]
    zero = any(d.lo == 0 for d, _, _ in target)
    if zero and b.opset < 14:
        return False
    dynamic = [j for j, (d, _, _) in enumerate(target) if not d.static]
    infer = None
    if not zero and target and b.draw.chance(0.6):
        cands = dynamic or list(range(len(target)))
        infer = b.draw.choice(cands) if cands else None
    parts, shape_name = [], None
    for j, (d, srcs, c) in enumerate(target):
        if j == infer:
            parts.append(np.array([-1], np.int64))
        elif d.static:
            parts.append(np.array([d.label], np.int64))
        elif not zero and srcs == (j,) and c == 1 and b.draw.chance(0.5):
            parts.append(np.array([0], np.int64))
        else:
            if shape_name is None:
                (shape_name,) = b.node("Shape", [v.name])
            terms = [dim_tensor(b, v, i, shape_name) for i in srcs if not v.dims[i].static]
            c *= int(np.prod([v.dims[i].label for i in srcs if v.dims[i].static], dtype=np.int64))
            if c != 1:
                terms.append(b.shape_array([c]))
            out = terms[0]
            for t in terms[1:]:
                (out,) = b.node("Mul", [out, t])
            parts.append(out)
    if all(isinstance(p, np.ndarray) for p in parts):
        shape = b.shape_array(np.concatenate(parts) if parts else np.zeros(0, np.int64))
    else:
        names = [b.shape_array(p) if isinstance(p, np.ndarray) else p for p in parts]
        (shape,) = b.node("Concat", names, axis=0)
    attrs = {"allowzero": 1} if zero else {}
    b.emit("Reshape", [v.name, shape], v.dtype, [d for d, _, _ in target], v.exact, v.special, **attrs)
    return True


def flatten(b: GraphBuilder) -> bool:
    v = b.pick()
    if v is None:
        return False
    axis = b.draw.integer(-v.rank, v.rank)
    a = axis + v.rank if axis < 0 else axis
    b.emit("Flatten", [v.name], v.dtype, [product(v.dims[:a]), product(v.dims[a:])], v.exact, v.special,
           axis=axis)
    return True


def transpose(b: GraphBuilder) -> bool:
    v = b.pick(lambda v: v.rank >= 2)
    if v is None:
        return False
    if b.draw.chance(0.2):
        b.emit("Transpose", [v.name], v.dtype, v.dims[::-1], v.exact, v.special)
        return True
    perm = list(range(v.rank))
    for i in range(len(perm) - 1, 0, -1):
        j = b.draw.integer(0, i)
        perm[i], perm[j] = perm[j], perm[i]
    b.emit("Transpose", [v.name], v.dtype, [v.dims[p] for p in perm], v.exact, v.special, perm=perm)
    return True


def squeeze(b: GraphBuilder) -> bool:
    v = b.pick(lambda v: any(d.label == 1 for d in v.dims))
    if v is None:
        return False
    ones = [i for i, d in enumerate(v.dims) if d.label == 1]
    if all(d.static for d in v.dims) and b.draw.chance(0.25):
        b.emit("Squeeze", [v.name], v.dtype, [d for d in v.dims if d.label != 1], v.exact, v.special)
        return True
    axes = b.draw.subset(ones, lo=1)
    signed = [a - v.rank if b.draw.chance(0.3) else a for a in axes]
    dims = [d for i, d in enumerate(v.dims) if i not in axes]
    if b.opset >= 13:
        b.emit("Squeeze", [v.name, b.shape_array(signed)], v.dtype, dims, v.exact, v.special)
    else:
        b.emit("Squeeze", [v.name], v.dtype, dims, v.exact, v.special, axes=signed)
    return True


def unsqueeze(b: GraphBuilder) -> bool:
    v = b.pick()
    if v is None:
        return False
    out_rank = v.rank + b.draw.integer(1, 2)
    axes = b.draw.subset(range(out_rank), lo=out_rank - v.rank)[: out_rank - v.rank]
    if len(axes) != out_rank - v.rank:
        return False
    rest = iter(v.dims)
    dims = [Dim.of(1) if i in axes else next(rest) for i in range(out_rank)]
    signed = [a - out_rank if b.draw.chance(0.3) else a for a in axes]
    if b.opset >= 13:
        b.emit("Unsqueeze", [v.name, b.shape_array(signed)], v.dtype, dims, v.exact, v.special)
    else:
        b.emit("Unsqueeze", [v.name], v.dtype, dims, v.exact, v.special, axes=signed)
    return True


def _slice_len(n, start, end, step):
    """ONNX Slice semantics (not Python's: a negative start below -n with a negative step clamps to 0)."""
    if n == 0:
        return 0
    start, end = start + n if start < 0 else start, end + n if end < 0 else end
    if step > 0:
        start, end = min(max(start, 0), n), min(max(end, 0), n)
    else:
        start, end = min(max(start, 0), n - 1), min(max(end, -1), n - 1)
    return max(0, -(-(end - start) // step))


def slice_(b: GraphBuilder) -> bool:
    v = b.pick(lambda v: v.rank >= 1)
    if v is None:
        return False
    axes = b.draw.subset(range(v.rank), lo=1)[:2]
    idx_dtype = b.draw.choice((I64, I64, I32))
    starts, ends, steps, dims = [], [], [], list(v.dims)
    dynamic_end = None
    for a in axes:
        d = v.dims[a]
        step = b.draw.choice((1, 1, 2, -1, -2, 3))
        edge = d.hi + 2
        start = b.draw.choice((0, b.draw.integer(-edge, edge), INT64_MAX if step < 0 else INT64_MIN))
        end = b.draw.choice((b.draw.integer(-edge, edge), INT64_MIN if step < 0 else INT64_MAX))
        if idx_dtype == I32:
            start, end = (int(np.clip(x, -2 ** 31, 2 ** 31 - 1)) for x in (start, end))
        if (dynamic_end is None and not d.static and step > 0 and idx_dtype == I64
                and "symbolic_slice_bounds" not in AVOID and b.draw.chance(0.5)):
            offset = b.draw.choice((0, -1, -2))
            dynamic_end = (len(ends), a, offset)
            dims[a] = derive(f"slice_to_end{(start, offset, step)}", (d,),
                             lambda n, s, o, st: _slice_len(n, s, n + o, st), start, offset, step)
        else:
            dims[a] = derive(f"slice{(start, end, step)}", (d,), _slice_len, start, end, step)
        starts.append(start)
        ends.append(end)
        steps.append(step)
    signed = [a - v.rank if b.draw.chance(0.3) else a for a in axes]
    ends_name = b.const(np.array(ends, idx_dtype))
    if dynamic_end is not None:
        pos, a, offset = dynamic_end
        size = dim_tensor(b, v, a)
        if offset:
            (size,) = b.node("Add", [size, b.shape_array([offset])])
        pieces = []
        if pos:
            pieces.append(b.shape_array(ends[:pos]))
        pieces.append(size)
        if pos + 1 < len(ends):
            pieces.append(b.shape_array(ends[pos + 1:]))
        (ends_name,) = b.node("Concat", pieces, axis=0) if len(pieces) > 1 else (size,)
    args = [v.name, b.const(np.array(starts, idx_dtype)), ends_name]
    in_order = signed == list(range(len(axes)))
    if not (in_order and all(s == 1 for s in steps) and b.draw.chance(0.5)):
        args.append(b.const(np.array(signed, idx_dtype)))
        if any(s != 1 for s in steps) or b.draw.chance(0.5):
            args.append(b.const(np.array(steps, idx_dtype)))
    b.emit("Slice", args, v.dtype, dims, v.exact, v.special)
    return True


def concat(b: GraphBuilder) -> bool:
    v = b.pick(lambda v: v.rank >= 1)
    if v is None:
        return False
    axis = b.draw.integer(-v.rank, v.rank - 1)
    a = axis % v.rank
    others = []
    for _ in range(b.draw.integer(1, 2)):
        w = b.pick(lambda w: w.dtype == v.dtype and w.rank == v.rank
                   and all(x == y for i, (x, y) in enumerate(zip(w.dims, v.dims)) if i != a))
        if w is None or b.draw.chance(0.5):
            dims = list(v.dims)
            dims[a] = b.new_dim() if b.draw.chance(0.7) else v.dims[a]
            if all(b.declarable(d) for d in dims):
                w = b.tensor(dims, v.dtype)
        if w is None:
            w = b.same_shape(v)
        if w is None:
            return False
        others.append(w)
    args = [v] + others
    if b.draw.chance(0.5):
        args.reverse()
    total = args[0].dims[a]
    for w in args[1:]:
        total = derive("add", (total, w.dims[a]), lambda x, y: x + y)
    dims = list(v.dims)
    dims[a] = total
    b.emit("Concat", [w.name for w in args], v.dtype, dims, all(w.exact for w in args),
           any(w.special for w in args), axis=axis)
    return True


def gather(b: GraphBuilder) -> bool:
    v = b.pick(lambda v: v.rank >= 1)
    if v is None:
        return False
    axis = b.draw.integer(-v.rank, v.rank - 1)
    a = axis % v.rank
    lo = v.dims[a].lo
    idx_dtype = b.draw.choice((I64, I32))
    idx_dims = [Dim.of(b.draw.integer(1, 3)) for _ in range(b.draw.integer(0, 2))]
    if lo == 0:
        if not idx_dims:
            return False
        idx_dims[0] = Dim.of(0)
    if lo > 0 and b.draw.chance(0.3) and b.parent is None:
        idx = b.root.new_input(idx_dims, idx_dtype, data=f"index:{lo}")
    else:
        array = b.root.rng.integers(-lo, max(lo, 1), [d.label for d in idx_dims]).astype(idx_dtype)
        idx = Val(b.const(array), idx_dtype, tuple(idx_dims))
    dims = list(v.dims[:a]) + list(idx.dims) + list(v.dims[a + 1:])
    b.emit("Gather", [v.name, idx.name], v.dtype, dims, v.exact, v.special, axis=axis)
    return True


def expand(b: GraphBuilder) -> bool:
    v = b.pick()
    if v is None:
        return False
    w = b.pick(lambda w: broadcast(v.dims, w.dims) is not None and w is not v) if b.draw.chance(0.3) else None
    if w is not None:   # expand to another tensor's (run-time) shape
        (shape,) = b.node("Shape", [w.name])
        dims = broadcast(v.dims, w.dims)
    else:
        lead = [Dim.of(b.draw.integer(1, 3)) for _ in range(b.draw.integer(0, 1))]
        target = lead + [Dim.of(b.draw.integer(1, 3)) if d.label == 1 and b.draw.chance(0.6) else Dim.of(1)
                         for d in v.dims]
        dims = broadcast(v.dims, target)
        shape = b.shape_array([d.label for d in target])
    b.emit("Expand", [v.name, shape], v.dtype, dims, v.exact, v.special)
    return True


def tile(b: GraphBuilder) -> bool:
    v = b.pick(lambda v: v.rank >= 1)
    if v is None:
        return False
    reps = [b.draw.choice((1, 2, 3, 0)) if b.draw.chance(0.5) else 1 for _ in v.dims]
    dims = [derive(f"tile{r}", (d,), lambda x, r: x * r, r) for d, r in zip(v.dims, reps)]
    b.emit("Tile", [v.name, b.shape_array(reps)], v.dtype, dims, v.exact, v.special)
    return True


def pad(b: GraphBuilder) -> bool:
    v = b.pick(lambda v: v.rank >= 1 and v.kind in "fi")
    if v is None:
        return False
    mode = b.draw.choice(("constant", "constant", "reflect", "edge"))
    if mode == "reflect" and any(d.lo < 2 for d in v.dims):
        mode = "edge"   # onnxruntime's reflect wants every axis at least 2 long
    pads = [[0, 0] for _ in v.dims]   # per axis (begin, end); ONNX lists all begins, then all ends
    for d, pair in zip(v.dims, pads):
        for side in range(2):
            p = b.draw.integer(0, 2) if b.draw.chance(0.6) else 0
            if mode == "constant" and d.lo >= 3 and b.draw.chance(0.15):
                p = -1
            if mode == "reflect":
                p = min(p, d.lo - 1)
            if mode == "edge" and d.lo == 0:
                p = 0
            pair[side] = p
    pads = [p for p, _ in pads] + [p for _, p in pads]
    r = v.rank
    dims = [derive(f"pad{(pads[i], pads[i + r])}", (d,), lambda x, p0, p1: x + p0 + p1, pads[i], pads[i + r])
            for i, d in enumerate(v.dims)]
    args = [v.name, b.shape_array(pads)]
    if mode == "constant" and b.draw.chance(0.5):
        args.append(b.const(np.array(b.draw.choice((0, 1, -2)), v.dtype)))
    b.emit("Pad", args, v.dtype, dims, v.exact, v.special, mode=mode)
    return True


def split(b: GraphBuilder) -> bool:
    v = b.pick(lambda v: any(d.static and d.label >= 1 for d in v.dims))
    if v is None:
        return False
    axis = b.draw.choice([i for i, d in enumerate(v.dims) if d.static and d.label >= 1])
    n = v.dims[axis].label
    count = b.draw.integer(1, 3)
    if b.opset >= 18 and b.draw.chance(0.3) and count <= n:
        chunk = -(-n // count)
        sizes = [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])
        if len(sizes) != count:
            return False
        args, attrs = [v.name], {"num_outputs": count, "axis": axis}
    else:
        cuts = sorted(b.draw.integer(0, n) for _ in range(count - 1))
        sizes = [y - x for x, y in zip([0] + cuts, cuts + [n])]
        args, attrs = [v.name, b.shape_array(sizes)], {"axis": axis}
        if b.opset < 13:
            args, attrs = [v.name], {"axis": axis, "split": sizes}
    outs = b.node("Split", args, n_out=len(sizes), **attrs)
    for name, size in zip(outs, sizes):
        dims = list(v.dims)
        dims[axis] = Dim.of(size)
        b.values.append(Val(name, v.dtype, tuple(dims), v.exact, v.special))
    return True


def shape_of(b: GraphBuilder) -> bool:
    """Shape / Size / ConstantOfShape / Range: shape values as data."""
    v = b.pick()
    if v is None:
        return False
    what = b.draw.choice(("Shape", "Size", "ConstantOfShape", "Range"))
    if what == "Shape":
        start, end = 0, v.rank
        attrs = {}
        if b.opset >= 15 and b.draw.chance(0.4):
            start, end = sorted(b.draw.integer(-v.rank, v.rank) for _ in range(2))
            attrs = {"start": start, "end": end}
        length = len(range(v.rank)[slice(start, end)])
        b.emit("Shape", [v.name], I64, [Dim.of(length)], **attrs)
    elif what == "Size":
        b.emit("Size", [v.name], I64, [])
    elif what == "ConstantOfShape":
        (shape,) = b.node("Shape", [v.name])
        dtype = np.dtype(b.draw.choice((F32, I64, I32, BOOL)))
        from onnx import numpy_helper
        fill = numpy_helper.from_array(np.array([b.draw.choice((0, 1, 3))], dtype), "value")
        b.emit("ConstantOfShape", [shape], dtype, v.dims, value=fill)
    else:
        if v.rank == 0:
            return False
        i = b.draw.integer(0, v.rank - 1)
        (shape,) = b.node("Shape", [v.name])
        (limit,) = b.node("Gather", [shape, b.const(np.array(i, np.int64))], axis=0)
        start, delta = b.draw.choice((0, 1, -1)), b.draw.choice((1, 2))
        length = derive(f"range{(start, delta)}", (v.dims[i],), lambda n, s, dd: max(0, -(-(n - s) // dd)),
                        start, delta)
        b.emit("Range", [b.const(np.array(start, np.int64)), limit, b.const(np.array(delta, np.int64))],
               I64, [length])
    return True


__all__ = ["reduce", "argmax", "reshape", "flatten", "transpose", "squeeze", "unsqueeze", "slice_", "concat",
           "gather", "expand", "tile", "pad", "split", "shape_of", "ELEM"]

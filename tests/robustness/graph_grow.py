"""Growing a graph: the op families and their weights, and ``If``.

``If`` takes a constant condition (relaxpack converts only the taken
branch), a bool graph input, a condition on a symbolic dim (the two runs
may take different branches) or one computed from data. Branch outputs may
differ in dims only when the generator knows which branch each run takes.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from . import graph_ops as E
from . import graph_ops_shape as S
from .graph_ops_patterns import PATTERN_FAMILIES
from .strategies import AVOID, PATTERNS, value_info, BOOL, ELEM, F32, I64, RUNS, Dim, GraphBuilder, InputSpec, Val

FAMILIES = [  # (emitter, weight)
    (E.unary, 4), (E.binary, 5), (E.variadic, 1), (E.where, 1), (E.cast, 1), (E.clip, 1), (E.softmax, 1),
    (E.matmul, 2), (E.gemm, 1), (E.conv, 2), (E.pool, 3),
    (S.reduce, 2), (S.argmax, 1), (S.reshape, 3), (S.flatten, 1), (S.transpose, 1), (S.squeeze, 1),
    (S.unsqueeze, 1), (S.slice_, 2), (S.concat, 2), (S.gather, 2), (S.expand, 1), (S.tile, 1), (S.pad, 1),
    (S.split, 1), (S.shape_of, 2), ("if", 2),
    (E.normalization, 1), (E.cumsum, 1), (E.trilu, 1), (E.topk, 1), (E.gather_elements, 1), (E.nonzero, 1),
    (E.einsum, 1),
]
BRANCH_FAMILIES = [(E.unary, 3), (E.binary, 3), (E.cast, 1), (S.reshape, 1), (S.transpose, 1), (S.slice_, 1),
                   (S.reduce, 1), (S.concat, 1), (S.shape_of, 1), ("if", 1)]
_TABLES = {}


def _table(families):
    key = families if isinstance(families, tuple) else id(families)
    if key not in _TABLES:
        _TABLES[key] = [f for f, w in families for _ in range(w)]
    return _TABLES[key]


def pattern_families() -> list:
    """The pattern families switched on (strategies.PATTERNS), weight 1 each."""
    return [(PATTERN_FAMILIES[name], 1) for name in sorted(PATTERNS)]


def grow(b: GraphBuilder, families=None) -> bool:
    """Add one op (a few tries at different families); with patterns on, a third of the tries
    at the graph's top level are at one of them."""
    if families is None and PATTERNS and b.parent is None and b.draw.chance(0.33):
        families = pattern_families()
    table = _table(tuple(families) if families is not None else (BRANCH_FAMILIES if b.parent else FAMILIES))
    for _ in range(4):
        family = b.draw.choice(table)
        if family == "if":
            if b.depth < 2 and if_(b):
                return True
        elif family(b):
            return True
    return False


# ---------------------------------------------------------------- If
def _condition(b: GraphBuilder) -> tuple[str, tuple[bool, ...] | None]:
    """The condition's name and, when known, its value in each run."""
    kind = b.draw.choice(("const", "input", "dim", "data"))
    if kind == "const" or (kind == "input" and b.parent is not None):
        value = b.draw.chance(0.5)
        return b.const(np.array(value) if b.draw.chance(0.7) else np.array([value])), (value,) * RUNS
    if kind == "input":
        values = tuple(b.draw.chance(0.5) for _ in range(RUNS))
        val = b.root.new_input((), BOOL, data="cond:" + "".join("TF"[not x] for x in values))
        return val.name, values
    if kind == "dim":
        v = b.pick(lambda v: any(not d.static for d in v.dims))
        if v is not None:
            i = b.draw.choice([i for i, d in enumerate(v.dims) if not d.static])
            c = b.draw.integer(0, 4)
            size = S.dim_tensor(b, v, i)
            (cond,) = b.node("Greater", [size, b.shape_array([c])])
            return cond, tuple(x > c for x in v.dims[i].values)
    v = b.pick(lambda v: v.exact and not v.special and (v.kind == "i" or (v.kind == "f" and not v.has_zero())))
    if v is None:
        return _condition_const(b)
    op = "ReduceSum" if v.kind == "i" else "ReduceMax"
    (r,) = b.node(op, [v.name], keepdims=0)
    zero = b.const(np.array(0, v.dtype))
    (cond,) = b.node(b.draw.choice(("Greater", "Less")), [r, zero])
    return cond, None


def _condition_const(b):
    value = b.draw.chance(0.5)
    return b.const(np.array(value)), (value,) * RUNS


def _branch(b: GraphBuilder, want: list[np.dtype] | None) -> tuple[onnx.GraphProto, list[Val]] | None:
    sub = GraphBuilder(b.draw, b.opset, parent=b)
    outer = len(sub.values)
    for _ in range(b.draw.integer(0, 2)):
        grow(sub)
    made = sub.values[outer:]
    outputs = []
    for i in range(len(want) if want else b.draw.integer(1, 2)):
        dtype = want[i] if want else None
        pool = [v for v in (made if made and b.draw.chance(0.7) else sub.values)
                if dtype is None or v.dtype == dtype]
        if not pool:
            pool = [v for v in sub.values if v.dtype == dtype]
        if not pool:
            return None
        v = b.draw.choice(pool)
        out = sub.emit("Identity", [v.name], v.dtype, v.dims, v.exact, v.special)
        outputs.append(out)
    graph = helper.make_graph(sub.nodes, b.name("branch"), [],
                              [value_info(v, b.root) for v in outputs])
    return graph, outputs


def if_(b: GraphBuilder) -> bool:
    cond, known = _condition(b)
    then = _branch(b, None)
    if then is None:
        return False
    other = _branch(b, [v.dtype for v in then[1]])
    if other is None:
        return False
    outs = b.node("If", [cond], n_out=len(then[1]), then_branch=then[0], else_branch=other[0])
    results = []
    for name, t, e in zip(outs, then[1], other[1]):
        dims = list(t.dims)
        if t.dims != e.dims:
            if known is None or t.rank != e.rank or "if_branch_dims_differ" in AVOID:
                b.nodes.pop()   # dims differ and the branch each run takes is unknown: no If
                return False
            for i, (dt, de) in enumerate(zip(t.dims, e.dims)):
                if dt != de:
                    values = tuple((dt if known[r] else de).values[r] for r in range(RUNS))
                    dims[i] = Dim(f"if{b.root.counter}_{i}", values)
        results.append(Val(name, t.dtype, tuple(dims), t.exact and e.exact, t.special or e.special))
    b.values.extend(results)
    return True


__all__ = ["grow", "FAMILIES", "if_", "F32", "I64", "InputSpec"]

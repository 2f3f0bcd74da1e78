"""Random valid ONNX graphs for differential testing.

>>> from hypothesis import given
>>> @given(graph_cases())                                   # doctest: +SKIP
... def test(case): ...
>>> case = random_case(seed=0, index=7)                     # the campaign's case 7 of seed 0

A graph is grown op by op from a pool of values whose dims are tracked
concretely for every run (``RUNS`` assignments of the symbolic dims, all
run by one build). A dim is a label and its value per run: static dims are
labelled by their value, the graph's symbols (``n``, ``m``) by their name,
and dims derived from symbolic ones by a description of how (``(n*3)``),
so two dims broadcast only when the labels say they are equal, as in any
exported model. Every choice goes through a :class:`Draw`, so Hypothesis
can shrink a failing graph, and the long campaign replays case ``i`` of a
seed from ``random.Random``.

Values also carry two facts that keep the comparison honest: ``exact``
(every correct implementation computes the same bits: inputs, data
movement, comparisons of exact values, float32 add/sub/mul/div) and
``special`` (may hold NaN or Inf). Discontinuous ops (Floor, comparisons,
ArgMax, casts to integers, data conditions of If) only take exact values,
so a rounding difference upstream cannot flip their result.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import helper, numpy_helper

RUNS = 2                      # dim assignments run by one build
#: Valid ONNX that relaxpack rejects with a clear error today (each has a test in
#: test_regressions.py). The CI property avoids them; the campaign's --all-features
#: makes them too and counts the rejections apart.
KNOWN_LIMITATIONS: set[str] = set()
#: Wrong answers relaxpack gives today (each has a strict-xfail test in test_regressions.py).
KNOWN_BUGS: set[str] = set()
AVOID: set[str] = KNOWN_LIMITATIONS | KNOWN_BUGS
#: Pattern families switched on (graph_ops_patterns.PATTERN_FAMILIES: the shapes -O2's rewrites and
#: kernels want); off by default so the default campaign's cases stay what they were. The campaign's
#: --patterns fills it; a graph then starts with one of them and grows with them among the others.
PATTERNS: set[str] = set()
SYMBOLS = ("n", "m")
OPSETS = (17, 13, 18, 21)
F32, F16, I32, I64, BOOL = (np.dtype(t) for t in ("float32", "float16", "int32", "int64", "bool"))
FLOATS, INTS = (F32, F16), (I32, I64)
ELEM = {F32: onnx.TensorProto.FLOAT, F16: onnx.TensorProto.FLOAT16, I32: onnx.TensorProto.INT32,
        I64: onnx.TensorProto.INT64, BOOL: onnx.TensorProto.BOOL}


# ---------------------------------------------------------------- choices
class Draw:
    """Where every random choice comes from."""

    def integer(self, lo: int, hi: int) -> int:
        raise NotImplementedError

    def choice(self, options: Sequence) -> Any:
        return options[self.integer(0, len(options) - 1)]

    def chance(self, p: float) -> bool:
        """True with probability ``p``; shrinks towards False."""
        return self.integer(0, 999) >= round((1 - p) * 1000)

    def subset(self, items: Sequence, lo: int = 0) -> list:
        picked = [x for x in items if self.chance(0.5)]
        return picked if len(picked) >= lo else list(items[:lo])


class RandomDraw(Draw):
    def __init__(self, rng: random.Random):
        self.rng = rng

    def integer(self, lo, hi):
        return self.rng.randint(lo, hi)


class HypothesisDraw(Draw):
    def __init__(self, draw_fn):
        self.draw_fn = draw_fn   # st.composite's draw

    def integer(self, lo, hi):
        return self.draw_fn(st.integers(lo, hi))


# ---------------------------------------------------------------- dims and values
@dataclass(frozen=True)
class Dim:
    label: int | str
    values: tuple[int, ...]

    @staticmethod
    def of(n: int) -> "Dim":
        return Dim(int(n), (int(n),) * RUNS)

    @property
    def static(self) -> bool:
        return isinstance(self.label, int)

    @property
    def lo(self) -> int:
        return min(self.values)

    @property
    def hi(self) -> int:
        return max(self.values)

    def __repr__(self):
        return str(self.label)


def monomial(d: Dim, symbols) -> bool:
    """A product of static dims and the graph's own symbols (what relaxpack can divide by)."""
    if d.static:
        return True
    tokens = [t for t in re.split(r"[(),]", str(d.label)) if t and t != "mul"]
    return str(d.label).startswith("mul(") and all(t.isdigit() or t in symbols for t in tokens) \
        or d.label in symbols


def derive(kind: str, dims: Sequence[Dim], fn, *extra) -> Dim:
    """A dim computed from ``dims``: static if they all are."""
    values = tuple(int(fn(*[d.values[r] for d in dims], *extra)) for r in range(RUNS))
    if all(d.static for d in dims):
        return Dim(values[0], values)
    return Dim(f"{kind}({','.join(str(d.label) for d in dims)}{''.join(f',{e}' for e in extra)})", values)


def product(dims: Sequence[Dim]) -> Dim:
    if not dims:
        return Dim.of(1)
    out = dims[0]
    for d in dims[1:]:
        out = derive("mul", (out, d), lambda a, b: a * b)
    return out


def broadcast(a: Sequence[Dim], b: Sequence[Dim]) -> tuple[Dim, ...] | None:
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else Dim.of(1)
        y = b[-i] if i <= len(b) else Dim.of(1)
        if x == y or y.label == 1:
            out.append(x)
        elif x.label == 1:
            out.append(y)
        else:
            return None
    return tuple(reversed(out))


@dataclass
class Val:
    name: str
    dtype: np.dtype
    dims: tuple[Dim, ...]
    exact: bool = True
    special: bool = False

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def kind(self) -> str:
        return "f" if self.dtype.kind == "f" else "b" if self.dtype == BOOL else "i"

    def has_zero(self) -> bool:
        return any(d.lo == 0 for d in self.dims)


@dataclass
class InputSpec:
    val: Val
    declared: list            # per dim: int, dim_param str or None
    data: str = "normal"      # normal | special | index:<lo> | bool | positive


@dataclass
class GraphCase:
    """A generated model, its feeds for each run, and how to build it."""
    model: onnx.ModelProto
    feeds: list[dict[str, np.ndarray]]
    dims: dict | None
    ops: list[str]
    expected_shapes: dict[str, list[tuple[int, ...]]] = field(default_factory=dict)
    #: any float16 in the graph: onnxruntime runs fp16 ops that lack fp16 kernels in float32 and drops
    #: the casts between them, so even float32 outputs carry fp16 rounding differences
    fp16: bool = False

    def describe(self) -> str:
        return (f"opset {self.model.opset_import[0].version}, ops {self.ops}, dims {self.dims}, "
                f"feeds {[{k: (v.dtype.name, v.shape) for k, v in f.items()} for f in self.feeds]}")


# ---------------------------------------------------------------- the builder
class GraphBuilder:
    """Grows one graph (or an If branch: ``parent`` set) from a pool of values."""

    def __init__(self, draw: Draw, opset: int, parent: "GraphBuilder | None" = None):
        self.draw = draw
        self.opset = opset
        self.parent = parent
        self.root: GraphBuilder = parent.root if parent else self
        self.nodes: list[onnx.NodeProto] = []
        self.values: list[Val] = list(parent.values) if parent else []
        self.depth = parent.depth + 1 if parent else 0
        if parent is None:
            self.counter = 0
            self.inputs: list[InputSpec] = []
            self.initializers: list[onnx.TensorProto] = []
            self.symbols: dict[str, tuple[int, ...]] = {}
            self.anon = 0
            self.fresh: set[str] = set()     # unnamed dims made but not yet given to an input
            self.ops: list[str] = []
            self.extra_outputs: list[Val] = []   # outputs whose dims only the run knows (NonZero)
            self.rng = np.random.default_rng(draw.integer(0, 2 ** 31))
            self.data_seed = draw.integer(0, 2 ** 31)

    # -- names and nodes
    def name(self, prefix: str) -> str:
        self.root.counter += 1
        return f"{prefix}{self.root.counter}"

    def node(self, op: str, inputs: Sequence[str], n_out: int = 1, **attrs) -> list[str]:
        outs = [self.name("v") for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, **attrs))
        self.root.ops.append(op)
        return outs

    def emit(self, op: str, inputs: Sequence[str], dtype, dims, exact=True, special=False, **attrs) -> Val:
        (out,) = self.node(op, inputs, **attrs)
        val = Val(out, np.dtype(dtype), tuple(dims), exact, special)
        self.values.append(val)
        return val

    # -- picking values
    def pick(self, pred=lambda v: True) -> Val | None:
        options = [v for v in self.values if pred(v)]
        return self.draw.choice(options) if options else None

    # -- new tensors
    def declarable(self, d: Dim) -> bool:
        # an unnamed dim is a fresh symbol of its own input: a second input cannot share it
        return d.static or d.label in self.root.symbols or d.label in self.root.fresh

    def const(self, array: np.ndarray, as_value: bool = False) -> str:
        """A constant: an initializer, or a Constant node (always inside a branch)."""
        array = np.asarray(array)
        name = self.name("c")
        if self.parent is not None or self.draw.chance(0.25):
            self.nodes.append(helper.make_node("Constant", [], [name],
                                               value=numpy_helper.from_array(array, name)))
        else:
            self.root.initializers.append(numpy_helper.from_array(array, name))
        if as_value:
            self.values.append(Val(name, array.dtype, tuple(Dim.of(s) for s in array.shape)))
        return name

    def random_array(self, dims: Sequence[int], dtype, data: str = "normal") -> np.ndarray:
        rng = self.root.rng
        dtype = np.dtype(dtype)
        if dtype == BOOL:
            return rng.random(dims) < 0.5
        if dtype.kind in "iu":
            lo, hi = {"nonzero": (1, 5), "positive": (1, 4), "small": (0, 3)}.get(data, (-5, 5))
            out = rng.integers(lo, hi + 1, dims)
            if data == "nonzero":
                out = out * rng.choice([-1, 1], dims)
            return out.astype(dtype)
        out = rng.standard_normal(dims)
        if data == "positive":
            out = np.abs(out) + 0.5
        return out.astype(dtype)

    def tensor(self, dims: Sequence[Dim], dtype, data: str = "normal", force_input=False) -> Val:
        """A new graph input or constant with these dims (constants need static dims)."""
        dims = tuple(dims)
        assert all(self.declarable(d) for d in dims), dims
        if all(d.static for d in dims) and not force_input and (self.parent is not None or self.draw.chance(0.5)):
            array = self.random_array([d.label for d in dims], dtype, data)
            return Val(self.const(array), np.dtype(dtype), dims)
        if self.parent is not None:   # no graph inputs from inside a branch
            return None
        return self.root.new_input(dims, dtype, data)

    def new_input(self, dims, dtype, data="normal") -> Val:
        name = self.name("in")
        if data == "normal" and np.dtype(dtype).kind == "f" and self.draw.chance(0.15):
            data = "special"
        declared = [d.label if d.static else (None if str(d.label).startswith("anon") else d.label)
                    for d in dims]
        val = Val(name, np.dtype(dtype), tuple(dims), True, data == "special")
        self.fresh.difference_update(str(d.label) for d in dims)
        self.inputs.append(InputSpec(val, declared, data))
        self.values.append(val)
        return val

    def new_dim(self, allow_zero=True) -> Dim:
        """A static dim or one of the graph's symbols (sometimes a fresh unnamed one)."""
        draw, root = self.draw, self.root
        if draw.chance(0.4) and self.parent is None:
            if draw.chance(0.15):
                root.anon += 1
                root.fresh.add(f"anon{root.anon}")
                return Dim(f"anon{root.anon}", self._symbol_values(allow_zero))
            name = draw.choice(SYMBOLS)
            if name not in root.symbols:
                root.symbols[name] = self._symbol_values(allow_zero)
            values = root.symbols[name]
            if allow_zero or min(values) > 0:
                return Dim(name, values)
        size = draw.choice((3, 1, 2, 4, 5))
        if allow_zero and draw.chance(0.04):
            size = 0
        return Dim.of(size)

    def _symbol_values(self, allow_zero) -> tuple[int, ...]:
        sizes = (2, 3, 1, 4, 5, 0) if allow_zero else (2, 3, 1, 4, 5)
        return tuple(self.draw.choice(sizes) for _ in range(RUNS))

    def first_input(self) -> Val:
        dtype = self.draw.choice((F32, F32, F32, F16, I64, I32))
        rank = self.draw.integer(0, 4)
        return self.new_input(tuple(self.new_dim() for _ in range(rank)), dtype)

    # -- partners for binary ops
    def partner(self, v: Val, dtype=None, data="normal") -> Val | None:
        """A value of ``dtype`` (default v's) whose dims broadcast with v's."""
        dtype = np.dtype(dtype or v.dtype)
        draw = self.draw
        if data == "normal" and draw.chance(0.3):
            found = self.pick(lambda w: w.dtype == dtype and broadcast(v.dims, w.dims) is not None)
            if found is not None:
                return found
        dims = list(v.dims)
        if draw.chance(0.5):
            dims = dims[draw.integer(0, len(dims)):]
        dims = [d if self.declarable(d) and not draw.chance(0.3) else Dim.of(1) for d in dims]
        if draw.chance(0.15) and self.parent is None:
            dims = [self.new_dim() for _ in range(draw.integer(1, 2))] + dims
            if broadcast(v.dims, dims) is None:
                dims = dims[-len(v.dims):] if v.dims else []
                dims = [d if self.declarable(d) else Dim.of(1) for d in dims]
        if broadcast(v.dims, dims) is None:
            return None
        return self.tensor(dims, dtype, data)

    def same_shape(self, v: Val, dtype=None) -> Val | None:
        """A value with exactly v's dims (and dtype)."""
        dtype = np.dtype(dtype or v.dtype)
        found = self.pick(lambda w: w.dims == v.dims and w.dtype == dtype and w is not v)
        if found is not None and self.draw.chance(0.5):
            return found
        if all(self.declarable(d) for d in v.dims) and self.draw.chance(0.7):
            t = self.tensor(v.dims, dtype)
            if t is not None:
                return t
        if dtype != v.dtype:
            return None
        op = "Neg" if v.kind != "b" else "Not"
        return self.emit(op, [v.name], v.dtype, v.dims, v.exact, v.special)

    # -- finishing
    def shape_array(self, values) -> str:
        return self.const(np.array(values, np.int64))


def value_info(val: Val, root: "GraphBuilder") -> onnx.ValueInfoProto:
    """An output's type: static dims and the graph's symbols named, derived dims left unknown."""
    shape = [d.label if d.static or d.label in root.symbols else None for d in val.dims]
    return helper.make_tensor_value_info(val.name, ELEM[val.dtype], shape)


def input_info(spec: InputSpec) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(spec.val.name, ELEM[spec.val.dtype], spec.declared)


def make_feeds(root: GraphBuilder) -> list[dict[str, np.ndarray]]:
    rng = np.random.default_rng(root.data_seed)
    feeds = []
    for r in range(RUNS):
        run = {}
        for spec in root.inputs:
            shape = tuple(d.values[r] for d in spec.val.dims)
            dtype = spec.val.dtype
            if spec.data.startswith("index:"):
                lo = int(spec.data.split(":")[1])
                run[spec.val.name] = rng.integers(-lo, lo, shape).astype(dtype)
            elif spec.data.startswith("cond:"):
                run[spec.val.name] = np.array(spec.data[5 + r] == "T")
            elif dtype == BOOL:
                run[spec.val.name] = rng.random(shape) < 0.5
            elif dtype.kind in "iu":
                lo, hi = {"positive": (1, 4), "nonzero": (1, 5), "small": (0, 3)}.get(spec.data, (-5, 5))
                x = rng.integers(lo, hi + 1, shape)
                if spec.data == "nonzero":
                    x = x * rng.choice([-1, 1], shape)
                run[spec.val.name] = np.asarray(x).astype(dtype)
            else:
                x = rng.standard_normal(shape)
                if spec.data == "positive":
                    x = np.abs(x) + 0.5
                if spec.data == "special" and x.size:
                    mask = rng.random(shape) < 0.3
                    # no float16 near its max: onnxruntime runs a chain of float16 nodes without a
                    # float16 kernel in float32 (it inserts casts, then drops the back-to-back ones),
                    # so whether an intermediate overflows depends on the graph's topology there.
                    # test_regressions.py covers float16 overflow node by node.
                    big = [60000.0] if dtype != F16 else []
                    x[mask] = rng.choice([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e-30, *big], int(mask.sum()))
                run[spec.val.name] = x.astype(dtype)
        feeds.append({k: np.asarray(v) for k, v in run.items()})
    return feeds


def generate(draw: Draw) -> GraphCase:
    """One random valid model and its feeds."""
    from .graph_grow import grow, pattern_families
    opset = draw.choice(OPSETS)
    b = GraphBuilder(draw, opset)
    b.first_input()
    if PATTERNS:
        grow(b, pattern_families())
    for _ in range(draw.integer(1, 10)):
        grow(b)
    produced = [v for v in b.values if not any(v is s.val for s in b.inputs)]
    if not produced:   # every op failed to apply: at least one node
        v = b.values[0]
        produced = [b.emit("Identity", [v.name], v.dtype, v.dims, v.exact, v.special)]
    outputs = [produced[-1]] + [v for v in produced[:-1] if draw.chance(0.2)][:3] + b.extra_outputs
    graph = helper.make_graph(b.nodes, "fuzz", [input_info(s) for s in b.inputs],
                              [value_info(v, b) for v in outputs], b.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10,
                              producer_name="relaxpack-differential")
    dims = None
    declared = {d for s in b.inputs for d in s.declared if isinstance(d, str)}
    if declared and draw.chance(0.4):
        dims = {s: (min(v), max(v) + draw.integer(0, 3)) for s, v in b.symbols.items() if s in declared}
    shapes = {v.name: [tuple(d.values[r] for d in v.dims) for r in range(RUNS)] for v in outputs
              if all(d.lo >= 0 for d in v.dims)}
    fp16 = "float16" in onnx.printer.to_text(model)
    return GraphCase(model, make_feeds(b), dims, list(b.ops), shapes, fp16)


@st.composite
def graph_cases(draw_fn) -> GraphCase:
    """Hypothesis strategy: a :class:`GraphCase`."""
    return generate(HypothesisDraw(draw_fn))


def random_case(seed: int, index: int) -> GraphCase:
    """Case ``index`` of the campaign with ``seed`` (reproducible on its own)."""
    return generate(RandomDraw(random.Random(f"{seed}:{index}")))


__all__ = ["Dim", "Val", "GraphBuilder", "GraphCase", "Draw", "RandomDraw", "HypothesisDraw",
           "graph_cases", "random_case", "generate", "broadcast", "derive", "product", "monomial"]

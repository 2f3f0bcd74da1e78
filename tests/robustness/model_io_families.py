"""Model-fuzzer families for silent wrong answers and unclear failures (issue 20, items 3, 6, 16, 18).

    python scripts/model_fuzz_campaign.py --family indices --cases 10000 --memory 2

- ``indices``: one index-taking op (Gather, GatherElements, GatherND,
  ScatterElements, ScatterND, OneHot) on random shapes with run-time
  indices drawn from ``[-2n, 2n)``: in range, the output must equal onnx's
  reference evaluator at -O0 and -O2; out of range, a one-line ShapeError
  (OneHot: rows of off values, as the spec says);
- ``aliasing``: outputs that are inputs, constants, or views of them
  (Identity, Reshape, Flatten, Squeeze, Unsqueeze, a full Slice): every
  output must equal the reference and share memory with no input,
  constant or other output;
- ``structure``: models without a graph, outputs or opsets, empty or
  non-ONNX files: a one-line RelaxpackError from the API and from
  ``relaxpack convert``;
- ``overflow``: Range with extreme or non-finite bounds (folded and at run
  time), dims beyond 2**48: RelaxpackErrors, never OverflowError.

Each case is checked like the mutation campaign's (model_mutations.check_case:
API at -O0/-O2, one run, ``relaxpack convert``) plus its family's own check.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from relaxpack.errors import ExecutionError, RelaxpackError

from . import model_mutations as MM

F, I64 = TensorProto.FLOAT, TensorProto.INT64


@dataclass
class IOCase(MM.Case):
    family: str = ""
    feeds: dict | None = None
    in_range: bool = True                 # indices: every index within [-n, n)
    extra: dict = field(default_factory=dict)

    def describe(self) -> str:
        return f"case {self.index}: {self.family}: {'; '.join(self.mutations)}"


def _model(nodes, inputs, outputs, inits=(), opset=18) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


# ---------------------------------------------------------------- indices
def _indices_case(rng: random.Random) -> tuple[onnx.ModelProto, dict, bool, str]:
    rank = rng.randint(1, 3)
    shape = [rng.randint(1, 4) for _ in range(rank)]
    data = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) + 1
    op = rng.choice(["Gather", "GatherElements", "GatherND", "ScatterElements", "ScatterND", "OneHot"])
    wild = rng.random() < 0.5            # half the cases reach past the axis

    def draw(n, size):
        lo, hi = (-2 * n, 2 * n) if wild else (-n, n)
        return np.array([rng.randrange(lo, hi) for _ in range(int(np.prod(size)))], np.int64).reshape(size)

    axis = rng.randrange(rank)
    ivi = lambda name, arr: helper.make_tensor_value_info(name, I64, list(arr.shape))  # noqa: E731
    xvi = helper.make_tensor_value_info("x", F, shape)
    out = [helper.make_tensor_value_info("y", F, None)]
    feeds, extra_inputs = {"x": data}, []
    if op == "Gather":
        idx = draw(shape[axis], [rng.randint(1, 3)])
        in_range = bool(((idx >= -shape[axis]) & (idx < shape[axis])).all())
        nodes = [helper.make_node("Gather", ["x", "i"], ["y"], axis=axis)]
    elif op in ("GatherElements", "ScatterElements"):
        size = [rng.randint(1, d) for d in shape]
        idx = draw(shape[axis], size)
        in_range = bool(((idx >= -shape[axis]) & (idx < shape[axis])).all())
        if op == "GatherElements":
            nodes = [helper.make_node(op, ["x", "i"], ["y"], axis=axis)]
        else:
            # one index per position: duplicates would make "none" depend on the write order
            idx = _distinct_along(idx, shape[axis], axis, rng) if in_range else idx
            feeds["u"] = np.full(size, -7.0, np.float32)
            nodes = [helper.make_node(op, ["x", "i", "u"], ["y"], axis=axis,
                                      reduction=rng.choice(["none", "add", "max"]))]
            extra_inputs = [helper.make_tensor_value_info("u", F, size)]
    elif op in ("GatherND", "ScatterND"):
        depth = rng.randint(1, rank)
        count = rng.randint(1, 3) if op == "GatherND" else 1   # ScatterND: one index (duplicates race)
        idx = np.stack([draw(shape[k], [count]) for k in range(depth)], axis=-1)
        in_range = all(bool(((idx[..., k] >= -shape[k]) & (idx[..., k] < shape[k])).all()) for k in range(depth))
        if op == "GatherND":
            nodes = [helper.make_node(op, ["x", "i"], ["y"])]
        else:
            feeds["u"] = np.full([1] + shape[depth:], -7.0, np.float32)
            nodes = [helper.make_node(op, ["x", "i", "u"], ["y"], reduction=rng.choice(["none", "add", "mul"]))]
            extra_inputs = [helper.make_tensor_value_info("u", F, list(feeds["u"].shape))]
    else:
        depth = rng.randint(1, 4)
        idx = draw(depth, [rng.randint(1, 4)])
        in_range = True                   # out-of-range indices are legal: rows of off values
        nodes = [helper.make_node("OneHot", ["i", "d", "v"], ["y"], axis=rng.choice([-1, 0]))]
        feeds = {}
        inits = [numpy_helper.from_array(np.array(depth, np.int64), "d"),
                 numpy_helper.from_array(np.array([0.5, 2.0], np.float32), "v")]
        feeds["i"] = idx
        return (_model(nodes, [ivi("i", idx)], out, inits, opset=11), feeds, True,
                f"OneHot depth {depth} indices {idx.tolist()}")
    feeds["i"] = idx
    attrs = {a.name: helper.get_attribute_value(a) for a in nodes[0].attribute}
    return (_model(nodes, [xvi, ivi("i", idx)] + extra_inputs, out), feeds, in_range,
            f"{op} {attrs} data {shape} indices {idx.tolist()}")


def _distinct_along(idx: np.ndarray, n: int, axis: int, rng: random.Random) -> np.ndarray:
    """``idx`` with distinct positions along ``axis`` (each in ``[-n, n)``)."""
    out = idx.copy()
    moved = np.moveaxis(out, axis, 0)
    for pos in np.ndindex(moved.shape[1:]):
        picks = rng.sample(range(n), moved.shape[0])
        moved[(slice(None),) + pos] = [p - n if rng.random() < 0.5 else p for p in picks]
    return out


def _gather_elements(data: np.ndarray, idx: np.ndarray, axis: int) -> np.ndarray:
    """ONNX GatherElements (indices may be smaller than data off the axis; onnx's reference
    evaluator wants them equal)."""
    part = data[tuple(slice(None) if a == axis else slice(0, n) for a, n in enumerate(idx.shape))]
    return np.take_along_axis(part, np.where(idx < 0, idx + data.shape[axis], idx), axis)


def check_indices(case: IOCase) -> str | None:
    import relaxpack
    from onnx.reference import ReferenceEvaluator
    from relaxpack.runtime import VirtualMachine
    model = onnx.load(str(case.model_path))
    want = None
    if case.in_range:
        node = model.graph.node[0]
        want = (_gather_elements(case.feeds["x"], case.feeds["i"], node.attribute[0].i)
                if node.op_type == "GatherElements" else ReferenceEvaluator(model).run(None, case.feeds)[0])
    for level in (0, 2):
        vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model), opt_level=level))
        try:
            got = vm.run({k: v.copy() for k, v in case.feeds.items()})["y"]
        except RelaxpackError as err:
            if case.in_range:
                return f"-O{level}: in-range indices refused: {str(err)[:200]}"
            if "\n" in str(err) or "out of range" not in str(err):
                return f"-O{level}: unclear refusal: {str(err)[:200]!r}"
            continue
        if not case.in_range:
            return f"-O{level}: indices out of range were accepted (a silent wrong answer): {got.tolist()}"
        if got.shape != want.shape or not np.array_equal(got, want):
            return f"-O{level}: {got.tolist()} differs from the reference {want.tolist()}"
    return None


# ---------------------------------------------------------------- aliasing
_VIEWS = ["Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Slice", "input", "constant"]


def _aliasing_case(rng: random.Random) -> tuple[onnx.ModelProto, dict, str]:
    shape = [rng.randint(1, 3), 1, rng.randint(1, 4)]
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape) - 2
    c = np.full(shape, 3.0, np.float32)
    inits = [numpy_helper.from_array(c, "c"), numpy_helper.from_array(np.array([-1], np.int64), "flat"),
             numpy_helper.from_array(np.array([1], np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([1 << 30], np.int64), "big")]
    nodes, outputs, picks = [], [], []
    for k in range(rng.randint(1, 4)):
        kind = rng.choice(_VIEWS)
        src = rng.choice(["x", "c", "r"]) if kind not in ("input", "constant") else None
        if src == "r":
            if not any(n.output[0] == "r" for n in nodes):
                nodes.append(helper.make_node("Relu", ["x"], ["r"]))
        name = f"y{k}"
        if kind == "input":
            name = "x"
        elif kind == "constant":
            name = "c"
        elif kind == "Reshape":
            nodes.append(helper.make_node("Reshape", [src, "flat"], [name]))
        elif kind == "Squeeze":
            nodes.append(helper.make_node("Squeeze", [src, "one"], [name]))
        elif kind == "Unsqueeze":
            nodes.append(helper.make_node("Unsqueeze", [src, "zero"], [name]))
        elif kind == "Slice":
            nodes.append(helper.make_node("Slice", [src, "zero", "big", "zero"], [name]))
        elif kind == "Flatten":
            nodes.append(helper.make_node("Flatten", [src], [name], axis=rng.randint(0, 2)))
        else:
            nodes.append(helper.make_node("Identity", [src], [name]))
        if name in outputs:
            continue
        outputs.append(name)
        picks.append(f"{kind}({src})" if src else kind)
    model = _model(nodes, [helper.make_tensor_value_info("x", F, shape)],
                   [helper.make_tensor_value_info(o, F, None) for o in outputs], inits)
    return model, {"x": x}, ", ".join(picks)


def check_aliasing(case: IOCase) -> str | None:
    import relaxpack
    from onnx.reference import ReferenceEvaluator
    from relaxpack.runtime import VirtualMachine
    model = onnx.load(str(case.model_path))
    names = [o.name for o in model.graph.output]
    want = dict(zip(names, ReferenceEvaluator(model).run(None, case.feeds)))
    for level in (0, 2):
        exe = relaxpack.build(relaxpack.from_onnx(model), opt_level=level)
        feeds = {k: v.copy() for k, v in case.feeds.items()}
        got = VirtualMachine(exe).run(feeds)
        for name, value in got.items():
            if not np.array_equal(value, want[name]):
                return f"-O{level}: output {name} differs from the reference"
            shared = [k for k, v in feeds.items() if np.shares_memory(value, v)]
            shared += [f"constant {i}" for i, c in enumerate(exe.constants)
                       if isinstance(c, np.ndarray) and np.shares_memory(value, c)]
            shared += [k for k, v in got.items() if k != name and np.shares_memory(value, v)]
            if shared:
                return f"-O{level}: output {name} shares memory with {shared}"
    return None


# ---------------------------------------------------------------- structure
def _structure_case(rng: random.Random) -> tuple[bytes, str]:
    base = _model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, ["n", 3])],
                  [helper.make_tensor_value_info("y", F, ["n", 3])])
    how = rng.choice(["no graph", "no outputs", "no opset", "other domain only", "empty file", "archive magic",
                      "truncated", "noise", "no nodes", "output not produced", "graph field only"])
    model = onnx.ModelProto()
    model.CopyFrom(base)
    if how == "no graph":
        model.ClearField("graph")
    elif how == "no outputs":
        del model.graph.output[:]
    elif how == "no opset":
        del model.opset_import[:]
    elif how == "other domain only":
        del model.opset_import[:]
        model.opset_import.append(helper.make_opsetid(rng.choice(["ai.onnx.ml", "com.microsoft"]), 1))
    elif how == "no nodes":
        del model.graph.node[:]
    elif how == "output not produced":
        model.graph.output[0].name = "z"
    elif how == "graph field only":
        model = onnx.ModelProto(graph=onnx.GraphProto())
    data = model.SerializeToString()
    if how == "empty file":
        data = b""
    elif how == "archive magic":
        data = b"\x89RPK\r\n\x1a\n" + rng.randbytes(rng.randint(0, 200))
    elif how == "truncated":
        data = data[:rng.randrange(len(data))]
    elif how == "noise":
        data = rng.randbytes(rng.randint(1, 3000))
    return data, how


# ---------------------------------------------------------------- overflow
_FLOATS = [0.0, 1.0, -1.0, 1e30, -1e30, 1e-30, 3.4e38, -3.4e38, float("inf"), float("-inf"), float("nan"), 1e-45]
_INTS = [0, 1, -1, 2 ** 31, 2 ** 48, 2 ** 62, 2 ** 63 - 1, -2 ** 63, 10]


def _overflow_case(rng: random.Random) -> tuple[onnx.ModelProto, dict | None, dict | None, str]:
    """(model, feeds or None, from_onnx dims or None, description)."""
    how = rng.choice(["float range", "int range", "runtime float range", "runtime int range", "dims"])
    if how == "dims":
        model = _model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", F, ["n", 3])],
                       [helper.make_tensor_value_info("y", F, None)])
        value = rng.choice([2 ** 48 + 1, 2 ** 63, 10 ** 30, -5, (1, 2 ** 70), (2 ** 50, None), (3, 1)])
        return model, None, {"n": value}, f"dims n={value}"
    is_float = "float" in how
    bounds = [rng.choice(_FLOATS if is_float else _INTS) for _ in range(3)]
    dtype, elem = (np.float32, F) if is_float else (np.int64, I64)
    arrays = [np.array(b, dtype) if is_float else np.array(b, np.int64) for b in bounds]
    names = ["a", "b", "d"]
    nodes = [helper.make_node("Range", names, ["y"])]
    out = [helper.make_tensor_value_info("y", elem, None)]
    if how.startswith("runtime"):
        model = _model(nodes, [helper.make_tensor_value_info(n, elem, []) for n in names], out)
        return model, dict(zip(names, arrays)), None, f"{how} {bounds}"
    model = _model(nodes, [], out, [numpy_helper.from_array(a, n) for n, a in zip(names, arrays)])
    return model, None, None, f"{how} {bounds}"


def check_overflow(case: IOCase) -> str | None:
    """Import, build and (with feeds) run: a RelaxpackError or success; the VM may not allocate
    more than the campaign's memory limit allows, so a success with a huge Range is not run."""
    import relaxpack
    from relaxpack.runtime import VirtualMachine
    model = onnx.load(str(case.model_path))
    try:
        exe = relaxpack.build(relaxpack.from_onnx(model, dims=case.extra.get("dims")))
        if case.feeds is not None:
            VirtualMachine(exe).run(case.feeds)
    except RelaxpackError as err:
        if MM._memory_in_chain(err):
            # a run-time Range of billions of values, refused by the campaign's memory limit with a
            # one-line ExecutionError; bounding such allocations up front is the memory budget's work
            # (issue 20, item 11), not this family's
            case.notes.append(f"allocation refused by the memory limit: {str(err)[:120]}")
            return None if isinstance(err, ExecutionError) and "\n" not in str(err) else \
                f"MemoryError behind {type(err).__name__}: {str(err)[:200]}"
        return MM.clear_message(err)
    return None


# ---------------------------------------------------------------- cases
FAMILIES = ("indices", "aliasing", "structure", "overflow")


def make_case(family: str, seed: int, index: int, root: Path) -> IOCase:
    rng = random.Random(f"{family}:{seed}:{index}")
    folder = root / "model"
    folder.mkdir(parents=True, exist_ok=True)
    (root / "secret.bin").write_bytes(MM.SENTINEL_BYTES)
    case = IOCase(index, family, [], root, folder / "model.onnx", family=family)
    if family == "indices":
        model, case.feeds, case.in_range, what = _indices_case(rng)
        data = model.SerializeToString()
    elif family == "aliasing":
        model, case.feeds, what = _aliasing_case(rng)
        data = model.SerializeToString()
    elif family == "structure":
        data, what = _structure_case(rng)
    else:
        model, case.feeds, dims, what = _overflow_case(rng)
        case.extra["dims"] = dims
        data = model.SerializeToString()
    case.mutations.append(what)
    case.model_path.write_bytes(data)
    return case


_CHECKS = {"indices": check_indices, "aliasing": check_aliasing, "overflow": check_overflow}


def check_case(case: IOCase) -> str | None:
    """The mutation campaign's checks (API, one run, ``relaxpack convert``), then the family's."""
    problem = MM.check_case(case)
    if case.family == "overflow" and problem and problem.startswith("MemoryError behind ExecutionError: "):
        case.notes.append(f"allocation refused by the memory limit: {problem[35:155]}")   # as in check_overflow
        problem = None
    if problem is None and case.family in _CHECKS:
        try:
            problem = _CHECKS[case.family](case)
        except RelaxpackError as err:
            problem = f"{type(err).__name__} where none was expected: {str(err)[:200]}"
    return problem


__all__ = ["FAMILIES", "IOCase", "check_case", "make_case"]

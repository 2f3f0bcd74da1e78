"""Cross-checking relaxpack against onnxruntime on the same inputs.

>>> report = check_model("model.onnx", dims={"seq": (1, 64)}, samples=3)   # doctest: +SKIP
>>> report.passed, report.worst()                                           # doctest: +SKIP

Inputs are random with a seed (dynamic dims drawn from their ranges) or
given; every output is compared within ``rtol``/``atol``. Where onnxruntime
and relaxpack disagree, onnx's reference evaluator (the exact result for
integer ops) decides: an output relaxpack computes as the reference does is
onnxruntime's deviation, reported and not counted as a failure unless
``strict`` (onnxruntime's u8 x s8 integer GEMM saturates in int16 pairs on
CPUs without VNNI, for one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from pathlib import Path
from typing import Callable, Mapping, Sequence

import warnings

import numpy as np
import onnx

from .vm_build import build
from .errors import InputError, RelaxpackError
from .importers.onnx import from_onnx
from .importers.onnx.importer import load_model
from .ir.dims import evaluate, free_vars
from .runtime import VirtualMachine
from .runtime.dtypes import numpy_dtype

DEFAULT_DIM_RANGE = (1, 8)
#: the note on an output where onnxruntime, not relaxpack, differs from onnx's reference evaluator
ORT_DEVIATES = "onnxruntime differs from the exact result here; relaxpack matches it (onnx's reference evaluator)"


@dataclass
class OutputDiff:
    name: str
    shape: tuple
    max_abs: float
    max_rel: float
    passed: bool
    note: str = ""


@dataclass
class SampleReport:
    dims: dict[str, int]
    outputs: list[OutputDiff] = field(default_factory=list)
    feeds: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    @property
    def passed(self) -> bool:
        return all(o.passed for o in self.outputs)


@dataclass
class CheckReport:
    samples: list[SampleReport]

    @property
    def passed(self) -> bool:
        return all(s.passed for s in self.samples)

    def worst(self) -> OutputDiff | None:
        diffs = [o for s in self.samples for o in s.outputs]
        return max(diffs, key=lambda o: (not o.passed, o.max_abs), default=None)


def onnxruntime_session(model: "onnx.ModelProto | str | Path", threads: int | None = None):
    """An onnxruntime CPU session for a ModelProto or a model file."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads is not None:
        options.intra_op_num_threads = threads
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    try:
        return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as err:
        raise RelaxpackError(f"onnxruntime cannot load the model: {str(err).splitlines()[0]}") from None


def compare_outputs(names: Sequence[str], got: Mapping[str, np.ndarray], want: Sequence[np.ndarray],
                    rtol: float, atol: float) -> list[OutputDiff]:
    diffs = []
    for name, ref in zip(names, want):
        out = np.asarray(got[name])
        ref = np.asarray(ref)
        if out.shape != ref.shape or out.dtype != ref.dtype:
            diffs.append(OutputDiff(name, out.shape, np.inf, np.inf, False,
                                    f"got {out.dtype}{list(out.shape)}, onnxruntime {ref.dtype}{list(ref.shape)}"))
            continue
        if ref.dtype.kind in "OSU":
            same = out.tolist() == ref.tolist()
            diffs.append(OutputDiff(name, out.shape, 0.0 if same else np.inf, 0.0 if same else np.inf, same))
            continue
        a, b = out.astype(np.float64), ref.astype(np.float64)
        both_nan = np.isnan(a) & np.isnan(b)
        err = np.where(both_nan, 0.0, np.abs(a - b))
        err = np.where(np.isinf(a) & (a == b), 0.0, err)
        max_abs = float(err.max()) if err.size else 0.0
        rel = err / np.maximum(np.abs(b), np.finfo(np.float64).tiny)
        max_rel = float(rel.max()) if rel.size else 0.0
        passed = bool(np.all(err <= atol + rtol * np.abs(np.where(np.isnan(b), 0, b))))
        diffs.append(OutputDiff(name, out.shape, max_abs, max_rel, passed))
    return diffs


def random_inputs(exe, dim_values: Mapping[str, int], rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random inputs for ``exe``'s main function at the given dim values; an InputError when
    they would not fit in memory (:func:`~relaxpack.runtime.input_files.input_byte_limit`)."""
    from .runtime.input_files import input_byte_limit

    shapes = {}
    for p in exe.function("main").params:
        if p.kind != "tensor" or p.shape is None:
            raise InputError(f"input {p.name!r} has no known shape; pass inputs explicitly")
        shapes[p] = tuple(d if isinstance(d, int) else _eval_dim(d, dim_values) for d in p.shape)
    total = sum(prod(shape) * numpy_dtype(p.dtype).itemsize for p, shape in shapes.items())
    if total > input_byte_limit():
        raise InputError(f"random inputs of shapes {', '.join(f'{p.name}{list(s)}' for p, s in shapes.items())} "
                         f"would take {total} bytes, more than half this machine's memory")
    try:
        return {p.name: _random_array(p, shape, rng) for p, shape in shapes.items()}
    except MemoryError:
        raise InputError(f"not enough memory for random inputs of {total} bytes") from None


def _random_array(p, shape: tuple, rng: np.random.Generator) -> np.ndarray:
    dtype = numpy_dtype(p.dtype)
    if dtype.kind == "f":
        return rng.standard_normal(shape).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 8, shape).astype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if p.dtype == "string":
        return random_strings(shape, rng)
    raise InputError(f"cannot make random values of dtype {p.dtype} for input {p.name!r}")


#: the characters of random strings: letters of two cases, digits, a space and a non-ASCII letter
_STRING_CHARS = np.array(list("abcdefgxyzABCXYZ0123456789 \u00e9"))


def random_strings(shape, rng: np.random.Generator, max_len: int = 6) -> np.ndarray:
    """An object array of ``shape`` holding random words of 0..``max_len``
    characters. Models that need particular strings (numbers to parse,
    label keys) need explicit inputs."""
    lengths = rng.integers(0, max_len + 1, int(np.prod(shape, dtype=np.int64)))
    out = np.empty(lengths.size, dtype=object)
    out[:] = ["".join(rng.choice(_STRING_CHARS, n)) for n in lengths.tolist()]
    return out.reshape(shape)


def _eval_dim(text: str, values: Mapping[str, int]) -> int:
    from .ir.dims import parse_dim
    return evaluate(parse_dim(text), values)


#: Draws of the dims tried for values that hold the model's assumptions.
ASSUMPTION_DRAWS = 200


def draw_dims(exe, rng: np.random.Generator, fixed: Mapping[str, int | tuple] | None = None) -> dict[str, int]:
    """A value for every symbolic dim of main's inputs, within its range, that
    holds the relations the model was converted assuming (``h % 8 < 4``):
    other values fail in onnxruntime too. Redrawn a bounded number of times;
    the last draw when none holds them.

    ``fixed`` gives dims a value, or a ``(lo, hi)`` range (``hi`` may be None) to draw
    from within the archive's; a name that is no dim of the inputs is an InputError.
    """
    from .runtime.assumptions import assumptions_of
    relations = [(a["lhs"], a["rhs"]) for a in assumptions_of(exe)
                 if a["function"] == "main" and a["when"] == "inputs"]
    values = _draw_once(exe, rng, fixed)
    for _ in range(ASSUMPTION_DRAWS):
        if all(_eval_dim(lhs, values) == _eval_dim(rhs, values) for lhs, rhs in relations):
            break
        values = _draw_once(exe, rng, fixed)
    return values


def _draw_once(exe, rng: np.random.Generator, fixed: Mapping[str, int | tuple] | None) -> dict[str, int]:
    from .ir.dims import parse_dim
    ranges = {name: (lo, hi) for name, lo, hi in exe.function("main").dim_ranges}
    names = set()
    for p in exe.function("main").params:
        for d in p.shape or ():
            if isinstance(d, str):
                names |= free_vars(parse_dim(d))
    fixed = dict(fixed or {})
    unknown = sorted(set(fixed) - names)
    if unknown:
        raise InputError(f"dims {unknown} do not name any dim of the inputs (their dims are "
                         f"{sorted(names) or 'all static'})")
    odd = sorted(k for k, v in fixed.items() if not isinstance(v, (int, tuple)))
    if odd:
        raise InputError(f"dims {odd}: give a value or a range to draw from (untying with ? is for convert)")
    values = {k: v for k, v in fixed.items() if isinstance(v, int)}
    for name in sorted(names - set(values)):
        lo, hi = ranges.get(name, DEFAULT_DIM_RANGE)
        if name in fixed:   # a range given: within the archive's
            want_lo, want_hi = fixed[name]
            lo, hi = max(lo, want_lo), want_hi if hi is None else (hi if want_hi is None else min(hi, want_hi))
            if hi is not None and hi < lo:
                raise InputError(f"dim {name}: the range {want_lo}..{'' if want_hi is None else want_hi} "
                                 f"lies outside the archive's {ranges.get(name)}")
        lo = max(lo, DEFAULT_DIM_RANGE[0]) if hi is None else lo
        hi = hi if hi is not None else max(lo, DEFAULT_DIM_RANGE[1])
        values[name] = int(rng.integers(lo, hi + 1))
    return values


def reference_output(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], name: str) -> np.ndarray | None:
    """Output ``name`` of ``model`` by onnx's reference evaluator (only the nodes
    it needs), or None where the evaluator cannot run the model."""
    from onnx.reference import ReferenceEvaluator
    try:
        needed = _extract(model, name)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (ref,) = ReferenceEvaluator(needed).run([name], dict(feeds))
    except Exception:   # the evaluator lacks an op or a version, or fails on it: no judgement
        return None
    return np.asarray(ref)


def _extract(model: onnx.ModelProto, name: str) -> onnx.ModelProto:
    """The part of ``model`` that computes ``name`` (the whole model where extraction fails)."""
    import onnx.utils
    try:
        return onnx.utils.Extractor(model).extract_model([i.name for i in model.graph.input], [name])
    except Exception:
        return model


def reference_agrees(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], name: str, got: np.ndarray,
                     close: Callable[[np.ndarray, np.ndarray], bool]) -> bool:
    """Whether onnx's reference evaluator computes relaxpack's output ``got`` for
    ``name`` (``close(got, reference)`` decides): the judgement when onnxruntime
    disagrees with relaxpack (``relaxpack check``, the differential campaign)."""
    ref = reference_output(model, feeds, name)
    return ref is not None and ref.shape == np.shape(got) and bool(close(np.asarray(got), ref))


def _judge_deviations(proto, feeds, got, diffs: list[OutputDiff], rtol: float, atol: float) -> list[OutputDiff]:
    """``diffs`` with each failing output that relaxpack computes as onnx's
    reference evaluator does marked as onnxruntime's deviation (passed)."""
    def close(a, b):
        return compare_outputs([""], {"": a}, [b], rtol, atol)[0].passed
    judged = []
    for d in diffs:
        if not d.passed and reference_agrees(proto, feeds, d.name, got[d.name], close):
            d = OutputDiff(d.name, d.shape, d.max_abs, d.max_rel, True, ORT_DEVIATES)
        judged.append(d)
    return judged


def check_model(model: "onnx.ModelProto | str | Path", dims=None, samples: int = 2, seed: int = 0,
                rtol: float = 1e-4, atol: float = 1e-5,
                inputs: Mapping[str, np.ndarray] | None = None, strict: bool = False) -> CheckReport:
    """Run relaxpack and onnxruntime on the same inputs and compare; ``strict``:
    an output where onnxruntime deviates from onnx's reference evaluator and
    relaxpack does not still fails."""
    proto = model if isinstance(model, onnx.ModelProto) else load_model(model)
    exe = build(from_onnx(model, dims=dims))
    vm = VirtualMachine(exe)
    session = onnxruntime_session(proto)
    names = [o.name for o in session.get_outputs()]
    rng = np.random.default_rng(seed)
    reports = []
    for _ in range(1 if inputs is not None else samples):
        dim_values = {} if inputs is not None else draw_dims(exe, rng)
        feed = dict(inputs) if inputs is not None else random_inputs(exe, dim_values, rng)
        try:
            want = session.run(None, feed)
        except Exception as err:
            raise RelaxpackError(f"onnxruntime failed on these inputs: {err}") from None
        got = vm.run(feed)
        diffs = compare_outputs(names, got, want, rtol, atol)
        if not strict:
            diffs = _judge_deviations(proto, feed, got, diffs, rtol, atol)
        reports.append(SampleReport(dim_values, diffs, feed))
    return CheckReport(reports)


@dataclass
class NodeDivergence:
    node: str
    op_type: str
    output: str
    diff: OutputDiff


def expose_intermediates(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` whose graph also outputs every node's outputs."""
    exposed = onnx.ModelProto()
    exposed.CopyFrom(model)
    graph = exposed.graph
    have = {o.name for o in graph.output}
    for node in graph.node:
        for name in node.output:
            if name and name not in have:
                graph.output.append(onnx.helper.make_empty_tensor_value_info(name))
                have.add(name)
    return exposed


def first_divergence(model: "onnx.ModelProto | str | Path", inputs: Mapping[str, np.ndarray], dims=None,
                     rtol: float = 1e-4, atol: float = 1e-5) -> NodeDivergence | None:
    """Run both sides exposing every intermediate; the first ONNX node (in
    graph order) one of whose outputs differs, or None when all agree."""
    proto = model if isinstance(model, onnx.ModelProto) else load_model(model)
    exposed = expose_intermediates(proto)
    session = onnxruntime_session(exposed)
    names = [o.name for o in session.get_outputs()]
    want = dict(zip(names, session.run(None, dict(inputs))))
    got = VirtualMachine(build(from_onnx(exposed, dims=dims))).run(dict(inputs))
    for node in proto.graph.node:
        for name in node.output:
            if not name or name not in want:
                continue
            (diff,) = compare_outputs([name], got, [want[name]], rtol, atol)
            if not diff.passed:
                return NodeDivergence(node.name or "(unnamed)", node.op_type, name, diff)
    return None

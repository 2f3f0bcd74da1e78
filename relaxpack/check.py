"""Cross-checking relaxpack against onnxruntime on the same inputs.

>>> report = check_model("model.onnx", dims={"seq": (1, 64)}, samples=3)   # doctest: +SKIP
>>> report.passed, report.worst()                                           # doctest: +SKIP

Inputs are random with a seed (dynamic dims drawn from their ranges) or
given; every output is compared within ``rtol``/``atol`` as given, or by
default within its dtype's tolerance relative to its largest magnitude
(``compare.tolerance_for``: an output in the thousands is not held to an
absolute 1e-5). Where onnxruntime and relaxpack disagree, onnx's reference
evaluator (the exact result for integer ops) decides: an output relaxpack
computes as the reference does is onnxruntime's deviation, reported and not
counted as a failure unless ``strict`` (onnxruntime's u8 x s8 integer GEMM
saturates in int16 pairs on CPUs without VNNI, for one).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import numpy as np
import onnx

from .vm_build import build
from .compare import OutputDiff, compare_outputs  # noqa: F401 (re-exported)
from .check_ties import near_tie_note, order_tie_note
from .check_isolated import IsolatedSession, OnnxruntimeCrash, OnnxruntimeFailure
from .errors import RelaxpackError, ShapeError
from .feeds import (  # noqa: F401 (re-exported)
    DEFAULT_DIM_RANGE, assumptions_hold, dim_ranges, draw_dims, input_dim_names, random_inputs, random_strings,
    widening_draws,
)
from .importers.onnx import from_onnx
from .importers.onnx.graph import subgraphs
from .importers.onnx.importer import load_model
from .ir.dims import dim_identifier
from .runtime import VirtualMachine
from .runtime.blas import blas_threads

#: the note on an output where onnxruntime, not relaxpack, differs from onnx's reference evaluator
ORT_DEVIATES = "onnxruntime differs from the exact result here; relaxpack matches it (onnx's reference evaluator)"
#: the note on an output that only onnxruntime's graph optimizations change (e.g. QDQ rewritten into integer kernels)
ORT_OPTIMIZER_DEVIATES = ("onnxruntime's graph optimizations or its threads change this output; relaxpack "
                          "matches onnxruntime with them off and one thread (the graph as written)")
#: the note on such an output of a model whose MatMulNBits onnxruntime may compute with int8 activations
ORT_ACCURACY_LEVEL_DEVIATES = ("onnxruntime's int8 activations in MatMulNBits (its accuracy_level), its graph "
                               "optimizations or its threads change this output; relaxpack matches onnxruntime "
                               "computing MatMulNBits in float32 with its optimizations off and one thread")


@dataclass
class SampleReport:
    dims: dict[str, int]
    outputs: list[OutputDiff] = field(default_factory=list)
    feeds: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    #: dims drawn and not used, and why (relaxpack refused them where onnxruntime did not)
    notes: list[str] = field(default_factory=list)

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


def onnxruntime_session(model: "onnx.ModelProto | str | Path", threads: int | None = None, optimize: bool = True):
    """An onnxruntime CPU session for a ModelProto or a model file; ``optimize=False``: its graph
    optimizations off, so it runs the graph as written, node by node."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads is not None:
        options.intra_op_num_threads = threads
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    data = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    try:
        return ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as err:
        raise RelaxpackError(f"onnxruntime cannot load the model: {str(err).splitlines()[0]}") from None


def reference_output(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray], name: str) -> np.ndarray | None:
    """Output ``name`` of ``model`` by onnx's reference evaluator (only the nodes
    it needs), or None where the evaluator cannot run the model."""
    from onnx.reference import ReferenceEvaluator
    try:
        needed = _extract(model, name)
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            (ref,) = ReferenceEvaluator(needed, new_ops=_older_opset_ops(model)).run([name], dict(feeds))
    except Exception:   # the evaluator lacks an op or a version, or fails on it: no judgement
        return None
    return np.asarray(ref)


def _older_opset_ops(model: onnx.ModelProto) -> list[type]:
    """Ops the reference evaluator lacks at ``model``'s opset, as the versions it has.

    onnx's evaluator (1.23) implements DequantizeLinear from opset 19 only, so it could not
    judge a QDQ model of opset 10 to 18 (what onnxruntime's quantizer writes by default):
    19 only added float8 inputs, its integer semantics are those of 10 and 13."""
    version = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if version >= 19:
        return []
    from onnx.reference.ops import load_op
    newest = load_op("", "DequantizeLinear", None)   # an unnamed version runs with the newest schema's attributes
    return [type("DequantizeLinear", (newest,), {"op_domain": ""})]


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
    return _agrees(reference_output(model, feeds, name), got, close)


def _agrees(want, got, close) -> bool:
    """Whether ``want`` (None: no answer) has ``got``'s shape and ``close(got, want)`` holds."""
    return want is not None and np.shape(want) == np.shape(got) and bool(close(np.asarray(got), np.asarray(want)))


def _judge_deviations(proto, feeds, got, diffs: list[OutputDiff], rtol: float, atol: float,
                      precisions: Mapping[str, str], as_written: Callable[[], dict] | None = None,
                      as_written_note: str = ORT_OPTIMIZER_DEVIATES) -> list[OutputDiff]:
    """``diffs`` with each failing output that relaxpack computes as onnx's reference evaluator
    does marked as onnxruntime's deviation (passed); else, with ``as_written`` (onnxruntime's
    outputs with its graph optimizations off), one relaxpack computes as that run does marked
    ``as_written_note`` (passed)."""
    judged = []
    for d in diffs:
        def close(a, b, name=d.name):
            return compare_outputs([name], {name: a}, [b], rtol, atol, precisions=precisions)[0].passed
        if not d.passed and reference_agrees(proto, feeds, d.name, got[d.name], close):
            d = OutputDiff(d.name, d.shape, d.max_abs, d.max_rel, True, ORT_DEVIATES)
        elif not d.passed and as_written is not None and _agrees((as_written() or {}).get(d.name), got[d.name], close):
            d = OutputDiff(d.name, d.shape, d.max_abs, d.max_rel, True, as_written_note)
        judged.append(d)
    return judged


def in_float32(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, bool]:
    """``proto`` with every nonzero ``accuracy_level`` of a com.microsoft MatMulNBits dropped
    (subgraphs too), and whether there was one. At level 4 onnxruntime may quantize MatMulNBits' activations to
    int8 (on CPUs with such kernels); unset, it computes in float32, as relaxpack does."""
    lowered = onnx.ModelProto()
    lowered.CopyFrom(proto)
    found = False
    for graph in _graphs(lowered.graph):
        for node in graph.node:
            if node.op_type == "MatMulNBits" and node.domain == "com.microsoft":
                kept = [a for a in node.attribute if a.name != "accuracy_level" or a.i == 0]
                if len(kept) != len(node.attribute):
                    found = True
                    del node.attribute[:]
                    node.attribute.extend(kept)
    return (lowered, True) if found else (proto, False)


def _graphs(graph: onnx.GraphProto):
    """``graph`` and every subgraph in it (If branches, Loop and Scan bodies), depth first."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            for sub in subgraphs(attr):
                yield from _graphs(sub)


def _as_written(proto, threads: int | None, isolate: bool) -> Callable[[dict], Callable[[], dict | None]]:
    """``for_feed(feed)``: a call giving onnxruntime's outputs for ``feed`` with its graph
    optimizations off (by name; None when it fails). The session is made on first need, once."""
    made: dict = {}

    def session():
        if "session" not in made:
            try:
                made["session"] = (IsolatedSession(proto.SerializeToString(), threads, optimize=False) if isolate
                                   else onnxruntime_session(proto, threads, optimize=False))
            except Exception:   # noqa: BLE001 - onnxruntime cannot load it so: no second opinion
                made["session"] = None
        return made["session"]

    def run(feed: dict) -> dict | None:
        plain = session()
        if plain is None:
            return None
        try:
            return dict(zip([o.name for o in plain.get_outputs()], plain.run(None, dict(feed))))
        except Exception:       # noqa: BLE001 - onnxruntime's own errors (a crash included): no second opinion
            return None

    def for_feed(feed: dict) -> Callable[[], dict | None]:
        memo: dict = {}

        def outputs() -> dict | None:       # run once per feed, on the first output that needs it
            if "outputs" not in memo:
                memo["outputs"] = run(feed)
            return memo["outputs"]
        return outputs
    return for_feed


def check_model(model: "onnx.ModelProto | str | Path", dims=None, samples: int = 2, seed: int = 0,
                rtol: float | None = None, atol: float | None = None,
                inputs: Mapping[str, np.ndarray] | None = None, *,
                exe=None, opt_level: int = 2, pools: Mapping[str, int] | None = None, threads: int | None = None,
                on_sample: Callable[[int, SampleReport], None] | None = None, strict: bool = False,
                isolate: bool = False) -> CheckReport:
    """Run relaxpack and onnxruntime on the same inputs and compare.

    ``exe`` is the executable to check (e.g. the archive you ship, loaded); without it the model is
    built here with ``dims``, ``opt_level`` and ``pools``, as ``convert`` builds it. With ``exe``,
    ``dims`` fix dims (``{"batch": 2}``) or narrow the ranges they are drawn from. ``threads`` sets
    the BLAS threads of relaxpack's runs and onnxruntime's intra-op threads alike; ``on_sample(i,
    report)`` is called as each sample finishes. ``rtol``/``atol``: as given (either one; the other
    keeps 1e-4 / 1e-5), or by default per dtype relative to each output's magnitude. ``strict``:
    an output where onnxruntime deviates from onnx's reference evaluator and relaxpack does not
    still fails. ``isolate`` runs onnxruntime in a child process (``check_isolated``): a crash of
    onnxruntime is then a one-line error instead of the end of this process.
    """
    proto = model if isinstance(model, onnx.ModelProto) else load_model(model)
    fixed, given = dict(dims or {}), exe is not None
    if not given:
        exe, fixed = build(from_onnx(model, dims=dims), opt_level=opt_level, pools=pools or None), {}
    vm = VirtualMachine(exe)
    session = _session(proto, threads, isolate)
    names = [o.name for o in session.get_outputs()]
    if given:
        _same_signature(exe, session)
    rng = np.random.default_rng(seed)
    bounds = index_bounds(proto)
    multiples = dim_multiples(proto)
    precisions = output_precisions(proto)
    written, lowered = in_float32(proto)
    # one thread unless told: onnxruntime's DynamicQuantizeLSTM quantizes H per thread's rows
    as_written = _as_written(written, 1 if threads is None else threads, isolate)
    as_written_note = ORT_ACCURACY_LEVEL_DEVIATES if lowered else ORT_OPTIMIZER_DEVIATES
    reports = []
    for i in range(1 if inputs is not None else samples):
        if inputs is not None:
            dim_values, feed, notes = {}, dict(inputs), []
            want = _onnxruntime_run(session, feed, {})
            with blas_threads(threads):
                got = vm.run(feed)
        else:
            dim_values, feed, want, got, notes = _draw_accepted(exe, vm, session, rng, fixed, bounds, threads,
                                                                multiples)
        diffs = compare_outputs(names, got, want, rtol, atol, precisions=precisions)
        if not strict:
            diffs = _judge_deviations(proto, feed, got, diffs, rtol, atol, precisions, as_written(feed),
                                      as_written_note)
        reports.append(SampleReport(dim_values, diffs, feed, notes))
        if on_sample is not None:
            on_sample(i, reports[-1])
    return CheckReport(reports)


#: ops that move or relabel values without computing: an output behind them has their input's precision
_MOVES = {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose"}
_NARROW_FLOATS = {onnx.TensorProto.FLOAT16: "float16", onnx.TensorProto.BFLOAT16: "bfloat16"}


def output_precisions(proto: onnx.ModelProto) -> dict[str, str]:
    """The graph outputs computed in a narrower float than their own dtype, and that float: a
    float32 output that is a Cast of a float16 value (onnxconverter-common's ``keep_io_types``,
    the transformer optimizer's float16 with float32 inputs and outputs) holds float16's
    precision, and is compared within float16's tolerance."""
    producers = {o: n for n in proto.graph.node for o in n.output}
    casts = {}
    for out in proto.graph.output:
        node = producers.get(out.name)
        while node is not None and node.op_type in _MOVES:
            node = producers.get(node.input[0])
        if node is not None and node.op_type == "Cast":
            casts[out.name] = node.input[0]
    if not casts:
        return {}
    types = _elem_types(proto)
    return {out: _NARROW_FLOATS[types[src]] for out, src in casts.items() if types.get(src) in _NARROW_FLOATS}


def _elem_types(proto: onnx.ModelProto) -> dict[str, int]:
    """Element type of each value onnx's shape inference (or the model) names."""
    try:
        inferred = onnx.shape_inference.infer_shapes(proto).graph
    except Exception:   # noqa: BLE001 - a model onnx cannot infer: what the model itself says
        inferred = proto.graph
    types = {i.name: i.data_type for i in proto.graph.initializer}
    for info in [*inferred.input, *inferred.value_info, *inferred.output]:
        if info.type.HasField("tensor_type"):
            types[info.name] = info.type.tensor_type.elem_type
    return types


#: ops that move an input's values without changing them (a multiple-choice BERT flattens its
#: token type ids before their embedding's Gather; TimesFM slices its frequency ids); a Cast of
#: ids keeps them too (onnxruntime's fused embedding takes int32 ids cast from the model's int64 ones)
_REARRANGING = frozenset({"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Transpose", "Cast", "Slice",
                          "Expand", "Tile"})


def index_bounds(proto: onnx.ModelProto) -> dict[str, int]:
    """For each integer graph input used (reshaped or not) as the indices of a
    Gather on axis 0 of an initializer (token ids into an embedding table),
    the table's rows: random ids are drawn below it (ids 0..7 run past a
    2-row token-type table)."""
    tables = {t.name: t.dims[0] for t in proto.graph.initializer if len(t.dims) > 0}
    source = {i.name: i.name for i in proto.graph.input
              if i.type.tensor_type.elem_type in (onnx.TensorProto.INT64, onnx.TensorProto.INT32)}
    bounds: dict[str, int] = {}
    for node in proto.graph.node:
        plain = node.domain in ("", "ai.onnx")
        if plain and node.op_type in _REARRANGING and node.input and node.input[0] in source and node.output:
            source[node.output[0]] = source[node.input[0]]
        for index, table in _lookups(node, plain):
            if index in source and table in tables and tables[table] > 0:
                name = source[index]
                bounds[name] = min(bounds.get(name, tables[table]), tables[table])
    return bounds


def _lookups(node: onnx.NodeProto, plain: bool) -> list[tuple[str, str]]:
    """(indices, table) pairs of a node that looks rows up: a Gather on axis 0, and
    onnxruntime's fused BERT embeddings (token ids into the word table, segment ids
    into the segment table)."""
    inputs = list(node.input)
    if plain and node.op_type == "Gather" and len(inputs) == 2 \
            and next((a.i for a in node.attribute if a.name == "axis"), 0) == 0:
        return [(inputs[1], inputs[0])]
    if node.domain == "com.microsoft" and node.op_type in ("EmbedLayerNormalization", "QEmbedLayerNormalization"):
        return [(inputs[i], inputs[t]) for i, t in ((0, 2), (1, 4)) if len(inputs) > t and inputs[i] and inputs[t]]
    return []


#: torch.export's spelling of a derived dim, ``Dim("h_k") * 32``: ``32*h_k``
_SCALED_DIM = re.compile(r"^\s*(\d+)\s*\*\s*[A-Za-z_]\w*\s*$")


def dim_multiples(proto: onnx.ModelProto) -> dict[str, int]:
    """The input dims the model spells as a multiple of a name, and that multiple: random dims
    are drawn as its multiples. torch.export writes ``Dim("h_k") * 32`` as ``32*h_k`` and may
    compute shapes that hold only there (a dynamo-exported smp Unet with a mit_b0 encoder
    reshapes its patch embedding by a row count exact only for multiples of 32), so onnxruntime
    refused nearly every height drawn. The dim stays one dim of its own: the model still takes
    any value at run time, as onnxruntime does."""
    multiples: dict[str, int] = {}
    for inp in proto.graph.input:
        if inp.type.HasField("tensor_type"):
            for d in inp.type.tensor_type.shape.dim:
                scaled = _SCALED_DIM.match(d.dim_param) if d.HasField("dim_param") else None
                if scaled and int(scaled.group(1)) > 1:
                    multiples[dim_identifier(d.dim_param)] = int(scaled.group(1))
    return multiples


def _at_multiples(drawn: dict[str, int], multiples: Mapping[str, int], fixed: Mapping,
                  ranges: Mapping[str, tuple]) -> dict[str, int]:
    """``drawn`` with each dim of ``multiples`` rounded up to its multiple (down where that
    leaves its range; as drawn where neither lies in it); the values ``fixed`` gives stay."""
    out = dict(drawn)
    for name, k in multiples.items():
        if name in out and not isinstance(fixed.get(name), int):
            lo, hi = ranges.get(name, (0, None))
            up, down = -(-out[name] // k) * k, out[name] // k * k
            out[name] = up if hi is None or up <= hi else down if down >= max(lo, 1) else out[name]
    return out


def model_index_bounds(path) -> dict[str, int]:
    """:func:`index_bounds` of the ONNX model at ``path`` (its tables' dims: no external data read)."""
    return index_bounds(onnx.load(str(path), load_external_data=False))


def within_bounds(feed: dict, bounds: dict[str, int], rng: np.random.Generator) -> dict:
    """``feed`` with the inputs ``bounds`` names redrawn below their bound."""
    for name, bound in bounds.items():
        if name in feed:
            feed[name] = rng.integers(0, bound, feed[name].shape).astype(feed[name].dtype)
    return feed


def _draw_accepted(exe, vm, session, rng: np.random.Generator, fixed: dict, bounds: dict[str, int],
                   threads: int | None, multiples: Mapping[str, int] | None = None):
    """Dims, random inputs, and onnxruntime's and relaxpack's outputs on them,
    drawn from larger ranges in turn while the dims break the relations the
    model was converted assuming (an image size a multiple of 32), onnxruntime
    refuses or crashes on the inputs, or relaxpack refuses their shapes (a
    pool over a dim shorter than its window); crashes and relaxpack's
    refusals are said in the notes. When no range is accepted, the last draw
    is run and its refusal is the error. Dims of ``multiples`` are drawn as multiples (:func:`dim_multiples`)."""
    notes, drawn, crash, refused = [], {}, None, 0
    ranges = dim_ranges(exe)
    for drawn in widening_draws(exe, rng, fixed):
        drawn = _at_multiples(drawn, multiples or {}, fixed, ranges)
        crash = None
        if not assumptions_hold(exe, drawn):
            continue
        feed = within_bounds(random_inputs(exe, drawn, rng), bounds, rng)
        try:
            want = session.run(None, feed)
        except OnnxruntimeCrash as err:
            crash = OnnxruntimeCrash(f"{err} on random inputs at {_dims_text(drawn)}; give the dims the "
                                     f"model takes with --dim NAME=VALUE")
            notes.append(f"{err} at {_dims_text(drawn)}; drew larger dims")
            continue
        except Exception:           # noqa: BLE001 - onnxruntime's own errors: draw larger dims
            refused += 1
            continue
        try:
            with blas_threads(threads):
                return drawn, feed, want, vm.run(feed), notes
        except ShapeError as err:
            notes.append(f"relaxpack refuses {_dims_text(drawn)}: {err}; drew larger dims")
    if crash is not None:           # the last draw crashed onnxruntime
        raise crash
    feed = within_bounds(random_inputs(exe, drawn, rng), bounds, rng)
    want = _onnxruntime_run(session, feed, drawn, refused)
    with blas_threads(threads):
        try:
            return drawn, feed, want, vm.run(feed), notes
        except ShapeError as err:       # no draw that both take: the user knows the dims it takes
            if not drawn:
                raise
            raise ShapeError(f"relaxpack refuses the random inputs at {_dims_text(drawn)}: {err}; give the dims "
                             f"the model takes with --dim NAME=VALUE, or inputs it accepts with --inputs") from None


def _onnxruntime_run(session, feed: dict, dim_values: dict, refused_before: int = 0):
    """onnxruntime's outputs, or a one-line error that says which dims it refused (and how many
    draws before these it refused too: the last is not the only one)."""
    try:
        return session.run(None, feed)
    except OnnxruntimeCrash:
        raise
    except Exception as err:    # noqa: BLE001 - onnxruntime's own errors
        error = err
    at = f" at {_dims_text(dim_values)}" if dim_values else ""
    if refused_before:
        at += f" (and on the {refused_before} other draw{'s' if refused_before > 1 else ''} before)"
    hint = ("; give the dims the model takes with --dim NAME=VALUE, or inputs it accepts with --inputs"
            if dim_values else "")
    raise RelaxpackError(f"onnxruntime failed on these inputs{at}: {' '.join(str(error).split())}{hint}")


def _dims_text(dim_values: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in dim_values.items())


def _session(proto: onnx.ModelProto, threads: int | None, isolate: bool):
    """onnxruntime's session here, or (``isolate``) in a child process."""
    if not isolate:
        return onnxruntime_session(proto, threads=threads)
    try:
        return IsolatedSession(proto.SerializeToString(), threads)
    except OnnxruntimeFailure as err:
        raise RelaxpackError(f"onnxruntime cannot load the model: {err}") from None


def _same_signature(exe, session) -> None:
    """The executable takes the model's inputs and gives its outputs (else it was built from another model)."""
    ours = (exe.input_names(), list(exe.function("main").outputs))
    theirs = ([i.name for i in session.get_inputs()], [o.name for o in session.get_outputs()])
    for what, mine, model in (("inputs", ours[0], theirs[0]), ("outputs", ours[1], theirs[1])):
        if set(mine) != set(model):
            raise RelaxpackError(f"the archive's {what} {mine} are not the model's {model}: "
                                 f"was it built from this model?")


@dataclass
class NodeDivergence:
    node: str
    op_type: str
    output: str
    diff: OutputDiff
    #: why the node differs where that is not an error (rounding near-ties: ``check_ties``), else ""
    note: str = ""


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
                     rtol: float | None = None, atol: float | None = None,
                     opt_level: int = 2, threads: int | None = None) -> NodeDivergence | None:
    """Run both sides exposing every intermediate (relaxpack built at ``opt_level``; both with
    ``threads``, as the comparison ran); the first ONNX node (in graph order) one of whose outputs
    differs, or None when all agree."""
    proto = model if isinstance(model, onnx.ModelProto) else load_model(model)
    exposed = expose_intermediates(proto)
    session = onnxruntime_session(exposed, threads)
    names = [o.name for o in session.get_outputs()]
    want = dict(zip(names, session.run(None, dict(inputs))))
    with blas_threads(threads):
        got = VirtualMachine(build(from_onnx(exposed, dims=dims), opt_level=opt_level)).run(dict(inputs))
    for node in proto.graph.node:
        for name in node.output:
            if not name or name not in want:
                continue
            (diff,) = compare_outputs([name], got, [want[name]], rtol, atol)
            if not diff.passed:
                mine, theirs = {**inputs, **got}, {**inputs, **want}
                return NodeDivergence(node.name or "(unnamed)", node.op_type, name, diff,
                                      near_tie_note(node.input, name, mine, theirs)
                                      or order_tie_note(node, mine, theirs))
    return None

"""Running one generated graph through onnxruntime and relaxpack and comparing.

>>> outcome = run_case(random_case(seed=0, index=3))
>>> outcome.status          # ok | mismatch | crash | rejected | ort_limit | generator_error

One import, then one build per optimization level, each run by one VM at
every run's feeds and again at the first (a VM reuses its arena between
calls). Outputs must match onnxruntime's in dtype and shape exactly and in
value within the dtype's tolerance, with NaN in the same places; inputs
must come back unchanged.

``ort_limit``: onnxruntime could not create a session or run the model
(its own gap; the test discards such cases and counts them).
``generator_error``: onnxruntime's output shapes differ from the ones the
generator predicted (a bug in the generator, never discarded). Both
disagreements with onnxruntime are judged by ONNX's reference evaluator:
where it agrees with the generator's shapes, or with relaxpack's values
of an output where onnxruntime's differ (e.g.
onnxruntime's align_corners Resize divides by the rounded output length,
the spec's formulas and the reference by the unrounded one), the case is
``ort_limit``.
"""

from __future__ import annotations

import traceback
import warnings
from dataclasses import dataclass

import numpy as np

import relaxpack
from relaxpack.check import reference_agrees, reference_output
from relaxpack.errors import RelaxpackError
from relaxpack.runtime import VirtualMachine

from .strategies import GraphCase

OPT_LEVELS = (0, 2)
#: dtype -> (rtol, atol relative to the output's largest finite magnitude, at least 1)
TOLERANCES = {np.dtype("float32"): (1e-4, 1e-4), np.dtype("float16"): (1e-2, 1e-2),
              np.dtype("float64"): (1e-7, 1e-7)}


@dataclass
class Outcome:
    status: str
    detail: str = ""
    stage: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def __str__(self):
        return f"{self.status} at {self.stage}: {self.detail}" if self.stage else f"{self.status}: {self.detail}"


def ort_session(model):
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.log_severity_level = 4
    options.intra_op_num_threads = 1
    # onnxruntime's graph optimizations change numerics (e.g. fp16 Div + Cast to float32 fused and computed
    # in float32): the reference runs the graph as written
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def compare(got, want, fp16: bool = False) -> str | None:
    """Why ``got`` differs from onnxruntime's ``want``, or None; ``fp16``: fp16 tolerances for any float."""
    with np.errstate(all="ignore"):
        return _compare(got, want, fp16)


def _compare(got, want, fp16=False) -> str | None:
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype or got.shape != want.shape:
        return f"got {got.dtype}{list(got.shape)}, onnxruntime {want.dtype}{list(want.shape)}"
    if want.dtype.kind not in "fc":
        bad = got != want
        if np.any(bad):
            i = tuple(np.argwhere(bad)[0])
            return f"{int(bad.sum())} of {want.size} values differ, e.g. at {i}: {got[i]!r} vs {want[i]!r}"
        return None
    a, b = got.astype(np.float64), want.astype(np.float64)
    nan_a, nan_b = np.isnan(a), np.isnan(b)
    if np.any(nan_a != nan_b):
        i = tuple(np.argwhere(nan_a != nan_b)[0])
        return f"NaN in different places, e.g. at {i}: {got[i]!r} vs {want[i]!r}"
    inf_b = np.isinf(b)
    if np.any(np.isinf(a) != inf_b) or np.any(a[inf_b] != b[inf_b]):
        i = tuple(np.argwhere((np.isinf(a) != inf_b) | (inf_b & (a != b)))[0])
        return f"Inf in different places, e.g. at {i}: {got[i]!r} vs {want[i]!r}"
    finite = ~nan_b & ~inf_b
    if not finite.any():
        return None
    rtol, atol = TOLERANCES[np.dtype("float16") if fp16 else want.dtype]
    scale = max(1.0, float(np.abs(b[finite]).max()))
    err = np.abs(a - b)
    bad = finite & (err > atol * scale + rtol * np.abs(b))
    if np.any(bad):
        i = tuple(np.argwhere(bad)[0])
        return (f"{int(bad.sum())} of {want.size} values out of tolerance (max abs error "
                f"{float(err[finite].max()):.3g}), e.g. at {i}: {got[i]!r} vs {want[i]!r}")
    return None


def reference(case: GraphCase) -> tuple[list[list[np.ndarray]] | None, Outcome | None]:
    """onnxruntime's outputs for every run, or the outcome that ends the case."""
    try:
        session = ort_session(case.model)
    except Exception as err:
        return None, Outcome("ort_limit", str(err).splitlines()[0][:300], "onnxruntime session")
    names = [o.name for o in case.model.graph.output]
    refs = []
    for r, feeds in enumerate(case.feeds):
        try:
            with np.errstate(all="ignore"):
                outs = session.run(None, feeds)
        except Exception as err:
            return None, Outcome("ort_limit", str(err).splitlines()[0][:300], f"onnxruntime run {r}")
        for name, out in zip(names, outs):
            want = case.expected_shapes.get(name, [None] * len(case.feeds))[r]
            if want is not None and tuple(out.shape) != tuple(want):
                return None, _shape_disagreement(case, feeds, name, out.shape, want, r)
        refs.append(outs)
    return refs, None


def _shape_disagreement(case, feeds, name, got, want, r) -> Outcome:
    """onnxruntime's shape is not the predicted one: whose fault? ONNX's reference evaluator decides."""
    ref = reference_output(case.model, feeds, name)
    if ref is not None and tuple(np.shape(ref)) == tuple(want):
        return Outcome("ort_limit", f"{name}: onnxruntime's shape {tuple(got)} is not the ONNX reference "
                                    f"evaluator's {tuple(want)}", f"onnxruntime run {r}")
    return Outcome("generator_error", f"{name}: onnxruntime shape {tuple(got)}, generator predicted {want}",
                   f"run {r}")


def _reference_agrees(case: GraphCase, feeds: dict, name: str, got) -> bool:
    """Whether ONNX's reference evaluator computes relaxpack's output ``got`` for ``name``
    (the other outputs agree with onnxruntime already): ``relaxpack check``'s judgement."""
    return reference_agrees(case.model, feeds, name, got, lambda a, b: compare(a, b, case.fp16) is None)


def run_case(case: GraphCase, opt_levels=OPT_LEVELS) -> Outcome:
    refs, stop = reference(case)
    if stop is not None:
        return stop
    names = [o.name for o in case.model.graph.output]
    stage = "import"
    try:
        mod = relaxpack.from_onnx(case.model, dims=case.dims)
        for level in opt_levels:
            stage = f"build -O{level}"
            vm = VirtualMachine(relaxpack.build(mod, opt_level=level))
            for r in [*range(len(case.feeds)), 0]:
                stage = f"-O{level} run {r}"
                feeds = {k: v.copy() for k, v in case.feeds[r].items()}
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore")
                    got = vm.run(feeds)
                for k, v in feeds.items():
                    if not np.array_equal(v, case.feeds[r][k], equal_nan=v.dtype.kind == "f"):
                        return Outcome("mismatch", f"input {k!r} was modified by the run", stage)
                for name, want in zip(names, refs[r]):
                    problem = compare(got[name], want, case.fp16)
                    if problem:
                        if _reference_agrees(case, case.feeds[r], name, got[name]):
                            return Outcome("ort_limit", f"output {name!r}: onnxruntime's values are not the ONNX "
                                                        f"reference evaluator's, relaxpack's are ({problem})", stage)
                        if case.fp16 and first_divergence(case.model, case.feeds[r], level) == AGREE:
                            # onnxruntime runs float16 chains in float32 and drops the casts between
                            # them: with every intermediate an output (casts kept) it agrees
                            return Outcome("ort_limit", f"output {name!r}: onnxruntime's float16 values depend on "
                                                        f"which values are outputs ({problem})", stage)
                        return Outcome("mismatch", f"output {name!r}: {problem}", stage)
    except RelaxpackError as err:
        return Outcome("rejected", f"{type(err).__name__}: {str(err).splitlines()[0][:400]}", stage)
    except Exception as err:
        tb = traceback.format_exception(type(err), err, err.__traceback__)
        return Outcome("crash", f"{type(err).__name__}: {err}\n{''.join(tb[-6:])}", stage)
    return Outcome("ok")


AGREE = "every intermediate agrees"


def first_divergence(model, feeds: dict, opt_level: int = 0) -> str:
    """The first top-level node whose output differs between relaxpack and onnxruntime
    (every node output made a graph output), with its op and inputs: for triage."""
    import onnx
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    outputs = {o.name for o in probe.graph.output}
    order = [o for node in probe.graph.node for o in node.output if o]
    for name in order:
        if name not in outputs:
            probe.graph.output.append(onnx.ValueInfoProto(name=name))
    try:
        want = dict(zip([o.name for o in probe.graph.output], ort_session(probe).run(None, feeds)))
        with np.errstate(all="ignore"):
            got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(probe), opt_level=opt_level)).run(feeds)
    except Exception as err:
        return f"cannot compare intermediates: {type(err).__name__}: {str(err)[:200]}"
    producer = {o: node for node in probe.graph.node for o in node.output}
    for name in order:
        problem = compare(got[name], want[name])
        if problem:
            node = producer[name]
            ins = ", ".join(f"{i}: {np.asarray(want[i]).dtype}{list(np.shape(want[i]))}" if i in want else i
                            for i in node.input)
            return f"{node.op_type} -> {name}: {problem} (inputs {ins})"
    return AGREE

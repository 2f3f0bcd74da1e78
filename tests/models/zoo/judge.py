"""How a zoo model is judged: one conversion, a build per level, every tested shape against a reference.

``check(name, level, workdir)`` converts the model once (``relaxpack.from_onnx``
with no dims: one module with symbolic dims, cached for the other level),
builds it at ``level``, saves and loads the archive, runs it at every shape
the manifest lists and compares each output with the model's reference. It
raises ``ZooMismatch`` (an AssertionError) naming the shape and output, or
whatever relaxpack raised.

The references and the tolerances (``JUDGES``, the one place they are stated):

- ``float32``: onnxruntime, CPU, 1 thread, default graph optimizations.
- ``float16``: the same; float16 tolerance (see below).
- ``qdq-one-step``: onnxruntime with ``ORT_DISABLE_ALL``, so that it runs
  QuantizeLinear / DequantizeLinear and the float ops between them as
  written (its optimizer would fuse them into integer kernels, which round
  differently and, on CPUs without VNNI, saturate u8 x s8 products in int16
  pairs). Each output may differ by at most one quantization step (the scale
  of the DequantizeLinear that makes it, recorded in the manifest): a float
  difference at the last bit inside the network can move one rounding across
  a .5 boundary, and that is one step, not an error. Measured between two
  dequantized values, one step is the scale up to the rounding of each value
  (one ulp of each in its dtype: ``(q - zp) * s`` rounds once).
- ``qoperator-float``: QOperator models (QLinearConv, QGemm, com.microsoft
  QLinear*) whose outputs come through float ops that can widen one step
  (a LayerNormalization after the last DequantizeLinear): onnxruntime with
  ``ORT_DISABLE_ALL``, float32 tolerance. relaxpack computes each integer op
  as onnxruntime's kernel does, bit for bit; QOperator models whose outputs
  come from a DequantizeLinear are judged ``qdq-one-step``. Their weights are
  7-bit (``reduce_range``), so onnxruntime's u8 x s8 GEMM cannot saturate.
- ``reference``: dynamically quantized models (DynamicQuantizeLinear +
  MatMulInteger / ConvInteger) are judged against onnx's reference evaluator
  (exact integer products in numpy), never onnxruntime, whose u8 x s8 GEMM
  saturates int16 pair sums on CPUs without VNNI and so depends on the
  machine; float32 tolerance.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx

import relaxpack
from relaxpack.compare import compare_maps, is_maps
from relaxpack.runtime import VirtualMachine, load

from .inputs import make_inputs

HERE = Path(__file__).resolve().parent
MANIFEST = json.loads((HERE / "manifest.json").read_text())
MODELS = {e["name"]: e for e in MANIFEST["models"]}
LEVELS = (0, 2)


@dataclass(frozen=True)
class Judge:
    reference: str       # "onnxruntime", "onnxruntime-no-opt" or "onnx-reference"
    rtol: float
    atol: float
    why: str


JUDGES = {
    "float32": Judge("onnxruntime", 1e-4, 1e-4,
                     "float32 models of unit-scale activations: sums in another order differ by a few ulp per "
                     "op; 1e-4 is ~1000 ulp at 1.0 and far below any wrong answer"),
    "float16": Judge("onnxruntime", 1e-2, 1e-2,
                     "about 10 float16 ulp at 1.0: each op rounds its result to float16, and onnxruntime's CPU "
                     "provider computes ops without a float16 kernel in float32 between casts"),
    "qdq-one-step": Judge("onnxruntime-no-opt", 0.0, 0.0,
                          "within one quantization step of each output (its DequantizeLinear's scale)"),
    "qoperator-float": Judge("onnxruntime-no-opt", 1e-4, 1e-4,
                             "QOperator models whose outputs leave through float ops that can widen one "
                             "quantization step (BERT's last LayerNormalization): relaxpack emulates "
                             "onnxruntime's integer kernels bit for bit, so float32 tolerance"),
    "reference": Judge("onnx-reference", 1e-4, 1e-4,
                       "exact integer products on both sides; float32 tolerance for the float ops around them"),
}


class ZooMismatch(AssertionError):
    """relaxpack's output differs from the reference beyond the model's judge."""


@functools.lru_cache(maxsize=1)
def converted(name: str):
    """The IRModule of ``name``, converted once with no dims (the other level reuses it)."""
    return relaxpack.from_onnx(str(HERE / MODELS[name]["file"]))


@functools.lru_cache(maxsize=1)
def expected(name: str) -> tuple:
    """For each tested shape of ``name``: (dims, feeds, reference outputs)."""
    entry = MODELS[name]
    run = reference_runner(entry)
    cases = []
    for dims in entry["shapes"]:
        feeds = make_inputs(entry, dims)
        cases.append((dims, feeds, run(feeds)))
    return tuple(cases)


def reference_runner(entry: dict):
    """A function feeds -> list of outputs, in the graph's output order."""
    path = str(HERE / entry["file"])
    kind = JUDGES[entry["judge"]].reference
    if kind == "onnx-reference":
        from onnx.reference import ReferenceEvaluator
        evaluator = ReferenceEvaluator(onnx.load(path), new_ops=[dequantize_linear_before_19()])
        return lambda feeds: evaluator.run(None, feeds)
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if kind == "onnxruntime-no-opt":
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    return lambda feeds: session.run(None, feeds)


def dequantize_linear_before_19():
    """onnx's reference evaluator implements DequantizeLinear from opset 19 on; opsets 13-18 define
    ``(x - zero_point) * scale`` (per tensor, or per channel along ``axis``) for int8/uint8/int32."""
    from onnx.reference.op_run import OpRun

    class DequantizeLinear(OpRun):
        op_domain = ""

        def _run(self, x, scale, zero_point=None, axis=1, **_):
            shape = [1] * x.ndim
            if scale.ndim == 1 and x.ndim:
                shape[axis] = -1
            zero = 0 if zero_point is None else zero_point.astype(np.float32).reshape(shape)
            return ((x.astype(np.float32) - zero) * scale.reshape(shape)).astype(scale.dtype),

    return DequantizeLinear


def check(name: str, level: int, workdir: Path) -> None:
    """Convert (cached), build at ``level``, save and load the archive, and judge every tested shape."""
    entry = MODELS[name]
    exe = relaxpack.build(converted(name), opt_level=level)
    archive = Path(workdir) / f"{name}-O{level}.rpk"
    exe.save(archive)
    vm = VirtualMachine(load(archive))
    outputs = [o.name for o in onnx.load(str(HERE / entry["file"]), load_external_data=False).graph.output]
    for dims, feeds, want in expected(name):
        got = vm.run(feeds)
        for out, ref in zip(outputs, want):
            problem = judge_output(entry, out, got[out], ref)
            if problem:
                raise ZooMismatch(f"{name} -O{level} at {dims}: {out} {problem}")


def judge_output(entry: dict, name: str, got, want) -> str | None:
    """None when ``got`` passes ``entry``'s judge against ``want``, else what is wrong, in a few words.
    A map output (ZipMap's list of dicts) must have the reference's structure exactly (as many maps,
    the same keys in the same order) and its values within the judge's tolerance."""
    judge = JUDGES[entry["judge"]]
    if is_maps(want):
        diff = compare_maps(name, got, want, judge.rtol, judge.atol)
        return None if diff.passed else (diff.note or f"differs by {diff.max_abs:.3g} (max abs; rtol "
                                                      f"{judge.rtol:g}, atol {judge.atol:g})")
    got, want = np.asarray(got), np.asarray(want)
    if got.shape != want.shape or got.dtype != want.dtype:
        return f"is {got.dtype}{list(got.shape)}, reference {want.dtype}{list(want.shape)}"
    if want.dtype.kind not in "fc":
        bad = int(np.count_nonzero(got != want))
        return f"differs in {bad} of {want.size} values" if bad else None
    a, b = got.astype(np.float64), want.astype(np.float64)
    same = (a == b) | (np.isnan(a) & np.isnan(b))
    err = np.where(same, 0.0, np.abs(a - b))
    max_err = float(np.nanmax(np.where(np.isnan(err), np.inf, err))) if err.size else 0.0
    if entry["judge"] == "qdq-one-step":
        step = entry["output_steps"][name]
        ok = bool(np.all(err <= step * (1 + 1e-6) + _rounding(got) + _rounding(want)))
        return None if ok else f"differs by {max_err:.4g}, over one quantization step {step:.4g}"
    ok = bool(np.all(err <= judge.atol + judge.rtol * np.abs(b)))
    return None if ok else (f"differs by {max_err:.3g} (max abs; rtol {judge.rtol:g}, atol {judge.atol:g})")


def _rounding(values: np.ndarray) -> np.ndarray:
    """One ulp of each value in its own float dtype, as float64: what rounding a dequantized
    ``(q - zp) * s`` may have moved it by (twice over, generously)."""
    with np.errstate(invalid="ignore"):
        return np.nan_to_num(np.spacing(np.abs(values)).astype(np.float64), nan=0.0, posinf=0.0)


"""How much arithmetic a benchmark row needs, and the least time it can take.

:func:`count_macs` (or a :class:`MacCounter`, kept for several inputs)
counts the multiply-adds of the products a model does (Conv,
ConvTranspose, MatMul, Gemm, LSTM, GRU, RNN) at one setting, from the
shapes onnxruntime gives every operand on that setting's inputs (the shapes
are exact whatever the graph computes them from). :func:`sgemm_peak`
measures this machine's single-thread float32 GEMM rate with numpy's BLAS.
Together they give a compute floor: ``2 * macs / peak``, the time the
products alone take at the best rate this machine reaches. A second floor is
memory: :func:`product_weight_bytes` (the weights those products read every
run) at :func:`read_rate`, the best rate numpy reads that many bytes. No
runtime that does the same work on the same core runs a row in less than
the larger of the two. The multiply-adds are the direct algorithm's: a fast
convolution algorithm does fewer (Winograd F(2x2, 3x3): 2.25x fewer for a
3x3 conv; none fewer for 1x1 convs and matrix products at these sizes), so
on a conv row the floor holds for direct arithmetic only.

The floor is what the issue's "20x faster than the reference evaluator" bar
is checked against: where ``reference ms / 20`` is below it, the bar cannot
be met by relaxpack or by anything else on this machine doing that
arithmetic (the reference evaluator calls the same BLAS for the products).

>>> import benchmarks.models as m                                # doctest: +SKIP
>>> bench = m.MODELS["mlp"]("full")                              # doctest: +SKIP
>>> count_macs(bench.model, bench.settings[0].feeds(0))          # doctest: +SKIP
535040
"""

from __future__ import annotations

import math
import time
from typing import Mapping

import numpy as np
import onnx

#: ops whose products are counted
COUNTED = ("Conv", "ConvTranspose", "MatMul", "Gemm", "LSTM", "GRU", "RNN")
#: gate count of the recurrent ops
_GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}


class MacCounter:
    """Counts the multiply-adds of ``model``'s counted ops on any inputs: one
    onnxruntime session, made once, whose graph outputs are every operand of
    those ops (the probe copy of a large model is built once per model, not
    per setting)."""

    def __init__(self, model: onnx.ModelProto):
        import onnxruntime as ort

        probe = onnx.ModelProto()
        probe.CopyFrom(model)
        graph = probe.graph
        self.nodes = [n for n in model.graph.node if n.op_type in COUNTED]
        self.weights = {i.name: tuple(i.dims) for i in graph.initializer}
        wanted = [o.name for o in graph.output]
        for node in self.nodes:
            wanted += [v for v in (*node.input, *node.output) if v and v not in self.weights]
        self.wanted = list(dict.fromkeys(wanted))
        del graph.output[:]
        graph.output.extend(onnx.ValueInfoProto(name=v) for v in self.wanted)
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        self.session = ort.InferenceSession(probe.SerializeToString(), options,
                                            providers=["CPUExecutionProvider"])

    def count(self, feeds: Mapping[str, np.ndarray]) -> int:
        """Multiply-adds of the counted ops run on ``feeds``."""
        values = self.session.run(self.wanted, dict(feeds))
        shapes = {**self.weights, **{name: tuple(np.shape(v)) for name, v in zip(self.wanted, values)}}
        return sum(_node_macs(node, shapes) for node in self.nodes)


def count_macs(model: onnx.ModelProto, feeds: Mapping[str, np.ndarray]) -> int:
    """Multiply-adds of the counted ops of ``model`` run on ``feeds``."""
    return MacCounter(model).count(feeds)


def product_weight_bytes(model: onnx.ModelProto) -> int:
    """Bytes of the initializers the counted ops take as operands: each run
    reads all of them (unlike, say, an embedding table a Gather samples)."""
    sizes = {i.name: math.prod(i.dims) * onnx.helper.tensor_dtype_to_np_dtype(i.data_type).itemsize
             for i in model.graph.initializer}
    used = {v for node in model.graph.node if node.op_type in COUNTED for v in node.input if v in sizes}
    return sum(sizes[v] for v in used)


def _node_macs(node: onnx.NodeProto, shapes: Mapping[str, tuple]) -> int:
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    if node.op_type == "Conv":
        weight, out = shapes[node.input[1]], shapes[node.output[0]]
        return math.prod(out) * math.prod(weight[1:])
    if node.op_type == "ConvTranspose":
        x, weight = shapes[node.input[0]], shapes[node.input[1]]
        return math.prod(x) * math.prod(weight[1:])
    if node.op_type == "MatMul":
        a, out = shapes[node.input[0]], shapes[node.output[0]]
        return math.prod(out) * a[-1]
    if node.op_type == "Gemm":
        a, out = shapes[node.input[0]], shapes[node.output[0]]
        return math.prod(out) * a[0 if attrs.get("transA", 0) else 1]
    x, weight = shapes[node.input[0]], shapes[node.input[1]]
    seq_batch = x[0] * x[1]
    hidden = weight[1] // _GATES[node.op_type]
    return weight[0] * seq_batch * weight[1] * (weight[2] + hidden)


def read_rate(nbytes: int, repeat: int = 20) -> float:
    """Bytes/s of the fastest of ``repeat`` float32 dot products of a
    ``nbytes`` buffer with itself, run back to back: reading from whatever
    cache level holds that much, the best case for a run's weights."""
    a = np.ones(max(nbytes // 4, 1), np.float32)
    return a.nbytes / _fastest(lambda: np.dot(a, a), repeat)


def sgemm_peak(size: int = 1024, repeat: int = 7) -> float:
    """FLOP/s of the fastest of ``repeat`` float32 ``size``-cubed products
    through numpy's BLAS, in the calling process's thread setting."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((size, size), dtype=np.float32) for _ in range(2))
    out = np.empty_like(a)
    return 2 * size ** 3 / _fastest(lambda: np.matmul(a, b, out=out), repeat)


def _fastest(fn, repeat: int) -> float:
    """Seconds of the fastest of ``repeat`` calls of ``fn``, after one untimed call."""
    fn()
    best = math.inf
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def bar_rows(rows: list[dict], peak_gflops: float | None) -> list[dict]:
    """For each timed row: the time the 20x-over-reference bar allows, the
    floor (the larger of the products at ``peak_gflops`` and the weight reads
    at their best rate, ``weight_read_ms``), and whether the bar is met,
    missed, or below the floor (no runtime on this machine doing the counted
    arithmetic can meet it)."""
    out = []
    for r in rows:
        ref, ours, gflop = r["reference"].get("ms"), r["relaxpack"].get("ms"), r.get("gflop")
        if not ref or not ours:
            continue
        allowed = ref / 20
        compute = 1e3 * gflop / peak_gflops if gflop is not None and peak_gflops else None
        floors = [f for f in (compute, r.get("weight_read_ms")) if f is not None]
        floor = max(floors) if floors else None
        verdict = ("met" if ours <= allowed else
                   "below the floor" if floor is not None and allowed < floor else "not met")
        out.append({"row": r["row"], "reference_ms": ref, "allowed_ms": allowed, "gflop": gflop,
                    "compute_ms": compute, "weight_read_ms": r.get("weight_read_ms"), "floor_ms": floor,
                    "ort_1thread_ms": r["ort_1thread"].get("ms"), "relaxpack_ms": ours, "verdict": verdict})
    return out


def bar_markdown(rows: list[dict], peak_gflops: float | None) -> str:
    """The table of :func:`bar_rows`, with a line on how it is read."""
    def ms(v):
        return "" if v is None else f"{v:.3g}"
    rate = f"{peak_gflops:.0f} GFLOP/s" if peak_gflops else "not measured"
    lines = ["The 20x-over-reference bar against the floor of each row (`benchmarks/flops.py`): GFLOP is 2 x the "
             "multiply-adds of its Conv/ConvTranspose/MatMul/Gemm/LSTM/GRU ops; compute is that work at this "
             f"machine's single-thread float32 GEMM rate ({rate}, measured by the worker with numpy's BLAS); "
             "weight reads is the time to read those ops' weights once at the best rate numpy reads a buffer of "
             "that size (warm, back to back). Where the bar allows less than the larger of the two, no runtime "
             "doing this work on one core of this machine meets it (for conv rows: doing the direct algorithm's "
             "multiply-adds; Winograd does up to 2.25x fewer for 3x3 convs).", "",
             "| model | reference ms | bar: at most ms | GFLOP | compute ms | weight reads ms | ORT 1-thread ms "
             "| relaxpack ms | bar |", "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"]
    for b in bar_rows(rows, peak_gflops):
        lines.append(f"| {b['row']} | {ms(b['reference_ms'])} | {ms(b['allowed_ms'])} | {ms(b['gflop'])} | "
                     f"{ms(b['compute_ms'])} | {ms(b['weight_read_ms'])} | {ms(b['ort_1thread_ms'])} | "
                     f"{ms(b['relaxpack_ms'])} | {b['verdict']} |")
    return "\n".join(lines)

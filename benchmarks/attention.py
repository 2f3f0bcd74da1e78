"""Attention at long sequences: what FuseAttention saves in memory and time.

    python -m benchmarks.attention [--seq 512,2048,4096] [--heads 8] [--depth 64] [-n 5]

One ONNX attention (q @ k^T, scaled, a padding mask added, softmax, @ v) on (1, heads, seq,
depth) float32 inputs, built at -O2 with FuseAttention (``nn.attention``: blocks of query rows)
and without it (the unfused products and softmax), and run in this process with onnxruntime
(1 thread) for comparison: median times over ``-n`` runs, alternating, and each relaxpack
build's peak traced memory during the first run of a new VM (``tracemalloc``: the arena it
plans for the shape, workspaces included, and what kernels allocate). BLAS at 1 thread.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h

import relaxpack
from relaxpack.passes.core.context import PassContext
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.blas import blas_threads


def attention_model(heads: int, depth: int):
    """q, k, v (batch, heads, seq, depth) and a (batch, 1, 1, seq) mask -> the attention."""
    shape = ["batch", heads, "seq", depth]
    nodes = [h.make_node("Transpose", ["k"], ["kt"], perm=[0, 1, 3, 2]),
             h.make_node("MatMul", ["q", "kt"], ["s"]),
             h.make_node("Mul", ["s", "scale"], ["scaled"]),
             h.make_node("Add", ["scaled", "mask"], ["masked"]),
             h.make_node("Softmax", ["masked"], ["p"], axis=-1),
             h.make_node("MatMul", ["p", "v"], ["y"])]
    graph = h.make_graph(
        nodes, "attention",
        [h.make_tensor_value_info(n, T.FLOAT, shape) for n in ("q", "k", "v")]
        + [h.make_tensor_value_info("mask", T.FLOAT, ["batch", 1, 1, "seq"])],
        [h.make_tensor_value_info("y", T.FLOAT, shape)],
        [h.make_tensor("scale", T.FLOAT, [], [depth ** -0.5])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def _build(model, fused: bool):
    with PassContext(disabled_passes=() if fused else ("FuseAttention",)):
        exe = relaxpack.build(relaxpack.from_onnx(model), opt_level=2)
    calls = exe.metadata["ir"].count("nn.attention")
    assert (calls > 0) == fused, f"expected {'a' if fused else 'no'} nn.attention call"
    return exe


def _peak_mib(exe, feeds: dict) -> float:
    """The peak traced memory of a new VM's first run (its arena is allocated then)."""
    vm = VirtualMachine(exe)
    tracemalloc.start()
    try:
        vm.run(feeds)
        return tracemalloc.get_traced_memory()[1] / 2 ** 20
    finally:
        tracemalloc.stop()


def _medians(runs: dict, n: int) -> dict:
    """Median ms of each run, the runs alternating (n rounds, after one warm-up each)."""
    times = {name: [] for name in runs}
    for run in runs.values():
        run()
    for _ in range(n):
        for name, run in runs.items():
            t0 = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t0)
    return {name: float(np.median(ts)) * 1e3 for name, ts in times.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", default="512,2048,4096")
    parser.add_argument("--heads", type=int, default=8)
    parser.add_argument("--depth", type=int, default=64)
    parser.add_argument("-n", type=int, default=5)
    args = parser.parse_args(argv)
    with blas_threads(1):
        return _table(args)


def _table(args) -> int:
    model = attention_model(args.heads, args.depth)
    exes = _build(model, True), _build(model, False)
    fused, unfused = VirtualMachine(exes[0]), VirtualMachine(exes[1])
    try:
        import onnxruntime as ort
        options = ort.SessionOptions()
        options.intra_op_num_threads = options.inter_op_num_threads = 1
        session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    except ImportError:
        session = None
    print(f"Attention, 1 x {args.heads} heads x depth {args.depth}, float32, 1 thread; times are medians of {args.n}")
    print()
    print("| seq | scores (one copy) | fused ms | unfused ms | onnxruntime ms | fused / onnxruntime "
          "| fused peak | unfused peak | max abs difference |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    rng = np.random.default_rng(0)
    for seq in (int(s) for s in args.seq.split(",")):
        shape = (1, args.heads, seq, args.depth)
        feeds = {n: rng.standard_normal(shape).astype(np.float32) for n in ("q", "k", "v")}
        feeds["mask"] = np.where(rng.random((1, 1, 1, seq)) < 0.1, -1e4, 0.0).astype(np.float32)
        runs = {"fused": lambda: fused.run(feeds), "unfused": lambda: unfused.run(feeds)}
        if session is not None:
            runs["ort"] = lambda: session.run(None, feeds)
        ms = _medians(runs, args.n)
        peaks = _peak_mib(exes[0], feeds), _peak_mib(exes[1], feeds)
        diff = float(np.abs(fused.run(feeds)["y"] - unfused.run(feeds)["y"]).max())
        ort_ms = ms.get("ort")
        ort_text, ratio = ("", "") if ort_ms is None else (f"{ort_ms:.1f}", f"{ms['fused'] / ort_ms:.2f}")
        scores = args.heads * seq * seq * 4 / 2 ** 20
        print(f"| {seq} | {scores:.0f} MiB | {ms['fused']:.1f} | {ms['unfused']:.1f} | {ort_text} | {ratio} | "
              f"{peaks[0]:.0f} MiB | {peaks[1]:.0f} MiB | {diff:.1e} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

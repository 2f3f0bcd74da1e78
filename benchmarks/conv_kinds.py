"""Where a CNN's conv time goes, by kind of conv, against onnxruntime's per-node times.

    python -m benchmarks.conv_kinds [--models a,b] [--shape 0] [--rounds 15] [--calls 20] [--detail]
                                    [--ort-optimizer all|off]

For each zoo model (default: the depthwise and small-conv ones of issue 18) at one manifest shape,
every ``nn.conv`` / ``nn.conv_bias_act`` instruction of the ``-O2`` archive is timed inside real
``vm.run`` calls: the per-instruction callable the VM specializes is wrapped with a timer, and
each instruction's figure is the minimum over rounds of its mean per call (the minimum: the
machines this runs on are shared). BLAS runs on one thread, as onnxruntime does. Instructions are grouped by
kind (depthwise KxK stride s, pointwise 1x1, Conv1d, other KxK; and the layout they run in). The
whole model is timed the same way (the calling thread's CPU time), interleaved with onnxruntime, and onnxruntime's own
per-node kernel times come from its profiler (a separate session: profiling slows it a little).
``--detail`` lists the instructions with their shapes beside onnxruntime's Conv nodes paired in
execution order (right for the chain CNNs of the zoo; onnxruntime renames the nodes it fuses);
its conv nodes are float convs and the integer ones of quantized models (:data:`ORT_CONV_OPS`:
QLinearConv, and the QDQ convs its optimizer fuses into it). onnxruntime runs with all its graph
optimizations, as the zoo benchmark compares against (its session default); ``--ort-optimizer off``
times and profiles it without them (a QDQ model then runs DequantizeLinear, a float Conv and
QuantizeLinear per conv). Nothing here asserts on speed.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks.zoo_worker import ort_session

DEFAULT_MODELS = ("shufflenet_v2_dynamo,shufflenet_v2_ts,mobilenet_v2_dynamo,mobilenet_v3_dynamo,"
                  "efficientnet_dynamo,whisper_frontend_ts,silero_vad_like,crnn_rec_dynamo")

#: the kernels whose instructions are timed
CONV_KERNELS = ("nn.conv_bias_act", "nn.conv")
#: onnxruntime's op types of conv nodes (float, fused float, integer)
ORT_CONV_OPS = ("Conv", "FusedConv", "NhwcFusedConv", "QLinearConv", "ConvInteger")


class ConvTimer:
    """Wraps the per-instruction specialization of the conv kernels with a CPU-time timer,
    recording per instruction its attributes, operand shapes and time."""

    def __init__(self):
        from relaxpack.runtime.kernels._registry import KERNELS
        self.kernels = [KERNELS[name].fn for name in CONV_KERNELS]
        self.saved = [k.specialize_attrs for k in self.kernels]
        self.records: list[dict] = []

    def __enter__(self):
        for kernel, specialize in zip(self.kernels, self.saved):
            kernel.specialize_attrs = self._wrap(specialize)
        return self

    def __exit__(self, *exc):
        for kernel, specialize in zip(self.kernels, self.saved):
            kernel.specialize_attrs = specialize

    def _wrap(self, specialize):
        def timed_specialize(attrs, constant):
            call = specialize(attrs, constant)
            record = {"attrs": attrs, "seconds": 0.0, "calls": 0, "shapes": None}
            self.records.append(record)
            clock = time.perf_counter      # (thread_time is a system call: ~1 us a read)

            def timed(*args, **kwargs):
                start = clock()
                call(*args, **kwargs)
                record["seconds"] += clock() - start
                record["calls"] += 1
                if record["shapes"] is None:
                    record["shapes"] = (args[0].shape, args[1].shape, kwargs["out"].shape)
            return timed
        return timed_specialize

    def reset(self) -> None:
        for record in self.records:
            record["seconds"], record["calls"] = 0.0, 0


def kind(record: dict) -> str:
    """``dw3x3/s2 NHWC``, ``pw1x1/s1 NCHW``, ``conv1d k3/s2``, ``conv3x3/s1 g1 NCHW``."""
    attrs, (data, weight, _) = record["attrs"], record["shapes"]
    nhwc = attrs["data_layout"] == "NHWC"
    channels = data[-1] if nhwc else data[1]
    kernel = tuple(weight[:-2]) if nhwc else tuple(weight[2:])
    stride = max(attrs["strides"])
    size = "x".join(map(str, kernel))
    if attrs["groups"] > 1 and attrs["groups"] == channels:
        return f"dw{size}/s{stride} {attrs['data_layout']}"
    if all(k == 1 for k in kernel):
        return f"pw{size}/s{stride} {attrs['data_layout']}"
    if len(kernel) == 1:
        return f"conv1d k{kernel[0]}/s{stride}"
    return f"conv{size}/s{stride} g{attrs['groups']} {attrs['data_layout']}"


def ort_options(optimize: bool):
    """onnxruntime's session options: 1 thread, with all graph optimizations (its default) or none."""
    import onnxruntime as ort
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.log_severity_level = 3
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return options


def ort_node_times(path: Path, feeds: dict, runs: int, optimize: bool = True) -> tuple[dict, dict]:
    """onnxruntime's (1 thread) kernel seconds per run for each node (from its median call), and
    each node's op type."""
    import onnxruntime as ort
    options = ort_options(optimize)
    options.enable_profiling = True
    with tempfile.TemporaryDirectory() as tmp:
        options.profile_file_prefix = os.path.join(tmp, "ort")
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        for _ in range(runs):
            session.run(None, feeds)
        events = json.loads(Path(session.end_profiling()).read_text())
    durations, ops = collections.defaultdict(list), {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            node = event["name"][:-len("_kernel_time")]
            durations[node].append(event["dur"] * 1e-6)
            ops[node] = event["args"].get("op_name")
    # the median run of each node (a node may run more than once a run: a loop's body)
    return {node: statistics.median(d) * len(d) / runs for node, d in durations.items()}, ops


def measure(name: str, shape_index: int, rounds: int, calls: int, detail: bool, ort_optimize: bool = True) -> None:
    import onnxruntime as ort

    import relaxpack
    from relaxpack.runtime import VirtualMachine
    from relaxpack.runtime.blas import set_blas_threads
    from tests.models.zoo.inputs import make_inputs
    from tests.models.zoo.judge import HERE, MODELS
    entry = MODELS[name]
    shape = entry["shapes"][shape_index]
    path = HERE / entry["file"]
    feeds = make_inputs(entry, shape)
    set_blas_threads(1)
    with ConvTimer() as timer:
        vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(str(path)), opt_level=2))
        session = ort_session(path, one_thread=True) if ort_optimize else \
            ort.InferenceSession(str(path), ort_options(False), providers=["CPUExecutionProvider"])
        for _ in range(3):
            vm.run(feeds)
            session.run(None, feeds)
        best = [float("inf")] * len(timer.records)
        ours = theirs = float("inf")
        for _ in range(rounds):
            timer.reset()
            start = time.thread_time()
            for _ in range(calls):
                vm.run(feeds)
            ours = min(ours, (time.thread_time() - start) / calls)
            best = [min(b, r["seconds"] / r["calls"]) if r["calls"] else b for b, r in zip(best, timer.records)]
            start = time.thread_time()
            for _ in range(calls):
                session.run(None, feeds)
            theirs = min(theirs, (time.thread_time() - start) / calls)
    node_seconds, ops = ort_node_times(path, feeds, 10 * calls, ort_optimize)
    ran = [(r, b) for r, b in zip(timer.records, best) if r["shapes"] is not None]
    print(f"== {name} {shape}: relaxpack {ours * 1e6:.0f} us, onnxruntime {theirs * 1e6:.0f} us "
          f"({ours / theirs:.2f}x; its graph optimizations {'on' if ort_optimize else 'off'})")
    groups = collections.defaultdict(lambda: [0, 0.0])
    for record, seconds in ran:
        groups[kind(record)][0] += 1
        groups[kind(record)][1] += seconds
    for label, (count, seconds) in sorted(groups.items(), key=lambda g: -g[1][1]):
        print(f"   {label:24s} {count:3d} calls {seconds * 1e6:8.1f} us {seconds / count * 1e6:7.1f} us/call")
    conv_nodes = [(node, s) for node, s in node_seconds.items() if ops[node] in ORT_CONV_OPS]
    by_op = collections.Counter()
    for node, s in node_seconds.items():
        by_op[ops[node]] += s
    print(f"   relaxpack convs {sum(s for _, s in ran) * 1e6:.0f} us; onnxruntime (profiled) Conv nodes "
          f"{sum(s for _, s in conv_nodes) * 1e6:.0f} us of {sum(node_seconds.values()) * 1e6:.0f} us; by op: "
          + ", ".join(f"{op} {s * 1e6:.1f}" for op, s in by_op.most_common(8)))
    if detail:
        for i, (record, seconds) in enumerate(ran):
            node, theirs_node = conv_nodes[i] if i < len(conv_nodes) else ("", 0.0)
            print(f"     {kind(record):22s} {str(record['attrs'].get('activation')):20s} "
                  f"{str(record['shapes']):58s} {seconds * 1e6:6.1f} us | {node[-24:]:24s} {theirs_node * 1e6:5.1f} us")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--shape", type=int, default=0, help="index of the manifest shape")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20, help="runs per round")
    parser.add_argument("--detail", action="store_true", help="list every conv instruction")
    parser.add_argument("--ort-optimizer", choices=("all", "off"), default="all",
                        help="onnxruntime's graph optimizations: all (its default, as the zoo compares) or none")
    args = parser.parse_args(argv)
    for name in args.models.split(","):
        measure(name, args.shape, args.rounds, args.calls, args.detail, args.ort_optimizer == "all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

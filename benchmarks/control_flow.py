"""Control flow: what a Loop iteration costs against the same ops inline.

    python -m benchmarks.control_flow [--trips 50] [--ops 5] [-n 200]

Two ONNX models on (2, 4) float32: a Loop of ``--trips`` iterations whose
body is a chain of ``--ops`` elementwise ops (Add/Mul alternating), and the
same ``trips * ops`` ops unrolled inline. Both built at -O0 (no fusion), so
the ratio of their times per iteration is the loop's own overhead: the body
call, its prologue, the trip counter and the loop builtin. onnxruntime's
times (1 thread) for both, where it is installed, in the same run.
"""

from __future__ import annotations

import argparse

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h

import relaxpack
from benchmarks.opt_levels import median_ms
from relaxpack.runtime import VirtualMachine

SHAPE = [2, 4]


def _chain(first: str, last: str, ops: int, prefix: str) -> list:
    nodes, name = [], first
    for k in range(ops):
        out = last if k == ops - 1 else f"{prefix}{k}"
        nodes.append(h.make_node("Add" if k % 2 == 0 else "Mul", [name, "c"], [out]))
        name = out
    return nodes


def _model(nodes, inputs, outputs, inits=()):
    graph = h.make_graph(nodes, "g", inputs, outputs, list(inits))
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def loop_model(ops: int):
    """x -> Loop(M) with body x <- chain(x); c from the outer scope."""
    body = h.make_graph(
        _chain("x_in", "x_out", ops, "t") + [h.make_node("Identity", ["cond_in"], ["cond_out"])], "body",
        [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond_in", T.BOOL, []),
         h.make_tensor_value_info("x_in", T.FLOAT, SHAPE)],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("x_out", T.FLOAT, SHAPE)])
    return _model([h.make_node("Loop", ["M", "", "x"], ["y"], body=body)],
                  [h.make_tensor_value_info("M", T.INT64, []), h.make_tensor_value_info("x", T.FLOAT, SHAPE)],
                  [h.make_tensor_value_info("y", T.FLOAT, SHAPE)],
                  [h.make_tensor("c", T.FLOAT, [], [0.5])])


def inline_model(ops: int):
    return _model(_chain("x", "y", ops, "t"), [h.make_tensor_value_info("x", T.FLOAT, SHAPE)],
                  [h.make_tensor_value_info("y", T.FLOAT, SHAPE)], [h.make_tensor("c", T.FLOAT, [], [0.5])])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trips", type=int, default=50)
    parser.add_argument("--ops", type=int, default=5)
    parser.add_argument("-n", type=int, default=200)
    args = parser.parse_args(argv)
    looped, inline = loop_model(args.ops), inline_model(args.ops * args.trips)
    x = np.full(SHAPE, 0.25, np.float32)
    loop_feeds, inline_feeds = {"M": np.array(args.trips, np.int64), "x": x}, {"x": x}
    vms = [VirtualMachine(relaxpack.build(relaxpack.from_onnx(m), opt_level=0)) for m in (looped, inline)]
    ours = [median_ms(lambda: vms[0].run(loop_feeds), args.n), median_ms(lambda: vms[1].run(inline_feeds), args.n)]
    per = [t * 1e3 / args.trips for t in ours]
    print(f"Loop of {args.trips} trips, {args.ops} elementwise ops on {SHAPE} a trip: {per[0]:.2f} us per iteration; "
          f"the same ops inline {per[1]:.2f} us; loop/inline {per[0] / per[1]:.2f}x")
    try:
        import onnxruntime as ort
    except ImportError:
        return 0
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    sessions = [ort.InferenceSession(m.SerializeToString(), options, providers=["CPUExecutionProvider"])
                for m in (looped, inline)]
    theirs = [median_ms(lambda: sessions[0].run(None, loop_feeds), args.n),
              median_ms(lambda: sessions[1].run(None, inline_feeds), args.n)]
    print(f"onnxruntime (1 thread): Loop {theirs[0] * 1e3 / args.trips:.2f} us per iteration, inline "
          f"{theirs[1] * 1e3 / args.trips:.2f} us; relaxpack/onnxruntime: Loop {ours[0] / theirs[0]:.2f}x, "
          f"inline {ours[1] / theirs[1]:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

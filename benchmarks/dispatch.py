"""Dispatch overhead: a chain of 1000 tiny elementwise ops, time per instruction.

    python -m benchmarks.dispatch [--length 1000] [-n 200]

Built at -O0 (no fusion), so every op is one kernel call on a 4-element
array; the time per instruction is the VM's dispatch plus numpy's own
per-call cost, which the second figure (the same ufunc calls made directly
from a Python loop) isolates. The third figure is the same VM with
budgets (``max_steps``, ``timeout`` and ``max_memory``): the compiled code
then counts instructions and looks at the clock every 32 of them. Last, the
fixed cost of a call: ``vm.run`` of a model of one Relu on (2, 4) float32
(input checks, shapes, the kernel, the outputs) against onnxruntime's
``session.run`` of the same ONNX model (1 thread), where it is installed.
"""

from __future__ import annotations

import argparse

import numpy as np

import relaxpack
from benchmarks.opt_levels import median_ms
from relaxpack.runtime import VirtualMachine
from tests.runtime.test_vm_dispatch import OPS, chain_module


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=1000)
    parser.add_argument("-n", type=int, default=200)
    args = parser.parse_args(argv)
    exe = relaxpack.build(chain_module(args.length), opt_level=0)
    vm = VirtualMachine(exe)
    budgeted = VirtualMachine(exe, max_steps=10 ** 9, timeout=3600.0, max_memory=1 << 40)
    x = np.ones(4, np.float32)
    ours = median_ms(lambda: vm.run({"x": x}), args.n) / 1e3
    with_budget = median_ms(lambda: budgeted.run({"x": x}), args.n) / 1e3
    c, ufuncs, out = np.float32(0.5), list(OPS.values()), np.empty(4, np.float32)

    def plain():
        h = x
        for i in range(args.length):
            ufuncs[i % 4](h, c, out=out)
            h = out
    bare = median_ms(plain, args.n) / 1e3
    print(f"{exe.kernel_call_count()} kernel calls: {ours / args.length * 1e6:.2f} us per instruction "
          f"(numpy's own call from a Python loop: {bare / args.length * 1e6:.2f} us; with budgets: "
          f"{with_budget / args.length * 1e6:.2f} us, {with_budget / ours:.3f}x)")
    print(_fixed_cost(args.n * 20))
    return 0


def _fixed_cost(n: int) -> str:
    """One vm.run of a one-op model, and onnxruntime's session.run of it (1 thread) if installed."""
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    feeds = {"x": np.ones((2, 4), np.float32)}
    ours = median_ms(lambda: vm.run(feeds), n) * 1e3
    text = f"one-op model (Relu on 2x4): vm.run {ours:.1f} us"
    try:
        import onnxruntime as ort
    except ImportError:
        return text + " (onnxruntime not installed)"
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    theirs = median_ms(lambda: session.run(None, feeds), n) * 1e3
    return text + f", onnxruntime session.run {theirs:.1f} us (1 thread)"


if __name__ == "__main__":
    raise SystemExit(main())

"""Fused elementwise chains at -O2 against the same chains unfused at -O0, by length and size.

    python -m benchmarks.fused_chains [--lengths 2,5,10,20,50] [--sizes 8,100,1000,10000,100000,1000000]

A chain is ``length`` ops on a ``(size // 16, 16)`` float32 input (``(size,)`` below 16 values),
each with a constant of the last dim broadcast into it; the ops cycle through add, multiply,
tanh, subtract, exp, maximum (the unary ones keep the values bounded). -O2 fuses the chain into
``fused_elementwise`` kernels (FuseOps cuts it at 64 steps), -O0 makes one kernel call per op.
Both VMs run the same input, interleaved in rounds; the table gives each one's median time per
call and the ratio -O2 / -O0 (the median of the per-round ratios): below 1 is the fused chain
ahead. Times are the calling thread's CPU time (``time.thread_time``; BLAS runs on one thread
here), so that other processes on a shared machine skew them less than wall time. Two columns per size: the input the same array on every call (as the zoo's feeds are),
and a fresh array every call (a server's requests).

``--models`` (zoo model names, ``tests/models/zoo``, and ``transformer_block``, the example)
times whole models the same way at their first manifest shape: -O2 against -O0, interleaved.
Nothing here asserts on speed.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

import relaxpack
from relaxpack.ir import BlockBuilder, Constant, TensorStructInfo, Var
from relaxpack.ops import make_call
from relaxpack.runtime import VirtualMachine

#: the ops of a chain, in turn; a constant second operand for the binary ones
OPS = ("add", "multiply", "tanh", "subtract", "exp", "maximum")
UNARY = {"tanh", "exp"}


def chain_shape(size: int) -> tuple[int, ...]:
    return (size // 16, 16) if size >= 16 else (size,)


def chain_module(length: int, shape: tuple[int, ...]):
    """``length`` elementwise ops in a chain on a float32 input of ``shape``."""
    x = Var("x", TensorStructInfo(shape, "float32"))
    rng = np.random.default_rng(length)
    bb = BlockBuilder()
    with bb.function("main", [x]):
        with bb.dataflow():
            h = x
            for i in range(length):
                op = OPS[i % len(OPS)]
                if op in UNARY:
                    h = bb.emit(make_call(op, h))
                else:
                    c = Constant(rng.uniform(0.5, 1.0, shape[-1:]).astype(np.float32))
                    h = bb.emit(make_call(op, h, c))
            gv = bb.emit_output(h, "y")
        bb.emit_func_output(gv)
    return bb.get()


def interleaved(fns: list, rounds: int, round_s: float) -> tuple[list[float], list[float]]:
    """Per runtime its median time per call (s), and per round the quotient of the second to the first."""
    per = []
    for fn in fns:
        fn()
        start, n = time.thread_time(), 0
        while n < 3 or time.thread_time() - start < round_s / 4:
            fn()
            n += 1
        per.append(max(1, int(round_s / max((time.thread_time() - start) / n, 1e-7))))
    times: list[list[float]] = [[] for _ in fns]
    for r in range(rounds):
        order = range(len(fns)) if r % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            fn, n = fns[i], per[i]
            start = time.thread_time()
            for _ in range(n):
                fn()
            times[i].append((time.thread_time() - start) / n)
    ratios = [b / a for a, b in zip(times[0], times[1])]
    return [statistics.median(t) for t in times], ratios


def measure(length: int, size: int, rounds: int, round_s: float, fresh: bool) -> tuple[float, float, float]:
    """(-O0 µs, -O2 µs, -O2 / -O0) for one chain."""
    mod = chain_module(length, chain_shape(size))
    vms = [VirtualMachine(relaxpack.build(mod, opt_level=level)) for level in (0, 2)]
    x = np.random.default_rng(0).uniform(-1, 1, chain_shape(size)).astype(np.float32)
    want = vms[0].run({"x": x})["y"]
    np.testing.assert_allclose(vms[1].run({"x": x})["y"], want, rtol=1e-5, atol=1e-6)
    if fresh:
        fns = [lambda vm=vm: vm.run({"x": x.copy()}) for vm in vms]
    else:
        fns = [lambda vm=vm: vm.run({"x": x}) for vm in vms]
    (o0, o2), ratios = interleaved(fns, rounds, round_s)
    return o0 * 1e6, o2 * 1e6, statistics.median(ratios)


def model_rows(names: list[str], rounds: int, round_s: float) -> list[str]:
    """Table rows: each model at -O0 and -O2 on its first manifest shape's inputs."""
    rows = []
    for name in names:
        model, feeds = _model(name)
        mod = relaxpack.from_onnx(model)
        vms = [VirtualMachine(relaxpack.build(mod, opt_level=level)) for level in (0, 2)]
        calls = [vm.exe.kernel_call_count() for vm in vms]
        first = [vm.run(feeds) for vm in vms]
        for key, value in first[0].items():
            np.testing.assert_allclose(first[1][key], value, rtol=1e-4, atol=1e-5, err_msg=f"{name}: {key}")
        (o0, o2), ratios = interleaved([lambda vm=vm: vm.run(feeds) for vm in vms], rounds, round_s)
        rows.append(f"| {name} | {calls[0]} | {calls[1]} | {o0 * 1e6:.1f} | {o2 * 1e6:.1f} "
                    f"| {statistics.median(ratios):.2f} |")
    return rows


def _model(name: str):
    """(model, feeds): the example transformer block, or a zoo model at its first shape."""
    if name == "transformer_block":
        from relaxpack.examples.onnx_models import transformer_block_onnx
        return transformer_block_onnx(), {"x": np.random.default_rng(0).standard_normal((4, 64, 32)).astype(np.float32)}
    from tests.models.zoo.inputs import make_inputs
    from tests.models.zoo.judge import HERE, MODELS
    entry = MODELS[name]
    return str(HERE / entry["file"]), make_inputs(entry, entry["shapes"][0])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="2,5,10,20,50")
    parser.add_argument("--sizes", default="8,100,1000,10000,100000,1000000")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--round-ms", type=float, default=20.0)
    parser.add_argument("--models", default="", help="comma-separated zoo models (and transformer_block) "
                                                     "to time at -O0 and -O2 instead of the chains")
    args = parser.parse_args(argv)
    if args.models:
        print("| model | -O0 calls | -O2 calls | -O0 µs | -O2 µs | -O2 / -O0 |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for row in model_rows(args.models.split(","), args.rounds, args.round_ms / 1e3):
            print(row, flush=True)
        return 0
    lengths = [int(v) for v in args.lengths.split(",")]
    sizes = [int(float(v)) for v in args.sizes.split(",")]
    print("| ops | values | -O0 µs | -O2 µs | -O2 / -O0 | -O0 µs (fresh input) | -O2 µs (fresh input) "
          "| -O2 / -O0 (fresh input) |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    worst = 0.0
    for length in lengths:
        for size in sizes:
            same = measure(length, size, args.rounds, args.round_ms / 1e3, fresh=False)
            fresh = measure(length, size, args.rounds, args.round_ms / 1e3, fresh=True)
            worst = max(worst, same[2], fresh[2])
            print(f"| {length} | {size} | {same[0]:.1f} | {same[1]:.1f} | {same[2]:.2f} "
                  f"| {fresh[0]:.1f} | {fresh[1]:.1f} | {fresh[2]:.2f} |", flush=True)
    print(f"\nlargest -O2 / -O0: {worst:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Kernel calls and latency at -O0 / -O1 / -O2 against onnxruntime, in one run.

    python -m benchmarks.opt_levels [-n 30]

Uses the repo's torch-exported models (tests/models) and the examples; prints
a markdown table (the README's performance section quotes it). onnxruntime
runs with one thread; numpy's BLAS threads should be limited to one too:
run with OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 for a like-for-like ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import numpy as np

import relaxpack
from relaxpack.check import compare_outputs, onnxruntime_session
from relaxpack.examples.onnx_models import small_cnn, transformer_block_onnx
from relaxpack.runtime import VirtualMachine

MODELS = Path(__file__).resolve().parents[1] / "tests" / "models"


def cases():
    rng = np.random.default_rng(0)
    return [
        ("resnet_small", str(MODELS / "resnet_small.onnx"),
         {"input": rng.standard_normal((8, 3, 32, 32)).astype(np.float32)}),
        ("gpt_small", str(MODELS / "gpt_small.onnx"), {"ids": rng.integers(0, 128, (4, 64)).astype(np.int64)}),
        ("small_cnn", small_cnn(), {"input": rng.standard_normal((8, 3, 32, 32)).astype(np.float32)}),
        ("transformer_block", transformer_block_onnx(), {"x": rng.standard_normal((4, 64, 32)).astype(np.float32)}),
    ]


def median_ms(fn, n: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=30)
    args = parser.parse_args(argv)
    print("| model | input | -O0 calls | -O2 calls | -O0 ms | -O1 ms | -O2 ms | onnxruntime ms (1 thread) "
          "| -O2 / onnxruntime |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name, model, feeds in cases():
        mod = relaxpack.from_onnx(model)
        exes = {level: relaxpack.build(mod, opt_level=level) for level in (0, 1, 2)}
        vms = {level: VirtualMachine(exe) for level, exe in exes.items()}
        session = onnxruntime_session(model, threads=1)
        want = session.run(None, feeds)
        names = [o.name for o in session.get_outputs()]
        for vm in vms.values():
            assert all(d.passed for d in compare_outputs(names, vm.run(feeds), want, 1e-4, 1e-4)), name
        ms = {level: median_ms(lambda vm=vm: vm.run(feeds), args.n) for level, vm in vms.items()}
        ort = median_ms(lambda: session.run(None, feeds), args.n)
        shape = ", ".join(f"{k}{list(v.shape)}" for k, v in feeds.items())
        print(f"| {name} | {shape} | {exes[0].kernel_call_count()} | {exes[2].kernel_call_count()} "
              f"| {ms[0]:.2f} | {ms[1]:.2f} | {ms[2]:.2f} | {ort:.2f} | {ms[2] / ort:.2f} |")


if __name__ == "__main__":
    main()

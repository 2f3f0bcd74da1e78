"""How much of a model's run is its matrix products, against onnxruntime's whole run.

    python -m benchmarks.gemm_share [--models a,b] [--rounds 7] [--calls 50]

For each zoo model (default: the quantized CNNs of issue 18) at each manifest shape, the ``-O2``
archive's ``vm.run`` and onnxruntime (1 thread, its default graph optimizations, as the zoo
benchmark compares) are timed interleaved (minimum over rounds of the mean per call; the machines
this runs on are shared). Then the same runs are made again with ``np.dot`` and ``np.matmul``
wrapped by a timer, installed before relaxpack's kernels are imported so that every product a
kernel makes is counted (OpenBLAS's sgemm/dgemm for float operands: the GEMMs of convs and
linear layers). The figure of interest is that time over onnxruntime's whole run: where it is
near or above 1, no change outside the products can bring the model near onnxruntime, whose
integer kernels (VNNI on CPUs that have it) do the same products faster than float32 sgemm.
Products made through ``ndarray.dot`` or ``einsum`` (depthwise convs) are not counted, so the
share is a lower bound. relaxpack's own time carries the wrappers (~0.3 us a product, 1-2% on
the default models). Nothing here asserts on speed.
"""

from __future__ import annotations

import argparse
import sys
import time

DEFAULT_MODELS = ("resnet_qop_tensor,resnet_qdq_tensor_u8,mobilenet_v2_qop_channel,efficientnet_qop_tensor,"
                  "resnet_ts")


class ProductTimer:
    """``np.dot`` and ``np.matmul`` replaced by wrappers adding their wall time to ``seconds``;
    :meth:`install` before relaxpack's kernels are imported (they bind the functions)."""

    def __init__(self):
        self.seconds, self.calls = 0.0, 0

    def install(self) -> None:
        import numpy as np
        if any(name.startswith("relaxpack.runtime.kernels") for name in sys.modules):
            raise RuntimeError("gemm_share: relaxpack's kernels are imported already; their products "
                               "would not be counted")
        np.dot, np.matmul = self._wrap(np.dot), self._wrap(np.matmul)

    def _wrap(self, product):
        clock = time.perf_counter

        def timed(*args, **kwargs):
            start = clock()
            try:
                return product(*args, **kwargs)
            finally:
                self.seconds += clock() - start
                self.calls += 1
        return timed

    def reset(self) -> None:
        self.seconds, self.calls = 0.0, 0


def _mean(run, calls: int) -> float:
    """The mean seconds of ``calls`` calls of ``run``."""
    start = time.perf_counter()
    for _ in range(calls):
        run()
    return (time.perf_counter() - start) / calls


def measure(name: str, timer: ProductTimer, rounds: int, calls: int) -> list[str]:
    """One line per manifest shape of zoo model ``name``."""
    import relaxpack
    from relaxpack.runtime import VirtualMachine
    from relaxpack.runtime.blas import set_blas_threads
    from benchmarks.zoo_worker import ort_session
    from tests.models.zoo.inputs import make_inputs
    from tests.models.zoo.judge import HERE, MODELS
    entry = MODELS[name]
    path = HERE / entry["file"]
    set_blas_threads(1)
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(str(path)), opt_level=2))
    session = ort_session(path, one_thread=True)
    lines = []
    for shape in entry["shapes"]:
        feeds = make_inputs(entry, shape)
        for _ in range(5):
            vm.run(feeds)
            session.run(None, feeds)
        ours = theirs = float("inf")
        for _ in range(rounds):
            ours = min(ours, _mean(lambda: vm.run(feeds), calls))
            theirs = min(theirs, _mean(lambda: session.run(None, feeds), calls))
        products, count = float("inf"), 0
        for _ in range(rounds):
            timer.reset()
            for _ in range(calls):
                vm.run(feeds)
            products, count = min(products, timer.seconds / calls), timer.calls // calls
        lines.append(f"{name} {shape}: relaxpack {ours * 1e6:.0f} us, onnxruntime {theirs * 1e6:.0f} us "
                     f"({ours / theirs:.2f}x); {count} products a run take {products * 1e6:.0f} us "
                     f"= {products / theirs:.2f}x onnxruntime's whole run")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=50, help="runs per round")
    args = parser.parse_args(argv)
    timer = ProductTimer()
    timer.install()
    for name in args.models.split(","):
        for line in measure(name, timer, args.rounds, args.calls):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

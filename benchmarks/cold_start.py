"""Cold start: a fresh process, from nothing to the first output.

relaxpack: ``import relaxpack.runtime``, ``load`` a converted ResNet-18
archive, the first ``vm.run``. onnxruntime: ``import onnxruntime``, an
``InferenceSession`` on the ONNX file, the first ``run``. Each is a new
Python process, interleaved, ``-n`` rounds; the median of each phase and of
the whole process (wall time from spawn to exit) is printed.

    python -m benchmarks.cold_start [-n 7] [--workdir DIR]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: the child: time each phase of a cold start and print them as JSON
_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
kind, path = sys.argv[1], sys.argv[2]
import numpy as np
x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
t1 = time.perf_counter()
if kind == "relaxpack":
    from relaxpack.runtime import VirtualMachine, load
    t2 = time.perf_counter()
    vm = VirtualMachine(load(path))
    t3 = time.perf_counter()
    vm.run({"input": x})
else:
    import onnxruntime as ort
    t2 = time.perf_counter()
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
    t3 = time.perf_counter()
    session.run(None, {"input": x})
t4 = time.perf_counter()
print(json.dumps({"import": t2 - t1, "load": t3 - t2, "first_run": t4 - t3, "in_process": t4 - t0}))
"""


def prepare(workdir: Path) -> tuple[Path, Path]:
    """ResNet-18 (benchmarks/models.py, batch symbolic) as ONNX and as an archive built at -O2."""
    import onnx

    import relaxpack
    from benchmarks.models import resnet18
    bench = resnet18("full")
    onnx_path, archive = workdir / "resnet18.onnx", workdir / "resnet18.rpk"
    onnx.save(bench.model, str(onnx_path))
    relaxpack.build(relaxpack.from_onnx(bench.model, dims=bench.import_dims)).save(str(archive))
    return onnx_path, archive


def one_start(kind: str, path: Path) -> dict:
    """One fresh process of ``kind`` to its first output: its phases, and the whole process's wall time."""
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", _CHILD, kind, str(path)], capture_output=True, text=True, check=True,
                         env={"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PATH": "/usr/bin:/bin",
                              "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    phases = json.loads(out.stdout.strip().splitlines()[-1])
    phases["process"] = time.perf_counter() - start
    return phases


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-n", type=int, default=7, help="rounds (each a fresh process per runtime)")
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args(argv)
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="cold_start_"))
    workdir.mkdir(parents=True, exist_ok=True)
    onnx_path, archive = prepare(workdir)
    runs: dict[str, list[dict]] = {"relaxpack": [], "onnxruntime": []}
    for _ in range(args.n):                      # interleaved: load drifts hit both alike
        runs["relaxpack"].append(one_start("relaxpack", archive))
        runs["onnxruntime"].append(one_start("onnxruntime", onnx_path))
    phases = ("import", "load", "first_run", "in_process", "process")
    print("| ms (median of %d) | %s |" % (args.n, " | ".join(phases)))
    print("| --- |" + " ---: |" * len(phases))
    for kind, rows in runs.items():
        cells = [f"{1000 * statistics.median(r[p] for r in rows):.0f}" for p in phases]
        print(f"| {kind} | {' | '.join(cells)} |")
    ratio = statistics.median(r["process"] for r in runs["relaxpack"]) / \
        statistics.median(r["process"] for r in runs["onnxruntime"])
    print(f"relaxpack / onnxruntime, whole process: {ratio:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Weights shared between worker processes: the memory of 1, 2 and 4 workers running one archive.

    python -m benchmarks.shared_weights [--width 2048] [--layers 8] [--workers 1 2 4]

Each worker is a process that opens the archive (a :class:`relaxpack.batch.Predictor`,
as a Dask or Ray worker does), runs it three times (every weight read) and
waits; then the memory of every worker is read from /proc: RSS (which counts
a page shared by N processes N times) and PSS from ``/proc/<pid>/smaps_rollup``
(which counts it 1/N times in each: the honest total for shared pages). Two ways
to load: ``mmap`` (``load(path)``: constants are views of the file's mapping,
shared through the page cache) and, as the control, ``copy`` (``load_bytes``: each
process holds its own copy, as a pickled executable of old did). The table sets
the totals against one worker's figure times N.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

WORKER = textwrap.dedent('''
    import sys
    import numpy as np
    from relaxpack.batch import Predictor
    from relaxpack.runtime import InferenceSession
    mode, path, width = sys.argv[1], sys.argv[2], int(sys.argv[3])
    x = np.ones((8, width), np.float32)
    if mode == "mmap":
        run = Predictor(path).predict
    else:
        with open(path, "rb") as f:
            run = InferenceSession(f.read()).run
        run = (lambda feeds, run=run: run(None, feeds))
    for _ in range(3):
        run({"x": x})
    print("ready", flush=True)
    sys.stdin.read()          # until the parent has measured
''')


def mlp_archive(folder: Path, width: int, layers: int) -> Path:
    """An MLP of ``layers`` Gemm + Relu layers of ``width`` x ``width`` float32 weights."""
    from benchmarks.serve_load import mlp_archive as build
    return build(folder, width, layers)


def memory(pid: int) -> dict[str, int]:
    """RSS and PSS (and their file-backed and anonymous parts) of a process, in bytes."""
    text = Path(f"/proc/{pid}/smaps_rollup").read_text()
    fields = {k: int(v) * 1024 for k, v in re.findall(r"^(\w+):\s+(\d+) kB", text, re.M)}
    return {"rss": fields["Rss"], "pss": fields["Pss"], "pss_file": fields.get("Pss_File", 0),
            "pss_anon": fields.get("Pss_Anon", 0)}


def measure(path: Path, width: int, workers: int, mode: str) -> list[dict[str, int]]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
           "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, mode, str(path), str(width)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env) for _ in range(workers)]
    try:
        for proc in procs:
            if proc.stdout.readline().strip() != "ready":
                raise RuntimeError(f"a worker ended ({proc.wait()}) before it was ready")
        return [memory(proc.pid) for proc in procs]
    finally:
        for proc in procs:
            proc.stdin.close()
            proc.wait(timeout=60)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    args = parser.parse_args(argv)
    mib = 2 ** 20
    with tempfile.TemporaryDirectory() as tmp:
        path = mlp_archive(Path(tmp), args.width, args.layers)
        path.read_bytes()              # in the page cache, as after any earlier run
        weights = args.layers * (args.width * args.width + args.width) * 4
        print(f"archive {path.stat().st_size / mib:.0f} MiB ({weights / mib:.0f} MiB of weights), "
              f"workers of {', '.join(map(str, args.workers))}\n")
        print("| load | workers | total RSS MiB | 1 worker's RSS x N | total PSS MiB | 1 worker's PSS x N "
              "| PSS file-backed / anonymous MiB |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for mode in ("mmap", "copy"):
            one = None
            for n in args.workers:
                figures = measure(path, args.width, n, mode)
                total = {k: sum(f[k] for f in figures) for k in figures[0]}
                if one is None:
                    one = {k: v / n for k, v in total.items()}
                print(f"| {mode} | {n} | {total['rss'] / mib:.0f} | {one['rss'] * n / mib:.0f} | "
                      f"{total['pss'] / mib:.0f} | {one['pss'] * n / mib:.0f} | "
                      f"{total['pss_file'] / mib:.0f} / {total['pss_anon'] / mib:.0f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

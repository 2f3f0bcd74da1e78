"""Time the suite: relaxpack against onnxruntime and onnx's reference evaluator.

    python -m benchmarks.run [--size full|smoke] [--models a,b] [-n N] [--out benchmarks/results]

Writes ``results.md`` (the table) and ``results.json`` (everything, with the
raw times) to ``--out``, prints the table, and exits 1 when an output of
relaxpack disagrees with onnxruntime or a runtime failed (an op relaxpack does
not support is reported, not a failure). Nothing here asserts on speed.

How it measures (repeated in results.md):

- One worker subprocess per model. In it, the runtimes are timed on the same
  inputs, after warm-up, interleaved: relaxpack, ORT 1 thread, reference,
  then again, the starting runtime rotating each round; the figure is the
  median. ORT with default threads is timed after those rounds, alone: its
  pool threads spin for tens of ms after each run and, on a 2-core machine
  with other work running, doubled the time of whatever ran right after it
  (ResNet-18).
- The worker's environment sets OMP/OPENBLAS/MKL_NUM_THREADS=1 before numpy
  loads, so relaxpack's (and the reference evaluator's) BLAS uses one thread,
  like ORT with ``intra_op_num_threads=1, inter_op_num_threads=1``. ORT's
  default session sizes its own thread pool, which those variables do not
  touch. ``--size full`` also removes OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE
  from the worker's environment, so OpenBLAS picks the kernel for this CPU
  (``--openblas-env keep`` to keep them; smoke runs keep them by default).
- The reference evaluator is capped: a run over 30 s is stopped (checked
  between ops) and recorded once as ">30 s". Any runtime stops early once its
  timed runs have used ``--budget`` seconds (default 60) and it has 3 of them.
- Convert time is ``relaxpack.from_onnx`` + ``relaxpack.build`` (after an
  untimed conversion of a tiny model, so one-time imports do not count); kernel calls
  is the number of kernel-call instructions in the bytecode (no control flow
  in these models, so it is also the count per run). The convert-time table
  (``--convert-time``, ResNet-50 by default) splits it into stages: import
  (reading and converting the .onnx file), check, optimize, lower, codegen +
  memory plan, script (the IR text kept in the archive), package (writing
  it); the fastest of 3 runs of each stage, in a fresh subprocess.
- Peak memory: for each runtime a fresh probe subprocess loads the model
  (relaxpack from its archive, memory-mapped; ORT and the reference evaluator
  from the .onnx file), runs it twice and reports the growth of its resident
  set: peak RSS (VmHWM, reset through /proc/self/clear_refs after the imports)
  minus the RSS after the imports. Weights the runtime touches count.
- Agreement: every output of relaxpack against ORT (1 thread); max abs error
  and max rel error = max abs error / max |ORT output|. Above 1e-3 is a
  MISMATCH.
- Floors: GFLOP is twice the multiply-adds of the row's products
  (``benchmarks/flops.py``, from the shapes of one onnxruntime run); compute
  is that work at the single-thread float32 GEMM rate the worker measures with
  numpy's BLAS; weight reads is the time to read those products' weights once
  at the best rate numpy reads that many bytes. The issue's
  20x-over-reference bar is set against the larger of the two.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
RUNTIMES = ("relaxpack", "ort_1thread", "ort_default", "reference")
REF_CAP_S = 30.0
MISMATCH_REL = 1e-3
THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
OPENBLAS_TUNING = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0])
    p.add_argument("--size", choices=("full", "smoke"), default="full")
    p.add_argument("--models", default="", help="comma-separated names (default: all)")
    p.add_argument("-n", type=int, default=15, help="timed runs per runtime (median reported)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--budget", type=float, default=60.0, help="seconds of timed runs per runtime and row")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--openblas-env", choices=("keep", "unset"), default=None,
                   help="OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE in the workers (default: unset for full, keep for smoke)")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory probes")
    p.add_argument("--profile", type=Path, default=None, help="write cProfile reports of relaxpack runs here")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed for one model's worker")
    p.add_argument("--convert-time", default=None, metavar="MODELS",
                   help="models whose convert time is reported per stage (benchmarks.convert_time; default: "
                        "resnet50 for full, mlp for smoke; '' to skip)")
    # internal: a model's worker, a memory probe
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--probe", choices=("relaxpack", "ort_1thread", "reference"), help=argparse.SUPPRESS)
    p.add_argument("--probe-dir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--probe-setting", type=int, default=0, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.probe:
        return _probe(args)
    if args.worker:
        return _worker(args)
    from .models import MODELS
    names = [m for m in args.models.split(",") if m] or list(MODELS)
    unknown = sorted(set(names) - set(MODELS))
    if unknown:
        print(f"error: unknown model(s) {unknown}; the suite has {sorted(MODELS)}", file=sys.stderr)
        return 2
    env = _worker_env(args)
    environment, rows = {}, []
    load_start = list(os.getloadavg())
    started = time.perf_counter()
    for name in names:
        print(f"[{time.perf_counter() - started:6.1f}s] {name} ...", file=sys.stderr, flush=True)
        result = _run_worker(name, args, env)
        environment = environment or result.get("environment", {})
        rows += result["rows"]
    report = {"size": args.size, "n": args.n, "warmup": args.warmup, "budget_s": args.budget,
              "reference_cap_s": REF_CAP_S, "mismatch_rel": MISMATCH_REL,
              "openblas_env": _openblas_env(args),
              "wall_s": round(time.perf_counter() - started, 1), "environment": {**environment, **_git()},
              "load_average": {"start": load_start, "end": list(os.getloadavg())},
              "rows": rows, "geomean": _geomeans(rows), "convert_time": _convert_time(args, env)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "results.json").write_text(json.dumps(report, indent=1) + "\n")
    text = _markdown(report)
    (args.out / "results.md").write_text(text)
    print(text)
    bad = [r["row"] for r in rows if r["check"].get("mismatch") or _failed(r)]
    if bad:
        print(f"MISMATCH OR FAILURE in: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


def _convert_time(args, env: dict[str, str]) -> list[dict]:
    """Per-stage convert times from ``benchmarks.convert_time``, in a subprocess
    of its own (a fresh interpreter: one-time imports are its business)."""
    models = args.convert_time if args.convert_time is not None else ("resnet50" if args.size == "full" else "mlp")
    if not models:
        return []
    print(f"convert time per stage: {models} ...", file=sys.stderr, flush=True)
    with tempfile.TemporaryDirectory(prefix="rp-convert-") as tmp:
        cmd = [sys.executable, "-m", "benchmarks.convert_time", "--models", models, "--size", args.size,
               "-n", "3" if args.size == "full" else "1", "--out", tmp]
        done = subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=args.timeout)
        if done.returncode:
            return [{"model": models, "error": _last_line(done.stderr)}]
        return json.loads((Path(tmp) / "convert_time.json").read_text())


def _failed(row: dict) -> bool:
    return any(row[k]["status"] == "error" for k in RUNTIMES)


# ------------------------------------------------------------------ parent
def _openblas_env(args) -> str:
    return args.openblas_env or ("unset" if args.size == "full" else "keep")


def _worker_env(args) -> dict[str, str]:
    return worker_env(_openblas_env(args))


def worker_env(openblas: str) -> dict[str, str]:
    """A benchmark worker's environment: one BLAS/OpenMP thread, OpenBLAS's
    tuning variables removed when ``openblas`` is "unset", this repository first
    on PYTHONPATH (benchmarks.zoo's workers use it too)."""
    env = dict(os.environ)
    env.update({k: "1" for k in THREAD_VARS})
    if openblas == "unset":
        for k in OPENBLAS_TUNING:
            env.pop(k, None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    return env


def _run_worker(name: str, args, env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="rp-bench-") as tmp:
        result = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "benchmarks.run", "--worker", name, "--result", str(result),
               "--size", args.size, "-n", str(args.n), "--warmup", str(args.warmup),
               "--budget", str(args.budget), "--seed", str(args.seed)]
        cmd += ["--no-memory"] if args.no_memory else []
        cmd += ["--profile", str(args.profile.resolve())] if args.profile else []
        try:
            proc = subprocess.run(cmd, env=env, cwd=REPO, timeout=args.timeout, capture_output=True, text=True)
            failure = None if proc.returncode == 0 and result.exists() else \
                f"worker exited {proc.returncode}: {_last_line(proc.stderr)}"
            for line in proc.stderr.splitlines():
                if line.startswith("  "):        # the worker's progress lines
                    print(line, file=sys.stderr)
        except subprocess.TimeoutExpired:
            failure = f"worker timed out after {args.timeout:.0f} s"
        if failure is None:
            return json.loads(result.read_text())
    print(f"  {name}: {failure}", file=sys.stderr)
    dead = {"status": "error", "note": failure}
    return {"rows": [{"model": name, "setting": "", "row": name, "input_shapes": "", "description": "",
                      **{k: dict(dead) for k in RUNTIMES}, "check": {"note": failure}}]}


def _git() -> dict:
    """The commit measured, and whether relaxpack/ had uncommitted changes."""
    def git(*cmd):
        return subprocess.run(["git", *cmd], cwd=REPO, capture_output=True, text=True, timeout=30).stdout.strip()
    try:
        return {"commit": git("rev-parse", "--short", "HEAD") or None,
                "relaxpack_dirty": bool(git("status", "--porcelain", "--", "relaxpack"))}
    except (OSError, subprocess.SubprocessError):
        return {"commit": None}


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def _geomeans(rows: list[dict]) -> dict:
    def gm(values):
        return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None
    ratios = [r["ratio"] for r in rows if r.get("ratio")]
    speedups = [r["speedup_over_reference"] for r in rows if r.get("speedup_over_reference")]
    return {"ratio_vs_ort_1thread": gm(ratios), "ratio_rows": len(ratios),
            "speedup_over_reference": gm(speedups), "speedup_rows": len(speedups)}


# ------------------------------------------------------------------ report
def _ms(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else \
        f"{value:.2f}" if value >= 1 else f"{value:.3f}"


def _cell(entry: dict) -> str:
    if entry["status"] == "ok":
        return _ms(entry.get("ms"))
    return {"timeout": entry["note"], "unsupported": "unsupported"}.get(entry["status"], "**error**")


def _error_cell(check: dict) -> str:
    if check.get("max_abs") is None:
        return f"**MISMATCH** ({check['note']})" if check.get("mismatch") else ""
    text = f"{check['max_abs']:.1e} (rel {check['max_rel']:.1e})"
    return f"**MISMATCH** {text}" if check["mismatch"] else text


def _mib(row: dict) -> str:
    values = [row[k].get("peak_rss_mib") for k in ("relaxpack", "ort_1thread", "reference")]
    return " / ".join("–" if v is None else f"{v:.0f}" if v >= 10 else f"{v:.1f}" for v in values) \
        if any(v is not None for v in values) else ""


def _markdown(report: dict) -> str:
    from .flops import bar_markdown
    env, rows, gm, load = report["environment"], report["rows"], report["geomean"], report["load_average"]
    blas_env = ", ".join(f"{k}={v}" for k, v in env.get("env", {}).items() if v is not None) or "none set"
    lines = [
        f"# relaxpack benchmarks ({report['size']})", "",
        f"`python -m benchmarks.run --size {report['size']} -n {report['n']}`, {report['wall_s']:.0f} s in all. "
        f"{env.get('cpu', '?')}, {env.get('cpu_count', '?')} cores; Python {env.get('python')}, "
        f"numpy {env.get('numpy')}, onnx {env.get('onnx')}, onnxruntime {env.get('onnxruntime')}, "
        f"relaxpack {env.get('relaxpack')} at commit {env.get('commit') or '?'}"
        f"{' with uncommitted changes in relaxpack/' if env.get('relaxpack_dirty') else ''}.", "",
        f"numpy's BLAS: {env.get('blas')} (build: {env.get('blas_build') or '?'}); kernel picked at run time: "
        f"**{env.get('blas_core')}**, {env.get('blas_threads')} thread(s). Worker environment: {blas_env} "
        f"(OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE: {report['openblas_env']}). Load average (1 min) at the start "
        f"{load['start'][0]:.2f}, at the end {load['end'][0]:.2f}: other processes on the machine add noise.", "",
        "| model | input shape | relaxpack ms | ORT 1-thread ms | ratio | ORT default ms | reference ms "
        "| speed-up over reference | convert ms | kernel calls | max error vs ORT | peak RSS MiB (relaxpack / ORT / ref) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"]
    for r in rows:
        rp = r["relaxpack"]
        speedup = f"{r['speedup_over_reference']:.1f}x" if r.get("speedup_over_reference") else \
            f">{r['speedup_over_reference_at_least']:.0f}x" if r.get("speedup_over_reference_at_least") else ""
        lines.append("| " + " | ".join([
            r["row"], r["input_shapes"], _cell(rp), _cell(r["ort_1thread"]),
            f"{r['ratio']:.2f}" if r.get("ratio") else "", _cell(r["ort_default"]), _cell(r["reference"]),
            speedup, _ms(rp.get("convert_ms")), str(rp.get("kernel_calls", "")), _error_cell(r["check"]),
            _mib(r)]) + " |")
    ratio, speedup = gm["ratio_vs_ort_1thread"], gm["speedup_over_reference"]
    lines += ["", "Geometric means: relaxpack / ORT (1 thread) = "
              + (f"**{ratio:.2f}** over {gm['ratio_rows']} rows" if ratio else "n/a")
              + "; speed-up over the reference evaluator = "
              + (f"**{speedup:.1f}x** over {gm['speedup_rows']} rows" if speedup else "n/a")
              + " (rows where the reference hit its cap are left out)."]
    lines += ["", bar_markdown(rows, env.get("sgemm_gflops"))]
    converts = [c for c in report.get("convert_time", []) if "stages_ms" in c]
    if converts:
        from .convert_time import markdown as convert_markdown
        lines += ["", "Convert time per stage, ms (`benchmarks/convert_time.py`, fastest of its runs; the issue's "
                  "budget is a ResNet-50-size model in under 2 s):", "", convert_markdown(converts)]
    notes = [f"- {r['row']}: relaxpack {r['relaxpack']['status']}: `{r['relaxpack']['note']}`"
             for r in rows if r["relaxpack"]["status"] != "ok"]
    notes += [f"- {r['row']}: {k} {r[k]['status']}: `{r[k]['note']}`"
              for r in rows for k in RUNTIMES[1:] if r[k]["status"] not in ("ok", "timeout")]
    notes += [f"- **MISMATCH** {r['row']}: {_error_cell(r['check'])}" for r in rows if r["check"].get("mismatch")]
    if notes:
        lines += ["", "Not timed or not agreeing:", "", *notes]
    models = {r["model"]: r["description"] for r in rows}
    lines += ["", "Models (seeded random weights, `benchmarks/models.py`):", "",
              *(f"- {name}: {text}" for name, text in models.items())]
    method = __doc__.split("How it measures (repeated in results.md):")[1].strip()
    lines += ["", "How it measures:", "", method.replace("\n  ", " ").replace("``", "`"), ""]
    return "\n".join(lines)


# ------------------------------------------------------------------ worker
class _Runner:
    """One runtime on one setting: a call, its timings and its state."""

    def __init__(self, name: str, fn, cap: float | None = None):
        self.name, self.fn, self.cap = name, fn, cap
        self.times: list[float] = []
        self.status, self.note, self.first = "ok", "", None

    def call(self):
        if self.cap is None:
            return self.fn()
        return _capped(self.fn, self.cap)

    def warm(self, count: int) -> None:
        try:
            start = time.perf_counter()
            self.first = self.call()
            if self.cap is not None and time.perf_counter() - start > self.cap / 3:
                count = 1                       # slow enough: the first run is the warm-up
            for _ in range(count - 1):
                self.call()
        except _Timeout:
            self.status, self.note = "timeout", f">{self.cap:g} s"
        except Exception as err:  # noqa: BLE001 - a runtime that fails is a result
            self.status, self.note = "error", f"{type(err).__name__}: {_first_line(err)}"

    def wants_more(self, n: int, budget: float) -> bool:
        return self.status == "ok" and len(self.times) < n and not (sum(self.times) > budget and len(self.times) >= 3)

    def summary(self) -> dict:
        out = {"status": self.status, "note": self.note}
        if self.times:
            out.update(ms=1e3 * float(np.median(self.times)), min_ms=1e3 * min(self.times), runs=len(self.times),
                       times_ms=[round(1e3 * t, 4) for t in self.times])
        return out


class _Timeout(BaseException):
    """A capped run took too long (a BaseException, so no ``except Exception`` inside a runtime eats it)."""


def _capped(fn, seconds: float):
    def alarm(signum, frame):
        raise _Timeout()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        return fn()
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def _time_interleaved(runners: list[_Runner], n: int, budget: float) -> None:
    """Rounds of one run per runtime (the first runtime rotating), until each has n runs."""
    active = [r for r in runners if r.status == "ok"]
    for i in range(n):
        order = active[i % len(active):] + active[:i % len(active)] if active else []
        for r in order:
            if not r.wants_more(n, budget):
                continue
            gc.collect()
            gc.disable()
            try:
                start = time.perf_counter()
                r.call()
                r.times.append(time.perf_counter() - start)
            except _Timeout:
                r.status, r.note = "timeout", f">{r.cap:g} s"
            except Exception as err:  # noqa: BLE001
                r.status, r.note = "error", f"{type(err).__name__}: {_first_line(err)}"
            finally:
                gc.enable()


def _compare(got: list, want: list) -> dict:
    """Max abs error and max abs error / max |want| over all outputs."""
    max_abs = max_rel = 0.0
    for g, w in zip(got, want):
        g, w = np.asarray(g), np.asarray(w)
        if g.shape != w.shape:
            return {"max_abs": None, "max_rel": None, "mismatch": True,
                    "note": f"shape {list(g.shape)} vs ORT {list(w.shape)}"}
        g, w = g.astype(np.float64), w.astype(np.float64)
        if not np.array_equal(np.isnan(g), np.isnan(w)):
            return {"max_abs": None, "max_rel": None, "mismatch": True, "note": "NaNs differ"}
        err = float(np.nanmax(np.abs(g - w))) if g.size else 0.0
        scale = float(np.nanmax(np.abs(w))) if w.size else 0.0
        max_abs, max_rel = max(max_abs, err), max(max_rel, err / scale if scale else err)
    return {"max_abs": max_abs, "max_rel": max_rel, "mismatch": bool(max_rel > MISMATCH_REL), "note": ""}


def _worker(args) -> int:
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    import relaxpack
    from relaxpack.runtime import VirtualMachine

    from .flops import MacCounter, product_weight_bytes, read_rate, sgemm_peak
    from .models import MODELS

    bench = MODELS[args.worker](args.size, seed=args.seed)
    tiny = MODELS["mlp"]("smoke")
    relaxpack.build(relaxpack.from_onnx(tiny.model, dims=tiny.import_dims))   # one-time imports, untimed
    log = lambda text: print(f"  {bench.name}: {text}", file=sys.stderr, flush=True)  # noqa: E731
    rp = {"status": "ok", "note": ""}
    exe = vm = None
    try:
        start = time.perf_counter()
        exe = relaxpack.build(relaxpack.from_onnx(bench.model, dims=bench.import_dims))
        rp["convert_ms"] = 1e3 * (time.perf_counter() - start)
        rp["kernel_calls"] = exe.kernel_call_count()
        rp["instructions"] = sum(len(f.instructions) for f in exe.functions.values())
        vm = VirtualMachine(exe)
    except relaxpack.RelaxpackError as err:
        kind = "unsupported" if type(err).__name__ == "UnsupportedOpError" else "error"
        rp.update(status=kind, note=f"{type(err).__name__}: {_first_line(err)}")
        log(rp["note"])

    data = bench.model.SerializeToString()
    weight_bytes, macs = product_weight_bytes(bench.model), MacCounter(bench.model)
    one = ort.SessionOptions()
    one.intra_op_num_threads = one.inter_op_num_threads = 1
    sessions = {"ort_1thread": ort.InferenceSession(data, one, providers=["CPUExecutionProvider"]),
                "ort_default": ort.InferenceSession(data, providers=["CPUExecutionProvider"])}
    names = [o.name for o in sessions["ort_1thread"].get_outputs()]
    reference = ReferenceEvaluator(bench.model)

    with tempfile.TemporaryDirectory(prefix="rp-probe-") as tmp:
        tmp = Path(tmp)
        if not args.no_memory:
            (tmp / "model.onnx").write_bytes(data)
            if exe is not None:
                exe.save(tmp / "model.rpk")
        rows = []
        for index, setting in enumerate(bench.settings):
            feeds = setting.feeds(args.seed)
            runners = [_Runner("relaxpack", lambda: vm.run(feeds)) if vm is not None else None,
                       *(_Runner(k, (lambda s: lambda: s.run(None, feeds))(s)) for k, s in sessions.items()),
                       _Runner("reference", lambda: reference.run(None, feeds), cap=REF_CAP_S)]
            runners = [r for r in runners if r is not None]
            interleaved = [r for r in runners if r.name != "ort_default"]
            for r in interleaved:
                r.warm(args.warmup)
            _time_interleaved(interleaved, args.n, args.budget)
            # last and alone: its pool threads spin after each run and would slow whatever ran next
            by_default = next(r for r in runners if r.name == "ort_default")
            by_default.warm(args.warmup)
            _time_interleaved([by_default], args.n, args.budget)
            by = {r.name: r for r in runners}
            row = {"model": bench.name, "setting": setting.label, "row": f"{bench.name} ({setting.label})",
                   "description": bench.description, "dims": setting.dims,
                   "input_shapes": ", ".join(f"{k} {list(v.shape)}" for k, v in feeds.items())}
            row.update({k: by[k].summary() for k in RUNTIMES if k in by})
            row["relaxpack"] = {**rp, **(by["relaxpack"].summary() if "relaxpack" in by else {})}
            want = by["ort_1thread"].first
            row["check"] = {"note": "relaxpack did not run"}
            if want is not None and by.get("relaxpack") and by["relaxpack"].first is not None:
                row["check"] = _compare([by["relaxpack"].first[k] for k in names], want)
            if want is not None and by["reference"].first is not None:
                row["reference_check"] = _compare(by["reference"].first, want)
            _ratios(row)
            row["gflop"] = 2 * macs.count(feeds) / 1e9
            row["weight_read_ms"] = 1e3 * weight_bytes / read_rate(weight_bytes) if weight_bytes else None
            if not args.no_memory:
                np.savez(tmp / f"feeds_{index}.npz", **feeds)
                _memory(row, tmp, index)
            if args.profile and vm is not None:
                _profile(lambda: vm.run(feeds), args.n, args.profile, row)
            log(f"{setting.label}: " + ", ".join(
                f"{k} {_ms(row[k]['ms']) + ' ms' if 'ms' in row[k] else row[k]['status']}" for k in RUNTIMES))
            rows.append(row)
    environment = {**_environment(), "sgemm_gflops": sgemm_peak() / 1e9}
    args.result.write_text(json.dumps({"environment": environment, "rows": rows}))
    return 0


def _ratios(row: dict) -> None:
    ours, ort1, ref = (row[k].get("ms") for k in ("relaxpack", "ort_1thread", "reference"))
    row["ratio"] = ours / ort1 if ours and ort1 else None
    row["speedup_over_reference"] = ref / ours if ours and ref else None
    if ours and row["reference"]["status"] == "timeout":
        row["speedup_over_reference_at_least"] = 1e3 * REF_CAP_S / ours


def _memory(row: dict, tmp: Path, index: int) -> None:
    for kind in ("relaxpack", "ort_1thread", "reference"):
        if row[kind]["status"] != "ok" or kind == "relaxpack" and not (tmp / "model.rpk").exists():
            continue
        cmd = [sys.executable, "-m", "benchmarks.run", "--probe", kind, "--probe-dir", str(tmp),
               "--probe-setting", str(index)]
        try:
            proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=4 * REF_CAP_S)
            row[kind].update(json.loads(proc.stdout.strip().splitlines()[-1]) if proc.returncode == 0
                             else {"memory_note": _last_line(proc.stderr)})
        except (subprocess.TimeoutExpired, IndexError, ValueError) as err:
            row[kind]["memory_note"] = f"probe failed: {type(err).__name__}"


def _probe(args) -> int:
    """Load one runtime with the model, run it twice, print the growth of the resident set."""
    d = args.probe_dir
    with np.load(d / f"feeds_{args.probe_setting}.npz") as f:
        feeds = {k: f[k] for k in f.files}
    if args.probe == "relaxpack":
        from relaxpack.runtime import VirtualMachine, load
        make = lambda: (lambda vm: lambda: vm.run(feeds))(VirtualMachine(load(d / "model.rpk")))  # noqa: E731
    elif args.probe == "ort_1thread":
        import onnxruntime as ort
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = opts.inter_op_num_threads = 1

        def make():
            s = ort.InferenceSession(str(d / "model.onnx"), opts, providers=["CPUExecutionProvider"])
            return lambda: s.run(None, feeds)
    else:
        from onnx.reference import ReferenceEvaluator
        make = lambda: (lambda ev: lambda: ev.run(None, feeds))(ReferenceEvaluator(str(d / "model.onnx")))  # noqa: E731
    gc.collect()
    base = _status_kib("VmRSS")
    try:
        Path("/proc/self/clear_refs").write_text("5")
        reset = True
    except OSError:
        reset = False
    run = make()
    run()
    run()
    peak = _status_kib("VmHWM")
    print(json.dumps({"peak_rss_mib": round(max(peak - base, 0) / 1024, 2), "hwm_reset": reset}))
    return 0


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise OSError(f"no {field} in /proc/self/status")


def _profile(run, n: int, where: Path, row: dict) -> None:
    import cProfile
    import io
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(n):
        run()
    prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out).sort_stats("cumulative")
    out.write(f"# {row['row']}: relaxpack, {n} runs, sorted by cumulative time\n")
    stats.print_stats(40)
    out.write("\n# kernels only (relaxpack/runtime/kernels), by cumulative time\n")
    stats.print_stats("kernels", 25)
    where.mkdir(parents=True, exist_ok=True)
    slug = "".join(c if c.isalnum() else "_" for c in row["row"]).strip("_")
    (where / f"profile_{slug}.txt").write_text(out.getvalue())


def _environment() -> dict:
    import platform

    import onnx
    import onnxruntime

    import relaxpack
    blas = np.show_config(mode="dicts").get("Build Dependencies", {}).get("blas", {})
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else ""
    core, threads = _openblas_runtime()
    return {"python": platform.python_version(), "numpy": np.__version__, "onnx": onnx.__version__,
            "onnxruntime": onnxruntime.__version__, "relaxpack": relaxpack.__version__,
            "cpu": cpu, "cpu_count": os.cpu_count(),
            "blas": f"{blas.get('name', '?')} {blas.get('version', '')}".strip(),
            "blas_build": " ".join(str(blas.get("openblas configuration", "")).split()),
            "blas_core": core, "blas_threads": threads,
            "env": {k: os.environ.get(k) for k in THREAD_VARS + OPENBLAS_TUNING}}


def _openblas_runtime() -> tuple[str, int | None]:
    """The kernel OpenBLAS picked at run time and its thread count (numpy's own OpenBLAS)."""
    import ctypes
    paths = {line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
             if "openblas" in line.lower() and line.split()[-1].startswith("/")}
    for path in sorted(paths):
        lib = ctypes.CDLL(path)
        for prefix, suffix in (("scipy_openblas_", "64_"), ("scipy_openblas_", ""), ("openblas_", "64_"),
                               ("openblas_", "")):
            core = getattr(lib, f"{prefix}get_corename{suffix}", None)
            if core is None:
                continue
            core.restype = ctypes.c_char_p
            nthreads = getattr(lib, f"{prefix}get_num_threads{suffix}", None)
            return core().decode(), (int(nthreads()) if nthreads is not None else None)
    return "unknown", None


if __name__ == "__main__":
    sys.exit(main())

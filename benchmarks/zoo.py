"""Time every zoo model at its manifest shapes: relaxpack against onnxruntime and tract.

    python -m benchmarks.zoo [--models a,b] [--rounds 7] [--round-ms 40] [-O 2] [--out benchmarks/results]

Writes ``zoo.md`` (the table and the geomeans) and ``zoo.json`` (everything, per-round times
included) to ``--out`` and prints the table; exits 1 when relaxpack failed on a model (other than
the zoo test's strict xfails) or an output of it fails the zoo's judge. Nothing here asserts on speed.

How it measures (repeated in zoo.md):

- The corpus is ``tests/models/zoo`` (``manifest.json``: models, inputs, the shapes to test), the
  inputs the zoo's tests use (``tests/models/zoo/inputs.py``), each output checked by the zoo's
  judge (``judge.py``: onnxruntime for float models, onnxruntime without graph optimizations for
  QDQ models, onnx's reference evaluator for dynamically quantized ones); tract's outputs too.
- One worker subprocess per model, with OMP/OPENBLAS/MKL_NUM_THREADS=1 set before numpy loads
  (OPENBLAS_CORETYPE/OPENBLAS_L2_SIZE removed unless ``--openblas-env keep``, so OpenBLAS picks
  the kernel for this CPU). relaxpack runs the archive built at ``-O`` from the model converted
  with no dims, one archive for all shapes; onnxruntime one session with its graph optimizations
  (the default), 1 thread; tract a runnable per shape, with the shape's concrete input facts.
- At each shape relaxpack, onnxruntime (1 thread) and tract run in rounds, interleaved, the first
  runtime rotating; in a round each runs ``k`` calls back to back (``k`` per runtime, so a round
  lasts about ``--round-ms``). A runtime's time is the median over rounds of its mean per call; a
  ratio is the median over rounds of the per-round quotient. onnxruntime with default threads is
  timed after the others, alone (its pool threads spin after each run).
- A model's ratio is the geometric mean over its shapes; the geomeans are over models.
- Where the time goes: a model's time per kernel call (its time over its archive's kernel-call
  instructions, a static count: a loop body counts once) and its dispatch floor, the time the same
  number of bare numpy calls would take (``np.add`` of four floats with ``out=``, timed at the
  start of the run) over onnxruntime's time. A floor far below the ratio says the gap is in what
  each kernel does, not in how many kernels run.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.run import REPO, worker_env


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.zoo", description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="", help="comma-separated zoo model names (default: all)")
    p.add_argument("--rounds", type=int, default=7, help="timed rounds per shape (median reported)")
    p.add_argument("--round-ms", type=float, default=40.0, help="about how long each runtime runs per round")
    p.add_argument("-O", "--opt-level", type=int, default=2, dest="level")
    p.add_argument("--no-tract", action="store_true", help="leave tract out even where it is installed")
    p.add_argument("--openblas-env", choices=("keep", "unset"), default="unset")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds allowed for one model's worker")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results")
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.worker:
        from .zoo_worker import main as worker
        return worker(args.worker, args.result, args.level, args.rounds, args.round_ms, not args.no_tract)
    zoo = json.loads((REPO / "tests" / "models" / "zoo" / "manifest.json").read_text())
    known = [e["name"] for e in zoo["models"]]
    names = [m for m in args.models.split(",") if m] or known
    unknown = sorted(set(names) - set(known))
    if unknown:
        print(f"error: unknown zoo model(s) {unknown}", file=sys.stderr)
        return 2
    env = worker_env(args.openblas_env)
    bare_us = bare_call_us()
    started, load_start = time.perf_counter(), list(os.getloadavg())
    models, environment = [], {}
    for i, name in enumerate(names):
        result = _run_worker(name, args, env)
        environment = environment or result.pop("environment", {})
        result.pop("environment", None)
        models.append(result)
        print(f"[{time.perf_counter() - started:6.0f}s {i + 1}/{len(names)}] {_progress(result)}",
              file=sys.stderr, flush=True)
    from .run import _git
    report = {"command": _command(args), "level": args.level, "rounds": args.rounds, "round_ms": args.round_ms,
              "openblas_env": args.openblas_env, "wall_s": round(time.perf_counter() - started, 1),
              "load_average": {"start": load_start, "end": list(os.getloadavg())},
              "environment": {**environment, **_git()}, "models": models, "geomean": summarize(models),
              "bare_call_us": bare_us, "dispatch": dispatch_summary(models, bare_us)}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "zoo.json").write_text(json.dumps(report, indent=1) + "\n")
    text = markdown(report)
    (args.out / "zoo.md").write_text(text)
    print(text)
    expected = _expected_failures()
    bad = [m["model"] for m in models if _failed(m) and not (m["model"] in expected and m["relaxpack"]["status"] != "ok")]
    if bad:
        print(f"relaxpack failed or mismatched on: {', '.join(bad)}", file=sys.stderr)
    return 1 if bad else 0


def _expected_failures() -> set[str]:
    """The models the zoo's test expects relaxpack to fail on (its strict xfails)."""
    try:
        from tests.models.zoo.test_zoo import XFAIL
    except ImportError:     # pytest missing: every failure counts
        return set()
    return {key if isinstance(key, str) else key[0] for key in XFAIL}


def _command(args) -> str:
    parts = ["python -m benchmarks.zoo"]
    if args.models:
        parts.append(f"--models {args.models}")
    parts += [f"--rounds {args.rounds}", f"--round-ms {args.round_ms:g}", f"-O {args.level}"]
    parts += ["--no-tract"] * args.no_tract + [f"--openblas-env {args.openblas_env}"] * (args.openblas_env != "unset")
    return " ".join(parts)


def _run_worker(name: str, args, env: dict[str, str]) -> dict:
    with tempfile.TemporaryDirectory(prefix="rp-zoo-bench-") as tmp:
        result = Path(tmp) / "result.json"
        cmd = [sys.executable, "-m", "benchmarks.zoo", "--worker", name, "--result", str(result),
               "--rounds", str(args.rounds), "--round-ms", str(args.round_ms), "-O", str(args.level)]
        cmd += ["--no-tract"] if args.no_tract else []
        try:
            proc = subprocess.run(cmd, env=env, cwd=REPO, timeout=args.timeout, capture_output=True, text=True)
            failure = None if proc.returncode == 0 and result.exists() else \
                f"worker exited {proc.returncode}: {_last_line(proc.stderr)}"
        except subprocess.TimeoutExpired:
            failure = f"worker timed out after {args.timeout:.0f} s"
        if failure is None:
            return json.loads(result.read_text())
    return {"model": name, "relaxpack": {"status": "error", "note": failure}, "rows": []}


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def _failed(model: dict) -> bool:
    if model["relaxpack"]["status"] != "ok" or not model["rows"]:
        return True
    return any(r["relaxpack"]["status"] != "ok" or not r["relaxpack"].get("check", {}).get("ok")
               for r in model["rows"])


def _progress(model: dict) -> str:
    ratio, tract = model_ratio(model, "ratio"), model_ratio(model, "tract_ratio")
    text = f"{model['model']}: " + (f"{ratio:.2f}x onnxruntime" if ratio else model["relaxpack"].get("note", "failed"))
    return text + (f", tract {tract:.2f}x" if tract else "")


# ------------------------------------------------------------------ summaries
def bare_call_us(n: int = 20000) -> float:
    """Microseconds of one bare numpy ufunc call from Python (``np.add`` of four float32 with ``out=``),
    the best of five batches of ``n``."""
    import numpy as np
    a, out, add = np.ones(4, np.float32), np.empty(4, np.float32), np.add
    best = math.inf
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            add(a, a, out=out)
        best = min(best, (time.perf_counter() - start) / n)
    return best * 1e6


def dispatch_summary(models: list[dict], bare_us: float) -> dict:
    """Geomeans over the models relaxpack ran of its time per kernel call and of the dispatch floor
    (kernel calls x a bare numpy call, over onnxruntime's time), each a geomean over the model's shapes."""
    per_call, floor = [], []
    for m in models:
        calls = m["relaxpack"].get("kernel_calls")
        rows = [r for r in m["rows"] if r["relaxpack"].get("ms") and r["ort_1thread"].get("ms")]
        if _failed(m) or not calls or not rows:
            continue
        per_call.append(geomean(1e3 * r["relaxpack"]["ms"] / calls for r in rows))
        floor.append(geomean(calls * bare_us / (1e3 * r["ort_1thread"]["ms"]) for r in rows))
    return {"us_per_kernel_call": geomean(per_call), "floor_ratio": geomean(floor), "models": len(floor),
            "floor_above_1_3": sum(f > 1.3 for f in floor)}


def geomean(values) -> float | None:
    values = [v for v in values if v]
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def model_ratio(model: dict, key: str) -> float | None:
    """Geometric mean over the model's shapes, when every shape has the ratio (else None)."""
    ratios = [r.get(key) for r in model["rows"]]
    return geomean(ratios) if ratios and all(ratios) else None


def summarize(models: list[dict]) -> dict:
    ours = {m["model"]: model_ratio(m, "ratio") for m in models if not _failed(m)}
    tract = {m["model"]: model_ratio(m, "tract_ratio") for m in models
             if all(r["tract"].get("check", {}).get("ok") for r in m["rows"]) and m["rows"]}
    ours = {k: v for k, v in ours.items() if v}
    tract = {k: v for k, v in tract.items() if v}
    both = sorted(set(ours) & set(tract))
    worst = max(ours.items(), key=lambda kv: kv[1]) if ours else (None, None)
    slowest = sorted(ours.items(), key=lambda kv: -kv[1])[:5]
    return {"slowest": [[k, v] for k, v in slowest], "families": families(models, ours, tract),
            "relaxpack_all": geomean(ours.values()), "relaxpack_models": len(ours), "models": len(models),
            "tract_all": geomean(tract.values()), "tract_models": len(tract),
            "relaxpack_every_runtime": geomean(ours[k] for k in both),
            "tract_every_runtime": geomean(tract[k] for k in both), "every_runtime_models": len(both),
            "worst_model": worst[0], "worst_ratio": worst[1],
            "above_2_5": sorted(k for k, v in ours.items() if v > 2.5)}


def families(models: list[dict], ours: dict, tract: dict) -> list[dict]:
    """Per model family (the manifest's): how many models, the geomeans of both runtimes' ratios
    (each over the models it ran) and the family's slowest model for relaxpack."""
    by: dict[str, list[str]] = {}
    for m in models:
        by.setdefault(m.get("family") or m["model"], []).append(m["model"])
    rows = []
    for family, names in by.items():
        mine = {n: ours[n] for n in names if n in ours}
        worst = max(mine.items(), key=lambda kv: kv[1]) if mine else (None, None)
        rows.append({"family": family, "models": len(names), "relaxpack": geomean(mine.values()),
                     "relaxpack_models": len(mine), "tract": geomean(tract[n] for n in names if n in tract),
                     "tract_models": sum(n in tract for n in names), "slowest": worst[0], "slowest_ratio": worst[1]})
    return sorted(rows, key=lambda r: -(r["relaxpack"] or 0))


# ------------------------------------------------------------------ report
def _ms(value) -> str:
    if value is None:
        return ""
    return f"{value:.0f}" if value >= 100 else f"{value:.1f}" if value >= 10 else \
        f"{value:.2f}" if value >= 1 else f"{value:.3f}"


def _cell(entry: dict) -> str:
    if entry["status"] == "ok":
        text = _ms(entry.get("ms"))
        return text if entry.get("check", {"ok": True})["ok"] else f"{text} **mismatch**"
    return "–" if entry["status"] == "skipped" else "**error**"


def _dims(dims: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in dims.items())


def markdown(report: dict) -> str:
    env, gm, load = report["environment"], report["geomean"], report["load_average"]
    lines = [
        "# The zoo: relaxpack against onnxruntime and tract", "",
        f"`{report['command']}`, {report['wall_s']:.0f} s in all. {env.get('cpu', '?')}, "
        f"{env.get('cpu_count', '?')} cores; Python {env.get('python')}, numpy {env.get('numpy')} "
        f"(BLAS {env.get('blas')}, kernel {env.get('blas_core')}, 1 thread), onnxruntime {env.get('onnxruntime')}, "
        f"tract {env.get('tract') or 'not installed'}, relaxpack {env.get('relaxpack')} at commit "
        f"{env.get('commit') or '?'}{' with uncommitted changes in relaxpack/' if env.get('relaxpack_dirty') else ''}. "
        f"Load average (1 min) {load['start'][0]:.2f} at the start, {load['end'][0]:.2f} at the end: "
        "other processes on the machine add noise.", "",
        _geomean_text(gm), "", *_dispatch_text(report), *_family_table(gm.get("families", [])),
        "| model | shapes | relaxpack ms | ORT 1-thread ms | ratio | tract ms | tract ratio | ORT default ms |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    notes = []
    for m in report["models"]:
        rows = m["rows"]
        if not rows:
            lines.append(f"| {m['model']} | | **error** | | | | | |")
            notes.append(f"- {m['model']}: relaxpack: `{m['relaxpack']['note']}`")
            continue
        ratio, tract = model_ratio(m, "ratio"), model_ratio(m, "tract_ratio")
        cells = [" / ".join(_cell(r[k]) for r in rows) for k in ("relaxpack", "ort_1thread", "tract", "ort_default")]
        lines.append("| " + " | ".join([
            m["model"], " / ".join(_dims(r["dims"]) for r in rows), cells[0], cells[1],
            f"**{ratio:.2f}**" if ratio and ratio > 2.5 else f"{ratio:.2f}" if ratio else "",
            cells[2], f"{tract:.2f}" if tract else "", cells[3]]) + " |")
        notes += _notes(m)
    if notes:
        lines += ["", "Not run, failed or not agreeing (– in the table):", "", *sorted(set(notes))]
    method = __doc__.split("How it measures (repeated in zoo.md):")[1].strip()
    lines += ["", "How it measures:", "", method.replace("\n  ", " ").replace("``", "`"), ""]
    return "\n".join(lines)


def _geomean_text(gm: dict) -> str:
    def f(v):
        return f"**{v:.2f}**" if v else "n/a"
    text = (f"Geometric mean of relaxpack / onnxruntime (1 thread): {f(gm['relaxpack_all'])} over the "
            f"{gm['relaxpack_models']} models relaxpack ran of {gm['models']}; tract / onnxruntime: "
            f"{f(gm['tract_all'])} over the {gm['tract_models']} models tract ran. On the "
            f"{gm['every_runtime_models']} models every runtime ran: relaxpack {f(gm['relaxpack_every_runtime'])}, "
            f"tract {f(gm['tract_every_runtime'])}.")
    if gm.get("slowest"):
        text += " Slowest relative to onnxruntime: " + ", ".join(f"{k} ({v:.2f})" for k, v in gm["slowest"])
        text += f"; {len(gm['above_2_5'])} of {gm['relaxpack_models']} above 2.5." if gm["above_2_5"] \
            else "; none above 2.5."
    return text


def _dispatch_text(report: dict) -> list[str]:
    d = report.get("dispatch")
    if not d or not d["models"]:
        return []
    return [f"Where the time goes: {d['us_per_kernel_call']:.1f} µs per kernel call (geomean over "
            f"{d['models']} models); {d['models']} models' dispatch floor (as many bare numpy calls, "
            f"{report['bare_call_us']:.2f} µs each) is {d['floor_ratio']:.2f}x onnxruntime's time, "
            f"{d['floor_above_1_3']} of them above 1.3x.", ""]


def _family_table(rows: list[dict]) -> list[str]:
    """By model family, slowest first (relaxpack / onnxruntime 1 thread, geomeans over the family)."""
    if not rows:
        return []
    def ratio(v, n, total):
        return "" if v is None else f"{v:.2f}" + (f" ({n} of {total})" if n != total else "")
    lines = ["By family (geometric means of the models' ratios to onnxruntime, 1 thread):", "",
             "| family | models | relaxpack | tract | slowest (relaxpack) |", "| --- | ---: | ---: | ---: | --- |"]
    for r in rows:
        slowest = f"{r['slowest']} {r['slowest_ratio']:.2f}" if r["slowest"] else ""
        lines.append(f"| {r['family']} | {r['models']} | {ratio(r['relaxpack'], r['relaxpack_models'], r['models'])} | "
                     f"{ratio(r['tract'], r['tract_models'], r['models'])} | {slowest} |")
    return lines + [""]


def _notes(m: dict) -> list[str]:
    out = []
    for r in m["rows"]:
        for key in ("relaxpack", "tract", "ort_1thread", "ort_default"):
            entry = r[key]
            if entry["status"] != "ok" and entry.get("note"):
                out.append(f"- {m['model']}: {key}: `{entry['note']}`")
            elif entry.get("check") and not entry["check"]["ok"]:
                out.append(f"- {m['model']} at {_dims(r['dims'])}: {key} output {entry['check']['problem']}")
    return out


if __name__ == "__main__":
    sys.exit(main())

"""Convert time per stage: import, optimize, lower + plan, codegen, package.

``python -m benchmarks.convert_time --models resnet50`` converts each model
the way ``relaxpack.build`` does, stage by stage, ``-n`` times, and reports
the fastest run of each stage (the machine may be shared: the minimum is the
least disturbed figure), the slowest passes, and the end-to-end time of
``from_onnx`` + ``build`` + ``save`` for comparison. The issue's budget is a
ResNet-50-size model in under 2 s. Writes ``convert_time.json`` and
``convert_time.md`` into ``--out``; ``benchmarks.run`` includes the same
figures when asked (``--convert-time``).

>>> stages = convert_stages(MODELS["mlp"]("smoke").model)     # doctest: +SKIP
>>> sorted(stages["stages_ms"])                                # doctest: +SKIP
['check', 'codegen', 'import', 'lower + plan', 'optimize', 'package', 'script']
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import onnx

REPO = Path(__file__).resolve().parents[1]
STAGES = ("import", "check", "optimize", "lower + plan", "codegen", "script", "package")


def convert_stages(model: onnx.ModelProto, dims=None, runs: int = 3) -> dict:
    """Per-stage convert times in ms (fastest of ``runs``), the slowest passes
    of the fastest run, and the end-to-end time."""
    import relaxpack
    from relaxpack.ir.well_formed import check_well_formed
    from relaxpack.packager.codegen import codegen
    from relaxpack.passes import PassContext, PassTiming
    from relaxpack.passes.pipeline import lower_pipeline, optimize_pipeline
    from relaxpack.vm_build import ir_text

    best: dict[str, float] = {}
    passes: dict[str, float] = {}
    total = float("inf")
    with tempfile.TemporaryDirectory(prefix="rp-convert-") as tmp:
        source = Path(tmp) / "model.onnx"
        onnx.save(model, source)
        target = Path(tmp) / "model.rpk"
        for _ in range(runs):
            times = {}
            timer = PassTiming()
            t0 = time.perf_counter()
            mod = relaxpack.from_onnx(source, dims=dims)
            times["import"] = _lap(t0)
            t0 = time.perf_counter()
            check_well_formed(mod)
            times["check"] = _lap(t0)
            with PassContext(opt_level=2, instruments=[timer], check_well_formed=True):
                t0 = time.perf_counter()
                optimized = optimize_pipeline()(mod)
                times["optimize"] = _lap(t0)
                t0 = time.perf_counter()
                lowered = lower_pipeline()(optimized)
                times["lower + plan"] = _lap(t0)
            t0 = time.perf_counter()
            exe = codegen(lowered, plan_memory=True)
            times["codegen"] = _lap(t0)
            t0 = time.perf_counter()
            exe.metadata["ir"] = ir_text(lowered)
            times["script"] = _lap(t0)
            t0 = time.perf_counter()
            exe.save(target)
            times["package"] = _lap(t0)
            if sum(times.values()) < sum(best.values()) or not best:
                passes = _by_pass(timer)
            best = {k: min(v, best.get(k, v)) for k, v in times.items()}

            t0 = time.perf_counter()
            relaxpack.build(relaxpack.from_onnx(source, dims=dims)).save(target)
            total = min(total, _lap(t0))
    slowest = dict(sorted(passes.items(), key=lambda kv: -kv[1])[:8])
    return {"stages_ms": {k: round(v, 1) for k, v in best.items()},
            "sum_ms": round(sum(best.values()), 1), "end_to_end_ms": round(total, 1),
            "slowest_passes_ms": {k: round(v, 1) for k, v in slowest.items()}}


def _lap(t0: float) -> float:
    return 1e3 * (time.perf_counter() - t0)


def _by_pass(timer) -> dict[str, float]:
    """ms per pass name, summed over repeats; the pipelines' own entries
    (which contain their passes) are left out."""
    out: dict[str, float] = {}
    for name, seconds in timer.timings:
        if name in ("Optimize", "Lower") or name.startswith("Optimize"):
            continue
        out[name] = out.get(name, 0.0) + 1e3 * seconds
    return out


def markdown(rows: list[dict]) -> str:
    """A table: one row per model, one column per stage."""
    head = "| model | " + " | ".join(STAGES) + " | sum | from_onnx + build + save |"
    lines = [head, "|" + " --- |" * (len(STAGES) + 3)]
    for row in rows:
        s = row["stages_ms"]
        lines.append(f"| {row['model']} | " + " | ".join(f"{s.get(k, 0):.0f}" for k in STAGES)
                     + f" | {row['sum_ms']:.0f} | {row['end_to_end_ms']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from .models import MODELS

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="resnet50")
    p.add_argument("--size", choices=("full", "smoke"), default="full")
    p.add_argument("-n", type=int, default=3, help="runs per model (fastest reported)")
    p.add_argument("--out", type=Path, default=None, help="write convert_time.json/.md here")
    args = p.parse_args(argv)
    rows = []
    for name in args.models.split(","):
        bench = MODELS[name](args.size)
        row = {"model": name, **convert_stages(bench.model, bench.import_dims, args.n)}
        rows.append(row)
        print(f"{name}: " + ", ".join(f"{k} {v:.0f} ms" for k, v in row["stages_ms"].items())
              + f"; sum {row['sum_ms']:.0f} ms, from_onnx + build + save {row['end_to_end_ms']:.0f} ms",
              file=sys.stderr)
        print("  slowest passes: " + ", ".join(f"{k} {v:.0f}" for k, v in row["slowest_passes_ms"].items()),
              file=sys.stderr)
    print(markdown(rows))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "convert_time.json").write_text(json.dumps(rows, indent=1))
        (args.out / "convert_time.md").write_text(markdown(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

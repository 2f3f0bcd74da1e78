"""The benchmark suite at its smoke size: it runs end to end, writes both result
files with a row per model setting, and relaxpack agrees with onnxruntime.
Benchmarks never assert on speed, and neither does this test."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from benchmarks.models import MODELS
from benchmarks.run import MISMATCH_REL, RUNTIMES, _compare, _Runner

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def smoke(tmp_path_factory) -> tuple[int, str, dict, str]:
    out = tmp_path_factory.mktemp("bench")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.run", "--size", "smoke", "-n", "1", "--warmup", "1",
                           "--out", str(out)], cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    report = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    md = (out / "results.md").read_text() if (out / "results.md").exists() else ""
    return proc.returncode, proc.stderr, report, md


def expected_rows() -> list[tuple[str, str]]:
    return [(name, s.label) for name, make in MODELS.items() for s in make("smoke").settings]


def test_writes_a_row_per_model_setting(smoke):
    code, stderr, report, md = smoke
    assert code == 0, stderr[-3000:]
    assert [(r["model"], r["setting"]) for r in report["rows"]] == expected_rows()
    results = md.split("Geometric means")[0]        # the convert-time table follows
    table = [line for line in results.splitlines() if line.startswith("| ") and not line.startswith(("| model", "| ---"))]
    assert [line.split(" | ")[0][2:] for line in table] == [r["row"] for r in report["rows"]]
    assert "Geometric means" in md and report["geomean"]["ratio_vs_ort_1thread"] > 0
    assert report["environment"]["blas"] and report["environment"]["blas_core"]


def test_reports_convert_time_per_stage(smoke):
    _, _, report, md = smoke
    from benchmarks.convert_time import STAGES
    (row,) = report["convert_time"]
    assert row["model"] == "mlp" and list(row["stages_ms"]) == list(STAGES)
    assert all(ms >= 0 for ms in row["stages_ms"].values()) and row["end_to_end_ms"] > 0
    assert "Convert time per stage" in md and "| mlp |" in md


def test_relaxpack_agrees_with_onnxruntime(smoke):
    _, _, report, _ = smoke
    for row in report["rows"]:
        status = row["relaxpack"]["status"]
        assert status in ("ok", "unsupported"), (row["row"], row["relaxpack"]["note"])
        assert not row["check"].get("mismatch"), (row["row"], row["check"])
        if status == "ok":
            assert row["check"]["max_rel"] <= MISMATCH_REL and row["relaxpack"]["kernel_calls"] > 0
        else:    # kept in the suite as a target; the note names the op
            assert "unsupported op" in row["relaxpack"]["note"]
        for other in RUNTIMES[1:]:
            assert row[other]["status"] == "ok", (row["row"], other, row[other]["note"])
            assert row[other]["runs"] == 1


def test_unsupported_models_are_still_timed_on_the_others(smoke):
    _, _, report, md = smoke
    unsupported = [r for r in report["rows"] if r["relaxpack"]["status"] == "unsupported"]
    for row in unsupported:
        assert row["ort_1thread"]["ms"] > 0 and row["reference"]["ms"] > 0
        assert f"{row['row']}: relaxpack unsupported" in md


def test_compare_flags_disagreement():
    want = [np.array([1.0, -2.0, 4.0], np.float32)]
    assert not _compare([want[0] + 1e-6], want)["mismatch"]
    off = _compare([want[0] + np.array([0, 0, 0.1], np.float32)], want)
    assert off["mismatch"] and off["max_rel"] == pytest.approx(0.1 / 4, rel=1e-5)
    assert _compare([want[0][:2]], want)["mismatch"]
    assert _compare([np.array([np.nan, -2.0, 4.0], np.float32)], want)["mismatch"]


def test_a_capped_run_is_recorded_once_as_a_timeout():
    def slow():
        end = time.perf_counter() + 5
        while time.perf_counter() < end:   # Python code, so the alarm gets through
            pass
    runner = _Runner("reference", slow, cap=0.05)
    runner.warm(2)
    assert (runner.status, runner.note) == ("timeout", ">0.05 s")
    assert not runner.wants_more(n=5, budget=60) and runner.summary() == {"status": "timeout", "note": ">0.05 s"}


def test_dispatch_benchmark_runs(capsys):
    from benchmarks import dispatch
    assert dispatch.main(["--length", "40", "-n", "3"]) == 0
    out = capsys.readouterr().out
    assert "40 kernel calls" in out and "one-op model (Relu on 2x4): vm.run" in out


def test_zoo_benchmark_smoke(tmp_path):
    """``python -m benchmarks.zoo`` on one tiny model, one round: both result files, a checked row per
    manifest shape, the geomeans; tract is timed where it is installed and said to be missing where not."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.zoo", "--models", "sk_logistic_regression",
                           "--rounds", "1", "--round-ms", "1", "--out", str(tmp_path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((tmp_path / "zoo.json").read_text())
    (model,) = report["models"]
    from tests.models.zoo.judge import MODELS as ZOO
    assert [row["dims"] for row in model["rows"]] == ZOO["sk_logistic_regression"]["shapes"]
    for row in model["rows"]:
        assert row["relaxpack"]["check"]["ok"] and row["ratio"] > 0
        assert len(row["relaxpack"]["rounds_ms"]) == len(row["ort_1thread"]["rounds_ms"]) == 1
        assert row["ort_default"]["status"] == "ok"
        assert row["tract"]["status"] in ("ok", "skipped")
        if row["tract"]["status"] == "skipped":
            assert row["tract"]["note"].startswith("tract not available")
    assert report["geomean"]["relaxpack_models"] == 1 and report["geomean"]["relaxpack_all"] > 0
    md = (tmp_path / "zoo.md").read_text()
    assert "| sk_logistic_regression |" in md and "Geometric mean of relaxpack / onnxruntime" in md
    assert report["bare_call_us"] > 0 and report["dispatch"]["models"] == 1 and "Where the time goes" in md


def test_zoo_dispatch_summary():
    """Time per kernel call and the dispatch floor: geomeans over each model's shapes, then over
    models; a failed model is left out."""
    from benchmarks.zoo import dispatch_summary

    def model(name, calls, ours_ms, ort_ms, ok=True):
        rows = [{"relaxpack": {"status": "ok", "ms": a, "check": {"ok": ok}}, "ort_1thread": {"status": "ok", "ms": b}}
                for a, b in zip(ours_ms, ort_ms)]
        return {"model": name, "relaxpack": {"status": "ok", "kernel_calls": calls}, "rows": rows}
    d = dispatch_summary([model("a", 10, [0.1, 0.4], [0.01, 0.04]), model("b", 4, [0.02], [0.002], ok=False)],
                         bare_us=0.5)
    assert d["models"] == 1
    assert abs(d["us_per_kernel_call"] - 20.0) < 1e-9            # sqrt(10 us * 40 us)
    assert abs(d["floor_ratio"] - 0.25) < 1e-9                   # sqrt(5/10 * 5/40)
    assert d["floor_above_1_3"] == 0


def test_cold_start_benchmark_runs(tmp_path, capsys):
    """``python -m benchmarks.cold_start`` with one round: a fresh process per runtime, every phase timed."""
    from benchmarks import cold_start
    assert cold_start.main(["-n", "1", "--workdir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("| relaxpack", "| onnxruntime"))]
    assert len(rows) == 2 and all(len(r.split("|")) == 8 for r in rows)
    assert "relaxpack / onnxruntime, whole process:" in out


def test_fused_chains_benchmark_runs(capsys):
    """Both tables at their smallest: a chain row (the outputs checked -O2 against -O0 inside)
    and a model row; no assertion on the figures."""
    from benchmarks import fused_chains
    assert fused_chains.main(["--lengths", "3", "--sizes", "8", "--rounds", "1", "--round-ms", "1"]) == 0
    assert fused_chains.main(["--models", "transformer_block", "--rounds", "1", "--round-ms", "1"]) == 0
    out = capsys.readouterr().out
    assert "| 3 | 8 |" in out and "| transformer_block | 25 |" in out


def test_conv_kinds_benchmark_runs(capsys):
    """``python -m benchmarks.conv_kinds`` on Whisper's conv front end, one round: its two Conv1d
    instructions timed and grouped, listed beside onnxruntime's Conv nodes; the conv kernels'
    specialization is left as it was."""
    from benchmarks import conv_kinds
    from relaxpack.runtime.kernels._registry import KERNELS
    before = [KERNELS[name].fn.specialize_attrs for name in conv_kinds.CONV_KERNELS]
    assert conv_kinds.main(["--models", "whisper_frontend_ts", "--rounds", "1", "--calls", "1", "--detail"]) == 0
    assert [KERNELS[name].fn.specialize_attrs for name in conv_kinds.CONV_KERNELS] == before
    out = capsys.readouterr().out
    assert "== whisper_frontend_ts" in out and "conv1d k3/s1" in out and "conv1d k3/s2" in out
    listed = [line for line in out.splitlines() if line.startswith("     conv1d")]
    assert len(listed) == 2 and all("/conv" in line for line in listed)


def test_conv_kinds_pairs_quantized_convs(capsys):
    """``benchmarks.conv_kinds`` on a QOperator ResNet with onnxruntime's optimizer off: its 20
    exact convs listed beside onnxruntime's QLinearConv nodes (counted as conv nodes, which
    ``Conv`` alone missed), and the header says which optimization level onnxruntime ran."""
    from benchmarks import conv_kinds
    assert conv_kinds.main(["--models", "resnet_qop_tensor", "--rounds", "1", "--calls", "1", "--detail",
                            "--ort-optimizer", "off"]) == 0
    out = capsys.readouterr().out
    assert "its graph optimizations off" in out and "Conv nodes 0 us" not in out
    listed = [line for line in out.splitlines() if line.startswith(("     conv", "     pw"))]
    assert len(listed) == 20 and all("Conv_quant" in line for line in listed)


def test_gemm_share_benchmark_runs():
    """``python -m benchmarks.gemm_share`` on Whisper's conv front end, one round, in a fresh process
    (its product timer must be installed before relaxpack's kernels bind np.dot / np.matmul): a line
    per manifest shape, each counting the Conv1d GEMMs a run (at least one per conv) and their time."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-m", "benchmarks.gemm_share", "--models", "whisper_frontend_ts",
                           "--rounds", "1", "--calls", "1"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("whisper_frontend_ts")]
    assert len(lines) == 2
    for line in lines:
        counted = re.search(r"; (\d+) products a run take (\d+) us = ([\d.]+)x onnxruntime's whole run$", line)
        assert counted and int(counted.group(1)) >= 2 and float(counted.group(3)) > 0, line


def test_gemm_share_refuses_a_late_timer():
    """Installed after relaxpack's kernels are imported (as in this process), the product timer
    would count nothing: it says so instead of reporting a share of 0."""
    import importlib
    from benchmarks.gemm_share import ProductTimer
    importlib.import_module("relaxpack.runtime.kernels")
    with pytest.raises(RuntimeError, match="imported already"):
        ProductTimer().install()


def test_attention_benchmark_runs(capsys):
    """benchmarks.attention end to end at a small size: one row, fused and unfused agreeing."""
    from benchmarks import attention
    assert attention.main(["--seq", "24", "--heads", "2", "--depth", "8", "-n", "1"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| 24 |")]
    assert len(rows) == 1
    assert float(rows[0].rstrip(" |").rsplit("| ", 1)[1]) < 1e-5

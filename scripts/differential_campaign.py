"""Differential campaign: random valid ONNX graphs through relaxpack (-O0, -O2) and onnxruntime.

    python scripts/differential_campaign.py --graphs 10000 --seed 0
    python scripts/differential_campaign.py --seed 0 --replay 1234       # one case, printed in full
    python scripts/differential_campaign.py --graphs 10000 --all-features  # known gaps too
    python scripts/differential_campaign.py --graphs 5000 --patterns all   # -O2's rewrite patterns too
    python scripts/differential_campaign.py --patterns winograd,softmax    # some of them

Case ``i`` of seed ``S`` is reproducible on its own. Every generated model
must pass ``onnx.checker.check_model(full_check=True)``. A case ends as
``ok``; ``mismatch`` (a wrong output, a modified input); ``crash`` (an
exception that is not a RelaxpackError, or the time limit); ``rejected``
(a RelaxpackError for a valid model); ``ort_limit`` (onnxruntime cannot
run it: discarded and counted); ``generator_error`` (invalid model or
shapes the generator did not predict). Failing cases are saved to
``--out`` as ``<status>_<i>.onnx`` with their feeds (``.npz``) and a note.
By default the generator avoids the relaxpack limitations and bugs already
known (tests/robustness/strategies.py: KNOWN_LIMITATIONS, KNOWN_BUGS);
``--all-features`` makes those graphs too. ``--patterns`` switches on
families that make the patterns -O2's rewrites and kernels look for
(tests/robustness/graph_ops_patterns.py: Winograd and depthwise convs,
resize + 1x1 conv, transposes around reshapes and matmuls, SiLU, softmax
of far-apart rows, layer norm of offset rows, GELU, LSTM/GRU/RNN, MaxPool);
every graph then starts with one of them.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.robustness import strategies  # noqa: E402
from tests.robustness.differential import Outcome, run_case  # noqa: E402
from tests.robustness.graph_ops_patterns import PATTERN_FAMILIES  # noqa: E402
from tests.robustness.strategies import random_case  # noqa: E402


class CaseTimeout(BaseException):
    """Not an Exception: the code under test catches and converts those (the VM wraps a
    kernel's failure in an ExecutionError), which would hide a hang."""


def _alarm(signum, frame):
    raise CaseTimeout()


def one_case(seed: int, index: int, limit: float) -> tuple[object, Outcome]:
    case = None
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        case = random_case(seed, index)
        try:
            onnx.checker.check_model(case.model, full_check=True)
        except Exception as err:
            return case, Outcome("generator_error", f"invalid model: {str(err).splitlines()[0]}", "checker")
        return case, run_case(case)
    except CaseTimeout:
        return case, Outcome("crash", f"no result within {limit:.0f} s", "time limit")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def signature(outcome: Outcome) -> str:
    """The outcome with numbers and names blurred, to group the same failure."""
    first = outcome.detail.splitlines()[0] if outcome.detail else ""
    first = re.sub(r"'[^']*'", "'_'", first)
    first = re.sub(r"-?\d+", "N", first)
    stage = re.sub(r"-?\d+", "N", outcome.stage)
    return f"{outcome.status} [{stage}] {first[:160]}"


def save(out: Path, index: int, case, outcome: Outcome) -> None:
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{outcome.status}_{index}"
    if case is None:
        stem.with_suffix(".txt").write_text(f"{outcome}\n")
        return
    onnx.save(case.model, str(stem.with_suffix(".onnx")))
    np.savez(stem.with_suffix(".npz"), **{f"run{r}__{k}": v for r, f in enumerate(case.feeds) for k, v in f.items()})
    stem.with_suffix(".txt").write_text(f"{outcome}\n\n{case.describe()}\n\n{onnx.printer.to_text(case.model)}\n")


def worker(args) -> int:
    """Run cases [start, end), one JSON line per case in ``args.results``."""
    with open(args.results, "a") as results:
        for i in range(args.start, args.graphs):
            case, outcome = one_case(args.seed, i, args.time_limit)
            if outcome.status not in ("ok", "ort_limit"):
                save(args.out, i, case, outcome)
            results.write(json.dumps({"i": i, "status": outcome.status, "sig": signature(outcome)}) + "\n")
            results.flush()
    return 0


def died(args, index: int, returncode: int, stderr: str) -> dict:
    """A case that killed its worker: onnxruntime's fault if its frames are on top of the stack."""
    frames = [line for line in stderr.splitlines() if line.strip().startswith("File ")]
    top = frames[0] if frames else ""
    status = "ort_limit" if "onnxruntime" in top else "crash"
    outcome = Outcome(status, f"the process died (exit {returncode}) in {top.strip()[:200]}", "process")
    if status == "crash":
        save(args.out, index, random_case(args.seed, index), outcome)
    return {"i": index, "status": status, "sig": signature(outcome)}


def campaign(args) -> list[dict]:
    """Cases in worker processes; a worker that dies (SIGFPE, SIGSEGV) is restarted after its case."""
    import subprocess
    import tempfile
    rows: list[dict] = []
    start = 0
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results.jsonl"
        while start < args.graphs:
            cmd = [sys.executable, "-X", "faulthandler", __file__, "--worker", "--start", str(start),
                   "--graphs", str(args.graphs), "--seed", str(args.seed), "--out", str(args.out),
                   "--time-limit", str(args.time_limit), "--results", str(results)]
            if args.all_features:
                cmd.append("--all-features")
            if args.patterns:
                cmd += ["--patterns", args.patterns]
            proc = subprocess.run(cmd, stderr=subprocess.PIPE, text=True)
            done = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
            results.unlink(missing_ok=True)
            rows += done
            start = (done[-1]["i"] + 1) if done else start
            if proc.returncode != 0 and start < args.graphs:
                rows.append(died(args, start, proc.returncode, proc.stderr))
                start += 1
            if len(rows) // 1000 != (len(rows) - len(done)) // 1000:
                print(f"  {len(rows)} graphs, {dict(Counter(r['status'] for r in rows))}", flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--graphs", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("differential-failures"))
    parser.add_argument("--time-limit", type=float, default=60.0, help="seconds per case")
    parser.add_argument("--all-features", action="store_true", help="also make graphs relaxpack is known to fail")
    parser.add_argument("--patterns", default="", help="pattern families to switch on: names, comma-separated, "
                        "or 'all' (tests/robustness/graph_ops_patterns.py)")
    parser.add_argument("--replay", type=int, default=None, help="run one case and print it")
    parser.add_argument("--json", type=Path, default=None, help="write the summary here")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.all_features:
        strategies.AVOID.clear()
    if args.patterns:
        names = set(PATTERN_FAMILIES) if args.patterns == "all" else set(args.patterns.split(","))
        unknown = names - set(PATTERN_FAMILIES)
        if unknown:
            parser.error(f"unknown pattern families {sorted(unknown)}; known: {sorted(PATTERN_FAMILIES)}")
        strategies.PATTERNS.update(names)
    if args.worker:
        return worker(args)
    if args.replay is not None:
        case, outcome = one_case(args.seed, args.replay, args.time_limit)
        if case is not None:
            print(case.describe())
            print(onnx.printer.to_text(case.model))
        print(outcome)
        return 0 if outcome.status in ("ok", "ort_limit") else 1

    t0 = time.perf_counter()
    rows = campaign(args)
    elapsed = time.perf_counter() - t0
    counts = Counter(r["status"] for r in rows)
    groups: dict[str, list[int]] = defaultdict(list)
    for r in rows:
        if r["status"] != "ok":
            groups[r["sig"]].append(r["i"])
    failures = sum(v for k, v in counts.items() if k not in ("ok", "ort_limit"))
    print(f"graphs tried {len(rows)} (seed {args.seed}) in {elapsed:.0f} s: {dict(counts)}")
    print(f"mismatches {counts['mismatch']}, crashes {counts['crash']}, rejected {counts['rejected']}, "
          f"generator errors {counts['generator_error']}, onnxruntime discards {counts['ort_limit']}")
    for sig, cases in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(cases):5d} x {sig}   e.g. cases {cases[:5]}")
    if failures:
        print(f"failing models saved in {args.out}/")
    if args.json:
        args.json.write_text(json.dumps({"graphs": len(rows), "seed": args.seed, "counts": dict(counts),
                                         "seconds": elapsed, "groups": groups}, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

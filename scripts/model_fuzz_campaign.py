"""Malformed-model campaign: mutated ONNX models through from_onnx + build and ``relaxpack convert``.

    python scripts/model_fuzz_campaign.py --cases 10000 --seed 0
    python scripts/model_fuzz_campaign.py --seed 0 --replay 1234      # one case, with its verdict
    python scripts/model_fuzz_campaign.py --family indices --cases 10000 --memory 2
    python scripts/model_fuzz_campaign.py --family loops --cases 10000 --time-limit 10 --memory 2

The families ``fanout``, ``loops``, ``allocs`` and ``folds`` build hostile
models whole (tests/robustness/hostile_models.py: functions calling each
other several times per level, Loops that never stop, huge static
allocations, folds that would blow up or never end); their runs have budgets
(model_mutations.BUDGETS).

Each case (tests/robustness/model_mutations.py; with ``--family``, one of
tests/robustness/model_io_families.py) must end in success or a
RelaxpackError with a clear message (the CLI: exit 1, one ``error:``
line), within ``--time-limit`` seconds, without MemoryError under an
address-space limit of ``--memory`` GiB (set before anything is
imported), and without opening a file outside the model's folder. The
cases run in a worker process that is restarted after a case that kills
it (a crash). Failing cases are copied to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: tests/robustness/hostile_models.py's families (issue 20: bounded work)
HOSTILE_FAMILIES = ("fanout", "loops", "allocs", "folds")


class CaseTimeout(BaseException):
    """Not an Exception: the code under test catches and converts those (the VM wraps a
    kernel's failure in an ExecutionError), which would hide a hang."""


def _alarm(signum, frame):
    raise CaseTimeout()


def limit_memory(gib: float) -> None:
    limit = int(gib * 2 ** 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def run_one(seed: int, index: int, limit: float, base: Path, out: Path | None, family: str = "mutations") -> dict:
    from tests.robustness import model_io_families, model_mutations
    case_root = Path(tempfile.mkdtemp(prefix=f"case{index}_", dir=base))
    case = None
    started = time.perf_counter()
    signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        if family == "mutations" or family in HOSTILE_FAMILIES:
            case = model_mutations.make_case(seed, index, case_root, family)
            problem = model_mutations.check_case(case)
        else:
            case = model_io_families.make_case(family, seed, index, case_root)
            problem = model_io_families.check_case(case)
    except CaseTimeout:
        problem = f"no result within {limit:.0f} s (a hang)"
    except MemoryError as err:
        problem = f"MemoryError: {err}"
    except Exception as err:   # in the harness itself: report, never hide
        problem = f"harness error {type(err).__name__}: {err}"
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    row = {"i": index, "ok": problem is None, "problem": problem or "",
           "case": case.describe() if case else f"case {index}", "notes": case.notes if case else [],
           "seconds": time.perf_counter() - started,
           "rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}   # the worker's peak so far
    if problem and out is not None:
        out.mkdir(parents=True, exist_ok=True)
        dest = out / f"case_{index}"
        shutil.rmtree(dest, ignore_errors=True)
        shutil.copytree(case_root, dest, symlinks=True,
                        ignore=lambda d, names: [n for n in names if (Path(d) / n).is_fifo()])
        (dest / "verdict.txt").write_text(f"{row['case']}\n\n{problem}\n")
    shutil.rmtree(case_root, ignore_errors=True)
    return row


def worker(args) -> int:
    limit_memory(args.memory)
    sys.path.insert(0, str(ROOT))
    base = Path(tempfile.mkdtemp(prefix="model_fuzz_"))
    try:
        with open(args.results, "a") as results:
            for i in range(args.start, args.cases):
                row = run_one(args.seed, i, args.time_limit, base, args.out, args.family)
                results.write(json.dumps(row) + "\n")
                results.flush()
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


def campaign(args) -> list[dict]:
    rows: list[dict] = []
    start = 0
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp) / "results.jsonl"
        while start < args.cases:
            cmd = [sys.executable, "-X", "faulthandler", __file__, "--worker", "--start", str(start),
                   "--cases", str(args.cases), "--seed", str(args.seed), "--out", str(args.out),
                   "--time-limit", str(args.time_limit), "--memory", str(args.memory), "--results", str(results),
                   "--family", args.family]
            proc = subprocess.run(cmd, stderr=subprocess.PIPE, text=True, cwd=ROOT)
            done = [json.loads(line) for line in results.read_text().splitlines()] if results.exists() else []
            results.unlink(missing_ok=True)
            rows += done
            start = (done[-1]["i"] + 1) if done else start
            if proc.returncode != 0 and start < args.cases:
                frames = [ln.strip() for ln in proc.stderr.splitlines() if ln.strip().startswith("File ")]
                rows.append({"i": start, "ok": False, "case": f"case {start}",
                             "problem": f"the process died (exit {proc.returncode}) in "
                                        f"{frames[0] if frames else proc.stderr[-300:]}", "notes": []})
                start += 1
    return rows


def _slowest(rows: list[dict]) -> str:
    """The slowest case's time and index (``--replay`` it to see why)."""
    row = max(rows, key=lambda r: r.get("seconds", 0), default=None)
    return f"{row.get('seconds', 0):.2f} s (case {row['i']})" if row else "none"


def signature(problem: str) -> str:
    first = problem.splitlines()[0] if problem else ""
    first = re.sub(r"'[^']*'", "'_'", first)
    first = re.sub(r"/tmp/\S+", "<tmp>", first)
    return re.sub(r"-?\d+", "N", first)[:200]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("model-fuzz-failures"))
    parser.add_argument("--time-limit", type=float, default=30.0, help="seconds per case")
    parser.add_argument("--memory", type=float, default=4.0, help="address-space limit in GiB")
    parser.add_argument("--json", type=Path, default=None, help="write the summary here")
    parser.add_argument("--replay", type=int, default=None, help="run one case and print its verdict")
    parser.add_argument("--family", default="mutations", choices=("mutations", "indices", "aliasing", "structure",
                                                                  "overflow", *HOSTILE_FAMILIES),
                        help="mutated seed models (default), a family of tests/robustness/model_io_families.py "
                             "or of tests/robustness/hostile_models.py")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--start", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--results", type=Path, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out = args.out.resolve()
    if args.worker:
        return worker(args)
    if args.replay is not None:
        limit_memory(args.memory)
        sys.path.insert(0, str(ROOT))
        base = Path(tempfile.mkdtemp(prefix="model_fuzz_"))
        row = run_one(args.seed, args.replay, args.time_limit, base, args.out, args.family)
        print(row["case"])
        print(row["problem"] or "ok", *row["notes"], sep="\n")
        return 0 if row["ok"] else 1

    sys.path.insert(0, str(ROOT))
    from tests.robustness.model_mutations import known_failure
    t0 = time.perf_counter()
    rows = campaign(args)
    elapsed = time.perf_counter() - t0
    failures = [r for r in rows if not r["ok"]]
    groups: dict[str, list[int]] = defaultdict(list)
    known: Counter = Counter()
    new = []
    for r in failures:
        groups[signature(r["problem"])].append(r["i"])
        name = known_failure(r["case"], r["problem"])
        if name:
            known[name] += 1
        else:
            new.append(r)
    notes = Counter(signature(n) for r in rows for n in r.get("notes", []))
    print(f"{args.family} cases tried {len(rows)} (seed {args.seed}) in {elapsed:.0f} s: "
          f"{len(rows) - len(failures)} ok, {len(failures)} failures; slowest case "
          f"{_slowest(rows)}, largest worker "
          f"{max((r.get('rss_mib', 0) for r in rows), default=0):.0f} MiB")
    for sig, cases in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print(f"  {len(cases):5d} x {sig}   e.g. cases {cases[:5]}")
    print(f"known failures {sum(known.values())}, new {len(new)}:")
    for name, n in known.most_common():
        print(f"  {n:5d} x known: {name}")
    for r in new[:20]:
        print(f"  NEW: {r['case'][:200]}\n       {r['problem'].splitlines()[0][:200]}")
    for sig, n in notes.most_common(10):
        print(f"  note {n:5d} x {sig}")
    if failures:
        print(f"failing cases copied to {args.out}/")
    if args.json:
        args.json.write_text(json.dumps({"cases": len(rows), "seed": args.seed, "failures": len(failures),
                                         "seconds": elapsed, "groups": groups, "known": dict(known),
                                         "new": [{k: r[k] for k in ("i", "case", "problem")} for r in new]},
                                        indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

"""Run the whole ONNX backend suite through relaxpack and summarize.

    python -m tests.conformance.survey            # counts per kind, failures by reason
    python -m tests.conformance.survey --write    # also rewrite expected_failures.txt
    python -m tests.conformance.survey -k 'window|crop' [--write]
                                                  # only the matching tests: each one's result;
                                                  # --write then updates just their lines

The reason written for a failure is the first line of its error.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import unittest
import warnings

import onnx.backend.test

from relaxpack.backend import RelaxpackBackend

from .expected import LIST, expected_failures

KINDS = {"OnnxBackendNodeModelTest": "node", "OnnxBackendSimpleModelTest": "simple",
         "OnnxBackendPyTorchConvertedModelTest": "pytorch-converted",
         "OnnxBackendPyTorchOperatorModelTest": "pytorch-operator", "OnnxBackendRealModelTest": "real"}


def run_suite(pattern: str | None = None):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        backend_test = onnx.backend.test.BackendTest(RelaxpackBackend, __name__)
    backend_test.exclude(r"_cuda$")
    results = {}
    for case_name, case in backend_test.test_cases.items():
        kind = KINDS.get(case_name, case_name)
        for test_name in sorted(n for n in dir(case) if n.startswith("test_")):
            if pattern is not None and not re.search(pattern, test_name):
                continue
            test = case(test_name)
            result = unittest.TestResult()
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                test.run(result)
            if result.skipped:
                continue
            problems = result.errors + result.failures
            reason = _reason(problems[0][1]) if problems else None
            results[test_name[: -len("_cpu")]] = (kind, reason)
    return results


def _reason(traceback_text: str) -> str:
    lines = [l for l in traceback_text.strip().splitlines() if l.strip()]
    for line in reversed(lines):
        if not line.startswith(" "):
            text = line.strip()
            break
    else:
        text = lines[-1].strip()
    text = text.replace("relaxpack.errors.", "")
    return text[:200]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--write", action="store_true", help="rewrite expected_failures.txt")
    parser.add_argument("-k", dest="pattern", help="only the tests whose name matches this regex")
    args = parser.parse_args(argv)
    results = run_suite(args.pattern)
    if args.pattern is not None:
        for name, (kind, reason) in sorted(results.items()):
            print(f"{'ok  ' if reason is None else 'FAIL'} {name}" + (f"  # {reason}" if reason else ""))
    by_kind = collections.defaultdict(lambda: [0, 0])
    for kind, reason in results.values():
        by_kind[kind][0] += reason is None
        by_kind[kind][1] += 1
    for kind, (passed, total) in sorted(by_kind.items()):
        print(f"{kind:18s} {passed:5d} / {total:5d} pass")
    reasons = collections.Counter(r.split(":")[0] + ": " + ":".join(r.split(":")[1:2])[:60]
                                  for _, r in results.values() if r)
    for reason, count in reasons.most_common(40):
        print(f"{count:5d}  {reason}")
    if args.write:
        lines = ["# Expected failures of the ONNX backend suite (onnx 1.23.2), one per line:",
                 "# test name  # reason. Regenerate: python -m tests.conformance.survey --write", ""]
        failures = {name: reason for name, (_, reason) in results.items() if reason}
        if args.pattern is not None:  # keep the other tests' entries
            failures = {**{n: r for n, r in expected_failures().items() if n not in results}, **failures}
        lines += [f"{name}  # {reason}" for name, reason in sorted(failures.items())]
        LIST.write_text("\n".join(lines) + "\n")
        print(f"wrote {LIST}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

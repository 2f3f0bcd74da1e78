"""Run every zoo case and print where each stands: the table for reports and the test's XFAIL table.

    python -m tests.models.zoo.status [-k NAME] [--xfail] [--markdown]

Each (model, level) is judged exactly as test_zoo.py judges it (judge.check);
the first line of each failure is what goes into XFAIL as its reason.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from .judge import LEVELS, MODELS, check


def first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"


def xfail_table(results: dict) -> str:
    """The XFAIL dict of test_zoo.py: a model's name when it fails the same way at every level,
    else (name, level); reasons cut to ``REASON_CHARS``."""
    lines = ["XFAIL = {"]
    for name in sorted({n for n, _ in results}):
        errors = {results[n, level] for n, level in results if n == name}
        if errors == {None}:
            continue
        if len(errors) == 1:
            lines.append(f"    {name!r}: {short(errors.pop())!r},")
            continue
        for level in LEVELS:
            if results.get((name, level)):
                lines.append(f"    ({name!r}, {level}): {short(results[name, level])!r},")
    return "\n".join([*lines, "}"])


def markdown_table(results: dict) -> str:
    lines = ["| model | made by | dynamic dims | shapes | -O0 | -O2 | error |", "|---|---|---|---|---|---|---|"]
    for name in sorted({n for n, _ in results}):
        entry = MODELS[name]
        status = [("ok" if results[name, level] is None else "FAIL") for level in LEVELS]
        errors = sorted({short(e) for (n, _), e in results.items() if n == name and e})
        shapes = len(entry["shapes"]), " (baked)" if "baked_shape" in entry else ""
        lines.append(f"| {name} | {entry['exporter'].split(' (')[0]} | {', '.join(entry['dynamic_dims'])} | "
                     f"{shapes[0]}{shapes[1]} | {status[0]} | {status[1]} | {'; '.join(errors)} |")
    return "\n".join(lines)


REASON_CHARS = 200


def short(error: str) -> str:
    return error if len(error) <= REASON_CHARS else error[:REASON_CHARS - 3] + "..."


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-k", default="")
    parser.add_argument("--xfail", action="store_true", help="print the XFAIL table to paste into test_zoo.py")
    parser.add_argument("--markdown", action="store_true", help="print a table of every model and its status")
    args = parser.parse_args(argv)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name in sorted(MODELS):
            if args.k not in name:
                continue
            for level in LEVELS:
                start = time.perf_counter()
                try:
                    check(name, level, tmp)
                    results[name, level] = None
                except Exception as err:
                    results[name, level] = first_line(err)
                print(f"{name} -O{level} {time.perf_counter() - start:.1f}s {results[name, level] or 'ok'}",
                      flush=True)
    if args.xfail:
        print(xfail_table(results))
    if args.markdown:
        print(markdown_table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

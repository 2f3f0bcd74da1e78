"""The ONNX coverage matrix: every op onnx defines, and how relaxpack imports it.

Generated from the converter registry, onnx's op schemas and the conformance
suite's expected-failure list, so it cannot drift from the code: a test
regenerates it and compares it with the committed ``docs/coverage.md``.

    python -m tests.conformance.coverage_matrix            # print the matrix
    python -m tests.conformance.coverage_matrix --write    # rewrite docs/coverage.md

Columns: the op and its domain; the newest opset onnx defines for it; how
relaxpack imports it (a converter, with the opsets each version of it starts
at, or the op's ONNX function body, or a deliberate refusal from
``relaxpack/importers/onnx/refusals.py`` with its reason); the element types the op's schema
allows that relaxpack's IR represents; the backend suite's node tests that
use the op and how many of them pass; and the reason the first failing one
fails.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import warnings
from pathlib import Path

import onnx
from onnx import defs

from relaxpack.importers.onnx.functions import FunctionLibrary
from relaxpack.importers.onnx.refusals import REFUSALS, find_refusal
from relaxpack.importers.onnx.registry import canonical_domain, registered_converters
from relaxpack.ir.struct_info import DTYPES

from .expected import expected_failures

DOC = Path(__file__).resolve().parents[2] / "docs" / "coverage.md"
_TYPE = re.compile(r"tensor\((\w+)\)")
_ONNX_TO_IR = {"float": "float32", "double": "float64"}


def _schemas() -> list:
    newest = {}
    for schema in defs.get_all_schemas_with_history():
        key = (schema.domain, schema.name)
        if schema.deprecated:
            continue
        if key not in newest or schema.since_version > newest[key].since_version:
            newest[key] = schema
    return [newest[k] for k in sorted(newest, key=lambda k: (k[0], k[1].lower()))]


def _dtypes(schema) -> str:
    found = set()
    for constraint in schema.type_constraints:
        for text in constraint.allowed_type_strs:
            for name in _TYPE.findall(text):
                name = _ONNX_TO_IR.get(name, name)
                if name in DTYPES:
                    found.add(name)
    return ", ".join(sorted(found))


def _how(domain: str, op: str, opset: int, converters: dict, library: FunctionLibrary) -> str:
    starts = converters.get((domain, op))
    if starts:
        return "converter (opset " + ", ".join(f"{s}+" for s in starts) + ")"
    if library.has_body(domain, op, opset):
        return "function body"
    refusal = find_refusal(domain, op)
    if refusal is not None:
        return f"refused: {refusal.summary}"
    return "—"


def _refusal_notes() -> list[str]:
    """The reasons behind the "refused" rows, and how to do without each op."""
    lines = ["", "## Deliberately refused ops", ""]
    alike: dict[tuple, list[str]] = {}          # ops refused for one reason: one line
    for (domain, op), refusal in sorted(REFUSALS.items()):
        alike.setdefault((domain, refusal.reason, refusal.workaround), []).append(op)
    for (domain, reason, workaround), ops in alike.items():
        lines.append(f"- {', '.join(f'**{op}**' for op in ops)} ({domain or 'ai.onnx'}): {reason}."
                     + (f" Instead: {workaround}." if workaround else ""))
    if not REFUSALS:
        lines.append("None: every op in the table converts.")
    return lines


def _node_tests(expected: dict[str, str]) -> dict[tuple[str, str], list[tuple[str, str | None]]]:
    """(domain, op) -> [(test name, failure reason or None)] over the node
    tests of one node (the ``_expanded`` variants, whose graphs are an op's
    function body, count for no op)."""
    from onnx.backend.test.loader import load_model_tests
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = load_model_tests(kind="node")
    by_op = collections.defaultdict(list)
    for case in cases:
        nodes = case.model.graph.node
        if len(nodes) == 1:
            key = (canonical_domain(nodes[0].domain), nodes[0].op_type)
            by_op[key].append((case.name, expected.get(case.name)))
    return by_op


def matrix(expected: dict[str, str]) -> str:
    """The coverage matrix as markdown."""
    converters = collections.defaultdict(list)
    for entry in registered_converters():
        converters[(entry.domain, entry.op_type)].append(entry.since_opset)
    for starts in converters.values():
        starts.sort()
    library = FunctionLibrary()
    tests = _node_tests(expected)
    rows, supported, total = [], collections.Counter(), collections.Counter()
    for schema in _schemas():
        domain = canonical_domain(schema.domain)
        how = _how(domain, schema.name, schema.since_version, converters, library)
        total[domain or "ai.onnx"] += 1
        supported[domain or "ai.onnx"] += how.startswith(("converter", "function body"))
        results = tests.get((domain, schema.name), [])
        passing = sum(reason is None for _, reason in results)
        failing = [reason for _, reason in results if reason is not None]
        note = failing[0].replace("|", "/")[:140] if failing else ""
        rows.append(f"| {schema.name} | {domain or 'ai.onnx'} | {schema.since_version} | {how} | "
                    f"{_dtypes(schema)} | {passing}/{len(results)} | {note} |")
    head = [
        "# ONNX op coverage",
        "",
        f"Generated by `python -m tests.conformance.coverage_matrix --write` (onnx {onnx.__version__});",
        "a test fails when this file is out of date. *Imported as*: a converter (with the opsets",
        "at which its versions start), the op's ONNX function body, or a deliberate refusal (the",
        "reasons are listed below the table). *Types*: the element types",
        "the op's schema allows that relaxpack's IR represents. *Node tests*: the backend suite's",
        "one-node tests of the op, passing / total, and why the first failing one fails.",
        "",
    ]
    head += [f"- {d}: {supported[d]} of {total[d]} ops imported" for d in sorted(total)]
    head += ["", "| op | domain | newest opset | imported as | types | node tests | first failure |",
             "|---|---|---|---|---|---|---|"]
    return "\n".join(head + rows + _refusal_notes()) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"rewrite {DOC}")
    args = parser.parse_args(argv)
    text = matrix(expected_failures())
    if args.write:
        DOC.parent.mkdir(exist_ok=True)
        DOC.write_text(text)
        print(f"wrote {DOC}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

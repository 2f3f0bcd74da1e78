"""A seeded fuzzing campaign against the archive loader (300 cases; the long
one is ``scripts/fuzz_archive.py --cases 10000``).

Mutations: truncation, bit flips, inserted/deleted/appended bytes, header
fields set to boundary values, params-file damage, and manifest numbers,
types, keys and text changed and re-sealed (length and checksum
recomputed). The loader must raise only ArchiveError, never hang, and an
archive whose manifest and constants survived intact must run exactly as
before.
"""

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "fuzz_archive.py"
CASES, SEED, TIME_LIMIT = 300, 20240601, 5.0


def _fuzz_module():
    spec = importlib.util.spec_from_file_location("fuzz_archive", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module   # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def report():
    return _fuzz_module().campaign(CASES, SEED, TIME_LIMIT)


def test_the_loader_raises_only_archive_errors_and_never_hangs(report):
    assert report.cases == CASES
    failures = report.blamed("loader")
    assert not failures, "\n".join(str(f) for f in failures[:20])


def test_the_campaign_reaches_every_mutation_and_every_outcome(report):
    kinds = {kind for kind, _ in report.outcomes}
    assert {"truncate", "flip", "header", "insert", "delete", "append", "padding", "params", "manifest"} <= kinds
    outcomes = {outcome for _, outcome in report.outcomes}
    assert {"rejected", "ran"} <= outcomes
    assert report.outcomes["padding", "ran"] > 5    # harmless changes load and run as before
    rejected = sum(n for (_, outcome), n in report.outcomes.items() if outcome == "rejected")
    assert rejected > CASES // 2
    # re-sealed manifests get past the checksum, into the structural checks
    assert report.outcomes["manifest", "rejected"] > 30


def test_the_vm_raises_only_relaxpack_errors_on_accepted_archives(report):
    failures = report.blamed("vm")
    assert not failures, "\n".join(str(f) for f in failures[:20])

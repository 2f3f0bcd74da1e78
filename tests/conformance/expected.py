"""The expected-failure list of the conformance suite."""

from __future__ import annotations

from pathlib import Path

LIST = Path(__file__).with_name("expected_failures.txt")


def expected_failures() -> dict[str, str]:
    """``{test name: reason}`` from expected_failures.txt (``name  # reason`` lines)."""
    out = {}
    for line in LIST.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, reason = line.partition("#")
        name, reason = name.strip(), reason.strip()
        if not reason:
            raise ValueError(f"{LIST.name}: {name} has no reason")
        out[name] = reason
    return out

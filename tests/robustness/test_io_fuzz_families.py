"""Short runs of the issue-20 fuzz families, each in a process limited to 2 GiB of
address space as the long campaigns are (10,000 cases each: see
scripts/fuzz_archive.py --family and scripts/model_fuzz_campaign.py --family)."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.robustness import model_io_families

ROOT = Path(__file__).resolve().parents[2]


def campaign(script: str, family: str, tmp_path: Path, cases: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--family", family, "--cases", str(cases),
                           "--seed", "7", "--memory", "2", "--time-limit", "10", *(
                               ["--out", str(tmp_path / "failures")] if script.startswith("model") else [])],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)


@pytest.mark.parametrize("family", ["names", "metadata", "shape-programs", "input-files"])
def test_archive_families_find_nothing(family, tmp_path):
    out = campaign("fuzz_archive.py", family, tmp_path, 40)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert "cases tried: 40" in out.stdout and "failures found: 0" in out.stdout


@pytest.mark.parametrize("family", model_io_families.FAMILIES)
def test_model_families_find_nothing(family, tmp_path):
    out = campaign("model_fuzz_campaign.py", family, tmp_path, 25)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-2000:]
    assert f"{family} cases tried 25" in out.stdout and "25 ok, 0 failures" in out.stdout, out.stdout

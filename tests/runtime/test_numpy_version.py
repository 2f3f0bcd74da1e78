"""The runtime's numpy floor: numpy 1.x is refused in one line, by the API and the CLI."""

import subprocess
import sys

import pytest

from relaxpack.errors import NumpyTooOld, RelaxpackError
from relaxpack.runtime.numpy_version import NUMPY_FLOOR, check_numpy


@pytest.mark.parametrize("version", ["2.0.0", "2.0.2", "2.4.6", "2.5.0rc1", "2.6.0.dev0+git20261130", "3.0.0"])
def test_numpy_2_passes(version):
    check_numpy(version)


@pytest.mark.parametrize("version", ["1.26.4", "1.24.0", "1.99.0", "garbled"])
def test_older_or_unreadable_versions_are_refused(version):
    with pytest.raises(NumpyTooOld, match=rf"^relaxpack's runtime needs numpy >= 2\.0, this is numpy {version}: "
                                          r"pip install 'numpy>=2\.0'$"):
        check_numpy(version)


def test_the_refusal_is_an_import_error_and_a_relaxpack_error():
    assert NUMPY_FLOOR == (2, 0)
    assert issubclass(NumpyTooOld, ImportError) and issubclass(NumpyTooOld, RelaxpackError)


def _with_numpy(version: str, code: str) -> subprocess.CompletedProcess:
    """``code`` run in a fresh interpreter whose numpy says it is ``version``."""
    prelude = f"import numpy; numpy.__version__ = {version!r}\n"
    return subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, timeout=120)


def test_importing_the_runtime_on_numpy_1_raises():
    done = _with_numpy("1.26.4", "import relaxpack.runtime")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "relaxpack.errors.NumpyTooOld: relaxpack's runtime needs numpy >= 2.0, this is numpy 1.26.4: "
        "pip install 'numpy>=2.0'")


def test_the_cli_on_numpy_1_says_it_in_one_line():
    done = _with_numpy("1.26.4", "import sys; from relaxpack.cli import main; sys.exit(main(['inspect', 'x.rpk']))")
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == ("error: relaxpack's runtime needs numpy >= 2.0, this is numpy 1.26.4: "
                           "pip install 'numpy>=2.0'\n")

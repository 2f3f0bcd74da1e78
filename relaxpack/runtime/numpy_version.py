"""The oldest numpy the runtime runs on, checked when ``relaxpack.runtime`` is imported.

The kernels are written to numpy 2's rules: a Python scalar or 0-d array takes the array's dtype
(NEP 50; numpy 1.x widened by value), out-of-range Python ints raise instead of wrapping, and they
call numpy 2.0's functions (``vecdot``, ``bitwise_count``). On numpy 1.26, past those two
functions, 22 tests outside conformance still failed (kernels, input checks, references), so
numpy 1.x is refused in one line rather than run to wrong answers (docs/design-notes.md, "numpy
2.0 is the floor"). CI runs the zoo's archives and the runtime's tests on numpy 2.0.2
(``.ci/numpy_floor.sh``).
"""

from __future__ import annotations

import re

import numpy as np

from ..errors import NumpyTooOld

#: pyproject.toml's ``numpy>=2.0``
NUMPY_FLOOR = (2, 0)


def check_numpy(version: str = np.__version__) -> None:
    """Raise :class:`NumpyTooOld` when ``version`` (numpy's, by default) is below :data:`NUMPY_FLOOR`."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None or (int(found[1]), int(found[2])) < NUMPY_FLOOR:
        floor = ".".join(map(str, NUMPY_FLOOR))
        raise NumpyTooOld(f"relaxpack's runtime needs numpy >= {floor}, this is numpy {version}: "
                          f"pip install 'numpy>={floor}'")

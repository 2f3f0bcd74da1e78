"""ONNX's own backend test suite through ``relaxpack.backend``.

Every test of onnx 1.23.2's suite (node, simple, pytorch-converted,
pytorch-operator, real) runs. The ones listed in ``expected_failures.txt``
(each with its reason) are expected to fail; one that passes anyway is
reported as an unexpected success, which fails the run: take it off the list.
Regenerate the list with ``python -m tests.conformance.survey --write``.
"""

from __future__ import annotations

import warnings

import onnx.backend.test

from relaxpack.backend import RelaxpackBackend

from .expected import expected_failures

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # the suite's own case generators warn about overflow
    backend_test = onnx.backend.test.BackendTest(RelaxpackBackend, __name__)

for name in expected_failures():
    backend_test.xfail(f"^{name}_cpu$")
backend_test.exclude(r"_cuda$")

globals().update(backend_test.test_cases)

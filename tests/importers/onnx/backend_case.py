"""Run one of ONNX's backend node tests through relaxpack.

ONNX 1.23 builds its node tests in memory (``load_node_model_tests``):
each case has a ``model`` and ``data_sets`` of (inputs, expected outputs).

>>> run_backend_case("test_relu")          # raises AssertionError on a mismatch
"""

from __future__ import annotations

import functools
import warnings

import numpy as np
import onnx
from onnx import numpy_helper

from relaxpack.backend import RelaxpackBackend


@functools.lru_cache(maxsize=1)
def node_cases() -> dict:
    from onnx.backend.test.loader import load_node_model_tests
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {case.name: case for case in load_node_model_tests()}


def run_backend_case(name: str) -> None:
    """Prepare the case's model once and check every data set (onnx's tolerances)."""
    case = node_cases()[name]
    rep = RelaxpackBackend.prepare(case.model)
    for inputs, expected in case.data_sets:
        # the suite's data sets may hold TensorProtos (e.g. the cast cases), as its runner allows
        inputs, expected = [_array(v) for v in inputs], [_array(v) for v in expected]
        outputs = rep.run(inputs)
        assert len(outputs) == len(expected), f"{name}: {len(outputs)} outputs, expected {len(expected)}"
        for got, want in zip(outputs, expected):
            assert_close(got, want, case.rtol, case.atol, name)


def _array(value):
    return numpy_helper.to_array(value) if isinstance(value, onnx.TensorProto) else value


def assert_close(got, want, rtol: float, atol: float, name: str) -> None:
    want = np.asarray(want)
    got = np.asarray(got)
    assert got.dtype == want.dtype, f"{name}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{name}: shape {got.shape}, expected {want.shape}"
    if want.dtype.kind in "OSU":
        assert got.tolist() == want.tolist(), name
    else:
        np.testing.assert_allclose(got.astype(np.float64) if want.dtype.kind not in "biu" else got,
                                   want.astype(np.float64) if want.dtype.kind not in "biu" else want,
                                   rtol=rtol, atol=atol, err_msg=name, equal_nan=True)

"""Zoo models converted with their dims bound, as a deployment binds them (``--dim``).

silero VAD names none of its input dims: the names ``check`` and ``inspect`` show
(``input_dim1``) must be the ones ``dims`` binds, and binding the chunk to 64 samples
(the 16 kHz length of silero_vad_like) makes its 8 kHz branch impossible. onnxruntime
runs the taken branch only; so does relaxpack, and the other branch fails when taken.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import relaxpack
from relaxpack.errors import ShapeError
from relaxpack.runtime import VirtualMachine

from .judge import HERE

SILERO = str(HERE / "silero_vad_like.onnx")


def _feeds(batch, samples, rate, seed=0):
    rng = np.random.default_rng(seed)
    return {"input": (rng.standard_normal((batch, samples)) * 0.1).astype(np.float32),
            "state": (rng.standard_normal((2, batch, 16)) * 0.5).astype(np.float32), "sr": np.array(rate, np.int64)}


@pytest.mark.parametrize("dims, runs, fails", [
    ({"input_dim1": 64}, [(1, 16000), (3, 16000)], 8000),
    ({"input_dim0": 1, "input_dim1": 64}, [(1, 16000)], 8000),
])
def test_silero_with_its_chunk_length_bound(dims, runs, fails):
    mod = relaxpack.from_onnx(SILERO, dims=dims)
    assert mod["main"].params[0].struct_info.shape[1] == 64
    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(SILERO, options, providers=["CPUExecutionProvider"])
    with pytest.raises(Exception, match="LSTM"):   # onnxruntime fails there too
        session.run(None, _feeds(runs[0][0], 64, fails))
    for level in (0, 2):
        vm = VirtualMachine(relaxpack.build(mod, opt_level=level))
        for batch, rate in runs:
            feeds = _feeds(batch, 64, rate)
            for got, want in zip(vm.run(feeds).values(), session.run(None, feeds)):
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        with pytest.raises(ShapeError, match="its else_branch cannot run at the dims the model was converted with"):
            vm.run(_feeds(runs[0][0], 64, fails))

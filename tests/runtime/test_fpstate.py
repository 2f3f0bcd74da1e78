"""fpstate.silence/restore: errors ignored between them, the caller's own state back after."""

import warnings

import numpy as np

from relaxpack.runtime.fpstate import restore, silence


def _log_zero_without_warning() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.log(np.zeros(1, np.float32))[0] == -np.inf


def test_silence_ignores_errors_and_restore_puts_back_the_callers_state():
    with np.errstate(divide="raise", invalid="warn"):
        before = np.geterr()
        token = silence()
        try:
            assert set(np.geterr().values()) == {"ignore"}
            _log_zero_without_warning()
        finally:
            restore(token)
        assert np.geterr() == before


def test_silence_nests():
    before = np.geterr()
    outer = silence()
    inner = silence()
    restore(inner)
    assert set(np.geterr().values()) == {"ignore"}
    restore(outer)
    assert np.geterr() == before


def test_a_run_leaves_a_raising_state_as_it_was():
    from onnx import TensorProto, helper

    import relaxpack
    from relaxpack.runtime import VirtualMachine
    graph = helper.make_graph([helper.make_node("Log", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    with np.errstate(all="raise"):
        y = vm.run({"x": np.array([0.0, 1.0, -1.0], np.float32)})["y"]
        assert np.geterr() == {"divide": "raise", "over": "raise", "under": "raise", "invalid": "raise"}
    assert y[0] == -np.inf and y[1] == 0.0 and np.isnan(y[2])

"""packed_call: a data-dependent op as a packed kernel bound to fresh dims."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.errors import RelaxpackError
from relaxpack.importers.onnx.converters._dynamic import packed_call
from relaxpack.importers.onnx.registry import register_converter
from relaxpack.ops.definitions.dynamic import register_data_dependent
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.kernels import KERNELS, register_packed

DOMAIN = "test.packed_call"


def _repeat_rows(x, n):
    return np.repeat(x, int(n), axis=0), np.asarray(int(n), np.int64)


if "test.repeat_rows" not in KERNELS:
    register_packed("test.repeat_rows")(_repeat_rows)
    register_data_dependent("test.repeat_rows", 2, doc="x's rows repeated n times, and n")

    @register_converter(DOMAIN, "RepeatRows", since_opset=1)
    def _convert(ctx, x, n):
        return packed_call(ctx, "test.repeat_rows", [x, n],
                           [((None, x.shape[1]), x.dtype), ((), "int64")], "rep")


def _model():
    graph = helper.make_graph(
        [helper.make_node("RepeatRows", ["x", "n"], ["y", "m"], domain=DOMAIN),
         helper.make_node("Relu", ["y"], ["z"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", 3]),
         helper.make_tensor_value_info("n", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("m", TensorProto.INT64, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])


def test_unknown_dims_become_fresh_symbols_checked_at_run_time():
    mod = relaxpack.from_onnx(_model())
    text = mod.script()
    assert 'R.call_packed("test.repeat_rows"' in text
    assert 'R.match_cast(rep_1, R.Tensor(("rep_d1", 3), "float32"))' in text
    vm = VirtualMachine(relaxpack.build(mod))
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    for n in (0, 1, 3):
        out = vm.run({"x": x, "n": np.array(n)})
        np.testing.assert_array_equal(out["z"], np.maximum(np.repeat(x, n, axis=0), 0))
        assert int(out["m"]) == n


def test_all_constant_inputs_fold_at_import_time():
    model = _model()
    x = np.ones((2, 3), np.float32)
    from onnx import numpy_helper
    model.graph.initializer.extend([numpy_helper.from_array(x, "x"), numpy_helper.from_array(np.array(2), "n")])
    del model.graph.input[:]
    mod = relaxpack.from_onnx(model)
    assert "call_packed" not in mod.script()
    out = VirtualMachine(relaxpack.build(mod)).run({})
    np.testing.assert_array_equal(out["z"], np.ones((4, 3), np.float32))


def test_a_kernel_result_that_contradicts_the_declared_dims_is_an_error(monkeypatch):
    mod = relaxpack.from_onnx(_model())
    monkeypatch.setitem(KERNELS, "test.repeat_rows", KERNELS["test.repeat_rows"].__class__(
        "test.repeat_rows", lambda x, n: (np.zeros((1, 5), x.dtype), np.asarray(1)), False))
    with pytest.raises(RelaxpackError, match="rep"):
        VirtualMachine(relaxpack.build(mod)).run({"x": np.ones((2, 3), np.float32), "n": np.array(1)})

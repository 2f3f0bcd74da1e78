"""register_func: the user registry, load-time checks, and impure calls end to end."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.errors import ArchiveError, MissingFunctionError, RelaxpackError
from relaxpack.importers.onnx import call_registered, register_converter
from relaxpack.ir import BindingBlock, Call, DataflowBlock, Op
from relaxpack.ir.well_formed import well_formed_errors
from relaxpack.runtime import VirtualMachine, load, register_func, registered_funcs, unregister_func
from relaxpack.runtime.kernels import KERNELS
from relaxpack.runtime.registry import FUNCTIONS

DOMAIN = "test.regfunc"


@pytest.fixture(autouse=True)
def clean_registry():
    saved = dict(FUNCTIONS)
    FUNCTIONS.clear()
    yield
    FUNCTIONS.clear()
    FUNCTIONS.update(saved)


# converters for the test domain: Scale (dps), Tap (impure call_packed), Crop (data-dependent rows)
@register_converter(DOMAIN, "Scale", since_opset=1)
def _scale(ctx, x, *, factor=1.0):
    return call_registered(ctx, "test.scale", [x], (x.shape, x.dtype), dps=True, factor=factor)


@register_converter(DOMAIN, "Tap", since_opset=1)
def _tap(ctx, x, *, tag="t"):
    return call_registered(ctx, "test.tap", [x], (x.shape, x.dtype), tag=tag)


@register_converter(DOMAIN, "Crop", since_opset=1)
def _crop(ctx, x):
    return call_registered(ctx, "test.crop", [x], ((None, x.shape[1]), x.dtype))


def _model(nodes, outputs, extra_inputs=()):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 3]), *extra_inputs],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)])


def _scale_fn(x, *, factor, out):
    np.multiply(x, np.float32(factor), out=out)


X = np.arange(12, dtype=np.float32).reshape(4, 3)


# ---------------------------------------------------------------- the registry
def test_decorator_registers_and_returns_the_function():
    @register_func("test.f")
    def f(x):
        return x
    assert f(1) == 1 and "test.f" in registered_funcs()
    unregister_func("test.f")
    assert "test.f" not in registered_funcs()
    with pytest.raises(RelaxpackError, match="no function 'test.f'"):
        unregister_func("test.f")


def test_a_second_registration_needs_override():
    register_func("test.f", lambda x: x)
    with pytest.raises(RelaxpackError, match="already registered; pass override=True"):
        register_func("test.f", lambda x: -x)
    register_func("test.f", np.negative, override=True)
    assert FUNCTIONS["test.f"].fn is np.negative


def test_builtin_kernels_are_not_replaced_silently():
    assert "add" in KERNELS
    with pytest.raises(RelaxpackError, match="'add' is a built-in kernel; pass override=True"):
        register_func("add", lambda a, b, *, out: None, dps=True)
    with pytest.raises(RelaxpackError, match="same calling convention"):
        register_func("add", lambda a, b: a + b, override=True)
    assert "add" not in FUNCTIONS


@pytest.mark.parametrize("name", ["", " x", 3, "a\nb"])
def test_bad_names_are_refused(name):
    with pytest.raises(RelaxpackError, match="register_func"):
        register_func(name, lambda x: x)


def test_an_override_replaces_the_builtin_kernel_in_this_process():
    model = helper.make_model(helper.make_graph(
        [helper.make_node("Neg", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]), opset_imports=[helper.make_opsetid("", 17)])
    exe = relaxpack.build(relaxpack.from_onnx(model))
    assert "negative" in exe.kernel_names
    x = np.array([1, 2], np.float32)
    np.testing.assert_array_equal(VirtualMachine(exe).run({"x": x})["y"], -x)
    register_func("negative", lambda x, *, out: out.fill(7), dps=True, override=True)
    np.testing.assert_array_equal(VirtualMachine(exe).run({"x": x})["y"], [7, 7])


# ---------------------------------------------------------------- load / VM checks
def _two_function_archive(tmp_path):
    model = _model([helper.make_node("Scale", ["x"], ["s"], domain=DOMAIN, factor=2.0),
                    helper.make_node("Tap", ["s"], ["y"], domain=DOMAIN)], ["y"])
    path = tmp_path / "m.rpk"
    relaxpack.build(relaxpack.from_onnx(model)).save(path)
    return path


def test_loading_names_every_missing_function_and_how_to_register_it(tmp_path):
    path = _two_function_archive(tmp_path)
    with pytest.raises(MissingFunctionError) as info:
        load(path)
    msg = str(info.value)
    assert isinstance(info.value, ArchiveError) and str(path) in msg
    assert "['test.scale', 'test.tap']" in msg
    assert "register_func('test.scale', fn, dps=True)" in msg and "register_func('test.tap', fn)" in msg


def test_the_vm_checks_an_executable_built_in_process(tmp_path):
    path = _two_function_archive(tmp_path)
    register_func("test.tap", lambda x, *, tag: x)
    exe = load(path, check_functions=False)
    with pytest.raises(MissingFunctionError, match=r"\['test.scale'\]"):
        VirtualMachine(exe)


def test_registered_functions_run_and_match(tmp_path):
    path = _two_function_archive(tmp_path)
    seen = []
    register_func("test.scale", _scale_fn, dps=True)
    register_func("test.tap", lambda x, *, tag: (seen.append(tag), x)[1])
    out = VirtualMachine(load(path)).run({"x": X})["y"]
    np.testing.assert_array_equal(out, 2 * X)
    assert seen == ["t"]


def test_a_calling_convention_mismatch_is_reported(tmp_path):
    path = _two_function_archive(tmp_path)
    register_func("test.scale", lambda x, *, factor: x * factor)   # should be dps=True
    register_func("test.tap", lambda x, *, tag: x)
    with pytest.raises(MissingFunctionError, match="'test.scale' is called in destination-passing style .* "
                                                   "registered with dps=False"):
        load(path)


def test_data_dependent_dims_are_bound_and_checked():
    register_func("test.crop", lambda x: x[: len(x) // 2])
    mod = relaxpack.from_onnx(_model([helper.make_node("Crop", ["x"], ["y"], domain=DOMAIN)], ["y"]))
    assert 'R.call_packed("test.crop"' in mod.script()
    out = VirtualMachine(relaxpack.build(mod)).run({"x": X})["y"]
    np.testing.assert_array_equal(out, X[:2])
    register_func("test.crop", lambda x: x[:, :2], override=True)   # breaks the declared column count
    with pytest.raises(RelaxpackError, match="crop"):
        VirtualMachine(relaxpack.build(mod)).run({"x": X})


def test_dps_outputs_need_every_dim():
    @register_converter(DOMAIN, "BadDps", since_opset=1)
    def _bad(ctx, x):
        return call_registered(ctx, "test.bad", [x], ((None, 3), x.dtype), dps=True)
    with pytest.raises(RelaxpackError, match="destination-passing call needs every output dim"):
        relaxpack.from_onnx(_model([helper.make_node("BadDps", ["x"], ["y"], domain=DOMAIN)], ["y"]))


# ---------------------------------------------------------------- impure calls
def _tap_log():
    log = []
    register_func("test.tap", lambda x, *, tag: (log.append((tag, float(x.sum()))), x)[1])
    return log


@pytest.mark.parametrize("opt_level", [0, 1, 2])
def test_impure_calls_are_neither_dropped_merged_nor_reordered(opt_level):
    # b and a tap the same value (CSE must not merge them), "unused" taps a value
    # no output needs (DCE must not drop it), and the log shows the model's order
    model = _model([helper.make_node("Tap", ["x"], ["b"], domain=DOMAIN, tag="b"),
                    helper.make_node("Relu", ["x"], ["r"]),
                    helper.make_node("Tap", ["r"], ["unused"], domain=DOMAIN, tag="unused"),
                    helper.make_node("Tap", ["x"], ["a"], domain=DOMAIN, tag="a"),
                    helper.make_node("Add", ["a", "b"], ["y"])], ["y"])
    log = _tap_log()
    mod = relaxpack.from_onnx(model)
    exe = relaxpack.build(mod, opt_level=opt_level)
    out = VirtualMachine(exe).run({"x": X - 5})["y"]
    np.testing.assert_array_equal(out, 2 * (X - 5))
    assert [t for t, _ in log] == ["b", "unused", "a"]
    assert log[1][1] == float(np.maximum(X - 5, 0).sum())


def test_impure_calls_stay_out_of_dataflow_blocks():
    _tap_log()
    model = _model([helper.make_node("Relu", ["x"], ["r"]),
                    helper.make_node("Tap", ["r"], ["t"], domain=DOMAIN),
                    helper.make_node("Sigmoid", ["t"], ["y"])], ["y"])
    mod = relaxpack.from_onnx(model)
    from relaxpack.passes.pipeline import optimize_pipeline
    optimized = optimize_pipeline()(mod)
    packed_blocks = [type(blk) for func in optimized.functions.values() for blk in func.body.blocks
                     if any(_is_call_packed(b.value) for b in blk.bindings)]
    assert packed_blocks == [BindingBlock]
    # and the checker rejects a dataflow block that holds one
    main = mod["main"]
    blocks = main.body.blocks
    assert any(_is_call_packed(b.value) for blk in blocks for b in blk.bindings)
    bad = main.replace(body=main.body.replace(
        blocks=tuple(DataflowBlock(b.bindings) if isinstance(b, BindingBlock) else b for b in blocks)))
    errors = well_formed_errors(mod.with_function("main", bad))
    assert any("impure call inside a dataflow block" in e for e in errors)


def _is_call_packed(value) -> bool:
    return isinstance(value, Call) and isinstance(value.op, Op) and value.op.name == "call_packed"

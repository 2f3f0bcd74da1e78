"""The importer's core: inputs and symbolic dims, initializers, the
converter registry, unsupported-op reporting, malformed graphs."""

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.errors import RelaxpackError, UnsupportedOpError
from relaxpack.importers.onnx import find_converter, register_converter
from relaxpack.ir import TensorStructInfo, sym
from relaxpack.ir.well_formed import check_well_formed
from relaxpack.ops import make_call
from relaxpack.runtime import VirtualMachine

DOMAIN = "test.relaxpack"


@register_converter(DOMAIN, "Double", since_opset=1)
def _double(ctx, x):
    return make_call("add", ctx.expr(x), ctx.expr(x))


@register_converter(DOMAIN, "AddConst", since_opset=1)
def _add_const(ctx, x, c, *, scale=1.0):
    return make_call("multiply", make_call("add", ctx.expr(x), ctx.expr(c)),
                     ctx.expr(ctx.const(np.array(scale, np.float32))))


def model(nodes, inputs, outputs, initializers=(), domain_opset=1):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 21),
                                                                  helper.make_opsetid(DOMAIN, domain_opset)])


def vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def test_dim_params_become_symbolic_dims_and_dims_bind_them():
    m = model([helper.make_node("Double", ["x"], ["y"], domain=DOMAIN)],
              [vi("x", ["batch", "seq", 4])], [vi("y", ["batch", "seq", 4])])
    mod = relaxpack.from_onnx(m)
    (x,) = mod["main"].params
    assert x.name_hint == "x"
    assert x.struct_info == TensorStructInfo((sym("batch"), sym("seq"), 4), "float32")
    bound = relaxpack.from_onnx(m, dims={"batch": 2, "seq": (1, 512)})
    assert bound["main"].params[0].struct_info == TensorStructInfo((2, sym("seq"), 4), "float32")
    assert bound["main"].attrs["dim_ranges"] == (("seq", 1, 512),)
    check_well_formed(bound)


def test_unnamed_dims_get_fresh_names_and_are_not_tied():
    m = model([helper.make_node("Double", ["a"], ["y"], domain=DOMAIN)],
              [vi("a", [None, "?"]), vi("b", [None])], [vi("y", None)])
    mod = relaxpack.from_onnx(m)
    a, b = mod["main"].params
    dims = list(a.struct_info.shape) + list(b.struct_info.shape)
    assert len({str(d) for d in dims}) == 3, dims


def test_unnamed_dims_are_bound_by_the_names_they_are_shown_with():
    # silero VAD's inputs name no dims: `check` reports `input_dim1=48`, so `--dim input_dim1=512`
    # must bind that dim (the user's name once renamed the fresh one to input_dim1_2)
    m = model([helper.make_node("Double", ["input"], ["y"], domain=DOMAIN)],
              [vi("input", [None, None])], [vi("y", None)])
    shown = [str(d) for d in relaxpack.from_onnx(m)["main"].params[0].struct_info.shape]
    assert shown == ["input_dim0", "input_dim1"]
    bound = relaxpack.from_onnx(m, dims={"input_dim0": 1, "input_dim1": (1, 512)})
    assert bound["main"].params[0].struct_info == TensorStructInfo((1, sym("input_dim1")), "float32")
    assert bound["main"].attrs["dim_ranges"] == (("input_dim1", 1, 512),)


def test_fresh_dim_names_avoid_the_names_the_model_declares():
    # an unnamed axis of `x` is x_dim0 unless a later input declares that name
    m = model([helper.make_node("Double", ["x"], ["y"], domain=DOMAIN)],
              [vi("x", [None, 4]), vi("z", ["x_dim0"])], [vi("y", None)])
    x, z = relaxpack.from_onnx(m)["main"].params
    assert [str(d) for d in x.struct_info.shape] == ["x_dim0_2", "4"]
    assert [str(d) for d in z.struct_info.shape] == ["x_dim0"]
    bound = relaxpack.from_onnx(m, dims={"x_dim0_2": 2, "x_dim0": 5})["main"].params
    assert [list(p.struct_info.shape) for p in bound] == [[2, 4], [5]]


def test_a_dim_declared_as_a_sum_of_declared_names_is_that_sum():
    """optimum's decoders with past: the attention mask is ``past_sequence_length +
    sequence_length`` long. It was a dim of its own, drawn apart from the two (check failed in
    onnxruntime) and bound only by a mangled name; now it is their sum, checked at run time. A
    sum of names nothing else declares stays one dim of its own (nothing would bind them)."""
    from relaxpack.errors import InputError
    nodes = [helper.make_node("Concat", ["past", "new"], ["all"], axis=1),
             helper.make_node("Add", ["all", "mask"], ["y"])]
    m = model(nodes, [vi("mask", ["batch", "past_length + length"]), vi("past", ["batch", "past_length"]),
                      vi("new", ["batch", "length"])], [vi("y", ["batch", "past_length + length"])])
    mod = relaxpack.from_onnx(m, dims={"length": 3})
    assert 'mask: R.Tensor(("batch", "past_length + 3"), "float32")' in mod.script()
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(m)))
    ones = {"mask": np.ones((2, 5), np.float32), "past": np.ones((2, 2), np.float32),
            "new": np.ones((2, 3), np.float32)}
    np.testing.assert_array_equal(vm.run(ones)["y"], np.full((2, 5), 2, np.float32))
    with pytest.raises(InputError, match="input 'mask': dim 1 is 6, but length \\+ past_length = 5"):
        vm.run({**ones, "mask": np.ones((2, 6), np.float32)})
    alone = model([helper.make_node("Identity", ["x"], ["y"])], [vi("x", ["a + b"])], [vi("y", ["a + b"])])
    assert 'x: R.Tensor(("a___b",), "float32")' in relaxpack.from_onnx(alone).script()


def test_weird_dim_names_are_sanitized():
    m = model([helper.make_node("Double", ["x"], ["y"], domain=DOMAIN)],
              [vi("x", ["batch size", "2x"])], [vi("y", None)])
    (x,) = relaxpack.from_onnx(m)["main"].params
    assert [str(d) for d in x.struct_info.shape] == ["batch_size", "d_2x"]


def test_dims_naming_unknown_dims_is_an_error():
    m = model([helper.make_node("Double", ["x"], ["y"], domain=DOMAIN)], [vi("x", ["n"])], [vi("y", ["n"])])
    with pytest.raises(RelaxpackError, match=r"dims \['batch'\] do not name any dim.*\['n'\]"):
        relaxpack.from_onnx(m, dims={"batch": 3})


def test_initializers_become_constants_and_model_runs():
    c = helper.make_tensor("c", TensorProto.FLOAT, [4], np.arange(4, dtype=np.float32))
    m = model([helper.make_node("AddConst", ["x", "c"], ["y"], domain=DOMAIN, scale=2.0)],
              [vi("x", ["n", 4])], [vi("y", ["n", 4])], [c])
    mod = relaxpack.from_onnx(m)
    assert [p.name_hint for p in mod["main"].params] == ["x"]
    vm = VirtualMachine(relaxpack.build(mod))
    for n in (1, 5):
        x = np.ones((n, 4), np.float32)
        np.testing.assert_allclose(vm.run({"x": x})["y"], (x + np.arange(4)) * 2)


def test_every_unsupported_op_is_listed_at_once():
    m = model([helper.make_node("Frobnicate", ["x"], ["t"], domain=DOMAIN),
               helper.make_node("Double", ["t"], ["u"], domain=DOMAIN),
               helper.make_node("Zap", ["u"], ["y"], domain="other.domain")],
              [vi("x", [2])], [vi("y", [2])])
    with pytest.raises(UnsupportedOpError) as err:
        relaxpack.from_onnx(m)
    text = str(err.value)
    assert "2 unsupported op(s)" in text
    assert "Frobnicate (domain test.relaxpack, opset 1)" in text and "Zap (domain other.domain" in text


def test_unknown_attribute_is_reported_clearly():
    m = model([helper.make_node("Double", ["x"], ["y"], domain=DOMAIN, mode="fast")],
              [vi("x", [2])], [vi("y", [2])])
    with pytest.raises(UnsupportedOpError, match="Double node.*unexpected keyword argument 'mode'"):
        relaxpack.from_onnx(m)


def test_converter_chosen_by_opset():
    @register_converter(DOMAIN, "Versioned", since_opset=1)
    def v1(ctx, x):
        return make_call("negative", ctx.expr(x))

    @register_converter(DOMAIN, "Versioned", since_opset=5)
    def v5(ctx, x):
        return make_call("exp", ctx.expr(x))

    assert find_converter(DOMAIN, "Versioned", 4).fn is v1
    assert find_converter(DOMAIN, "Versioned", 7).fn is v5
    for opset, op in [(3, "negative"), (5, "exp")]:
        m = model([helper.make_node("Versioned", ["x"], ["y"], domain=DOMAIN)], [vi("x", [2])],
                  [vi("y", [2])], domain_opset=opset)
        assert f"R.{op}(" in relaxpack.from_onnx(m).script()


def test_spans_name_the_onnx_nodes():
    m = model([helper.make_node("Double", ["x"], ["y"], domain=DOMAIN, name="/layer0/Double")],
              [vi("x", [2])], [vi("y", [2])])
    assert "# span: /layer0/Double" in relaxpack.from_onnx(m).script()


def test_nodes_out_of_order_are_sorted_and_cycles_rejected():
    nodes = [helper.make_node("Double", ["t"], ["y"], domain=DOMAIN),
             helper.make_node("Double", ["x"], ["t"], domain=DOMAIN)]
    m = model(nodes, [vi("x", [2])], [vi("y", [2])])
    out = VirtualMachine(relaxpack.build(relaxpack.from_onnx(m))).run({"x": np.ones(2, np.float32)})
    np.testing.assert_array_equal(out["y"], [4, 4])
    cyc = model([helper.make_node("Double", ["b"], ["a"], domain=DOMAIN),
                 helper.make_node("Double", ["a"], ["b"], domain=DOMAIN)], [vi("x", [2])], [vi("a", [2])])
    with pytest.raises(RelaxpackError, match="cycle"):
        relaxpack.from_onnx(cyc)


def test_a_branch_reading_a_later_nodes_value_is_sorted_after_it():
    """onnxruntime's quantizer can leave an If before the node computing a value its branch reads
    (a quantized DeBERTa-v2 from optimum): onnxruntime sorts by the values subgraphs capture, and
    so does the importer, nested subgraphs included. Against onnxruntime, both branches."""
    import onnxruntime as ort

    def branch(name, node):
        return helper.make_graph([node], name, [], [vi(f"{name}_out", [2])])
    inner = helper.make_node("If", ["flag"], ["inner_out"], then_branch=branch(
        "deep", helper.make_node("Neg", ["late"], ["deep_out"])), else_branch=branch(
        "shallow", helper.make_node("Identity", ["x"], ["shallow_out"])))
    nodes = [helper.make_node("If", ["flag"], ["y"],
                              then_branch=helper.make_graph([inner], "then", [], [vi("inner_out", [2])]),
                              else_branch=branch("else", helper.make_node("Identity", ["late"], ["else_out"]))),
             helper.make_node("Add", ["x", "x"], ["late"])]
    m = model(nodes, [vi("x", [2]), vi("flag", [], TensorProto.BOOL)], [vi("y", [2])])
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(m)))
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for flag in (True, False):
        feeds = {"x": np.array([1.0, -2.0], np.float32), "flag": np.array(flag)}
        np.testing.assert_array_equal(vm.run(feeds)["y"], session.run(None, feeds)[0])


def test_an_output_declared_of_another_dtype_than_it_computes_is_refused():
    """onnxruntime refuses it; relaxpack returned float32 where the model declares double
    (skl2onnx's HistGradientBoosting with float64 input). Undeclared element types pass."""
    import onnxruntime as ort
    from relaxpack.errors import ModelError
    nodes = [helper.make_node("Add", ["x", "x"], ["y"])]
    wrong = model(nodes, [vi("x", [2])], [vi("y", [2], TensorProto.DOUBLE)])
    with pytest.raises(ModelError, match="graph output 'y' is declared float64 but the model computes float32"):
        relaxpack.from_onnx(wrong)
    with pytest.raises(Exception, match="does not match expected type"):
        ort.InferenceSession(wrong.SerializeToString(), providers=["CPUExecutionProvider"])
    untyped = model(nodes, [vi("x", [2])], [onnx.ValueInfoProto(name="y")])
    out = VirtualMachine(relaxpack.build(relaxpack.from_onnx(untyped))).run({"x": np.ones(2, np.float32)})
    assert out["y"].dtype == np.float32


def test_undefined_input_names_the_node():
    m = model([helper.make_node("Double", ["nowhere"], ["y"], domain=DOMAIN, name="d0")],
              [vi("x", [2])], [vi("y", [2])])
    with pytest.raises(RelaxpackError, match="cycle|reads 'nowhere'"):
        relaxpack.from_onnx(m)


def test_files_that_are_not_models(tmp_path):
    with pytest.raises(RelaxpackError, match="no such model file"):
        relaxpack.from_onnx(tmp_path / "missing.onnx")
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\x00\x01garbage" * 10)
    with pytest.raises(RelaxpackError, match="is not an ONNX model"):
        relaxpack.from_onnx(junk)


def test_external_data_outside_the_model_folder_is_refused(tmp_path):
    c = helper.make_tensor("c", TensorProto.FLOAT, [4], np.zeros(4, np.float32))
    m = model([helper.make_node("AddConst", ["x", "c"], ["y"], domain=DOMAIN)],
              [vi("x", [4])], [vi("y", [4])], [c])
    tensor = m.graph.initializer[0]
    tensor.ClearField("float_data")
    tensor.data_location = TensorProto.EXTERNAL
    tensor.external_data.add(key="location", value="../../etc/passwd")
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    with pytest.raises(RelaxpackError, match="outside the model's folder"):
        relaxpack.from_onnx(path)


def test_a_domain_used_but_not_declared_counts_as_opset_1():
    """onnxruntime's transformer optimizer leaves com.microsoft out of the
    opset imports; onnxruntime accepts such models, so relaxpack does too."""
    node = helper.make_node("Gelu", ["x"], ["y"], domain="com.microsoft")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    x = np.linspace(-3, 3, 5, dtype=np.float32)
    out = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model))).run({"x": x})["y"]
    np.testing.assert_allclose(out, x * 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2))), rtol=1e-6, atol=1e-7)

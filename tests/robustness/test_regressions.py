"""Minimal reproductions of what the robustness campaigns found.

A bug not yet fixed is a strict xfail naming where the fix belongs (strict:
the test starts failing, as a reminder to drop the mark, the day the bug is
fixed), and the generator avoids its pattern (strategies.KNOWN_BUGS; a valid
model rejected with a clear error goes in strategies.KNOWN_LIMITATIONS).
Fixed ones stay here as plain tests asserting the right answer. Today both
sets are empty.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import relaxpack
from relaxpack.errors import RelaxpackError
from relaxpack.runtime import VirtualMachine

from .differential import compare, ort_session

F, H, I64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.INT64


def model(nodes, inputs, inits=(), opset=17):
    graph = helper.make_graph(nodes, "regression", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                              [onnx.ValueInfoProto(name="y")],
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def relaxpack_run(m, feeds, dims=None, opt_level=0):
    exe = relaxpack.build(relaxpack.from_onnx(m, dims=dims), opt_level=opt_level)
    with np.errstate(all="ignore"):
        return VirtualMachine(exe).run(feeds)["y"]


def assert_agrees(m, feeds, fp16=False):
    want = ort_session(m).run(None, feeds)[0]
    for level in (0, 2):
        problem = compare(relaxpack_run(m, feeds, opt_level=level), want, fp16)
        assert problem is None, f"-O{level}: {problem}"


def slice_model(shape, start, end, step):
    return model([helper.make_node("Slice", ["x", "s", "e", "a", "t"], ["y"])], [("x", F, shape)],
                 [("s", np.array([start])), ("e", np.array([end])), ("a", np.array([0])), ("t", np.array([step]))])


# ---------------------------------------------------------------- wrong answers
@pytest.mark.parametrize("shape", [[3], ["n"]])
def test_slice_negative_step_clamps_start_to_zero(shape):
    # ONNX: start -10 + 3 = -7 clamps to 0, end -7 clamps to -1: element 0; onnxruntime agrees
    assert_agrees(slice_model(shape, -10, -10, -1), {"x": np.arange(3, dtype=np.float32)})


@pytest.mark.parametrize("shape", [[3], ["n"], [0], ["n0"]])
@pytest.mark.parametrize("start, end, step", [(-10, -10, -2), (-2 ** 63, -2 ** 63, -1), (-4, 0, -1), (5, -10, -1)])
def test_slice_negative_step_clamping(shape, start, end, step):
    size = 0 if shape[0] in (0, "n0") else 3
    assert_agrees(slice_model(shape, start, end, step), {"x": np.arange(size, dtype=np.float32)})


@pytest.mark.parametrize("shape", [[3, 1, 2], ["a", "b", "c"]])
def test_slice_of_a_shape_value_with_a_negative_step(shape):
    # the importer and simplify_shapes slice shape values themselves (no kernel)
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Slice", ["s", "b", "e", "a", "t"], ["y"])]
    m = model(nodes, [("x", F, shape)], [("b", np.array([-10])), ("e", np.array([-10])), ("a", np.array([0])),
                                         ("t", np.array([-1]))])
    assert_agrees(m, {"x": np.ones((3, 1, 2), np.float32)})


@pytest.mark.parametrize("op", ["Selu", "Elu", "Softplus", "HardSwish"])
def test_activation_of_a_scalar(op):
    assert_agrees(model([helper.make_node(op, ["x"], ["y"])], [("x", F, [])]), {"x": np.array(-0.5, np.float32)})


def fp16_case(op, inits=(), **attrs):
    """``op`` of one or two float16 (1, 2) inputs (plus initializers)."""
    inputs = ["x", "z"] if op == "Mean" else ["x"]
    node = helper.make_node(op, inputs + [n for n, _ in inits], ["y"], **attrs)
    return model([node], [(n, H, [1, 2]) for n in inputs], inits)


# each: a finite result whose intermediates (squares, partial sums, A @ B) overflow float16
FP16_CASES = {
    "ReduceL2": (fp16_case("ReduceL2", keepdims=0), [40000, 40000]),             # sqrt(2) * 40000
    "ReduceLogSum": (fp16_case("ReduceLogSum", keepdims=0), [40000, 40000]),      # log(80000)
    "Gemm": (fp16_case("Gemm", [("w", np.ones((2, 1), np.float16))], alpha=0.5), [40000, 40000]),
    "GemmBias": (fp16_case("Gemm", [("w", np.ones((2, 1), np.float16)), ("c", np.array([-40000], np.float16))]),
                 [40000, 40000]),
    "Mean": (fp16_case("Mean"), [40000, 40000]),                                  # (40000 + 40000) / 2
    "LpNormalization": (fp16_case("LpNormalization", axis=-1), [40000, 30000]),
    "LpNormalization1": (fp16_case("LpNormalization", axis=-1, p=1), [40000, 30000]),
    "MeanVarianceNormalization": (fp16_case("MeanVarianceNormalization", axes=[1]), [40000, -30000]),
}


@pytest.mark.parametrize("case", sorted(FP16_CASES))
def test_fp16_accumulation_does_not_overflow(case):
    m, values = FP16_CASES[case]
    x = np.array([values], np.float16)
    feeds = {i.name: x for i in m.graph.input}
    assert_agrees(m, feeds, fp16=True)


def test_fp16_sum_of_three_does_not_overflow():
    m = model([helper.make_node("Sum", ["x", "x", "z"], ["y"])], [("x", H, [2]), ("z", H, [2])])
    assert_agrees(m, {"x": np.array([40000, 1], np.float16), "z": np.array([-40000, 1], np.float16)}, fp16=True)


def test_clip_default_bounds():
    m = model([helper.make_node("Clip", ["x"], ["y"])], [("x", F, [2])])
    assert_agrees(m, {"x": np.array([np.inf, -np.inf], np.float32)})


@pytest.mark.parametrize("op", ["GreaterOrEqual", "Less", "Equal", "Greater", "LessOrEqual"])
def test_comparing_a_shape_value_with_an_empty_tensor_gives_bool(op):
    m = model([helper.make_node("Size", ["x"], ["s"]), helper.make_node(op, ["s", "c"], ["y"])], [("x", F, ["n"])],
              [("c", np.zeros(0, np.int64))])
    assert_agrees(m, {"x": np.ones(4, np.float32)})


def gelu_erf_form(opset=17):
    """GELU as exporters write it: (x * 0.5) * (1 + Erf(x / sqrt(2))); -O2 composes it into nn.gelu."""
    nodes = [helper.make_node("Div", ["x", "r2"], ["d"]), helper.make_node("Erf", ["d"], ["e"]),
             helper.make_node("Add", ["e", "one"], ["p"]), helper.make_node("Mul", ["x", "half"], ["h"]),
             helper.make_node("Mul", ["h", "p"], ["y"])]
    return model(nodes, [("x", F, [2, 4])], [("r2", np.array(np.sqrt(2), np.float32)),
                                             ("one", np.array(1, np.float32)), ("half", np.array(0.5, np.float32))],
                 opset)


@pytest.mark.parametrize("form", ["erf", "op", "op_fp16"])
def test_gelu_of_minus_inf_is_nan_at_every_level(form):
    # the float32 nn.gelu gave 0 at -inf (the limit), while the formula (-inf * 0), onnxruntime and the
    # Erf form run op by op at -O0 give NaN: the same model answered NaN at -O0 and 0 at -O2
    x = np.array([[-np.inf, np.inf, -1e30, 1e30], [-3.0, 0.0, -0.0, 2.0]], np.float32)
    if form == "erf":
        m = gelu_erf_form()
    else:
        m = model([helper.make_node("Gelu", ["x"], ["y"])], [("x", H if form == "op_fp16" else F, [2, 4])], opset=20)
        x = np.clip(x, -6e4, 6e4).astype(np.float16) if form == "op_fp16" else x
        x[0, :2] = [-np.inf, np.inf]
    assert_agrees(m, {"x": x}, fp16=form == "op_fp16")


@pytest.mark.parametrize("op, gates", [("RNN", 1), ("GRU", 3), ("LSTM", 4)])
@pytest.mark.parametrize("shape", [(3, 0, 4), (0, 2, 4)])
def test_recurrent_layer_of_an_empty_batch_or_sequence(op, gates, shape):
    # the projection was reshaped to (seq, batch, -1): numpy cannot infer -1 for 0 elements
    # (no onnxruntime here: its GRU aborts the process on an empty batch)
    rng = np.random.default_rng(0)
    inits = [("W", rng.standard_normal((2, gates * 3, 4)).astype(np.float32)),
             ("R", rng.standard_normal((2, gates * 3, 3)).astype(np.float32)),
             ("B", rng.standard_normal((2, 6 * gates)).astype(np.float32))]
    node = helper.make_node(op, ["x", "W", "R", "B"], ["y", "y_h"], hidden_size=3, direction="bidirectional")
    m = model([node], [("x", F, ["s", "n", 4])], inits)
    m.graph.output.append(onnx.ValueInfoProto(name="y_h"))
    for level in (0, 2):
        exe = relaxpack.build(relaxpack.from_onnx(m), opt_level=level)
        got = VirtualMachine(exe).run({"x": np.zeros(shape, np.float32)})
        assert got["y"].shape == (shape[0], 2, shape[1], 3)
        np.testing.assert_array_equal(got["y_h"], np.zeros((2, shape[1], 3), np.float32))


# ---------------------------------------------------------------- internal errors at build time
def test_maxpool_ceil_mode_on_a_symbolic_dim():
    m = model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[1], strides=[2], ceil_mode=1)],
              [("x", F, [1, 1, "n"])])
    assert_agrees(m, {"x": np.arange(5, dtype=np.float32).reshape(1, 1, 5)})


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("kernel, stride, pads", [(2, 2, [1, 1]), (3, 2, [0, 2]), (2, 3, [1, 0]), (3, 3, [2, 1])])
def test_pool_ceil_mode_drops_a_last_window_in_the_end_padding(op, kernel, stride, pads):
    # whether the last window starts in the end padding (and is dropped) depends on n: one build, several n
    m = model([helper.make_node(op, ["x"], ["y"], kernel_shape=[kernel], strides=[stride], pads=pads, ceil_mode=1)],
              [("x", F, [1, 1, "n"])])
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(m), opt_level=2))
    for n in range(max(1, kernel - sum(pads)), 9):
        x = np.arange(n, dtype=np.float32).reshape(1, 1, n)
        problem = compare(vm.run({"x": x})["y"], ort_session(m).run(None, {"x": x})[0])
        assert problem is None, f"n={n}: {problem}"


def test_reshape_minus_one_over_a_non_monomial():
    nodes = [helper.make_node("Pad", ["x", "pads"], ["p"], mode="edge"), helper.make_node("Shape", ["p"], ["s"]),
             helper.make_node("Gather", ["s", "i0"], ["g0"]), helper.make_node("Gather", ["s", "i1"], ["g1"]),
             helper.make_node("Mul", ["g0", "g1"], ["prod"]),
             helper.make_node("Concat", ["prod", "minus_one"], ["shape"], axis=0),
             helper.make_node("Reshape", ["p", "shape"], ["y"])]
    m = model(nodes, [("x", F, ["m", "n"])], [("pads", np.array([0, 0, 0, 2])), ("i0", np.array([0])),
                                               ("i1", np.array([1])), ("minus_one", np.array([-1]))])
    assert_agrees(m, {"x": np.ones((3, 2), np.float32)})


def test_reshape_minus_one_that_no_dim_expression_gives():
    # (2n + 4) elements into (n + 2, -1): the -1 is 2, but dims divide by constants only
    nodes = [helper.make_node("Pad", ["x", "pads"], ["p"]),
             helper.make_node("Concat", ["p", "p"], ["pp"], axis=0), helper.make_node("Shape", ["p"], ["s"]),
             helper.make_node("Concat", ["s", "minus_one"], ["shape"], axis=0),
             helper.make_node("Reshape", ["pp", "shape"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    m = model(nodes, [("x", F, ["n"])], [("pads", np.array([0, 2])), ("minus_one", np.array([-1]))])
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(m), opt_level=2))
    for n in (0, 1, 5):
        x = np.arange(n, dtype=np.float32) - 2
        assert compare(vm.run({"x": x})["y"], ort_session(m).run(None, {"x": x})[0]) is None


def test_split_of_an_if_output_with_branch_dependent_dims():
    then = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["t"], axis=1)], "then", [],
                             [helper.make_tensor_value_info("t", F, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", F, None)])
    nodes = [helper.make_node("If", ["c"], ["r"], then_branch=then, else_branch=other),
             helper.make_node("Split", ["r", "sizes"], ["y", "rest"], axis=0)]
    m = model(nodes, [("x", F, [2, 3]), ("c", TensorProto.BOOL, [])], [("sizes", np.array([1, 1]))])
    assert_agrees(m, {"x": np.ones((2, 3), np.float32), "c": np.array(True)})


def test_concat_of_two_if_outputs_that_share_branch_dims():
    # both outputs are (2, 6) in one branch and (2, 3) in the other: equal whichever runs (found by the campaign)
    then = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["t"], axis=1),
                              helper.make_node("Neg", ["t"], ["t2"])], "then", [],
                             [helper.make_tensor_value_info(n, F, None) for n in ("t", "t2")])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"]), helper.make_node("Neg", ["x"], ["e2"])],
                              "else", [], [helper.make_tensor_value_info(n, F, None) for n in ("e", "e2")])
    nodes = [helper.make_node("If", ["c"], ["r", "r2"], then_branch=then, else_branch=other),
             helper.make_node("Concat", ["r", "r2"], ["y"], axis=0)]
    m = model(nodes, [("x", F, [2, 3]), ("c", TensorProto.BOOL, [])])
    for c in (True, False):
        assert_agrees(m, {"x": np.arange(6, dtype=np.float32).reshape(2, 3), "c": np.array(c)})


def test_if_whose_branch_shapes_agree_only_within_the_dim_ranges():
    # 2 * n + 1 == n + 2 only for n == 1: legalize re-joins the branches and needs the ranges (found by the campaign)
    then = helper.make_graph([helper.make_node("Concat", ["x", "x", "one"], ["t"], axis=0)], "then", [],
                             [helper.make_tensor_value_info("t", F, None)])
    other = helper.make_graph([helper.make_node("Concat", ["x", "one", "one"], ["e"], axis=0)], "else", [],
                              [helper.make_tensor_value_info("e", F, None)])
    nodes = [helper.make_node("If", ["c"], ["r"], then_branch=then, else_branch=other),
             helper.make_node("Relu", ["r"], ["y"])]
    m = model(nodes, [("x", F, ["n"]), ("c", TensorProto.BOOL, [])], [("one", np.ones(1, np.float32))])
    for c in (True, False):
        feeds = {"x": np.array([-2], np.float32), "c": np.array(c)}
        got = relaxpack_run(m, feeds, dims={"n": (1, 1)})
        assert compare(got, ort_session(m).run(None, feeds)[0]) is None


def test_op_after_a_conv_whose_dim_the_range_makes_static():
    # n in [2, 3]: SimplifyShapes makes the conv's n // 2 a 1; Legalize re-infers the conv as n // 2, so
    # the softmax's argument changed and its call had no struct info ("cannot legalize", campaign seed 8)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], dilations=[2], kernel_shape=[2], pads=[1, 0], strides=[2]),
             helper.make_node("Softmax", ["c"], ["y"], axis=-3)]
    m = model(nodes, [("x", F, [4, 4, "n"])], [("w", np.linspace(-1, 1, 16, dtype=np.float32).reshape(2, 4, 2))])
    for n in (2, 3):
        x = np.linspace(-2, 2, 16 * n, dtype=np.float32).reshape(4, 4, n)
        want = ort_session(m).run(None, {"x": x})[0]
        for level in (0, 2):
            assert compare(relaxpack_run(m, {"x": x}, dims={"n": (2, 3)}, opt_level=level), want) is None


# ---------------------------------------------------------------- limitations lifted
@pytest.mark.parametrize("step", [1, -1, 2])
def test_slice_with_a_symbolic_end_that_may_be_negative(step):
    # end = n - 2: negative for n < 2 (ONNX then counts it from the end); one build, several n
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Sub", ["s", "two"], ["end"]),
             helper.make_node("Slice", ["x", "start", "end", "zero", "step"], ["y"])]
    m = model(nodes, [("x", F, ["n"])], [("two", np.array([2])), ("zero", np.array([0])),
                                         ("start", np.array([0 if step > 0 else -1])), ("step", np.array([step]))])
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(m), opt_level=2))
    for n in range(5):
        x = np.arange(n, dtype=np.float32)
        assert compare(vm.run({"x": x})["y"], ort_session(m).run(None, {"x": x})[0]) is None, f"n={n}"


@pytest.mark.parametrize("auto_pad", ["SAME_UPPER", "SAME_LOWER"])
def test_conv_same_on_a_symbolic_dim_with_stride(auto_pad):
    # the padding depends on n % 2: one build, odd and even n
    m = model([helper.make_node("Conv", ["x", "w"], ["y"], auto_pad=auto_pad, strides=[2], kernel_shape=[3])],
              [("x", F, [1, 1, "n"])], [("w", np.arange(3, dtype=np.float32).reshape(1, 1, 3))])
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(m), opt_level=2))
    for n in range(1, 8):
        x = np.arange(n, dtype=np.float32).reshape(1, 1, n)
        assert compare(vm.run({"x": x})["y"], ort_session(m).run(None, {"x": x})[0]) is None, f"n={n}"


@pytest.mark.parametrize("c", [False, True])
def test_concat_of_an_if_output_with_branch_dependent_dims(c):
    then = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["t"], axis=1)], "then", [],
                             [helper.make_tensor_value_info("t", F, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", F, None)])
    nodes = [helper.make_node("If", ["c"], ["r"], then_branch=then, else_branch=other),
             helper.make_node("Concat", ["r", "x2"], ["y"], axis=1)]
    m = model(nodes, [("x", F, [2, 3]), ("x2", F, [2, 3]), ("c", TensorProto.BOOL, [])])
    feeds = {"x": np.ones((2, 3), np.float32), "x2": np.full((2, 3), 2, np.float32), "c": np.array(c)}
    assert_agrees(m, feeds)


# ---------------------------------------------------------------- malformed models: not RelaxpackErrors
def assert_rejected_clearly(m_or_path, build=True):
    """A malformed model: a RelaxpackError with a clear message, at import or build."""
    from .model_mutations import clear_message
    with pytest.raises(RelaxpackError) as err:
        mod = relaxpack.from_onnx(m_or_path)
        if build:
            relaxpack.build(mod)
    assert clear_message(err.value) is None, str(err.value)


def relu_transpose(attr) -> onnx.ModelProto:
    node = helper.make_node("Transpose", ["x"], ["y"])
    node.attribute.append(attr)
    return model([node], [("x", F, [2, 3])])


@pytest.mark.parametrize("attr", [
    helper.make_attribute("perm", 1.5),                                           # FLOAT for INTS
    helper.make_attribute("perm", helper.make_graph([], "g", [], [])),          # GRAPH for INTS
], ids=["float", "graph"])
def test_attribute_of_the_wrong_type(attr):
    assert_rejected_clearly(relu_transpose(attr))


def test_string_attribute_that_is_not_utf8():
    assert_rejected_clearly(model([helper.make_node("Pad", ["x", "pads"], ["y"], mode=b"\xff\xfe")],
                                  [("x", F, [2])], [("pads", np.array([1, 1]))]))


def test_empty_name_for_a_required_input():
    assert_rejected_clearly(model([helper.make_node("MatMul", ["x", ""], ["y"])], [("x", F, [2, 2])]))


def test_names_that_are_not_utf8(tmp_path):
    m = model([helper.make_node("Relu", ["x"], ["QQ"]), helper.make_node("Neg", ["QQ"], ["y"])], [("x", F, [2])])
    path = tmp_path / "names.onnx"
    path.write_bytes(m.SerializeToString().replace(b"QQ", b"\xff\xfe"))
    assert_rejected_clearly(path)


def test_nul_byte_in_an_external_data_location(tmp_path):
    w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    w.ClearField("raw_data")
    w.data_location = TensorProto.EXTERNAL
    entry = w.external_data.add()
    entry.key, entry.value = "location", "weights.bin\x00../secret.bin"
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [("x", F, [2])])
    m.graph.initializer.append(w)
    path = tmp_path / "nul.onnx"
    path.write_bytes(m.SerializeToString())
    assert_rejected_clearly(path)


def test_negative_dim_in_a_constant_shape():
    assert_rejected_clearly(model([helper.make_node("Expand", ["one", "shape"], ["y"])], [],
                                  [("one", np.ones(1, np.float32)), ("shape", np.array([-3, 4]))]))


def test_huge_static_tensor_is_refused_at_build():
    assert_rejected_clearly(model([helper.make_node("ConstantOfShape", ["shape"], ["y"])], [],
                                  [("shape", np.array([2 ** 20, 2 ** 20]))]))


def test_duplicate_initializer_names():
    m = model([helper.make_node("Add", ["x", "w"], ["y"])], [("x", F, [2])],
              [("w", np.ones(2, np.float32)), ("w", np.zeros(2, np.float32))])
    with pytest.raises(RelaxpackError, match="two initializers named 'w'"):
        relaxpack.from_onnx(m)
    assert_rejected_clearly(m)


def test_duplicate_initializer_names_in_a_branch():
    inits = [numpy_helper.from_array(np.full(2, v, np.float32), "w") for v in (1, 0)]
    then = helper.make_graph([helper.make_node("Add", ["x", "w"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", F, [2])], inits)
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", F, [2])])
    m = model([helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
              [("x", F, [2]), ("c", TensorProto.BOOL, [])])
    with pytest.raises(RelaxpackError, match="graph 'then' has two initializers named 'w'"):
        relaxpack.from_onnx(m)


def test_rank_above_numpy_limit():
    m = model([helper.make_node("Shape", ["x"], ["s"]), helper.make_node("ConstantOfShape", ["s"], ["y"])],
              [("x", F, [1] * 100)])
    assert_rejected_clearly(m)

"""Gradual shape checking on the patterns of real models (issue 15's table):
each model converts with no dims given, matches onnxruntime at several
shapes (sizes that are not multiples of the strides among them) at -O0 and
-O2, and a shape that breaks an assumption fails with a one-line ShapeError
naming the ONNX node, both dims and their values, where onnxruntime fails too."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

import relaxpack
from relaxpack.errors import ShapeError
from relaxpack.runtime import VirtualMachine
from relaxpack.runtime.assumptions import assumptions_of
from tests.cli_helpers import invoke

from . import gradual_models as models
from .backend_case import assert_close

ort.set_default_logger_severity(3)


def _image(n, h, w, c=3, seed=0):
    return {"x": np.random.default_rng(seed).standard_normal((n, c, h, w)).astype(np.float32)}


def _vms(model):
    """One import (no dims), built at -O0 and -O2."""
    mod = relaxpack.from_onnx(model)
    return [(level, relaxpack.build(mod, opt_level=level)) for level in (0, 2)]


def _ort(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _check_shapes(model, feeds_list, rtol=1e-5, atol=1e-5):
    executables = _vms(model)
    for feeds in feeds_list:
        want = _ort(model, feeds)
        for level, exe in executables:
            got = VirtualMachine(exe).run(feeds)
            for (name, value), expected in zip(got.items(), want):
                assert_close(value, expected, rtol, atol, f"{name} at -O{level}, {[a.shape for a in feeds.values()]}")
    return executables


def _check_violation(model, feeds, node: str, *texts: str):
    """onnxruntime refuses ``feeds``; relaxpack fails with one line naming the node and ``texts``."""
    with pytest.raises(Exception):
        _ort(model, feeds)
    for level, exe in _vms(model):
        with pytest.raises(ShapeError) as info:
            VirtualMachine(exe).run(feeds)
        message = str(info.value)
        assert "\n" not in message
        assert f"ONNX node {node!r}" in message, message
        for text in texts:
            assert text in message, message


# ---------------------------------------------------------------- concat (UNet, YOLO, PP-OCR)


@pytest.mark.parametrize("kind", ["resize", "convtranspose"])
def test_unet_skip_concat_after_upsample(kind):
    model = models.unet_concat(kind)
    exes = _check_shapes(model, [_image(1, 16, 24), _image(2, 33, 41), _image(1, 19, 8), _image(1, 8, 11)])
    said = {a["condition"] for a in assumptions_of(exes[0][1])}
    assert said == {"height % 8 < 4", "width % 8 < 4"}


def test_unet_concat_violation_names_node_dims_and_values():
    # 36 % 8 == 4: the upsampled map has 2 * (36 // 8) = 8 rows, the skip 36 // 4 = 9
    _check_violation(models.unet_concat(), _image(1, 36, 16), "up/Concat",
                     "2 * (height // 8) = 8", "height // 4 = 9", "height = 36")


def test_yolo_neck_resize_then_concat():
    model = models.yolo_neck()
    _check_shapes(model, [_image(1, 32, 32), _image(1, 29, 31), _image(2, 30, 13), _image(1, 64, 15)])


def test_yolo_neck_violation():
    # height 25: (25+1)//2 = 13, then 7 rows, the deepest 4 resized to 8
    _check_violation(models.yolo_neck(), _image(1, 25, 32), "neck/Concat", "= 8", "= 7")


def test_ppocr_fpn_levels_resized_to_one_size():
    model = models.ppocr_fpn()
    exes = _check_shapes(model, [_image(1, 64, 64), _image(1, 70, 40), _image(2, 40, 103)])
    said = {a["condition"] for a in assumptions_of(exes[0][1])}
    assert said == {"height % 32 < 16", "width % 32 < 16"}


# ---------------------------------------------------------------- broadcast and matmul (BERT)


def _bert_feeds(batch, seq, seed=0):
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((batch, seq, 8)).astype(np.float32),
            "mask": (rng.random((batch, seq)) < 0.8).astype(np.int64)}


@pytest.mark.parametrize("expand", [False, True], ids=["unsqueeze_cast_sub_mul", "expand_where"])
def test_bert_mask_broadcast_converts_without_dims(expand):
    model = models.bert_mask(max_positions=16, expand=expand)
    exes = _check_shapes(model, [_bert_feeds(1, 1), _bert_feeds(2, 5), _bert_feeds(3, 16), _bert_feeds(1, 7)])
    # the only assumption: positions are sliced from a buffer of 16
    assert [a["condition"] for a in assumptions_of(exes[0][1])] == ["seq <= 16"]


def test_bert_mask_broadcast_violation():
    _check_violation(models.bert_mask(max_positions=16), _bert_feeds(1, 17), "/Add_1",
                     "min(seq, 16) = 16", "seq = 17")


def test_matmul_inner_dims_of_unrelated_inputs_are_assumed_and_checked():
    from onnx import TensorProto, helper
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", "k"])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["m", 5])
    node = helper.make_node("MatMul", ["a", "b"], ["y"], name="/proj/MatMul")
    model = models._model([node], [a, b], [models._output()])
    rng = np.random.default_rng(0)
    feeds = lambda n, k, m: {"a": rng.standard_normal((n, k)).astype(np.float32),  # noqa: E731
                             "b": rng.standard_normal((m, 5)).astype(np.float32)}
    _check_shapes(model, [feeds(2, 3, 3), feeds(1, 7, 7)])
    _check_violation(model, feeds(2, 3, 4), "/proj/MatMul", "k = 3", "m = 4")


@pytest.mark.parametrize("op", ["MatMul", "LSTM"])
def test_one_value_in_two_operands_that_must_agree_is_cast_once(op):
    """``S @ S`` with S of dims (a, b) assumes a == b: one cast of S for both operands (the
    second use referred to a cast never bound: an ill-formed module). open-voicefilter-lite feeds
    one zeros tensor as an LSTM's initial_h and initial_c."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(0)
    if op == "MatMul":
        inputs = [helper.make_tensor_value_info("S", TensorProto.FLOAT, ["a", "b"])]
        nodes, inits = [helper.make_node("MatMul", ["S", "S"], ["y"])], []
        feeds = [{"S": _floats(rng, n, n)} for n in (1, 4)]
    else:
        inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["seq", "batch", 2]),
                  helper.make_tensor_value_info("S", TensorProto.FLOAT, ["a", "b", "c"])]
        inits = [numpy_helper.from_array(_floats(rng, 1, 8, n), w) for n, w in ((2, "W"), (2, "R"))]
        nodes = [helper.make_node("LSTM", ["x", "W", "R", "", "", "S", "S"], ["y"], hidden_size=2)]
        feeds = [{"x": _floats(rng, 3, b, 2), "S": _floats(rng, 1, b, 2)} for b in (1, 3)]
    model = models._model(nodes, inputs, [models._output()], inits)
    _check_shapes(model, feeds)


def _floats(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_einsum_label_dims_are_assumed_and_checked():
    from onnx import TensorProto, helper
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", "k1"])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["k2", "m"])
    node = helper.make_node("Einsum", ["a", "b"], ["y"], name="/Einsum", equation="ij,jk->ik")
    model = models._model([node], [a, b], [models._output()])
    rng = np.random.default_rng(1)
    _check_shapes(model, [{"a": _floats(rng, 2, 3), "b": _floats(rng, 3, 4)},
                          {"a": _floats(rng, 1, 6), "b": _floats(rng, 6, 2)}])
    _check_violation(model, {"a": _floats(rng, 2, 3), "b": _floats(rng, 5, 4)}, "/Einsum", "k2 = 5", "k1 = 3")


def test_det_rows_and_columns_are_assumed_and_checked():
    from onnx import TensorProto, helper
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", "rows", "cols"])
    model = models._model([helper.make_node("Det", ["a"], ["y"], name="/Det")], [a], [models._output()])
    rng = np.random.default_rng(2)
    _check_shapes(model, [{"a": _floats(rng, 2, 3, 3)}, {"a": _floats(rng, 1, 5, 5)}], rtol=1e-4, atol=1e-4)
    _check_violation(model, {"a": _floats(rng, 2, 3, 4)}, "/Det", "cols = 4", "rows = 3")


def test_unrelated_dims_broadcast_at_run_time_and_a_mismatch_names_node_and_dims():
    """(n, 4) + (m, 4): either may be 1, so the run broadcasts them (dyn.broadcast_pair);
    when neither is, the error names the node, both dims and their values."""
    from onnx import TensorProto, helper
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["n", 4])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["m", 4])
    model = models._model([helper.make_node("Add", ["a", "b"], ["y"], name="/attn/Add")], [a, b],
                          [models._output()])
    rng = np.random.default_rng(3)
    _check_shapes(model, [{"a": _floats(rng, 3, 4), "b": _floats(rng, 1, 4)},
                          {"a": _floats(rng, 1, 4), "b": _floats(rng, 5, 4)},
                          {"a": _floats(rng, 2, 4), "b": _floats(rng, 2, 4)}])
    _check_violation(model, {"a": _floats(rng, 3, 4), "b": _floats(rng, 5, 4)}, "/attn/Add",
                     "(n, 4) and (m, 4)", "n = 3 and m = 5")


def test_conv_channels_of_a_named_dim_are_assumed_and_checked():
    """An input whose channel axis has a name: the conv assumes it is the weight's, the run checks."""
    from onnx import TensorProto, helper
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "c", "h", "w"])
    w = helper.make_tensor("w", TensorProto.FLOAT, [4, 3, 3, 3], _floats(np.random.default_rng(4), 108).tolist())
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="/stem/Conv", pads=[1, 1, 1, 1])
    model = models._model([node], [x], [models._output()], [w])
    rng = np.random.default_rng(5)
    exes = _check_shapes(model, [{"x": _floats(rng, 1, 3, 8, 8)}, {"x": _floats(rng, 2, 3, 5, 7)}])
    assert [a["condition"] for a in assumptions_of(exes[0][1])] == ["c == 3"]
    _check_violation(model, {"x": _floats(rng, 1, 4, 8, 8)}, "/stem/Conv", "c = 4")


def test_provably_false_relation_is_refused_at_convert_time():
    # with height in 36..39 the upsampled map has 8 rows and the skip 9: never equal
    with pytest.raises(ShapeError, match="cannot concatenate"):
        relaxpack.from_onnx(models.unet_concat(), dims={"height": (36, 39)})


def test_ranges_that_prove_a_relation_drop_its_check():
    exe = relaxpack.build(relaxpack.from_onnx(models.bert_mask(16), dims={"seq": (1, 16)}))
    assert assumptions_of(exe) == []


# ---------------------------------------------------------------- the project's BERT, from the command line


BERT = Path(__file__).resolve().parents[2] / "models" / "bert_small.onnx"


def test_bert_small_converts_with_no_dims_and_matches_onnxruntime(tmp_path):
    from relaxpack.runtime import load

    out = tmp_path / "bert.rpk"
    result = invoke("convert", str(BERT), "-o", str(out))
    assert result.exit_code == 0, result.output
    assert "assumes       seq <= 64" in result.output
    shown = invoke("inspect", str(out), "--json")
    assert [a["condition"] for a in json.loads(shown.output)["assumptions"]] == ["seq <= 64"]
    vm = VirtualMachine(load(out))
    sess = ort.InferenceSession(str(BERT), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for batch, seq in [(1, 1), (2, 7), (3, 13), (1, 64), (5, 33)]:
        feeds = {"input_ids": rng.integers(0, 100, (batch, seq)),
                 "attention_mask": (rng.random((batch, seq)) < 0.8).astype(np.int64),
                 "token_type_ids": rng.integers(0, 2, (batch, seq))}
        for got, want in zip(vm.run(feeds).values(), sess.run(None, feeds)):
            assert_close(got, want, 1e-5, 1e-5, f"bert at ({batch}, {seq})")
    with pytest.raises(ShapeError, match=r"ONNX node '/Add_1' assumes min\(seq, 64\) == seq, i.e. seq <= 64"):
        vm.run({name: np.zeros((1, 65), np.int64) for name in ("input_ids", "attention_mask", "token_type_ids")})


# ---------------------------------------------------------------- unknown dims wherever ONNX allows them


def test_paddle_negative_missing_and_placeholder_dims_are_unknown():
    model = models.paddle_unknown_dims()
    mod = relaxpack.from_onnx(model)
    assert [str(d) for d in mod["main"].params[0].struct_info.shape] == ["x_dim0", "3", "x_dim2", "x_dim3"]
    _check_shapes(model, [_image(1, 16, 16), _image(2, 15, 9), _image(3, 1, 30)])


def test_same_dim_param_on_axes_that_differ():
    model = models.same_name_on_two_axes()
    # by default one name is one dim: the input check says which axes disagree and how to untie them
    exe = relaxpack.build(relaxpack.from_onnx(model))
    with pytest.raises(relaxpack.RelaxpackError, match=r"N = 2 here.*--dim N=\?"):
        VirtualMachine(exe).run(_image(2, 2, 7))
    # untied (dims={"N": "?"}, --dim N=?), each axis is a dim of its own, as onnxruntime reads them
    untied = relaxpack.from_onnx(model, dims={"N": "?"})
    assert [str(d) for d in untied["main"].params[0].struct_info.shape] == ["N", "3", "N_2", "N_3"]
    executable = relaxpack.build(untied)
    for feeds in (_image(2, 2, 7), _image(1, 5, 3), _image(3, 3, 3)):
        got, want = VirtualMachine(executable).run(feeds)["y"], _ort(model, feeds)[0]
        assert_close(got, want, 1e-5, 1e-5, "untied N")


def test_shape_of_a_value_of_unknown_rank_in_an_if_branch():
    model = models.shape_in_if_branch()
    for level, exe in _vms(model):
        vm = VirtualMachine(exe)
        rng = np.random.default_rng(0)
        for shape in [(3,), (2, 5), (4, 1, 2)]:
            for flag in (True, False):
                feeds = {"state": rng.standard_normal(shape).astype(np.float32), "flag": np.array(flag)}
                assert_close(vm.run(feeds)["y"], _ort(model, feeds)[0], 1e-6, 1e-6, f"-O{level} {shape} {flag}")


def test_check_draws_dims_that_hold_the_assumptions():
    from relaxpack.check import draw_dims

    exe = relaxpack.build(relaxpack.from_onnx(models.unet_concat(), dims={"height": (8, 64), "width": (8, 64)}))
    rng = np.random.default_rng(0)
    draws = [draw_dims(exe, rng) for _ in range(40)]
    assert all(d["height"] % 8 < 4 and d["width"] % 8 < 4 for d in draws)
    assert len({d["height"] for d in draws}) > 5


def test_last_row_broadcast_against_its_axis_is_no_assumption():
    """DETR's position embedding divides a cumsum by its last row, ``y / y[:, -1:, :]``:
    the slice is ``min(h, 1)`` rows, a broadcast against ``h``, never ``h`` itself (assuming
    that made every image taller than one row fail)."""
    from onnx import TensorProto, helper, numpy_helper
    consts = [numpy_helper.from_array(np.array(v, np.int64), n)
              for n, v in (("axis", 1), ("start", [-1]), ("end", [2 ** 62]), ("axes", [1]))]
    nodes = [helper.make_node("CumSum", ["x", "axis"], ["c"]),
             helper.make_node("Slice", ["c", "start", "end", "axes"], ["last"]),
             helper.make_node("Div", ["c", "last"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["b", "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    rng = np.random.default_rng(0)
    exes = _check_shapes(model, [{"x": rng.random(shape).astype(np.float32) + 0.5}
                                 for shape in ((1, 1, 4), (2, 5, 3), (1, 16, 16))])
    assert assumptions_of(exes[0][1]) == []
    assert "min(h, 1)" in relaxpack.from_onnx(model).script()


def test_a_last_cell_against_the_cells_before_it_is_broadcast_at_run_time():
    """timm's EfficientViT (LiteMLA, dynamo exporter) pads v with a column of ones and divides
    ``out[..., :-1]`` by ``out[..., -1:]``: ``max(n - 1, 0)`` against ``min(n, 1)`` cells, over a
    ``n`` from an equal Split the algebra cannot bound. Assuming the two equal refused every run
    but the one with ``n == 1``; a dim that is at most 1 is a broadcast the run decides."""
    from onnx import TensorProto, helper
    consts = [helper.make_tensor("pads", TensorProto.INT64, [4], [0, 0, 0, 1]),
              helper.make_tensor("one", TensorProto.FLOAT, [], [1.0]),
              helper.make_tensor("s0", TensorProto.INT64, [1], [0]), helper.make_tensor("e0", TensorProto.INT64, [1], [-1]),
              helper.make_tensor("s1", TensorProto.INT64, [1], [-1]),
              helper.make_tensor("e1", TensorProto.INT64, [1], [2 ** 62]),
              helper.make_tensor("ax", TensorProto.INT64, [1], [1])]
    nodes = [helper.make_node("Split", ["x"], ["q", "k", "v"], axis=1, num_outputs=3),
             helper.make_node("Pad", ["v", "pads", "one"], ["vp"]),
             helper.make_node("Slice", ["vp", "s0", "e0", "ax"], ["num"]),
             helper.make_node("Slice", ["vp", "s1", "e1", "ax"], ["den"]),
             helper.make_node("Div", ["num", "den"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", "d"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=9)
    rng = np.random.default_rng(0)
    _check_shapes(model, [{"x": rng.standard_normal((2, d)).astype(np.float32)} for d in (3, 6, 9, 48, 50)])

"""Models built with onnx.helper, through relaxpack and onnxruntime, at
several values of each dynamic dim with one build."""

import numpy as np
import pytest

import relaxpack
from relaxpack.check import check_model, compare_outputs, onnxruntime_session
from relaxpack.errors import ShapeError
from relaxpack.examples.onnx_models import small_cnn, transformer_block_onnx
from relaxpack.runtime import VirtualMachine


def run_both(model, feeds_list, rtol=1e-4, atol=1e-5):
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model)))
    session = onnxruntime_session(model)
    names = [o.name for o in session.get_outputs()]
    for feeds in feeds_list:
        diffs = compare_outputs(names, vm.run(feeds), session.run(None, feeds), rtol, atol)
        assert all(d.passed for d in diffs), diffs


def test_small_cnn_at_batch_1_3_17():
    rng = np.random.default_rng(0)
    model = small_cnn()
    run_both(model, [{"input": rng.standard_normal((b, 3, 32, 32)).astype(np.float32)} for b in (1, 3, 17)])


def test_transformer_block_at_several_batch_and_seq():
    rng = np.random.default_rng(1)
    model = transformer_block_onnx()
    run_both(model, [{"x": rng.standard_normal((b, s, 32)).astype(np.float32)}
                     for b, s in [(1, 1), (2, 7), (1, 128)]])


def test_transformer_reshapes_stay_symbolic():
    text = relaxpack.from_onnx(transformer_block_onnx()).script(show_meta=False)
    assert "R.shape([batch, seq, 4, 8])" in text
    assert "shape_to_tensor" not in text


@pytest.mark.parametrize("make", [small_cnn, transformer_block_onnx])
def test_check_model_reports_agreement(make):
    report = check_model(make(), samples=2, seed=3)
    assert report.passed, report.worst()
    assert len(report.samples) == 2 and all(s.dims for s in report.samples)


def test_check_model_makes_random_strings_for_string_inputs():
    from onnx import TensorProto as TP
    from onnx import helper
    nodes = [helper.make_node("StringConcat", ["s", "s"], ["twice"]),
             helper.make_node("RegexFullMatch", ["s"], ["has_digit"], pattern=r".*\d.*")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("s", TP.STRING, ["n"])],
                              [helper.make_tensor_value_info("twice", TP.STRING, None),
                               helper.make_tensor_value_info("has_digit", TP.BOOL, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)], ir_version=10)
    report = check_model(model, dims={"n": (2, 40)}, samples=3, seed=1)
    assert report.passed, report.worst()
    strings = [s for sample in report.samples for s in sample.feeds["s"].tolist()]
    assert all(isinstance(s, str) for s in strings) and len(set(strings)) > 10
    assert any(any(c.isdigit() for c in s) for s in strings) and any(not s.isdigit() for s in strings)


# ---------------------------------------------------------------- onnxruntime's integer GEMM


def _saturating_matmul_integer():
    """A MatMulInteger model and inputs whose u8 x s8 pairs leave int16."""
    from .test_integer_semantics import matmul_integer_model, saturating_operands
    a, b = saturating_operands(np.random.default_rng(5), 3, 16)
    return matmul_integer_model(b, 0, 0, 16), a, b


class _SessionWithoutVnni:
    """onnxruntime's MatMulInteger session as it answers on a CPU without VNNI."""

    def __init__(self, b):
        self.b = b

    def get_inputs(self):
        return [type("In", (), {"name": "a"})()]

    def get_outputs(self):
        return [type("Out", (), {"name": "y"})()]

    def run(self, names, feeds):
        from .integer_semantics import ort_u8s8_matmul
        return [ort_u8s8_matmul(feeds["a"], self.b)]


def test_check_on_saturating_integer_gemm_passes_on_this_cpu():
    """Whatever this CPU: relaxpack's exact result passes; a note says so where onnxruntime saturated."""
    from .integer_semantics import exact_matmul_integer
    from relaxpack.check import ORT_DEVIATES
    model, a, b = _saturating_matmul_integer()
    report = check_model(model, inputs={"a": a})
    assert report.passed, report.worst()
    ort_exact = np.array_equal(onnxruntime_session(model).run(None, {"a": a})[0], exact_matmul_integer(a, b))
    assert report.samples[0].outputs[0].note == ("" if ort_exact else ORT_DEVIATES)


def test_check_blames_onnxruntime_where_it_saturates_unless_strict(monkeypatch):
    import relaxpack.check as check
    model, a, b = _saturating_matmul_integer()
    monkeypatch.setattr(check, "onnxruntime_session", lambda proto, **options: _SessionWithoutVnni(b))
    report = check.check_model(model, inputs={"a": a})
    (out,) = report.samples[0].outputs
    assert report.passed and out.max_abs > 0 and out.note == check.ORT_DEVIATES
    strict = check.check_model(model, inputs={"a": a}, strict=True)
    assert not strict.passed and strict.samples[0].outputs[0].note == ""


def test_check_still_fails_where_the_reference_sides_with_onnxruntime(monkeypatch):
    """A relaxpack result that is not the exact one is a failure, reference or not."""
    import relaxpack.check as check
    model, a, b = _saturating_matmul_integer()
    real = check.VirtualMachine

    class OffByOne(real):
        def run(self, feeds):
            return {k: v + 1 for k, v in super().run(feeds).items()}
    monkeypatch.setattr(check, "VirtualMachine", OffByOne)
    report = check.check_model(model, inputs={"a": a})
    assert not report.passed and report.samples[0].outputs[0].note == ""



def _conv_model(kernel: int):
    """A valid conv over symbolic H and W: onnxruntime refuses any image smaller than the kernel."""
    from onnx import TensorProto, helper, numpy_helper
    w = numpy_helper.from_array(np.random.default_rng(0).standard_normal((2, 1, kernel, kernel)).astype(np.float32),
                                "w")
    graph = helper.make_graph([helper.make_node("Conv", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "h", "w"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_check_draws_larger_dims_while_onnxruntime_refuses_small_ones():
    report = check_model(_conv_model(9), samples=3)
    assert report.passed
    assert all(min(s.dims["h"], s.dims["w"]) >= 9 for s in report.samples)


def test_check_draws_within_dim_ranges_above_the_first_draw_range():
    """``check --dim h=32..64`` builds the archive for 32..64; the first draw range, 1..8, lies
    below it and check refused ("the range 1..8 lies outside the archive's (32, 64)", a range the
    user never gave): it now starts at the range's lowest values."""
    report = check_model(_conv_model(3), dims={"h": (32, 64), "w": (9, 20)}, samples=3)
    assert report.passed
    assert all(32 <= s.dims["h"] <= 64 and 9 <= s.dims["w"] <= 20 for s in report.samples)


def test_check_says_which_dims_onnxruntime_refused_and_how_to_give_them():
    from relaxpack.errors import RelaxpackError
    with pytest.raises(RelaxpackError, match=r"onnxruntime failed on these inputs at h=\d+, w=\d+ \(and on the "
                                             r"\d+ other draws before\): .*; give the dims the model takes with "
                                             r"--dim NAME=VALUE"):
        check_model(_conv_model(200), samples=1)


def test_check_draws_token_ids_below_their_embedding_tables():
    """Random ints are 0..7; a 2-row token-type table would make onnxruntime (and relaxpack) refuse them."""
    from onnx import TensorProto, helper, numpy_helper

    from relaxpack.check import index_bounds
    rng = np.random.default_rng(0)
    tables = [numpy_helper.from_array(rng.standard_normal((n, 4)).astype(np.float32), name)
              for name, n in (("words", 128), ("types", 2))]
    graph = helper.make_graph(
        [helper.make_node("Gather", ["words", "ids"], ["w"]), helper.make_node("Gather", ["types", "tt"], ["t"]),
         helper.make_node("Add", ["w", "t"], ["y"])], "g",
        [helper.make_tensor_value_info(n, TensorProto.INT64, ["b", "s"]) for n in ("ids", "tt")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], tables)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    assert index_bounds(model) == {"ids": 128, "tt": 2}
    report = check_model(model, samples=3)
    assert report.passed
    assert all(s.feeds["tt"].max() < 2 for s in report.samples)


def test_ids_sliced_before_their_table_are_drawn_below_it():
    """TimesFM's TorchScript export slices its frequency ids, casts and reshapes them, then looks
    them up in a 3-row table: ids 0..7 made onnxruntime refuse every sample."""
    from onnx import TensorProto, helper, numpy_helper

    from relaxpack.check import index_bounds
    table = numpy_helper.from_array(np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32), "freq_emb")
    consts = [numpy_helper.from_array(np.array(v, np.int64), n) for n, v in
              (("starts", [0]), ("ends", [2 ** 62]), ("axes", [0]), ("column", [-1, 1]))]
    graph = helper.make_graph(
        [helper.make_node("Slice", ["freq", "starts", "ends", "axes"], ["sliced"]),
         helper.make_node("Cast", ["sliced"], ["cast"], to=TensorProto.INT64),
         helper.make_node("Reshape", ["cast", "column"], ["ids"]),
         helper.make_node("Gather", ["freq_emb", "ids"], ["y"])], "g",
        [helper.make_tensor_value_info("freq", TensorProto.INT64, ["b"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [table, *consts])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    assert index_bounds(model) == {"freq": 3}
    assert check_model(model, samples=3).passed


def test_fused_bert_embeddings_bound_their_token_and_segment_ids():
    """onnxruntime's EmbedLayerNormalization looks ids up in its word and segment tables as a
    Gather does, the model's int64 ids cast to int32 before: random segment ids of 0..7 in a 2-row
    table made onnxruntime refuse every sample (its transformer optimizer's BERT, quantized or not)."""
    from onnx import TensorProto, helper, numpy_helper

    from relaxpack.check import index_bounds
    rng = np.random.default_rng(0)
    consts = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
              for name, shape in (("words", (50, 8)), ("positions", (16, 8)), ("segments", (2, 8)),
                                  ("gamma", (8,)), ("beta", (8,)))]
    casts = [helper.make_node("Cast", [n], [n + "32"], to=TensorProto.INT32) for n in ("ids", "seg")]
    node = helper.make_node("EmbedLayerNormalization", ["ids32", "seg32", "words", "positions", "segments", "gamma",
                                                        "beta"], ["y", "mask_index"], domain="com.microsoft")
    graph = helper.make_graph(
        [*casts, node], "g", [helper.make_tensor_value_info(n, TensorProto.INT64, ["b", "s"]) for n in ("ids", "seg")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], consts)
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=opsets, ir_version=9)
    assert index_bounds(model) == {"ids": 50, "seg": 2}
    report = check_model(model, dims={"s": (1, 16)}, samples=2)
    assert report.passed and all(s.feeds["seg"].max() < 2 for s in report.samples)


def test_inputs_named_like_masks_are_drawn_0_or_1():
    """A float16 T5 (optimum -O4) computes (1 - mask) * -65504: a mask of 2..7 overflowed to -inf
    and relaxpack's NaN failed check where onnxruntime computes in float32."""
    from onnx import TensorProto, helper

    from relaxpack.feeds import random_inputs
    inputs = [helper.make_tensor_value_info(n, TensorProto.INT64, ["b", 64]) for n in ("attention_mask", "ids")]
    graph = helper.make_graph([helper.make_node("Add", ["attention_mask", "ids"], ["y"])], "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.INT64, None)])
    exe = relaxpack.build(relaxpack.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                                                ir_version=9)))
    feeds = random_inputs(exe, {"b": 8}, np.random.default_rng(0))
    assert set(np.unique(feeds["attention_mask"]).tolist()) == {0, 1}
    assert feeds["ids"].max() > 1


def test_token_ids_reshaped_before_their_table_are_drawn_below_it():
    """A multiple-choice BERT (optimum) flattens (batch, choices, seq) token type ids before their
    2-row table's Gather: the bound follows the ids through Reshape (check failed even with --dim)."""
    from onnx import TensorProto, helper, numpy_helper

    from relaxpack.check import index_bounds
    table = numpy_helper.from_array(np.ones((2, 4), np.float32), "types")
    flat = numpy_helper.from_array(np.array([-1, 3], np.int64), "flat")
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["tt", "flat"], ["tt_flat"]),
         helper.make_node("Gather", ["types", "tt_flat"], ["y"])],
        "g", [helper.make_tensor_value_info("tt", TensorProto.INT64, ["b", "c", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [table, flat])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    assert index_bounds(model) == {"tt": 2}
    report = check_model(model, samples=3)
    assert report.passed and all(s.feeds["tt"].max() < 2 for s in report.samples)


def _pools_model(levels: int, tile: bool):
    """``levels`` 2-wide, stride-2 max pools over a symbolic length ``h``; with ``tile``, the result is
    tiled back to ``2**levels * (h // 2**levels)`` cells and added to the input, which relaxpack converts
    assuming ``h % 2**levels == 0`` (onnxruntime also takes ``h == 1``, by broadcasting)."""
    from onnx import TensorProto, helper
    nodes = [helper.make_node("MaxPool", [f"p{i}"], [f"p{i + 1}"], kernel_shape=[2], strides=[2])
             for i in range(levels)]
    nodes[0].input[0] = "x"
    out = f"p{levels}"
    inits = []
    if tile:
        inits = [helper.make_tensor("reps", TensorProto.INT64, [3], [1, 1, 2 ** levels])]
        nodes += [helper.make_node("Tile", [out, "reps"], ["t"]), helper.make_node("Add", ["t", "x"], ["y"])]
        out = "y"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, "h"])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_check_draws_dims_that_hold_the_models_assumptions():
    for seed in range(10):
        report = check_model(_pools_model(4, tile=True), samples=3, seed=seed)
        assert report.passed and all(s.dims["h"] % 16 == 0 for s in report.samples), seed


def test_check_draws_larger_dims_where_relaxpack_refuses_and_says_so():
    report = check_model(_pools_model(3, tile=False), samples=3)
    assert report.passed and all(s.dims["h"] >= 8 for s in report.samples)
    notes = [n for s in report.samples for n in s.notes]
    assert notes and all(n.startswith("relaxpack refuses h=") and "shorter than the window" in n for n in notes)


def test_check_says_to_give_dims_where_relaxpack_refuses_every_draw():
    """Twelve halvings need h >= 4096, longer than any draw: the last draw's refusal is the error,
    naming the dims drawn and how to give the ones the model takes (madmom's chord CNN squeezes a
    dim that is 1 unless its input is 105 wide)."""
    with pytest.raises(ShapeError, match=r"^relaxpack refuses the random inputs at h=\d+: .*shorter than the "
                                         r"window.*; give the dims the model takes with --dim NAME=VALUE"):
        check_model(_pools_model(12, tile=False), samples=1)


def test_check_tries_equal_dims_where_the_model_names_them_apart():
    """paddle2onnx names each input's batch dim on its own (DynamicDimension_0, _1); the model adds
    the two, so onnxruntime refuses every draw of two values: check tries them as one value."""
    from onnx import TensorProto, helper
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [d, 4]) for n, d in (("a", "d0"), ("b", "d1"))]
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    report = check_model(model, samples=2)
    assert report.passed and all(s.dims["d0"] == s.dims["d1"] for s in report.samples)


def test_check_tries_equal_dims_within_the_dims_ranges():
    """The one-value draws of dims named apart stay within the archive's range of each: built with
    ``d0`` in 20..22, a value of 20..27 or 32..96 was drawn and relaxpack refused it ("dim 0 (d0)
    is 96, outside its range 20..22"; a dynamo Mamba2 given ``--dim s70=9..48``)."""
    from onnx import TensorProto, helper
    inputs = [helper.make_tensor_value_info(n, TensorProto.FLOAT, [d, 4]) for n, d in (("a", "d0"), ("b", "d1"))]
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "g", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    for seed in range(4):
        report = check_model(model, dims={"d0": (20, 22)}, samples=2, seed=seed)
        assert report.passed and all(20 <= s.dims["d0"] <= 22 for s in report.samples)


def _scaled_dim_model():
    """torch.export's derived dim ``Dim("h_k") * 32`` is the input dim ``32*h_k``; the model
    reshapes it to ``(h // 32, 32)``, which onnxruntime refuses at any other length."""
    from onnx import TensorProto, helper
    nodes = [helper.make_node("Shape", ["x"], ["s"]), helper.make_node("Div", ["s", "k"], ["rows"]),
             helper.make_node("Concat", ["rows", "k"], ["t"], axis=0), helper.make_node("Reshape", ["x", "t"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["32*h_k"])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [helper.make_tensor("k", TensorProto.INT64, [1], [32])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_check_draws_a_dim_spelled_as_a_multiple_as_that_multiple():
    """A dynamo-exported smp Unet with a mit_b0 encoder declares its height ``32*h_k`` and takes
    only multiples of 32; check drew 1..8, then 8..48 and 32..96, and onnxruntime refused them."""
    model = _scaled_dim_model()
    for seed in range(3):
        report = check_model(model, samples=3, seed=seed)
        assert report.passed and all(s.dims["d_32_h_k"] % 32 == 0 for s in report.samples), seed
    from relaxpack.check import dim_multiples
    assert dim_multiples(model) == {"d_32_h_k": 32}


def test_relative_error_near_zero_is_taken_against_the_tolerance():
    (diff,) = compare_outputs(["y"], {"y": np.array([1.0, 1e-30], np.float32)}, [np.array([1.0, 0.0], np.float32)])
    assert diff.passed and diff.max_abs == pytest.approx(1e-30) and diff.max_rel < 1e-20

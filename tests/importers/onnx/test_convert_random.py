"""The random ops (converters/random.py) -- training-mode Dropout,
RandomUniform/RandomNormal and their *Like forms, Bernoulli, Multinomial --
against onnx's reference evaluator, whose seeded random stream (numpy's
``RandomState(seed)``, started afresh at each call) the kernels reproduce
bit for bit; unseeded draws differ from run to run, and no pass or import
folds or merges them."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import relaxpack
from relaxpack.errors import ExecutionError, RelaxpackError, UnsupportedOpError
from relaxpack.importers.onnx.context import ImportContext
from relaxpack.ir import parse
from relaxpack.ir.block_builder import BlockBuilder
from relaxpack.ir.equality import assert_structural_equal
from relaxpack.ir.expr import Constant, ShapeExpr, Var
from relaxpack.ops.registry import make_call
from relaxpack.passes.pipeline import optimize_pipeline
from relaxpack.runtime import VirtualMachine, load
from relaxpack.vm_build import build

from .helpers import check_model, rand


def dropout_model(dtype=TensorProto.FLOAT, seed=0, ratio_given=True):
    inputs = ["x", "r" if ratio_given else "", "t"]
    attrs = {} if seed is None else {"seed": seed}
    node = helper.make_node("Dropout", inputs, ["y", "mask"], **attrs)
    graph_inputs = [helper.make_tensor_value_info("x", dtype, ["n", 7]),
                    helper.make_tensor_value_info("r", TensorProto.FLOAT, []),
                    helper.make_tensor_value_info("t", TensorProto.BOOL, [])]
    if not ratio_given:
        del graph_inputs[1]
    outputs = [helper.make_tensor_value_info("y", dtype, None),
               helper.make_tensor_value_info("mask", TensorProto.BOOL, None)]
    graph = helper.make_graph([node], "g", graph_inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10)


def feeds(n, ratio, training, dtype=np.float32, seed=0):
    return {"x": rand(n, 7, dtype=dtype, seed=seed), "r": np.array(ratio, np.float32), "t": np.array(training)}


def reference_as(model, dtype, drop=()):
    """onnx's reference outputs with y cast to ``dtype`` (for float16 it returns
    float32) and the inputs in ``drop`` fed to it only (the model omits them)."""
    evaluator = ReferenceEvaluator(model)

    def run(f):
        y, mask = evaluator.run(None, {k: v for k, v in f.items() if k not in drop})
        return [y.astype(dtype), mask]
    return run


@pytest.mark.parametrize("seed", [0, 5, 123])
@pytest.mark.parametrize("dtype", [(TensorProto.FLOAT, np.float32), (TensorProto.DOUBLE, np.float64),
                                   (TensorProto.FLOAT16, np.float16)])
def test_seeded_training_dropout_matches_the_reference(seed, dtype):
    onnx_type, np_type = dtype
    model = dropout_model(onnx_type, seed)
    check_model(model, feeds(5, 0.3, True, np_type), feeds(11, 0.75, True, np_type, 1),
                feeds(0, 0.5, True, np_type), feeds(4, 0.0, True, np_type), feeds(3, 0.5, False, np_type),
                ref=reference_as(model, np_type))


def test_default_ratio_is_a_half():
    """Against the reference given ratio 0.5 explicitly (it cannot run without one)."""
    f = feeds(9, 0.5, True)
    with_half = reference_as(dropout_model(), np.float32)
    check_model(dropout_model(ratio_given=False), {k: v for k, v in f.items() if k != "r"},
                ref=lambda g: with_half({**g, "r": np.array(0.5, np.float32)}))


def test_unseeded_dropout_draws_afresh_each_run():
    vm = VirtualMachine(build(relaxpack.from_onnx(dropout_model(seed=None))))
    f = feeds(200, 0.5, True)
    first, second = vm.run(f)["mask"], vm.run(f)["mask"]
    assert first.shape == (200, 7) and 0.4 < first.mean() < 0.6
    assert not np.array_equal(first, second)


def test_unseeded_dropout_of_a_constant_is_not_folded():
    """Folded at build time it would give one mask for ever."""
    model = dropout_model(seed=None)
    model.graph.initializer.append(helper.make_tensor("x", TensorProto.FLOAT, [200, 7], np.ones(1400).tolist()))
    del model.graph.input[0]
    vm = VirtualMachine(build(relaxpack.from_onnx(model)))
    f = {"r": np.array(0.5, np.float32), "t": np.array(True)}
    assert not np.array_equal(vm.run(f)["mask"], vm.run(f)["mask"])


# ---------------------------------------------------------------- RandomUniform, RandomNormal, Bernoulli, Multinomial


def random_model(op, attrs=None, x=None, out_type=None, opset=22, count=1):
    """``count`` nodes of ``op`` (outputs y0, y1, ...); ``x``: (onnx type, shape) of
    the one input of the *Like ops, Bernoulli and Multinomial."""
    inputs = [] if x is None else [helper.make_tensor_value_info("x", x[0], x[1])]
    nodes = [helper.make_node(op, [] if x is None else ["x"], [f"y{i}"], **(attrs or {})) for i in range(count)]
    outputs = [helper.make_tensor_value_info(f"y{i}", out_type or TensorProto.UNDEFINED, None) for i in range(count)]
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def runner(model, opt_level=2):
    vm = VirtualMachine(build(relaxpack.from_onnx(model), opt_level=opt_level))
    return lambda feeds={}: [vm.run(feeds)[o.name] for o in model.graph.output]


def assert_same_as_reference(model, *feeds_list):
    """Bit-equal to onnx's reference evaluator, in value and dtype, twice over."""
    run, evaluator = runner(model), ReferenceEvaluator(model)
    for feeds in feeds_list:
        want = evaluator.run(None, feeds)
        for _ in range(2):
            for got, expected in zip(run(feeds), want):
                assert got.dtype == expected.dtype
                np.testing.assert_array_equal(got, expected)


F16, F32, F64 = TensorProto.FLOAT16, TensorProto.FLOAT, TensorProto.DOUBLE


@pytest.mark.parametrize("dtype", [F16, F32, F64])
@pytest.mark.parametrize("op, params", [("RandomUniform", {"low": -2.5, "high": 7.0}),
                                        ("RandomNormal", {"mean": 1.5, "scale": 3.0})])
def test_seeded_random_fills_match_the_reference(op, params, dtype):
    assert_same_as_reference(random_model(op, {"shape": [3, 5, 2], "dtype": dtype, "seed": 7.0, **params}), {})


@pytest.mark.parametrize("op, params", [("RandomUniformLike", {"low": 1.0, "high": 2.0}),
                                        ("RandomNormalLike", {"mean": -1.0, "scale": 0.5})])
@pytest.mark.parametrize("x_type, dtype", [(F32, None), (F16, None), (F64, F32), (TensorProto.INT64, F64)])
def test_seeded_like_ops_take_the_inputs_symbolic_shape_and_dtype(op, params, x_type, dtype):
    attrs = {"seed": 3.0, **params, **({} if dtype is None else {"dtype": dtype})}
    np_type = helper.tensor_dtype_to_np_dtype(x_type)
    assert_same_as_reference(random_model(op, attrs, x=(x_type, ["n", 4])),
                             {"x": np.zeros((6, 4), np_type)}, {"x": np.zeros((1, 4), np_type)},
                             {"x": np.zeros((0, 4), np_type)})


@pytest.mark.parametrize("x_type, dtype", [(F32, None), (F64, None), (F16, None), (F32, F64),
                                           (F32, TensorProto.INT32), (F64, TensorProto.BOOL)])
def test_seeded_bernoulli_matches_the_reference(x_type, dtype):
    attrs = {"seed": 11.0, **({} if dtype is None else {"dtype": dtype})}
    probs = np.random.default_rng(0).random(60).astype(helper.tensor_dtype_to_np_dtype(x_type))
    probs[:3] = 0, 1, 0.5
    assert_same_as_reference(random_model("Bernoulli", attrs, x=(x_type, ["n"])), {"x": probs}, {"x": probs[:7]})


def test_a_fractional_seed_is_truncated_and_nan_means_none():
    """As the reference reads it: int(seed); NaN draws afresh."""
    assert_same_as_reference(random_model("RandomNormal", {"shape": [4], "seed": 2.75}), {})
    run = runner(random_model("RandomUniform", {"shape": [64], "seed": float("nan")}))
    assert not np.array_equal(run()[0], run()[0])


def test_two_nodes_with_one_seed_draw_the_same_numbers():
    """Each call starts RandomState(seed) afresh, as in the reference."""
    model = random_model("RandomUniform", {"shape": [50], "seed": 4.0}, count=2)
    first, second = runner(model)()
    np.testing.assert_array_equal(first, second)
    assert_same_as_reference(model, {})


@pytest.mark.parametrize("op, attrs, x", [("RandomUniform", {"shape": [40, 5]}, None),
                                          ("RandomNormal", {"shape": [40, 5]}, None),
                                          ("RandomUniformLike", {}, (F32, [40, 5])),
                                          ("Bernoulli", {}, (F32, [40, 5])),
                                          ("Multinomial", {"sample_size": 5}, (F32, [40, 3]))])
def test_unseeded_ops_draw_afresh_each_run(op, attrs, x):
    run = runner(random_model(op, attrs, x=x))
    feeds = {} if x is None else {"x": np.full(x[1], 0.5 if op == "Bernoulli" else 0.0, np.float32)}
    assert not np.array_equal(run(feeds)[0], run(feeds)[0])


def test_import_context_folds_pure_calls_on_constants_but_never_impure_ones():
    """ImportContext.emit folds small constant calls with the kernels; a
    random draw folded there would be one fixed draw for every run."""
    bb = BlockBuilder()
    ctx = ImportContext(bb, {"": 22})
    with bb.function("main", []):
        shape = ShapeExpr((3, 4))
        pure = ctx.emit(make_call("add", Constant(np.ones(3, np.float32)), Constant(np.ones(3, np.float32))))
        impure = ctx.emit(make_call("random_uniform", shape, seed=0))
        bb.emit_func_output(ctx.expr(impure))
    np.testing.assert_array_equal(pure.const, np.full(3, 2, np.float32))
    assert impure.const is None and isinstance(impure.expr, Var)


def test_unseeded_twins_are_not_merged_at_o2():
    """Two identical unseeded RandomUniform nodes on a constant shape: CSE must
    not merge them, nor FoldConstant turn either into one fixed draw."""
    model = random_model("RandomUniform", {"shape": [8, 8]}, count=2)
    mod = relaxpack.from_onnx(model)
    assert mod.script().count("R.random_uniform(") == 2
    run = runner(model, opt_level=2)
    (a, b), (c, _) = run(), run()
    assert not np.array_equal(a, b) and not np.array_equal(a, c)


def test_seeded_draws_stay_calls_at_o2():
    """Even a seeded draw (the same every run) is a call, not a folded constant:
    purity, not seeding, decides."""
    model = random_model("RandomNormal", {"shape": [4, 4], "seed": 1.0}, count=2)
    optimized = optimize_pipeline()(relaxpack.from_onnx(model))
    assert optimized.script().count("R.random_normal(") == 2


def test_large_fixed_seed_samples_have_the_right_moments():
    """Deterministic (fixed seeds); bounds are many standard errors wide."""
    uniform, = runner(random_model("RandomUniform", {"shape": [200_000], "low": -1.0, "high": 3.0,
                                                     "dtype": F64, "seed": 1.0}))()
    assert uniform.min() >= -1 and uniform.max() < 3
    assert abs(uniform.mean() - 1.0) < 0.01 and abs(uniform.var() - 16 / 12) < 0.01
    normal, = runner(random_model("RandomNormal", {"shape": [200_000], "mean": 2.0, "scale": 0.5, "seed": 2.0}))()
    assert normal.dtype == np.float32
    assert abs(normal.mean() - 2.0) < 0.005 and abs(normal.std() - 0.5) < 0.005
    probs = np.repeat(np.array([0.0, 0.1, 0.5, 0.9, 1.0], np.float32), 40_000)
    drawn, = runner(random_model("Bernoulli", {"seed": 3.0}, x=(F32, [len(probs)])))({"x": probs})
    means = drawn.reshape(5, -1).mean(axis=1)
    assert means[0] == 0 and means[4] == 1
    np.testing.assert_allclose(means[1:4], [0.1, 0.5, 0.9], atol=0.01)


def multinomial_run(logits, sample_size, dtype=None, seed=5.0):
    attrs = {"sample_size": sample_size, "seed": seed, **({} if dtype is None else {"dtype": dtype})}
    return runner(random_model("Multinomial", attrs, x=(F32, ["b", "c"])))({"x": logits})[0]


def test_multinomial_counts_follow_the_softmax_of_the_logits():
    probs = np.array([[0.1, 0.2, 0.7, 0.0], [0.25, 0.25, 0.25, 0.25], [0.0, 0.0, 1.0, 0.0]])
    with np.errstate(divide="ignore"):
        logits = (np.log(probs) + 3.0).astype(np.float32)      # unnormalized: shifted log-probabilities
    drawn = multinomial_run(logits, 100_000)
    assert drawn.shape == (3, 100_000) and drawn.dtype == np.int32
    counts = np.stack([np.bincount(row, minlength=4) for row in drawn]) / 100_000
    assert counts[0, 3] == 0 and counts[2, 2] == 1
    np.testing.assert_allclose(counts, probs, atol=0.005)


def test_multinomial_dtype_sizes_and_seeding():
    logits = np.random.default_rng(0).standard_normal((5, 7)).astype(np.float32)
    drawn = multinomial_run(logits, 3, TensorProto.INT64)
    assert drawn.shape == (5, 3) and drawn.dtype == np.int64 and ((0 <= drawn) & (drawn < 7)).all()
    np.testing.assert_array_equal(drawn, multinomial_run(logits, 3, TensorProto.INT64))
    assert multinomial_run(logits[:0], 3).shape == (0, 3)
    # the documented draw: u = RandomState(seed).random_sample((batch, sample_size)) through the cumulative softmax
    u = np.random.RandomState(9).random_sample((5, 40))
    weights = np.exp(logits.astype(np.float64) - logits.max(axis=1, keepdims=True))
    cdf = np.cumsum(weights, axis=1)
    want = np.stack([np.searchsorted(cdf[b], u[b] * cdf[b, -1], side="right") for b in range(5)])
    np.testing.assert_array_equal(multinomial_run(logits, 40, seed=9.0), want)


def test_invalid_random_inputs_and_attributes_fail_clearly():
    with pytest.raises(RelaxpackError, match="seed"):
        relaxpack.from_onnx(random_model("RandomUniform", {"shape": [2], "seed": -1.0}))
    with pytest.raises(UnsupportedOpError, match="int32"):
        relaxpack.from_onnx(random_model("RandomNormal", {"shape": [2], "dtype": TensorProto.INT32}))
    with pytest.raises(UnsupportedOpError, match="int32 or int64"):
        relaxpack.from_onnx(random_model("Multinomial", {"dtype": F32}, x=(F32, [2, 3])))
    with pytest.raises(ExecutionError, match="probabilities must be in"):
        runner(random_model("Bernoulli", {}, x=(F32, [2])))({"x": np.array([0.5, 1.5], np.float32)})
    with pytest.raises(ExecutionError, match="row 1"):
        multinomial_run(np.array([[0, 0], [-np.inf, -np.inf]], np.float32), 2)


def test_random_ops_round_trip_through_text_and_archive(tmp_path):
    """Seeds, dtypes and sizes survive parse(print(m)) and save/load: the
    loaded archive draws what onnx's reference evaluator draws."""
    nodes = [helper.make_node("RandomUniformLike", ["x"], ["u"], seed=1.0, low=0.5),
             helper.make_node("Bernoulli", ["u"], ["b"], dtype=TensorProto.INT64, seed=4.0),
             helper.make_node("RandomNormal", [], ["r"], shape=[2], dtype=F64, seed=6.0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", F32, ["n", 4])],
                              [helper.make_tensor_value_info(o, TensorProto.UNDEFINED, None) for o in "ubr"])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)], ir_version=10)
    mod = relaxpack.from_onnx(model)
    assert_structural_equal(parse(mod.script()), mod)
    build(mod, opt_level=2).save(tmp_path / "m.rpk")
    got = VirtualMachine(load(tmp_path / "m.rpk")).run({"x": np.zeros((3, 4), np.float32)})
    want = ReferenceEvaluator(model).run(None, {"x": np.zeros((3, 4), np.float32)})
    for name, expected in zip("ubr", want):
        assert got[name].dtype == expected.dtype
        np.testing.assert_array_equal(got[name], expected)

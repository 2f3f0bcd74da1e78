"""Hand-built ai.onnx.ml TreeEnsembleRegressor/Classifier models against onnxruntime, for the
readings converters rely on: a leaf listing several weights (skl2onnx's ``decision_leaf``), a
binary model of non-negative weights under LOGISTIC (XGBoost's single-leaf trees), a tied vote
(a random forest of an even number of trees), and linear models whose coefficients do not fit
their input (skl2onnx's SimpleImputer with ``add_indicator``)."""

import numpy as np
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.errors import ShapeError
from relaxpack.runtime import VirtualMachine

from .helpers import reference

X = np.array([[-1.0], [1.0], [-2.0], [0.5], [0.0]], np.float32)
SPLIT = dict(nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0], nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
             nodes_values=[0.0, 0.0, 0.0], nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0])


def _forest(n_trees: int) -> dict:
    """``n_trees`` copies of one split on x0 (node 1: x0 <= 0, node 2 otherwise)."""
    return {"nodes_treeids": [t for t in range(n_trees) for _ in range(3)],
            **{k: v * n_trees for k, v in SPLIT.items()}}


def _model(op: str, attrs: dict, outputs: list) -> "helper.ModelProto":
    node = helper.make_node(op, ["X"], [o.name for o in outputs], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 1])], outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 3)],
                             ir_version=9)


def regressor(weights: list[tuple], n_targets: int, aggregate: str = "SUM", n_trees: int = 1):
    """``weights``: (tree, node, target, weight) in the order the attributes list them."""
    tree, node, target, weight = zip(*weights)
    attrs = dict(_forest(n_trees), n_targets=n_targets, aggregate_function=aggregate, target_treeids=list(tree),
                 target_nodeids=list(node), target_ids=list(target), target_weights=list(weight))
    return _model("TreeEnsembleRegressor", attrs, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])


def classifier(weights: list[tuple], n_classes: int, post_transform: str = "NONE", n_trees: int = 1):
    tree, node, cls, weight = zip(*weights)
    attrs = dict(_forest(n_trees), classlabels_int64s=list(range(n_classes)), post_transform=post_transform,
                 class_treeids=list(tree), class_nodeids=list(node), class_ids=list(cls), class_weights=list(weight))
    return _model("TreeEnsembleClassifier", attrs, [helper.make_tensor_value_info("label", TensorProto.INT64, None),
                                                     helper.make_tensor_value_info("probabilities", TensorProto.FLOAT,
                                                                                   None)])


def check_against_onnxruntime(model, exact_scores: bool = False):
    """Every batch of X (one row: the one-row finishes; all of them: the arrays') at -O0 and -O2."""
    for level in (0, 2):
        vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model), opt_level=level))
        for x in [X[i:i + 1] for i in range(len(X))] + [X]:
            got = list(vm.run({"X": x}).values())
            for value, want in zip(got, reference(model, {"X": x}, "ort")):
                if want.dtype.kind == "i" or exact_scores:
                    np.testing.assert_array_equal(value, want)
                else:
                    np.testing.assert_allclose(value, want, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_one_target_reads_a_leafs_first_weight_only(aggregate):
    """skl2onnx's decision_leaf of a 3-class tree: each leaf's id once per class, all for target 0."""
    weights = [(0, 1, 0, 1.0)] * 3 + [(0, 2, 0, 2.0), (0, 2, 0, -7.0), (0, 2, 0, 5.0)]
    check_against_onnxruntime(regressor(weights, 1, aggregate), exact_scores=True)
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(regressor(weights, 1, aggregate)))).run({"X": X})["Y"]
    assert got.ravel().tolist() == [1.0, 2.0, 1.0, 2.0, 1.0]


@pytest.mark.parametrize("aggregate", ["SUM", "AVERAGE", "MIN", "MAX"])
def test_more_targets_count_every_weight_of_a_leaf(aggregate):
    """Added up, or under MIN and MAX each a vote of its own."""
    weights = [(0, 1, 0, 1.0), (0, 1, 0, 2.0), (0, 1, 1, 5.0), (1, 1, 0, -3.0),
               (0, 2, 1, 10.0), (0, 2, 1, 20.0), (0, 2, 0, 40.0), (1, 2, 1, 0.5), (1, 2, 1, -0.25)]
    check_against_onnxruntime(regressor(weights, 2, aggregate, n_trees=2), exact_scores=True)


@pytest.mark.parametrize("post_transform", ["NONE", "LOGISTIC"])
@pytest.mark.parametrize("weights", [(0.1, 0.7), (0.1, 0.4), (-0.1, 0.7)], ids=["positive", "low", "mixed"])
def test_a_binary_model_of_one_score(weights, post_transform):
    """Weights for class 0 only (XGBoost's binary:logistic): under LOGISTIC the scores are
    (logistic(-s), logistic(s)) whatever the weights' signs."""
    model = classifier([(0, 1, 0, weights[0]), (0, 2, 0, weights[1])], 2, post_transform)
    check_against_onnxruntime(model)


def test_a_tied_binary_vote_is_a_tie():
    """Ten trees of 0.1 for class 0 where five vote: float64 sums of the float32 weights say
    0.5000000075 > 0.5, the float32 scores (onnxruntime's, the output's) 0.5, not above it."""
    weights = [(t, 1, 0, 0.1) for t in range(5)] + [(t, 2, 0, 0.2) for t in range(5)]
    model = classifier(weights, 2, n_trees=10)
    check_against_onnxruntime(model)
    labels = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model))).run({"X": X})["label"]
    assert labels.tolist() == [0, 1, 0, 1, 0]


def test_a_tie_between_classes_goes_to_the_first():
    """Class 1's five 0.1s sum to 0.5000000075 in float64, class 0's two 0.25s to 0.5: a tie in
    float32, which the first class wins, at one row (Python floats) and in batches."""
    weights = [(t, 1, 1, 0.1) for t in range(5)] + [(t, 1, 0, 0.25) for t in range(5, 7)] + \
        [(t, 2, 2, 1.0) for t in range(7)]
    model = classifier(weights, 3, n_trees=7)
    check_against_onnxruntime(model)
    labels = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model))).run({"X": X})["label"]
    assert labels.tolist() == [0, 2, 0, 2, 0]


def _linear(op: str, width):
    attrs = dict(coefficients=[0.1] * 12, intercepts=[0.0, 0.0, 0.0])
    if op == "LinearClassifier":
        attrs["classlabels_ints"] = [0, 1, 2]
        outputs = [helper.make_tensor_value_info("label", TensorProto.INT64, None),
                   helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]
    else:
        attrs["targets"] = 3
        outputs = [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)]
    node = helper.make_node(op, ["X"], [o.name for o in outputs], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", width])],
                              outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)],
                             ir_version=9)


@pytest.mark.parametrize("op", ["LinearClassifier", "LinearRegressor"])
def test_coefficients_that_do_not_fit_the_input_are_a_shape_error(op):
    """Three rows of 4 coefficients on 2 features: at conversion when the width is known, else
    when the run meets it (naming the node; numpy would reshape 8 features into 2 rows)."""
    with pytest.raises(ShapeError, match="x has 2 features but the coefficients are 3 rows of 4"):
        relaxpack.from_onnx(_linear(op, 2))
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(_linear(op, "f")), opt_level=2))
    assert vm.run({"X": np.ones((2, 4), np.float32)})["Y"].shape == (2, 3)
    for width in (2, 8):
        with pytest.raises(ShapeError, match=f"'{op}:.*x has {width} features but the coefficients are 3 rows"):
            vm.run({"X": np.ones((1, width), np.float32)})

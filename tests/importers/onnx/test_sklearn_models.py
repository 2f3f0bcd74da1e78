"""scikit-learn models converted by skl2onnx give the labels and
probabilities (or predictions) onnxruntime gives: logistic regression,
random forests, gradient boosting, a scaler + PCA + MLP pipeline, and the
other ai.onnx.ml converters skl2onnx emits. Tiny models on random data."""

import warnings

import numpy as np
import pytest

import relaxpack
from relaxpack.runtime import VirtualMachine

from .helpers import reference

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from sklearn.decomposition import PCA  # noqa: E402
from sklearn.ensemble import (  # noqa: E402
    GradientBoostingClassifier, GradientBoostingRegressor, RandomForestClassifier, RandomForestRegressor,
)
from sklearn.gaussian_process import GaussianProcessRegressor  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier, KNeighborsRegressor  # noqa: E402
from sklearn.neural_network import MLPClassifier  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import Binarizer, MaxAbsScaler, Normalizer, StandardScaler  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402

rng = np.random.default_rng(0)
X = rng.standard_normal((80, 5)).astype(np.float32)
Y3 = (X[:, 0] + X[:, 1] > 0).astype(np.int64) + (X[:, 2] > 0.8)          # three classes
Y2 = (X[:, 0] - X[:, 3] > 0).astype(np.int64)                            # two classes
TARGET = X @ rng.standard_normal(5).astype(np.float32) + 0.1 * rng.standard_normal(80).astype(np.float32)


def convert(model, zipmap=False):
    from skl2onnx import to_onnx
    from sklearn.base import is_classifier    # SVC without probability=True has no predict_proba but a ZipMap
    options = {id(model): {"zipmap": False}} if zipmap is False and is_classifier(model) else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_onnx(model, X[:1], options=options, target_opset={"": 17, "ai.onnx.ml": 3})


def check_sklearn(model, x=X[:40], rtol=1e-5, atol=1e-6):
    onx = convert(model)
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onx)))
    got = vm.run({"X": x})
    want = reference(onx, {"X": x}, "ort")
    for out, expected in zip(onx.graph.output, want):
        value = got[out.name]
        assert value.dtype == expected.dtype and value.shape == expected.shape, out.name
        if expected.dtype.kind in "iuO":
            np.testing.assert_array_equal(value, expected, err_msg=out.name)
        else:
            np.testing.assert_allclose(value, expected, rtol=rtol, atol=atol, err_msg=out.name)
    return got


@pytest.mark.parametrize("y", [Y2, Y3], ids=["binary", "three_classes"])
def test_logistic_regression(y):
    check_sklearn(LogisticRegression().fit(X, y))


@pytest.mark.parametrize("y", [Y2, Y3], ids=["binary", "three_classes"])
def test_random_forest_classifier(y):
    got = check_sklearn(RandomForestClassifier(n_estimators=7, max_depth=5, random_state=0).fit(X, y))
    assert len(np.unique(got["label"])) > 1      # the forest separates the classes it learned


@pytest.mark.parametrize("y", [Y2, Y3], ids=["binary", "three_classes"])
def test_gradient_boosting_classifier(y):
    check_sklearn(GradientBoostingClassifier(n_estimators=6, max_depth=3, random_state=0).fit(X, y))


def test_decision_leaf_of_a_three_class_tree():
    """skl2onnx's ``decision_leaf`` writes each leaf's id once per class: the leaf scikit-learn's
    apply() finds, as onnxruntime reads it (not the sum of the copies)."""
    from skl2onnx import to_onnx
    tree = DecisionTreeClassifier(max_depth=4, random_state=0).fit(X, Y3)
    onx = to_onnx(tree, X[:1], options={id(tree): {"zipmap": False, "decision_leaf": True}},
                  target_opset={"": 17, "ai.onnx.ml": 3})
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onx))).run({"X": X})
    want = reference(onx, {"X": X}, "ort")
    np.testing.assert_array_equal(got[onx.graph.output[2].name], want[2])
    np.testing.assert_array_equal(got[onx.graph.output[2].name].ravel(), tree.apply(X))


def test_a_tied_forest_vote_gives_the_first_class():
    """Ten trees, a 5/5 vote: probabilities (0.5, 0.5), label 0 for scikit-learn and onnxruntime."""
    from skl2onnx import to_onnx
    x = np.random.default_rng(0).standard_normal((200, 6)).astype(np.float32)
    forest = RandomForestClassifier(n_estimators=10, max_depth=6, random_state=0).fit(x, x[:, 0] + 0.3 * x[:, 3] > 0)
    test = np.random.default_rng(1).standard_normal((50, 6)).astype(np.float32)
    assert (forest.predict_proba(test)[:, 0] == 0.5).any()        # the case at hand: some vote is tied
    onx = to_onnx(forest, x[:1], options={id(forest): {"zipmap": False}}, target_opset={"": 17, "ai.onnx.ml": 3})
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onx))).run({"X": test})["label"]
    np.testing.assert_array_equal(got, reference(onx, {"X": test}, "ort")[0])
    np.testing.assert_array_equal(got, forest.predict(test))


def test_string_class_labels():
    labels = np.array(["cat", "dog", "eel"], dtype=object)[Y3]
    check_sklearn(DecisionTreeClassifier(max_depth=4, random_state=0).fit(X, labels))
    check_sklearn(LogisticRegression().fit(X, labels))


def test_scaler_pca_mlp_pipeline():
    pipe = make_pipeline(StandardScaler(), PCA(3, random_state=0),
                         MLPClassifier((8,), max_iter=200, random_state=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # the tiny MLP does not converge in 200 steps
        pipe.fit(X, Y3)
    check_sklearn(pipe)


@pytest.mark.parametrize("model", [
    RandomForestRegressor(n_estimators=5, max_depth=4, random_state=0),
    GradientBoostingRegressor(n_estimators=5, max_depth=3, random_state=0),
    LinearRegression(),
], ids=["random_forest", "gradient_boosting", "linear"])
def test_regressors(model):
    check_sklearn(model.fit(X, TARGET), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("model", [Normalizer("l1"), Normalizer("l2"), Normalizer("max"), MaxAbsScaler(),
                                   Binarizer(threshold=0.3)], ids=["l1", "l2", "max", "maxabs", "binarizer"])
def test_preprocessing(model):
    check_sklearn(model.fit(X))


def test_a_symbolic_batch_runs_at_several_sizes():
    onx = convert(RandomForestClassifier(n_estimators=3, max_depth=3, random_state=0).fit(X, Y3))
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onx)))
    for n in (1, 7, 80):
        got = vm.run({"X": X[:n]})
        want = reference(onx, {"X": X[:n]}, "ort")
        np.testing.assert_array_equal(got["label"], want[0])
        np.testing.assert_allclose(got["probabilities"], want[1], rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("categories", [np.array([[1], [3], [7], [3]], np.int64),
                                        np.array([["a"], ["b"], ["zz"], ["a"]], object)], ids=["ints", "strings"])
def test_one_hot_encoder(categories):
    from onnx import TensorProto, helper
    cats = {"cats_int64s": [1, 3, 5]} if categories.dtype != object else {"cats_strings": ["a", "zz"]}
    node = helper.make_node("OneHotEncoder", ["X"], ["Y"], domain="ai.onnx.ml", zeros=1, **cats)
    elem = TensorProto.INT64 if categories.dtype != object else TensorProto.STRING
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", elem, ["n", 1])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    onx = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)],
                            ir_version=10)
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onx))).run({"X": categories})["Y"]
    want = reference(onx, {"X": categories}, "ort")[0]
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


def _one_hot_model(zeros: int, strings: bool):
    from onnx import TensorProto, helper
    cats = {"cats_strings": ["a", "zz"]} if strings else {"cats_int64s": [1, 3, 5]}
    node = helper.make_node("OneHotEncoder", ["X"], ["Y"], domain="ai.onnx.ml", zeros=zeros, name="/OneHot", **cats)
    elem = TensorProto.STRING if strings else TensorProto.INT64
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", elem, ["n", 1])],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)],
                             ir_version=10)


@pytest.mark.parametrize("known, unknown, named", [
    (np.array([[1], [3], [5], [3]], np.int64), np.array([[3], [7]], np.int64), "7"),
    (np.array([["a"], ["zz"], ["a"]], object), np.array([["b"]], object), "'b'")], ids=["ints", "strings"])
def test_one_hot_encoder_that_fails_on_an_unknown_category(known, unknown, named):
    """zeros=0 (scikit-learn's default handle_unknown="error"): onnxruntime runs it and fails
    only on an element that is no category; relaxpack refused the model. Now the run matches
    onnxruntime and fails there too, in one line naming the node and the element."""
    from relaxpack.errors import ExecutionError
    onx = _one_hot_model(0, known.dtype == object)
    for level in (0, 2):
        vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onx), opt_level=level))
        np.testing.assert_array_equal(vm.run({"X": known})["Y"], reference(onx, {"X": known}, "ort")[0])
        with pytest.raises(ExecutionError, match=rf"^OneHotEncoder node '/OneHot': {named} is not one "
                                                 rf"of its categories \(zeros=0 makes that an error\)$"):
            vm.run({"X": unknown})
    with pytest.raises(Exception, match="Unknown Category"):
        reference(onx, {"X": unknown}, "ort")


def test_column_transformer_with_default_one_hot_encoders():
    """scikit-learn's usual tabular pipeline: numbers scaled, string and int columns one-hot
    encoded with the default handle_unknown="error" (zeros=0), then a classifier."""
    from skl2onnx.common.data_types import FloatTensorType, Int64TensorType, StringTensorType
    from sklearn.compose import ColumnTransformer
    from sklearn.preprocessing import OneHotEncoder
    words = np.array(["red", "green", "blue"], object)
    columns = np.empty((80, 3), object)
    columns[:, 0], columns[:, 1], columns[:, 2] = X[:, 0], words[rng.integers(0, 3, 80)], rng.integers(0, 4, 80)
    transform = ColumnTransformer([("num", StandardScaler(), [0]), ("word", OneHotEncoder(), [1]),
                                   ("int", OneHotEncoder(), [2])])
    pipe = make_pipeline(transform, LogisticRegression()).fit(columns, Y3)
    from skl2onnx import convert_sklearn
    types = [("num", FloatTensorType([None, 1])), ("word", StringTensorType([None, 1])),
             ("int", Int64TensorType([None, 1]))]
    # ColumnTransformer's columns by position, one ONNX input each
    transform.transformers_ = [(n, t, [i]) for i, (n, t, _) in enumerate(transform.transformers_)]
    onx = convert_sklearn(pipe, initial_types=types, options={id(pipe.steps[-1][1]): {"zipmap": False}},
                          target_opset={"": 17, "ai.onnx.ml": 3})
    assert any(n.op_type == "OneHotEncoder" and any(a.name == "zeros" and a.i == 0 for a in n.attribute)
               for n in onx.graph.node)
    feeds = {"num": X[:9, :1].copy(), "word": words[rng.integers(0, 3, (9, 1))],
             "int": rng.integers(0, 4, (9, 1)).astype(np.int64)}
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onx))).run(feeds)
    want = reference(onx, feeds, "ort")
    np.testing.assert_array_equal(got["label"], want[0])
    np.testing.assert_allclose(got["probabilities"], want[1], rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- support vector machines


def _svm(model, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")       # SVC(probability=True) is deprecated in recent scikit-learn
        return model.fit(X, y)


@pytest.mark.parametrize("kernel", ["linear", "poly", "rbf", "sigmoid"])
@pytest.mark.parametrize("y", [Y2, Y3], ids=["binary", "three_classes"])
def test_svc(kernel, y):
    from sklearn.svm import SVC
    check_sklearn(_svm(SVC(kernel=kernel, gamma=0.3, coef0=0.5, degree=3), y), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("y", [Y2, Y3], ids=["binary", "three_classes"])
def test_svc_probabilities(y):
    from sklearn.svm import SVC
    got = check_sklearn(_svm(SVC(probability=True, random_state=0), y), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got["probabilities"].sum(axis=1), 1.0, rtol=1e-5)


def test_nusvc_with_string_labels():
    from sklearn.svm import NuSVC
    labels = np.array(["cat", "dog", "eel"], dtype=object)[Y3]
    check_sklearn(_svm(NuSVC(nu=0.3), labels), rtol=1e-4, atol=1e-5)
    check_sklearn(_svm(NuSVC(nu=0.3, probability=True, random_state=0), labels), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kernel", ["linear", "rbf", "poly"])
def test_svr(kernel):
    from sklearn.svm import SVR
    check_sklearn(SVR(kernel=kernel, degree=2).fit(X, TARGET), rtol=1e-4, atol=1e-4)


def test_one_class_svm():
    from sklearn.svm import OneClassSVM
    check_sklearn(OneClassSVM(nu=0.2, gamma=0.3).fit(X), x=X * 1.5, rtol=1e-4, atol=1e-4)


def _svm_node_model(**attrs):
    from onnx import TensorProto, helper
    node = helper.make_node("SVMClassifier", ["X"], ["label", "scores"], domain="ai.onnx.ml", **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 5])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, None),
                               helper.make_tensor_value_info("scores", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)],
                             ir_version=10)


def _check_node_model(onx):
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onx))).run({"X": X[:40]})
    label, scores = reference(onx, {"X": X[:40]}, "ort")
    np.testing.assert_array_equal(got["label"], label)
    np.testing.assert_allclose(got["scores"], scores, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("post_transform", ["NONE", "LOGISTIC", "SOFTMAX", "SOFTMAX_ZERO"])
@pytest.mark.parametrize("y", [Y2, Y3], ids=["binary", "three_classes"])
def test_svm_classifier_post_transforms(y, post_transform):
    """The transforms skl2onnx never emits, on an SVC's own attributes."""
    onx = convert(_svm(__import__("sklearn.svm").svm.SVC(gamma=0.3), y))
    attrs = {a.name: onnx_attr(a) for a in onx.graph.node[0].attribute}
    _check_node_model(_svm_node_model(**{**attrs, "post_transform": post_transform}))


@pytest.mark.parametrize("n_classes", [2, 3])
@pytest.mark.parametrize("sign", [1, -1], ids=["positive_weights", "mixed_weights"])
def test_svm_classifier_liblinear_mode(n_classes, sign):
    """No support vectors: one weight row per class, the label rules of onnxruntime's binary case."""
    weights = np.abs(rng.standard_normal((n_classes, 5))) * 0.3
    weights[:, ::2] *= sign
    _check_node_model(_svm_node_model(classlabels_ints=list(range(n_classes)), coefficients=weights.ravel().tolist(),
                                      rho=[0.1], kernel_type="LINEAR", kernel_params=[0.0, 0.0, 0.0]))


def onnx_attr(attribute):
    from onnx import helper
    value = helper.get_attribute_value(attribute)
    return value.decode() if isinstance(value, bytes) else value


def _kernel_names(exe) -> list[str]:
    used = {ins.func for fn in exe.functions.values() for ins in fn.instructions if hasattr(ins, "func")}
    return sorted(exe.func_table[i].name for i in used if exe.func_table[i].kind == "kernel")


@pytest.mark.parametrize("shift", [0, 1], ids=["labels_0_to_n", "labels_1_to_n"])
@pytest.mark.parametrize("model", [LogisticRegression(), RandomForestClassifier(n_estimators=4, random_state=0),
                                   GradientBoostingClassifier(n_estimators=3, random_state=0)],
                         ids=["linear", "forest", "boosting"])
@pytest.mark.parametrize("y", [Y2, Y3], ids=["binary", "three_classes"])
def test_labels_0_to_n_are_the_class_index(model, y, shift):
    """Labels 0, 1, ... need no take of the label constant (the class index is the label);
    other labels keep it. Both give onnxruntime's labels."""
    fitted = model.fit(X, y + shift)
    exe = relaxpack.build(relaxpack.from_onnx(convert(fitted)))
    assert ("take" in _kernel_names(exe)) == bool(shift)
    check_sklearn(fitted)


def test_more_scores_than_labels_keep_the_take():
    """A LinearClassifier with more coefficient rows than labels may write an index beyond the
    labels: the take stays (and fails there as onnxruntime does, not with a made-up label)."""
    from onnx import TensorProto, helper
    node = helper.make_node("LinearClassifier", ["X"], ["label", "scores"], domain="ai.onnx.ml",
                            coefficients=[0.5] * 15, intercepts=[0.0, 1.0, 2.0], classlabels_ints=[0])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, ["n", 5])],
                              [helper.make_tensor_value_info("label", TensorProto.INT64, None),
                               helper.make_tensor_value_info("scores", TensorProto.FLOAT, None)])
    onx = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("ai.onnx.ml", 1)],
                            ir_version=10)
    assert "take" in _kernel_names(relaxpack.build(relaxpack.from_onnx(onx)))


@pytest.mark.parametrize("model", [KNeighborsClassifier(3), KNeighborsRegressor(4, weights="distance"),
                                   GaussianProcessRegressor()], ids=["knn_classifier", "knn_regressor", "gpr"])
def test_cdist_option(model):
    """skl2onnx's optim="cdist" computes the distances with com.microsoft CDist."""
    from skl2onnx import to_onnx
    model.fit(X, Y3 if isinstance(model, KNeighborsClassifier) else TARGET)
    options = {"optim": "cdist", **({"zipmap": False} if isinstance(model, KNeighborsClassifier) else {})}
    onx = to_onnx(model, X[:1], options={id(model): options}, target_opset={"": 17, "ai.onnx.ml": 3})
    assert any(node.op_type == "CDist" for node in onx.graph.node)
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onx))).run({"X": X[:9]})
    for out, want in zip(onx.graph.output, reference(onx, {"X": X[:9]}, "ort")):
        np.testing.assert_allclose(got[out.name], want, rtol=1e-5, atol=1e-5, err_msg=out.name)


@pytest.mark.parametrize("alternate_sign", [True, False])
def test_feature_hasher_of_strings(alternate_sign):
    """FeatureHasher hashes its tokens with com.microsoft MurmurHash3: scikit-learn's counts."""
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import StringTensorType
    from sklearn.feature_extraction import FeatureHasher
    words = np.array([["cat", "dog"], ["éèà", "x"], ["", "a longer token"], ["dog", "dog"]], dtype=object)
    hasher = FeatureHasher(n_features=16, input_type="string", alternate_sign=alternate_sign).fit(words)
    onx = convert_sklearn(hasher, initial_types=[("X", StringTensorType([None, 2]))],
                          target_opset={"": 17, "ai.onnx.ml": 3})
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onx))).run({"X": words})
    values = got[onx.graph.output[0].name]
    np.testing.assert_array_equal(values, reference(onx, {"X": words}, "ort")[0])
    np.testing.assert_array_equal(values, hasher.transform(words).toarray())

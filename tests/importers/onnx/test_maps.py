"""Maps (ONNX map(K, V); Python dicts): skl2onnx classifiers at their default options end in a
ZipMap (a list of {label: probability} dicts), a DictVectorizer pipeline takes a dict, CastMap
densifies one. Each converts, runs from a saved archive and gives onnxruntime's outputs exactly in
structure (as many maps, the same keys in the same order, keys and values of the same Python
types) and within float tolerance in value; the signature names the kinds as onnxruntime does."""

from __future__ import annotations

import warnings

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.errors import InputError, ShapeError
from relaxpack.runtime import InferenceSession, VirtualMachine, load

sklearn = pytest.importorskip("sklearn")
skl2onnx = pytest.importorskip("skl2onnx")

from sklearn.ensemble import RandomForestClassifier  # noqa: E402
from sklearn.feature_extraction import DictVectorizer  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.svm import SVC  # noqa: E402

ML = "ai.onnx.ml"
rng = np.random.default_rng(3)
X = rng.standard_normal((60, 4)).astype(np.float32)
Y3 = (X[:, 0] > 0).astype(np.int64) + (X[:, 1] > 0.5)
Y2 = (X[:, 2] > 0).astype(np.int64)


def assert_same_maps(got, want, rtol=1e-5, atol=1e-6):
    """``got`` has ``want``'s structure exactly and its values within tolerance."""
    assert isinstance(got, type(want)), (type(got), type(want))
    gots, wants = ([got], [want]) if isinstance(want, dict) else (got, want)
    assert len(gots) == len(wants)
    for g, w in zip(gots, wants):
        assert isinstance(g, dict)
        assert list(g) == list(w), "the same keys in the same order"
        assert [type(k) for k in g] == [type(k) for k in w]
        assert [type(v) for v in g.values()] == [type(v) for v in w.values()]
        np.testing.assert_allclose(list(g.values()), list(w.values()), rtol=rtol, atol=atol)


def _ort(onx):
    return ort.InferenceSession(onx.SerializeToString(), providers=["CPUExecutionProvider"])


def _archive(onx, tmp_path, level=2):
    path = tmp_path / f"model-O{level}.rpk"
    relaxpack.build(relaxpack.from_onnx(onx), opt_level=level).save(path)
    return path


def check_against_ort(onx, feeds_list, tmp_path):
    """Each output of the saved archive (at -O0 and -O2) against onnxruntime's at each feeds."""
    session = _ort(onx)
    for level in (0, 2):
        ours = InferenceSession(str(_archive(onx, tmp_path, level)))
        assert [(o.name, o.type) for o in ours.get_outputs()] == [(o.name, o.type) for o in session.get_outputs()]
        assert [(i.name, i.type) for i in ours.get_inputs()] == [(i.name, i.type) for i in session.get_inputs()]
        for feeds in feeds_list:
            for got, want in zip(ours.run(None, feeds), session.run(None, feeds)):
                if isinstance(want, (list, dict)):
                    assert_same_maps(got, want)
                else:
                    np.testing.assert_array_equal(got, want)


def convert(model, **kwargs):
    from skl2onnx import to_onnx
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return to_onnx(model, X[:1], target_opset={"": 17, ML: 3}, **kwargs)


# ---------------------------------------------------------------- skl2onnx at its default options


@pytest.mark.filterwarnings("ignore:The `probability` parameter was deprecated:FutureWarning")
@pytest.mark.parametrize("model, y", [
    (LogisticRegression(), Y2), (LogisticRegression(), Y3),
    (LogisticRegression(), np.array(["cat", "dog", "eel"], dtype=object)[Y3]),
    (RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0), Y3),
    (SVC(probability=True, random_state=0), Y3),
], ids=["logreg_binary", "logreg_three", "logreg_string_labels", "random_forest", "svc_probability"])
def test_classifier_with_its_default_zipmap(model, y, tmp_path):
    onx = convert(model.fit(X, y))
    assert "ZipMap" in [n.op_type for n in onx.graph.node]
    check_against_ort(onx, [{"X": X[:7]}, {"X": X[7:8]}, {"X": X[:0]}], tmp_path)


def test_zipmap_signature_is_onnxruntimes(tmp_path):
    onx = convert(LogisticRegression().fit(X, Y3))
    ours = InferenceSession(str(_archive(onx, tmp_path)))
    probability = ours.get_outputs()[1]
    assert (probability.name, probability.type, probability.shape) == \
        ("output_probability", "seq(map(int64,tensor(float)))", [])
    result = load(_archive(onx, tmp_path)).function("main").output_info()[1]
    assert (result.kind, result.key_dtype, result.dtype) == ("sequence_map", "int64", "float32")


def dict_pipeline():
    from skl2onnx import convert_sklearn
    from skl2onnx.common.data_types import DictionaryType, FloatTensorType, StringTensorType
    rows = [{"height": float(a), "width": float(b), "depth": float(c)} for a, b, c in X[:, :3]]
    for row in rows[::4]:
        del row["width"]
    pipe = make_pipeline(DictVectorizer(sparse=False), LogisticRegression()).fit(rows, Y3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onx = convert_sklearn(pipe, initial_types=[("input", DictionaryType(StringTensorType([1]),
                                                                             FloatTensorType([1])))],
                              target_opset={"": 17, ML: 3})
    return onx, rows


def test_dict_vectorizer_pipeline_takes_a_dict(tmp_path):
    onx, rows = dict_pipeline()
    assert [n.op_type for n in onx.graph.node][0] == "DictVectorizer"
    feeds = [{"input": row} for row in rows[:6]] + [{"input": {"depth": 1.5, "unseen": 9.0}}]
    check_against_ort(onx, feeds, tmp_path)


def test_map_inputs_are_checked_naming_the_input(tmp_path):
    onx, _ = dict_pipeline()
    vm = VirtualMachine(load(_archive(onx, tmp_path)))
    with pytest.raises(InputError, match=r"^input 'input': expected a map \(a dict\), got list$"):
        vm.run({"input": [1.0, 2.0]})
    with pytest.raises(InputError, match=r"^input 'input': key 3 is a int, expected str \(string keys\)$"):
        vm.run({"input": {3: 1.0}})
    with pytest.raises(InputError, match=r"^input 'input' at key 'height': value 'tall' is not a number"):
        vm.run({"input": {"height": "tall"}})


def test_map_input_entries_checked_once_and_positional_maps_in_the_function(tmp_path):
    """vm.run makes a map canonical (a CheckedMap) and the function's check_map skips it; a plain
    dict passed by position is still checked inside; numbers take a fast path to the same values."""
    from relaxpack.runtime.maps import CheckedMap, as_map_input, check_map
    onx, rows = dict_pipeline()
    vm = VirtualMachine(load(_archive(onx, tmp_path)))
    values = {"a": 1.5, "b": 2, "c": np.float64(0.1), "d": np.int64(3), "e": np.float32(2.5), "f": True,
              "g": np.array(4.0)}
    made = as_map_input(values, "m", "map", "string", "float32")
    assert type(made) is CheckedMap and all(type(v) is np.float32 for v in made.values())
    assert made == {k: np.float32(v) for k, v in values.items()}
    assert check_map(made, "map", "string", "float32", "x") is made
    with pytest.raises(InputError, match=r"^input 'm' at key 'big': value 10{40} is not a int64"):
        as_map_input({"big": 10**40}, "m", "map", "string", "int64")
    with pytest.raises(InputError, match=r"^input 'input' at key 'height': value 'tall' is not a number"):
        vm["main"]({"height": "tall"})
    want = vm.run({"input": rows[0]})
    got = vm["main"](dict(rows[0]))
    np.testing.assert_array_equal(got[0], want["output_label"])


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int64", "int32", "uint8"])
def test_a_map_of_plain_numbers_converts_in_one_call_to_the_entries_values(dtype):
    """Keys of the key type and plain numbers convert as one array: the scalars (types, values,
    signs of zero) the entry-by-entry conversion gives; a value the array refuses (out of range,
    NaN to an integer) goes entry by entry and fails there, naming its key."""
    from relaxpack.runtime import maps
    kind = np.dtype(dtype).type
    values = [1.5, 2, -0.0, np.float64(0.1), np.int64(3), np.float32(2.5), np.float16(-1.25), 1e-50, 7,
              np.uint8(200)]
    given = {f"k{i}": v for i, v in enumerate(values)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = maps._plain_map(given, str, kind)
        slow = {k: maps._entry(k, v, dtype, kind, "m") for k, v in given.items()}
    assert fast is not None and list(fast) == list(slow)
    for k in given:
        assert type(fast[k]) is type(slow[k]) and fast[k] == slow[k] and np.signbit(fast[k]) == np.signbit(slow[k])
    assert maps._plain_map({1: 2.0}, str, kind) is None and maps._plain_map({"a": True}, str, kind) is None
    assert maps._plain_map({"a": 1.0}, int, kind) is None
    if dtype in ("int64", "int32", "uint8"):
        for bad in (float("nan"), 10**40, -1 if dtype == "uint8" else 10**19):
            with pytest.raises(InputError, match=r"^input 'm' at key 'x'"):
                maps.as_map_input({"a": 1, "x": bad}, "m", "map", "string", dtype)


def test_zipmap_rows_leave_as_they_are_python_scalars():
    """ZipMap's dicts hold Python scalars already (PlainMaps): the output is a list of them, the
    same as converting each dict; another sequence of maps is still converted."""
    from relaxpack.runtime.kernels.ml_maps import zip_map
    from relaxpack.runtime.maps import PlainMaps, as_map_output
    rows = zip_map(np.array([[0.25, 0.75], [1.0, np.float32(0.1)]], np.float32), labels=(3, 7))
    assert type(rows) is PlainMaps
    out = as_map_output(rows, "sequence_map")
    assert type(out) is list and out == [{3: 0.25, 7: 0.75}, {3: 1.0, 7: float(np.float32(0.1))}]
    assert all(type(k) is int and type(v) is float for m in out for k, v in m.items())
    converted = as_map_output(({1: np.float32(0.5)},), "sequence_map")
    assert converted == [{1: 0.5}] and type(converted[0][1]) is float


# ---------------------------------------------------------------- the ops, against onnxruntime and the spec


def _map_model(node, key, value, out_elem):
    graph = helper.make_graph([node], "g", [helper.make_value_info(
        "m", helper.make_map_type_proto(key, helper.make_tensor_type_proto(value, None)))],
        [helper.make_tensor_value_info("y", out_elem, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)],
                             ir_version=9)


CAST_MAP_OUT = {"TO_FLOAT": TensorProto.FLOAT, "TO_INT64": TensorProto.INT64, "TO_STRING": TensorProto.STRING}


@pytest.mark.parametrize("cast_to", sorted(CAST_MAP_OUT))
@pytest.mark.parametrize("map_form", ["DENSE", "SPARSE"])
def test_cast_map_of_floats_as_onnxruntime(cast_to, map_form, tmp_path):
    node = helper.make_node("CastMap", ["m"], ["y"], domain=ML, cast_to=cast_to, map_form=map_form, max_map=6)
    onx = _map_model(node, TensorProto.INT64, TensorProto.FLOAT, CAST_MAP_OUT[cast_to])
    check_against_ort(onx, [{"m": {3: 1.5, 1: -2.25, 0: 0.1}}, {"m": {9: 4.0, 2: 7.75}}, {"m": {5: 3.0}}],
                      tmp_path)


@pytest.mark.parametrize("cast_to, expected", [
    ("TO_FLOAT", np.array([[-20.0, 1.5, 7.0]], np.float32)),
    ("TO_INT64", np.array([[-2, 1, 7]], np.int64)),
    ("TO_STRING", np.array([[" -2e1", "1.5x", "7"]], object)),
])
def test_cast_map_of_strings_parses_as_c_does(cast_to, expected):
    """onnxruntime's Python binding cannot feed a map of strings; its kernel parses with
    std::stof / std::stoll (the numeric prefix), which the expected values spell out."""
    node = helper.make_node("CastMap", ["m"], ["y"], domain=ML, cast_to=cast_to, map_form="DENSE")
    onx = _map_model(node, TensorProto.INT64, TensorProto.STRING, CAST_MAP_OUT[cast_to])
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onx))).run({"m": {4: "1.5x", 1: " -2e1", 8: "7"}})["y"]
    assert got.dtype == expected.dtype and got.tolist() == expected.tolist()


def test_cast_map_of_a_word_that_is_no_number_fails_naming_the_node():
    node = helper.make_node("CastMap", ["m"], ["y"], name="/CastMap", domain=ML, cast_to="TO_FLOAT")
    onx = _map_model(node, TensorProto.INT64, TensorProto.STRING, TensorProto.FLOAT)
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onx)))
    with pytest.raises(ShapeError, match=r"^ONNX node '/CastMap': cast_map: value 'tall' is not a number$"):
        vm.run({"m": {1: "tall"}})


@pytest.mark.parametrize("key, vocabulary, feeds", [
    (TensorProto.STRING, {"string_vocabulary": ["b", "a", "c"]}, [{"a": 1.0, "c": 3.5}, {"zz": 2.0, "b": -1.0}]),
    (TensorProto.INT64, {"int64_vocabulary": [5, 1, 3]}, [{5: 1.0, 3: 3.5}, {7: 2.0, 1: -1.0}]),
])
def test_dict_vectorizer_as_onnxruntime(key, vocabulary, feeds, tmp_path):
    node = helper.make_node("DictVectorizer", ["m"], ["y"], domain=ML, **vocabulary)
    onx = _map_model(node, key, TensorProto.FLOAT, TensorProto.FLOAT)
    check_against_ort(onx, [{"m": f} for f in feeds], tmp_path)


def test_dict_vectorizer_of_strings_leaves_empty_strings():
    node = helper.make_node("DictVectorizer", ["m"], ["y"], domain=ML, int64_vocabulary=[2, 4])
    onx = _map_model(node, TensorProto.INT64, TensorProto.STRING, TensorProto.STRING)
    got = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onx))).run({"m": {4: "x", 9: "y"}})["y"]
    assert got.shape == (1, 2) and got.tolist() == [["", "x"]]


def test_zipmap_of_a_vector_is_one_map_and_of_3d_is_refused():
    node = helper.make_node("ZipMap", ["p"], ["y"], domain=ML, classlabels_strings=["no", "yes"])
    seq = helper.make_sequence_type_proto(helper.make_map_type_proto(
        TensorProto.STRING, helper.make_tensor_type_proto(TensorProto.FLOAT, None)))
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("p", TensorProto.FLOAT, None)],
                              [helper.make_value_info("y", seq)])
    onx = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(ML, 1)],
                            ir_version=9)
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onx)))
    p = np.array([0.25, 0.75], np.float32)
    assert_same_maps(vm.run({"p": p})["y"], _ort(onx).run(None, {"p": p})[0])
    with pytest.raises(ShapeError, match="ZipMap takes a 1-D or 2-D tensor, got shape"):
        vm.run({"p": p.reshape(1, 1, 2)})


# ---------------------------------------------------------------- the text form


@pytest.mark.parametrize("which", ["zipmap", "dict_vectorizer"])
def test_map_models_print_and_parse_back_before_and_after_the_pipeline(which):
    """The imported module (R.Map params, a ZipMap's R.Sequence(R.Map(...)) result) and the module
    after optimization and lowering print, parse back structurally equal and print the same."""
    from relaxpack.ir import parse
    from relaxpack.ir.equality import assert_structural_equal
    from relaxpack.passes import PassContext
    from relaxpack.passes.pipeline import lower_pipeline, optimize_pipeline
    onx = convert(LogisticRegression().fit(X, Y3)) if which == "zipmap" else dict_pipeline()[0]
    before = relaxpack.from_onnx(onx)
    with PassContext(opt_level=2):
        after = lower_pipeline()(optimize_pipeline()(before))
    for mod in (before, after):
        text = mod.script()
        assert ('R.Sequence(R.Map("int64", R.Tensor((), "float32")))' in text if which == "zipmap"
                else 'R.Map("string", R.Tensor((), "float32"))' in text), text
        back = parse(text)
        assert_structural_equal(back, mod)
        assert back.script() == text


def test_a_map_of_sequences_is_refused_in_one_line():
    """onnxruntime's maps hold scalars; a map whose values are sequences fails naming the input."""
    from relaxpack.errors import UnsupportedOpError
    value = helper.make_sequence_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, None))
    graph = helper.make_graph([helper.make_node("Identity", ["m"], ["y"])], "g",
                              [helper.make_value_info("m", helper.make_map_type_proto(TensorProto.STRING, value))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    onx = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    with pytest.raises(UnsupportedOpError) as err:
        relaxpack.from_onnx(onx)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("graph input 'm' is map(string, seq(") and "hold tensors (scalars)" in str(err.value)

"""String tensors and the string ops against onnxruntime: constants,
data movement on strings, StringNormalizer, StringSplit, StringConcat,
RegexFullMatch, TfIdfVectorizer (symbolic dims where the op allows them)."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import relaxpack
from relaxpack.errors import ExecutionError, InputError, RelaxpackError, ShapeError
from relaxpack.runtime import VirtualMachine

from .helpers import check_model


def strings(*items, shape=None):
    a = np.empty(len(items), dtype=object)
    a[:] = list(items)
    return a.reshape(shape or (len(items),))


def model(nodes, inputs, outputs, opset=20, inits=()):
    """``inputs``/``outputs``: {name: (elem_type, shape)}."""
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, t, s) for n, (t, s) in inputs.items()],
                              [helper.make_tensor_value_info(n, t, s) for n, (t, s) in outputs.items()],
                              list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


S, I64 = TensorProto.STRING, TensorProto.INT64


def reference_strings(m):
    """onnx's reference evaluator, its numpy ``str_`` results as object arrays (as ONNX and relaxpack hold them)."""
    return lambda feeds: [a.astype(object) for a in ReferenceEvaluator(m).run(None, feeds)]


def test_strings_move_through_concat_reshape_transpose_and_gather():
    init = helper.make_tensor("c", S, [2], [b"a", "\u00e9".encode()])
    nodes = [helper.make_node("Concat", ["x", "c"], ["t"], axis=0),
             helper.make_node("Concat", ["t", "t"], ["t2"], axis=0),
             helper.make_node("Constant", [], ["sh"], value_ints=[2, -1]),
             helper.make_node("Reshape", ["t2", "sh"], ["t3"]),
             helper.make_node("Transpose", ["t3"], ["y"]),
             helper.make_node("Gather", ["t2", "i"], ["z"]),
             helper.make_node("Equal", ["t2", "c2"], ["e"])]
    c2 = helper.make_tensor("c2", S, [1], [b"a"])
    m = model(nodes, {"x": (S, ["n"]), "i": (I64, [3])},
              {"y": (S, None), "z": (S, None), "e": (TensorProto.BOOL, None)}, inits=[init, c2])
    i = np.array([0, 1, -1], np.int64)
    check_model(m, {"x": strings("q", "rr"), "i": i}, {"x": strings("", "x", "yy", "zzz"), "i": i})


def test_string_normalizer_drops_stopwords_ignoring_case():
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="UPPER", is_case_sensitive=0,
                            stopwords=["monday", "Tuesday"])
    m = model([node], {"x": (S, [1, "c"])}, {"y": (S, None)}, opset=10)
    check_model(m, {"x": strings("Monday", "tuesday", "Wed", "mONDAY", "x", shape=(1, 5))},
                {"x": strings("monday", shape=(1, 1))}, ref=reference_strings(m))   # onnxruntime needs an en_US locale


def test_string_normalizer_without_stopwords_keeps_the_length_symbolic():
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action="LOWER")
    m = model([node], {"x": (S, ["c"])}, {"y": (S, ["c"])}, opset=10)
    mod = check_model(m, {"x": strings("A", "bC")}, {"x": strings("Xy")}, ref=reference_strings(m))
    assert 'R.Tensor(("c",), "string")' in mod.script()


#: letters where Python's str.lower/upper (full case mapping, context) differ from C's towlower/towupper
#: (simple mapping, one character at a time), then Latin-1, Greek and Cyrillic letters
TRICKY = ["Straße", "ΣΊΣΥΦΟΣ", "İstanbul", "ﬁne", "ǅemal", "ᾳ", "ŉ", "ǰ", "ÉCOLE", "ÀÉÎÕÜ", "Ωmega", "hello WORLD",
          "".join(map(chr, range(0xC0, 0x250))), "".join(map(chr, range(0x370, 0x3FF))),
          "".join(map(chr, range(0x400, 0x52F)))]


@pytest.mark.parametrize("locale", ["C.UTF-8", "C.utf8", "C", "POSIX"])
@pytest.mark.parametrize("action", ["LOWER", "UPPER"])
def test_string_normalizer_changes_case_as_onnxruntime_in_its_locale(locale, action):
    """onnxruntime changes case one character at a time with towlower/towupper in the model's
    locale: Unicode's simple mapping in a UTF-8 locale ("ß" stays, "Σ" is never "ς"), only A-Z
    in C. relaxpack used Python's str.lower/upper in every locale (wrong on these letters), and
    refused C.UTF-8, the locale a container without en_US has (onnxruntime's default)."""
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action=action, locale=locale,
                            is_case_sensitive=0, stopwords=["strasse", "ΣΟΣ"])
    m = model([node], {"x": (S, ["c"])}, {"y": (S, None)}, opset=10)
    try:
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as err:   # noqa: BLE001 - onnxruntime's own
        if "Failed to construct locale" not in str(err):
            raise
        pytest.skip(f"this machine has no {locale} locale, so onnxruntime cannot run the model")
    check_model(m, {"x": strings(*TRICKY)}, {"x": strings("σος", "Strasse", "sTRAßE")})


def test_string_normalizer_rejects_a_batch_and_a_locale():
    node = helper.make_node("StringNormalizer", ["x"], ["y"], stopwords=["a"])
    with pytest.raises(ShapeError, match=r"shape \(C,\) or \(1, C\), got \(2, 2\)"):
        relaxpack.from_onnx(model([node], {"x": (S, [2, 2])}, {"y": (S, None)}, opset=10))
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model([node], {"x": (S, ["b", 2])}, {"y": (S, None)},
                                                                  opset=10))))
    with pytest.raises(ShapeError, match=r"shape \(C,\) or \(1, C\), got \(2, 2\)"):
        vm.run({"x": strings("a", "b", "c", "d", shape=(2, 2))})
    node = helper.make_node("StringNormalizer", ["x"], ["y"], locale="tr_TR")
    with pytest.raises(RelaxpackError, match="locale 'tr_TR'"):
        relaxpack.from_onnx(model([node], {"x": (S, [2])}, {"y": (S, None)}, opset=10))


@pytest.mark.parametrize("attrs", [{}, {"delimiter": "-"}, {"delimiter": "-", "maxsplit": 1}, {"delimiter": ""}])
def test_string_split(attrs):
    node = helper.make_node("StringSplit", ["x"], ["y", "z"], **attrs)
    m = model([node], {"x": (S, ["n", 2])}, {"y": (S, None), "z": (I64, None)})
    check_model(m, {"x": strings("a-b-c", " a  b ", "", "--", shape=(2, 2))},
                {"x": strings("x", "y", shape=(1, 2))})


def test_string_split_of_an_empty_tensor():
    node = helper.make_node("StringSplit", ["x"], ["y", "z"], delimiter=",")
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model([node], {"x": (S, ["n"])},
                                                                  {"y": (S, None), "z": (I64, None)}))))
    out = vm.run({"x": strings()})
    assert out["y"].shape == (0, 0) and out["z"].shape == (0,) and out["z"].dtype == np.int64


def test_string_concat_broadcasts():
    node = helper.make_node("StringConcat", ["x", "y"], ["z"])
    m = model([node], {"x": (S, ["n", 1]), "y": (S, [3])}, {"z": (S, None)})
    check_model(m, {"x": strings("a", "\u00df", shape=(2, 1)), "y": strings("", "1", "\u4e2d")})


def test_regex_full_match():
    node = helper.make_node("RegexFullMatch", ["x"], ["y"], pattern=r"[a-z]+@(example|test)\.com")
    m = model([node], {"x": (S, ["n"])}, {"y": (TensorProto.BOOL, None)})
    check_model(m, {"x": strings("me@example.com", "me@example.com.au", "ME@test.com", "a@test.com", "")})


def test_regex_full_match_with_an_invalid_pattern_fails_clearly():
    node = helper.make_node("RegexFullMatch", ["x"], ["y"], pattern="(a")
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model([node], {"x": (S, [1])},
                                                                  {"y": (TensorProto.BOOL, None)}))))
    with pytest.raises(ExecutionError, match=r"invalid pattern '\(a'"):
        vm.run({"x": strings("a")})


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
@pytest.mark.parametrize("weights", [None, [0.5, 1.0, 2.0, 3.0, 4.0, 0.25, 1.5]])
def test_tfidf_vectorizer_on_ints(mode, weights):
    attrs = dict(mode=mode, min_gram_length=1, max_gram_length=2, max_skip_count=2, ngram_counts=[0, 4],
                 ngram_indexes=[0, 1, 2, 3, 4, 5, 6], pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7])
    if weights:
        attrs["weights"] = weights
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)
    m = model([node], {"x": (TensorProto.INT32, ["b", 6])}, {"y": (TensorProto.FLOAT, None)}, opset=9)
    rng = np.random.default_rng(0)
    check_model(m, {"x": rng.integers(2, 9, (3, 6)).astype(np.int32)},
                {"x": rng.integers(2, 9, (1, 6)).astype(np.int32)})


def test_tfidf_vectorizer_on_strings():
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode="TF", min_gram_length=2, max_gram_length=2,
                            max_skip_count=0, ngram_counts=[0, 1], ngram_indexes=[1, 0],
                            pool_strings=["a", "a", "b"])
    m = model([node], {"x": (S, ["c"])}, {"y": (TensorProto.FLOAT, None)}, opset=9)
    check_model(m, {"x": strings("a", "b", "a", "b", "b")})


def test_string_inputs_accept_str_lists_and_bytes_and_reject_other_dtypes():
    node = helper.make_node("StringConcat", ["x", "x"], ["y"])
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(model([node], {"x": (S, ["n"])}, {"y": (S, None)}))))
    for given in (["a", "b"], np.array(["a", "b"]), np.array([b"a", b"b"]), strings(b"a", "b")):
        got = vm.run({"x": given})["y"]
        assert got.dtype == object and got.tolist() == ["aa", "bb"]
    with pytest.raises(InputError, match=r"input 'x': has dtype float32, expected string"):
        vm.run({"x": np.ones(2, np.float32)})
    with pytest.raises(InputError, match=r"input 'x': element 1 is a int, expected str"):
        vm.run({"x": strings("a", 3)})
    with pytest.raises(InputError, match="not valid UTF-8"):
        vm.run({"x": strings(b"\xff")})


def test_a_string_initializer_that_is_not_utf8_is_refused():
    init = helper.make_tensor("c", S, [1], [b"\xff\xfe"])
    m = model([helper.make_node("Identity", ["c"], ["y"])], {}, {"y": (S, None)}, inits=[init])
    with pytest.raises(RelaxpackError, match="cannot read tensor 'c': 'utf-8' codec can't decode"):
        relaxpack.from_onnx(m)


def test_string_ops_check_their_operand_dtypes():
    node = helper.make_node("StringConcat", ["x", "x"], ["y"])
    with pytest.raises(ShapeError, match="must be a string tensor, got float32"):
        relaxpack.from_onnx(model([node], {"x": (TensorProto.FLOAT, [2])}, {"y": (S, None)}))

"""com.microsoft Tokenizer against onnxruntime: the three modes (characters,
separators, token expression), marks, mincharnum, padding, rank 1 and 2,
non-ASCII text, rows without tokens; and the scikit-learn text pipelines
that skl2onnx turns into it."""

import warnings

import numpy as np
import pytest
from onnx import TensorProto, helper

import relaxpack
from relaxpack.errors import RelaxpackError
from relaxpack.runtime import VirtualMachine

from ...runtime.kernel_calls import call_kernel
from .helpers import check_model

S = TensorProto.STRING


def strings(items, shape=None):
    a = np.empty(len(items), dtype=object)
    a[:] = list(items)
    return a.reshape(shape or (len(items),))


def tokenizer_model(rank=2, **attrs):
    attrs = {"mark": 0, "mincharnum": 1, "pad_value": "#", **attrs}
    node = helper.make_node("Tokenizer", ["x"], ["y"], domain="com.microsoft", **attrs)
    shape = ["n", "c"][-rank:]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", S, shape)],
                              [helper.make_tensor_value_info("y", S, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=9)


TEXTS = ["the quick  brown fox", "", "a-b,c;;d ab", "h\u00e9llo w\u00f6rld caf\u00e9", "x", "!!! abab"]

MODES = [
    {"tokenexp": "[a-zA-Z0-9_]+"},
    {"tokenexp": "[a-z]+", "mincharnum": 3},
    {"tokenexp": "\\w+"},
    {"tokenexp": "a|ab|b"},                       # alternatives: RE2 takes the longest
    {"tokenexp": "."},                            # characters
    {"separators": [""]},                         # characters
    {"separators": [" "]},
    {"separators": [" ", "-", ",|;"]},            # each separator splits the pieces of the previous
    {"separators": ["\\s+"], "mincharnum": 2},
    {"separators": [" "], "mark": 1, "pad_value": "<pad>"},
    {"tokenexp": "\\w+", "mark": 1},
]


@pytest.mark.parametrize("attrs", MODES, ids=lambda a: ",".join(f"{k}={v}" for k, v in a.items()))
def test_tokenizer_matches_onnxruntime(attrs):
    m = tokenizer_model(**attrs)
    check_model(m, {"x": strings(TEXTS, (2, 3))}, {"x": strings(TEXTS[:1], (1, 1))},
                {"x": strings(TEXTS[3:], (3, 1))})


@pytest.mark.parametrize("attrs", [{"tokenexp": "\\w+"}, {"separators": [" "], "mark": 1}])
def test_tokenizer_of_a_vector(attrs):
    check_model(tokenizer_model(rank=1, **attrs), {"x": strings(TEXTS)}, {"x": strings(["one two"])})


def test_rows_without_tokens_give_a_zero_width_axis_without_marks():
    check_model(tokenizer_model(tokenexp="[0-9]+", mark=1), {"x": strings(["ab", "cd"], (1, 2))})
    got = call_kernel("tokenizer", strings(["ab", "cd"], (1, 2)), mark=True, tokenexp="[0-9]+")
    assert got.shape == (1, 2, 0)


def test_marks_come_before_the_padding():
    got = call_kernel("tokenizer", strings(["a b", "c"]), mark=True, pad_value="#", separators=(" ",))
    assert got.tolist() == [["\x02", "a", "b", "\x03"], ["\x02", "c", "\x03", "#"]]


def test_an_empty_match_skips_a_character_as_onnxruntime():
    check_model(tokenizer_model(separators=["x*"]), {"x": strings(["abxxc", "xq"], (2, 1))})


def test_constant_input_is_not_folded_at_import():
    """A pattern may backtrack exponentially: it never runs at convert time."""
    node = helper.make_node("Tokenizer", ["c"], ["y"], domain="com.microsoft", mark=0, mincharnum=1,
                            pad_value="#", tokenexp="(a+)+$")
    const = helper.make_tensor("c", S, [1], [b"a" * 40 + b"!"])
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("y", S, None)], [const])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    text = relaxpack.from_onnx(m).script()
    assert "tokenizer" in text


@pytest.mark.parametrize("attrs, message", [
    ({"tokenexp": "(?<name>x)"}, "not valid in Python's re syntax"),
    ({"separators": [""], "mincharnum": 2}, "too big for tokens of one character"),
    ({"separators": [" ", ""]}, "empty separator"),
    ({"mincharnum": 0, "tokenexp": "x"}, "mincharnum must be positive"),
    ({}, "needs separators or a non-empty tokenexp"),
])
def test_invalid_attributes_are_one_line_errors(attrs, message):
    with pytest.raises(RelaxpackError, match=message):
        relaxpack.from_onnx(tokenizer_model(**attrs))


def test_rank_three_input_is_refused():
    node = helper.make_node("Tokenizer", ["x"], ["y"], domain="com.microsoft", mark=0, mincharnum=1,
                            pad_value="#", tokenexp="x")
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", S, [1, 2, 3])],
                              [helper.make_tensor_value_info("y", S, None)])
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    with pytest.raises(RelaxpackError, match="rank 3"):
        relaxpack.from_onnx(m)


# ---------------------------------------------------------------- scikit-learn text pipelines

TEXT_SAMPLES = np.array(["the cat sat", "a dog ran fast", "cats and dogs", "the quick fox", "dog eat dog",
                         "sat on the mat"] * 3)
TEXT_LABELS = np.array([0, 1, 1, 0, 1, 0] * 3)


def _vectorizers():
    text = pytest.importorskip("sklearn.feature_extraction.text")
    return {"tfidf": text.TfidfVectorizer(), "count_bigrams": text.CountVectorizer(ngram_range=(1, 2)),
            "chars": text.CountVectorizer(analyzer="char"),
            "pattern": text.TfidfVectorizer(token_pattern="[a-z]+", lowercase=False)}


def _with_c_locale(onx):
    """onnxruntime's StringNormalizer needs an installed en_US locale by default; "C" lowercases ASCII the same."""
    copy = type(onx)()
    copy.CopyFrom(onx)
    for node in copy.graph.node:
        if node.op_type == "StringNormalizer":
            node.attribute.append(helper.make_attribute("locale", "C"))
    return copy


@pytest.mark.parametrize("name", ["tfidf", "count_bigrams", "chars", "pattern"])
def test_sklearn_text_pipeline_matches_onnxruntime(name):
    pytest.importorskip("skl2onnx")
    import onnxruntime as ort
    from skl2onnx import to_onnx
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    model = make_pipeline(_vectorizers()[name], LogisticRegression()).fit(TEXT_SAMPLES, TEXT_LABELS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onx = to_onnx(model, TEXT_SAMPLES[:1].reshape(-1, 1), options={id(model): {"zipmap": False}},
                      target_opset={"": 17, "ai.onnx.ml": 3})
    assert any(n.op_type == "Tokenizer" for n in onx.graph.node)
    vm = VirtualMachine(relaxpack.build(relaxpack.from_onnx(onx)))
    sess = ort.InferenceSession(_with_c_locale(onx).SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (["the dog sat on a cat", "quick quick fox", "unknown words only"], ["cat"]):
        feeds = {onx.graph.input[0].name: strings(batch, (len(batch), 1))}
        got = vm.run(feeds)
        for out, want in zip(onx.graph.output, sess.run(None, feeds)):
            if want.dtype.kind in "iu":
                np.testing.assert_array_equal(got[out.name], want)
            else:
                np.testing.assert_allclose(got[out.name], want, rtol=1e-5, atol=1e-6)

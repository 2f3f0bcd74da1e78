"""String ops: string_concat, regex_full_match, string_normalizer,
string_split, tokenizer, tfidf_vectorizer, and murmur_hash3 (of strings or int keys).

String tensors have dtype ``"string"``; at run time they are numpy object
arrays of Python ``str``. ``string_normalizer``, ``string_split`` and ``tokenizer`` have
data-dependent output shapes: the importer calls their packed kernels with
``call_packed`` and ``match_cast``\\ s the results to fresh dims.

>>> make_call("string_concat", x, y)                                  # doctest: +SKIP
>>> make_call("regex_full_match", x, pattern=r"\\w+@example\\.com")    # doctest: +SKIP
"""

from __future__ import annotations

from ...ir.dims import DimAnalyzer
from ...ir.expr import Call
from ...ir.struct_info import TensorStructInfo, TupleStructInfo
from ..registry import REQUIRED, register_op
from .common import (
    INT, attr_error, broadcast_sinfo, check_dtype_kind, is_int_value, shape_error, tensor_arg,
    with_shape,
)

STRING = frozenset({"string"})


def _string_arg(call: Call, index: int, what: str) -> TensorStructInfo:
    sinfo = tensor_arg(call, index, what)
    check_dtype_kind(call, sinfo, STRING, what)
    return sinfo


def _infer_string_concat(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    x, y = _string_arg(call, 0, "x"), _string_arg(call, 1, "y")
    return broadcast_sinfo(call, [x, y], analyzer, "string")


register_op("string_concat", infer=_infer_string_concat, num_args=2,
            doc="ONNX StringConcat: elementwise x + y of two broadcast string tensors.")


def _infer_regex_full_match(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    x = _string_arg(call, 0, "x")
    if not isinstance(call.attrs["pattern"], str):
        raise attr_error(call, f"attribute pattern must be a string, got {call.attrs['pattern']!r}")
    return with_shape(x, x.shape, "bool", x.ndim)


register_op("regex_full_match", infer=_infer_regex_full_match, attrs={"pattern": REQUIRED}, num_args=1,
            foldable=False,   # backtracking: (a+)+ on "a" * 40 + "!" takes hours; never run at compile time
            doc="ONNX RegexFullMatch: whether each string matches the whole pattern (Python re syntax).")


def _infer_string_normalizer(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    x = _string_arg(call, 0, "x")
    if x.ndim not in (-1, 1, 2):
        raise shape_error(call, f"x must be 1-D (C) or 2-D (1, C), got rank {x.ndim}")
    return with_shape(x, None, ndim=x.ndim)


register_op("string_normalizer", data_dependent=True, infer=_infer_string_normalizer, num_args=1,
            attrs={"case_change_action": "NONE", "is_case_sensitive": False, "stopwords": (), "ascii_case": False},
            doc="ONNX StringNormalizer: drop stopwords and change case (only A-Z with ascii_case: the C "
                "locale); the output length depends on "
                "the data (call the packed kernel through call_packed and match_cast the result).")


def _infer_string_split(call: Call, analyzer: DimAnalyzer) -> TupleStructInfo:
    x = _string_arg(call, 0, "x")
    parts = with_shape(x, None, ndim=x.ndim + 1 if x.ndim >= 0 else -1)
    counts = with_shape(x, x.shape, "int64", x.ndim)
    return TupleStructInfo((parts, counts))


register_op("string_split", data_dependent=True, infer=_infer_string_split, num_args=1,
            attrs={"delimiter": None, "maxsplit": None},
            doc="ONNX StringSplit: the substrings of each string padded with '' to the largest count, and "
                "the counts; data-dependent (call the packed kernel through call_packed).")


def _infer_tokenizer(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    x = _string_arg(call, 0, "x")
    if x.ndim not in (-1, 1, 2):
        raise shape_error(call, f"x must be 1-D (C) or 2-D (N, C), got rank {x.ndim}")
    return with_shape(x, None, ndim=x.ndim + 1 if x.ndim >= 0 else -1)


register_op("tokenizer", data_dependent=True, infer=_infer_tokenizer, num_args=1,
            attrs={"mark": False, "mincharnum": 1, "pad_value": "#", "separators": (), "tokenexp": None},
            foldable=False,   # its patterns may backtrack: never run at compile time
            doc="com.microsoft Tokenizer: the tokens of each string along a new last axis, padded to the "
                "longest row; data-dependent (call the packed kernel through call_packed).")


def _infer_tfidf_vectorizer(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    x = tensor_arg(call, 0, "x")
    pool = tensor_arg(call, 1, "pool")
    check_dtype_kind(call, tensor_arg(call, 2, "ngram_indexes"), INT, "ngram_indexes")
    if x.dtype is not None and pool.dtype is not None and (x.dtype == "string") != (pool.dtype == "string"):
        raise shape_error(call, f"x ({x.dtype}) and pool ({pool.dtype}) must both hold strings or integers")
    size = call.attrs["output_size"]
    if not is_int_value(size) or size < 0:
        raise attr_error(call, f"attribute output_size must be a non-negative int, got {size!r}")
    if x.shape is None:
        return with_shape(x, None, "float32", ndim=x.ndim)
    if x.ndim not in (1, 2):
        raise shape_error(call, f"x must be 1-D (C) or 2-D (N, C), got rank {x.ndim}")
    return with_shape(x, (size,) if x.ndim == 1 else (x.shape[0], size), "float32")


register_op("tfidf_vectorizer", infer=_infer_tfidf_vectorizer, num_args=4,
            attrs={"mode": REQUIRED, "min_gram_length": REQUIRED, "max_gram_length": REQUIRED,
                   "max_skip_count": REQUIRED, "ngram_counts": REQUIRED, "output_size": REQUIRED},
            doc="ONNX TfIdfVectorizer(x, pool, ngram_indexes, weights): n-gram counts of each row, "
                "weighted (TF, IDF or TFIDF); float32 of shape (output_size,) or (N, output_size).")


def _infer_murmur_hash3(call: Call, analyzer: DimAnalyzer) -> TensorStructInfo:
    x = tensor_arg(call, 0, "x")
    if x.dtype not in (None, "string", "int32", "uint32"):
        raise shape_error(call, f"x must hold strings, int32 or uint32, got {x.dtype}")
    return with_shape(x, x.shape, "uint32" if call.attrs["positive"] else "int32", x.ndim)


register_op("murmur_hash3", infer=_infer_murmur_hash3, num_args=1, attrs={"seed": 0, "positive": True},
            doc="com.microsoft MurmurHash3: each string's (UTF-8 bytes) or int32/uint32 key's 32-bit "
                "MurmurHash3 (x86), uint32 when positive, else the same bits as int32.")

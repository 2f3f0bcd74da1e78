"""String ops: StringNormalizer, StringSplit, StringConcat, RegexFullMatch,
TfIdfVectorizer, and com.microsoft Tokenizer and MurmurHash3 (skl2onnx's text
vectorizers and FeatureHasher).

StringNormalizer and StringSplit have data-dependent output sizes: they
call packed kernels and bind the results to fresh dims::

    StringSplit(x: (n,))  ->  lv = R.call_packed("string_split", x, delimiter="-", maxsplit=None)
                              y = R.match_cast(lv[0], R.Tensor((n, string_split_d1), "string"))
                              z = R.match_cast(lv[1], R.Tensor((n,), "int64"))
    RegexFullMatch(x)     ->  R.regex_full_match(x, pattern="...")
"""

from __future__ import annotations

import re

import numpy as np

from ....ops.registry import make_call
from ..registry import register_converter
from ..value import Value
from ._dynamic import packed_call
from ._shape_common import fmt_dims, shape_error, shaped, unsupported


def _strings_in(ctx, x: Value | None, what: str = "X") -> Value:
    if x is None:
        raise shape_error(ctx, f"input {what} is required")
    if x.dtype is not None and x.dtype != "string":
        raise shape_error(ctx, f"input {what} must be a string tensor, got {x.dtype}")
    return x


@register_converter("", "StringConcat", since_opset=20)
def string_concat(ctx, x, y):
    return make_call("string_concat", ctx.expr(_strings_in(ctx, x, "X")), ctx.expr(_strings_in(ctx, y, "Y")))


@register_converter("", "RegexFullMatch", since_opset=20)
def regex_full_match(ctx, x, *, pattern=None):
    if pattern is None:
        raise shape_error(ctx, "attribute pattern is required")
    return make_call("regex_full_match", ctx.expr(_strings_in(ctx, x)), pattern=pattern)


#: locales whose case rules are Unicode's simple mapping, as glibc's ``towlower`` in them; without
#: one onnxruntime takes en_US.UTF-8
UTF8_LOCALES = (None, "", "en_US", "en_US.UTF-8", "en_US.utf8", "C.UTF-8", "C.utf8")
#: locales whose case rules change A-Z only (glibc's C locale)
ASCII_LOCALES = ("C", "POSIX")
LOCALE_NAMES = [name for name in UTF8_LOCALES + ASCII_LOCALES if name]


@register_converter("", "StringNormalizer", since_opset=10)
def string_normalizer(ctx, x, *, case_change_action="NONE", is_case_sensitive=0, locale=None, stopwords=()):
    x = shaped(ctx, _strings_in(ctx, x))
    if x.ndim not in (1, 2):
        raise shape_error(ctx, f"input X must have shape (C,) or (1, C), got rank {x.ndim}")
    if x.ndim == 2 and isinstance(x.shape[0], int) and x.shape[0] != 1:
        raise shape_error(ctx, f"input X must have shape (C,) or (1, C), got {fmt_dims(x.shape)}")
    if case_change_action not in ("NONE", "LOWER", "UPPER"):
        raise shape_error(ctx, f"case_change_action must be NONE, LOWER or UPPER, got {case_change_action!r}")
    if locale not in UTF8_LOCALES + ASCII_LOCALES:
        # the kernel changes case by Unicode's simple mapping (a UTF-8 locale) or only A-Z (C)
        raise unsupported(ctx, f"locale {locale!r}: only the case rules of {', '.join(map(repr, LOCALE_NAMES))} "
                               f"are supported")
    length = x.shape[-1] if not stopwords else None      # only stopwords change the length
    shape = (length,) if x.ndim == 1 else (1, length)
    return packed_call(ctx, "string_normalizer", [x], [(shape, "string")], "strnorm",
                       case_change_action=case_change_action, is_case_sensitive=bool(is_case_sensitive),
                       stopwords=tuple(stopwords), ascii_case=locale in ASCII_LOCALES)


@register_converter("", "StringSplit", since_opset=20)
def string_split(ctx, x, *, delimiter=None, maxsplit=None):
    x = shaped(ctx, _strings_in(ctx, x))
    if maxsplit is not None and maxsplit < 0:
        raise shape_error(ctx, f"maxsplit must be non-negative, got {maxsplit}")
    return packed_call(ctx, "string_split", [x], [(x.shape + (None,), "string"), (x.shape, "int64")],
                       "string_split", delimiter=delimiter or None,
                       maxsplit=None if maxsplit is None else int(maxsplit))


@register_converter("", "TfIdfVectorizer", since_opset=9)
def tfidf_vectorizer(ctx, x, *, mode, min_gram_length, max_gram_length, max_skip_count, ngram_counts,
                     ngram_indexes, pool_int64s=None, pool_strings=None, weights=None):
    if x is None:
        raise shape_error(ctx, "input X is required")
    if (pool_int64s is None) == (pool_strings is None):
        raise shape_error(ctx, "needs exactly one of pool_int64s and pool_strings")
    if pool_strings is not None:
        _strings_in(ctx, x)
        pool = np.empty(len(pool_strings), dtype=object)
        pool[:] = list(pool_strings)
    else:
        if x.dtype not in (None, "int32", "int64"):
            raise shape_error(ctx, f"input X must be int32 or int64 for pool_int64s, got {x.dtype}")
        pool = np.array(pool_int64s, dtype=np.int64)
    if mode not in ("TF", "IDF", "TFIDF"):
        raise shape_error(ctx, f"mode must be TF, IDF or TFIDF, got {mode!r}")
    if not 0 < min_gram_length <= max_gram_length or max_skip_count < 0:
        raise shape_error(ctx, f"need 0 < min_gram_length <= max_gram_length and max_skip_count >= 0, got "
                               f"{min_gram_length}, {max_gram_length}, {max_skip_count}")
    if not ngram_indexes or min(ngram_indexes) < 0:
        raise shape_error(ctx, "ngram_indexes must be non-empty and non-negative")
    x = shaped(ctx, x)
    indexes = np.array(ngram_indexes, dtype=np.int64)
    weight = np.array(weights if weights is not None else (), dtype=np.float32)
    return make_call("tfidf_vectorizer", ctx.expr(x), *(ctx.expr(ctx.const(a)) for a in (pool, indexes, weight)),
                     mode=mode, min_gram_length=int(min_gram_length), max_gram_length=int(max_gram_length),
                     max_skip_count=int(max_skip_count), ngram_counts=tuple(int(c) for c in ngram_counts),
                     output_size=int(indexes.max()) + 1)


@register_converter("com.microsoft", "Tokenizer", since_opset=1)
def tokenizer(ctx, x, *, mark=None, mincharnum=None, pad_value=None, separators=None, tokenexp=None):
    """Token rows along a new last axis of data-dependent width (runtime/kernels/tokenizer.py).
    onnxruntime reads ``separators`` when both it and ``tokenexp`` are given."""
    x = shaped(ctx, _strings_in(ctx, x))
    for name, value in (("mark", mark), ("mincharnum", mincharnum), ("pad_value", pad_value)):
        if value is None:
            raise shape_error(ctx, f"attribute {name} is required")
    if mincharnum < 1:
        raise shape_error(ctx, f"mincharnum must be positive, got {mincharnum}")
    if x.ndim not in (1, 2):
        raise shape_error(ctx, f"input X must have shape (C,) or (N, C), got rank {x.ndim}")
    separators = tuple(separators) if separators is not None else ()
    if not separators and not tokenexp:
        raise shape_error(ctx, "needs separators or a non-empty tokenexp")
    characters = separators == ("",) or (not separators and tokenexp == ".")
    if characters and mincharnum > 1:
        raise shape_error(ctx, f"mincharnum {mincharnum} is too big for tokens of one character")
    if not characters:
        if "" in separators:
            raise shape_error(ctx, "an empty separator is only allowed alone (tokens of one character)")
        for pattern in separators or (tokenexp,):
            _check_pattern(ctx, pattern)
    return packed_call(ctx, "tokenizer", [x], [(x.shape + (None,), "string")], "tokens", foldable=False,
                       mark=bool(mark), mincharnum=int(mincharnum), pad_value=pad_value,
                       separators=separators, tokenexp=None if separators else tokenexp)


def _check_pattern(ctx, pattern: str) -> None:
    """A pattern Python's re cannot read is refused at import, naming it."""
    try:
        re.compile(pattern)
    except re.error as err:
        raise unsupported(ctx, f"pattern {pattern!r} is not valid in Python's re syntax ({err}); "
                               "relaxpack runs RE2 patterns with re") from None


@register_converter("com.microsoft", "MurmurHash3", since_opset=1)
def murmur_hash3(ctx, x, *, positive=1, seed=0):
    """Each string's or int32/uint32 key's MurmurHash3 (runtime/kernels/hashing.py); uint32
    when ``positive`` (onnxruntime's default), else int32."""
    if x is None:
        raise shape_error(ctx, "input X is required")
    if x.dtype not in ("string", "int32", "uint32"):
        raise unsupported(ctx, f"keys of dtype {x.dtype} (onnxruntime hashes strings, int32 and uint32)")
    return make_call("murmur_hash3", ctx.expr(x), seed=int(seed) & 0xFFFFFFFF, positive=bool(positive))

"""String kernels: string_concat, regex_full_match, tfidf_vectorizer, and
the packed string_normalizer and string_split (their output sizes depend on
the data).

String tensors are numpy object arrays of Python ``str``; outputs are
written element by element (object arrays cannot live in byte arenas, so
the memory planner gives them ordinary allocations).

>>> out = np.empty(2, object)
>>> string_concat(np.array(["a", "b"], object), np.array(["!"], object), out=out)
>>> out.tolist()
['a!', 'b!']
"""

from __future__ import annotations

import functools
import re

import numpy as np

from ...errors import ExecutionError, ShapeError
from ._registry import register_kernel, register_packed


def _strings(shape, items) -> np.ndarray:
    """An object array of ``shape`` holding ``items`` (a flat sequence of str)."""
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(shape)


@register_kernel("string_concat")
def string_concat(x, y, *, out):
    """Elementwise ``x + y`` with numpy broadcasting."""
    out[...] = np.add(x.astype(object), y.astype(object), dtype=object)


@functools.lru_cache(maxsize=64)
def compiled_pattern(pattern: str, op: str, flags: int = 0) -> re.Pattern:
    """``pattern`` compiled (cached); an ExecutionError naming ``op`` and the pattern when ``re``
    cannot read it (regex_full_match, tokenizer)."""
    try:
        return re.compile(pattern, flags)
    except re.error as err:
        raise ExecutionError(f"{op}: invalid pattern {pattern!r}: {err}") from None


@register_kernel("regex_full_match")
def regex_full_match(x, *, out, pattern):
    """Whether each string matches ``pattern`` as a whole.

    ONNX specifies RE2 syntax; this uses Python's ``re``, as onnx's own
    reference does. The common syntax (classes, quantifiers, groups,
    alternation, anchors, ``\\d \\w \\s``) agrees. Differences: ``re``
    accepts backreferences and lookaround, which RE2 rejects; RE2's Unicode
    classes (``\\pL``, ``\\p{Greek}``) and ``(?<name>...)`` groups are not
    understood by ``re`` (an invalid pattern is an ExecutionError); RE2 runs
    in linear time, ``re`` may backtrack exponentially on some patterns.
    """
    regex = compiled_pattern(pattern, "regex_full_match")
    found = [regex.fullmatch(s) is not None for s in x.reshape(-1)]
    out[...] = np.array(found, dtype=bool).reshape(x.shape)


@register_packed("string_normalizer")
def string_normalizer(x, *, case_change_action, is_case_sensitive, stopwords, ascii_case):
    """ONNX StringNormalizer on a (C,) or (1, C) tensor: elements equal to a
    stopword (ignoring case unless ``is_case_sensitive``) are dropped, then
    the case changes (``LOWER``/``UPPER``/``NONE``). When every element is
    dropped the result is a single empty string, (1,) or (1, 1), as ONNX says.
    Case changes one character at a time, as onnxruntime's ``towlower``/``towupper``
    in the model's locale do (``change_case``): only ASCII letters with ``ascii_case``
    (the C/POSIX locale).

    >>> string_normalizer(np.array(["Mon", "a", "B"], object), case_change_action="LOWER",
    ...                   is_case_sensitive=False, stopwords=("A",), ascii_case=False).tolist()
    ['mon', 'b']
    """
    if x.ndim == 2 and x.shape[0] != 1 or x.ndim not in (1, 2):
        raise ShapeError(f"string_normalizer: input must have shape (C,) or (1, C), got {x.shape}")
    if is_case_sensitive:
        stops = set(stopwords)
        kept = [s for s in x.reshape(-1) if s not in stops]
    else:
        stops = {change_case(w, False, ascii_case) for w in stopwords}
        kept = [s for s in x.reshape(-1) if change_case(s, False, ascii_case) not in stops]
    if case_change_action in ("LOWER", "UPPER"):
        kept = [change_case(s, case_change_action == "UPPER", ascii_case) for s in kept]
    elif case_change_action != "NONE":
        raise ExecutionError(f"string_normalizer: unknown case_change_action {case_change_action!r}")
    if not kept:
        kept = [""]
    return _strings((len(kept),) if x.ndim == 1 else (1, len(kept)), kept)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")


def change_case(s: str, upper: bool, ascii_only: bool = False) -> str:
    """``s`` in upper or lower case one character at a time (Unicode's simple case mapping,
    as C's ``towupper``/``towlower`` in a UTF-8 locale): ``"ß"`` stays, ``"Σ"`` is always
    ``"σ"``, ``"İ"`` is ``"i"`` (Python's ``str.upper``/``lower`` give ``"SS"``, a final ``"ς"``,
    ``"i̇"``). With ``ascii_only`` only A-Z/a-z change, as in the C locale.

    >>> change_case("Straße ΣΟΣ", True), change_case("ÉCOLE", False, ascii_only=True)
    ('STRAßE ΣΟΣ', 'École')
    """
    if ascii_only:
        return s.translate(_ASCII_UPPER if upper else _ASCII_LOWER)
    if s.isascii():
        return s.upper() if upper else s.lower()
    return "".join(_simple_case(c, upper) for c in s)


@functools.lru_cache(maxsize=4096)
def _simple_case(c: str, upper: bool) -> str:
    """One character's simple case mapping: the full one where that is one character; else
    its titlecase for upper (``"ᾳ"`` -> ``"ᾼ"``) where that is one, or ``"i"`` for ``"İ"``."""
    mapped = c.upper() if upper else c.lower()
    if len(mapped) == 1:
        return mapped
    if upper:
        title = c.title()
        return title if len(title) == 1 else c
    return "i" if c == "\u0130" else c


@register_packed("string_split")
def string_split(x, *, delimiter, maxsplit):
    """ONNX StringSplit: each string split at ``delimiter`` (None or ``""``:
    runs of whitespace, as Python's ``str.split()``), at most ``maxsplit``
    times; returns the substrings, padded with ``""`` to the largest count
    along a new last axis, and the counts (int64, x's shape). An empty string
    has no substrings, whatever the delimiter (onnxruntime's reading).

    >>> parts, counts = string_split(np.array(["a-b", "c"], object), delimiter="-")
    >>> parts.tolist(), counts.tolist()
    ([['a', 'b'], ['c', '']], [2, 1])
    """
    sep = delimiter or None
    limit = -1 if maxsplit is None else int(maxsplit)
    pieces = [s.split(sep, limit) if s else [] for s in x.reshape(-1)]   # "" has no substrings (as onnxruntime)
    counts = np.array([len(p) for p in pieces], dtype=np.int64).reshape(x.shape)
    width = max((len(p) for p in pieces), default=0)
    flat = [s for p in pieces for s in p + [""] * (width - len(p))]
    return _strings(x.shape + (width,), flat), counts


@register_kernel("tfidf_vectorizer")
def tfidf_vectorizer(x, pool, ngram_indexes, weights, *, out, mode, min_gram_length, max_gram_length,
                     max_skip_count, ngram_counts, output_size):
    """ONNX TfIdfVectorizer: per row of ``x`` ((C,) or (N, C)), the counts of
    the pool's n-grams of length ``min_gram_length..max_gram_length`` whose
    items lie ``1..max_skip_count + 1`` apart (unigrams count once), then
    weighted: TF the counts, IDF ``weights`` (or 1) where the count is
    nonzero, TFIDF ``weights * counts`` (or the counts).

    The pool holds the 1-grams from ``ngram_counts[0]``, the 2-grams from
    ``ngram_counts[1]``, ...; n-gram number ``k`` (over all lengths) lands in
    output column ``ngram_indexes[k]``.
    """
    grams = _pool_grams(pool.reshape(-1).tolist(), ngram_counts, ngram_indexes.reshape(-1).tolist(),
                        min_gram_length, max_gram_length)
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    counts = np.zeros((rows.shape[0], output_size), np.float32)
    for r, row in enumerate(rows.tolist()):
        for skip in range(1, max_skip_count + 2):
            for n in range(max(min_gram_length, 1 if skip == 1 else 2), max_gram_length + 1):
                span = skip * (n - 1)
                for start in range(len(row) - span):
                    column = grams.get(tuple(row[start:start + span + 1:skip]))
                    if column is not None:
                        counts[r, column] += 1
    _weigh(counts, mode, weights.astype(np.float32).reshape(-1))
    out[...] = counts.reshape(out.shape)


def _pool_grams(pool: list, ngram_counts, ngram_indexes: list, lo: int, hi: int) -> dict:
    """``{n-gram tuple: output column}`` for the pool's n-grams with ``lo <= n <= hi``."""
    grams, k = {}, 0
    for i, start in enumerate(ngram_counts):
        end = ngram_counts[i + 1] if i + 1 < len(ngram_counts) else len(pool)
        n = i + 1
        for first in range(start, end - n + 1, n):
            if k >= len(ngram_indexes):
                raise ShapeError(f"tfidf_vectorizer: the pool has more n-grams than the "
                                 f"{len(ngram_indexes)} ngram_indexes")
            if lo <= n <= hi:
                grams[tuple(pool[first:first + n])] = ngram_indexes[k]
            k += 1
    return grams


def _weigh(counts: np.ndarray, mode: str, weights: np.ndarray) -> None:
    if mode == "TF":
        return
    if weights.size and weights.size != counts.shape[1]:
        raise ShapeError(f"tfidf_vectorizer: {weights.size} weights for {counts.shape[1]} output columns")
    if mode == "IDF":
        counts[...] = np.where(counts > 0, weights if weights.size else np.float32(1), np.float32(0))
    elif mode == "TFIDF":
        if weights.size:
            counts *= weights
    else:
        raise ExecutionError(f"tfidf_vectorizer: unknown mode {mode!r} (TF, IDF or TFIDF)")

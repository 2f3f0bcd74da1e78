"""com.microsoft Tokenizer: strings into padded rows of tokens (what
scikit-learn's CountVectorizer and TfidfVectorizer become through skl2onnx).

Each string of a (C,) or (N, C) tensor becomes a row along a new last axis,
as wide as the row with the most tokens; shorter rows are padded with
``pad_value``. Three modes, as onnxruntime's kernel:

- characters (``separators == [""]`` or ``tokenexp == "."``): every
  character is a token;
- separators: the string is split at each separator pattern in turn (the
  pieces of the first split are split at the second, ...); pieces shorter
  than ``mincharnum`` characters are dropped;
- tokenexp: the tokens are the pattern's successive matches of at least
  ``mincharnum`` characters (a shorter match skips one character).

With ``mark`` each row starts with ``"\\x02"`` and ends with ``"\\x03"``
(before the padding). When no string has a token the last axis is 0 wide,
without marks.

Patterns run on Python's ``re`` with ``re.ASCII`` (RE2's ``\\w``, ``\\d``,
``\\s`` and ``\\b`` are ASCII classes); onnxruntime uses RE2 with longest-match
semantics. The two agree on a match's start; where a pattern has
alternatives (``|`` or ``?``) the match is extended to the longest
``fullmatch`` from that start, as RE2 would choose. ``re`` may backtrack
exponentially on some patterns (the design notes: "Python's re backtracks").
"""

from __future__ import annotations

import re

import numpy as np

from ...errors import ShapeError
from ._registry import register_packed
from .strings import compiled_pattern

START, END = "\x02", "\x03"


def compile_pattern(pattern: str) -> re.Pattern:
    """``pattern`` compiled with RE2's ASCII classes (``\\w \\d \\s \\b``)."""
    return compiled_pattern(pattern, "tokenizer", re.ASCII)


def _has_alternatives(pattern: str) -> bool:
    """Whether leftmost-first and leftmost-longest can disagree: ``|`` or a
    ``?`` quantifier (``(?`` opens a group, not an alternative)."""
    return "|" in pattern or re.search(r"(?<!\()\?", pattern) is not None


def _search(regex: re.Pattern, longest: bool, text: str, start: int) -> tuple[int, int] | None:
    """(start, end) of the leftmost match at or after ``start``; with
    ``longest``, extended to the longest full match from that start."""
    found = regex.search(text, start)
    if found is None:
        return None
    begin, end = found.span()
    if longest:
        for stop in range(len(text), end, -1):
            if regex.fullmatch(text, begin, stop) is not None:
                return begin, stop
    return begin, end


def _split(text: str, regex: re.Pattern, longest: bool, mincharnum: int) -> list[str]:
    """The pieces of ``text`` between matches of ``regex`` of at least
    ``mincharnum`` characters; an empty match also drops the character it
    stands before (onnxruntime steps over it)."""
    pieces, start = [], 0
    while True:
        found = _search(regex, longest, text, start)
        if found is None:
            if len(text) - start >= mincharnum:
                pieces.append(text[start:])
            return pieces
        begin, end = found
        if begin - start >= mincharnum:
            pieces.append(text[start:begin])
        start = end if end > begin else begin + 1
        if start > len(text):
            return pieces


def _separated(text: str, separators, mincharnum: int) -> list[str]:
    row = [text]
    for regex, longest in separators:
        row = [piece for part in row for piece in _split(part, regex, longest, mincharnum)]
        if not row:
            break
    return row


def _matches(text: str, regex: re.Pattern, longest: bool, mincharnum: int) -> list[str]:
    if len(text) < mincharnum:
        return []
    tokens, start = [], 0
    while start <= len(text):
        found = _search(regex, longest, text, start)
        if found is None:
            break
        begin, end = found
        if end - begin >= mincharnum:
            tokens.append(text[begin:end])
            start = end
        else:
            start = begin + 1
    return tokens


def _row_tokenizer(separators, tokenexp, mincharnum: int):
    """A function str -> list of tokens for the attributes' mode."""
    if separators == ("",) or (not separators and tokenexp == "."):
        return list
    if separators:
        compiled = [(compile_pattern(s), _has_alternatives(s)) for s in separators]
        return lambda text: _separated(text, compiled, mincharnum)
    regex, longest = compile_pattern(tokenexp), _has_alternatives(tokenexp)
    return lambda text: _matches(text, regex, longest, mincharnum)


@register_packed("tokenizer")
def tokenizer(x, *, mark, mincharnum, pad_value, separators, tokenexp):
    """The token rows of a (C,) or (N, C) string tensor: shape ``x.shape + (D,)``.

    >>> tokenizer(np.array(["a bc", "d"], object), tokenexp="[a-z]+").tolist()
    [['a', 'bc'], ['d', '#']]
    """
    if x.ndim not in (1, 2):
        raise ShapeError(f"tokenizer: input must have shape (C,) or (N, C), got {x.shape}")
    split = _row_tokenizer(tuple(separators), tokenexp, int(mincharnum))
    rows = [split(s) for s in x.reshape(-1).tolist()]
    width = max((len(r) for r in rows), default=0)
    if width and mark:
        rows = [[START, *r, END] for r in rows]
        width += 2
    flat = [t for r in rows for t in r + [pad_value] * (width - len(r))]
    out = np.empty(len(flat), dtype=object)
    out[:] = flat
    return out.reshape(x.shape + (width,))

"""Text from files made safe for a terminal: control characters shown, never sent.

An input named ``"\\x1b]0;pwned\\x07"`` in an archive would set the
terminal's title when ``relaxpack inspect`` printed it raw; a name holding a
newline could forge a line of output. :func:`printable` escapes C0 and C1
control characters (and the bidirectional overrides that reorder what is
shown, and lone surrogates) except newlines and tabs, for text the CLI composes; :func:`one_line`
escapes those too, for one name or value from a file.

>>> one_line("x\\x1b]0;t\\x07\\n")
'x\\\\x1b]0;t\\\\x07\\\\x0a'
"""

from __future__ import annotations

import re

# bidirectional overrides (they reorder what is shown) and lone surrogates (no encoding can print them)
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
_CONTROL_ALL = re.compile(f"[\x00-\x1f\x7f-\x9f{_BIDI}]")


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str) -> str:
    """``text`` with every control character but newline and tab escaped (``\\x1b``)."""
    return _CONTROL.sub(_escape, text)


def one_line(text) -> str:
    """``text`` (any value, as ``str``) with every control character escaped, newlines too."""
    return _CONTROL_ALL.sub(_escape, str(text))


__all__ = ["one_line", "printable"]

"""Ops relaxpack deliberately does not import, each with the reason and the
way around it.

A refusal is not a converter: it only shapes the error an op without a
converter (or function body) fails with, and the coverage matrix's
"imported as" column, so users see why an op is missing rather than a bare
"unsupported". A converter registered for the op later (ours or a user's)
takes precedence.

    >>> find_refusal("ai.onnx.ml", "ZipMap") is None    # maps convert now
    True
"""

from __future__ import annotations

from dataclasses import dataclass

from .registry import canonical_domain



@dataclass(frozen=True)
class Refusal:
    """Why ``op`` of ``domain`` is not imported: ``summary`` is a few words
    (the coverage column), ``reason`` a sentence, ``workaround`` how a user
    gets a model without the op (None when there is no easy way)."""

    domain: str
    op: str
    summary: str
    reason: str
    workaround: str | None = None

    def message(self, opset: int) -> str:
        """The one-line error: op, domain, opset, reason and workaround."""
        text = f"{self.op} (domain {self.domain or 'ai.onnx'}, opset {opset}) is not supported: {self.reason}"
        return f"{text}; {self.workaround}" if self.workaround else text


#: none today: the map ops (ZipMap, CastMap, DictVectorizer), refused until maps joined the IR, now convert
_REFUSALS: tuple[Refusal, ...] = ()

REFUSALS: dict[tuple[str, str], Refusal] = {(canonical_domain(r.domain), r.op): r for r in _REFUSALS}


def find_refusal(domain: str, op_type: str) -> Refusal | None:
    """The deliberate refusal of ``op_type`` of ``domain``, if there is one."""
    return REFUSALS.get((canonical_domain(domain), op_type))


__all__ = ["REFUSALS", "Refusal", "find_refusal"]

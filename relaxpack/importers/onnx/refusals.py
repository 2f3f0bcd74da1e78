"""Ops relaxpack deliberately does not import, each with the reason and the
way around it.

A refusal is not a converter: it only shapes the error an op without a
converter (or function body) fails with, and the coverage matrix's
"imported as" column, so users see why an op is missing rather than a bare
"unsupported". A converter registered for the op later (ours or a user's)
takes precedence.

    >>> find_refusal("ai.onnx.ml", "CastMap").summary
    'map-typed input'
"""

from __future__ import annotations

from dataclasses import dataclass

from .registry import canonical_domain

ML = "ai.onnx.ml"


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


_MAPS = ("relaxpack values are tensors, sequences and optionals; map-typed values "
         "(ONNX map(K, V), Python dicts) are not supported")

_REFUSALS = (
    Refusal(ML, "CastMap", "map-typed input",
            f"its input is a map from int64 keys to strings or floats; {_MAPS}",
            "cast or densify the map before the model and feed the resulting tensor"),
    Refusal(ML, "DictVectorizer", "map-typed input",
            f"its input is a map from feature names (or ids) to values; {_MAPS}",
            "vectorize the dicts before the model (e.g. with the fitted scikit-learn DictVectorizer's "
            "transform) and convert the rest of the pipeline, whose input is then one float tensor"),
    Refusal(ML, "ZipMap", "map-typed output",
            f"its output is a sequence of maps (one {{label: probability}} dict per sample); {_MAPS}",
            "convert the model without it (skl2onnx: options={'zipmap': False}) to get the probabilities "
            "as one float tensor"),
)

REFUSALS: dict[tuple[str, str], Refusal] = {(canonical_domain(r.domain), r.op): r for r in _REFUSALS}


def find_refusal(domain: str, op_type: str) -> Refusal | None:
    """The deliberate refusal of ``op_type`` of ``domain``, if there is one."""
    return REFUSALS.get((canonical_domain(domain), op_type))


__all__ = ["REFUSALS", "Refusal", "find_refusal"]

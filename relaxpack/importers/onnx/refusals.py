"""Ops relaxpack deliberately does not import, each with the reason and the
way around it.

A refusal is not a converter: it only shapes the error an op without a
converter (or function body) fails with, and the coverage matrix's
"imported as" column, so users see why an op is missing rather than a bare
"unsupported". A converter registered for the op later (ours or a user's)
takes precedence.

    >>> find_refusal("ai.onnx.ml", "ZipMap") is None    # maps convert now
    True
    >>> find_refusal("com.microsoft.nchwc", "Conv").summary
    "onnxruntime's CPU-specific NCHWc layout"
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

    def message(self, opset: int, ops: str | None = None) -> str:
        """The one-line error: op (or ``ops``, several refused alike), domain, opset, reason and
        workaround."""
        verb = "is" if ops is None else "are"
        text = (f"{ops or self.op} (domain {self.domain or 'ai.onnx'}, opset {opset}) {verb} not supported: "
                f"{self.reason}")
        return f"{text}; {self.workaround}" if self.workaround else text


#: onnxruntime's NCHWc layout ops: what its optimizer writes at ORT_ENABLE_ALL (the default level of
#: ``SessionOptions.optimized_model_filepath``) on a CPU with AVX2 or AVX-512. Their channels are in
#: blocks of that CPU's size (8 or 16) and the saved weights are reordered into those blocks; no
#: attribute says which, so the file only runs where it was saved (onnxruntime warns so). The map ops
#: (ZipMap, CastMap, DictVectorizer), refused until maps joined the IR, convert now.
NCHWC_DOMAIN = "com.microsoft.nchwc"
_NCHWC_OPS = ("Conv", "ReorderInput", "ReorderOutput", "MaxPool", "AveragePool", "GlobalAveragePool",
              "GlobalMaxPool", "Upsample")
_REFUSALS: tuple[Refusal, ...] = tuple(
    Refusal(NCHWC_DOMAIN, op, "onnxruntime's CPU-specific NCHWc layout",
            "onnxruntime's NCHWc layout for the CPU the graph was optimized on (channel blocks of its "
            "size, weights reordered into them; a graph saved at ORT_ENABLE_ALL)",
            "convert the model before onnxruntime optimized it, or save its optimized graph at "
            "ORT_ENABLE_EXTENDED") for op in _NCHWC_OPS)

REFUSALS: dict[tuple[str, str], Refusal] = {(canonical_domain(r.domain), r.op): r for r in _REFUSALS}


def find_refusal(domain: str, op_type: str) -> Refusal | None:
    """The deliberate refusal of ``op_type`` of ``domain``, if there is one."""
    return REFUSALS.get((canonical_domain(domain), op_type))


__all__ = ["NCHWC_DOMAIN", "REFUSALS", "Refusal", "find_refusal"]

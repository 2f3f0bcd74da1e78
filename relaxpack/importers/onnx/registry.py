"""The converter registry: (domain, op_type, since_opset) -> converter.

One converter function per ONNX op and opset range. A converter takes the
import context, the node's inputs as :class:`Value` (``None`` for an omitted
optional input) and the node's attributes as keyword arguments with the
spec's defaults::

    @register_converter("", "LeakyRelu", since_opset=6)
    def leaky_relu(ctx, x, *, alpha=0.01):
        return make_call("nn.leakyrelu", ctx.expr(x), alpha=alpha)

It returns an IR expression (emitted for it), a :class:`Value`, or a tuple of
those for a node with several outputs (``None`` for an output it does not
produce). The same mechanism serves users' converters for custom domains,
e.g. an op that a function registered at run time implements
(:func:`~relaxpack.importers.onnx.call_registered`)::

    from relaxpack.importers.onnx import call_registered, register_converter

    @register_converter("acme", "RowNorm", since_opset=1)
    def row_norm(ctx, x, *, eps=1e-5):
        return call_registered(ctx, "acme.row_norm", [x], (x.shape, x.dtype), dps=True, eps=eps)

and ``relaxpack.runtime.register_func("acme.row_norm", fn, dps=True)`` where
the archive runs (relaxpack/examples/custom_op.py has the whole story).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Callable

from ...errors import RelaxpackError

DEFAULT_DOMAIN = ""
_ALIASES = {"ai.onnx": ""}

Converter = Callable[..., object]


@dataclass(frozen=True)
class ConverterEntry:
    domain: str
    op_type: str
    since_opset: int
    fn: Converter


_REGISTRY: dict[tuple[str, str], list[ConverterEntry]] = {}


def canonical_domain(domain: str) -> str:
    return _ALIASES.get(domain, domain)


def register_converter(domain: str, op_type: str, since_opset: int = 1, fn: Converter | None = None):
    """Register ``fn`` for ``op_type`` of ``domain`` from opset ``since_opset`` on.

    Usable as a decorator. A later registration for the same key replaces
    the earlier one (so users can override ours).
    """
    def register(fn: Converter) -> Converter:
        if not isinstance(since_opset, int) or since_opset < 1:
            raise RelaxpackError(f"since_opset must be a positive int, got {since_opset!r}")
        key = (canonical_domain(domain), op_type)
        entries = [e for e in _REGISTRY.get(key, []) if e.since_opset != since_opset]
        entries.append(ConverterEntry(key[0], op_type, since_opset, fn))
        entries.sort(key=lambda e: e.since_opset)
        _REGISTRY[key] = entries
        return fn
    return register(fn) if fn is not None else register


def find_converter(domain: str, op_type: str, opset: int) -> ConverterEntry | None:
    """The converter for ``opset``: the one with the greatest since_opset <= opset."""
    _ensure_loaded()
    entries = _REGISTRY.get((canonical_domain(domain), op_type))
    if not entries:
        return None
    i = bisect.bisect_right([e.since_opset for e in entries], opset)
    return entries[i - 1] if i else None


def registered_converters() -> list[ConverterEntry]:
    _ensure_loaded()
    return [e for entries in _REGISTRY.values() for e in entries]


_loaded = False


def _ensure_loaded() -> None:
    global _loaded
    if not _loaded:
        from . import converters  # noqa: F401  (registers on import)
        _loaded = True  # only once every converter module imported

"""Per-instruction stores kept per shape, bounded: a model whose input shape changes on every
call must not grow them without bound, so a full store is emptied before it takes a new entry
(cheap to refill; no eviction order to maintain on the hot path, which only reads)."""

from __future__ import annotations

#: entries a per-shape store of small values (shapes, index tuples, heap stores) keeps
SHAPES_KEPT = 64


def keep(store: dict, key, value, limit: int = SHAPES_KEPT):
    """``store[key] = value``, emptying ``store`` first when it holds ``limit`` entries; returns
    ``value`` (for ``x = keep(store, key, make())`` on a miss)."""
    if len(store) >= limit:
        store.clear()
    store[key] = value
    return value

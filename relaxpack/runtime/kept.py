"""Stores of derived values, kept within bounds: per shape, per instruction (:func:`keep`), bounded
in size: a model whose input shape changes on every call must not grow them without bound, so a
full store is emptied before it takes a new entry (cheap to refill; no eviction order to maintain
on the hot path, which only reads); per array (:func:`keep_for`, :func:`kept_for`), an entry for
as long as the array it was made from lives (an arena view, a read-only constant), by identity."""

from __future__ import annotations

import weakref

#: entries a per-shape store of small values (shapes, index tuples, heap stores) keeps
SHAPES_KEPT = 64


def keep(store: dict, key, value, limit: int = SHAPES_KEPT):
    """``store[key] = value``, emptying ``store`` first when it holds ``limit`` entries; returns
    ``value`` (for ``x = keep(store, key, make())`` on a miss)."""
    if len(store) >= limit:
        store.clear()
    store[key] = value
    return value


def keep_for(store: dict, array, value):
    """``value`` stored for ``array`` (by identity) until ``array`` is collected; returns ``value``.
    The entry holds ``array`` weakly (a value that is a view of it keeps it alive, and the entry with
    it, as long as the value is held elsewhere too)."""
    key = id(array)
    store[key] = (weakref.ref(array, lambda _, key=key, kept=store: kept.pop(key, None)), value)
    return value


def kept_for(store: dict, array):
    """The value :func:`keep_for` stored for ``array``, or None (none, or one of a collected array
    whose id ``array`` now has)."""
    entry = store.get(id(array))
    return entry[1] if entry is not None and entry[0]() is array else None

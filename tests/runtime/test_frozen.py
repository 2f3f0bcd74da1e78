"""The registry of arrays that never change (the shape memo's kept outputs): a frozen array and
its read-only views are known; a writeable array, a read-only array nobody froze, a view of a
frozen array made writeable-free by another path, and a frozen array's successor are not."""

from __future__ import annotations

import gc

import numpy as np

from relaxpack.runtime.frozen import _FROZEN, freeze, is_frozen


def test_a_frozen_array_and_its_views_are_known():
    table = np.arange(12).reshape(3, 4).copy()
    assert not is_frozen(table)
    freeze(table)
    assert not table.flags.writeable
    assert is_frozen(table) and is_frozen(table.view()) and is_frozen(table[1:]) and is_frozen(table.reshape(-1))


def test_read_only_arrays_nobody_froze_are_not_known():
    user = np.arange(6)
    view = user.view()
    view.flags.writeable = False                # the caller may still change it through `user`
    owned = np.arange(6)
    owned.flags.writeable = False               # and may set this one writeable again
    assert not is_frozen(view) and not is_frozen(owned) and not is_frozen(3) and not is_frozen(None)


def test_a_frozen_view_is_only_made_read_only():
    base = np.arange(8)
    part = base[2:]
    freeze(part)                                # its base may change: never known as frozen
    assert not part.flags.writeable and not is_frozen(part) and not is_frozen(part[1:])


def test_the_registry_drops_an_array_with_its_last_reference():
    table = np.arange(5)
    freeze(table)
    key = id(table)
    assert _FROZEN.get(key) is table
    del table
    gc.collect()
    assert key not in _FROZEN
    successor = np.arange(5)                    # (an id reused by a new array is never a match)
    successor.flags.writeable = False
    assert not is_frozen(successor)

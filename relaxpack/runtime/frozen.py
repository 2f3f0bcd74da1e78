"""Arrays that never change again: the shape memo's kept kernel outputs (masks, position tables).

The shape memo computes a shape-only value once per shape and hands the same read-only view of
it to its readers run after run (:mod:`.shape_memo`). A kernel may then key what it prepares
from such an operand on its identity alone, where any other array (an arena view, a model
input) must be compared by value: an arena's views are the same objects every run with new
contents, and a caller may change an input's memory between runs, read-only flag or not.
:func:`freeze` registers an array the memo owns; :func:`is_frozen` tells a view of one.
Registered arrays are held weakly: one the memo drops leaves the registry with it.
"""

from __future__ import annotations

import weakref

import numpy as np

#: id -> the frozen array (weakly held: an id reused by a new array never matches it)
_FROZEN: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def freeze(array: np.ndarray) -> None:
    """Make ``array`` read-only and, where it owns its memory (and only its freezer holds it),
    register it: its contents never change from here on. (A view is only made read-only: its
    base may change.)"""
    array.flags.writeable = False
    if array.base is None:
        _FROZEN[id(array)] = array


def is_frozen(array) -> bool:
    """Whether ``array`` is a frozen array or a read-only view of one (its contents then stay
    as they are for as long as the object lives)."""
    if array.__class__ is not np.ndarray or array.flags.writeable:
        return False
    root = array if array.base is None else array.base
    return _FROZEN.get(id(root)) is root

"""Values kept per array (runtime/kept.py ``keep_for`` / ``kept_for``): found by the array's
identity while it lives, gone with it, never handed to another array that reuses its id."""

import gc

import numpy as np

from relaxpack.runtime.kept import keep_for, kept_for


def test_a_value_is_kept_while_its_array_lives():
    store, array = {}, np.arange(6.0)
    assert kept_for(store, array) is None
    value = keep_for(store, array, ("derived", 1))
    assert kept_for(store, array) is value and kept_for(store, array.copy()) is None
    del array
    gc.collect()
    assert store == {}


def test_an_entry_of_a_dead_array_is_not_given_to_its_successor():
    store, array = {}, np.zeros(3)
    keep_for(store, array, "old")
    key = id(array)
    ref = store[key][0]
    store[key] = (lambda: None, "stale")      # as if the array died and its id came back
    assert kept_for(store, array) is None
    store[key] = (ref, "old")
    assert kept_for(store, array) == "old"

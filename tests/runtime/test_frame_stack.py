"""Room on CPython's frame stack (runtime/frame_stack.py): a VM run whose caller leaves its
stack just short of a chunk's end starts one fresh chunk for the whole run, instead of mapping
and unmapping one on every kernel call made at the depth where the chunk ends (gh-142183)."""

from __future__ import annotations

import sys
import threading

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import relaxpack
from relaxpack.runtime import VirtualMachine, frame_stack
from relaxpack.runtime.frame_stack import CHUNK, MAX_NEED, OVERHEAD, chunk_for, relay_bytes

needs_fields = pytest.mark.skipif(
    sys.implementation.name != "cpython" or sys.version_info < (3, 11) or frame_stack._thread_words() is False,
    reason="a CPython 3.11+ thread state with its frame stack fields")


def chain(n: int = 24):
    """Relu(Neg(...(x))): n small kernel calls at -O0, each a frame pushed and popped."""
    nodes = [h.make_node("Neg" if i % 2 else "Relu", [f"t{i}"], [f"t{i + 1}"]) for i in range(n)]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("t0", T.FLOAT, [2, 3])],
                         [h.make_tensor_value_info(f"t{n}", T.FLOAT, [2, 3])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)], ir_version=8)


def chunk_entries(fn) -> int:
    """How many times a Python call made by ``fn()`` left the caller's chunk for a new one."""
    words = frame_stack.stack_local.words
    base = last = words[0]
    entries = 0

    def hook(frame, event, arg):
        nonlocal entries, last
        if event == "call":
            if last == base and words[0] != base:
                entries += 1
            last = words[0]
    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return entries


def with_room(left: int, fn):
    """``fn()`` called where this thread's current chunk has about ``left`` bytes free."""
    here = frame_stack.room()
    if here < left + 512:                       # not enough here: go to a fresh chunk first
        return frame_stack._relay(relay_bytes(here, CHUNK // 2))(with_room, (left, fn))
    return frame_stack._relay(here - left)(fn, ())


@needs_fields
def test_the_thread_state_fields_are_found_and_follow_calls():
    outer = frame_stack.room()
    inner = (lambda: frame_stack.room())()
    assert 0 < outer <= chunk_for(0) * 64
    assert inner != outer


def test_a_relay_starts_a_chunk_that_keeps_the_need_free():
    for left, need in [(0, 100), (100, 4096), (8000, 4096), (16000, 7000), (3000, 15000), (16000, 20000),
                       (15000, MAX_NEED)]:
        size = relay_bytes(left, need)
        assert size > left
        assert chunk_for(size) - size - OVERHEAD >= need
    assert chunk_for(0) == CHUNK and chunk_for(CHUNK) == 2 * CHUNK


@needs_fields
def test_a_relay_runs_its_call_in_a_new_chunk_with_the_room_it_needs():
    def probe():
        return frame_stack.stack_local.words[0], frame_stack.room()

    def relayed(need):
        left = frame_stack.room()
        return frame_stack.stack_local.words[0], frame_stack.relay_for(left, need)(probe, ())
    chunk, (inner_chunk, inner_room) = with_room(600, lambda: relayed(4096))
    assert inner_chunk != chunk and inner_room >= 4096 - 256
    chunk, (inner_chunk, inner_room) = with_room(600, lambda: relayed(MAX_NEED + 1))
    assert inner_chunk == chunk and inner_room < 600      # more than a relay serves: a plain call


@needs_fields
def test_a_run_near_a_chunk_end_enters_a_new_chunk_once():
    exe = relaxpack.build(relaxpack.from_onnx(chain()), opt_level=0)
    vm = VirtualMachine(exe)
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    expected = vm.run({"t0": x})
    vm.run({"t0": x})                           # the second run measures the need
    prepared = vm._prepared[vm._index["main"]]
    need = prepared.stack_need
    assert 0 < need <= MAX_NEED

    def unguarded_entries(left):
        prepared.stack_need = MAX_NEED + 1      # more than a relay serves: called straight through
        try:
            return with_room(left, lambda: chunk_entries(lambda: vm.run({"t0": x})))
        finally:
            prepared.stack_need = need
    thrashing = [left for left in range(0, 2 * CHUNK // 8, 16) if unguarded_entries(left) > 5]
    assert thrashing, "no caller depth made the unguarded run map chunks per call"
    for left in thrashing:
        assert with_room(left, lambda: chunk_entries(lambda: vm.run({"t0": x}))) <= 1
        np.testing.assert_array_equal(with_room(left, lambda: vm.run({"t0": x}))["t24"], expected["t24"])


@needs_fields
def test_a_measured_function_on_a_new_thread_finds_that_threads_stack():
    exe = relaxpack.build(relaxpack.from_onnx(chain(4)), opt_level=0)
    vm = VirtualMachine(exe)
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    expected = [vm.run({"t0": x}), vm.run({"t0": x})]
    need = vm._prepared[vm._index["main"]].stack_need
    seen = {}

    def worker():
        seen["outputs"] = [vm.run({"t0": x})["t4"] for _ in range(3)]
        seen["chunk"] = frame_stack.stack_local.words[0]
    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()
    assert need > 0 and vm._prepared[vm._index["main"]].stack_need == need
    assert seen["chunk"] != frame_stack.stack_local.words[0]     # that thread's own stack
    for out in seen["outputs"]:
        np.testing.assert_array_equal(out, expected[0]["t4"])


@needs_fields
def test_under_another_profiler_the_need_is_measured_later():
    exe = relaxpack.build(relaxpack.from_onnx(chain(4)), opt_level=0)
    vm = VirtualMachine(exe)
    x = np.ones((2, 3), np.float32)
    vm.run({"t0": x})
    prepared = vm._prepared[vm._index["main"]]
    sys.setprofile(lambda frame, event, arg: None)
    try:
        vm.run({"t0": x})
    finally:
        sys.setprofile(None)
    assert prepared.stack_need == -1
    vm.run({"t0": x})
    assert 0 < prepared.stack_need <= MAX_NEED

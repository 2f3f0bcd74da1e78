"""Room on CPython's frame stack for a whole run, so that no call in it maps a stack chunk.

CPython 3.11 and later keep each thread's Python frames on a stack of chunks (16 KiB, more
for a frame that needs it). A frame that does not fit in what is left of the current chunk
starts a new one, and the chunk is unmapped as soon as that frame returns. A run whose caller
left the stack just short of a chunk's end therefore maps and unmaps a chunk on every kernel
call made at that depth (CPython issue gh-142183; fixed in 3.14 and later 3.13 releases by
keeping one spare chunk). Measured here (Python 3.11): at a few percent of call depths a model
ran 1.3-3.4x slower, and Mask R-CNN about 2x in the benchmark's worker.

Before a compiled run the VM reads how many bytes the current chunk has left; when that is less
than the run needs (measured on its second run by :func:`measure`), the run goes through a relay
(:func:`relay_for`) whose frame is just too large for that room, so that it starts a fresh chunk
that lasts the whole run: one chunk mapped per run instead of one per call. Where the thread
state's stack fields cannot be found and checked (another Python implementation or layout, Python
3.10), runs call straight through. Only reads are made, of the interpreter's own thread state.
"""

from __future__ import annotations

import sys
import threading

#: A run measured to need more than this is left alone (a relay frame would touch too much memory).
MAX_NEED = 64 * 1024
#: Bytes added to the deepest point of the measured run: little, since a run that does not need
#: the relay pays for it (one chunk mapped: 7-13 us a run on the machine measured).
MARGIN = 256
#: Relay frames grow in steps of this many bytes, so that few relays are ever made.
RELAY_STEP = 512
#: CPython's smallest chunk, and what a chunk holds besides frames (its header, a frame's specials).
CHUNK = 16 * 1024
OVERHEAD = 256
_UNLIMITED = 1 << 62
_SCAN_WORDS = 64

#: Per thread: ``words``, its live (chunk, top, limit) words, or False where they are not found.
#: The VM reads ``getattr(stack_local, "words", None)`` itself: a Python call made at the point
#: of least room could be the very frame that maps a chunk.
stack_local = threading.local()
#: Relay functions by (room // RELAY_STEP, need); the VM looks them up without a Python call.
RELAYS: dict[tuple[int, int], object] = {}
_offset: int | None = None      # byte offset of (chunk, top, limit) in PyThreadState; -1: none
_by_size: dict[int, object] = {}


def thread_words():
    """This thread's live (chunk, top, limit) words, found on first use (False if not found)."""
    words = getattr(stack_local, "words", None)
    if words is None:
        words = stack_local.words = _thread_words()
    return words


def room() -> int:
    """Bytes left in this thread's current frame-stack chunk (a huge number if unknown)."""
    words = thread_words()
    return _UNLIMITED if words is False else words[2] - words[1]


def relay_for(left: int, need: int):
    """The relay for a run needing ``need`` bytes where ``left`` are left: ``relay(fn, args)``
    calls ``fn(*args)`` from a frame too large for ``left``, so in a fresh chunk keeping ``need``
    free; a run needing more than MAX_NEED gets a plain call."""
    key = (left // RELAY_STEP, need)
    relay = RELAYS.get(key)
    if relay is None:
        relay = RELAYS[key] = _call if need > MAX_NEED else _relay(relay_bytes(left, need))
    return relay


def first_runs(fn, args, state: int) -> tuple[object, int]:
    """A run before its need is known, or on a thread not seen yet: (result, the next state).
    The first run is plain (it compiles and fills memos, deeper than later runs: state 0 -> -1),
    the second measured (-1 -> the need); a known need on a new thread stays. Finds this
    thread's stack words first, which the VM reads from then on."""
    thread_words()
    if state > 0:
        return fn(*args), state
    if state == 0:
        return fn(*args), -1
    return measure(fn, args)


def _call(fn, args):
    return fn(*args)


def measure(fn, args) -> tuple[object, int]:
    """``fn(*args)`` and the frame-stack bytes it needed: the deepest top any Python call reached.

    Nothing is measured where the fields are not found (the need: more than MAX_NEED, never
    relayed) or under another profiler (``sys.getprofile()``: -1, measure on the next run).
    """
    words = thread_words()
    if words is False:
        return fn(*args), MAX_NEED + 1
    if sys.getprofile() is not None:
        return fn(*args), -1
    chunk, top, limit = words[0], words[1], words[2]
    deepest = own = 0

    def hook(frame, event, arg):
        nonlocal deepest, own
        if event == "call":
            now_chunk, now_top = words[0], words[1]
            used = now_top - top if now_chunk == chunk else (limit - top) + (now_top - now_chunk)
            deepest = max(deepest, used)
        elif event == "own size":         # called from here: its own frame, counted in every "call"
            own = words[1] - top

    hook(None, "own size", None)
    sys.setprofile(hook)
    try:
        result = fn(*args)
    finally:
        sys.setprofile(None)
    return result, max(0, deepest - own) + MARGIN


def relay_bytes(left: int, need: int) -> int:
    """A relay frame's size: more than ``left`` (so it starts a new chunk) and small enough that the
    chunk it starts keeps ``need`` bytes free after it (CPython sizes a chunk to the frame that
    starts it: 16 KiB, doubled until the frame fits)."""
    size = (left // RELAY_STEP + 1) * RELAY_STEP
    while chunk_for(size) - size - OVERHEAD < need:
        size = chunk_for(size) + RELAY_STEP    # take the next chunk size up
    return size


def chunk_for(frame_bytes: int) -> int:
    """The size of the chunk CPython maps for a frame of ``frame_bytes`` that does not fit."""
    chunk = CHUNK
    while chunk < frame_bytes + OVERHEAD:
        chunk *= 2
    return chunk


def _relay(size: int):
    """A function calling ``fn(*args)`` whose own frame takes at least ``size`` bytes."""
    relay = _by_size.get(size)
    if relay is None:
        padding = " = ".join(f"p{i}" for i in range(size // 8))
        namespace: dict = {}
        exec(f"def relay(fn, args):\n    return fn(*args)\n    if 0:\n        {padding} = None\n", namespace)
        relay = _by_size[size] = namespace["relay"]
    return relay


# ------------------------------------------------------------------ finding the fields
def _thread_words():
    """This thread's (chunk, top, limit) words as a live ctypes array, or False if not found."""
    global _offset
    try:
        import ctypes
        get = ctypes.pythonapi.PyThreadState_Get
        get.restype = ctypes.c_void_p
        state = get()
        if _offset is None:
            _offset = _find_offset(ctypes, state)
        if _offset < 0:
            return False
        return (ctypes.c_ssize_t * 3).from_address(state + _offset)
    except (AttributeError, OSError, ValueError):   # not CPython, or no pythonapi
        _offset = -1
        return False


def _find_offset(ctypes, state: int) -> int:
    """The offset of the one word triple of the thread state that holds this frame's chunk.

    Checked three ways: the running frame lies between chunk and top, the chunk's own size
    field says where limit is, and a nested call moves top up.
    """
    if sys.implementation.name != "cpython" or sys.version_info < (3, 11):
        return -1
    words = (ctypes.c_ssize_t * _SCAN_WORDS).from_address(state)
    frame_at = ctypes.c_ssize_t.from_address(id(sys._getframe()) + 3 * ctypes.sizeof(ctypes.c_void_p)).value
    found = []
    for i in range(_SCAN_WORDS - 2):
        chunk, top, limit = words[i], words[i + 1], words[i + 2]
        if chunk and chunk <= frame_at < top <= limit and limit - chunk < 1 << 26 \
                and ctypes.c_ssize_t.from_address(chunk + 8).value == limit - chunk:
            found.append(i)
    if len(found) != 1:
        return -1
    offset = found[0] * 8
    here = words[found[0] + 1]
    deeper = (lambda: (ctypes.c_ssize_t * 3).from_address(state + offset)[1])()
    return offset if deeper != here else -1

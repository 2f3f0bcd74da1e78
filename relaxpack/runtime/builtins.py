"""VM builtins: shape heap, shape matching, allocation, tuples.

A builtin is called like any function-table entry. One whose leading
arguments are immediates may define ``specialize(*immediates)``: the VM
calls it once when it prepares the instruction and calls the returned
function with the remaining (register) arguments, so shape programs and
match patterns are compiled once, not per call.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..errors import ArchiveError, InputError, ShapeError
from .dtypes import numpy_dtype
from .kept import keep, keep_for, kept_for
from .shape_program import compile_program

BUILTINS: dict[str, Callable] = {}


def builtin(name: str):
    def register(fn):
        BUILTINS[name] = fn
        return fn
    return register


def specializable(fn, n_static: int, specialize) -> None:
    """Declare that ``fn``'s first ``n_static`` arguments may be fixed once by
    ``specialize(*static) -> callable(*rest)``."""
    fn.n_static = n_static
    fn.specialize = specialize


def input_or_shape_error(ctx: str, message: str) -> Exception:
    cls = InputError if ctx.startswith("input") else ShapeError
    return cls(f"{ctx}: {message}")


@builtin("vm.builtin.alloc_shape_heap")
def alloc_shape_heap(size: int) -> list:
    return [0] * size


@builtin("vm.builtin.alloc_tensor")
def alloc_tensor(dtype: str, shape: tuple) -> np.ndarray:
    return _empty(shape, numpy_dtype(dtype))


def _alloc_tensor_specialize(dtype: str):
    np_dtype = numpy_dtype(dtype)
    return lambda shape: _empty(shape, np_dtype)


def _empty(shape, np_dtype) -> np.ndarray:
    try:
        return np.empty(shape, np_dtype)
    except ValueError:
        if negative_dim(shape):
            raise negative_dim_error(shape) from None
        raise


def negative_dim(shape) -> bool:
    """Whether a result's shape (a tuple of ints) has a negative dim."""
    return any(isinstance(d, int) and d < 0 for d in shape)


def negative_dim_error(shape) -> ShapeError:
    """The error of a result whose shape formula gives a negative dim at these input dims: a Conv
    or pool window longer than its padded input (onnxruntime: "Invalid input shape"). numpy said
    "negative dimensions are not allowed", and an arena view's reshape took the -1 for a dim to
    infer. (A make_shape may compute negative values: run-time pads of a window smaller than its
    stride; only a tensor's shape is checked.)"""
    return ShapeError(f"the inputs' dims give this node's result the shape {tuple(shape)}, a negative dim: "
                      f"the inputs are too small for it (e.g. shorter than a kernel or window)")


specializable(alloc_tensor, 1, _alloc_tensor_specialize)


@builtin("vm.builtin.identity")
def identity(value):
    return value


@builtin("vm.builtin.make_tuple")
def make_tuple(*fields) -> tuple:
    return fields


@builtin("vm.builtin.tuple_getitem")
def tuple_getitem(tup, index: int):
    return tup[index]


@builtin("vm.builtin.read_if_cond")
def read_if_cond(value) -> bool:
    if type(value) is np.ndarray and value.ndim == 0:
        return bool(value)          # (the usual condition: a kernel's 0-d bool)
    array = np.asarray(value)
    if array.size != 1:
        raise ShapeError(f"If condition must hold one value, got shape {array.shape}")
    return bool(array.reshape(()))


@builtin("vm.builtin.make_shape")
def make_shape(programs, heap_size: int, heap) -> tuple:
    """The shape whose dims the ``programs`` compute from ``heap``."""
    return _make_shape_specialize(programs, heap_size)(heap)


def _make_shape_specialize(programs, heap_size: int):
    fns = _compile_all(programs, heap_size)
    if all(isinstance(p, int) for p in programs):
        static = tuple(programs)
        return lambda heap: static
    return lambda heap: tuple(fn(heap) for fn in fns)


specializable(make_shape, 2, _make_shape_specialize)


@builtin("vm.builtin.eval_dim")
def eval_dim(program, heap_size: int, heap) -> int:
    """One symbolic dim's value (a PrimValue argument)."""
    return compile_program(program, heap_size)(heap)


specializable(eval_dim, 2, lambda program, heap_size: compile_program(program, heap_size))


def _compile_all(programs, heap_size: int):
    if not isinstance(programs, (list, tuple)):
        raise ArchiveError(f"make_shape takes a list of programs, got {programs!r}")
    return [compile_program(p, heap_size) for p in programs]


@builtin("vm.builtin.check_tensor")
def check_tensor(value, dtype, ndim: int, ctx: str):
    """Check that ``value`` is an array of ``dtype`` (None: any) and rank ``ndim`` (-1: any)."""
    if not isinstance(value, np.ndarray):
        raise input_or_shape_error(ctx, f"expected a tensor, got {type(value).__name__}")
    if dtype is not None and value.dtype != numpy_dtype(dtype):
        raise input_or_shape_error(ctx, f"has dtype {value.dtype}, expected {dtype}")
    if ndim >= 0 and value.ndim != ndim:
        raise input_or_shape_error(ctx, f"has rank {value.ndim} (shape {value.shape}), expected rank {ndim}")
    return value


@builtin("vm.builtin.match_shape")
def match_shape(pattern, ctx: str, heap_size: int, value, heap):
    """Match ``value``'s shape against ``pattern``, storing new dims in ``heap``.

    A pattern entry per dim: ``None`` (any value), an int (the dim must equal it), ``["store",
    slot, name, lo, hi]`` (bind the dim to ``name``; ``hi`` may be None) or
    ``["eq", program, name]`` (the dim must equal the program's value).
    """
    return _match_shape_specialize(pattern, ctx, heap_size)(value, heap)


def _match_shape_specialize(pattern, ctx: str, heap_size: int):
    checks = [_compile_entry(i, entry, ctx, heap_size) for i, entry in enumerate(pattern)]
    rank = len(pattern)

    def match(value, heap):
        shape = value.shape if isinstance(value, np.ndarray) else value
        if len(shape) != rank:
            raise input_or_shape_error(ctx, f"has rank {len(shape)} (shape {tuple(shape)}), expected rank {rank}")
        for check, dim in zip(checks, shape):
            check(int(dim), heap)
        return value
    if any(isinstance(entry, (list, tuple)) and entry[0] == "eq" for entry in pattern):
        return match                # (an "eq" entry reads the heap: its outcome is not the shape's alone)
    return _kept_per_shape(match, [(i, entry[1]) for i, entry in enumerate(pattern)
                                   if isinstance(entry, (list, tuple)) and entry[0] == "store"])


def _kept_per_shape(match, stores: list):
    """``match`` for a pattern whose outcome depends on the shape alone (no "eq" entry): the
    stores of an array's shape that matched kept (at most 64 shapes), so a shape seen before
    is its stores alone (silero's match_casts of values of unknown rank, ~0.85 us each). A
    shape that failed is never kept: it runs the checks, and raises, every time."""
    passed: dict = {}
    ndarray = np.ndarray

    def kept(value, heap):
        if type(value) is not ndarray:
            return match(value, heap)
        shape = value.shape
        done = passed.get(shape)
        if done is None:
            match(value, heap)
            done = tuple((slot, shape[i]) for i, slot in stores)
            keep(passed, shape, done)
        else:
            for slot, dim in done:
                heap[slot] = dim
        return value
    return kept


specializable(match_shape, 3, _match_shape_specialize)


def _compile_entry(i: int, entry, ctx: str, heap_size: int):
    if entry is None:  # any value: matched again once all inputs are seen
        return lambda dim, heap: None
    if isinstance(entry, int) and not isinstance(entry, bool):
        def check_const(dim, heap):
            if dim != entry:
                raise input_or_shape_error(ctx, f"dim {i} is {dim}, expected {entry}")
        return check_const
    if isinstance(entry, (list, tuple)) and len(entry) == 5 and entry[0] == "store":
        _, slot, name, lo, hi = entry
        if not isinstance(slot, int) or not 0 <= slot < heap_size:
            raise ArchiveError(f"match_shape stores to heap slot {slot!r} of {heap_size}")

        def store(dim, heap):
            if dim < lo or (hi is not None and dim > hi):
                bound = f"{lo}..{hi}" if hi is not None else f">= {lo}"
                raise input_or_shape_error(ctx, f"dim {i} ({name}) is {dim}, outside its range {bound}")
            heap[slot] = dim
        return store
    if isinstance(entry, (list, tuple)) and len(entry) == 3 and entry[0] == "eq":
        _, prog, name = entry
        fn = compile_program(prog, heap_size)

        # an input whose axis reuses a plain name (dim_param) may be one the
        # exporter named alike without meaning it: say how to untie it
        hint = (f"; if the model's axes named {name} may differ, convert with --dim {name}=?"
                if ctx.startswith("input") and name.isidentifier() else "")

        def check_eq(dim, heap):
            expected = fn(heap)
            if dim != expected:
                raise input_or_shape_error(ctx, f"dim {i} is {dim}, but {name} = {expected} here "
                                  f"(from an earlier input or the model's shape relations){hint}")
        return check_eq
    raise ArchiveError(f"malformed match_shape entry {entry!r}")


@builtin("vm.builtin.check_prim")
def check_prim(value, dtype: str, ctx: str):
    array = np.asarray(value)
    if array.ndim != 0:
        raise input_or_shape_error(ctx, f"expected a scalar, got shape {array.shape}")
    return array.astype(numpy_dtype(dtype)).item() if dtype.startswith(("int", "uint")) else array.item()


@builtin("vm.builtin.shape_of")
def shape_of(value: np.ndarray) -> tuple:
    return tuple(value.shape)


@builtin("vm.builtin.reshape_view")
def reshape_view(value: np.ndarray, shape: tuple) -> np.ndarray:
    """Reshape without copying when the layout allows (the planner treats it as an alias). The
    reshape of a view (an arena's: the same object run after run) is the same object run after
    run too, so that the kernels reading it keep their per-instruction views of it (a split's
    pieces, a conv's rows and windows), which they keep by identity (ShuffleNet's shuffles)."""
    if value.base is None:
        return value.reshape(shape)
    kept = kept_for(_RESHAPED, value)
    if kept is not None and kept[0] == shape:
        return kept[1]
    view = value.reshape(shape)
    # the entry goes when ``value`` does (its view does not hold it: a view's base is the owner)
    keep_for(_RESHAPED, value, (shape, view))
    return view


#: id(value) -> (a weak reference to the value, (the shape, its reshaped view))
_RESHAPED: dict = {}


@builtin("vm.builtin.index_view")
def index_view(value: np.ndarray, index: int) -> np.ndarray:
    """``value[index]`` along the first axis, a view (the planner treats it as an alias):
    a part of one batched product (passes/merge_projections.py)."""
    if not isinstance(value, np.ndarray) or value.ndim == 0 or not isinstance(index, int) \
            or not 0 <= index < value.shape[0]:
        raise ShapeError(f"index_view: index {index!r} is not in the first dim of a tensor of shape "
                         f"{getattr(value, 'shape', None)}")
    return value[index, ...]        # a view also of a 1-D value (``value[index]`` is then a copied scalar)


from . import arena  # noqa: E402,F401  (registers the arena builtins; it imports this module)
from . import loop  # noqa: E402,F401  (registers vm.builtin.loop)
from . import containers  # noqa: E402,F401  (registers vm.builtin.check_container)
from . import maps  # noqa: E402,F401  (registers vm.builtin.check_map)
from . import assumptions  # noqa: E402,F401  (registers vm.builtin.check_dims)

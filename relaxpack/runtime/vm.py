"""The virtual machine: runs an :class:`Executable` with numpy.

On creation the VM resolves every function-table entry (kernels, builtins,
bytecode functions), binds constants and immediates, specializes builtins on
their immediate arguments, and turns each instruction into a closure; a call
then only moves values between registers and calls kernels.

>>> vm = VirtualMachine(exe)                      # doctest: +SKIP
>>> vm.run({"x": x})["y"]                         # doctest: +SKIP
>>> vm["main"](x)                                 # doctest: +SKIP

For work from untrusted archives or inputs, budgets bound each call
(:mod:`.budget`): ``VirtualMachine(exe, max_steps=10**7, timeout=5.0,
max_memory=1 << 30)`` stops a call that goes past them with a
:class:`~relaxpack.errors.BudgetError`.
"""

from __future__ import annotations

import copy
import threading
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import ArchiveError, ExecutionError, InputError, RelaxpackError, ShapeError
from .budget import Budget, metered
from .builtins import BUILTINS
from .call_signature import Signature
from .fpstate import restore, silence
from .frame_stack import RELAY_STEP, RELAYS, first_runs, relay_for, stack_local
from .func_ref import FunctionRef
from .containers import CONTAINER_KINDS, as_input
from .maps import MAP_KINDS, as_map_input
from .bytecode import CONST, FUNC, IMM, NO_DST, REG, Call, Goto, If, Ret, VMFunction
from .compiled import Compiled, Resolved, compile_counting, compile_function, pc_of
from .executable import Executable
from .kernels import get_kernel
from .kernels._registry import BoundFlags, bare_ufunc
from .output_copy import OutputDetacher, fresh_returns
from .registry import FUNC_KIND, check_registered, resolve
from .shape_program import ShapeProgramError

Step = Callable[[list], int]


class _Prepared:
    __slots__ = ("func", "steps", "labels", "num_registers", "resolved", "compiled", "plain", "direct",
                 "stack_need")

    def __init__(self, func: VMFunction):
        self.func = func
        self.steps: list[Step] = []
        self.labels: list[str] = []   # what each instruction calls, for error messages
        self.num_registers = func.num_registers
        self.resolved: dict[int, Resolved] = {}   # each call as prepared (for compiled.py)
        self.compiled: Compiled | None = None     # the function compiled (the memo variant if any)
        self.plain: Compiled | None = None        # compiled without the memo
        self.direct: tuple | None = None          # what VirtualMachine._direct gives, once made
        self.stack_need = 0     # frame-stack bytes a compiled run needs; 0, -1: not yet measured (frame_stack.py)


class VirtualMachine:
    """Executes bytecode functions of an executable.

    ``max_steps`` (instructions), ``timeout`` (seconds) and ``max_memory``
    (bytes of the arrays the VM allocates) bound every call; None is no limit.
    """

    def __init__(self, exe: Executable, *, max_steps: int | None = None, timeout: float | None = None,
                 max_memory: int | None = None):
        self.exe = exe
        self._limits = {"max_steps": max_steps, "timeout": timeout, "max_memory": max_memory}
        budget = Budget(max_steps, timeout, max_memory)
        self._budget = budget if budget.counts_steps or max_memory is not None else None
        self._counting = self._budget if budget.counts_steps else None
        self._metering = self._budget if max_memory is not None else None
        self._running = threading.Lock()
        self._index = {name: i for i, name in enumerate(exe.functions)}
        check_registered(exe)   # every missing registered function in one error, before any lookup
        self._prepared = [_Prepared(f) for f in exe.functions.values()]
        self._callees = [self._resolve(i, entry) for i, entry in enumerate(exe.func_table)]
        self._detach = OutputDetacher(exe.constants)   # outputs never alias inputs or constants
        self._signatures = {name: Signature(exe.functions[name], i) for name, i in self._index.items()}
        for prepared in self._prepared:
            prepared.steps = [self._prepare_checked(prepared, pc, ins)
                              for pc, ins in enumerate(prepared.func.instructions)]
            prepared.labels = [self._label(ins) for ins in prepared.func.instructions]
            prepared.compiled, prepared.plain = self._compile(prepared)
        #: per function: its outputs are arrays it allocates itself (output_copy.fresh_returns)
        self._fresh = [self._fresh_returns(prepared) for prepared in self._prepared]
        #: False: run the step interpreter (the profiler times its steps)
        self.compiled = True

    def _compile(self, prepared: _Prepared) -> tuple:
        """(what runs, the same without the memo) of compiled.py, or (None, None): the interpreter.
        A VM that counts steps compiles the counting variant (the same counts as the loop below)."""
        func = prepared.func
        if self._counting is not None:
            counting = compile_counting(func.instructions, prepared.resolved, len(func.params), func.name,
                                        self._counting)
            return counting, counting
        memo, plain = compile_function(func.instructions, prepared.resolved, len(func.params), func.name)
        return memo or plain, plain

    def _fresh_returns(self, prepared: _Prepared) -> bool:
        table = self.exe.func_table
        labels = {pc: table[ins.func].label for pc, ins in enumerate(prepared.func.instructions)
                  if isinstance(ins, Call) and table[ins.func].kind in ("builtin", "packed")}
        return fresh_returns(prepared.func.instructions, labels, len(prepared.func.params))

    def __reduce__(self):
        """A VM pickles as its executable (which reopens its archive by path, see
        :meth:`Executable.__reduce__`) and its budgets; the unpickled VM is prepared afresh,
        with empty arenas."""
        limits = self._limits
        return (_rebuild, (self.exe, limits)) if any(v is not None for v in limits.values()) \
            else (VirtualMachine, (self.exe,))

    # ------------------------------------------------------------ public API
    def __getitem__(self, name: str) -> Callable[..., Any]:
        if name not in self._index:
            raise InputError(f"no function {name!r}; the executable has {sorted(self._index)}")
        index = self._index[name]
        return lambda *args: self._call_exclusive(index, args)

    def _call_exclusive(self, index: int, args) -> Any:
        """One call at a time: the VM's arenas belong to the call running on it.

        A second thread calling the same VM gets an error instead of a wrong
        answer; threads share one loaded Executable with a VM each.
        """
        if not self._running.acquire(False):        # (not blocking; the keyword costs ~0.1 us a run)
            raise ExecutionError("this VirtualMachine is already running (on another thread?); create one "
                                 "VirtualMachine per thread: they can share one loaded Executable")
        try:
            if self.exe.source_check is not None:
                self.exe.source_check()     # a mapped archive rewritten since loading would give wrong answers
            if self._budget is not None:
                self._budget.start()
            # inf and nan propagate as IEEE arithmetic says, without numpy's warnings (as in onnxruntime)
            token = silence()
            try:
                prepared = self._prepared[index]
                compiled = prepared.compiled
                if compiled is not None and self.compiled and len(args) == len(prepared.func.params):
                    try:            # _invoke's compiled path, one call less
                        need, words = prepared.stack_need, getattr(stack_local, "words", None)
                        if need <= 0 or words is None:
                            result, prepared.stack_need = first_runs(compiled.run, args, need)
                        elif words is False or words[2] - words[1] >= need:
                            result = compiled.run(*args)
                        else:       # the caller's frame stack ends too near a chunk's end
                            left = words[2] - words[1]
                            relay = RELAYS.get((left // RELAY_STEP, need)) or relay_for(left, need)
                            result = relay(compiled.run, args)
                    except Exception as err:  # noqa: BLE001 - named as _invoke names it
                        pc = pc_of(err.__traceback__, compiled, prepared.plain)
                        if pc is None:
                            raise
                        _raise_named(err, prepared, pc)
                else:
                    result = self._invoke(index, args)
            finally:
                restore(token)
            return result if self._fresh[index] else self._detach(result, args)
        finally:
            self._running.release()

    def run(self, inputs: Mapping[str, Any], function: str = "main") -> dict[str, Any]:
        """Run ``function`` on named inputs; returns outputs by name."""
        sig = self._signatures.get(function)
        if sig is None or type(inputs) is not dict or len(inputs) != len(sig.names):
            sig = self._checked_signature(inputs, function)
        try:
            args = sig.take(inputs)
        except KeyError:
            sig = self._checked_signature(inputs, function)     # raises: an input is missing
            args = sig.take(inputs)
        for a in args:          # (a loop, not all(): this is most of a small model's fixed cost)
            if not sig.arrays or type(a) is not np.ndarray:
                args = [_as_value(a, p) for a, p in zip(args, sig.params)]
                break
        result = self._call_exclusive(sig.index, args)
        values = (result,) if sig.single else result
        if len(values) != len(sig.outputs):
            raise RelaxpackError(f"function {function!r} returned {len(values)} values for "
                                 f"{len(sig.outputs)} outputs")
        return sig.named(values)

    def _checked_signature(self, inputs, function: str) -> Signature:
        """``function``'s signature once ``inputs`` name exactly its inputs (else an InputError)."""
        func = self.exe.function(function)
        names = [p.name for p in func.params]
        if not isinstance(inputs, Mapping):
            raise InputError(f"run takes the inputs by name, e.g. {{{', '.join(repr(n) + ': ...' for n in names[:3])}}}"
                             f", got a {type(inputs).__name__}; vm[{function!r}](*arrays) takes them by position")
        unknown = sorted(set(inputs) - set(names))
        if unknown:
            raise InputError(f"unknown input(s) {unknown}; the model's inputs are {names}")
        missing = [n for n in names if n not in inputs]
        if missing:
            raise InputError(f"missing input(s) {missing}; the model's inputs are {names}")
        return self._signatures[function]

    # ------------------------------------------------------------ execution
    def _invoke(self, index: int, args) -> Any:
        prepared = self._prepared[index]
        func = prepared.func
        if len(args) != len(func.params):
            raise InputError(f"{func.name} takes {len(func.params)} inputs "
                             f"({', '.join(p.name for p in func.params)}), got {len(args)}")
        if prepared.compiled is not None and self.compiled:
            try:
                return prepared.compiled.run(*args)
            except Exception as err:  # noqa: BLE001 - named as the interpreter names it, below
                pc = pc_of(err.__traceback__, prepared.compiled, prepared.plain)
                if pc is None:
                    raise
                _raise_named(err, prepared, pc)
        regs: list = [None] * (prepared.num_registers + 1)
        regs[:len(args)] = args
        steps = prepared.steps
        pc = 0
        budget = self._counting
        try:
            if budget is None:
                while pc >= 0:
                    pc = steps[pc](regs)
            else:               # the same loop, counting instructions for the budget
                tick, limit = budget.counter.__next__, budget.limit
                while pc >= 0:
                    pc = steps[pc](regs)
                    used = tick()
                    if used >= limit:
                        limit = budget.checkpoint(used, func.name)
        except Exception as err:  # noqa: BLE001
            _raise_named(err, prepared, pc)
        return regs[-1]

    def _direct(self, index: int, num_args: int):
        """What :meth:`FunctionRef.direct` gives: the compiled function ``index`` (compiled.py) and
        ``_invoke``'s error naming, while this VM runs compiled code; else None."""
        prepared = self._prepared[index]
        compiled, plain = prepared.compiled, prepared.plain
        if compiled is None or not self.compiled or num_args != len(prepared.func.params):
            return None
        if prepared.direct is None:
            def name_error(err: Exception):
                pc = pc_of(err.__traceback__, compiled, plain, compiled.warm)
                if pc is None:
                    raise err
                _raise_named(err, prepared, pc)
            prepared.direct = compiled, name_error
        return prepared.direct

    # ------------------------------------------------------------ preparation
    def _resolve(self, index: int, entry) -> Callable:
        if entry.kind == "vm":
            target = self._index[entry.name]
            return lambda *args: self._invoke(target, args)
        if entry.kind == "builtin":
            fn = BUILTINS.get(entry.name)
            if fn is None:
                raise ArchiveError(f"unknown VM builtin {entry.name!r}")
            return fn
        if entry.kind in ("kernel", "packed", FUNC_KIND):
            fn = resolve(entry.kind, entry.name)
            if fn is None:  # a kernel this runtime lacks (funcs were checked in __init__)
                return get_kernel(entry.name).fn
            return fn
        raise ArchiveError(f"unknown function-table kind {entry.kind!r}")

    def _operand(self, func: VMFunction, operand) -> tuple[bool, Any]:
        """(is_register, register index or bound value)."""
        kind, value = operand
        if kind == REG:
            _check_register(func, value)
            return True, value
        if kind == IMM:
            return False, value
        if kind == CONST:
            if not isinstance(value, int) or not 0 <= value < len(self.exe.constants):
                raise ArchiveError(f"{func.name}: constant index {value!r} out of range")
            return False, self.exe.constants[value]
        if kind == FUNC:
            if not isinstance(value, int) or not 0 <= value < len(self._callees):
                raise ArchiveError(f"{func.name}: function index {value!r} out of range")
            entry = self.exe.func_table[value]
            if entry.kind == "vm":
                target = self._index[entry.name]
                return False, FunctionRef(self._callees[value], self, target)
            return False, self._callees[value]
        raise ArchiveError(f"{func.name}: unknown operand kind {kind!r}")

    def _label(self, ins) -> str:
        if isinstance(ins, Call) and isinstance(ins.func, int) and 0 <= ins.func < len(self.exe.func_table):
            return self.exe.func_table[ins.func].label
        return type(ins).__name__.lower()

    def _prepare_checked(self, prepared: _Prepared, pc: int, ins) -> Step:
        func = prepared.func
        try:
            return self._prepare(prepared, pc, ins)
        except ShapeProgramError as err:
            raise type(err)(f"{func.name}: instruction {pc} ({self._label(ins)}): {err}") from None
        except RelaxpackError:
            raise
        except Exception as err:  # a builtin's specialization rejected its immediates
            raise ArchiveError(f"{func.name}: instruction {pc} is malformed: {type(err).__name__}: {err}") from None

    def _prepare(self, prepared: _Prepared, pc: int, ins) -> Step:
        func = prepared.func
        n = len(func.instructions)
        if isinstance(ins, Ret):
            _check_register(func, ins.src)
            src, last = ins.src, func.num_registers

            def ret(regs):
                regs[last] = regs[src]
                return -1
            return ret
        if isinstance(ins, Goto):
            target = _jump(func, pc, ins.offset, n)
            return lambda regs: target
        if isinstance(ins, If):
            _check_register(func, ins.cond)
            cond, nxt, target = ins.cond, pc + 1, _jump(func, pc, ins.false_offset, n)
            return lambda regs: nxt if regs[cond] else target
        if isinstance(ins, Call):
            return self._prepare_call(prepared, pc, ins)
        raise ArchiveError(f"{func.name}: unknown instruction {ins!r}")

    def _prepare_call(self, prepared: _Prepared, pc: int, ins: Call) -> Step:
        func = prepared.func
        if not isinstance(ins.func, int) or not 0 <= ins.func < len(self._callees):
            raise ArchiveError(f"{func.name}: call of function index {ins.func!r} out of range")
        fn = self._callees[ins.func]
        args = [self._operand(func, a) for a in ins.args]
        kwargs = [(k, *self._operand(func, v)) for k, v in ins.kwargs]
        n_static = getattr(fn, "n_static", 0)
        static: tuple = ()
        if n_static and len(args) >= n_static and not any(is_reg for is_reg, _ in args[:n_static]):
            static = tuple(v for _, v in args[:n_static])
            fn = fn.specialize(*static)
            args = args[n_static:]
        fn, kwargs = _specialize_kernel(fn, args, kwargs)
        if ins.dst != NO_DST:
            _check_register(func, ins.dst)
        entry = self.exe.func_table[ins.func]
        if self._metering is not None:
            fn = metered(entry, fn, static, args, self._metering, entry.label)
        prepared.resolved[pc] = Resolved(fn, tuple(args), tuple(kwargs), ins.dst, entry.name)
        return _make_call_step(fn, args, kwargs, ins.dst, pc + 1, entry.label)


def _rebuild(exe: Executable, limits: dict) -> "VirtualMachine":
    """An unpickled VM with the budgets it was pickled with."""
    return VirtualMachine(exe, **limits)


def _raise_named(err: Exception, prepared: _Prepared, pc: int):
    """Raise ``err``, raised by instruction ``pc``, as the VM reports it: shape errors name the
    ONNX node, others the instruction (a RelaxpackError from a nested call passes unchanged)."""
    func = prepared.func
    if isinstance(err, ShapeProgramError):   # raised without knowing where: say which instruction
        raise type(err)(f"{func.name}: instruction {pc} ({prepared.labels[pc]}): {err}") from None
    if isinstance(err, ShapeError):
        named = _naming_node(err, func, pc)
        if named is err:
            raise err
        raise named from err
    if isinstance(err, RelaxpackError):
        raise err
    if isinstance(err, RecursionError):
        raise ExecutionError(f"{func.name}: calls nest too deeply (recursion in the bytecode?)") from None
    # a kernel or builtin rejected what the bytecode gave it
    node = _node_text(func, pc)
    raise ExecutionError(f"{func.name}: instruction {pc} ({prepared.labels[pc]}"
                         f"{', ' + node if node else ''}) failed: {_describe(err)}") from err


def _specialize_kernel(fn, args: list, kwargs: list) -> tuple[Callable, list]:
    """A kernel with ``specialize_attrs`` (see ``kernels/_registry.py``) whose attributes are all
    bound values gets its own callable for this instruction: ``fn.specialize_attrs(attrs,
    constant)``, ``constant`` saying which positional operands are bound values (constants,
    immediates: the same values every call), then called with the operands, ``out`` and
    ``workspace`` only."""
    specialize = getattr(fn, "specialize_attrs", None)
    if specialize is None and len(kwargs) == 1 and kwargs[0][:2] == ("out", True):
        ufunc = bare_ufunc(fn, len(args))
        return (fn, kwargs) if ufunc is None else (ufunc, kwargs)       # compiled code passes out positionally
    if specialize is None or any(is_reg and k not in _PER_CALL for k, is_reg, _ in kwargs):
        return fn, kwargs
    attrs = {k: v for k, is_reg, v in kwargs if not is_reg}
    constant = BoundFlags(tuple(v for _, v in args), tuple(not is_reg for is_reg, _ in args))
    return specialize(attrs, constant), [kw for kw in kwargs if kw[1]]


#: keywords a specialized kernel still takes per call
_PER_CALL = ("out", "workspace")


def _make_call_step(fn, args, kwargs, dst: int, nxt: int, label: str) -> Step:
    static_kwargs = {k: v for k, is_reg, v in kwargs if not is_reg}
    reg_kwargs = [(k, v) for k, is_reg, v in kwargs if is_reg]
    keep = dst != NO_DST
    by_name = dict(reg_kwargs)
    if len(args) <= _MAX_FAST_ARGS and set(by_name) <= {"out", "workspace"}:
        # the common shapes (a kernel's operands, its ``out`` and planned
        # ``workspace``, a builtin's operands) get a step that indexes its
        # registers directly
        kinds = "".join("r" if is_reg else "c" for is_reg, _ in args)
        factory = _step_factory(kinds, "out" in by_name, "workspace" in by_name, bool(static_kwargs), keep)
        return factory(fn, dst, nxt, by_name.get("out"), by_name.get("workspace"), static_kwargs,
                       *(v for _, v in args))

    reg_args = [(i, v) for i, (is_reg, v) in enumerate(args) if is_reg]
    template = [v for _, v in args]

    def step(regs):
        values = list(template)
        for i, r in reg_args:
            values[i] = regs[r]
        kw = dict(static_kwargs)
        for k, r in reg_kwargs:
            kw[k] = regs[r]
        result = fn(*values, **kw)
        if keep:
            regs[dst] = result
        return nxt
    return step


#: calls with at most this many positional operands get a specialized step
_MAX_FAST_ARGS = 6
_STEP_FACTORIES: dict[tuple, Callable] = {}


def _step_factory(kinds: str, has_out: bool, has_ws: bool, has_static: bool, keep: bool) -> Callable:
    """``factory(fn, dst, nxt, out, ws, kw, *operands) -> step`` for calls whose
    positional operands are registers (``"r"``) or bound values (``"c"``) as
    ``kinds`` says, made once per shape of call. The source is built from
    ``kinds`` and the four flags only (never from archive data): every value
    is a closure variable."""
    key = (kinds, has_out, has_ws, has_static, keep)
    factory = _STEP_FACTORIES.get(key)
    if factory is None:
        names = [f"a{i}" for i in range(len(kinds))]
        operands = [f"regs[{n}]" if k == "r" else n for n, k in zip(names, kinds)]
        operands += ["out=regs[out]"] * has_out + ["workspace=regs[ws]"] * has_ws + ["**kw"] * has_static
        call = f"fn({', '.join(operands)})"
        source = (f"def factory(fn, dst, nxt, out, ws, kw{''.join(', ' + n for n in names)}):\n"
                  f"    def step(regs):\n"
                  f"        {'regs[dst] = ' if keep else ''}{call}\n"
                  f"        return nxt\n"
                  f"    return step\n")
        namespace: dict = {}
        exec(source, namespace)  # noqa: S102 (a fixed template; see the docstring)
        factory = _STEP_FACTORIES[key] = namespace["factory"]
    return factory


def _describe(err: Exception) -> str:
    """``Type: message``; a MemoryError without a message says what it means."""
    text = " ".join(str(err).split())
    if not text and isinstance(err, MemoryError):
        text = "out of memory"
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _check_register(func: VMFunction, reg) -> None:
    if isinstance(reg, bool) or not isinstance(reg, int) or not 0 <= reg < func.num_registers:
        raise ArchiveError(f"{func.name}: register {reg!r} out of range 0..{func.num_registers - 1}")


def _jump(func: VMFunction, pc: int, offset, n: int) -> int:
    if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= pc + offset < n:
        raise ArchiveError(f"{func.name}: jump at {pc} by {offset!r} leaves the function")
    return pc + offset


def _as_value(value, param):
    """An input as the VM takes it: tensors as numpy arrays (no dtype change), sequences as tuples,
    maps as canonical dicts."""
    if param.kind in CONTAINER_KINDS:
        return as_input(value, param.name, param.kind, param.dtype, param.ndim)
    if param.kind in MAP_KINDS:
        return as_map_input(value, param.name, param.kind, param.key_dtype, param.dtype)
    if param.kind == "tensor":
        if param.dtype == "string":
            return _string_input(value, param.name)
        if isinstance(value, np.ndarray):
            return value
        try:
            return np.asarray(value)
        except Exception as err:
            raise InputError(f"input {param.name!r}: cannot be read as an array ({err})") from None
    return value


def _string_input(value, name: str) -> np.ndarray:
    """A string input as the kernels take it: an object array of ``str``.

    numpy ``str_`` arrays (``np.array(["a", "b"])``) and lists convert;
    ``bytes`` (numpy ``S`` arrays, ONNX's own representation) are decoded as
    UTF-8. Anything else, numbers included, is an InputError.
    """
    try:
        array = value if isinstance(value, np.ndarray) else np.asarray(value, dtype=object)
    except Exception as err:
        raise InputError(f"input {name!r}: cannot be read as an array of strings ({err})") from None
    if array.dtype.kind not in "OSU":
        raise InputError(f"input {name!r}: has dtype {array.dtype}, expected string (str or object array)")
    if array.dtype == object and all(type(s) is str for s in array.flat):
        return array
    out = np.empty(array.shape, dtype=object)
    flat = out.reshape(-1)
    for i, s in enumerate(array.flat):
        if isinstance(s, bytes):
            try:
                s = s.decode("utf-8")
            except UnicodeDecodeError:
                raise InputError(f"input {name!r}: element {i} is bytes that are not valid UTF-8") from None
        elif not isinstance(s, str):
            raise InputError(f"input {name!r}: element {i} is a {type(s).__name__}, expected str")
        flat[i] = str(s)
    return out


def _node_text(func: VMFunction, pc: int) -> str:
    """``ONNX node '/Add'`` (or ``ONNX nodes '/Mul', '/Add'``) for instruction ``pc``; "" when no node made it."""
    spans = func.instruction_spans()
    nodes = spans[pc] if 0 <= pc < len(spans) else ()
    if not nodes:
        return ""
    return f"ONNX node{'s' if len(nodes) > 1 else ''} {', '.join(repr(n) for n in nodes)}"


def _naming_node(err: ShapeError, func: VMFunction, pc: int) -> ShapeError:
    """``err`` with the ONNX node of instruction ``pc`` in front: a kernel knows the values
    that do not fit, the span says which node of the model asked for them. Messages that
    name their node already (the assumption checks, a loop body's) stay as they are."""
    node = _node_text(func, pc)
    if not node or str(err).startswith("ONNX node"):
        return err
    named = copy.copy(err)
    named.args = (f"{node}: {err}",)
    return named

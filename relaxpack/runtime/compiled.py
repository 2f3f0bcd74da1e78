"""A bytecode function compiled to one Python function: registers as locals, calls in a row.

The interpreter (``vm.py``) runs a function as a list of steps: per
instruction a Python call of the step, then of the kernel, a register list
read and written, the loop around them. :func:`compile_function` turns a
function whose jumps form if/else diamonds (what codegen emits) into the
source of one Python function: each instruction one line ``r7 =
f12(r3, b12_1, out=r5)``, registers as local variables, every callee and
bound value a closure variable. The source is made from register and
instruction numbers only; no name or value from the archive is part of it
(attributes reach the callee through a dict), so an archive cannot inject
code. A function of any other shape (a hostile archive's jumps) is not
compiled and stays with the interpreter.

**Shape-pure instructions, once per input shape.** ``make_shape``,
``eval_dim``, ``plan_arena`` and ``arena_tensor`` compute from the shape
heap alone (and from each other): the dims, the memory plan, the views
into the arena; so does a ``reshape_view`` of such a view (by a memoized
shape), an alias of arena memory whatever is written there later. Right after the input checks the compiled function looks
the heap up in a small memo (per VM, per function); on a hit it takes all
of them at once instead of making ~100 calls on a transformer. When an
arena grows the memo starts afresh, so it never keeps an outgrown arena
alive. Each branch of an if has a memo of its own, looked up before the
branch's first such instruction (a model wrapped in an If, silero's sample
rate switch, runs its shape work once per shape as inline code does). A
memo holds instructions up to the next write to the heap (a ``match_shape``
of a data-dependent result), reading only the heap and each other; after
such a write another memo starts, keyed by the heap there and by the shapes
and arena plans of the memos before it. If working them out fails, the call
reruns without the memos (every instruction is a function of its operands),
so errors are the interpreter's. Kernels whose outputs are shape-only
values (causal masks, position tables: see shape_memo.py) run in the fill too,
their outputs kept read-only.

Errors keep naming their instruction: each instruction is one line of the
source, and :func:`pc_of` maps a traceback's line back to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .bytecode import IMM, NO_DST, Call, Goto, If, Ret
from .shape_memo import MEMO_ENTRIES, Memo, filler, memo_capacity, memo_plans, write_counts

#: the input checks the check cache may skip: functions of the inputs' shapes and dtypes and the heap
INPUT_CHECKS = frozenset({"vm.builtin.alloc_shape_heap", "vm.builtin.check_tensor", "vm.builtin.match_shape",
                          "vm.builtin.check_dims"})


@dataclass(frozen=True)
class Resolved:
    """A call as the VM prepared it: the callee (specialized), its operands
    ``[(is_register, register or bound value)]``, keywords ``[(name, is_register, value)]``,
    the destination register and the function-table name."""

    fn: Callable
    args: tuple
    kwargs: tuple
    dst: int
    name: str


class Compiled:
    """The compiled function (``run(*params)``) and what maps its lines back to instructions."""

    __slots__ = ("run", "lines", "first_line", "memos", "checked", "warm", "top", "make_warm", "steady")

    def __init__(self, run: Callable, lines: list[int], first_line: int, memos: list[dict], checked: dict,
                 top: int | None = None):
        self.run, self.lines, self.first_line = run, lines, first_line
        self.memos = memos     # per memo: heap -> the memoized instructions' results
        self.checked = checked  # the input-check cache: the inputs' shapes and dtypes -> the heap they leave
        self.top = top          # the memo looked up right after the input checks, if any
        #: the warm variant (``warm.run(w, *params)``, see :meth:`warm_state`) once made
        self.warm: Compiled | None = None
        self.make_warm: Callable | None = None   # makes it (first asked for by a loop), None: has none
        #: per field of the tuple the function returns, whether its shape and dtype are the same on
        #: every call (:func:`steady_returns`); () when it returns no tuple made by make_tuple
        self.steady: tuple[bool, ...] = ()

    def warm_variant(self) -> "Compiled | None":
        """The warm variant, compiled on first use (a function no loop calls never needs it)."""
        if self.warm is None and self.make_warm is not None:
            self.warm = self.make_warm()
        return self.warm

    def warm_state(self, args) -> tuple | None:
        """What the warm variant takes in place of the input checks and the top memo's lookup
        for inputs of the shapes and dtypes of ``args``: the heap those checks left on an
        earlier passing call and the memo's values for it, as this function's own caches hold
        them; None when it has no warm variant or the caches hold neither. A caller that passes
        it with inputs of other shapes or dtypes gets wrong answers: a loop passes it only while
        the body's inputs keep the shapes and dtypes of ``args`` (runtime/loop.py)."""
        if self.warm_variant() is None:
            return None
        key = []
        for a in args:
            if type(a) is not np.ndarray:
                return None
            key += (a.shape, a.dtype)
        heap = self.checked.get(tuple(key))
        if heap is None:
            return None
        if self.top is None:
            return heap, ()
        values = self.memos[self.top].get(heap)
        return None if values is None else (heap, values)

    @property
    def memo(self) -> dict:
        """The first memo's store (the function's top level, where it has one); empty without."""
        return self.memos[0] if self.memos else {}


def compile_function(instructions: Sequence, resolved: dict[int, Resolved], num_params: int,
                     label: str) -> tuple[Compiled | None, Compiled | None]:
    """(with the memo, without it) for a structurable function, else ``(None, None)``; the first
    is None when nothing can be memoized."""
    tree = _structure(instructions, 0, len(instructions))
    if tree is None or not tree or tree[-1][0] != "ret" or not _plain_ints(instructions, resolved):
        return None, None      # (a function that may run off its end fails in the interpreter, as before)
    memos = memo_plans(instructions, tree, resolved)
    checks = _input_check_plan(tree, resolved, num_params)
    plain = _generate(instructions, tree, resolved, num_params, label, (), checks=checks)
    main = _generate(instructions, tree, resolved, num_params, label, memos, plain.run, checks=checks) \
        if memos else plain
    if checks is not None and _warmable(tree, checks, memos):
        main.make_warm = lambda: _generate(instructions, tree, resolved, num_params, label, memos, plain.run,
                                           checks=checks, warm=True)
        main.steady = steady_returns(instructions, resolved, num_params)
    return (main if memos else None), plain


def _warmable(tree, checks: "_Checks", memos) -> bool:
    """A warm variant can stand for the function: the top memo (if any) is looked up right
    after the cached input checks, so the heap it is keyed by is the heap the checks leave."""
    top = [memo for memo in memos if memo.items == id(tree) and not memo.later]
    return not top or top[0].at == checks.count


def compile_counting(instructions: Sequence, resolved: dict[int, Resolved], num_params: int, label: str,
                     budget) -> Compiled | None:
    """The function compiled to count its instructions against ``budget`` (runtime/budget.py) as
    the interpreter's counting loop does: one count after each instruction (an if's in the branch
    it takes, a goto's at the end of the then branch), the budget's checkpoint when the count
    reaches its limit; so a call stops at the same instruction, compiled or not. No memo (it
    would skip counted instructions). None where the function cannot be compiled."""
    tree = _structure(instructions, 0, len(instructions))
    if tree is None or not tree or tree[-1][0] != "ret" or not _plain_ints(instructions, resolved):
        return None
    return _generate(instructions, tree, resolved, num_params, label, (), budget=budget)


def pc_of(traceback, *compiled: Compiled) -> int | None:
    """The instruction whose line raised: the first frame of the traceback that runs one of
    ``compiled`` on an instruction's line (the memo's lookup lines run none)."""
    codes = {c.run.__code__: c for c in compiled if c is not None}
    tb = traceback
    while tb is not None:
        c = codes.get(tb.tb_frame.f_code)
        if c is not None:
            index = tb.tb_lineno - c.first_line
            pc = c.lines[index] if 0 <= index < len(c.lines) else -1
            if pc >= 0:
                return pc
        tb = tb.tb_next
    return None


# ---------------------------------------------------------------- structure


def _plain_ints(instructions, resolved) -> bool:
    """Every register number that goes into the source is a plain int (what the loader gives;
    ``_check_register`` accepted int subclasses too, whose text could be anything)."""
    regs = [r.dst for r in resolved.values()]
    regs += [v for r in resolved.values() for is_reg, v in r.args if is_reg]
    regs += [v for r in resolved.values() for _, is_reg, v in r.kwargs if is_reg]
    regs += [i.src for i in instructions if isinstance(i, Ret)] + [i.cond for i in instructions if isinstance(i, If)]
    return all(type(v) is int for v in regs)


def _structure(instrs, start: int, end: int):
    """Items of ``[start, end)``: ``("call", pc)``, ``("ret", pc)``, ``("if", pc, then, else)``; None
    unless every jump closes an if/else diamond (``if c else goto E`` ... ``goto J`` / ``E:`` ... ``J:``)."""
    items, pc = [], start
    while pc < end:
        ins = instrs[pc]
        if isinstance(ins, Call):
            items.append(("call", pc))
            pc += 1
        elif isinstance(ins, Ret):
            items.append(("ret", pc))
            pc += 1
        elif isinstance(ins, If):
            else_start = pc + ins.false_offset
            if not pc + 2 <= else_start <= end or not isinstance(instrs[else_start - 1], Goto):
                return None
            join = else_start - 1 + instrs[else_start - 1].offset
            if not else_start <= join <= end:
                return None
            then = _structure(instrs, pc + 1, else_start - 1)
            other = _structure(instrs, else_start, join)
            if then is None or other is None:
                return None
            items.append(("if", pc, then, other))
            pc = join
        else:
            return None        # a goto that closes no diamond
    return items


# ---------------------------------------------------------------- what the function returns


def steady_returns(instrs, resolved, num_params: int) -> tuple[bool, ...]:
    """Per field of the tuple the function returns (its one ``ret`` of a register written once,
    by ``make_tuple``), whether the field has the same shape and dtype on every call, read
    from the bytecode alone: its register is written once, by ``alloc_tensor`` of an
    immediate dtype and shape (kernels write into it with ``out=``; the register keeps the
    array), or it is parameter ``k`` returned as field ``k - 1`` untouched (a loop body's
    state passed through: the same array as its input). () when the function returns
    otherwise. A loop uses it to skip comparing such state (runtime/loop.py)."""
    rets = [ins for ins in instrs if isinstance(ins, Ret)]
    written = write_counts(instrs)
    if len(rets) != 1 or written.get(rets[0].src, 0) != 1:
        return ()
    make = [r for r in resolved.values() if r.dst == rets[0].src]
    if len(make) != 1 or make[0].name != "vm.builtin.make_tuple" or make[0].kwargs:
        return ()
    allocs = {pc for pc, r in resolved.items() if r.name == "vm.builtin.alloc_tensor"}
    fixed = {instrs[pc].dst for pc in allocs if _immediate_alloc(instrs[pc])}

    def steady(k: int, operand) -> bool:
        is_reg, reg = operand
        if not is_reg or written.get(reg, 0) > 1:
            return False
        return reg in fixed and written[reg] == 1 or reg == k + 1 and reg < num_params and reg not in written
    return tuple(steady(k, a) for k, a in enumerate(make[0].args))


def _immediate_alloc(ins) -> bool:
    """``alloc_tensor(dtype, shape)`` of immediates: a dtype name, a tuple of plain ints."""
    if len(ins.args) != 2 or ins.kwargs or any(kind != IMM for kind, _ in ins.args):
        return False
    dtype, shape = ins.args[0][1], ins.args[1][1]
    return isinstance(dtype, str) and type(shape) is tuple and all(type(d) is int and d >= 0 for d in shape)


# ---------------------------------------------------------------- the input-check cache


@dataclass(frozen=True)
class _Checks:
    heap: int     # the heap register (alloc_shape_heap's result)
    count: int    # the function's first ``count`` items: the input checks the cache skips


def _input_check_plan(tree, resolved, num_params: int) -> _Checks | None:
    """The function's leading input checks, when the cache may stand in for them: calls of
    :data:`INPUT_CHECKS` only, reading only the parameters and the heap, writing nothing but
    the heap (one ``alloc_shape_heap``). Then what they do (raise, or fill the heap) depends on
    the inputs' shapes and dtypes alone, and a call whose numpy arrays have the shapes and
    dtypes of an earlier passing call takes that call's heap (a copy) instead of running them."""
    count, heap = 0, None
    for item in tree:
        if item[0] != "call" or resolved[item[1]].name not in INPUT_CHECKS:
            break
        r = resolved[item[1]]
        if r.name == "vm.builtin.alloc_shape_heap":
            if heap is not None or r.dst == NO_DST:
                return None
            heap = r.dst
        elif r.dst != NO_DST:
            return None
        regs = [v for is_reg, v in r.args if is_reg] + [v for _, is_reg, v in r.kwargs if is_reg]
        if any(v != heap and not 0 <= v < num_params for v in regs):
            return None
        count += 1
    if heap is None or heap < num_params or not any(resolved[item[1]].name != "vm.builtin.alloc_shape_heap"
                                                      for item in tree[:count]):
        return None
    return _Checks(heap, count)


def _remember_checks(store: dict, capacity: int = MEMO_ENTRIES):
    """``remember(key, heap)``: keeps the heap the checks left for ``key``, at most ``capacity``
    keys (then it starts afresh)."""
    def remember(key, heap) -> None:
        if len(store) >= capacity:
            store.clear()
        store[key] = tuple(heap)
    return remember


# ---------------------------------------------------------------- source


def _generate(instrs, tree, resolved, num_params: int, label: str, memos: Sequence[Memo],
              plain: Callable | None = None, budget=None, checks: _Checks | None = None,
              warm: bool = False) -> Compiled:
    """The compiled function; with ``memos``, ``plain`` is the same function without them (run when
    a memo cannot be filled); with ``budget``, counting (see :func:`compile_counting`); with
    ``checks``, the input checks cached by the inputs' shapes and dtypes (:func:`_input_check_plan`).
    ``warm``: the warm variant ``run(w, *params)``, which takes the heap and the top memo's
    values from ``w`` (:meth:`Compiled.warm_state`) instead of running the checks and the lookup."""
    bound: dict[str, object] = {}
    lines: list[tuple[str, int]] = []        # (source line, pc it runs or -1)
    memoized = {pc for memo in memos for pc in memo.pcs}
    lookups = {(memo.items, memo.at): k for k, memo in enumerate(memos)}
    top = next((k for k, memo in enumerate(memos) if memo.items == id(tree) and not memo.later), None)

    def count(pad: str):
        if budget is not None:
            lines.append((f"{pad}if (u := tick()) >= budget.limit: budget.checkpoint(u, label)", -1))

    def call_source(pc: int) -> str:
        r = resolved[pc]
        inline = _inline_tuple_source(pc, r, bound)
        if inline is not None:
            return inline
        bound[f"f{pc}"] = r.fn
        args = _positional_fields(pc, r, bound)
        static = {k: v for k, is_reg, v in r.kwargs if not is_reg}
        if static:
            bound[f"s{pc}"] = static
        named = {k: v for k, is_reg, v in r.kwargs if is_reg}
        plain = {k: v for k, v in named.items() if k in ("out", "workspace")}
        other = {k: v for k, v in named.items() if k not in plain}
        if isinstance(r.fn, np.ufunc) and list(plain) == ["out"] and not other and not static:
            args.append(f"r{plain['out']}")            # a bare ufunc (vm._specialize_kernel): out positional
            plain = {}
        args += [f"{k}=r{v}" for k, v in plain.items()]
        if other:
            bound[f"k{pc}"] = tuple(other)
            args.append("**{" + ", ".join(f"k{pc}[{j}]: r{v}" for j, v in enumerate(other.values())) + "}")
        if static:
            args.append(f"**s{pc}")
        text = f"f{pc}({', '.join(args)})"
        return text if r.dst == NO_DST else f"r{r.dst} = {text}"

    def emit(items, indent: int, start: int = 0):
        pad = " " * indent
        for k, item in enumerate(items):
            if k < start:
                continue
            if (id(items), k) in lookups:
                emit_lookup(pad, lookups[id(items), k])
            kind, pc = item[0], item[1]
            if kind == "call":
                if pc not in memoized:
                    lines.append((pad + call_source(pc), pc))
                    count(pad)
            elif kind == "ret":
                count(pad)
                lines.append((f"{pad}return r{instrs[pc].src}", pc))
            else:
                lines.append((f"{pad}if r{instrs[pc].cond}:", pc))
                count(pad + "    ")                 # the if
                emit(item[2], indent + 4)
                count(pad + "    ")                 # the goto that ends the then branch
                lines.append((f"{pad}    pass", pc))
                lines.append((f"{pad}else:", pc))
                count(pad + "    ")
                emit(item[3], indent + 4)
                lines.append((f"{pad}    pass", pc))

    def emit_checks(plan: _Checks):
        regs = [f"r{i}" for i in range(num_params)]
        if regs:
            lines.append((f"        if {' and '.join(f'type({r}) is ndarray' for r in regs)}:", -1))
            lines.append((f"            key = ({''.join(f'{r}.shape, {r}.dtype, ' for r in regs)})", -1))
            lines.append(("            heap = checked.get(key)", -1))
            lines.append(("        else:", -1))
            lines.append(("            key = heap = None", -1))
        else:
            lines.append(("        key = ()", -1))
            lines.append(("        heap = checked.get(key)", -1))
        lines.append(("        if heap is not None:", -1))
        lines.append((f"            r{plan.heap} = list(heap)", -1))
        lines.append(("        else:", -1))
        emit(tree[:plan.count], 12)
        lines.append(("            if key is not None:", -1))
        lines.append((f"                remember(key, r{plan.heap})", -1))

    def emit_lookup(pad: str, k: int):
        memo = memos[k]
        targets = ", ".join(f"r{resolved[pc].dst}" for pc in memo.pcs if resolved[pc].dst != NO_DST)
        if warm and k == top:
            lines.append((f"{pad}{targets}, = w[1]", -1))
            return
        extras = "".join(f", r{x}" for x in memo.reads)
        key = f"(tuple(r{memo.heap}){extras})" if memo.reads else f"tuple(r{memo.heap})"
        lines.append((f"{pad}m = memo{k}.get({key})", -1))
        lines.append((f"{pad}if m is None:", -1))
        lines.append((f"{pad}    m = fill{k}(r{memo.heap}{extras})", -1))
        lines.append((f"{pad}    if m is None:", -1))
        lines.append((f"{pad}        return plain({', '.join(f'r{i}' for i in range(num_params))})", -1))
        lines.append((f"{pad}{targets}, = m", -1))

    if warm:
        lines.append((f"        r{checks.heap} = list(w[0])", -1))
    elif checks is not None:
        emit_checks(checks)
    emit(tree, 8, checks.count if checks is not None else 0)
    params = ", ".join(["w"] * warm + [f"r{i}" for i in range(num_params)])
    preset = sorted(_read_before_written(instrs, tree, num_params))
    head = [f"def factory({', '.join(['memos', 'fills', 'plain', 'budget', 'label', 'checked', 'remember', 'ndarray'] + sorted(bound))}):",
            *(f"    memo{k}, fill{k} = memos[{k}], fills[{k}]" for k in range(len(memos))),
            f"    def run({params}):"]
    if budget is not None:
        head.append("        tick = budget.counter.__next__")     # a new counter per top-level call
    if preset:
        head.append(f"        {' = '.join(f'r{r}' for r in preset)} = None")
    body = [text for text, _ in lines] or ["        return None"]
    source = "\n".join(head + body + ["    return run"])
    namespace: dict = {}
    variant = " (warm)" if warm else " (memo)" if memos else " (counting)" if budget is not None else ""
    # the file name shows in tracebacks: the function's name as ASCII text, never its raw characters
    exec(compile(source, f"<relaxpack {ascii(label)[:100]}{variant}>", "exec"), namespace)  # noqa: S102
    stores: list[dict] = [{} for _ in memos]
    capacity = memo_capacity(memos)
    fills = [filler(memo, resolved, store, capacity) for memo, store in zip(memos, stores)]
    checked: dict = {}
    run = namespace["factory"](stores, fills, plain, budget, label, checked, _remember_checks(checked, capacity),
                               np.ndarray,
                               **bound)
    return Compiled(run, [pc for _, pc in lines], 1 + len(head), stores, checked, top)


def _positional_fields(pc: int, r: Resolved, bound: dict) -> list[str]:
    """The source of instruction ``pc``'s positional operands: ``r<n>`` for a register, ``b<pc>_<j>``
    for a constant (bound into ``bound`` under that name)."""
    fields = []
    for j, (is_reg, v) in enumerate(r.args):
        if is_reg:
            fields.append(f"r{v}")
        else:
            bound[f"b{pc}_{j}"] = v
            fields.append(f"b{pc}_{j}")
    return fields


def _inline_tuple_source(pc: int, r: Resolved, bound: dict) -> str | None:
    """The line of a ``make_tuple`` or ``tuple_getitem`` call (the builtins themselves, no keywords,
    a destination) as the Python expression its builtin returns, ``r7 = (r3, r5,)`` / ``r8 =
    r6[b9_1]``: the same value without a call (~70 ns each; a classifier's outputs are rebuilt
    by three of them every run). None for any other call."""
    if r.kwargs or r.dst == NO_DST:
        return None
    from .builtins import make_tuple, tuple_getitem     # (builtins imports modules that import this one)
    if r.fn is not make_tuple and (r.fn is not tuple_getitem or len(r.args) != 2):
        return None
    fields = _positional_fields(pc, r, bound)
    if r.fn is tuple_getitem:
        return f"r{r.dst} = {fields[0]}[{fields[1]}]"
    return f"r{r.dst} = ({''.join(f + ', ' for f in fields)})"


def _read_before_written(instrs, tree, num_params: int) -> set[int]:
    """Registers some path may read before writing them (the interpreter's None): preset."""
    needed: set[int] = set()

    def walk(items, assigned: set[int]) -> set[int]:
        assigned = set(assigned)
        for item in items:
            ins = instrs[item[1]]
            if item[0] == "call":
                for reg in _operand_regs(ins):
                    if reg not in assigned:
                        needed.add(reg)
                if ins.dst != NO_DST:
                    assigned.add(ins.dst)
            elif item[0] == "ret":
                if ins.src not in assigned:
                    needed.add(ins.src)
            else:
                if ins.cond not in assigned:
                    needed.add(ins.cond)
                assigned = walk(item[2], assigned) & walk(item[3], assigned)
        return assigned
    walk(tree, set(range(num_params)))
    return needed


def _operand_regs(ins: Call) -> list[int]:
    return [v for kind, v in ins.args if kind == "r"] + [v for _, (kind, v) in ins.kwargs if kind == "r"]


"""Code generation: a legalized IRModule to VM bytecode (an Executable).

Each function gets registers for its parameters, one for the shape heap
(symbolic dims live in heap slots) and one per binding. Inputs are checked
at entry (dtype, rank, constant dims, dim ranges, dims shared between
inputs). ``call_tir`` becomes an allocation of the output and a kernel call
in destination-passing style (with the kernel's planned ``workspace`` when
its op declares one); ``call_packed`` a call that returns its value;
``If`` a conditional jump.
"""

from __future__ import annotations

from ..errors import IRError
from ..ir.dims import free_vars, sym
from ..ir.expr import (
    Call, Constant, ExternFunc, Function, GlobalVar, If, MatchCast, Op, PrimValue, SeqExpr,
    ShapeExpr, StringImm, Tuple, TupleGetItem, Var,
)
from ..ir.module import IRModule
from ..ir.struct_info import (
    OptionalStructInfo, SequenceStructInfo, ShapeStructInfo, StructInfo, TensorStructInfo, TupleStructInfo,
)
from ..runtime.bytecode import CONST, FUNC, IMM, NO_DST, REG, Goto, If as IfInstr, ParamInfo, Ret, VMFunction
from ..runtime.bytecode import Call as CallInstr
from ..runtime.executable import Executable, FuncEntry
from ..runtime.dtypes import numpy_dtype
from ..ops.definitions.memory import RESHAPES, index_view_of
from ..ops.registry import call_workspace
from ..runtime.kernels import KERNELS
from ..runtime.program_check import MAX_TENSOR_BYTES
from ..runtime.registry import FUNC_KIND
from .assumptions import cast_relations, check_entry, entry_key
from .dim_program import dim_program
from .memory_plan import ARENA, Storage, place_arena, plan_figures
from .signature import container_kind, map_kind, value_info


class _ModuleState:
    """What all functions share: the function table and the constants."""

    def __init__(self, mod: IRModule):
        self.mod = mod
        self.func_table: list[FuncEntry] = []
        self._func_index: dict[tuple[str, str], int] = {}
        self.constants: list = []
        self._const_index: dict[int, int] = {}

    def func(self, kind: str, name: str) -> int:
        key = (kind, name)
        if key not in self._func_index:
            self._func_index[key] = len(self.func_table)
            self.func_table.append(FuncEntry(kind, name))
        return self._func_index[key]

    def constant(self, c: Constant) -> int:
        key = id(c.data)
        if key not in self._const_index:
            self._const_index[key] = len(self.constants)
            self.constants.append(c.data)
        return self._const_index[key]


class _FunctionCodegen:
    def __init__(self, state: _ModuleState, name: str, func: Function):
        self.state, self.name, self.func = state, name, func
        self.instrs: list = []
        self.reg_of: dict[Var, int] = {}
        self.num_regs = 0
        self.slot_of: dict[str, int] = {}
        self.ranges = {n: (lo, hi) for n, lo, hi in func.attrs.get("dim_ranges", ())}
        for p in func.params:
            self.reg_of[p] = self.new_reg()
        self.heap = self.new_reg()
        # shape values already computed: valid until a branch ends or a dim is stored
        self.shape_cache: dict[str, int] = {}
        self.span: tuple[str, ...] = ()          # the ONNX nodes of the binding being emitted
        self.span_marks: list[tuple[int, tuple[str, ...]]] = []   # (first pc, span) as bindings start and end
        self.branch_depth = 0                   # inside If branches: checks stay where they are
        self.hoisted: dict[str, tuple] = {}     # relations over input dims, checked after the inputs
        self.owned: set[int] = set()            # registers holding memory this function allocated
        self.plan = True                        # arena views for PlanMemory's storages
        self.storages: dict[int, Storage] = {}  # arena buffer -> what the plan serializes
        self.storage_of: dict[int, int] = {}    # register of an arena view -> its buffer
        self.last_read = -1                     # pc of the last call that read a value register

    # ------------------------------------------------------------ helpers
    def new_reg(self) -> int:
        self.num_regs += 1
        return self.num_regs - 1

    def emit_call(self, dst: int, kind: str, name: str, args=(), kwargs=()) -> None:
        self.instrs.append(CallInstr(dst, self.state.func(kind, name), tuple(args),
                                     tuple(sorted(kwargs, key=lambda kv: kv[0]))))
        if any(k == REG and v not in (self.heap, ARENA) for k, v in (*args, *(v for _, v in kwargs))):
            self.last_read = len(self.instrs) - 1

    def builtin(self, name: str, *args, dst: int | None = None) -> int:
        dst = self.new_reg() if dst is None else dst
        self.emit_call(dst, "builtin", f"vm.builtin.{name}", args)
        return dst

    def slot(self, name: str) -> int:
        if name not in self.slot_of:
            raise IRError(f"{self.name}: symbolic dim {name!r} is used before an input or match_cast "
                          f"defines it")
        return self.slot_of[name]

    def program(self, dim):
        return dim_program(dim, self.slot)

    def shape_operand(self, dims) -> tuple:
        if all(isinstance(d, int) for d in dims):
            return (IMM, tuple(dims))
        programs = tuple(self.program(d) for d in dims)
        key = repr(programs)
        if key not in self.shape_cache:
            self.shape_cache[key] = self.builtin(
                "make_shape", (IMM, programs), (IMM, self.heap_size_placeholder), (REG, self.heap))
        return (REG, self.shape_cache[key])

    # the heap size is known only at the end; a sentinel object is patched then
    heap_size_placeholder = "__heap_size__"

    # ------------------------------------------------------------ entry checks
    def emit_param_checks(self) -> list[ParamInfo]:
        infos = []
        deferred = []
        for p in self.func.params:
            infos.append(self.param_info(p))
            sinfo = p.struct_info
            ctx = f"input {p.name_hint!r}"
            if isinstance(sinfo, TensorStructInfo):
                self.emit_call(NO_DST, "builtin", "vm.builtin.check_tensor",
                               [(REG, self.reg_of[p]), (IMM, sinfo.dtype), (IMM, sinfo.ndim), (IMM, ctx)])
                if sinfo.shape is not None:
                    deferred += self.match_dims(self.reg_of[p], sinfo.shape, ctx, first_pass=True)
            elif isinstance(sinfo, ShapeStructInfo) and sinfo.values is not None:
                deferred += self.match_dims(self.reg_of[p], sinfo.values, ctx, first_pass=True)
            elif map_kind(sinfo) is not None:
                kind, key_dtype, dtype = map_kind(sinfo)
                self.emit_call(NO_DST, "builtin", "vm.builtin.check_map",
                               [(REG, self.reg_of[p]), (IMM, kind), (IMM, key_dtype), (IMM, dtype), (IMM, ctx)])
            elif isinstance(sinfo, (SequenceStructInfo, OptionalStructInfo)):
                kind, dtype, ndim = container_kind(sinfo)
                self.emit_call(NO_DST, "builtin", "vm.builtin.check_container",
                               [(REG, self.reg_of[p]), (IMM, kind), (IMM, dtype), (IMM, ndim), (IMM, ctx)])
        for reg, dims, ctx in deferred:
            self.match_dims(reg, dims, ctx, first_pass=False)
        return infos

    def match_dims(self, reg: int, dims, ctx: str, first_pass: bool):
        """Emit a match_shape. On the first pass, a dim whose vars are not yet
        bound matches anything (``None``) and the value is matched again
        after all inputs are seen; returns what to match again."""
        pattern, deferred = [], False
        for d in dims:
            if isinstance(d, int):
                pattern.append(d)
                continue
            names = free_vars(d)
            if d == _sym(str(d)) and str(d) not in self.slot_of:
                name = str(d)
                self.slot_of[name] = len(self.slot_of)
                self.shape_cache.clear()
                lo, hi = self.ranges.get(name, (0, None))
                pattern.append(("store", self.slot_of[name], name, lo, hi))
            elif names <= set(self.slot_of):
                pattern.append(("eq", self.program(d), str(d)))
            elif first_pass:
                pattern.append(None)
                deferred = True
            else:
                raise IRError(f"{self.name}: {ctx} has dim {d}, whose variables no input defines alone")
        self.emit_call(NO_DST, "builtin", "vm.builtin.match_shape",
                       [(IMM, tuple(pattern)), (IMM, ctx), (IMM, self.heap_size_placeholder),
                        (REG, reg), (REG, self.heap)])
        return [(reg, dims, ctx)] if deferred else []

    def param_info(self, p: Var) -> ParamInfo:
        return value_info(p.name_hint, p.struct_info)

    def result_info(self) -> tuple[ParamInfo, ...]:
        """Each output's name, kind, dtype and symbolic shape, as the archive's signature records them."""
        names = self.output_names()
        ret = self.func.ret_struct_info
        fields = ret.fields if isinstance(ret, TupleStructInfo) and len(names) > 1 else (ret,)
        return tuple(value_info(name, sinfo) for name, sinfo in zip(names, fields))

    # ------------------------------------------------------------ body
    def generate(self) -> VMFunction:
        self.builtin("alloc_shape_heap", (IMM, self.heap_size_placeholder), dst=self.heap)
        params = self.emit_param_checks()
        self.entry_pc = len(self.instrs)                                 # inputs checked here
        self.entry_slots = {slot: name for name, slot in self.slot_of.items()}
        self.instrs.append(None)                                         # the assumptions' check
        result = self.emit_seq(self.func.body)
        self.instrs.append(Ret(result))
        self.place_hoisted_checks()
        instrs = [self.patch_heap_size(i) for i in self.instrs]
        return VMFunction(self.name, tuple(params), self.num_regs, tuple(instrs),
                          outputs=self.output_names(), dim_ranges=tuple(self.func.attrs.get("dim_ranges", ())),
                          attrs=self.output_kinds(), results=self.result_info(), spans=self.span_runs())

    def span_runs(self) -> tuple:
        """The span marks as runs ``((pc, sources), ...)``: the last mark at a pc wins, repeats merge."""
        at: dict[int, tuple[str, ...]] = {}
        for pc, sources in self.span_marks:
            at[pc] = sources
        runs, current = [], ()
        for pc in sorted(at):
            if pc < len(self.instrs) and at[pc] != current:
                runs.append((pc, at[pc]))
                current = at[pc]
        return tuple(runs)

    def output_kinds(self) -> dict:
        """``{"output_kinds": [...]}`` when an output is a sequence, an optional or a map (else nothing)."""
        ret = self.func.ret_struct_info
        fields = ret.fields if isinstance(ret, TupleStructInfo) and len(self.output_names()) > 1 else (ret,)
        kinds = [map_kind(f)[0] if map_kind(f) is not None
                 else container_kind(f)[0] if isinstance(f, (SequenceStructInfo, OptionalStructInfo)) else "tensor"
                 for f in fields]
        return {"output_kinds": kinds} if any(k != "tensor" for k in kinds) else {}

    def place_hoisted_checks(self) -> None:
        """The relations over input dims as one check right after the input
        checks (the memory plan goes after it), or nothing."""
        at = self.entry_pc
        if self.hoisted:
            self.instrs[at] = CallInstr(NO_DST, self.state.func("builtin", "vm.builtin.check_dims"),
                                        ((IMM, tuple(self.hoisted.values())), (IMM, "inputs"),
                                         (IMM, self.heap_size_placeholder), (REG, self.heap)))
            self.entry_pc += 1
            return
        del self.instrs[at]
        for s in self.storages.values():
            s.start, s.end = s.start - (s.start > at), s.end - (s.end > at)
        self.span_marks = [(pc - (pc > at), sources) for pc, sources in self.span_marks]

    def patch_heap_size(self, ins):
        if not isinstance(ins, CallInstr):
            return ins
        size = max(len(self.slot_of), 1)
        args = tuple((IMM, size) if a == (IMM, self.heap_size_placeholder) else a for a in ins.args)
        return CallInstr(ins.dst, ins.func, args, ins.kwargs)

    def output_names(self) -> tuple[str, ...]:
        names = self.func.attrs.get("output_names")
        if names:
            return tuple(names)
        body = self.func.body.body
        fields = body.fields if isinstance(body, Tuple) else (body,)
        return tuple(getattr(f, "name_hint", f"output_{i}") for i, f in enumerate(fields))

    def emit_seq(self, seq: SeqExpr) -> int:
        for block in seq.blocks:
            for binding in block.bindings:
                self.emit_binding(binding)
        return self.to_register(seq.body)

    def emit_binding(self, b) -> None:
        """Emit one binding; its instructions record the binding's span (the ONNX nodes it came from)."""
        outer = self.span
        self.span = tuple(b.span.sources) if b.span is not None else ()
        self.span_marks.append((len(self.instrs), self.span))
        try:
            self.emit_binding_code(b)
        finally:
            self.span = outer
            self.span_marks.append((len(self.instrs), outer))

    def emit_binding_code(self, b) -> None:
        if isinstance(b, MatchCast):
            relations = cast_relations(b, lambda name: name in self.slot_of)
            if relations is not None:       # an assumption: dims to compare, no tensor to read
                self.reg_of[b.var] = self.to_register(b.value)
                self.emit_assumptions(str(b.span) if b.span else "", relations)
                return
            reg = self.to_register(b.value)
            self.emit_match_cast(reg, b)
            self.reg_of[b.var] = reg
            return
        value = b.value
        if isinstance(value, Var):          # an alias: share the register
            self.reg_of[b.var] = self.reg_of_var(value)
            return
        self.reg_of[b.var] = self.emit_value(value, b.var)

    def emit_assumptions(self, node: str, relations) -> None:
        """Check ``lhs == rhs`` for each relation: after the input checks when
        the dims are the inputs' and the binding runs on every call, else here."""
        entries = {}
        for lhs, rhs in relations:
            entry = check_entry(node, lhs, rhs, self.slot)
            key = entry_key(entry)
            if key not in self.hoisted:
                entries[key] = entry
        inputs = set(self.entry_slots.values())
        if self.branch_depth == 0 and all(free_vars(lhs) | free_vars(rhs) <= inputs for lhs, rhs in relations):
            self.hoisted.update(entries)
        elif entries:
            self.emit_call(NO_DST, "builtin", "vm.builtin.check_dims",
                           [(IMM, tuple(entries.values())), (IMM, "node"), (IMM, self.heap_size_placeholder),
                            (REG, self.heap)])

    def emit_match_cast(self, reg: int, b: MatchCast) -> None:
        sinfo, ctx = b.struct_info, f"match_cast of {b.var.name_hint!r}"
        if isinstance(sinfo, TensorStructInfo):
            self.emit_call(NO_DST, "builtin", "vm.builtin.check_tensor",
                           [(REG, reg), (IMM, sinfo.dtype), (IMM, sinfo.ndim), (IMM, ctx)])
            if sinfo.shape is not None:
                self.match_dims(reg, sinfo.shape, ctx, first_pass=False)
        elif isinstance(sinfo, ShapeStructInfo) and sinfo.values is not None:
            self.match_dims(reg, sinfo.values, ctx, first_pass=False)

    def reg_of_var(self, var: Var) -> int:
        if var not in self.reg_of:
            raise IRError(f"{self.name}: var {var.name_hint!r} is used before its definition")
        return self.reg_of[var]

    def to_register(self, expr) -> int:
        if isinstance(expr, Var):
            return self.reg_of_var(expr)
        return self.emit_value(expr, None)

    def operand(self, expr) -> tuple:
        if isinstance(expr, Var):
            return (REG, self.reg_of_var(expr))
        if isinstance(expr, Constant):
            return (CONST, self.state.constant(expr))
        if isinstance(expr, PrimValue):
            if isinstance(expr.value, int) or isinstance(expr.value, (float, bool)):
                return (IMM, expr.value)
            return (REG, self.builtin("eval_dim", (IMM, self.program(expr.value)),
                                      (IMM, self.heap_size_placeholder), (REG, self.heap)))
        if isinstance(expr, StringImm):
            return (IMM, expr.value)
        if isinstance(expr, ShapeExpr):
            return self.shape_operand(expr.values)
        if isinstance(expr, GlobalVar):    # a function as a value (the body of a loop)
            return (FUNC, self.state.func("vm", expr.name_hint))
        return (REG, self.emit_value(expr, None))

    def emit_value(self, value, var: Var | None) -> int:
        if isinstance(value, Call):
            return self.emit_call_expr(value)
        if isinstance(value, Tuple):
            fields = [self.operand(f) for f in value.fields]
            return self._owned_if(self.builtin("make_tuple", *fields),
                                  bool(fields) and all(k == REG and r in self.owned for k, r in fields))
        if isinstance(value, TupleGetItem):
            tup = self.operand(value.tuple_value)
            return self._owned_if(self.builtin("tuple_getitem", tup, (IMM, value.index)),
                                  tup[0] == REG and tup[1] in self.owned)
        if isinstance(value, If):
            return self.emit_if(value)
        if isinstance(value, (Constant, PrimValue, StringImm, ShapeExpr)):
            return self.builtin("identity", self.operand(value))
        raise IRError(f"{self.name}: cannot generate code for a {type(value).__name__}")

    def _owned_if(self, reg: int, owned: bool) -> int:
        """``reg``, recorded as holding memory this function allocated where ``owned``: a tuple of
        such tensors (a split's planned pieces) and its items, so a reshape of an item is a view
        (``reshape_view``) as of any allocated tensor, not a copy into an allocation of its own."""
        if owned:
            self.owned.add(reg)
        return reg

    def emit_call_expr(self, call: Call) -> int:
        op = call.op
        if isinstance(op, GlobalVar):
            dst = self.new_reg()
            self.emit_call(dst, "vm", op.name_hint, [self.operand(a) for a in call.args])
            return dst
        if not isinstance(op, Op):
            raise IRError(f"{self.name}: cannot call a {type(op).__name__}")
        if op.name == "loop":
            return self.emit_loop(call)
        if op.name in ("call_tir", "call_dps_packed"):
            return self.emit_dps_call(call, "kernel" if op.name == "call_tir" else _packed_kind(call))
        if op.name == "memory.alloc_tensor":
            return self.emit_alloc_tensor(call)
        if op.name == "memory.kill_tensor":
            return self.emit_kill(call)
        if op.name in ("call_packed", "call_pure_packed"):
            callee = call.args[0]
            dst = self.new_reg()
            self.emit_call(dst, _packed_kind(call), callee.global_symbol,
                           [self.operand(a) for a in call.args[1:]], self.kernel_kwargs(call))
            return dst
        raise IRError(f"{self.name}: R.{op.name} was not legalized to a kernel call (run the Legalize pass)")

    def argument_operands(self, args) -> list[tuple]:
        """The kernel's arguments: the fields of call_tir's argument tuple, which
        may be a tuple literal or a var bound to one (A-normal form)."""
        if isinstance(args, Tuple):
            return [self.operand(a) for a in args.fields]
        sinfo = args.struct_info
        if not isinstance(sinfo, TupleStructInfo):
            return [self.operand(args)]
        reg = self.to_register(args)
        return [(REG, self.builtin("tuple_getitem", (REG, reg), (IMM, i))) for i in range(len(sinfo.fields))]

    def kernel_kwargs(self, call: Call):
        pairs = call.attrs.get("kernel_attrs") or ()
        return [(k, (IMM, _plain(v, k))) for k, v in pairs]

    def emit_dps_call(self, call: Call, kind: str) -> int:
        callee, args = call.args[:2]
        if not isinstance(callee, ExternFunc):
            raise IRError(f"{self.name}: call_tir needs an ExternFunc callee")
        arg_ops = self.argument_operands(args)
        if len(call.args) > 2:              # its output (and workspace) allocated by the plan
            return self.emit_planned_call(call, kind, arg_ops)
        out_sinfo = call.sinfo_args[0]
        if kind == "kernel" and callee.global_symbol in RESHAPES and arg_ops[0][0] == REG \
                and arg_ops[0][1] in self.owned and isinstance(out_sinfo, TensorStructInfo):
            view = self.builtin("reshape_view", arg_ops[0], self.shape_operand(out_sinfo.shape))
            self.owned.add(view)
            return view
        index = index_view_of(call) if kind == "kernel" else None
        if index is not None and arg_ops[0][0] == REG and arg_ops[0][1] in self.owned:
            view = self.builtin("index_view", arg_ops[0], (IMM, index))
            self.owned.add(view)
            return view
        out = self.alloc(out_sinfo)
        self.owned.add(out)
        kwargs = [("out", (REG, out)), *self.kernel_kwargs(call)]
        if kind == "kernel":
            workspace = self.alloc_workspace(call, out_sinfo)
            if workspace is not None:
                kwargs.append(("workspace", (REG, workspace)))
        self.emit_call(NO_DST, kind, callee.global_symbol, arg_ops, kwargs)
        return out

    def emit_planned_call(self, call: Call, kind: str, arg_ops: list) -> int:
        out = self.reg_of_var(call.args[2])
        self.owned.add(out)
        kwargs = [("out", (REG, out)), *self.kernel_kwargs(call)]
        if len(call.args) > 3:
            workspace = self.reg_of_var(call.args[3])
            kwargs.append(("workspace", (REG, workspace)))
        self.emit_call(NO_DST, kind, call.args[0].global_symbol, arg_ops, kwargs)
        if len(call.args) > 3 and workspace in self.storage_of:   # a workspace lives at its call alone
            self.storages[self.storage_of[workspace]].start = len(self.instrs) - 1
        return out

    def emit_alloc_tensor(self, call: Call) -> int:
        """PlanMemory's allocation: a view of its arena buffer, or an allocation of its own."""
        sinfo, storage = call.struct_info, call.attrs["storage"]
        if storage is None or not self.plan:
            return self.alloc(sinfo)
        check_allocation(sinfo, self.name)
        shape = self.shape_operand(sinfo.shape)
        pc = len(self.instrs)
        reg = self.builtin("arena_tensor", (IMM, storage), (IMM, sinfo.dtype), (REG, ARENA), shape)
        if storage not in self.storages:
            programs = shape[1] if shape[0] == IMM else tuple(self.program(d) for d in sinfo.shape)
            self.storages[storage] = Storage(sinfo.dtype, tuple(programs), call.attrs["pool"], pc, pc)
        self.storage_of[reg] = storage
        return reg

    def emit_kill(self, call: Call) -> int:
        """A kill point: the buffer's lifetime ends at the last call that read a value."""
        storage = self.storage_of.get(self.reg_of_var(call.args[0]))
        if storage is not None:
            s = self.storages[storage]
            s.end = max(s.end, self.last_read)
        return NO_DST

    def alloc_workspace(self, call: Call, out_sinfo: StructInfo) -> int | None:
        """The kernel's scratch as a flat uint8 tensor, if its op declares one
        (its op's record, ops/registry.py: call_workspace); allocated right before the call, it lives only there."""
        nbytes = call_workspace(call)
        if nbytes is None:
            return None
        scope = out_sinfo.vdevice if isinstance(out_sinfo, TensorStructInfo) else "global"
        return self.alloc(TensorStructInfo((nbytes,), "uint8", vdevice=scope))

    def alloc(self, sinfo: StructInfo) -> int:
        if isinstance(sinfo, TupleStructInfo):
            fields = [(REG, self.alloc(f)) for f in sinfo.fields]
            return self.builtin("make_tuple", *fields)
        if not isinstance(sinfo, TensorStructInfo) or sinfo.shape is None or sinfo.dtype is None:
            raise IRError(f"{self.name}: cannot allocate an output of unknown shape or dtype ({sinfo})")
        check_allocation(sinfo, self.name)
        shape = self.shape_operand(sinfo.shape)
        return self.builtin("alloc_tensor", (IMM, sinfo.dtype), shape)

    def emit_loop(self, call: Call) -> int:
        """``R.loop`` is one call of ``vm.builtin.loop``, which calls the body function per iteration
        (no backward jump here: every function's bytecode jumps forward only)."""
        num_state = call.attrs["num_state"]
        elements = _body_scan_elements(self.state.mod, call.args[0], num_state)
        scans = tuple(_scan_spec(f, self.name, elements[k] if k < len(elements) else None)
                      for k, f in enumerate(call.sinfo_args[0].fields[num_state:]))
        dst = self.new_reg()
        self.emit_call(dst, "builtin", "vm.builtin.loop",
                       [(IMM, num_state), (IMM, scans), *(self.operand(a) for a in call.args)])
        return dst

    def emit_if(self, node: If) -> int:
        cond = self.builtin("read_if_cond", self.operand(node.cond))
        result = self.new_reg()
        branch_at = len(self.instrs)
        self.instrs.append(None)  # patched below
        self.shape_cache.clear()
        self.branch_depth += 1
        true_reg = self.emit_seq(node.true_branch)
        self.builtin("identity", (REG, true_reg), dst=result)
        goto_at = len(self.instrs)
        self.instrs.append(None)
        false_start = len(self.instrs)
        self.shape_cache.clear()
        false_reg = self.emit_seq(node.false_branch)
        self.branch_depth -= 1
        self.shape_cache.clear()
        self.builtin("identity", (REG, false_reg), dst=result)
        end = len(self.instrs)
        self.instrs[branch_at] = IfInstr(cond, false_start - branch_at)
        self.instrs[goto_at] = Goto(end - goto_at)
        return result


# No single tensor a build allocates may be larger than MAX_TENSOR_BYTES (32 GiB;
# a static shape this big is a malformed or mistaken model, not something to
# fail on at run time); the archive loader holds static allocations to it too.


def check_allocation(sinfo: TensorStructInfo, where: str) -> None:
    static = [d for d in sinfo.shape if isinstance(d, int)]
    if any(d < 0 for d in static):
        raise IRError(f"{where}: a tensor of shape {sinfo.shape} has a negative dim")
    if len(sinfo.shape) > 64:
        raise IRError(f"{where}: a tensor of rank {len(sinfo.shape)}; numpy holds at most 64 dims")
    nbytes = numpy_dtype(sinfo.dtype).itemsize
    for d in static:
        nbytes *= d
    if nbytes > MAX_TENSOR_BYTES:
        raise IRError(f"{where}: a tensor of shape {tuple(sinfo.shape)} {sinfo.dtype} needs {nbytes} bytes "
                      f"(more than {MAX_TENSOR_BYTES}, the largest one tensor may take)")


def _packed_kind(call: Call) -> str:
    """``packed`` for a library kernel, ``func`` for a function the deploying
    process registers (relaxpack.runtime.register_func): the archive keeps the
    distinction so a loader can name what is missing."""
    return "packed" if call.args[0].global_symbol in KERNELS else FUNC_KIND


def _scan_spec(sinfo, where: str, element=None) -> tuple:
    """(dtype, element shape with None for dims only known at run time) of a stacked scan output;
    a dim the loop's struct info leaves open is taken from ``element``, what the body returns
    per iteration (a loop of no trips stacks nothing, so only these say its empty output's shape)."""
    if not isinstance(sinfo, TensorStructInfo) or sinfo.dtype is None or sinfo.ndim < 1:
        raise IRError(f"{where}: a loop's scan output must be a tensor of known dtype and rank, got {sinfo}")
    shape = sinfo.shape[1:] if sinfo.shape is not None else (None,) * (sinfo.ndim - 1)
    body = element.shape if isinstance(element, TensorStructInfo) and element.shape is not None \
        and len(element.shape) == len(shape) else (None,) * len(shape)
    return (sinfo.dtype, tuple(d if isinstance(d, int) else b if isinstance(b, int) else None
                               for d, b in zip(shape, body)))


def _body_scan_elements(mod, body, num_state: int) -> tuple:
    """The struct infos of what a loop's body returns per iteration for its scan outputs (None
    each where the body is not a function of ``mod`` with a tuple return)."""
    func = mod[body.name_hint] if isinstance(body, GlobalVar) and body.name_hint in mod else None
    ret = getattr(func, "ret_struct_info", None)
    return tuple(ret.fields[1 + num_state:]) if isinstance(ret, TupleStructInfo) else ()


def _sym(name: str):
    return sym(name) if name.isidentifier() else None


def _plain(value, name: str):
    """Kernel attributes must be plain data in the bytecode."""
    if isinstance(value, (int, float, bool, str)) or value is None:
        return value
    if isinstance(value, tuple):
        return tuple(_plain(v, name) for v in value)
    raise IRError(f"kernel attribute {name}={value!r} is not plain data (ints, floats, strings, tuples)")


def codegen(mod: IRModule, plan_memory: bool = True, pools: dict | None = None) -> Executable:
    """Translate a legalized module into an :class:`Executable`.

    ``plan_memory`` puts the intermediates PlanMemory gave an arena buffer
    there (packager/memory_plan.py writes the plan); ``pools`` bounds pools in bytes.
    """
    state = _ModuleState(mod)
    functions = {}
    figures = {}
    for name, func in mod.items():
        if func.attrs.get("Primitive"):
            continue
        gen = _FunctionCodegen(state, name, func)
        gen.plan = plan_memory
        vm_func = gen.generate()
        if gen.storages:
            vm_func = place_arena(vm_func, [gen.storages[i] for i in sorted(gen.storages)], state.func,
                                  gen.entry_pc, gen.heap, pools)
            figures[name] = plan_figures(func.attrs.get("memory_plan") or {})
        functions[name] = vm_func
    for entry in state.func_table:
        if entry.kind == "vm" and entry.name not in functions:
            raise IRError(f"call of function {entry.name!r}, which is not in the module")
    metadata = {"stage": mod.stage}
    if figures.get("main"):
        metadata["memory_plan"] = figures["main"]
    return Executable(functions, state.func_table, state.constants, metadata)


__all__ = ["codegen"]

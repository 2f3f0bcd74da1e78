"""The VM's instruction set, after TVM's Relax VM: Call, Ret, Goto, If.

Operands say where a value comes from:

=========  =====================================================
``("r", i)``  register ``i`` of the current frame
``("i", v)``  an immediate: a JSON value (lists read as tuples)
``("c", i)``  constant ``i`` of the executable
``("f", i)``  entry ``i`` of the function table (a callable value)
=========  =====================================================

A ``Call`` names its callee by function-table index and passes positional
``args`` and keyword ``kwargs`` (kernel attributes, a kernel's ``out``).
Everything here is plain data: tuples, ints, strings; nothing executes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

REG, IMM, CONST, FUNC = "r", "i", "c", "f"
OPERAND_KINDS = (REG, IMM, CONST, FUNC)
NO_DST = -1  # a call whose result is not kept


@dataclass(frozen=True)
class Call:
    dst: int
    func: int
    args: tuple = ()
    kwargs: tuple = ()  # ((name, operand), ...), sorted by name

    def to_json(self):
        return ["call", self.dst, self.func, [list(a) for a in self.args],
                [[k, list(v)] for k, v in self.kwargs]]


@dataclass(frozen=True)
class Ret:
    src: int

    def to_json(self):
        return ["ret", self.src]


@dataclass(frozen=True)
class Goto:
    offset: int  # relative to this instruction

    def to_json(self):
        return ["goto", self.offset]


@dataclass(frozen=True)
class If:
    cond: int          # register holding a boolean (a 0-d bool array or a bool)
    false_offset: int  # relative jump when the condition is false

    def to_json(self):
        return ["if", self.cond, self.false_offset]


Instruction = Call | Ret | Goto | If


def instruction_from_json(data) -> Instruction:
    """Rebuild an instruction from :meth:`to_json` output (validated by the loader)."""
    kind = data[0]
    if kind == "call":
        _, dst, func, args, kwargs = data
        return Call(dst, func, tuple(_operand(a) for a in args),
                    tuple((k, _operand(v)) for k, v in kwargs))
    if kind == "ret":
        return Ret(data[1])
    if kind == "goto":
        return Goto(data[1])
    if kind == "if":
        return If(data[1], data[2])
    raise ValueError(f"unknown instruction kind {kind!r}")


def _operand(data) -> tuple:
    kind, value = data
    return (kind, to_tuples(value) if kind == IMM else value)


def to_tuples(value):
    """JSON lists back to the tuples the IR used."""
    if isinstance(value, list):
        return tuple(to_tuples(v) for v in value)
    return value


@dataclass(frozen=True)
class ParamInfo:
    """What the VM checks of an input: name, dtype and shape spec.

    ``shape`` holds ints and dim names (strings, e.g. ``"batch"`` or an
    expression like ``"seq * 2"``); ``None`` for an unknown shape.
    """

    name: str
    kind: str = "tensor"              # "tensor" | "shape" | "prim" | "object" | "tuple" | a container kind
    dtype: str | None = None
    ndim: int = -1
    shape: tuple | None = None
    #: a map's (or a sequence of maps') key dtype; None for every other kind
    key_dtype: str | None = None

    def kind_text(self) -> str:
        """A value that is not a tensor, in words: ``sequence of float32``, ``map(string, float32)``."""
        if self.kind in ("map", "sequence_map"):
            text = f"map({self.key_dtype}, {self.dtype})"
            return text if self.kind == "map" else f"sequence of {text}"
        return self.kind if self.dtype is None else f"{self.kind} of {self.dtype}"

    def to_json(self):
        data = {"name": self.name, "kind": self.kind, "dtype": self.dtype, "ndim": self.ndim,
                "shape": None if self.shape is None else list(self.shape)}
        if self.key_dtype is not None:
            data["key_dtype"] = self.key_dtype
        return data

    @staticmethod
    def from_json(data) -> "ParamInfo":
        shape = data.get("shape")
        return ParamInfo(data["name"], data.get("kind", "tensor"), data.get("dtype"), data.get("ndim", -1),
                         None if shape is None else tuple(shape), data.get("key_dtype"))


@dataclass(frozen=True)
class VMFunction:
    """One bytecode function: its registers, parameters and instructions.

    ``results`` describe the outputs as ``params`` describe the inputs (name,
    kind, dtype, rank, symbolic shape); ``spans`` say which ONNX nodes each
    instruction came from, as runs ``((pc, (node, ...)), ...)``: an entry
    holds from its ``pc`` to the next entry's (see :meth:`instruction_spans`).
    Archives of format 1 have neither: their results carry names and kinds only.
    """

    name: str
    params: tuple[ParamInfo, ...]
    num_registers: int
    instructions: tuple[Instruction, ...]
    outputs: tuple[str, ...] = ()      # output names (for ``vm.run``)
    dim_ranges: tuple = ()             # ((name, lo, hi), ...)
    attrs: dict = field(default_factory=dict)
    results: tuple[ParamInfo, ...] = ()
    spans: tuple = ()

    def to_json(self):
        return {"name": self.name, "params": [p.to_json() for p in self.params],
                "num_registers": self.num_registers,
                "instructions": [i.to_json() for i in self.instructions],
                "outputs": list(self.outputs), "dim_ranges": [list(r) for r in self.dim_ranges],
                "attrs": self.attrs, "results": [r.to_json() for r in self.output_info()],
                "spans": [[pc, list(sources)] for pc, sources in self.spans]}

    @staticmethod
    def from_json(data) -> "VMFunction":
        return VMFunction(data["name"], tuple(ParamInfo.from_json(p) for p in data["params"]),
                          data["num_registers"],
                          tuple(instruction_from_json(i) for i in data["instructions"]),
                          tuple(data.get("outputs", ())), tuple(tuple(r) for r in data.get("dim_ranges", ())),
                          dict(data.get("attrs", {})), tuple(ParamInfo.from_json(r) for r in data.get("results", ())),
                          tuple((pc, tuple(sources)) for pc, sources in data.get("spans", ())))

    def output_info(self) -> tuple[ParamInfo, ...]:
        """What each output is: ``results``, or (format 1) its name and kind with dtype and shape unknown."""
        if self.results:
            return self.results
        kinds = self.attrs.get("output_kinds") or ("tensor",) * len(self.outputs)
        return tuple(ParamInfo(name, kind) for name, kind in zip(self.outputs, kinds))

    def instruction_spans(self) -> list[tuple[str, ...]]:
        """The ONNX node names each instruction came from (empty where unknown), by pc."""
        out: list[tuple[str, ...]] = []
        runs = list(self.spans) + [(len(self.instructions), ())]
        current: tuple[str, ...] = ()
        for (start, sources), (end, _) in zip(runs, runs[1:]):
            out.extend([current] * (start - len(out)))
            current = sources
            out.extend([current] * (end - start))
        out.extend([()] * (len(self.instructions) - len(out)))
        return out


def format_operand(op: tuple, func_names: list[str]) -> str:
    kind, value = op
    if kind == REG:
        return f"%{value}"
    if kind == CONST:
        return f"c[{value}]"
    if kind == FUNC:
        return f"@{func_names[value]}"
    return json.dumps(value, default=_json_default) if not isinstance(value, tuple) else _fmt_tuple(value)


def _fmt_tuple(value) -> str:
    return "(" + ", ".join(_fmt_tuple(v) if isinstance(v, tuple) else json.dumps(v) for v in value) + \
        ("," if len(value) == 1 else "") + ")"


def _json_default(value):
    raise TypeError(f"immediate of type {type(value).__name__} is not plain data")


def format_instruction(instr: Instruction, func_names: list[str]) -> str:
    if isinstance(instr, Call):
        args = [format_operand(a, func_names) for a in instr.args]
        args += [f"{k}={format_operand(v, func_names)}" for k, v in instr.kwargs]
        dst = "" if instr.dst == NO_DST else f"%{instr.dst} = "
        return f"{dst}call {func_names[instr.func]}({', '.join(args)})"
    if isinstance(instr, Ret):
        return f"ret %{instr.src}"
    if isinstance(instr, Goto):
        return f"goto {instr.offset:+d}"
    return f"if %{instr.cond} else goto {instr.false_offset:+d}"


def format_function(func: VMFunction, func_names: list[str]) -> str:
    names = [_shown(n) for n in func_names]
    params = ", ".join(f"%{i}: {_shown(p.name)}" for i, p in enumerate(func.params))
    lines = [f"function {_shown(func.name)}({params})  # {func.num_registers} registers"]
    for pc, instr in enumerate(func.instructions):
        lines.append(f"  {pc:4d}  {format_instruction(instr, names)}")
    return "\n".join(lines)


def _shown(name: str) -> str:
    """A name as the listing shows it: escaped when it holds unprintable characters
    (a name from an archive may hold a newline or a terminal escape)."""
    return name if name.isprintable() else name.encode("unicode_escape").decode("ascii")


__all__ = ["Call", "Ret", "Goto", "If", "Instruction", "ParamInfo", "VMFunction", "REG", "IMM",
           "CONST", "FUNC", "NO_DST", "format_function", "instruction_from_json", "to_tuples"]

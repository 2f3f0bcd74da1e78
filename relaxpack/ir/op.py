"""The op-registry protocol: one :class:`OpDef` per IR operator.

An op is defined once: its name (the text form spells it ``R.<name>``), its
attribute schema with defaults, the number of arguments, whether it is pure,
and its struct-info inference function. The IR (BlockBuilder, the parser)
looks ops up here; the op libraries the package root lists fill it, so the
IR depends on no op definition (TVM's ``Op`` registry and its attributes).
Calls are made with :func:`make_call`, which checks the attributes against
the schema.

>>> from relaxpack.ir.op import make_call               # doctest: +SKIP
>>> make_call("nn.softmax", x, axis=-1)                  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import import_module
from typing import Any, Callable, Mapping

from ..errors import IRError, UnsupportedOpError
from .dims import DimAnalyzer
from .expr import Call, Expr, Op
from .struct_info import StructInfo

REQUIRED = object()  # marks an attribute without a default

InferFn = Callable[[Call, DimAnalyzer], StructInfo]
#: (input struct infos, attributes, output struct info) -> scratch bytes (a dim) or None
WorkspaceFn = Callable[[tuple, Mapping[str, Any], StructInfo], Any]


@dataclass(frozen=True)
class OpDef:
    """What the IR knows about an operator."""

    name: str
    infer: InferFn
    attrs: Mapping[str, Any] = field(default_factory=dict)  # attr name -> default or REQUIRED
    min_args: int = 0
    max_args: int | None = None  # None: variadic
    pure: bool = True
    doc: str = ""
    #: the output has the shape of the broadcast inputs and each element depends only
    #: on the same-index elements: the kernel may write over an input of the output's
    #: shape and dtype (the memory planner's in-place reuse)
    elementwise: bool = False
    #: the scratch bytes the kernel takes, a dim over the call's shapes and
    #: attributes; codegen plans it as a tensor live at the kernel's one
    #: instruction and hands it over as ``workspace=`` (ops/registry.py: call_workspace)
    workspace: WorkspaceFn | None = None
    #: False when the kernel's cost can grow without bound with its input *values*
    #: (a regular expression's backtracking): compile time never runs it on constants,
    #: so a model cannot hang the converter; run time is the caller's budget's to bound
    foldable: bool = True
    #: the output's shape depends on the input *values* (Reshape to a computed shape, TopK
    #: of a run-time K, NonZero, a sequence): the op is called through ``call_packed`` with
    #: the output struct info the caller declares (``sinfo_args``) and every attribute,
    #: its kernel returns new values (``Kernel.dps`` is False), and a tensor result is
    #: bound by ``match_cast`` to fresh dims (Relax's ``R.unique``)
    data_dependent: bool = False

    def check_call(self, call: Call) -> None:
        n = len(call.args)
        if n < self.min_args or (self.max_args is not None and n > self.max_args):
            want = (str(self.min_args) if self.max_args == self.min_args
                    else f"{self.min_args}..{'' if self.max_args is None else self.max_args}")
            raise IRError(f"R.{self.name} takes {want} arguments, got {n}")
        self.check_attrs(call.attrs)

    def check_attrs(self, attrs: Mapping[str, Any]) -> None:
        """The attribute names in ``attrs`` are this op's and name every required one."""
        unknown = set(attrs) - set(self.attrs)
        if unknown:
            raise IRError(f"R.{self.name} has no attribute(s) {sorted(unknown)}; "
                          f"it takes {sorted(self.attrs)}")
        missing = [k for k, v in self.attrs.items() if v is REQUIRED and k not in attrs]
        if missing:
            raise IRError(f"R.{self.name} needs attribute(s) {missing}")

    def full_attrs(self, attrs: Mapping[str, Any]) -> dict[str, Any]:
        """``attrs`` with the schema's defaults filled in."""
        return {k: attrs.get(k, v) for k, v in self.attrs.items()}

    def workspace_bytes(self, inputs: tuple, attrs: Mapping[str, Any], out: StructInfo) -> Any:
        """The scratch bytes of a kernel call of this op (a dim), or None when
        it takes none or the size cannot be said at build time."""
        size = None if self.workspace is None else self.workspace(tuple(inputs), attrs, out)
        if size is None or (isinstance(size, int) and size <= 0):
            return None
        return size


_REGISTRY: dict[str, OpDef] = {}


def register_op(name: str, *, infer: InferFn, attrs: Mapping[str, Any] | None = None,
                num_args: int | tuple[int, int | None] = 1, pure: bool = True, doc: str = "",
                elementwise: bool = False, workspace: WorkspaceFn | None = None, foldable: bool = True,
                data_dependent: bool = False) -> OpDef:
    """Define the op ``name``. ``num_args`` is a count or a (min, max) range."""
    if name in _REGISTRY:
        raise IRError(f"op {name!r} is registered twice")
    lo, hi = (num_args, num_args) if isinstance(num_args, int) else num_args
    opdef = OpDef(name, infer, dict(attrs or {}), lo, hi, pure, doc, elementwise, workspace, foldable,
                  data_dependent)
    _REGISTRY[name] = opdef
    return opdef


def get_op_def(op: str | Op) -> OpDef:
    name = op.name if isinstance(op, Op) else op
    opdef = _REGISTRY.get(name) if _LOADED else None
    if opdef is None:
        _load_libraries()
        opdef = _REGISTRY.get(name)
        if opdef is None:
            raise UnsupportedOpError(f"unknown IR op R.{name}")
    return opdef


def find_op_def(name: str) -> OpDef | None:
    """The op ``name``'s definition, or None (a registered function's name)."""
    _load_libraries()
    return _REGISTRY.get(name)


def registered_ops() -> list[str]:
    _load_libraries()
    return sorted(_REGISTRY)


def make_call(name: str, /, *args: Expr, sinfo_args: tuple[StructInfo, ...] = (), **attrs) -> Call:
    """A call of op ``name``; attributes not given take the schema's defaults."""
    opdef = get_op_def(name)
    opdef.check_call(Call(Op.get(name), args, attrs, sinfo_args))
    return Call(Op.get(name), args, opdef.full_attrs(attrs), sinfo_args)


_LOADED = False


def _load_libraries() -> None:
    # The IR names no op library: the package root composes the layers and
    # lists them (relaxpack.OP_LIBRARIES); each registers its ops on import.
    # Loading on the first look-up keeps ``import relaxpack.ir`` cheap, and
    # get_op_def runs for every op of every pass: after that it is a dict access.
    global _LOADED
    if not _LOADED:
        from .. import OP_LIBRARIES
        for name in OP_LIBRARIES:
            import_module(name)
        _LOADED = True

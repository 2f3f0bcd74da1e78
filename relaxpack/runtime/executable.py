"""Executable: what a build produces and an archive stores.

Bytecode functions, the function table (what each ``("f", i)`` operand
names), the constants, and facts about the build. Plain data plus numpy
arrays; :meth:`Executable.as_text` lists the bytecode.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..errors import ArchiveError
from .bytecode import VMFunction, format_function

#: Kinds of function-table entries.
#: ``func`` names a function registered with :func:`~relaxpack.runtime.register_func`.
FUNC_KINDS = ("vm", "builtin", "kernel", "packed", "func")


@dataclass(frozen=True)
class FuncEntry:
    kind: str   # one of FUNC_KINDS
    name: str

    def __post_init__(self):
        if self.kind not in FUNC_KINDS:
            raise ArchiveError(f"unknown function-table kind {self.kind!r} for {self.name!r}")

    @property
    def label(self) -> str:
        return self.name if self.kind in ("vm", "builtin") else f"{self.kind}.{self.name}"


@dataclass
class Executable:
    """A compiled program for the :class:`~relaxpack.runtime.VirtualMachine`."""

    functions: dict[str, VMFunction]
    func_table: list[FuncEntry]
    constants: list[np.ndarray]
    metadata: dict = field(default_factory=dict)
    #: facts about the archive it was loaded from (format version, params mode, mmap); not saved
    archive: dict | None = field(default=None, compare=False)
    #: raises ArchiveError when the file its constants map changed since loading (None: nothing mapped)
    source_check: Callable[[], None] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        names = [f.name for f in self.func_table if f.kind == "vm"]
        missing = sorted(set(names) - set(self.functions))
        if missing:
            raise ArchiveError(f"function table names missing VM functions {missing}")

    @property
    def kernel_names(self) -> list[str]:
        return sorted({f.name for f in self.func_table if f.kind == "kernel"})

    def kernel_call_count(self) -> int:
        """Kernel-call instructions in all functions (a static count)."""
        kernels = {i for i, f in enumerate(self.func_table) if f.kind == "kernel"}
        return sum(1 for fn in self.functions.values() for ins in fn.instructions
                   if getattr(ins, "func", None) in kernels)

    def as_text(self) -> str:
        """The bytecode, one function after another."""
        labels = [f.label for f in self.func_table]
        parts = [format_function(fn, labels) for fn in self.functions.values()]
        consts = ", ".join(f"c[{i}]: {c.dtype}{list(c.shape)}" for i, c in enumerate(self.constants))
        return "\n\n".join(parts) + (f"\n\n# constants: {consts}" if consts else "")

    def signature(self, name: str = "main") -> str:
        fn = self.function(name)
        params = ", ".join(f"{p.name}: {_param_text(p)}" for p in fn.params)
        results = ", ".join(r.name if r.dtype is None else f"{r.name}: {_param_text(r)}" for r in fn.output_info())
        return f"{name}({params}) -> {results or '?'}"

    def function(self, name: str) -> VMFunction:
        try:
            return self.functions[name]
        except KeyError:
            raise ArchiveError(f"executable has no function {name!r}; it has {sorted(self.functions)}") from None

    def input_names(self, name: str = "main") -> Sequence[str]:
        return [p.name for p in self.function(name).params]

    def save(self, path, params="linked", sources=(), constants="mapped"):
        """Write a deployment archive; ``params="external"`` puts the constants in a params file
        beside it, ``constants="compact"`` stores each in the narrowest dtype that holds it exactly
        (a smaller file; loading widens them into private memory). ``path`` must not be one of
        ``sources`` (files the caller read), nor a symlink, device or anything but a regular file
        (:func:`~relaxpack.runtime.archive.save_executable`)."""
        from .archive import save_executable
        save_executable(self, path, params, sources, constants)

    def __reduce__(self):
        """Pickle by reference to the archive file: unpickling reopens (memory-maps) it by its absolute
        path and checks that its manifest is still the one pickled, so worker processes share the
        weights through the page cache instead of receiving a copy. An executable that no file holds
        (built in memory, or read with ``load_bytes``) pickles as its archive's bytes, weights and all."""
        path = (self.archive or {}).get("path")
        if path is not None:
            return reopen, (path, self.archive["manifest_sha256"])
        from .archive import archive_bytes
        return _from_bytes, (archive_bytes(self),)


def reopen(path: str, manifest_sha256: str) -> "Executable":
    """The archive at ``path`` loaded again, refused if its manifest is no longer ``manifest_sha256``."""
    from .archive import load
    exe = load(path)
    if exe.archive["manifest_sha256"] != manifest_sha256:
        raise ArchiveError(f"{path}: the archive changed since this executable was pickled (its manifest's "
                           f"sha256 is {exe.archive['manifest_sha256'][:12]}..., was {manifest_sha256[:12]}...)")
    return exe


def _from_bytes(data: bytes) -> "Executable":
    from .archive import load_bytes
    return load_bytes(data)


def _param_text(p) -> str:
    if p.kind != "tensor":
        return p.kind_text()
    shape = "?" if p.shape is None else "(" + ", ".join(str(d) for d in p.shape) + ")"
    return f"{p.dtype or '?'}{shape}"

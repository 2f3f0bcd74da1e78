"""``relaxpack.build``: an IRModule to an Executable the runtime runs.

>>> exe = relaxpack.build(mod)                      # doctest: +SKIP
>>> VirtualMachine(exe).run({"x": x})               # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
from typing import Callable, ContextManager

from .errors import ArchiveError
from .ir.module import IRModule
from .ir.struct_info import TupleStructInfo
from .ir.well_formed import check_well_formed
from .packager.codegen import codegen
from .passes import PassContext
from .passes.pipeline import lower_pipeline, optimize_pipeline
from .passes.plan_memory import POOLS
from .runtime.archive_check import MAX_PARAMS
from .runtime.executable import Executable

log = logging.getLogger(__name__)


#: the lowered IR's text goes into the archive's metadata (for ``inspect --ir``) up to this
#: many characters: a 200,000-node model's would take most of the manifest's 32 MiB
MAX_IR_TEXT = 4 << 20


def ir_text(lowered: IRModule) -> str:
    """What the archive keeps of the lowered IR's text: all of it, or a note when it is too long."""
    text = lowered.script(show_meta=False)
    if len(text) <= MAX_IR_TEXT:
        return text
    return (f"# the IR text ({len(text)} characters) is not kept in archives past {MAX_IR_TEXT}; "
            f"relaxpack convert --print-after NAME shows it")


def check_archive_limits(mod: IRModule) -> None:
    """Refuse, before any pass runs, a module whose functions have more inputs or
    outputs than an archive can hold (the limit the loader enforces)."""
    for name, func in mod.items():
        if func.attrs.get("Primitive"):
            continue
        ret = func.ret_struct_info
        outputs = len(func.attrs.get("output_names") or ()) or (len(ret.fields) if isinstance(ret, TupleStructInfo)
                                                                else 1)
        for what, count in (("inputs", len(func.params)), ("outputs", outputs)):
            if count > MAX_PARAMS:
                raise ArchiveError(f"function {name!r} has {count} {what}; an archive holds at most {MAX_PARAMS}")


def build(mod: IRModule, opt_level: int = 2, check: bool = True, pools: dict[str, int] | None = None,
          plan_memory: bool = True, stage: Callable[[str], ContextManager] | None = None) -> Executable:
    """Compile ``mod`` for the :class:`~relaxpack.runtime.VirtualMachine`.

    ``check`` runs the well-formedness checker on the input and after each
    pass. ``plan_memory`` puts intermediates in arenas; ``pools`` bounds
    memory pools in bytes (``{"fast": 256 * 1024}``): intermediates are first
    offered to the first pool named and spill to the default pool.
    ``stage(name)``, when given, is entered around each stage ("optimize",
    "lower + plan", "codegen"): the command line times and shows them.
    """
    check_archive_limits(mod)
    stage = stage or (lambda name: contextlib.nullcontext())
    if check:
        check_well_formed(mod)
    ctx = PassContext.current()
    disabled = list(ctx.disabled_passes) + ([] if plan_memory else ["PlanMemory"])
    with PassContext(opt_level=opt_level, instruments=ctx.instruments, check_well_formed=check,
                     disabled_passes=disabled, config={**ctx.config, POOLS: pools}):
        with stage("optimize"):
            optimized = optimize_pipeline()(mod)
        with stage("lower + plan"):
            lowered = lower_pipeline()(optimized)
    with stage("codegen"):
        exe = codegen(lowered, plan_memory=plan_memory, pools=pools)
    exe.metadata["ir"] = ir_text(lowered)
    for key in ("source", "source_sha256"):
        if key in mod.attrs:
            exe.metadata[key] = mod.attrs[key]
    if "model_metadata" in mod.attrs:   # the ONNX model's producer, names, description (get_modelmeta)
        meta = dict(mod.attrs["model_metadata"])
        exe.metadata["model_metadata"] = {**meta, "custom_metadata_map": dict(meta.get("custom_metadata_map", {}))}
    log.debug("built %d functions, %d kernel calls", len(exe.functions), exe.kernel_call_count())
    return exe

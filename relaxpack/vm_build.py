"""``relaxpack.build``: an IRModule to an Executable the runtime runs.

>>> exe = relaxpack.build(mod)                      # doctest: +SKIP
>>> VirtualMachine(exe).run({"x": x})               # doctest: +SKIP
"""

from __future__ import annotations

import contextlib
import logging
from typing import Callable, ContextManager

from .ir.module import IRModule
from .ir.well_formed import check_well_formed
from .packager.codegen import codegen
from .passes import PassContext, Sequential
from .passes.legalize import legalize
from .passes.lower_fused import lower_fused_functions
from .passes.optimize import optimize_pipeline
from .passes.reorder_bindings import reorder_bindings
from .runtime.executable import Executable

log = logging.getLogger(__name__)


def lower_pipeline() -> Sequential:
    """Graph ops to kernel calls, then the order of lowest peak memory (ReorderBindings
    runs last: fusion and legalization move bindings, and the planner works on this order)."""
    return Sequential([lower_fused_functions, legalize, reorder_bindings], name="Lower")


def build(mod: IRModule, opt_level: int = 2, check: bool = True, pools: dict[str, int] | None = None,
          plan_memory: bool = True, stage: Callable[[str], ContextManager] | None = None) -> Executable:
    """Compile ``mod`` for the :class:`~relaxpack.runtime.VirtualMachine`.

    ``check`` runs the well-formedness checker on the input and after each
    pass. ``plan_memory`` puts intermediates in arenas; ``pools`` bounds
    memory pools in bytes (``{"fast": 256 * 1024}``): intermediates are first
    offered to the first pool named and spill to the default pool.
    ``stage(name)``, when given, is entered around each stage ("optimize",
    "lower", "codegen + plan"): the command line times and shows them.
    """
    stage = stage or (lambda name: contextlib.nullcontext())
    if check:
        check_well_formed(mod)
    ctx = PassContext.current()
    with PassContext(opt_level=opt_level, instruments=ctx.instruments, check_well_formed=check,
                     disabled_passes=ctx.disabled_passes, config=ctx.config):
        with stage("optimize"):
            optimized = optimize_pipeline(opt_level)(mod)
        with stage("lower"):
            lowered = lower_pipeline()(optimized)
    with stage("codegen + plan"):
        exe = codegen(lowered, plan_memory=plan_memory, pools=pools)
    exe.metadata["ir"] = lowered.script(show_meta=False)
    for key in ("source", "source_sha256"):
        if key in mod.attrs:
            exe.metadata[key] = mod.attrs[key]
    if "model_metadata" in mod.attrs:   # the ONNX model's producer, names, description (get_modelmeta)
        meta = dict(mod.attrs["model_metadata"])
        exe.metadata["model_metadata"] = {**meta, "custom_metadata_map": dict(meta.get("custom_metadata_map", {}))}
    log.debug("built %d functions, %d kernel calls", len(exe.functions), exe.kernel_call_count())
    return exe

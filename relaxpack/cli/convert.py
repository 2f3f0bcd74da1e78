"""``relaxpack convert``: ONNX model -> deployment archive."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

import typer

from ..errors import InputError
from .terminal import one_line
from .common import (
    PLUGIN_HELP, app, echo, existing_file, fmt_bytes, load_plugins, parse_dims, parse_pools, user_errors,
)


def check_pass_names(names: list[str], option: str) -> None:
    """Every name is a pass that ``build`` runs (at -O2, or in lowering); else an InputError listing them."""
    from ..passes import Sequential
    from ..passes.optimize import optimize_pipeline
    from ..vm_build import lower_pipeline
    known, stack = set(), [optimize_pipeline(2), lower_pipeline()]
    while stack:
        p = stack.pop()
        if isinstance(p, Sequential):
            stack.extend(p.passes)
        else:
            known.add(p.info.name)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"{option} {unknown[0]}: no such pass; the passes are {', '.join(sorted(known))}")


@app.command()
def convert(
    model: Path = typer.Argument(..., help="The ONNX model."),
    output: Path = typer.Option(None, "-o", "--output", help="The archive to write (default: MODEL.rpk)."),
    dim: list[str] = typer.Option(None, "--dim", help="Bind or bound a dim: NAME=VALUE or NAME=LO..HI."),
    opt_level: int = typer.Option(2, "-O", min=0, max=2, help="Optimization level: -O0, -O1 or -O2."),
    params: str = typer.Option("linked", "--params", help="linked (in the archive) or external (side file)."),
    pool: list[str] = typer.Option(None, "--pool", help="A bounded memory pool, NAME=SIZE (e.g. fast=256KiB)."),
    timing: bool = typer.Option(False, "--timing", help="Print the time of every pass."),
    print_after: list[str] = typer.Option(None, "--print-after", help="Print the IR after this pass."),
    dump_ir: Path = typer.Option(None, "--dump-ir", help="Write the IR after every pass to this folder."),
    plugin: list[str] = typer.Option(None, "--plugin", help=PLUGIN_HELP),
):
    """Convert an ONNX model into a self-contained archive."""
    from ..importers.onnx import from_onnx
    from ..passes import DumpIR, PassContext, PassTiming, PrintAfter
    from ..runtime.assumptions import assumptions_of
    from ..runtime.safe_write import check_destination
    from ..vm_build import build

    with user_errors():
        load_plugins(plugin)
        if params not in ("linked", "external"):
            raise typer.BadParameter("--params must be linked or external")
        existing_file(model, "model")
        output = output or model.with_suffix(".rpk")
        check_destination(output, [model])
        dims = parse_dims(dim)
        timer = PassTiming()
        instruments = [timer]
        if print_after:
            check_pass_names(print_after, "--print-after")
            instruments.append(PrintAfter(print_after, sink=lambda name, text: echo(f"# after {name}\n{text}")))
        if dump_ir:
            instruments.append(DumpIR(dump_ir))
        stages = {}
        t0 = time.perf_counter()
        mod = from_onnx(model, dims=dims)
        stages["import"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        with PassContext(opt_level=opt_level, instruments=instruments):
            exe = build(mod, opt_level=opt_level, pools=parse_pools(pool) or None)
        stages["optimize + lower"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        exe.save(output, params=params, sources=[model])
        stages["package"] = time.perf_counter() - t0
    ops = Counter(b.value.op.name for block in mod["main"].body.blocks for b in block.bindings
                  if hasattr(b.value, "op") and hasattr(b.value.op, "name"))
    n_params = sum(int(c.size) for c in exe.constants)
    echo(f"wrote {output} ({fmt_bytes(output.stat().st_size)})")
    echo(f"  signature     {one_line(exe.signature())}")
    echo(f"  ops           {sum(ops.values())} ({len(ops)} kinds) -> {exe.kernel_call_count()} kernel calls")
    echo(f"  parameters    {n_params:,} in {len(exe.constants)} constants "
         f"({fmt_bytes(sum(c.nbytes for c in exe.constants))})")
    plan = exe.metadata.get("memory_plan")
    if plan and plan.get("arena_bytes") is not None:
        pools_text = ", ".join(f"{k} {fmt_bytes(v)}" for k, v in sorted(plan.get("pool_bytes", {}).items()))
        echo(f"  arena         {fmt_bytes(plan['arena_bytes'])} at the dims' bounds (lower bound "
             f"{fmt_bytes(plan['lower_bound_bytes'])}, naive {fmt_bytes(plan['naive_bytes'])}; {pools_text})")
    elif plan:
        echo(f"  arena         {plan['buffers']} buffers, planned per input shape at run time "
             f"(give every dim an upper bound with --dim to see the plan's size)")
    assumed = assumptions_of(exe)
    if assumed:
        conditions = list(dict.fromkeys(a["condition"] for a in assumed))
        shown = "; ".join(conditions[:3]) + (f"; and {len(conditions) - 3} more" if len(conditions) > 3 else "")
        echo(f"  assumes       {shown} (checked at run time; relaxpack inspect lists where)")
    echo("  time          " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in stages.items()))
    if timing:
        echo(timer.render())

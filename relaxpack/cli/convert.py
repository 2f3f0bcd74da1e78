"""``relaxpack convert``: ONNX model -> deployment archive."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ..errors import InputError
from .common import (
    PLUGIN_HELP, add_build_options, command, echo, existing_file, fmt_bytes, load_plugins, parse_dims, parse_pools,
    require_extra, user_errors,
)
from .progress import Progress, Stages
from .terminal import one_line


@command
def _parser(sub):
    p = sub.add_parser("convert", help="Convert an ONNX model into a self-contained archive.",
                       description="Convert an ONNX model into a self-contained archive.")
    p.add_argument("model", type=Path, help="The ONNX model.")
    p.add_argument("-o", "--output", type=Path, help="The archive to write (default: MODEL.rpk).")
    p.add_argument("--dim", action="append", metavar="SPEC", help="Bind or bound a dim: NAME=VALUE or NAME=LO..HI.")
    add_build_options(p)
    p.add_argument("--params", choices=("linked", "external"), default="linked",
                   help="linked (in the archive, the default) or external (side file).")
    p.add_argument("--constants", choices=("mapped", "compact"), default="mapped",
                   help="mapped (the default: stored as they are, read from the file's mapping, shared "
                        "between processes) or compact (each in the narrowest dtype that holds it "
                        "exactly: a quantized or float16 model's archive 2-4x smaller; loading widens "
                        "them into each process's private memory).")
    p.add_argument("--timing", action="store_true", help="Print the time of every pass.")
    p.add_argument("--print-after", action="append", metavar="PASS", help="Print the IR after this pass.")
    p.add_argument("--dump-ir", type=Path, metavar="FOLDER", help="Write the IR after every pass to this folder.")
    p.add_argument("--plugin", action="append", help=PLUGIN_HELP)
    p.set_defaults(handler=convert)


def check_pass_names(names: list[str], option: str) -> None:
    """Every name is a pass that ``build`` runs (at -O2, or in lowering); else an InputError listing them."""
    from ..passes import Sequential
    from ..passes.pipeline import lower_pipeline, optimize_pipeline
    known, stack = set(), [optimize_pipeline(), lower_pipeline()]
    while stack:
        p = stack.pop()
        if isinstance(p, Sequential):
            stack.extend(p.passes)
        else:
            known.add(p.info.name)
    unknown = [n for n in names if n not in known]
    if unknown:
        raise InputError(f"{option} {unknown[0]}: no such pass; the passes are {', '.join(sorted(known))}")


def _pass_status(stages: Stages):
    """A pass instrument that shows the stage and the pass running on the progress line."""
    from ..passes import PassInstrument

    class PassStatus(PassInstrument):
        def run_before_pass(self, mod, info):
            stages.progress.status(f"{stages.current}: {info.name} ...")

    return PassStatus()


def convert(model: Path, output: Path | None = None, dim: list[str] | None = None, opt_level: int = 2,
            params: str = "linked", pool: list[str] | None = None, timing: bool = False, constants: str = "mapped",
            print_after: list[str] | None = None, dump_ir: Path | None = None, plugin: list[str] | None = None):
    """Convert an ONNX model into a self-contained archive."""
    from ..runtime.assumptions import assumptions_of

    with user_errors():
        require_extra("relaxpack convert")
        from ..importers.onnx import from_onnx
        from ..passes import DumpIR, PassContext, PassTiming, PrintAfter
        from ..runtime.safe_write import check_destination
        from ..vm_build import build

        load_plugins(plugin)
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
        with Progress() as progress:
            stages = Stages(progress)
            instruments.append(_pass_status(stages))
            with stages("import"):
                mod = from_onnx(model, dims=dims)
            with PassContext(opt_level=opt_level, instruments=instruments):
                exe = build(mod, opt_level=opt_level, pools=parse_pools(pool) or None, stage=stages)
            with stages("package"):
                exe.save(output, params=params, sources=[model], constants=constants)
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
        shown = one_line("; ".join(conditions[:3])) + (f"; and {len(conditions) - 3} more" if len(conditions) > 3 else "")
        echo(f"  assumes       {shown} (checked at run time; relaxpack inspect lists where)")
    echo("  time          " + ", ".join(f"{k} {v * 1e3:.0f} ms" for k, v in stages.seconds.items()))
    if timing:
        echo(timer.render())

"""``relaxpack inspect``: what an archive holds."""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import InputError
from .common import command, echo, existing_file, fmt_bytes, parse_dims, user_errors
from .files import archive_files
from .terminal import one_line


def archive_facts(exe, archive: Path) -> dict:
    from ..runtime.assumptions import assumptions_of

    main = exe.function("main")
    plan = exe.metadata.get("memory_plan") or {}
    return {
        "format_version": (exe.archive or {}).get("format_version"),
        "inputs": [{"name": p.name, "dtype": p.dtype, "shape": None if p.shape is None else list(p.shape)}
                   for p in main.params],
        "outputs": [{"name": r.name, "dtype": r.dtype, "shape": None if r.shape is None else list(r.shape)}
                    for r in main.output_info()],
        "dim_ranges": {name: [lo, hi] for name, lo, hi in main.dim_ranges},
        # what the model was converted assuming of its dims, checked at run time
        "assumptions": assumptions_of(exe),
        "kernel_calls": exe.kernel_call_count(),
        "kernels": exe.kernel_names,
        # registered functions the deploying process must provide (register_func)
        "functions": sorted({f.name for f in exe.func_table if f.kind == "func"}),
        "constants": len(exe.constants),
        "constant_bytes": int(sum(c.nbytes for c in exe.constants)),
        # constants a compact archive stores in a narrower dtype (widened at load)
        "constants_stored_narrower": (exe.archive or {}).get("stored_narrower", 0),
        "arena_bytes": plan.get("arena_bytes"),
        "lower_bound_bytes": plan.get("lower_bound_bytes"),
        "naive_bytes": plan.get("naive_bytes"),
        "workspaces": plan.get("workspaces", 0),
        "workspace_bytes": plan.get("workspace_bytes"),
        "largest_workspace_bytes": plan.get("largest_workspace_bytes"),
        "archive_bytes": archive.stat().st_size,
    }


def assumption_lines(assumptions: list[dict]) -> list[str]:
    """``assumes      height % 8 < 4  (2 * (height // 8) == height // 4, node up/Concat)`` per
    relation; one that only a run can check (over dims known then) says when it is checked."""
    lines = []
    for i, a in enumerate(assumptions):
        equality = f"{a['lhs']} == {a['rhs']}"
        detail = equality if a["condition"] != equality else ""
        where = f"node {a['node']}" + ("" if a["when"] == "inputs" else ", checked where it runs")
        if a["function"] != "main":
            where += f", in {a['function']}"
        head = "assumes      " if i == 0 else "             "
        lines.append(head + one_line(f"{a['condition']}  ({', '.join(p for p in (detail, where) if p)})"))
    return lines


@command
def _parser(sub):
    p = sub.add_parser("inspect", help="Show an archive's signature, IR, bytecode and memory plan.",
                       description="Show an archive's signature, IR, bytecode and memory plan.")
    p.add_argument("archive", type=Path, help="The archive (.rpk).")
    p.add_argument("--ir", action="store_true", help="Print the lowered IR.")
    p.add_argument("--bytecode", action="store_true", help="Print the bytecode.")
    p.add_argument("--plan", action="store_true", help="Print the memory plan.")
    p.add_argument("--plot", type=Path, metavar="FILE.svg", help="Draw the memory plan as an SVG picture to this file.")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="With --plot: dim values to plan at (NAME=VALUE); default: their upper bounds.")
    p.add_argument("--json", dest="as_json", action="store_true", help="Print machine-readable facts.")
    p.set_defaults(handler=inspect_)


def inspect_(archive: Path, ir: bool = False, bytecode: bool = False, plan: bool = False, plot: Path | None = None,
             dim: list[str] | None = None, as_json: bool = False):
    """Show an archive's signature, IR, bytecode and memory plan."""
    from ..runtime import load

    with user_errors():
        if dim and plot is None:
            raise InputError("--dim chooses the dims to plot the plan at: it needs --plot FILE.svg")
        exe = load(existing_file(archive, "archive"), check_functions=False)
        facts = archive_facts(exe, archive)
        layout = None
        if plot is not None:
            from ..packager.plan_plot import plot_plan
            from ..runtime.safe_write import check_destination
            check_destination(plot, archive_files(archive, exe))
            dims = parse_dims(dim)
            if any(not isinstance(v, int) for v in dims.values()):
                raise InputError("--dim with --plot takes values (NAME=VALUE), not ranges")
            layout = plot_plan(exe, plot, shape_env=dims or None)
    if as_json:
        echo(json.dumps(facts, indent=2, sort_keys=True))
        return
    echo(f"archive      {archive} ({fmt_bytes(facts['archive_bytes'])}, format {facts['format_version']})")
    echo(f"signature    {one_line(exe.signature())}")
    if facts["dim_ranges"]:
        echo("dims         " + ", ".join(f"{one_line(k)} in {lo}..{'' if hi is None else hi}"
                                          for k, (lo, hi) in facts["dim_ranges"].items()))
    for line in assumption_lines(facts["assumptions"]):
        echo(line)
    echo(f"kernels      {facts['kernel_calls']} calls of {len(facts['kernels'])} kernels")
    if facts["functions"]:
        echo(f"functions    {one_line(', '.join(facts['functions']))} (register them with relaxpack.runtime.register_func)")
    narrower = facts["constants_stored_narrower"]
    echo(f"constants    {facts['constants']} ({fmt_bytes(facts['constant_bytes'])}"
         + (f"; {narrower} stored narrower, widened at load)" if narrower else ")"))
    if facts["arena_bytes"] is not None:
        echo(f"arena        {fmt_bytes(facts['arena_bytes'])} (lower bound {fmt_bytes(facts['lower_bound_bytes'])}, "
             f"naive {fmt_bytes(facts['naive_bytes'])})")
    if facts["workspace_bytes"]:
        echo(f"workspace    {facts['workspaces']} kernel workspaces, largest "
             f"{fmt_bytes(facts['largest_workspace_bytes'])} (all {fmt_bytes(facts['workspace_bytes'])}; in the arena)")
    if ir:
        text = exe.metadata.get("ir")
        echo(text if text else "# this archive carries no IR text")
    if bytecode:
        echo(exe.as_text())
    if plan:
        echo(json.dumps(exe.metadata.get("memory_plan") or "no memory plan in this archive", indent=2))
    if layout is not None:
        f = layout.figures
        echo(f"wrote {plot}: {f['buffers']} buffers, arena {fmt_bytes(f['arena_bytes'])}, "
             f"lower bound {fmt_bytes(f['lower_bound_bytes'])}")

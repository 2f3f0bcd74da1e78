"""``relaxpack check``: relaxpack against onnxruntime on the same inputs."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import InputError
from .common import PLUGIN_HELP, app, echo, existing_file, load_plugins, parse_dims, user_errors
from .run import load_inputs
from .terminal import one_line


@app.command()
def check(
    model: Path = typer.Argument(..., help="The ONNX model."),
    dim: list[str] = typer.Option(None, "--dim", help="Bind or bound a dim: NAME=VALUE or NAME=LO..HI."),
    samples: int = typer.Option(3, "--samples", min=1, help="Random input sets to try."),
    seed: int = typer.Option(0, "--seed", help="Seed of the random inputs and dims."),
    rtol: float = typer.Option(1e-4, "--rtol"),
    atol: float = typer.Option(1e-5, "--atol"),
    inputs: Path = typer.Option(None, "--inputs", help="Use these inputs (.npz) instead of random ones."),
    per_node: bool = typer.Option(False, "--per-node", help="On a mismatch, name the first ONNX node that diverges."),
    strict: bool = typer.Option(False, "--strict", help="Fail also where onnxruntime, not relaxpack, differs from "
                                                        "onnx's reference evaluator (the exact result)."),
    plugin: list[str] = typer.Option(None, "--plugin", help=PLUGIN_HELP),
):
    """Compare relaxpack with onnxruntime on the same inputs (exit 1 on a mismatch).

    Inputs are random (seeded, dynamic dims drawn from their ranges) or given.
    Where the two disagree and relaxpack computes what onnx's reference
    evaluator computes (e.g. integer GEMMs that onnxruntime saturates on CPUs
    without VNNI), the output passes with a note unless --strict.
    """
    from ..check import check_model, first_divergence

    with user_errors():
        load_plugins(plugin)
        existing_file(model, "model")
        if not (rtol >= 0 and atol >= 0):    # NaN too
            raise InputError(f"--rtol {rtol} and --atol {atol} must be non-negative numbers")
        dims = parse_dims(dim)
        feeds = load_inputs(None, inputs) if inputs is not None else None
        report = check_model(model, dims=dims, samples=samples, seed=seed, rtol=rtol, atol=atol, inputs=feeds,
                              strict=strict)
        divergence = None
        if per_node and not report.passed:
            failing = next(s for s in report.samples if not s.passed)
            divergence = first_divergence(model, failing.feeds, dims=dims, rtol=rtol, atol=atol)
    for i, sample in enumerate(report.samples):
        dims_text = ", ".join(f"{one_line(k)}={v}" for k, v in sample.dims.items()) or "given inputs"
        echo(f"sample {i} ({dims_text})")
        for out in sample.outputs:
            verdict = "PASS" if out.passed else "FAIL"
            note = f"  {out.note}" if out.note else ""
            echo(f"  {one_line(out.name):24s} {str(list(out.shape)):16s} max abs {out.max_abs:.3e}  "
                 f"max rel {out.max_rel:.3e}  {verdict}{note}")
    if divergence is not None:
        d = divergence.diff
        echo(f"first divergence: {one_line(divergence.op_type)} node {divergence.node!r}, output {divergence.output!r} "
             f"(max abs {d.max_abs:.3e}{', ' + d.note if d.note else ''})")
    echo("PASS" if report.passed else "FAIL")
    if not report.passed:
        raise typer.Exit(1)

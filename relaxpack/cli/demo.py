"""``relaxpack demo``, ``relaxpack ir`` and ``relaxpack version``."""

from __future__ import annotations

from pathlib import Path

import typer

from ..errors import ParseError
from .common import app, echo, user_errors


@app.command()
def demo(show_ir: bool = typer.Option(False, "--ir", help="Print the imported IR too.")):
    """Convert, run and check the bundled example against onnxruntime.

    The example is an ONNX transformer block with symbolic batch and seq: it is
    imported, compiled, run at several sizes, and every output is compared with
    onnxruntime's.
    """
    import time

    from ..check import check_model
    from ..examples.onnx_models import transformer_block_onnx
    from ..importers.onnx import from_onnx
    from ..ir.equality import structural_equal
    from ..ir.parser import parse
    from ..ir.well_formed import check_well_formed
    from ..vm_build import build

    with user_errors():
        model = transformer_block_onnx()
        t0 = time.perf_counter()
        mod = from_onnx(model, dims={"seq": (1, 128)})
        t1 = time.perf_counter()
        exe = build(mod)
        t2 = time.perf_counter()
        check_well_formed(mod)
        round_trip = structural_equal(parse(mod.script()), mod)
        report = check_model(model, dims={"seq": (1, 128)}, samples=3, seed=0)
    if show_ir:
        typer.echo(mod.script(show_meta=False))
    typer.echo(f"model      transformer block, {len(model.graph.node)} ONNX nodes, inputs {exe.signature()}")
    typer.echo(f"import     {(t1 - t0) * 1e3:.1f} ms; IR well formed; text round trip: "
               f"{'yes' if round_trip else 'NO'}")
    typer.echo(f"build      {(t2 - t1) * 1e3:.1f} ms; {exe.kernel_call_count()} kernel calls, "
               f"{len(exe.constants)} constants")
    for sample in report.samples:
        dims = ", ".join(f"{k}={v}" for k, v in sample.dims.items())
        for out in sample.outputs:
            verdict = "PASS" if out.passed else "FAIL"
            typer.echo(f"check      {dims}: {out.name}{list(out.shape)} max abs err {out.max_abs:.2e} "
                       f"vs onnxruntime  {verdict}")
    if not (report.passed and round_trip):
        raise typer.Exit(1)


@app.command("ir")
def ir_command(
    path: Path = typer.Argument(..., help="A module in the text format (as printed by mod.script())."),
    check: bool = typer.Option(True, help="Run the well-formedness checker."),
    show_meta: bool = typer.Option(False, help="Print the data of large constants too."),
):
    """Read a module in the text format, check it, and print it normalized."""
    from ..ir.parser import parse
    from ..ir.well_formed import check_well_formed

    with user_errors():
        data = path.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as err:
            raise ParseError(f"{path} is not UTF-8 text (byte {data[err.start]:#04x} at offset {err.start}): "
                             f"give the text form printed by mod.script()") from None
        mod = parse(text)
        if check:
            check_well_formed(mod)
        script = mod.script(show_meta=show_meta)
    echo(script)


@app.command()
def version():
    """Print relaxpack's version."""
    from .. import __version__
    typer.echo(__version__)

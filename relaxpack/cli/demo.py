"""``relaxpack demo``, ``relaxpack ir`` and ``relaxpack version``."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import Exit, command, echo, require_extra, user_errors


@command
def _parsers(sub):
    p = sub.add_parser("demo", help="Convert, run and check the bundled example against onnxruntime.",
                       description="Convert, run and check the bundled example against onnxruntime. The example is "
                                   "an ONNX transformer block with symbolic batch and seq: it is imported, compiled, "
                                   "run at several sizes, and every output is compared with onnxruntime's.")
    p.add_argument("--ir", dest="show_ir", action="store_true", help="Print the imported IR too.")
    p.set_defaults(handler=demo)
    p = sub.add_parser("ir", help="Read a module in the text format, check it, and print it normalized.",
                       description="Read a module in the text format, check it, and print it normalized.")
    p.add_argument("path", type=Path, help="A module in the text format (as printed by mod.script()).")
    p.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                   help="Run the well-formedness checker (default: --check).")
    p.add_argument("--show-meta", action=argparse.BooleanOptionalAction, default=False,
                   help="Print the data of large constants too (default: --no-show-meta).")
    p.set_defaults(handler=ir_command)
    p = sub.add_parser("version", help="Print relaxpack's version.", description="Print relaxpack's version.")
    p.set_defaults(handler=version)


def demo(show_ir: bool = False):
    """Convert, run and check the bundled example against onnxruntime.

    The example is an ONNX transformer block with symbolic batch and seq: it is
    imported, compiled, run at several sizes, and every output is compared with
    onnxruntime's.
    """
    import time

    with user_errors():
        require_extra("relaxpack demo")
        from ..check import check_model
        from ..examples.onnx_models import transformer_block_onnx
        from ..importers.onnx import from_onnx
        from ..ir.equality import structural_equal
        from ..ir.parser import parse
        from ..ir.well_formed import check_well_formed
        from ..vm_build import build

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
        echo(mod.script(show_meta=False))
    echo(f"model      transformer block, {len(model.graph.node)} ONNX nodes, inputs {exe.signature()}")
    echo(f"import     {(t1 - t0) * 1e3:.1f} ms; IR well formed; text round trip: "
               f"{'yes' if round_trip else 'NO'}")
    echo(f"build      {(t2 - t1) * 1e3:.1f} ms; {exe.kernel_call_count()} kernel calls, "
               f"{len(exe.constants)} constants")
    for sample in report.samples:
        dims = ", ".join(f"{k}={v}" for k, v in sample.dims.items())
        for out in sample.outputs:
            verdict = "PASS" if out.passed else "FAIL"
            echo(f"check      {dims}: {out.name}{list(out.shape)} max abs err {out.max_abs:.2e} "
                       f"vs onnxruntime  {verdict}")
    if not (report.passed and round_trip):
        raise Exit(1)


def ir_command(path: Path, check: bool = True, show_meta: bool = False):
    """Read a module in the text format, check it, and print it normalized."""
    from ..ir.parser import parse
    from ..ir.well_formed import check_well_formed

    with user_errors():
        mod = parse(path.read_text())
        if check:
            check_well_formed(mod)
        echo(mod.script(show_meta=show_meta))


def version():
    """Print relaxpack's version."""
    from .. import __version__
    echo(__version__)

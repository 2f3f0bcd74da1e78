"""``relaxpack demo``, ``relaxpack ir`` and ``relaxpack version``."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from .common import Exit, command, echo, existing_file, fmt_bytes, require_extra, user_errors


#: the demo's model: bundled with the package (relaxpack/examples/)
DEMO_MODEL = "transformer_block.onnx"
DEMO_DIMS = {"batch": (1, 8), "seq": (1, 128)}


@command
def _parsers(sub):
    p = sub.add_parser("demo", help="Convert, run and check the bundled example against onnxruntime.",
                       description="Convert the bundled example (an ONNX transformer block with symbolic batch and "
                                   "seq) into an archive, check the IR, run the archive at several sizes against "
                                   "onnxruntime, and show the commands to try next.")
    p.add_argument("-o", "--output-dir", type=Path, default=Path("relaxpack-demo"), metavar="FOLDER",
                   help="Where to write the model and its archive (default: ./relaxpack-demo).")
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


def demo(output_dir: Path = Path("relaxpack-demo"), show_ir: bool = False):
    """Convert the bundled example into an archive, run it against onnxruntime, show what to try next.

    The example is an ONNX transformer block with symbolic batch and seq: it is
    imported, compiled and saved; the saved archive is loaded back and run at
    several sizes, and every output is compared with onnxruntime's.
    """
    import time

    with user_errors():
        require_extra("relaxpack demo")
        from ..check import check_model
        from ..examples.onnx_models import BUNDLED, bundled_path
        from ..importers.onnx import from_onnx
        from ..ir.equality import structural_equal
        from ..ir.parser import parse
        from ..ir.well_formed import check_well_formed
        from ..runtime import load
        from ..runtime.safe_write import write_file
        from ..vm_build import build

        output_dir.mkdir(parents=True, exist_ok=True)
        model_path, archive = output_dir / DEMO_MODEL, output_dir / DEMO_MODEL.replace(".onnx", ".rpk")
        write_file(model_path, [existing_file(bundled_path(DEMO_MODEL), "bundled example").read_bytes()])
        t0 = time.perf_counter()
        mod = from_onnx(model_path, dims=DEMO_DIMS)
        t1 = time.perf_counter()
        exe = build(mod)
        t2 = time.perf_counter()
        exe.save(archive)
        check_well_formed(mod)
        round_trip = structural_equal(parse(mod.script()), mod)
        report = check_model(model_path, samples=3, seed=0, exe=load(archive))     # the archive as saved
        nodes = len(BUNDLED[DEMO_MODEL]().graph.node)
    if show_ir:
        echo(mod.script(show_meta=False))
    echo(f"model      transformer block, {nodes} ONNX nodes: {model_path}")
    echo(f"import     {(t1 - t0) * 1e3:.1f} ms; IR well formed; text round trip: "
         f"{'yes' if round_trip else 'NO'}")
    echo(f"build      {(t2 - t1) * 1e3:.1f} ms; {exe.kernel_call_count()} kernel calls, "
         f"{len(exe.constants)} constants")
    echo(f"archive    {archive} ({fmt_bytes(archive.stat().st_size)}): {exe.signature()}")
    for sample in report.samples:
        dims = ", ".join(f"{k}={v}" for k, v in sample.dims.items())
        for out in sample.outputs:
            verdict = "PASS" if out.passed else "FAIL"
            echo(f"run        {dims}: {out.name}{list(out.shape)} max abs err {out.max_abs:.2e} "
                 f"vs onnxruntime  {verdict}")
    if not (report.passed and round_trip):
        raise Exit(1)
    echo("")
    echo("next, try:")
    for command in next_commands(model_path, archive):
        echo(f"  {command}")


def next_commands(model_path: Path, archive: Path) -> list[str]:
    """The commands a user would type after the demo, on the files it wrote."""
    m, a = shlex.quote(str(model_path)), shlex.quote(str(archive))
    return [f"relaxpack inspect {a}",
            f"relaxpack run {a} --fill random --dim batch=2 --dim seq=16",
            f"relaxpack bench {a} --onnx {m} --dim batch=1 --dim seq=64 --profile",
            f"relaxpack check {m} --archive {a}",
            f"relaxpack inspect {a} --plot plan.svg --dim batch=2 --dim seq=64",
            f"python -c \"from relaxpack.runtime import InferenceSession; "
            f"print(InferenceSession({str(archive)!r}).get_inputs())\""]


def ir_command(path: Path, check: bool = True, show_meta: bool = False):
    """Read a module in the text format, check it, and print it normalized."""
    from ..errors import ParseError
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
        echo(mod.script(show_meta=show_meta))


def version():
    """Print relaxpack's version."""
    from .. import __version__
    echo(__version__)

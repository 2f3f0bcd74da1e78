"""``relaxpack check``: relaxpack against onnxruntime on the same inputs."""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError
from .common import (
    PLUGIN_HELP, Exit, add_build_options, command, echo, existing_file, fmt_bytes, load_plugins, parse_dims, parse_pools,
    positive, require_extra, user_errors,
)
from .progress import Progress
from .run import load_inputs
from .terminal import one_line


@command
def _parser(sub):
    p = sub.add_parser("check", help="Compare relaxpack with onnxruntime on the same inputs.",
                       description="Compare relaxpack with onnxruntime on the same inputs (exit 1 on a mismatch). "
                                   "Inputs are random (seeded, dynamic dims drawn from their ranges) or given. "
                                   "Checks the archive given with --archive, else builds the model as convert "
                                   "does with the same --dim, -O and --pool. By default each output is compared "
                                   "within its dtype's tolerance relative to its largest magnitude (float32: "
                                   "rtol 1e-4, atol 1e-4 x max(0.1, max |value|)); --rtol/--atol set them as given. "
                                   "Where the two still disagree and relaxpack computes what onnx's reference "
                                   "evaluator computes (e.g. integer GEMMs that onnxruntime saturates on CPUs "
                                   "without VNNI), the output passes with a note unless --strict.")
    p.add_argument("model", type=Path, help="The ONNX model.")
    p.add_argument("--archive", type=Path, metavar="MODEL.rpk",
                   help="Check this archive (the one you ship) instead of building the model here.")
    p.add_argument("--dim", action="append", metavar="SPEC", help="Bind or bound a dim: NAME=VALUE or NAME=LO..HI.")
    add_build_options(p)
    p.add_argument("--samples", type=positive, default=3, help="Random input sets to try (default 3).")
    p.add_argument("--seed", type=int, default=0, help="Seed of the random inputs and dims (default 0).")
    p.add_argument("--rtol", type=float, help="Relative tolerance, as given (default: per dtype; with --atol "
                                              "alone, 1e-4).")
    p.add_argument("--atol", type=float, help="Absolute tolerance, as given (default: per dtype, relative to the "
                                              "output's magnitude; with --rtol alone, 1e-5).")
    p.add_argument("--inputs", type=Path, metavar="FILE.npz", help="Use these inputs (.npz) instead of random ones.")
    p.add_argument("--per-node", action="store_true", help="On a mismatch, name the first ONNX node that diverges.")
    p.add_argument("--strict", action="store_true", help="Fail also where onnxruntime, not relaxpack, differs from "
                                                         "onnx's reference evaluator (the exact result).")
    p.add_argument("--threads", type=positive, metavar="N",
                   help="BLAS threads for relaxpack and intra-op threads for onnxruntime (default: as they are).")
    p.add_argument("--plugin", action="append", help=PLUGIN_HELP)
    p.set_defaults(handler=check)


def check(model: Path, archive: Path | None = None, dim: list[str] | None = None, opt_level: int = 2,
          pool: list[str] | None = None, samples: int = 3, seed: int = 0, rtol: float | None = None,
          atol: float | None = None,
          inputs: Path | None = None, per_node: bool = False, strict: bool = False, threads: int | None = None,
          plugin: list[str] | None = None):
    """Compare relaxpack with onnxruntime on the same inputs (exit 1 on a mismatch).

    Inputs are random (seeded, dynamic dims drawn from their ranges) or given.
    Outputs compare within their dtype's tolerance relative to their magnitude,
    or ``rtol``/``atol`` as given. Where the two disagree and relaxpack computes
    what onnx's reference evaluator computes (e.g. integer GEMMs that
    onnxruntime saturates on CPUs without VNNI), the output passes with a note
    unless --strict.
    """
    with user_errors():
        require_extra("relaxpack check")
        from ..check import check_model, first_divergence
        from ..runtime import load

        load_plugins(plugin)
        existing_file(model, "model")
        bad = [f"--{name} {value}" for name, value in (("rtol", rtol), ("atol", atol))
               if value is not None and not value >= 0]     # NaN too; None: the default per dtype
        if bad:
            raise InputError(f"{' and '.join(bad)} must be non-negative numbers")
        dims = parse_dims(dim)
        pools = parse_pools(pool)
        if archive is not None:
            exe = load(existing_file(archive, "archive"))
            if exe.metadata.get("source_sha256") not in (None, _sha256(model)):
                echo(f"note: {archive} was built from a model other than {model} (its sha256 differs)")
            echo(f"checking {archive}: {exe.kernel_call_count()} kernel calls")
        else:
            from ..importers.onnx import from_onnx
            from ..vm_build import build
            exe = build(from_onnx(model, dims=dims), opt_level=opt_level, pools=pools or None)
            pools_text = "".join(f", pool {k} {fmt_bytes(v)}" for k, v in pools.items())
            echo(f"checking {model} built at -O{opt_level}{pools_text}: {exe.kernel_call_count()} kernel calls")
        feeds = load_inputs(None, inputs) if inputs is not None else None
        total = 1 if feeds is not None else samples
        with Progress() as progress:
            progress.status(f"sample 1/{total} ...")

            def finished(i, sample):
                _print_sample(i, sample, "given inputs" if feeds is not None else "random inputs")
                if i + 1 < total:
                    progress.status(f"sample {i + 2}/{total} ...")

            # a model built here has --dim's values and ranges in it already (as check_model's own build)
            report = check_model(model, dims=dims if archive is not None else None, samples=samples, seed=seed, rtol=rtol, atol=atol, inputs=feeds,
                                 exe=exe, threads=threads, on_sample=finished, strict=strict, isolate=True)
            divergence = None
            if per_node and not report.passed:
                progress.status("looking for the first diverging node ...")
                failing = next(s for s in report.samples if not s.passed)
                divergence = first_divergence(model, failing.feeds, dims=dims, rtol=rtol, atol=atol,
                                              opt_level=opt_level, threads=threads)
    if divergence is not None:
        d = divergence.diff
        echo(f"first divergence: {one_line(divergence.op_type)} node {divergence.node!r}, output {divergence.output!r} "
             f"(max abs {d.max_abs:.3e}{', ' + d.note if d.note else ''})")
        if divergence.note:
            echo(f"note: {one_line(divergence.note)}")
    echo("PASS" if report.passed else "FAIL")
    if not report.passed:
        raise Exit(1)


def _print_sample(i: int, sample, inputs: str) -> None:
    """One sample's verdicts, printed as soon as it is checked; ``inputs`` says where they came
    from when no dim was drawn (the inputs given, or random ones of static shapes)."""
    dims_text = ", ".join(f"{one_line(k)}={v}" for k, v in sample.dims.items()) or inputs
    for note in sample.notes:
        echo(f"note: {one_line(note)}")
    echo(f"sample {i} ({dims_text})")
    for out in sample.outputs:
        verdict = "PASS" if out.passed else "FAIL"
        note = f"  {out.note}" if out.note else ""
        echo(f"  {one_line(out.name):24s} {str(list(out.shape)):16s} max abs {out.max_abs:.3e}  "
             f"max rel {out.max_rel:.3e}  {verdict}{note}")


def _sha256(path: Path) -> str:
    import hashlib
    return hashlib.sha256(path.read_bytes()).hexdigest()

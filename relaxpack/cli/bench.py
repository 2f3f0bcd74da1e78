"""``relaxpack bench``: latency percentiles, against onnxruntime in the same run."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import typer

from ..errors import InputError
from .terminal import one_line
from .common import PLUGIN_HELP, app, echo, existing_file, load_plugins, parse_dims, user_errors


def _percentiles(times: list[float]) -> dict[str, float]:
    arr = np.array(times) * 1e3
    return {"p50": float(np.percentile(arr, 50)), "p90": float(np.percentile(arr, 90)),
            "min": float(arr.min())}


def _time(fn, n: int, warmup: int = 2) -> list[float]:
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def _matching_session(model: Path, feeds: dict):
    """An onnxruntime session for ``model``, which must take the archive's inputs; one run checks it."""
    from ..check import onnxruntime_session
    session = onnxruntime_session(model)
    theirs = sorted(i.name for i in session.get_inputs())
    if theirs != sorted(feeds):
        raise InputError(f"{model} takes inputs {theirs}, the archive {sorted(feeds)}: is it the archive's model?")
    try:
        session.run(None, feeds)
    except Exception as err:  # onnxruntime's own errors: one line
        raise InputError(f"onnxruntime cannot run {model} on the archive's inputs: "
                         f"{' '.join(str(err).split())[:300]}") from None
    return session


@app.command()
def bench(
    archive: Path = typer.Argument(..., help="The archive (.rpk)."),
    onnx_model: Path = typer.Option(None, "--onnx", help="Also time onnxruntime on this model."),
    dim: list[str] = typer.Option(None, "--dim", help="Values for symbolic dims: NAME=VALUE, or NAME=LO..HI "
                                                      "to draw one from."),
    n: int = typer.Option(20, "-n", min=1, help="Timed runs (after 2 warm-up runs)."),
    seed: int = typer.Option(0, "--seed"),
    plugin: list[str] = typer.Option(None, "--plugin", help=PLUGIN_HELP),
    profile: bool = typer.Option(False, "--profile", help="Also time each instruction (n runs) and print the "
                                 "time per kernel, slowest first."),
    top: int = typer.Option(25, "--top", min=1, help="Rows of the --profile table."),
):
    """Time an archive (and onnxruntime, interleaved in the same process)."""
    import resource

    from ..check import draw_dims, random_inputs
    from ..runtime import VirtualMachine, load

    with user_errors():
        load_plugins(plugin)
        exe = load(existing_file(archive, "archive"))
        rng = np.random.default_rng(seed)
        feeds = random_inputs(exe, draw_dims(exe, rng, parse_dims(dim)), rng)
        vm = VirtualMachine(exe)
        session = None
        if onnx_model is not None:
            session = _matching_session(existing_file(onnx_model, "model"), feeds)
        ours = _percentiles(_time(lambda: vm.run(feeds), n))
        theirs = None
        if session is not None:
            theirs = _percentiles(_time(lambda: session.run(None, feeds), n))
        report = None
        if profile:
            from ..runtime.profile import profile as profile_run
            report = profile_run(vm, feeds, repeat=n)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    shapes = ", ".join(f"{one_line(k)}{list(v.shape)}" for k, v in feeds.items())
    echo(f"inputs        {shapes}")
    echo(f"relaxpack     p50 {ours['p50']:.3f} ms  p90 {ours['p90']:.3f} ms  min {ours['min']:.3f} ms")
    if theirs is not None:
        echo(f"onnxruntime   p50 {theirs['p50']:.3f} ms  p90 {theirs['p90']:.3f} ms  min {theirs['min']:.3f} ms")
        echo(f"ratio         {ours['p50'] / theirs['p50']:.2f}x onnxruntime (p50)")
    echo(f"peak RSS      {peak:.0f} MiB (this process)")
    if report is not None:
        echo(f"profile       {report.total * 1e3:.3f} ms/run in instructions (timers included), per kernel:")
        echo(report.table(top))

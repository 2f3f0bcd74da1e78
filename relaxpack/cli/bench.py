"""``relaxpack bench``: latency percentiles, against onnxruntime in the same run."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from ..errors import InputError
from .common import (
    NO_MMAP_HELP, PLUGIN_HELP, command, echo, existing_file, load_plugins, parse_dims, positive, require_extra,
    user_errors,
)
from .files import archive_files, input_files
from .progress import Progress
from .terminal import one_line


def _percentiles(times: list[float]) -> dict[str, float]:
    arr = np.array(times) * 1e3
    return {"p50": float(np.percentile(arr, 50)), "p90": float(np.percentile(arr, 90)),
            "min": float(arr.min())}


def _time(fn, n: int, warmup: int = 2, progress: Progress | None = None, who: str = "") -> list[float]:
    """``n`` timed calls of ``fn`` after ``warmup`` untimed ones; each round shows on the progress line."""
    for _ in range(warmup):
        fn()
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
        if progress is not None:
            progress.status(f"{who} round {i + 1}/{n}: {out[-1] * 1e3:.3f} ms")
    return out


def _feeds(exe, input_specs, inputs_file, dims: dict, seed: int, onnx_model: Path | None) -> dict:
    """The inputs to time on: those given (``--input``, ``--inputs``), the rest drawn at random with
    ``seed`` (dims from the given inputs, ``--dim``, else drawn in their ranges). With ``--onnx``,
    integer inputs that index an embedding table (token ids, token type ids) are drawn below its
    rows, as ``relaxpack check`` draws them."""
    from ..feeds import draw_dims_holding, random_inputs
    from ..runtime.input_files import signature_check
    from .run import fill_missing, load_inputs

    if input_specs or inputs_file is not None:
        feeds = load_inputs(input_specs, inputs_file, signature_check(exe))
        drawn = fill_missing(exe, feeds, "random", dims, seed)
    else:
        rng = np.random.default_rng(seed)
        feeds = random_inputs(exe, draw_dims_holding(exe, rng, dims), rng)
        drawn = list(feeds)
    if onnx_model is not None and drawn:
        require_extra("relaxpack bench --onnx")
        from ..check import model_index_bounds, within_bounds
        bounds = model_index_bounds(existing_file(onnx_model, "model"))
        within_bounds(feeds, {k: v for k, v in bounds.items() if k in drawn}, np.random.default_rng(seed))
    return feeds


def _first_run(vm, feeds: dict, drawn: bool, bounded: bool) -> None:
    """One run before the timing. An error on inputs drawn at random (an id past its table, a
    length the model does not accept) says so, and how to give real inputs."""
    from ..errors import ShapeError
    try:
        vm.run(feeds)
    except ShapeError as err:
        if not drawn:
            raise
        hint = "give real inputs with --inputs FILE.npz or --input NAME=FILE.npy"
        if not bounded:
            hint += ", or --onnx MODEL.onnx to draw ids below their embedding tables"
        raise InputError(f"{err} (on random inputs: {hint})") from None


def _matching_session(model: Path, feeds: dict, threads: int | None):
    """An onnxruntime session for ``model``, which must take the archive's inputs; one run checks it."""
    from ..check import onnxruntime_session
    session = onnxruntime_session(model, threads=threads)
    theirs = sorted(i.name for i in session.get_inputs())
    if theirs != sorted(feeds):
        raise InputError(f"{model} takes inputs {theirs}, the archive {sorted(feeds)}: is it the archive's model?")
    try:
        session.run(None, feeds)
    except Exception as err:  # onnxruntime's own errors: one line
        raise InputError(f"onnxruntime cannot run {model} on the archive's inputs: "
                         f"{' '.join(str(err).split())[:300]}") from None
    return session


@command
def _parser(sub):
    p = sub.add_parser("bench", help="Time an archive (and onnxruntime).",
                       description="Time an archive (and onnxruntime, interleaved in the same process).")
    p.add_argument("archive", type=Path, help="The archive (.rpk).")
    p.add_argument("--onnx", dest="onnx_model", type=Path, metavar="MODEL.onnx",
                   help="Also time onnxruntime on this model (needs relaxpack[onnx]).")
    p.add_argument("--input", action="append", metavar="NAME=FILE.npy",
                   help="Time on this input (repeatable); the inputs not given are drawn at random.")
    p.add_argument("--inputs", type=Path, metavar="FILE.npz", help="Time on the inputs in this .npz file.")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="Values for symbolic dims: NAME=VALUE, or NAME=LO..HI to draw one from.")
    p.add_argument("-n", type=positive, default=20, help="Timed runs (after 2 warm-up runs; default 20).")
    p.add_argument("--seed", type=int, default=0, help="Seed of the random inputs and dims (default 0).")
    p.add_argument("--threads", type=positive, metavar="N",
                   help="BLAS threads, and onnxruntime's intra-op threads (default: as they are).")
    p.add_argument("--plugin", action="append", help=PLUGIN_HELP)
    p.add_argument("--profile", action="store_true",
                   help="Also time each instruction (n runs) and print the time per kernel and per ONNX node.")
    p.add_argument("--trace", type=Path, metavar="OUT.json",
                   help="Write the profiled runs as a Chrome trace (onnxruntime's format; open it in Perfetto).")
    p.add_argument("--top", type=positive, default=25, help="Rows of the --profile tables (default 25).")
    p.add_argument("--no-mmap", action="store_true", help=NO_MMAP_HELP)
    p.set_defaults(handler=bench)


def bench(archive: Path, onnx_model: Path | None = None, dim: list[str] | None = None, n: int = 20, seed: int = 0,
          threads: int | None = None, plugin: list[str] | None = None, profile: bool = False,
          trace: Path | None = None, top: int = 25, no_mmap: bool = False, input: list[str] | None = None,
          inputs: Path | None = None):
    """Time an archive (and onnxruntime, interleaved in the same process)."""
    import resource

    from ..runtime import VirtualMachine, load
    from ..runtime.blas import blas_threads

    with user_errors():
        load_plugins(plugin)
        exe = load(existing_file(archive, "archive"), mmap=not no_mmap)
        if trace is not None:
            from ..runtime.safe_write import check_destination
            check_destination(trace, archive_files(archive, exe) + input_files(input, inputs))
        feeds = _feeds(exe, input, inputs, parse_dims(dim), seed, onnx_model)
        vm = VirtualMachine(exe)
        theirs = report = None
        with Progress() as progress, blas_threads(threads):
            _first_run(vm, feeds, drawn=not (input or inputs), bounded=onnx_model is not None)
            ours = _percentiles(_time(lambda: vm.run(feeds), n, progress=progress, who="relaxpack"))
            if onnx_model is not None:
                require_extra("relaxpack bench --onnx")
                session = _matching_session(existing_file(onnx_model, "model"), feeds, threads)
                theirs = _percentiles(_time(lambda: session.run(None, feeds), n, progress=progress,
                                            who="onnxruntime"))
            if profile or trace is not None:
                from ..runtime.profile import profile as profile_run
                progress.status(f"profiling {n} runs ...")
                report = profile_run(vm, feeds, repeat=n, trace=trace is not None)
                if trace is not None:
                    report.write_chrome_trace(trace)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    shapes = ", ".join(f"{one_line(k)}{list(v.shape)}" for k, v in feeds.items())
    echo(f"inputs        {shapes}")
    echo(f"relaxpack     p50 {ours['p50']:.3f} ms  p90 {ours['p90']:.3f} ms  min {ours['min']:.3f} ms")
    if theirs is not None:
        echo(f"onnxruntime   p50 {theirs['p50']:.3f} ms  p90 {theirs['p90']:.3f} ms  min {theirs['min']:.3f} ms")
        echo(f"ratio         {ours['p50'] / theirs['p50']:.2f}x onnxruntime (p50)")
    echo(f"peak RSS      {peak:.0f} MiB (this process)")
    if report is not None and profile:
        echo(f"profile       {report.total * 1e3:.3f} ms/run in instructions (timers included), per kernel:")
        echo(report.table(top))
        echo("per ONNX node (the nodes each instruction came from; its kernels in brackets):")
        echo(report.node_table(top))
    if trace is not None:
        echo(f"wrote {trace} ({len(report.events)} events; open it in Perfetto or chrome://tracing)")

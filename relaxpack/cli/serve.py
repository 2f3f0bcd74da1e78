"""``relaxpack serve``: archives behind the Open Inference Protocol (the ``serve`` extra)."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from .terminal import one_line
from .common import (
    NO_MMAP_HELP, PLUGIN_HELP, UsageError, byte_size, command, echo, existing_file, load_plugins, positive,
    require_extra, seconds, user_errors,
)

SERVE_EXTRA = ("starlette", "uvicorn")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def _number(convert, lo, hi, what: str, unit: str = ""):
    """An argparse type: ``convert(text)`` within ``lo..hi``."""
    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"{value} is not {what} ({lo}..{hi}{unit})")
        return value
    return parse


_port = _number(int, 0, 65535, "a port number", "; 0 picks a free one")
_milliseconds = _number(float, 0, 60_000, "a number of milliseconds", " ms")


@command
def _parser(sub):
    p = sub.add_parser("serve", help="Serve archives over HTTP (Open Inference Protocol, KServe v2 / Triton).",
                       description="Serve archives over HTTP with the Open Inference Protocol (KServe v2, as "
                                   "Triton speaks it: JSON and binary tensor data), e.g. for tritonclient. Each "
                                   "model is named by its file name without .rpk unless --name says otherwise. "
                                   "Needs pip install 'relaxpack[serve]'.")
    p.add_argument("archives", type=Path, nargs="+", metavar="MODEL.rpk", help="The archives to serve.")
    p.add_argument("--host", default="127.0.0.1", help="Address to listen on (default 127.0.0.1).")
    p.add_argument("--port", type=_port, default=8000, help="Port to listen on (default 8000; 0 picks a free one).")
    p.add_argument("--name", action="append", metavar="NAME",
                   help="A model's name, once per archive in their order (default: file name without .rpk).")
    p.add_argument("--max-concurrency", type=positive, default=min(4, os.cpu_count() or 1), metavar="N",
                   help="Executions of a model at once, each on a VM of its own over the one loaded archive "
                        "(default: the cores, at most 4); requests beyond wait.")
    p.add_argument("--batch-max-size", type=positive, metavar="N",
                   help="Dynamic batching: run waiting requests together, up to N rows along the batch dim (for "
                        "models whose inputs and outputs all lead with one symbolic dim; rows must be independent).")
    p.add_argument("--batch-delay-ms", type=_milliseconds, metavar="MS",
                   help="With --batch-max-size: how long a request may wait for others to join it (default 0: "
                        "batches form from what waits while every VM is busy).")
    p.add_argument("--threads", type=positive, metavar="N", help="BLAS threads (default: as they are).")
    p.add_argument("--max-request-size", type=byte_size, default=256 * 1024 ** 2, metavar="SIZE",
                   help="The largest request body accepted, e.g. 64MiB (default 256MiB); larger ones get 413.")
    p.add_argument("--log-level", choices=LOG_LEVELS, default="warning", help="The server's log level.")
    p.add_argument("--access-log", action="store_true", help="Log every request.")
    p.add_argument("--plugin", action="append", help=PLUGIN_HELP)
    p.add_argument("--timeout", type=seconds, default=60.0, metavar="SECONDS",
                   help="Stop a request's run after this many seconds (default 60; checked between instructions).")
    p.add_argument("--max-memory", type=byte_size, metavar="SIZE",
                   help="Refuse a run that would hold more than this in arrays, per model instance (e.g. 4GiB).")
    p.add_argument("--max-steps", type=positive, metavar="N", help="Stop a run after N bytecode instructions.")
    p.add_argument("--no-mmap", action="store_true", help=NO_MMAP_HELP)
    p.set_defaults(handler=serve)


def serve(archives: list[Path], host: str = "127.0.0.1", port: int = 8000, name: list[str] | None = None,
          max_concurrency: int = 1, batch_max_size: int | None = None, batch_delay_ms: float | None = None,
          threads: int | None = None, max_request_size: int = 256 * 1024 ** 2, log_level: str = "warning",
          access_log: bool = False, plugin: list[str] | None = None, timeout: float | None = 60.0,
          max_memory: int | None = None, max_steps: int | None = None, no_mmap: bool = False):
    """Serve archives over HTTP until interrupted."""
    with user_errors():
        require_extra("relaxpack serve", SERVE_EXTRA, "serve")
        if batch_delay_ms is not None and batch_max_size is None:
            raise UsageError("--batch-delay-ms needs --batch-max-size")
        from ..runtime import SessionOptions
        from ..serve.model import Batching
        from ..serve.server import listen, load_models, model_names, run

        load_plugins(plugin)
        for path in archives:
            existing_file(path, "archive")
        names = model_names(archives, name)
        options = SessionOptions()
        options.intra_op_num_threads = threads or 0
        options.timeout, options.max_memory, options.max_steps = timeout, max_memory, max_steps   # run budgets
        options.use_mmap = not no_mmap
        batching = Batching(batch_max_size, batch_delay_ms or 0.0) if batch_max_size else None
        models = load_models(archives, names, max_concurrency=max_concurrency, options=options, batching=batching)
        sock = listen(host, port)
    for model in models.values():
        echo(f"model {model.name}: {model.path}  {one_line(_signature(model))}")
        if model.batcher is not None:
            echo(f"  batching along {model.batch_dim}: up to {model.batcher.max_rows} rows, "
                 f"waiting up to {model.batcher.delay * 1000:g} ms")
        elif model.no_batching_reason:
            echo(f"  not batching: {model.no_batching_reason}")
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    echo(f"listening on http://{shown}:{bound_port} ({max_concurrency} execution(s) at once per model; "
         f"Ctrl-C stops)")
    try:
        run(models, sock, max_request_bytes=max_request_size, log_level=log_level, access_log=access_log)
    except KeyboardInterrupt:   # uvicorn has shut down gracefully and passes Ctrl-C on
        echo("stopped")


def _signature(model) -> str:
    def text(specs):
        return ", ".join(f"{t.name}: {t.datatype}{t.shape}" for t in specs)
    return f"({text(model.signature.inputs)}) -> ({text(model.signature.outputs)})"
